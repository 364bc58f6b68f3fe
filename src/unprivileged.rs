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
//!   needs it (checked once the sync made its own files).
//!
//! Host devices (VFIO) would belong here too; this launcher refuses them
//! for every user (the VMI parser marks them unsupported).

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

use crate::domxml::Domain;

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

/// The existing taps among `taps` that `who` may not attach to. A tap
/// that does not exist is left to the network set-up, which says so.
pub fn check_taps(taps: &[String], who: &Identity) -> Result<(), String> {
    for tap in taps {
        let dir = Path::new("/sys/class/net").join(tap);
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
    let mut refused = Vec::new();
    for disk in &domain.devices.disks {
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
        // A tap that does not exist is the set-up's to report.
        assert!(check_taps(&["vl-no-such-tap0".into()], &me()).is_ok());
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
        let dir = std::env::temp_dir().join(format!("vl-unpriv-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
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
        fs::remove_dir_all(&dir).unwrap();
    }
}
