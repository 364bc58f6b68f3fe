//! How a disk appears to the guest: device kind, bus and target name,
//! driver options, PCI address, and the bus controllers.

use std::collections::{BTreeMap, BTreeSet};

use super::super::cpu::Vcpus;
use super::super::pci::parse_pci_address;
use super::super::{Checked, ConvertError};
use super::iothreads::IoThreadPlan;
use super::{Device, DiskEntry, Source};
use crate::domxml::{
    self, Controller, ControllerDriver, DataStore, DiskDriver, DiskSource, Domain, FormatType,
};
use crate::vmi::{DiskBus, DiskCache, DiskIo};

/// The device kind and bus. KubeVirt's defaults ([`crate::vmi::defaults`])
/// have given every disk, cdrom and LUN a bus (sata when the VMI names
/// none), so a missing bus here only comes from a model built by hand.
pub(super) fn device_and_bus(entry: &DiskEntry) -> Result<(Device, DiskBus), ConvertError> {
    let disk = &entry.disk;
    let path = &entry.path;
    let default = crate::vmi::defaults::DEFAULT_DISK_BUS;
    match (&disk.disk, &disk.lun, &disk.cdrom) {
        (Some(target), None, None) => {
            let bus = target.bus.unwrap_or(default);
            // KubeVirt's webhook: "sata hard-disks do not support read-only".
            if target.readonly && bus == DiskBus::Sata {
                return Err(ConvertError::checked(
                    Checked::ReadOnlySataDisk,
                    format!("{path}.disk.readonly"),
                    "a read-only disk cannot be on the sata bus (sata is also KubeVirt's default when a disk names no bus); use bus virtio or scsi, or a cdrom",
                ));
            }
            Ok((Device::Disk, bus))
        }
        (None, None, None) => Ok((Device::Disk, default)),
        (None, Some(lun), None) => match lun.bus.unwrap_or(default) {
            DiskBus::Scsi => Ok((Device::Lun, DiskBus::Scsi)),
            other => Err(ConvertError::checked(
                Checked::LunBus,
                format!("{path}.lun.bus"),
                format!(
                    "a LUN needs the scsi bus, not {} (KubeVirt gives a LUN without a bus sata on amd64); set bus: scsi",
                    other.as_str()
                ),
            )),
        },
        (None, None, Some(cdrom)) => match cdrom.bus.unwrap_or(default) {
            DiskBus::Virtio => Err(ConvertError::checked(
                Checked::CdromBus,
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

pub(super) fn readonly(entry: &DiskEntry, device: Device) -> bool {
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

pub(super) fn configure_pci_address(
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
pub(super) struct DeviceNamer {
    used: BTreeMap<&'static str, usize>,
}

impl DeviceNamer {
    pub(super) fn next(&mut self, bus: DiskBus) -> (String, usize) {
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
pub(super) fn device_name(prefix: &str, index: usize) -> String {
    const ALPHABET: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
    let mut letters = Vec::new();
    let mut n = index;
    loop {
        letters.push(ALPHABET[n % 26]);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    letters.reverse();
    format!("{prefix}{}", String::from_utf8_lossy(&letters))
}

pub(super) fn driver(
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
        Source::TrackedBlock { .. } => "qcow2",
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

pub(super) fn apply_source(source: Source, disk: &mut domxml::Disk) {
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
        Source::TrackedBlock { overlay, device } => {
            disk.disk_type = "file".to_string();
            disk.source = Some(DiskSource {
                file: Some(overlay),
                data_store: Some(Box::new(DataStore {
                    store_type: "block".to_string(),
                    format: Some(FormatType {
                        format: "raw".to_string(),
                    }),
                    source: Some(DiskSource {
                        dev: Some(device),
                        ..DiskSource::default()
                    }),
                })),
                ..DiskSource::default()
            });
        }
        Source::Empty => disk.disk_type = "file".to_string(),
    }
}

/// SATA and SCSI disks get their controller; SCSI uses virtio-scsi, which
/// every VMI that allows hotplug gets (KubeVirt `requiresSCSIController`)
/// so that scsi disks can be plugged in later.
pub(super) fn add_storage_controllers(
    buses: &BTreeSet<DiskBus>,
    hotplug: bool,
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
    if buses.contains(&DiskBus::Scsi) || hotplug {
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

    use super::super::super::test_support::{context, convert_err, convert_ok, convert_with};
    use super::device_name;
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
            // "d" names no bus: KubeVirt's amd64 default is sata.
            [
                ("vda", "virtio"),
                ("sda", "sata"),
                ("sdb", "scsi"),
                ("sdc", "sata"),
                ("sdd", "sata")
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
            .filter(|t| *t != "pci")
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
    fn hotplug_gets_a_virtio_scsi_controller_unless_disabled() {
        let scsi = |spec: serde_json::Value| {
            convert_ok(spec)
                .domain
                .devices
                .controllers
                .iter()
                .filter(|c| c.controller_type == "scsi")
                .map(|c| (c.index, c.model.clone().unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            scsi(json!({})),
            [(0, "virtio-non-transitional".to_string())]
        );
        assert!(scsi(json!({"domain": {"devices": {"disableHotplug": true}}})).is_empty());
    }

    #[test]
    fn hotpluggable_claims_come_from_the_hotplug_directory() {
        let spec = json!({"domain": {"devices": {"disks": [{"name": "hp", "disk": {"bus": "scsi"}}]}},
            "volumes": [{"name": "hp", "persistentVolumeClaim": {"claimName": "c", "hotpluggable": true}}]});
        let conversion = convert_ok(spec);
        let disk = &conversion.domain.devices.disks[0];
        assert_eq!(disk.disk_type, "file");
        assert_eq!(
            disk.source.as_ref().and_then(|s| s.file.as_deref()),
            Some("/var/run/kubevirt/hotplug-disks/hp.img")
        );
        assert_eq!(disk.alias.as_ref().map(|a| a.name.as_str()), Some("ua-hp"));
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
    fn device_kind_errors() {
        let cdrom = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "c", "cdrom": {"bus": "virtio"}}]}}}),
        );
        assert_eq!(
            cdrom,
            "spec.domain.devices.disks[0].cdrom.bus: a cdrom cannot use the virtio bus (use sata or scsi)"
        );
        let lun = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "l", "lun": {"bus": "scsi"}}]}},
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
    fn driver_options() {
        let spec = json!({"domain": {"cpu": {"cores": 2}, "devices": {"blockMultiQueue": true, "disks": [
            {"name": "a", "disk": {"bus": "virtio"}, "cache": "writeback", "io": "threads", "errorPolicy": "report", "serial": "SER1"},
            {"name": "b", "shareable": true, "disk": {"readonly": true, "bus": "virtio"}},
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
        assert!(
            disks[1].shareable.is_some(),
            "shareable must not be dropped"
        );
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

    /// KubeVirt's setReservation: the LUN's source names the socket of the
    /// qemu-pr-helper, which the conversion asks the launcher to start.
    #[test]
    fn a_lun_with_reservation_names_the_pr_helpers_socket() {
        let ctx = crate::convert::ConvertContext {
            block_pvcs: ["l".to_string()].into(),
            ..context()
        };
        let spec = |reservation: bool| {
            json!({"domain": {"devices": {"disks": [{"name": "l", "lun": {"bus": "scsi", "reservation": reservation}}]}},
            "volumes": [{"name": "l", "persistentVolumeClaim": {"claimName": "x"}}]})
        };
        let conversion = convert_with(spec(true), &ctx).unwrap();
        let disk = &conversion.domain.devices.disks[0];
        let xml = domxml::Domain::device_xml("disk", disk).unwrap();
        assert!(
            xml.contains("<source dev=\"/dev/l\"><reservations managed=\"no\"><source type=\"unix\" path=\"/var/run/kubevirt/daemons/pr/pr-helper.sock\" mode=\"client\"/></reservations></source>"),
            "{xml}"
        );
        assert_eq!(
            conversion.pr_helper_socket.as_deref(),
            Some(std::path::Path::new(
                "/var/run/kubevirt/daemons/pr/pr-helper.sock"
            ))
        );
        let plain = convert_with(spec(false), &ctx).unwrap();
        assert_eq!(plain.pr_helper_socket, None);
        assert!(
            plain.domain.devices.disks[0]
                .source
                .as_ref()
                .unwrap()
                .reservations
                .is_none()
        );
    }

    #[test]
    fn kubevirt_webhook_refusals_come_first() {
        let lun = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "l", "lun": {}}]}},
            "volumes": [{"name": "l", "persistentVolumeClaim": {"claimName": "x"}}]}),
        );
        assert_eq!(
            lun,
            "spec.domain.devices.disks[0].lun.bus: a LUN needs the scsi bus, not sata (KubeVirt gives a LUN without a bus sata on amd64); set bus: scsi"
        );
        let readonly = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "r", "disk": {"readonly": true}}]}},
            "volumes": [{"name": "r", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert!(
            readonly.starts_with(
                "spec.domain.devices.disks[0].disk.readonly: a read-only disk cannot be on the sata bus"
            ),
            "{readonly}"
        );
        let shared_cdrom = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "c", "cdrom": {}, "shareable": true}]}}}),
        );
        assert_eq!(
            shared_cdrom,
            "spec.domain.devices.disks[0].shareable: only a disk (not a cdrom) can be shareable"
        );
        let cbt = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "a", "cdrom": {}, "changedBlockTracking": true}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert_eq!(
            cbt,
            "spec.domain.devices.disks[0].changedBlockTracking: changed block tracking is for a writable disk, not a cdrom"
        );
        let tag = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "a", "tag": "db"}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}},
                        {"name": "ci", "cloudInitConfigDrive": {"userData": "x"}}]}),
        );
        assert!(
            tag.starts_with("spec.domain.devices.disks[0].tag: "),
            "{tag}"
        );
        // Without a ConfigDrive the tag reaches nothing and is accepted.
        convert_ok(
            json!({"domain": {"devices": {"disks": [{"name": "a", "tag": "db"}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
    }

    #[test]
    fn discard_granularity_needs_libvirt_9_7() {
        let spec = json!({"domain": {"devices": {"disks": [{"name": "a", "disk": {"bus": "virtio"},
            "blockSize": {"custom": {"logical": 512, "physical": 4096, "discardGranularity": 4096}}}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}]});
        let mut old = context();
        old.libvirt_version = Some(crate::convert::libvirt_version(9, 0, 0));
        let err = convert_with(spec.clone(), &old)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "spec.domain.devices.disks[0].blockSize.custom.discardGranularity: blockio discard_granularity needs libvirt 9.7.0 or newer; this launcher's libvirt is 9.0.0"
            )
        );
        let mut new = context();
        new.libvirt_version = Some(crate::convert::libvirt_version(10, 0, 0));
        let disk = convert_with(spec, &new)
            .unwrap_or_else(|e| panic!("{e}"))
            .domain
            .devices
            .disks
            .remove(0);
        assert_eq!(disk.blockio.and_then(|b| b.discard_granularity), Some(4096));
    }
}
