//! A launcher's own libvirt daemon (--spawn-libvirt), seen from outside:
//! its admin socket, its clients, and the launcher's resources.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The admin socket of the libvirtd a launcher spawned in `private_dir`.
pub fn admin_socket(private_dir: &Path) -> PathBuf {
    private_dir.join("libvirt/run/libvirt-admin-sock")
}

/// Makes the daemon behind `admin` drop every client connection, as a
/// daemon that goes away would (`virt-admin client-disconnect`); returns
/// how many it dropped.
pub fn disconnect_clients(admin: &Path) -> usize {
    let uri = format!("libvirtd:///system?socket={}", admin.display());
    let list = Command::new("virt-admin")
        .args(["-c", &uri, "srv-clients-list", "libvirtd"])
        .output()
        .expect("run virt-admin");
    assert!(
        list.status.success(),
        "virt-admin srv-clients-list: {}",
        String::from_utf8_lossy(&list.stderr)
    );
    let ids: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let id = fields.next()?;
            (fields.next() == Some("unix") && id.parse::<u64>().is_ok()).then(|| id.to_string())
        })
        .collect();
    for id in &ids {
        let done = Command::new("virt-admin")
            .args(["-c", &uri, "client-disconnect", "libvirtd", id])
            .output()
            .expect("run virt-admin");
        assert!(
            done.status.success(),
            "virt-admin client-disconnect: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    ids.len()
}

/// How many file descriptors process `pid` has open.
pub fn fd_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The pid of spawned daemon `name` in a `query-status` reply.
pub fn spawned_pid(status: &Value, name: &str) -> Option<u32> {
    status["libvirt"]["spawned"]["daemons"]
        .as_array()?
        .iter()
        .find(|d| d["name"] == name)?["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
}
