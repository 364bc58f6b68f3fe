//! What QEMU cannot do when it runs as an unprivileged user (the
//! launcher's non-root mode, or a session daemon behind `--connect`),
//! found before a sync changes anything, so that it is refused with the
//! reason instead of failing halfway through a start:
//!
//! - a tap the user may not attach to (the kernel lets a process without
//!   CAP_NET_ADMIN open an existing tap only if the tap's owner and group,
//!   where set, are its own);
//! - real-time vCPU scheduling (needs CAP_SYS_NICE);
//! - hugepages without a hugetlbfs the user may write to;
//! - a disk image or block device the user may not open as the guest
//!   needs it (checked once the sync made its own files, and for a
//!   hotplugged volume before the first live change);
//! - a host device (VFIO) whose group node the user may not open, or whose
//!   pinned guest memory is above the locked-memory limit the user cannot
//!   raise;
//! - a tap that does not exist (creating one needs CAP_NET_ADMIN).
//!
//! Live changes (`sync` of a running domain) are checked as a whole by
//! [`check_live_steps`] before the first step runs.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::domxml::{Disk, Domain, HostDev, ScaledInteger};
use crate::hotplug::plan::Step;

/// The user QEMU runs as: the launcher's effective ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    /// The effective group and the supplementary groups.
    pub groups: Vec<u32>,
}

impl Identity {
    /// This process's identity (`/proc/self/status`).
    pub fn current() -> Identity {
        let (uid, gid) = crate::os::effective_ids();
        let mut groups = vec![gid];
        if let Ok(status) = fs::read_to_string("/proc/self/status")
            && let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:"))
        {
            groups.extend(
                line.split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
        Identity { uid, groups }
    }
}

/// What the domain asks for that an unprivileged QEMU cannot have, before
/// anything is created.
pub fn check_domain(domain: &Domain) -> Result<(), String> {
    if let Some(tune) = &domain.cputune
        && let Some(sched) = tune
            .vcpusched
            .iter()
            .find(|s| s.scheduler == "fifo" || s.scheduler == "rr")
    {
        return Err(format!(
            "real-time vCPU scheduling ({} for vCPUs {}) needs CAP_SYS_NICE, which QEMU does not have when it runs as the launcher's unprivileged user; \
             remove spec.domain.cpu.realtime, or run the launcher as root",
            sched.scheduler, sched.vcpus
        ));
    }
    if domain
        .memory_backing
        .as_ref()
        .is_some_and(|m| m.hugepages.is_some())
    {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let hugetlbfs = hugetlbfs_mounts(&mounts);
        if !hugetlbfs
            .iter()
            .any(|m| crate::os::may_write_dir(Path::new(m)))
        {
            return Err(format!(
                "hugepages need a hugetlbfs mount the launcher's user may write to, as a KubeVirt pod provides; {}; \
                 mount one writable for this user, or run the launcher as root",
                if hugetlbfs.is_empty() {
                    "none is mounted".to_string()
                } else {
                    format!("{} is not writable", hugetlbfs.join(", "))
                }
            ));
        }
    }
    Ok(())
}

/// The taps among `taps` that `who` may not attach to, or that do not
/// exist: the launcher cannot create them without CAP_NET_ADMIN, and a
/// missing one found only when its interface is plugged in would fail a
/// live change halfway.
pub fn check_taps(taps: &[String], who: &Identity) -> Result<(), String> {
    check_taps_in(Path::new("/sys/class/net"), taps, who)
}

fn check_taps_in(net: &Path, taps: &[String], who: &Identity) -> Result<(), String> {
    for tap in taps {
        let dir = net.join(tap);
        if !dir.exists() {
            return Err(format!(
                "tap {tap} does not exist, and QEMU runs as the launcher's unprivileged user (uid {}), \
                 which cannot create it (that needs CAP_NET_ADMIN in the pod's network namespace); \
                 create it for this user (ip tuntap add dev {tap} mode tap user {}), or run the launcher as root",
                who.uid, who.uid
            ));
        }
        // Only tun/tap devices have tun_flags.
        if !dir.join("tun_flags").exists() {
            continue;
        }
        let read = |name: &str| -> Option<i64> {
            fs::read_to_string(dir.join(name))
                .ok()
                .and_then(|v| v.trim().parse().ok())
        };
        let (owner, group) = (read("owner").unwrap_or(-1), read("group").unwrap_or(-1));
        if let Some(why) = tap_refusal(owner, group, who) {
            return Err(format!(
                "QEMU runs as the launcher's unprivileged user (uid {}) and may not open tap {tap}: {why}; \
                 create it for this user (ip tuntap add dev {tap} mode tap user {}), or run the launcher as root",
                who.uid, who.uid
            ));
        }
    }
    Ok(())
}

/// The kernel's rule for attaching to an existing tap without
/// CAP_NET_ADMIN (tun_not_capable): its owner and group, each where set,
/// must be the caller's. `-1` means not set.
///
/// In non-root mode the launcher sees ids through its user namespace,
/// which maps only its own user and group: any other id reads as the
/// overflow id (65534). An owner that reads so is someone else; a group
/// that reads so is refused unless one of the caller's own groups reads
/// so too (then the two cannot be told apart, and QEMU's start says).
fn tap_refusal(owner: i64, group: i64, who: &Identity) -> Option<String> {
    let overflow = overflow_ids();
    if owner >= 0 && owner != i64::from(who.uid) {
        return Some(if owner == overflow.0 {
            "it belongs to another user".to_string()
        } else {
            format!("it belongs to uid {owner}")
        });
    }
    if group >= 0 && !who.groups.iter().any(|g| i64::from(*g) == group) {
        return Some(if group == overflow.1 {
            "it belongs to a group of another user".to_string()
        } else {
            format!("it belongs to group {group}")
        });
    }
    None
}

/// The ids the kernel shows for unmapped users and groups.
fn overflow_ids() -> (i64, i64) {
    let read = |name: &str| {
        fs::read_to_string(format!("/proc/sys/kernel/{name}"))
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(65534)
    };
    (read("overflowuid"), read("overflowgid"))
}

/// Every disk of the domain that QEMU, running as this user, could not
/// open as the guest uses it (read-only disks for reading, the others for
/// reading and writing). Run once the sync's own files exist.
pub fn check_disks(domain: &Domain) -> Result<(), String> {
    check_disk_list(domain.devices.disks.iter())
}

fn check_disk_list<'a>(disks: impl Iterator<Item = &'a Disk>) -> Result<(), String> {
    let mut refused = Vec::new();
    for disk in disks {
        let Some(source) = &disk.source else { continue };
        let Some(path) = source.file.as_deref().or(source.dev.as_deref()) else {
            continue;
        };
        let write = disk.readonly.is_none() && disk.device.as_deref() != Some("cdrom");
        if let Err(e) = OpenOptions::new().read(true).write(write).open(path) {
            refused.push(format!(
                "{path} ({}: {})",
                if write { "read-write" } else { "read-only" },
                reason(&e)
            ));
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "QEMU runs as the launcher's unprivileged user (uid {}) and could not open {}; \
             give this user access to them, or run the launcher as root",
            crate::os::effective_ids().0,
            refused.join(", ")
        ))
    }
}

fn reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::NotFound => "no such file".into(),
        _ => e.to_string(),
    }
}

/// Where VFIO host devices and their group nodes are, and the limit on
/// locked memory QEMU inherits (a test points elsewhere).
#[derive(Debug, Clone)]
pub struct VfioHost {
    /// `/sys/bus/pci/devices`.
    pub pci: PathBuf,
    /// `/sys/bus/mdev/devices`.
    pub mdev: PathBuf,
    /// `/dev/vfio`: the container node `vfio` and one node per IOMMU group.
    pub dev: PathBuf,
    /// The hard RLIMIT_MEMLOCK in bytes; `None` when unlimited.
    pub memlock: Option<u64>,
}

impl VfioHost {
    pub fn system() -> VfioHost {
        VfioHost {
            pci: PathBuf::from("/sys/bus/pci/devices"),
            mdev: PathBuf::from("/sys/bus/mdev/devices"),
            dev: PathBuf::from("/dev/vfio"),
            memlock: crate::os::memlock_hard_limit(),
        }
    }
}

/// What libvirt adds to the guest memory for the locked-memory limit of a
/// domain with a VFIO device (qemuDomainGetMemLockLimitBytes).
const VFIO_MEMLOCK_EXTRA: u64 = 1 << 30;

/// The guest memory libvirt pins for VFIO: the domain's maximum memory
/// (with memory hotplug) or its memory, in bytes.
fn pinned_memory(domain: &Domain) -> u64 {
    let max = domain.max_memory.as_ref().and_then(|m| {
        ScaledInteger {
            unit: m.unit.clone(),
            value: m.value,
        }
        .to_bytes()
    });
    max.unwrap_or(0).max(domain.memory.to_bytes().unwrap_or(0))
}

/// Host devices that QEMU, running as `who`, could not use: each needs
/// its IOMMU group's node in /dev/vfio (and the container node) readable
/// and writable by the user, and the domain's memory, which VFIO pins,
/// must fit under the locked-memory limit that libvirt can only lower for
/// an unprivileged QEMU. A device that is not on the host is left to the
/// presence check (`hotplug::ready`), which names it.
pub fn check_host_devices(
    hostdevs: &[&HostDev],
    pinned: u64,
    host: &VfioHost,
    who: &Identity,
) -> Result<(), String> {
    for dev in hostdevs {
        let name = dev.vmi_name();
        let address = dev.host_address();
        let (sysfs, what) = match dev.hostdev_type.as_str() {
            "mdev" => (host.mdev.join(&address), "mediated device"),
            _ => (host.pci.join(&address), "PCI device"),
        };
        if !sysfs.exists() {
            continue;
        }
        let needs = |need: String, fix: &str| {
            format!(
                "host device {name:?} ({what} {address}): QEMU runs as the launcher's unprivileged user (uid {}) and needs {need}; \
                 {fix}, or run the launcher as root",
                who.uid,
            )
        };
        let group = fs::read_link(sysfs.join("iommu_group"))
            .ok()
            .and_then(|link| link.file_name().map(|g| g.to_string_lossy().into_owned()))
            .ok_or_else(|| {
                needs(format!(
                    "an IOMMU group to open through VFIO, and {} has none (no IOMMU, or the device is not bound to vfio)",
                    sysfs.display()
                ), "bind it to vfio-pci on the host, as KubeVirt's device plugins do")
            })?;
        for node in [host.dev.join("vfio"), host.dev.join(&group)] {
            if let Some(why) = node_refusal(&node, who) {
                return Err(needs(
                    format!("{} readable and writable ({why})", node.display()),
                    "give the node to this user, as KubeVirt's device plugins do",
                ));
            }
        }
        let wanted = pinned.saturating_add(VFIO_MEMLOCK_EXTRA);
        if let Some(limit) = host.memlock
            && limit < wanted
        {
            return Err(needs(
                format!(
                    "a locked-memory limit (RLIMIT_MEMLOCK) of at least {} MiB, because VFIO pins the guest's memory \
                 (its {} MiB plus 1 GiB, as libvirt sets it), and the launcher's hard limit is {} MiB, \
                 which only CAP_SYS_RESOURCE can raise",
                    wanted >> 20,
                    pinned >> 20,
                    limit >> 20
                ),
                "raise the hard limit for the launcher (prlimit --memlock, or the container's ulimit)",
            ));
        }
    }
    Ok(())
}

/// Why `who` may not open device node `path` for reading and writing, by
/// its owner, group and mode (as the kernel decides without ACLs).
fn node_refusal(path: &Path, who: &Identity) -> Option<String> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return Some(reason(&e)),
    };
    let mode = meta.mode();
    let bits = if meta.uid() == who.uid {
        (mode >> 6) & 0o7
    } else if who.groups.contains(&meta.gid()) {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    };
    (bits & 0o6 != 0o6).then(|| {
        format!(
            "it is owned by uid {}, group {}, mode {:04o}",
            meta.uid(),
            meta.gid(),
            mode & 0o7777
        )
    })
}

/// Live changes to a running domain that QEMU, running as `who`, could
/// not make, checked before the first one runs: the host devices to plug
/// in, and the images of hotplugged volumes (opened as the guest will use
/// them; `desired` has their disks).
pub fn check_live_steps(
    steps: &[Step],
    live: &Domain,
    desired: &Domain,
    host: &VfioHost,
    who: &Identity,
) -> Result<(), String> {
    let alias_is = |alias: &Option<crate::domxml::Alias>, wanted: &str| {
        alias.as_ref().is_some_and(|a| a.name == wanted)
    };
    let mut hostdevs = Vec::new();
    let mut disks = Vec::new();
    for step in steps {
        match step {
            Step::AttachHostDevice { alias, .. } => hostdevs.extend(
                desired
                    .devices
                    .hostdevs
                    .iter()
                    .filter(|h| alias_is(&h.alias, alias)),
            ),
            Step::AttachDisk { alias, .. } => disks.extend(
                desired
                    .devices
                    .disks
                    .iter()
                    .filter(|d| alias_is(&d.alias, alias)),
            ),
            _ => {}
        }
    }
    check_host_devices(&hostdevs, pinned_memory(live), host, who)?;
    check_disk_list(disks.into_iter())
}

/// The host devices a domain starts with, checked before it is defined.
pub fn check_domain_host_devices(
    domain: &Domain,
    host: &VfioHost,
    who: &Identity,
) -> Result<(), String> {
    // USB devices are opened through their /dev/bus/usb node, which
    // KubeVirt's USB device plugin hands to QEMU's user; only VFIO devices
    // need the checks here.
    let hostdevs: Vec<&HostDev> = domain
        .devices
        .hostdevs
        .iter()
        .filter(|d| d.hostdev_type != "usb")
        .collect();
    check_host_devices(&hostdevs, pinned_memory(domain), host, who)
}

/// The mount points of hugetlbfs filesystems in a mounts table.
fn hugetlbfs_mounts(mounts: &str) -> Vec<String> {
    mounts
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let (_, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
            (fstype == "hugetlbfs").then(|| target.replace("\\040", " "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domxml::{CpuTune, Disk, DiskSource, Flag, HugePages, MemoryBacking, VcpuSched};
    use crate::scratch::ScratchDir;

    fn me() -> Identity {
        Identity {
            uid: 1000,
            groups: vec![1000, 27],
        }
    }

    #[test]
    fn taps_follow_the_kernels_rule() {
        assert_eq!(tap_refusal(-1, -1, &me()), None);
        assert_eq!(tap_refusal(1000, -1, &me()), None);
        assert_eq!(tap_refusal(-1, 27, &me()), None);
        assert_eq!(tap_refusal(1000, 27, &me()), None);
        assert_eq!(
            tap_refusal(0, -1, &me()).as_deref(),
            Some("it belongs to uid 0")
        );
        assert_eq!(
            tap_refusal(1000, 5, &me()).as_deref(),
            Some("it belongs to group 5")
        );
        // Ids the user namespace does not map read as the overflow id.
        let (uid, gid) = overflow_ids();
        assert_eq!(
            tap_refusal(uid, -1, &me()).as_deref(),
            Some("it belongs to another user")
        );
        assert_eq!(
            tap_refusal(-1, gid, &me()).as_deref(),
            Some("it belongs to a group of another user")
        );
        // A tap that does not exist cannot be created by this user: said
        // before anything starts, not when its interface is plugged in.
        let net = ScratchDir::new("unpriv-net");
        fs::create_dir_all(net.join("eth0")).unwrap();
        assert_eq!(check_taps_in(&net, &["eth0".into()], &me()), Ok(()));
        assert_eq!(
            check_taps_in(&net, &["tap1".into()], &me()),
            Err("tap tap1 does not exist, and QEMU runs as the launcher's unprivileged user (uid 1000), \
                 which cannot create it (that needs CAP_NET_ADMIN in the pod's network namespace); \
                 create it for this user (ip tuntap add dev tap1 mode tap user 1000), or run the launcher as root"
                .to_string())
        );
    }

    #[test]
    fn a_host_device_without_an_iommu_group_is_refused_at_start() {
        let root = ScratchDir::new("unpriv-vfio");
        fs::create_dir_all(root.join("pci/0000:81:00.1")).unwrap();
        let host = VfioHost {
            pci: root.join("pci"),
            mdev: root.join("mdev"),
            dev: root.join("dev"),
            memlock: None,
        };
        let domain = Domain::from_xml(
            r#"<domain type='kvm'><name>vm</name><memory unit='KiB'>524288</memory><os><type>hvm</type></os><devices>
            <hostdev mode="subsystem" type="pci" managed="no"><source><address domain="0x0000" bus="0x81" slot="0x00" function="0x1"/></source><alias name="ua-hostdevice-qat1"/></hostdev>
            <hostdev mode="subsystem" type="pci" managed="no"><source><address domain="0x0000" bus="0x82" slot="0x00" function="0x0"/></source><alias name="ua-hostdevice-gone"/></hostdev>
            </devices></domain>"#,
        )
        .unwrap();
        let err = check_domain_host_devices(&domain, &host, &me()).unwrap_err();
        assert_eq!(
            err,
            format!(
                "host device \"hostdevice-qat1\" (PCI device 0000:81:00.1): QEMU runs as the launcher's unprivileged user (uid 1000) and needs \
                 an IOMMU group to open through VFIO, and {}/pci/0000:81:00.1 has none (no IOMMU, or the device is not bound to vfio); \
                 bind it to vfio-pci on the host, as KubeVirt's device plugins do, or run the launcher as root",
                root.display()
            )
        );
        // A device that is not on the host is the presence check's to name.
        fs::remove_dir_all(root.join("pci/0000:81:00.1")).unwrap();
        assert_eq!(check_domain_host_devices(&domain, &host, &me()), Ok(()));
    }

    #[test]
    fn real_time_scheduling_is_refused() {
        let mut domain = Domain::default();
        assert!(check_domain(&domain).is_ok());
        domain.cputune = Some(CpuTune {
            vcpusched: vec![VcpuSched {
                vcpus: "0-1".into(),
                scheduler: "fifo".into(),
                priority: Some(1),
            }],
            ..CpuTune::default()
        });
        let err = check_domain(&domain).unwrap_err();
        assert!(
            err.contains("CAP_SYS_NICE") && err.contains("vCPUs 0-1"),
            "{err}"
        );
    }

    #[test]
    fn hugepages_need_a_writable_hugetlbfs() {
        assert_eq!(
            hugetlbfs_mounts(
                "proc /proc proc rw 0 0\nhugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"
            ),
            vec!["/dev/hugepages".to_string()]
        );
        let domain = Domain {
            memory_backing: Some(MemoryBacking {
                hugepages: Some(HugePages::default()),
                ..MemoryBacking::default()
            }),
            ..Domain::default()
        };
        // Whatever this host has, the answer names what is missing.
        if let Err(e) = check_domain(&domain) {
            assert!(e.contains("hugetlbfs"), "{e}");
        }
    }

    #[test]
    fn disks_are_opened_as_the_guest_uses_them() {
        let dir = ScratchDir::new("unpriv-disks");
        let image = dir.join("disk.img");
        fs::write(&image, b"x").unwrap();
        let disk = |path: &Path, readonly: bool| Disk {
            disk_type: "file".into(),
            source: Some(DiskSource {
                file: Some(path.to_string_lossy().into_owned()),
                ..DiskSource::default()
            }),
            readonly: readonly.then(Flag::default),
            ..Disk::default()
        };
        let mut domain = Domain::default();
        domain.devices.disks = vec![disk(&image, false), disk(&image, true)];
        assert!(check_disks(&domain).is_ok());
        domain
            .devices
            .disks
            .push(disk(&dir.join("missing.img"), true));
        let err = check_disks(&domain).unwrap_err();
        assert!(
            err.contains("missing.img (read-only: no such file)"),
            "{err}"
        );
    }
}
