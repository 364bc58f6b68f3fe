//! Disks and volumes (KubeVirt: converter.go `Convert_v1_Disk_To_api_Disk`,
//! `Convert_v1_Volume_To_api_Disk`, device naming, I/O threads, controllers).
//!
//! Each disk of `spec.domain.devices.disks` is matched with its volume; like
//! KubeVirt's defaulting, a volume without a disk gets a virtio disk. The
//! volume decides the source and adds [`DiskPlan`] steps.

use std::collections::{BTreeMap, BTreeSet};

use super::cloudinit::{self, DataSource};
use super::cpu::Vcpus;
use super::network::parse_pci_address;
use super::{ConvertContext, ConvertError, paths};
use crate::disks::{DiskPlan, DiskStep, IsoContents, PathKind};
use crate::domxml::{
    self, Address, Alias, BackingStore, BlockIo, BootOrder, Controller, ControllerDriver,
    DiskDriver, DiskSource, DiskTarget, Domain, Flag, FormatType,
};
use crate::vmi::{
    Disk, DiskBus, DiskCache, DiskIo, HostDiskType, IoThreadsPolicy, Quantity,
    VirtualMachineInstance, Volume,
};

/// Boot order → the device that claimed it, shared with the interfaces step.
pub(crate) type BootOrders = BTreeMap<u32, String>;

const MIB: u64 = 1 << 20;

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
    /// An empty cdrom drive (a cdrom disk without a volume).
    Empty,
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
        if let Some(custom) = entry
            .disk
            .block_size
            .as_ref()
            .and_then(|b| b.custom.as_ref())
        {
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
        let thread = io_threads.thread_for(entry);
        disk.driver = Some(driver(entry, device, bus, &source, block_queues, thread)?);
        apply_source(source, &mut disk);
        domain.devices.disks.push(disk);
    }
    domain.iothreads = io_threads.count();
    add_storage_controllers(&buses, &io_threads, virtio_model, vcpus, domain);
    Ok(boot_orders)
}

/// "virtio-transitional" for old guests that need virtio 0.9, else
/// "virtio-non-transitional" (KubeVirt: converter/virtio).
pub(crate) fn virtio_model(vmi: &VirtualMachineInstance) -> &'static str {
    if vmi.spec.domain.devices.use_virtio_transitional == Some(true) {
        "virtio-transitional"
    } else {
        "virtio-non-transitional"
    }
}

/// Records `order` for `device`, refusing a second device with the same order.
pub(crate) fn claim_boot_order(
    boot_orders: &mut BootOrders,
    order: u32,
    path: &str,
    name: &str,
    kind: &str,
) -> Result<(), ConvertError> {
    if order == 0 {
        return Err(ConvertError::new(path, "boot order must be 1 or more"));
    }
    if let Some(owner) = boot_orders.get(&order) {
        return Err(ConvertError::new(
            path,
            format!("boot order {order} is already used by {owner}"),
        ));
    }
    boot_orders.insert(order, format!("{kind} {name:?}"));
    Ok(())
}

/// Volume name → (index in spec.volumes, volume), after checking names and
/// that each volume has exactly one source.
fn index_volumes(volumes: &[Volume]) -> Result<BTreeMap<&str, (usize, &Volume)>, ConvertError> {
    let mut index = BTreeMap::new();
    for (i, volume) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        if !paths::is_dns_label(&volume.name) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid volume name (lowercase letters, digits and '-', at most 63)",
                    volume.name
                ),
            ));
        }
        let sources = source_kinds(volume);
        if sources.len() != 1 {
            let found = if sources.is_empty() {
                "none".to_string()
            } else {
                sources.join(", ")
            };
            return Err(ConvertError::new(
                path,
                format!("a volume needs exactly one source (found: {found})"),
            ));
        }
        if index.insert(volume.name.as_str(), (i, volume)).is_some() {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("volume {:?} is defined twice", volume.name),
            ));
        }
    }
    let singletons = [
        (
            "cloud-init volume",
            ["cloudInitNoCloud", "cloudInitConfigDrive"].as_slice(),
        ),
        ("serviceAccount volume", ["serviceAccount"].as_slice()),
    ];
    for (what, kinds) in singletons {
        let mut matching = volumes.iter().enumerate().filter(|(_, v)| {
            source_kinds(v)
                .first()
                .is_some_and(|kind| kinds.contains(kind))
        });
        if let (Some(_), Some((second, _))) = (matching.next(), matching.next()) {
            return Err(ConvertError::new(
                format!("spec.volumes[{second}]"),
                format!("only one {what} is allowed"),
            ));
        }
    }
    Ok(index)
}

fn source_kinds(volume: &Volume) -> Vec<&'static str> {
    let present = [
        ("containerDisk", volume.container_disk.is_some()),
        ("hostDisk", volume.host_disk.is_some()),
        (
            "persistentVolumeClaim",
            volume.persistent_volume_claim.is_some(),
        ),
        ("dataVolume", volume.data_volume.is_some()),
        ("ephemeral", volume.ephemeral.is_some()),
        ("emptyDisk", volume.empty_disk.is_some()),
        ("cloudInitNoCloud", volume.cloud_init_no_cloud.is_some()),
        (
            "cloudInitConfigDrive",
            volume.cloud_init_config_drive.is_some(),
        ),
        ("configMap", volume.config_map.is_some()),
        ("secret", volume.secret.is_some()),
        ("downwardAPI", volume.downward_api.is_some()),
        ("serviceAccount", volume.service_account.is_some()),
    ];
    present
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
}

/// The VMI's disks plus a default disk for each volume that has none.
fn disk_entries(
    vmi: &VirtualMachineInstance,
    volumes: &BTreeMap<&str, (usize, &Volume)>,
) -> Result<Vec<DiskEntry>, ConvertError> {
    let mut names = BTreeSet::new();
    let mut entries = Vec::new();
    for (i, disk) in vmi.spec.domain.devices.disks.iter().enumerate() {
        let path = format!("spec.domain.devices.disks[{i}]");
        if !paths::is_dns_label(&disk.name) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid disk name (lowercase letters, digits and '-', at most 63)",
                    disk.name
                ),
            ));
        }
        if !names.insert(disk.name.as_str()) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("disk {:?} is listed twice", disk.name),
            ));
        }
        entries.push(DiskEntry {
            path,
            disk: disk.clone(),
        });
    }
    // In spec.volumes order, like KubeVirt's defaulting.
    let mut without_disk: Vec<(usize, &str)> = volumes
        .iter()
        .filter(|(name, _)| !names.contains(*name))
        .map(|(name, (index, _))| (*index, *name))
        .collect();
    without_disk.sort_unstable();
    for (index, name) in without_disk {
        entries.push(DiskEntry {
            path: format!("spec.volumes[{index}]"),
            disk: Disk {
                name: name.to_string(),
                ..Disk::default()
            },
        });
    }
    Ok(entries)
}

/// KubeVirt's defaults: disk → virtio, lun → scsi, cdrom → sata.
fn device_and_bus(entry: &DiskEntry) -> Result<(Device, DiskBus), ConvertError> {
    let disk = &entry.disk;
    let path = &entry.path;
    match (&disk.disk, &disk.lun, &disk.cdrom) {
        (Some(target), None, None) => Ok((Device::Disk, target.bus.unwrap_or(DiskBus::Virtio))),
        (None, None, None) => Ok((Device::Disk, DiskBus::Virtio)),
        (None, Some(lun), None) => {
            if lun.reservation {
                return Err(ConvertError::unsupported(
                    format!("{path}.lun.reservation"),
                    "SCSI persistent reservation (it needs qemu-pr-helper)",
                ));
            }
            match lun.bus.unwrap_or(DiskBus::Scsi) {
                DiskBus::Scsi => Ok((Device::Lun, DiskBus::Scsi)),
                other => Err(ConvertError::new(
                    format!("{path}.lun.bus"),
                    format!("a LUN needs the scsi bus, not {}", other.as_str()),
                )),
            }
        }
        (None, None, Some(cdrom)) => match cdrom.bus.unwrap_or(DiskBus::Sata) {
            DiskBus::Virtio => Err(ConvertError::new(
                format!("{path}.cdrom.bus"),
                "a cdrom cannot use the virtio bus (use sata or scsi)",
            )),
            bus => Ok((Device::Cdrom, bus)),
        },
        _ => Err(ConvertError::new(
            path.clone(),
            "set only one of disk, lun or cdrom",
        )),
    }
}

fn readonly(entry: &DiskEntry, device: Device) -> bool {
    match device {
        Device::Disk => entry.disk.disk.as_ref().is_some_and(|d| d.readonly),
        Device::Lun => entry.disk.lun.as_ref().is_some_and(|l| l.readonly),
        Device::Cdrom => entry
            .disk
            .cdrom
            .as_ref()
            .and_then(|c| c.readonly)
            .unwrap_or(true),
    }
}

fn configure_pci_address(
    entry: &DiskEntry,
    bus: DiskBus,
    disk: &mut domxml::Disk,
) -> Result<(), ConvertError> {
    let Some(text) = entry
        .disk
        .disk
        .as_ref()
        .and_then(|d| d.pci_address.as_deref())
    else {
        return Ok(());
    };
    let path = format!("{}.disk.pciAddress", entry.path);
    if bus != DiskBus::Virtio {
        return Err(ConvertError::new(
            path,
            "a PCI address can only be set on a virtio disk",
        ));
    }
    disk.address = Some(parse_pci_address(text, &path)?);
    Ok(())
}

/// Generates vdX / sdX names per bus family (KubeVirt `makeDeviceName`; sata,
/// scsi and usb share the sd namespace).
#[derive(Default)]
struct DeviceNamer {
    used: BTreeMap<&'static str, usize>,
}

impl DeviceNamer {
    fn next(&mut self, bus: DiskBus) -> (String, usize) {
        let prefix = match bus {
            DiskBus::Virtio => "vd",
            DiskBus::Sata | DiskBus::Scsi | DiskBus::Usb => "sd",
        };
        let counter = self.used.entry(prefix).or_insert(0);
        let index = *counter;
        *counter += 1;
        (device_name(prefix, index), index)
    }
}

/// Linux's sd naming: a…z, aa…zz, aaa… (KubeVirt `FormatDeviceName`).
pub(crate) fn device_name(prefix: &str, index: usize) -> String {
    let mut letters = Vec::new();
    let mut n = index as i64;
    while n >= 0 {
        letters.push(b'a' + (n % 26) as u8);
        n = n / 26 - 1;
    }
    letters.reverse();
    format!("{prefix}{}", String::from_utf8_lossy(&letters))
}

fn driver(
    entry: &DiskEntry,
    device: Device,
    bus: DiskBus,
    source: &Source,
    queues: Option<u32>,
    iothread: Option<u32>,
) -> Result<DiskDriver, ConvertError> {
    let shareable = entry.disk.shareable == Some(true);
    let io = entry.disk.io.filter(|io| *io != DiskIo::Default);
    let cache = match (entry.disk.cache, shareable, io) {
        (Some(DiskCache::None), _, _) | (None, true, _) | (None, false, Some(DiskIo::Native)) => {
            Some(DiskCache::None)
        }
        (Some(other), true, _) => {
            return Err(ConvertError::new(
                format!("{}.cache", entry.path),
                format!("a shareable disk needs cache none, not {}", other.as_str()),
            ));
        }
        (Some(other), false, Some(DiskIo::Native)) => {
            return Err(ConvertError::new(
                format!("{}.io", entry.path),
                format!(
                    "io native needs cache none (O_DIRECT), not {}",
                    other.as_str()
                ),
            ));
        }
        (cache, _, _) => cache,
    };
    let format = match source {
        Source::File { format, .. } => format,
        Source::Block { .. } | Source::Empty => "raw",
    };
    Ok(DiskDriver {
        name: Some("qemu".to_string()),
        format: Some(format.to_string()),
        cache: cache.map(|c| c.as_str().to_string()),
        io: io.map(|io| io.as_str().to_string()),
        error_policy: Some(
            entry
                .disk
                .error_policy
                .map_or("stop", |p| p.as_str())
                .to_string(),
        ),
        discard: matches!(device, Device::Disk | Device::Lun).then(|| "unmap".to_string()),
        queues: if bus == DiskBus::Virtio { queues } else { None },
        iothread: if bus == DiskBus::Virtio {
            iothread
        } else {
            None
        },
    })
}

fn apply_source(source: Source, disk: &mut domxml::Disk) {
    match source {
        Source::File { path, .. } => {
            disk.disk_type = "file".to_string();
            disk.source = Some(DiskSource {
                file: Some(path),
                ..DiskSource::default()
            });
        }
        Source::Block { path } => {
            disk.disk_type = "block".to_string();
            disk.source = Some(DiskSource {
                dev: Some(path),
                ..DiskSource::default()
            });
        }
        Source::Empty => disk.disk_type = "file".to_string(),
    }
}

fn volume_source(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    volume: &Volume,
    index: usize,
    plan: &mut DiskPlan,
    disk: &mut domxml::Disk,
) -> Result<Source, ConvertError> {
    let name = volume.name.as_str();
    let path = format!("spec.volumes[{index}]");
    if volume.container_disk.is_some() {
        return Ok(container_disk(ctx, name, index, plan));
    }
    if let Some(pvc) = &volume.persistent_volume_claim {
        return Ok(claim(
            ctx,
            name,
            "persistentVolumeClaim",
            pvc.hotpluggable,
            plan,
        ));
    }
    if let Some(dv) = &volume.data_volume {
        return Ok(claim(ctx, name, "dataVolume", dv.hotpluggable, plan));
    }
    if volume.ephemeral.is_some() {
        return Ok(ephemeral(ctx, name, plan, disk));
    }
    if let Some(empty) = &volume.empty_disk {
        let size = disk_size(&empty.capacity, &format!("{path}.emptyDisk.capacity"))?;
        return Ok(empty_disk(ctx, name, size, plan));
    }
    if let Some(host_disk) = &volume.host_disk {
        return host_disk_source(name, &path, host_disk, plan);
    }
    if let Some(source) = &volume.cloud_init_no_cloud {
        return cloud_init(vmi, ctx, name, index, source, DataSource::NoCloud, plan);
    }
    if let Some(source) = &volume.cloud_init_config_drive {
        return cloud_init(vmi, ctx, name, index, source, DataSource::ConfigDrive, plan);
    }
    if let Some(config_map) = &volume.config_map {
        let source = paths::config_map_source(ctx, name);
        let iso = paths::config_map_disks_dir(ctx).join(format!("{name}.iso"));
        let label = config_map.volume_label.as_deref();
        return Ok(config_iso(plan, "configMap", name, source, iso, label));
    }
    if let Some(secret) = &volume.secret {
        let source = paths::secret_source(ctx, name);
        let iso = paths::secret_disks_dir(ctx).join(format!("{name}.iso"));
        return Ok(config_iso(
            plan,
            "secret",
            name,
            source,
            iso,
            secret.volume_label.as_deref(),
        ));
    }
    if let Some(downward) = &volume.downward_api {
        let source = paths::downward_api_source(ctx, name);
        let iso = paths::downward_api_disks_dir(ctx).join(format!("{name}.iso"));
        return Ok(config_iso(
            plan,
            "downwardAPI",
            name,
            source,
            iso,
            downward.volume_label.as_deref(),
        ));
    }
    // index_volumes guarantees exactly one source: this is serviceAccount.
    let source = std::path::PathBuf::from(paths::SERVICE_ACCOUNT_SOURCE);
    Ok(config_iso(
        plan,
        "serviceAccount",
        name,
        source,
        paths::service_account_iso(ctx),
        None,
    ))
}

fn what(kind: &str, volume: &str) -> String {
    format!("{kind} volume {volume:?}")
}

/// A qcow2 overlay on the read-only base image, so the base is never written.
fn container_disk(ctx: &ConvertContext, volume: &str, index: usize, plan: &mut DiskPlan) -> Source {
    let what = what("containerDisk", volume);
    let base = paths::container_disk_image(ctx, index);
    let overlay = paths::overlay_image(ctx, volume);
    plan.require(base.clone(), PathKind::File, &what);
    plan.make_dir(paths::overlay_dir(ctx, volume), &what);
    // The base format (qcow2 or raw) is detected when the plan runs and
    // recorded in the overlay, so libvirt reads the chain from the image.
    plan.push(DiskStep::CreateOverlay {
        path: overlay.clone(),
        backing: base,
        backing_format: None,
        what,
    });
    Source::File {
        path: paths::text(&overlay),
        format: "qcow2",
    }
}

/// PVC or DataVolume: an image file in the mounted claim, or a block device.
fn claim(
    ctx: &ConvertContext,
    volume: &str,
    kind: &str,
    hotpluggable: bool,
    plan: &mut DiskPlan,
) -> Source {
    let what = what(kind, volume);
    if hotpluggable {
        log::debug!("convert: {what} is hotpluggable; attached at start like any other claim");
    }
    if ctx.block_pvcs.contains(volume) {
        let device = paths::pvc_block_device(volume);
        plan.require(device.clone(), PathKind::BlockDevice, &what);
        Source::Block {
            path: paths::text(&device),
        }
    } else {
        let image = paths::pvc_image(ctx, volume);
        plan.require(image.clone(), PathKind::File, &what);
        Source::File {
            path: paths::text(&image),
            format: "raw",
        }
    }
}

/// A qcow2 overlay over a raw PVC: the claim stays untouched.
fn ephemeral(
    ctx: &ConvertContext,
    volume: &str,
    plan: &mut DiskPlan,
    disk: &mut domxml::Disk,
) -> Source {
    let what = what("ephemeral", volume);
    let block = ctx.block_pvcs.contains(volume);
    let (backing, kind, store_type) = if block {
        (
            paths::pvc_block_device(volume),
            PathKind::BlockDevice,
            "block",
        )
    } else {
        (paths::pvc_image(ctx, volume), PathKind::File, "file")
    };
    let overlay = paths::overlay_image(ctx, volume);
    plan.require(backing.clone(), kind, &what);
    plan.make_dir(paths::overlay_dir(ctx, volume), &what);
    plan.push(DiskStep::CreateOverlay {
        path: overlay.clone(),
        backing: backing.clone(),
        backing_format: Some("raw".to_string()),
        what,
    });
    let backing_text = paths::text(&backing);
    disk.backing_store = Some(BackingStore {
        store_type: Some(store_type.to_string()),
        format: Some(FormatType {
            format: "raw".to_string(),
        }),
        source: Some(if block {
            DiskSource {
                dev: Some(backing_text),
                ..DiskSource::default()
            }
        } else {
            DiskSource {
                file: Some(backing_text),
                ..DiskSource::default()
            }
        }),
        ..BackingStore::default()
    });
    Source::File {
        path: paths::text(&overlay),
        format: "qcow2",
    }
}

fn empty_disk(ctx: &ConvertContext, volume: &str, size: u64, plan: &mut DiskPlan) -> Source {
    let what = what("emptyDisk", volume);
    let image = paths::empty_disk_image(ctx, volume);
    plan.make_dir(paths::empty_disk_dir(ctx), &what);
    plan.push(DiskStep::CreateQcow2 {
        path: image.clone(),
        size,
        what,
    });
    Source::File {
        path: paths::text(&image),
        format: "qcow2",
    }
}

/// KubeVirt mounts the host path into the pod; this launcher has no pod, so
/// `path` is used as is and must be absolute.
fn host_disk_source(
    volume: &str,
    path: &str,
    host_disk: &crate::vmi::HostDisk,
    plan: &mut DiskPlan,
) -> Result<Source, ConvertError> {
    let what = what("hostDisk", volume);
    let image = std::path::PathBuf::from(&host_disk.path);
    if !image.is_absolute() || image.file_name().is_none() {
        return Err(ConvertError::new(
            format!("{path}.hostDisk.path"),
            format!("{:?} is not an absolute file path", host_disk.path),
        ));
    }
    match host_disk.disk_type {
        HostDiskType::Disk => plan.require(image.clone(), PathKind::File, &what),
        HostDiskType::DiskOrCreate => {
            let capacity_path = format!("{path}.hostDisk.capacity");
            let capacity = host_disk.capacity.as_ref().ok_or_else(|| {
                ConvertError::new(
                    &capacity_path,
                    "capacity is required with type DiskOrCreate",
                )
            })?;
            let size = disk_size(capacity, &capacity_path)?;
            if let Some(parent) = image.parent() {
                plan.make_dir(parent.to_path_buf(), &what);
            }
            plan.push(DiskStep::CreateSparseFile {
                path: image.clone(),
                size,
                what,
            });
        }
    }
    Ok(Source::File {
        path: host_disk.path.clone(),
        format: "raw",
    })
}

/// Disk sizes are rounded down to whole MiB, as KubeVirt does for emptyDisks.
fn disk_size(capacity: &Quantity, path: &str) -> Result<u64, ConvertError> {
    let bytes = capacity
        .floor()
        .map_err(|err| ConvertError::new(path, err.message))?;
    let aligned = u64::try_from(bytes).unwrap_or(0) / MIB * MIB;
    if aligned == 0 {
        return Err(ConvertError::new(
            path,
            format!("{capacity} is below 1Mi (sizes are rounded down to whole MiB)"),
        ));
    }
    Ok(aligned)
}

fn cloud_init(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    volume: &str,
    index: usize,
    source: &crate::vmi::CloudInitSource,
    data_source: DataSource,
    plan: &mut DiskPlan,
) -> Result<Source, ConvertError> {
    let kind = match data_source {
        DataSource::NoCloud => "cloudInitNoCloud",
        DataSource::ConfigDrive => "cloudInitConfigDrive",
    };
    let what = what(kind, volume);
    let contents = cloudinit::contents(vmi, ctx, source, data_source, volume, index)?;
    if let IsoContents::FilesWithSecrets { secrets, .. } = &contents
        && let Some(secret) = secrets.first()
    {
        plan.require(
            secret.dir.clone(),
            PathKind::Dir,
            &format!("secret of {what}"),
        );
    }
    let iso = match data_source {
        DataSource::NoCloud => paths::no_cloud_iso(ctx),
        DataSource::ConfigDrive => paths::config_drive_iso(ctx),
    };
    plan.make_dir(paths::cloud_init_dir(ctx), &what);
    plan.push(DiskStep::WriteIso {
        path: iso.clone(),
        volume_id: data_source.volume_id().to_string(),
        contents,
        what,
    });
    Ok(Source::File {
        path: paths::text(&iso),
        format: "raw",
    })
}

/// configMap / secret / downwardAPI / serviceAccount: an ISO of the mounted
/// directory, labelled `volumeLabel` or "cfgdata" (KubeVirt pkg/config).
fn config_iso(
    plan: &mut DiskPlan,
    kind: &str,
    volume: &str,
    source: std::path::PathBuf,
    iso: std::path::PathBuf,
    label: Option<&str>,
) -> Source {
    let what = what(kind, volume);
    plan.require(source.clone(), PathKind::Dir, &what);
    if let Some(dir) = iso.parent() {
        plan.make_dir(dir.to_path_buf(), &what);
    }
    plan.push(DiskStep::WriteIso {
        path: iso.clone(),
        volume_id: label
            .filter(|l| !l.is_empty())
            .unwrap_or("cfgdata")
            .to_string(),
        contents: IsoContents::Dir(source),
        what,
    });
    Source::File {
        path: paths::text(&iso),
        format: "raw",
    }
}

/// I/O thread assignment (KubeVirt converter.go `getIOThreadsCountType`,
/// `setIOThreads`): a shared pool plus one thread per dedicated disk.
struct IoThreadPlan {
    threads: BTreeMap<String, u32>,
    count: Option<u32>,
    scsi_thread: Option<u32>,
}

impl IoThreadPlan {
    fn new(
        vmi: &VirtualMachineInstance,
        disks: &[DiskEntry],
    ) -> Result<IoThreadPlan, ConvertError> {
        let policy = vmi.spec.domain.io_threads_policy;
        let dedicated = |entry: &DiskEntry| entry.disk.dedicated_io_thread == Some(true);
        let none = IoThreadPlan {
            threads: BTreeMap::new(),
            count: None,
            scsi_thread: None,
        };
        if policy.is_none() && !disks.iter().any(dedicated) {
            return Ok(none);
        }
        let pool_limit = match policy {
            Some(IoThreadsPolicy::SupplementalPool) => {
                return Err(ConvertError::unsupported(
                    "spec.domain.ioThreadsPolicy",
                    "ioThreadsPolicy supplementalPool",
                ));
            }
            Some(IoThreadsPolicy::Auto) => auto_pool_limit(vmi)?,
            Some(IoThreadsPolicy::Shared) | None => 1,
        };
        let dedicated_count =
            u32::try_from(disks.iter().filter(|e| dedicated(e)).count()).unwrap_or(u32::MAX);
        let mut auto_count = u32::try_from(disks.len()).unwrap_or(u32::MAX) - dedicated_count;
        if auto_count + dedicated_count > pool_limit {
            // At least one shared thread remains.
            auto_count = pool_limit.saturating_sub(dedicated_count).max(1);
        }
        let mut threads = BTreeMap::new();
        let mut next_auto = 1;
        let mut next_dedicated = auto_count + 1;
        let mut scsi_dedicated = false;
        for entry in disks {
            let bus = device_and_bus(entry)
                .map(|(_, bus)| bus)
                .unwrap_or(DiskBus::Virtio);
            if bus == DiskBus::Scsi && dedicated(entry) {
                scsi_dedicated = true;
            }
            if bus != DiskBus::Virtio {
                continue;
            }
            let thread = if dedicated(entry) {
                next_dedicated += 1;
                next_dedicated - 1
            } else {
                let thread = next_auto;
                // Thread ids start at 1 and wrap around the shared pool.
                next_auto = next_auto % auto_count.max(1) + 1;
                thread
            };
            threads.insert(entry.disk.name.clone(), thread);
        }
        Ok(IoThreadPlan {
            threads,
            count: Some(auto_count + dedicated_count).filter(|count| *count > 0),
            scsi_thread: scsi_dedicated.then_some(next_auto),
        })
    }

    fn thread_for(&self, entry: &DiskEntry) -> Option<u32> {
        self.threads.get(&entry.disk.name).copied()
    }

    fn count(&self) -> Option<u32> {
        self.count
    }
}

/// "auto": twice the requested (else limited) CPUs, at least 2.
fn auto_pool_limit(vmi: &VirtualMachineInstance) -> Result<u32, ConvertError> {
    let resources = &vmi.spec.domain.resources;
    let cpus = match (resources.requests.get("cpu"), resources.limits.get("cpu")) {
        (Some(cpu), _) => cpu
            .ceil()
            .map_err(|e| ConvertError::new("spec.domain.resources.requests.cpu", e.message))?,
        (None, Some(cpu)) => cpu
            .ceil()
            .map_err(|e| ConvertError::new("spec.domain.resources.limits.cpu", e.message))?,
        (None, None) => 1,
    };
    Ok(u32::try_from(cpus.max(1))
        .unwrap_or(u32::MAX / 2)
        .saturating_mul(2))
}

/// SATA and SCSI disks get their controller; SCSI uses virtio-scsi.
fn add_storage_controllers(
    buses: &BTreeSet<DiskBus>,
    io_threads: &IoThreadPlan,
    virtio_model: &str,
    vcpus: Vcpus,
    domain: &mut Domain,
) {
    if buses.contains(&DiskBus::Sata) {
        domain.devices.controllers.push(Controller {
            controller_type: "sata".to_string(),
            index: 0,
            ..Controller::default()
        });
    }
    if buses.contains(&DiskBus::Scsi) {
        domain.devices.controllers.push(Controller {
            controller_type: "scsi".to_string(),
            index: 0,
            model: Some(virtio_model.to_string()),
            driver: io_threads.scsi_thread.map(|thread| ControllerDriver {
                queues: Some(vcpus.enabled),
                iothread: Some(thread),
            }),
            ..Controller::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{context, convert_err, convert_ok, convert_with};
    use super::device_name;
    use crate::disks::{DiskStep, IsoContents, PathKind};
    use crate::domxml;

    fn disks(spec: serde_json::Value) -> Vec<domxml::Disk> {
        convert_ok(spec).domain.devices.disks
    }

    fn targets(disks: &[domxml::Disk]) -> Vec<(String, String)> {
        disks
            .iter()
            .map(|d| {
                (
                    d.target.dev.clone(),
                    d.target.bus.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn device_names_follow_linux() {
        let names: Vec<String> = [0, 1, 25, 26, 27, 701, 702]
            .iter()
            .map(|i| device_name("sd", *i))
            .collect();
        assert_eq!(
            names,
            ["sda", "sdb", "sdz", "sdaa", "sdab", "sdzz", "sdaaa"]
        );
    }

    #[test]
    fn bus_to_target_naming_and_controllers() {
        let spec = json!({"domain": {"devices": {"disks": [
            {"name": "a", "disk": {"bus": "virtio"}}, {"name": "b", "disk": {"bus": "sata"}},
            {"name": "c", "disk": {"bus": "scsi"}}, {"name": "d"}, {"name": "e", "cdrom": {}}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}, {"name": "b", "emptyDisk": {"capacity": "1Gi"}},
                        {"name": "c", "emptyDisk": {"capacity": "1Gi"}}, {"name": "d", "emptyDisk": {"capacity": "1Gi"}}]});
        let conversion = convert_ok(spec);
        let devices = &conversion.domain.devices;
        assert_eq!(
            targets(&devices.disks),
            [
                ("vda", "virtio"),
                ("sda", "sata"),
                ("sdb", "scsi"),
                ("vdb", "virtio"),
                ("sdc", "sata")
            ]
            .map(|(d, b)| (d.to_string(), b.to_string()))
        );
        let scsi = devices.disks[2].address.clone().unwrap_or_default();
        assert_eq!(
            (scsi.address_type.as_str(), scsi.unit.as_deref()),
            ("drive", Some("1"))
        );
        let controllers: Vec<&str> = devices
            .controllers
            .iter()
            .map(|c| c.controller_type.as_str())
            .collect();
        assert_eq!(controllers, ["sata", "scsi", "usb", "virtio-serial"]);
        // The cdrom has no volume: an empty, read-only drive.
        assert!(devices.disks[4].source.is_none());
        assert!(devices.disks[4].readonly.is_some());
        assert_eq!(
            devices.disks[0].model.as_deref(),
            Some("virtio-non-transitional")
        );
        assert!(devices.disks[1].model.is_none());
    }

    #[test]
    fn unknown_bus_is_reported_by_the_parser_with_its_path() {
        let value = json!({"kind": "VirtualMachineInstance", "spec": {"domain": {"devices": {"disks": [
            {"name": "a"}, {"name": "b", "disk": {"bus": "foo"}}]}}}});
        let err = crate::vmi::parse_vmi(&value)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "spec.domain.devices.disks[1].disk.bus: unknown bus \"foo\" (use virtio, sata, scsi or usb)"
        );
    }

    #[test]
    fn missing_volume_and_name_errors() {
        let missing = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "root"}, {"name": "data"}]}},
            "volumes": [{"name": "root", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert_eq!(
            missing,
            "spec.domain.devices.disks[1].name: no volume named \"data\" in spec.volumes; add one (only a cdrom may be empty)"
        );
        let twice = convert_err(
            json!({"volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "a", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert_eq!(twice, "spec.volumes[1].name: volume \"a\" is defined twice");
        let two_sources = convert_err(
            json!({"volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"},
            "containerDisk": {"image": "x"}}]}),
        );
        assert_eq!(
            two_sources,
            "spec.volumes[0]: a volume needs exactly one source (found: containerDisk, emptyDisk)"
        );
        let bad_name =
            convert_err(json!({"volumes": [{"name": "../x", "emptyDisk": {"capacity": "1Gi"}}]}));
        assert!(
            bad_name.starts_with("spec.volumes[0].name: \"../x\" is not a valid volume name"),
            "{bad_name}"
        );
        let small =
            convert_err(json!({"volumes": [{"name": "a", "emptyDisk": {"capacity": "100Ki"}}]}));
        assert_eq!(
            small,
            "spec.volumes[0].emptyDisk.capacity: 100Ki is below 1Mi (sizes are rounded down to whole MiB)"
        );
    }

    #[test]
    fn only_one_cloud_init_volume() {
        let message = convert_err(json!({"volumes": [
            {"name": "a", "cloudInitNoCloud": {"userData": "x"}},
            {"name": "b", "cloudInitConfigDrive": {"userData": "y"}}]}));
        assert_eq!(
            message,
            "spec.volumes[1]: only one cloud-init volume is allowed"
        );
    }

    #[test]
    fn device_kind_errors() {
        let cdrom = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "c", "cdrom": {"bus": "virtio"}}]}}}),
        );
        assert_eq!(
            cdrom,
            "spec.domain.devices.disks[0].cdrom.bus: a cdrom cannot use the virtio bus (use sata or scsi)"
        );
        let lun = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "l", "lun": {}}]}},
            "volumes": [{"name": "l", "persistentVolumeClaim": {"claimName": "x"}}]}),
        );
        assert!(
            lun.starts_with("spec.domain.devices.disks[0].lun: a LUN needs a block-mode"),
            "{lun}"
        );
        let both = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "x", "disk": {}, "cdrom": {}}]}}}),
        );
        assert_eq!(
            both,
            "spec.domain.devices.disks[0]: set only one of disk, lun or cdrom"
        );
        let pci = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "x", "disk": {"bus": "sata", "pciAddress": "0000:00:05.0"}}]}},
            "volumes": [{"name": "x", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert_eq!(
            pci,
            "spec.domain.devices.disks[0].disk.pciAddress: a PCI address can only be set on a virtio disk"
        );
    }

    #[test]
    fn container_disk_overlay_plan() {
        let conversion = convert_ok(
            json!({"volumes": [{"name": "other", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}}]}),
        );
        let root = &conversion.domain.devices.disks[1];
        assert_eq!(root.disk_type, "file");
        assert_eq!(
            root.driver.as_ref().and_then(|d| d.format.as_deref()),
            Some("qcow2")
        );
        assert_eq!(
            root.source.as_ref().and_then(|s| s.file.as_deref()),
            Some("/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2")
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::CreateOverlay {
                    path: "/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2".into(),
                    backing: "/var/run/kubevirt/container-disks/disk_1.img".into(),
                    backing_format: None,
                    what: "containerDisk volume \"root\"".into(),
                })
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::RequireExisting {
                    path: "/var/run/kubevirt/container-disks/disk_1.img".into(),
                    kind: PathKind::File,
                    what: "containerDisk volume \"root\"".into(),
                })
        );
    }

    #[test]
    fn pvc_file_block_and_ephemeral() {
        let mut ctx = context();
        ctx.block_pvcs.insert("fast".into());
        let spec = json!({"volumes": [
            {"name": "slow", "persistentVolumeClaim": {"claimName": "slow-pvc"}},
            {"name": "fast", "dataVolume": {"name": "fast-dv"}},
            {"name": "scratch", "ephemeral": {"persistentVolumeClaim": {"claimName": "base"}}}]});
        let conversion = convert_with(spec, &ctx).unwrap_or_else(|e| panic!("{e}"));
        let disks = &conversion.domain.devices.disks;
        assert_eq!(
            disks[0].source.as_ref().and_then(|s| s.file.as_deref()),
            Some("/var/run/kubevirt-private/vmi-disks/slow/disk.img")
        );
        assert_eq!(
            (
                disks[1].disk_type.as_str(),
                disks[1].source.as_ref().and_then(|s| s.dev.as_deref())
            ),
            ("block", Some("/dev/fast"))
        );
        let backing = disks[2].backing_store.clone().unwrap_or_default();
        assert_eq!(backing.format.map(|f| f.format).as_deref(), Some("raw"));
        assert_eq!(
            backing.source.and_then(|s| s.file).as_deref(),
            Some("/var/run/kubevirt-private/vmi-disks/scratch/disk.img")
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::RequireExisting {
                    path: "/dev/fast".into(),
                    kind: PathKind::BlockDevice,
                    what: "dataVolume volume \"fast\"".into(),
                })
        );
    }

    #[test]
    fn host_disks() {
        let conversion = convert_ok(json!({"volumes": [
            {"name": "existing", "hostDisk": {"path": "/data/existing.img", "type": "Disk"}},
            {"name": "created", "hostDisk": {"path": "/data/new/created.img", "type": "DiskOrCreate", "capacity": "10.5Gi"}}]}));
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::CreateSparseFile {
                    path: "/data/new/created.img".into(),
                    size: 10_737_418_240 + (512 << 20),
                    what: "hostDisk volume \"created\"".into(),
                })
        );
        let relative = convert_err(
            json!({"volumes": [{"name": "h", "hostDisk": {"path": "disk.img", "type": "Disk"}}]}),
        );
        assert_eq!(
            relative,
            "spec.volumes[0].hostDisk.path: \"disk.img\" is not an absolute file path"
        );
        let no_capacity = convert_err(
            json!({"volumes": [{"name": "h", "hostDisk": {"path": "/d.img", "type": "DiskOrCreate"}}]}),
        );
        assert_eq!(
            no_capacity,
            "spec.volumes[0].hostDisk.capacity: capacity is required with type DiskOrCreate"
        );
    }

    #[test]
    fn config_volumes_become_isos_of_their_mounts() {
        let conversion = convert_ok(json!({"volumes": [
            {"name": "app", "configMap": {"name": "app-config", "volumeLabel": "OEMDRV"}},
            {"name": "creds", "secret": {"secretName": "creds"}},
            {"name": "info", "downwardAPI": {"fields": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}}]}));
        let isos: Vec<(String, String, IsoContents)> = conversion
            .disk_plan
            .steps
            .into_iter()
            .filter_map(|s| match s {
                DiskStep::WriteIso {
                    path,
                    volume_id,
                    contents,
                    ..
                } => Some((path.to_string_lossy().into_owned(), volume_id, contents)),
                _ => None,
            })
            .collect();
        assert_eq!(
            isos,
            [
                (
                    "/var/run/kubevirt-private/config-map-disks/app.iso",
                    "OEMDRV",
                    "/var/run/kubevirt-private/config-map/app"
                ),
                (
                    "/var/run/kubevirt-private/secret-disks/creds.iso",
                    "cfgdata",
                    "/var/run/kubevirt-private/secret/creds"
                ),
                (
                    "/var/run/kubevirt-private/downwardapi-disks/info.iso",
                    "cfgdata",
                    "/var/run/kubevirt-private/downwardapi/info"
                ),
                (
                    "/var/run/kubevirt-private/service-account-disk/service-account.iso",
                    "cfgdata",
                    "/var/run/secrets/kubernetes.io/serviceaccount"
                ),
            ]
            .map(|(iso, label, dir)| (
                iso.to_string(),
                label.to_string(),
                IsoContents::Dir(dir.into())
            ))
        );
    }

    #[test]
    fn driver_options() {
        let spec = json!({"domain": {"cpu": {"cores": 2}, "devices": {"blockMultiQueue": true, "disks": [
            {"name": "a", "cache": "writeback", "io": "threads", "errorPolicy": "report", "serial": "SER1"},
            {"name": "b", "shareable": true, "disk": {"readonly": true}},
            {"name": "c", "io": "native", "blockSize": {"custom": {"logical": 512, "physical": 4096}}}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}, {"name": "b", "emptyDisk": {"capacity": "1Gi"}},
                        {"name": "c", "emptyDisk": {"capacity": "1Gi"}}]});
        let disks = disks(spec);
        let driver = |i: usize| disks[i].driver.clone().unwrap_or_default();
        assert_eq!(
            (
                driver(0).cache.as_deref(),
                driver(0).io.as_deref(),
                driver(0).error_policy.as_deref(),
                driver(0).queues
            ),
            (Some("writeback"), Some("threads"), Some("report"), Some(2))
        );
        assert_eq!(driver(0).discard.as_deref(), Some("unmap"));
        assert_eq!(disks[0].serial.as_deref(), Some("SER1"));
        assert_eq!(driver(1).cache.as_deref(), Some("none"));
        assert!(disks[1].shareable.is_none());
        assert!(disks[1].readonly.is_some());
        assert_eq!(
            (driver(2).cache.as_deref(), driver(2).io.as_deref()),
            (Some("none"), Some("native"))
        );
        assert_eq!(
            disks[2]
                .blockio
                .as_ref()
                .and_then(|b| b.physical_block_size),
            Some(4096)
        );
        let conflict = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "a", "shareable": true, "cache": "writeback"}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert_eq!(
            conflict,
            "spec.domain.devices.disks[0].cache: a shareable disk needs cache none, not writeback"
        );
    }

    #[test]
    fn io_threads_shared_and_dedicated() {
        let spec = json!({"domain": {"ioThreadsPolicy": "shared", "devices": {"disks": [
            {"name": "a"}, {"name": "b", "dedicatedIOThread": true}, {"name": "c"}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}, {"name": "b", "emptyDisk": {"capacity": "1Gi"}},
                        {"name": "c", "emptyDisk": {"capacity": "1Gi"}}]});
        let domain = convert_ok(spec).domain;
        assert_eq!(domain.iothreads, Some(2));
        let threads: Vec<Option<u32>> = domain
            .devices
            .disks
            .iter()
            .map(|d| d.driver.as_ref().and_then(|dr| dr.iothread))
            .collect();
        assert_eq!(threads, [Some(1), Some(2), Some(1)]);
        assert!(convert_ok(json!({})).domain.iothreads.is_none());
    }
}
