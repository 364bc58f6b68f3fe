//! The qemu-pr-helper of a domain whose LUNs ask for SCSI persistent
//! reservations (`lun.reservation: true`). KubeVirt runs it as a container
//! of virt-handler's pod, `qemu-pr-helper -k
//! /var/run/kubevirt/daemons/pr/pr-helper.sock`, and mounts that directory
//! into the launcher's pod; QEMU connects to the socket the disk's
//! `<reservations>` names and has the helper issue the PR commands, which
//! need privileges QEMU lacks. Here the launcher starts it itself, beside
//! the domain's virtiofsd (`virtiofs`'s job and slot): supervised,
//! restarted when it dies, stopped when the domain's run ends.

use std::path::{Path, PathBuf};

use super::supervisor::{DaemonSpec, Readiness};

/// Where Debian installs it (package qemu-system-common).
pub const QEMU_PR_HELPER: &str = "/usr/bin/qemu-pr-helper";

/// Why this launcher cannot run qemu-pr-helper here, if it cannot.
pub fn unavailable() -> Option<String> {
    if !Path::new(QEMU_PR_HELPER).is_file() {
        return Some(format!(
            "spec.domain.devices.disks[].lun.reservation needs qemu-pr-helper, which is not installed at {QEMU_PR_HELPER} (Debian package qemu-system-common)"
        ));
    }
    None
}

/// qemu-pr-helper's command line, as KubeVirt's pr-helper container runs it.
pub(super) fn spec(socket: &Path) -> DaemonSpec {
    DaemonSpec {
        name: "qemu-pr-helper".to_string(),
        binary: PathBuf::from(QEMU_PR_HELPER),
        args: vec!["-k".to_string(), socket.display().to_string()],
        env: Vec::new(),
        ready: Readiness::Listening(socket.to_path_buf()),
        start_cpu: None,
        read_only: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_listens_where_kubevirts_container_does() {
        let spec = spec(Path::new("/var/run/kubevirt/daemons/pr/pr-helper.sock"));
        assert_eq!(
            spec.args,
            ["-k", "/var/run/kubevirt/daemons/pr/pr-helper.sock"]
        );
        assert!(matches!(spec.ready, Readiness::Listening(ref p)
            if p == Path::new("/var/run/kubevirt/daemons/pr/pr-helper.sock")));
    }
}
