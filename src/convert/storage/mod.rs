//! Disks and volumes (KubeVirt: converter.go `Convert_v1_Disk_To_api_Disk`,
//! `Convert_v1_Volume_To_api_Disk`, device naming, I/O threads, controllers).
//!
//! Each disk of `spec.domain.devices.disks` is matched with its volume; like
//! KubeVirt's defaulting, a volume without a disk gets a virtio disk. The
//! volume decides the source and adds [`DiskPlan`] steps.
//!
//! `volumes` turns each volume into a disk source and [`DiskPlan`] steps,
//! `disks` chooses device, bus, target name and driver, `iothreads` assigns
//! I/O threads.

mod disks;
mod iothreads;
mod volumes;

use std::collections::BTreeSet;

use super::boot_order::{BootOrders, claim_boot_order};

/// Where KubeVirt's qemu-pr-helper listens (pkg/storage/reservation:
/// `/var/run/kubevirt/daemons/pr/pr-helper.sock`), under the share dir.
pub fn pr_helper_socket(ctx: &ConvertContext) -> std::path::PathBuf {
    ctx.share_dir
        .join("daemons")
        .join("pr")
        .join("pr-helper.sock")
}

/// Whether a disk of the VMI asks for SCSI persistent reservations.
pub fn wants_reservations(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .devices
        .disks
        .iter()
        .any(|d| d.lun.as_ref().is_some_and(|l| l.reservation))
}
use super::cpu::Vcpus;
use super::virtio::virtio_model;
use super::{Checked, ConvertContext, ConvertError, Refused, require_libvirt};
use crate::disks::DiskPlan;
use crate::domxml::{self, Address, Alias, BlockIo, BootOrder, DiskTarget, Domain, Flag};
use crate::vmi::{Disk, DiskBus, VirtualMachineInstance};

use disks::{
    DeviceNamer, add_storage_controllers, apply_source, configure_pci_address, device_and_bus,
    driver, readonly,
};
use iothreads::IoThreadPlan;
use volumes::{disk_entries, index_volumes, volume_source};

/// libvirt 9.7.0 added `<blockio discard_granularity=...>`.
pub(crate) const DISCARD_GRANULARITY_SINCE: (u32, u32, u32) = (9, 7, 0);

/// Disk fields that would change the guest but are not implemented.
fn check_unimplemented(
    vmi: &VirtualMachineInstance,
    entry: &DiskEntry,
) -> Result<(), ConvertError> {
    // The tag only reaches the guest in a ConfigDrive's device metadata.
    let config_drive = vmi
        .spec
        .volumes
        .iter()
        .any(|v| v.cloud_init_config_drive.is_some());
    if config_drive && entry.disk.tag.as_deref().is_some_and(|t| !t.is_empty()) {
        return Err(ConvertError::unsupported(
            Refused::ConfigDriveDiskTag,
            format!("{}.tag", entry.path),
            "a disk tag in the ConfigDrive's device metadata",
        ));
    }
    Ok(())
}

/// libvirt 10.10.0 added a disk's `<dataStore>`, which names a qcow2
/// image's data file to libvirt (KubeVirt's CBT overlays use it).
pub(crate) const DATA_STORE_SINCE: (u32, u32, u32) = (10, 10, 0);

/// The qcow2 metadata image that carries a tracked disk's bitmaps, in the
/// private directory.
fn cbt_overlay(ctx: &super::ConvertContext, entry: &DiskEntry) -> std::path::PathBuf {
    ctx.private_dir
        .join("libvirt/qemu/cbt")
        .join(format!("{}.qcow2", entry.disk.name))
}

/// The source of a disk with `changedBlockTracking: true`: one whose
/// image can carry persistent dirty bitmaps, which libvirt's checkpoints
/// are. A qcow2 image carries them itself. A raw image file gets what
/// KubeVirt gives it, a qcow2 metadata image over it (`data-file`, kept in
/// the private directory with its bitmaps); the guest's data stays in the
/// raw file, byte for byte. The metadata image names its data file in its
/// header, which QEMU opens. A block device gets the same metadata image,
/// named to libvirt as its `<dataStore>` (libvirt 10.10.0 and newer), so
/// that libvirt lets QEMU reach the device; an older libvirt refuses it.
fn tracked_source(
    ctx: &super::ConvertContext,
    entry: &DiskEntry,
    device: Device,
    source: Source,
    plan: &mut DiskPlan,
) -> Result<Source, ConvertError> {
    let path = format!("{}.changedBlockTracking", entry.path);
    if device != Device::Disk {
        return Err(ConvertError::new(
            path,
            format!(
                "changed block tracking is for a writable disk, not a {}",
                device.as_str()
            ),
        ));
    }
    match source {
        Source::File {
            path: image,
            format: "raw",
        } => {
            let overlay = cbt_overlay(ctx, entry);
            let what = format!("changed block tracking of disk {:?}", entry.disk.name);
            if let Some(dir) = overlay.parent() {
                plan.make_dir(dir.to_path_buf(), &what);
            }
            plan.push(crate::disks::DiskStep::CreateDataFileOverlay {
                path: overlay.clone(),
                data_file: std::path::PathBuf::from(image),
                what,
            });
            Ok(Source::File {
                path: overlay.to_string_lossy().into_owned(),
                format: "qcow2",
            })
        }
        Source::Block { path: device } => {
            let (major, minor, micro) = DATA_STORE_SINCE;
            if let Some(running) = ctx
                .libvirt_version
                .filter(|v| *v < super::libvirt_version(major, minor, micro))
            {
                return Err(ConvertError::new(
                    path,
                    format!(
                        "changed block tracking of a block device needs libvirt {major}.{minor}.{micro} or newer (a disk's <dataStore>, naming the device under its qcow2 metadata image); this launcher's libvirt is {}.{}.{}",
                        running / 1_000_000,
                        running / 1_000 % 1_000,
                        running % 1_000
                    ),
                ));
            }
            let overlay = cbt_overlay(ctx, entry);
            let what = format!("changed block tracking of disk {:?}", entry.disk.name);
            if let Some(dir) = overlay.parent() {
                plan.make_dir(dir.to_path_buf(), &what);
            }
            plan.push(crate::disks::DiskStep::CreateDataFileOverlay {
                path: overlay.clone(),
                data_file: std::path::PathBuf::from(&device),
                what,
            });
            Ok(Source::TrackedBlock {
                overlay: overlay.to_string_lossy().into_owned(),
                device,
            })
        }
        tracked @ (Source::File { .. } | Source::TrackedBlock { .. }) => Ok(tracked),
        Source::Empty => Err(ConvertError::new(
            path,
            "changed block tracking needs a volume with an image",
        )),
    }
}

/// The downward metrics' disk: a read-only virtio disk (KubeVirt's
/// webhook refuses any other), whose driver is QEMU's raw one with the
/// error policy and nothing else (no discard, queues or I/O thread), as
/// KubeVirt's `convert_v1_DownwardMetricSource_To_api_Disk` replaces it.
fn downward_metrics_disk(
    entry: &DiskEntry,
    device: Device,
    bus: DiskBus,
    disk: &mut domxml::Disk,
) -> Result<(), ConvertError> {
    if device != Device::Disk {
        return Err(ConvertError::new(
            format!("{}.disk", entry.path),
            format!(
                "a downwardMetrics volume must be mapped to a disk, but disk is not set on {}.disk",
                entry.path
            ),
        ));
    }
    if bus != DiskBus::Virtio {
        return Err(ConvertError::new(
            format!("{}.disk.bus", entry.path),
            format!(
                "a downwardMetrics volume must be mapped to the virtio bus, not {}",
                bus.as_str()
            ),
        ));
    }
    disk.readonly = Some(Flag {});
    // KubeVirt's later driver settings (the error policy) still apply.
    let error_policy = disk.driver.take().and_then(|d| d.error_policy);
    disk.driver = Some(domxml::DiskDriver {
        name: Some("qemu".to_string()),
        format: Some("raw".to_string()),
        error_policy,
        ..domxml::DiskDriver::default()
    });
    Ok(())
}

/// `shareable: true` on a disk: `<shareable/>` (KubeVirt sets it on disks
/// only, with cache none; see `driver`). On a cdrom or LUN it is refused
/// rather than dropped.
fn shareable(entry: &DiskEntry, device: Device) -> Result<bool, ConvertError> {
    match (entry.disk.shareable == Some(true), device) {
        (false, _) => Ok(false),
        (true, Device::Disk) => Ok(true),
        (true, other) => Err(ConvertError::checked(
            Checked::ShareableCdromOrLun,
            format!("{}.shareable", entry.path),
            format!("only a disk (not a {}) can be shareable", other.as_str()),
        )),
    }
}

/// How a disk is presented to the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Device {
    Disk,
    Lun,
    Cdrom,
}

impl Device {
    fn as_str(self) -> &'static str {
        match self {
            Device::Disk => "disk",
            Device::Lun => "lun",
            Device::Cdrom => "cdrom",
        }
    }
}

/// A disk with the JSON path errors about it should point at.
struct DiskEntry {
    path: String,
    disk: Disk,
}

/// Where the data of a disk comes from.
enum Source {
    File {
        path: String,
        format: &'static str,
    },
    Block {
        path: String,
    },
    /// A block device under the qcow2 metadata image of changed block
    /// tracking: the image, with the device as its `<dataStore>`.
    TrackedBlock {
        overlay: String,
        device: String,
    },
    /// An empty cdrom drive (a cdrom disk without a volume).
    Empty,
}

/// The kind of `volume`'s source (`persistentVolumeClaim`, ...), if it
/// has one.
pub(crate) fn source_kind(volume: &crate::vmi::Volume) -> Option<&'static str> {
    volumes::source_kinds(volume).first().copied()
}

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    vcpus: Vcpus,
    domain: &mut Domain,
    plan: &mut DiskPlan,
) -> Result<BootOrders, ConvertError> {
    let volumes = index_volumes(&vmi.spec.volumes)?;
    let disks = disk_entries(vmi, &volumes)?;
    let io_threads = IoThreadPlan::new(vmi, &disks)?;
    let virtio_model = virtio_model(vmi);
    // devices.blockMultiQueue: one queue per vCPU on virtio disks.
    let block_queues =
        (vmi.spec.domain.devices.block_multi_queue == Some(true)).then_some(vcpus.enabled);
    let mut namer = DeviceNamer::default();
    let mut boot_orders = BootOrders::new();
    let mut buses = BTreeSet::new();
    for entry in &disks {
        let (device, bus) = device_and_bus(entry)?;
        buses.insert(bus);
        let (dev, index) = namer.next(bus);
        let mut disk = domxml::Disk {
            device: Some(device.as_str().to_string()),
            target: DiskTarget {
                dev,
                bus: Some(bus.as_str().to_string()),
                tray: entry
                    .disk
                    .cdrom
                    .as_ref()
                    .and_then(|c| c.tray)
                    .map(|t| t.as_str().to_string()),
            },
            serial: entry.disk.serial.clone().filter(|s| !s.is_empty()),
            alias: Some(Alias::user(&entry.disk.name)),
            ..domxml::Disk::default()
        };
        if bus == DiskBus::Virtio {
            disk.model = Some(virtio_model.to_string());
        }
        // KubeVirt puts every SCSI disk on controller 0, unit = its sdX index.
        if bus == DiskBus::Scsi {
            disk.address = Some(Address {
                address_type: "drive".to_string(),
                controller: Some("0".to_string()),
                bus: Some("0".to_string()),
                unit: Some(index.to_string()),
                ..Address::default()
            });
        }
        configure_pci_address(entry, bus, &mut disk)?;
        if readonly(entry, device) {
            disk.readonly = Some(Flag {});
        }
        if let Some(order) = entry.disk.boot_order {
            claim_boot_order(
                &mut boot_orders,
                order,
                &format!("{}.bootOrder", entry.path),
                &entry.disk.name,
                "disk",
            )?;
            disk.boot = Some(BootOrder { order });
        }
        check_unimplemented(vmi, entry)?;
        if shareable(entry, device)? {
            disk.shareable = Some(Flag {});
        }
        if let Some(custom) = entry
            .disk
            .block_size
            .as_ref()
            .and_then(|b| b.custom.as_ref())
        {
            if custom.discard_granularity.is_some() {
                require_libvirt(
                    ctx,
                    DISCARD_GRANULARITY_SINCE,
                    (
                        Checked::DiscardGranularity,
                        &format!("{}.blockSize.custom.discardGranularity", entry.path),
                    ),
                    "blockio discard_granularity",
                )?;
            }
            disk.blockio = Some(BlockIo {
                logical_block_size: Some(custom.logical),
                physical_block_size: Some(custom.physical),
                discard_granularity: custom.discard_granularity,
            });
        }
        let source = match volumes.get(entry.disk.name.as_str()) {
            Some(&(index, volume)) => volume_source(vmi, ctx, volume, index, plan, &mut disk)?,
            None if device == Device::Cdrom => Source::Empty,
            None => {
                return Err(ConvertError::new(
                    format!("{}.name", entry.path),
                    format!(
                        "no volume named {:?} in spec.volumes; add one (only a cdrom may be empty)",
                        entry.disk.name
                    ),
                ));
            }
        };
        if device == Device::Lun && !matches!(source, Source::Block { .. }) {
            return Err(ConvertError::new(
                format!("{}.lun", entry.path),
                format!(
                    "a LUN needs a block-mode persistentVolumeClaim or dataVolume; volume {:?} is not one",
                    entry.disk.name
                ),
            ));
        }
        let source = if entry.disk.changed_block_tracking == Some(true) {
            tracked_source(ctx, entry, device, source, plan)?
        } else {
            source
        };
        let thread = io_threads.thread_for(entry);
        disk.driver = Some(driver(entry, device, bus, &source, block_queues, thread)?);
        if volumes
            .get(entry.disk.name.as_str())
            .is_some_and(|(_, v)| v.downward_metrics.is_some())
        {
            downward_metrics_disk(entry, device, bus, &mut disk)?;
        }
        apply_source(source, &mut disk);
        if device == Device::Lun && entry.disk.lun.as_ref().is_some_and(|l| l.reservation) {
            // KubeVirt's setReservation (without migration='yes', which
            // libvirt 9.0's schema does not know).
            if let Some(source) = disk.source.as_mut() {
                source.reservations = Some(domxml::Reservations {
                    managed: Some("no".to_string()),
                    source: Some(domxml::ReservationsSource {
                        source_type: "unix".to_string(),
                        path: pr_helper_socket(ctx).display().to_string(),
                        mode: Some("client".to_string()),
                    }),
                });
            }
        }
        domain.devices.disks.push(disk);
    }
    domain.iothreads = io_threads.count();
    let hotplug = !vmi.spec.domain.devices.disable_hotplug;
    add_storage_controllers(&buses, hotplug, &io_threads, virtio_model, vcpus, domain);
    Ok(boot_orders)
}
