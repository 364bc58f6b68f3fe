//! The steps that bring a running domain to what a VMI describes.
//!
//! The live domain (libvirt's live XML) is compared with the domain the
//! converter made of the VMI, device by device, by alias (`ua-<name>` for
//! what the VMI names): hotplugged disks (those whose image is in the
//! hotplug directory), interfaces and host devices present in one and not
//! the other are attached or detached; the enabled vCPUs and the virtio-mem
//! device's requested size are set to what the VMI asks. Detaches come
//! first, so that targets and PCIe ports are free for what is attached.
//!
//! Planning only reads: whatever cannot be done is refused here, before a
//! single step runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use super::changes::NotLive;
use crate::domxml::{self, Address, Disk, Domain, HostDev, Interface, MemoryDevice};

/// KubeVirt's prefix for the devices a VMI names.
const USER_ALIAS: &str = "ua-";
/// The aliases KubeVirt gives host devices (generic, GPU, SR-IOV).
const HOSTDEV_ALIASES: [&str; 3] = ["ua-hostdevice-", "ua-gpu-", "ua-sriov-"];

/// What the domain should become.
pub struct Desired<'a> {
    /// The converter's domain for the VMI.
    pub domain: &'a Domain,
    /// `--hotplug-disk-dir`: disks whose image is here are hotplugged.
    pub hotplug_dir: &'a Path,
    /// The guest memory the VMI asks for, with the JSON path it came from.
    pub guest_memory: Option<(u64, String)>,
    /// Disk name → JSON path of the disk in the VMI, for messages.
    pub disk_paths: BTreeMap<String, String>,
    /// What QEMU allows with vCPUs when it emulates them (TCG).
    pub tcg: Tcg,
}

/// vCPUs under emulation (domain type `qemu`): what the running stack can
/// take away, and how many vCPUs QEMU can still make. Under KVM none of
/// this applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tcg {
    /// Why this stack cannot take a vCPU away live (the versions it has
    /// and needs); `None` where it can.
    pub no_removal: Option<String>,
    /// vCPU threads QEMU made since it started (those it started with and
    /// every one added live); `None` when the launcher does not know.
    /// Each took one of QEMU's TCG translation contexts, of which there
    /// are as many as the domain's maximum vCPUs, and a vCPU taken away
    /// never gives its context back: one thread more than that and QEMU
    /// aborts (`tcg_register_thread: assertion failed: (n <
    /// tcg_max_ctxs)`), the guest with it.
    pub vcpu_threads: Option<u32>,
}

/// Where a hotplugged disk's data is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    File,
    Block,
}

/// One live change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    DetachDisk {
        volume: String,
        alias: String,
        target: String,
        xml: String,
    },
    AttachDisk {
        volume: String,
        alias: String,
        target: String,
        bus: String,
        image: String,
        kind: ImageKind,
        xml: String,
    },
    DetachInterface {
        name: String,
        alias: String,
        mac: Option<String>,
        xml: String,
    },
    AttachInterface {
        name: String,
        alias: String,
        mac: Option<String>,
        xml: String,
    },
    DetachHostDevice {
        name: String,
        alias: String,
        host_address: String,
        xml: String,
    },
    AttachHostDevice {
        name: String,
        alias: String,
        host_address: String,
        /// "pci" or "mdev".
        host_type: String,
        xml: String,
    },
    SetVcpus {
        from: u32,
        to: u32,
    },
    ResizeMemory {
        /// Guest memory in bytes before and after (boot memory plus what
        /// virtio-mem provides).
        from: u64,
        to: u64,
        xml: String,
    },
}

/// A step as the `sync` reply lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub change: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
}

impl Step {
    pub fn change(&self) -> Change {
        let base = |change| Change {
            change,
            name: None,
            alias: None,
            target: None,
            bus: None,
            mac: None,
            host_address: None,
            from: None,
            to: None,
        };
        match self {
            Step::DetachDisk {
                volume,
                alias,
                target,
                ..
            } => Change {
                name: Some(volume.clone()),
                alias: Some(alias.clone()),
                target: Some(target.clone()),
                ..base("detach-disk")
            },
            Step::AttachDisk {
                volume,
                alias,
                target,
                bus,
                ..
            } => Change {
                name: Some(volume.clone()),
                alias: Some(alias.clone()),
                target: Some(target.clone()),
                bus: Some(bus.clone()),
                ..base("attach-disk")
            },
            Step::DetachInterface {
                name, alias, mac, ..
            } => Change {
                name: Some(name.clone()),
                alias: Some(alias.clone()),
                mac: mac.clone(),
                ..base("detach-interface")
            },
            Step::AttachInterface {
                name, alias, mac, ..
            } => Change {
                name: Some(name.clone()),
                alias: Some(alias.clone()),
                mac: mac.clone(),
                ..base("attach-interface")
            },
            Step::DetachHostDevice {
                name,
                alias,
                host_address,
                ..
            } => Change {
                name: Some(name.clone()),
                alias: Some(alias.clone()),
                host_address: Some(host_address.clone()),
                ..base("detach-host-device")
            },
            Step::AttachHostDevice {
                name,
                alias,
                host_address,
                ..
            } => Change {
                name: Some(name.clone()),
                alias: Some(alias.clone()),
                host_address: Some(host_address.clone()),
                ..base("attach-host-device")
            },
            Step::SetVcpus { from, to } => Change {
                from: Some(u64::from(*from)),
                to: Some(u64::from(*to)),
                ..base("set-vcpus")
            },
            Step::ResizeMemory { from, to, .. } => Change {
                from: Some(*from),
                to: Some(*to),
                ..base("resize-memory")
            },
        }
    }

    /// "attach-disk hp1", "set-vcpus 1 → 2": for logs and error messages.
    pub fn describe(&self) -> String {
        let c = self.change();
        match (c.name, c.from, c.to) {
            (Some(name), _, _) => format!("{} {name}", c.change),
            (None, Some(from), Some(to)) => format!("{} {from} → {to}", c.change),
            _ => c.change.to_string(),
        }
    }

    /// Removes a device: done only once libvirt says the guest let it go.
    pub fn is_detach(&self) -> bool {
        matches!(
            self,
            Step::DetachDisk { .. } | Step::DetachInterface { .. } | Step::DetachHostDevice { .. }
        )
    }

    /// The alias of the device the step plugs or unplugs.
    pub fn alias(&self) -> Option<&str> {
        match self {
            Step::DetachDisk { alias, .. }
            | Step::AttachDisk { alias, .. }
            | Step::DetachInterface { alias, .. }
            | Step::AttachInterface { alias, .. }
            | Step::DetachHostDevice { alias, .. }
            | Step::AttachHostDevice { alias, .. } => Some(alias),
            Step::SetVcpus { .. } | Step::ResizeMemory { .. } => None,
        }
    }
}

/// Every step from `live` to `desired`, detaches first; or why the change
/// cannot be made live.
pub fn plan(live: &Domain, desired: &Desired) -> Result<Vec<Step>, NotLive> {
    let mut detach = Vec::new();
    let mut attach = Vec::new();
    plan_disks(live, desired, &mut detach, &mut attach)?;
    plan_interfaces(live, desired.domain, &mut detach, &mut attach)?;
    plan_host_devices(live, desired.domain, &mut detach, &mut attach)?;
    let mut steps = detach;
    steps.extend(attach);
    steps.extend(plan_vcpus(live, desired.domain, &desired.tcg)?);
    steps.extend(plan_memory(live, desired)?);
    Ok(steps)
}

fn xml_error(e: domxml::DomXmlError) -> NotLive {
    NotLive {
        path: String::new(),
        message: e.message,
    }
}

fn user_alias(alias: &Option<domxml::Alias>) -> Option<&str> {
    alias
        .as_ref()
        .map(|a| a.name.as_str())
        .filter(|a| a.starts_with(USER_ALIAS))
}

fn name_of(alias: &str) -> String {
    alias.trim_start_matches(USER_ALIAS).to_string()
}

/// The image of a disk whose source is in the hotplug directory.
pub fn hotplug_image(disk: &Disk, hotplug_dir: &Path) -> Option<(String, ImageKind)> {
    let source = disk.source.as_ref()?;
    let (path, kind) = match (&source.file, &source.dev) {
        (Some(file), _) => (file, ImageKind::File),
        (None, Some(dev)) => (dev, ImageKind::Block),
        (None, None) => return None,
    };
    Path::new(path)
        .starts_with(hotplug_dir)
        .then(|| (path.clone(), kind))
}

fn plan_disks(
    live: &Domain,
    desired: &Desired,
    detach: &mut Vec<Step>,
    attach: &mut Vec<Step>,
) -> Result<(), NotLive> {
    let wanted: BTreeSet<&str> = desired
        .domain
        .devices
        .disks
        .iter()
        .filter_map(|d| user_alias(&d.alias))
        .collect();
    let present: BTreeSet<&str> = live
        .devices
        .disks
        .iter()
        .filter_map(|d| user_alias(&d.alias))
        .collect();
    for disk in &live.devices.disks {
        let Some(alias) = user_alias(&disk.alias) else {
            continue;
        };
        if wanted.contains(alias) || hotplug_image(disk, desired.hotplug_dir).is_none() {
            continue;
        }
        detach.push(Step::DetachDisk {
            volume: name_of(alias),
            alias: alias.to_string(),
            target: disk.target.dev.clone(),
            xml: Domain::device_xml("disk", &for_detach_disk(disk)).map_err(xml_error)?,
        });
    }
    // Targets stay taken until the guest lets a detached disk go.
    let mut taken = Taken::of(live);
    for disk in &desired.domain.devices.disks {
        let Some(alias) = user_alias(&disk.alias) else {
            continue;
        };
        if present.contains(alias) {
            continue;
        }
        let volume = name_of(alias);
        let path = desired
            .disk_paths
            .get(&volume)
            .cloned()
            .unwrap_or_else(|| "spec.domain.devices.disks".to_string());
        let Some((image, kind)) = hotplug_image(disk, desired.hotplug_dir) else {
            return Err(NotLive {
                path,
                message: format!(
                    "disk {volume:?} is not attached to the running domain and its volume is not hotpluggable; it needs a restart of the VMI"
                ),
            });
        };
        let bus = disk.target.bus.clone().unwrap_or_default();
        if bus != "virtio" && bus != "scsi" {
            return Err(NotLive {
                path: format!("{path}.disk.bus"),
                message: format!(
                    "disk {volume:?} is on the {bus} bus; only scsi and virtio disks can be plugged into a running VMI"
                ),
            });
        }
        if bus == "scsi" && !live.devices.controllers.iter().any(is_scsi_controller) {
            return Err(NotLive {
                path: format!("{path}.disk.bus"),
                message: format!(
                    "disk {volume:?} is a scsi disk, but the running domain has no virtio-scsi controller (it started with devices.disableHotplug); use the virtio bus or restart the VMI"
                ),
            });
        }
        let disk = taken.retarget(disk);
        attach.push(Step::AttachDisk {
            volume,
            alias: alias.to_string(),
            target: disk.target.dev.clone(),
            bus,
            image,
            kind,
            xml: Domain::device_xml("disk", &disk).map_err(xml_error)?,
        });
    }
    Ok(())
}

fn is_scsi_controller(c: &domxml::Controller) -> bool {
    c.controller_type == "scsi" && c.index == 0
}

/// The live element as libvirt's detach wants it: the device it names,
/// without the run-time detail of the backing chain.
fn for_detach_disk(disk: &Disk) -> Disk {
    let mut disk = disk.clone();
    disk.backing_store = None;
    if let Some(source) = disk.source.as_mut() {
        source.index = None;
    }
    disk
}

/// The disk targets (vdX, sdX) and SCSI units the running domain uses.
struct Taken {
    targets: BTreeSet<String>,
    scsi_units: BTreeSet<String>,
}

impl Taken {
    fn of(live: &Domain) -> Taken {
        Taken {
            targets: live
                .devices
                .disks
                .iter()
                .map(|d| d.target.dev.clone())
                .collect(),
            scsi_units: live
                .devices
                .disks
                .iter()
                .filter(|d| d.target.bus.as_deref() == Some("scsi"))
                .filter_map(|d| d.address.as_ref())
                .filter(|a| a.controller.as_deref().unwrap_or("0") == "0")
                .filter_map(|a| a.unit.clone())
                .collect(),
        }
    }

    /// `disk` with a target (and SCSI unit) no device of the running
    /// domain has. The converter names disks by their place in the VMI,
    /// which shifts when disks come and go; a running guest's disks keep
    /// theirs, so a new disk takes the first free name.
    fn retarget(&mut self, disk: &Disk) -> Disk {
        let mut disk = disk.clone();
        let prefix = if disk.target.dev.starts_with("vd") {
            "vd"
        } else {
            "sd"
        };
        let scsi = disk.target.bus.as_deref() == Some("scsi");
        let free = |index: usize, taken: &Taken| {
            let name_used = taken.targets.contains(&device_name(prefix, index));
            let unit_used = scsi && taken.scsi_units.contains(&index.to_string());
            !name_used && !unit_used
        };
        let current = name_index(&disk.target.dev, prefix);
        let index = match current {
            Some(i) if free(i, self) => i,
            _ => (0..).find(|i| free(*i, self)).unwrap_or(0),
        };
        disk.target.dev = device_name(prefix, index);
        if scsi {
            // KubeVirt's unit is the index of the sdX name, on controller 0.
            disk.address = Some(Address {
                address_type: "drive".to_string(),
                controller: Some("0".to_string()),
                bus: Some("0".to_string()),
                target: Some("0".to_string()),
                unit: Some(index.to_string()),
                ..Address::default()
            });
            self.scsi_units.insert(index.to_string());
        }
        self.targets.insert(disk.target.dev.clone());
        disk
    }
}

/// Linux's naming: a…z, aa…zz, … (the converter's `device_name`).
fn device_name(prefix: &str, index: usize) -> String {
    let mut letters = Vec::new();
    let mut n = index;
    loop {
        letters.push(b'a' + u8::try_from(n % 26).unwrap_or(0));
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    letters.reverse();
    format!("{prefix}{}", String::from_utf8_lossy(&letters))
}

/// The index `device_name` would give `name`.
fn name_index(name: &str, prefix: &str) -> Option<usize> {
    let letters = name.strip_prefix(prefix)?;
    if letters.is_empty() || !letters.bytes().all(|b| b.is_ascii_lowercase()) {
        return None;
    }
    let mut n: usize = 0;
    for b in letters.bytes() {
        n = n.checked_mul(26)?.checked_add(usize::from(b - b'a') + 1)?;
    }
    Some(n - 1)
}

fn plan_interfaces(
    live: &Domain,
    desired: &Domain,
    detach: &mut Vec<Step>,
    attach: &mut Vec<Step>,
) -> Result<(), NotLive> {
    let wanted: BTreeSet<&str> = desired
        .devices
        .interfaces
        .iter()
        .filter_map(|i| user_alias(&i.alias))
        .collect();
    let present: BTreeSet<&str> = live
        .devices
        .interfaces
        .iter()
        .filter_map(|i| user_alias(&i.alias))
        .collect();
    let mac = |i: &Interface| i.mac.as_ref().map(|m| m.address.clone());
    for nic in &live.devices.interfaces {
        if let Some(alias) = user_alias(&nic.alias)
            && !wanted.contains(alias)
        {
            detach.push(Step::DetachInterface {
                name: name_of(alias),
                alias: alias.to_string(),
                mac: mac(nic),
                xml: Domain::device_xml("interface", nic).map_err(xml_error)?,
            });
        }
    }
    for nic in &desired.devices.interfaces {
        if let Some(alias) = user_alias(&nic.alias)
            && !present.contains(alias)
        {
            attach.push(Step::AttachInterface {
                name: name_of(alias),
                alias: alias.to_string(),
                mac: mac(nic),
                xml: Domain::device_xml("interface", nic).map_err(xml_error)?,
            });
        }
    }
    Ok(())
}

fn hostdev_alias(h: &HostDev) -> Option<&str> {
    user_alias(&h.alias).filter(|a| HOSTDEV_ALIASES.iter().any(|p| a.starts_with(p)))
}

fn host_address(h: &HostDev) -> String {
    h.source
        .address
        .as_ref()
        .map(|a| a.describe())
        .unwrap_or_default()
}

fn plan_host_devices(
    live: &Domain,
    desired: &Domain,
    detach: &mut Vec<Step>,
    attach: &mut Vec<Step>,
) -> Result<(), NotLive> {
    let wanted: BTreeSet<&str> = desired
        .devices
        .hostdevs
        .iter()
        .filter_map(hostdev_alias)
        .collect();
    let present: BTreeSet<&str> = live
        .devices
        .hostdevs
        .iter()
        .filter_map(hostdev_alias)
        .collect();
    for dev in &live.devices.hostdevs {
        if let Some(alias) = hostdev_alias(dev)
            && !wanted.contains(alias)
        {
            detach.push(Step::DetachHostDevice {
                name: name_of(alias),
                alias: alias.to_string(),
                host_address: host_address(dev),
                xml: Domain::device_xml("hostdev", dev).map_err(xml_error)?,
            });
        }
    }
    for dev in &desired.devices.hostdevs {
        if let Some(alias) = hostdev_alias(dev)
            && !present.contains(alias)
        {
            attach.push(Step::AttachHostDevice {
                name: name_of(alias),
                alias: alias.to_string(),
                host_address: host_address(dev),
                host_type: dev.hostdev_type.clone(),
                xml: Domain::device_xml("hostdev", dev).map_err(xml_error)?,
            });
        }
    }
    Ok(())
}

/// (enabled, maximum) vCPUs of a domain.
pub fn vcpus(domain: &Domain) -> (u32, u32) {
    let max = domain.vcpu.as_ref().map_or(1, |v| v.count);
    let enabled = match (&domain.vcpus, &domain.vcpu) {
        (Some(list), _) if !list.vcpu.is_empty() => {
            u32::try_from(list.vcpu.iter().filter(|v| v.enabled == "yes").count())
                .unwrap_or(u32::MAX)
        }
        (_, Some(v)) => v.current.unwrap_or(v.count),
        (_, None) => 1,
    };
    (enabled, max)
}

fn plan_vcpus(live: &Domain, desired: &Domain, tcg: &Tcg) -> Result<Option<Step>, NotLive> {
    let (now, live_max) = vcpus(live);
    let (want, max) = vcpus(desired);
    if max != live_max {
        return Err(NotLive {
            path: "spec.domain.cpu".to_string(),
            message: format!(
                "the running domain has at most {live_max} vCPUs and this VMI asks for at most {max}; it needs a restart of the VMI"
            ),
        });
    }
    let refused = |why: String| NotLive {
        path: "spec.domain.cpu.sockets".to_string(),
        message: format!(
            "going from {now} to {want} vCPUs needs a restart of the VMI: the domain is emulated (TCG), {why}"
        ),
    };
    if live.domain_type == EMULATED {
        if want < now {
            if let Some(stack) = &tcg.no_removal {
                return Err(refused(format!(
                    "and there QEMU takes a vCPU from the guest without ever telling libvirt it is gone (no DEVICE_DELETED event for the vCPU), so libvirt keeps counting it: {stack}; adding vCPUs works live"
                )));
            }
            if tcg.vcpu_threads.is_none() {
                return Err(refused(
                    "and this launcher does not know how many vCPUs QEMU made since the domain started (it did not start the domain, nor was it handed the count); without that count a later increase could make QEMU abort, as QEMU never gives a removed vCPU's TCG context back; adding vCPUs works live".to_string(),
                ));
            }
        }
        if want > now
            && let Some(threads) = tcg.vcpu_threads
            && threads.saturating_add(want - now) > max
        {
            return Err(refused(format!(
                "QEMU made {threads} vCPUs since the domain started and each holds one of its {max} TCG translation contexts for good (a vCPU taken away live does not give its context back): {} more would make QEMU abort and the guest with it",
                want - now
            )));
        }
    }
    Ok((want != now).then_some(Step::SetVcpus {
        from: now,
        to: want,
    }))
}

/// The libvirt daemon that completes taking a vCPU away under TCG: asked
/// again after its unplug timed out, libvirt 11.3 finds the vCPU gone from
/// QEMU and counts it gone (libvirt 9.0 fails on it for good).
pub const TCG_VCPU_REMOVAL_SINCE: (u32, u32, u32) = (11, 3, 0);
/// The QEMU it was seen with (10.0.2); QEMU 7.2 never frees the vCPU.
pub const TCG_VCPU_REMOVAL_QEMU_SINCE: (u32, u32, u32) = (10, 0, 0);

/// Why the connected stack cannot take a vCPU away under TCG (naming the
/// versions it has and needs), from the daemon's version ("11.3.0") and
/// its hypervisor's ("QEMU 10.0.2"); `None` when it can.
pub fn tcg_vcpu_removal(daemon_version: &str, hypervisor_version: &str) -> Option<String> {
    use crate::hypervisor::state::{libvirt_version, parse_libvirt_version};
    let at_least = |dotted: &str, (major, minor, micro): (u32, u32, u32)| {
        parse_libvirt_version(dotted).is_some_and(|v| v >= libvirt_version(major, minor, micro))
    };
    let qemu = hypervisor_version
        .strip_prefix("QEMU ")
        .unwrap_or(hypervisor_version);
    if at_least(daemon_version, TCG_VCPU_REMOVAL_SINCE)
        && at_least(qemu, TCG_VCPU_REMOVAL_QEMU_SINCE)
    {
        return None;
    }
    let (a, b, c) = TCG_VCPU_REMOVAL_SINCE;
    let (d, e, f) = TCG_VCPU_REMOVAL_QEMU_SINCE;
    Some(format!(
        "taking a vCPU away live under TCG needs libvirt {a}.{b}.{c} and QEMU {d}.{e}.{f} or newer; this launcher's libvirt is {daemon_version} with {hypervisor_version}"
    ))
}

/// libvirt's domain type when QEMU emulates the CPU (TCG), not KVM.
const EMULATED: &str = "qemu";

fn plan_memory(live: &Domain, desired: &Desired) -> Result<Option<Step>, NotLive> {
    let Some((guest, path)) = &desired.guest_memory else {
        return Ok(None);
    };
    let device = live
        .devices
        .memory_devices
        .iter()
        .find(|d| d.model == "virtio-mem");
    let plugged_sizes: u64 = live
        .devices
        .memory_devices
        .iter()
        .filter_map(|d| d.target.size.as_ref().and_then(|s| s.to_bytes()))
        .sum();
    let boot = live
        .memory
        .to_bytes()
        .unwrap_or(0)
        .saturating_sub(plugged_sizes);
    let Some(device) = device else {
        if *guest == boot {
            return Ok(None);
        }
        return Err(NotLive {
            path: path.clone(),
            message: format!(
                "the running domain has {} of guest memory and no virtio-mem device; changing it live needs spec.domain.memory.maxGuest when the VMI starts, or a restart",
                mib(boot)
            ),
        });
    };
    let bytes = |v: &Option<domxml::ScaledInteger>| v.as_ref().and_then(|s| s.to_bytes());
    let size = bytes(&device.target.size).unwrap_or(0);
    let block = bytes(&device.target.block).unwrap_or(2 << 20).max(1);
    let requested = bytes(&device.target.requested).unwrap_or(0);
    if *guest < boot {
        return Err(NotLive {
            path: path.clone(),
            message: format!(
                "{} is less than the {} the guest started with; virtio-mem can only take back what it added",
                mib(*guest),
                mib(boot)
            ),
        });
    }
    let want = guest - boot;
    if want > size {
        return Err(NotLive {
            path: path.clone(),
            message: format!(
                "{} is above the maximum of {} (spec.domain.memory.maxGuest when the VMI started)",
                mib(*guest),
                mib(boot + size)
            ),
        });
    }
    if !want.is_multiple_of(block) {
        return Err(NotLive {
            path: path.clone(),
            message: format!(
                "{} is not block-aligned: it must differ from the {} the guest started with by a multiple of the {} virtio-mem block",
                mib(*guest),
                mib(boot),
                mib(block)
            ),
        });
    }
    if want == requested {
        return Ok(None);
    }
    let resized = MemoryDevice {
        target: domxml::MemoryTarget {
            requested: Some(domxml::ScaledInteger {
                unit: Some("KiB".to_string()),
                value: want / 1024,
            }),
            // Read-only, reported by libvirt.
            current: None,
            ..device.target.clone()
        },
        ..device.clone()
    };
    Ok(Some(Step::ResizeMemory {
        from: boot + requested,
        to: *guest,
        xml: Domain::device_xml("memory", &resized).map_err(xml_error)?,
    }))
}

/// Bytes as "192Mi" (or exact bytes when not whole MiB).
fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{}Mi", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests;
