//! The virtiofsd of each filesystem the VMI shares (`convert::VirtiofsShare`),
//! as KubeVirt runs one per filesystem in a container of the launcher's
//! pod, listening on the socket the domain's `<filesystem>` names.
//!
//! Each is a supervised daemon (`supervisor`): restarted when it dies,
//! its messages in the launcher's log, stopped when the domain's run ends
//! (the launcher's exit, after QEMU is gone) or when a new start of the
//! domain replaces the set. With `--spawn-libvirt` they run in the daemons'
//! PID namespace, so that even a SIGKILLed launcher leaves none behind;
//! otherwise they are the launcher's children with a parent-death signal.
//!
//! Two virtiofsds are known ([`Flavor`]): the Rust one at
//! `/usr/libexec/virtiofsd`, where distributions ship it since QEMU 8
//! dropped its own (Debian 13, Fedora, KubeVirt's image; the newer runtime
//! stack gets one built from crates.io, scripts/newer-stack.sh), and
//! QEMU's C one at `/usr/lib/qemu/virtiofsd` (Debian 12's, package
//! qemu-system-common), used where the Rust one is missing. Their options
//! differ (`--shared-dir` against `-o source=`); both sandbox themselves in
//! namespaces of their own by default (which needs root, so a non-root
//! launcher refuses filesystems before anything starts). A read-only share
//! is a read-only bind mount of the directory in a mount namespace of
//! virtiofsd's own (`os::read_only_view`) with either, as Kubernetes mounts
//! the volume read-only in KubeVirt's virtiofs container (the C one has no
//! read-only mode). QEMU 7.2 does not reconnect to a restarted virtiofsd:
//! a restart serves the domain's next start, while the running guest sees
//! I/O errors on that filesystem.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::LibvirtDaemons;
use super::placement::Placement;
use super::supervisor::{DaemonSpec, Readiness, Supervisor};
use crate::convert::VirtiofsShare;
use crate::threads::FatalSender;

/// Which virtiofsd runs: their command lines differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// The Rust virtiofsd (gitlab.com/virtio-fs/virtiofsd).
    Rust,
    /// QEMU's C virtiofsd (QEMU 7.2 and older).
    C,
}

/// Where each is installed, in the order they are looked for.
pub const VIRTIOFSDS: [(&str, Flavor); 2] = [
    ("/usr/libexec/virtiofsd", Flavor::Rust),
    ("/usr/lib/qemu/virtiofsd", Flavor::C),
];

/// The virtiofsd installed here, the Rust one first.
pub fn installed() -> Option<(&'static str, Flavor)> {
    VIRTIOFSDS
        .into_iter()
        .find(|(path, _)| Path::new(path).is_file())
}
/// How long a virtiofsd may take to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The virtiofsd set of the domain's current run, shared by the sync job
/// that starts it, the queries that report it and the main thread that
/// stops it on exit.
pub type VirtiofsSlot = Arc<Mutex<Option<RunningShares>>>;

/// One running, supervised virtiofsd.
struct Virtiofsd {
    share: VirtiofsShare,
    supervisor: Supervisor,
}

/// The virtiofsd of every filesystem of the domain, and its
/// qemu-pr-helper (`pr_helper`) when a LUN asks for reservations; stopped
/// when dropped.
pub struct RunningShares {
    daemons: Vec<Virtiofsd>,
    pr_helper: Option<(PathBuf, Supervisor)>,
}

impl RunningShares {
    /// Stops every virtiofsd and the qemu-pr-helper, side by side.
    pub fn stop(&mut self) {
        for daemon in &self.daemons {
            daemon.supervisor.ask_to_stop();
        }
        if let Some((socket, helper)) = self.pr_helper.take() {
            helper.ask_to_stop();
            helper.wait_stopped(STOP_GRACE);
            let _ = fs::remove_file(&socket);
            log::info!("pr-helper: qemu-pr-helper stopped");
        }
        for daemon in self.daemons.drain(..) {
            daemon.supervisor.wait_stopped(STOP_GRACE);
            let _ = fs::remove_file(&daemon.share.socket);
            log::info!(
                "virtiofs: virtiofsd of filesystem {:?} stopped",
                daemon.share.name
            );
        }
    }

    /// The qemu-pr-helper as `query-status` shows it.
    pub fn report_pr_helper(&self) -> Option<Value> {
        self.pr_helper.as_ref().map(|(socket, helper)| {
            json!({"pid": helper.pid(), "restarts": helper.restarts(), "socket": socket})
        })
    }

    pub fn report(&self) -> Value {
        Value::Array(
            self.daemons
                .iter()
                .map(|d| {
                    json!({
                        "name": d.share.name,
                        "pid": d.supervisor.pid(),
                        "restarts": d.supervisor.restarts(),
                        "socket": d.share.socket,
                        "source": d.share.source,
                        "readOnly": d.share.read_only,
                    })
                })
                .collect(),
        )
    }
}

impl Drop for RunningShares {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What `query-status` says of the slot: `[]` when nothing runs.
pub fn report(slot: &VirtiofsSlot) -> Value {
    slot.lock()
        .ok()
        .and_then(|s| s.as_ref().map(RunningShares::report))
        .unwrap_or(Value::Array(Vec::new()))
}

/// What `query-status` says of the slot's qemu-pr-helper, if one runs.
pub fn report_pr_helper(slot: &VirtiofsSlot) -> Option<Value> {
    slot.lock()
        .ok()
        .and_then(|s| s.as_ref().and_then(RunningShares::report_pr_helper))
}

/// Stops whatever the slot holds (every exit path).
pub fn stop(slot: &VirtiofsSlot) {
    let taken = match slot.lock() {
        Ok(mut s) => s.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    if let Some(mut running) = taken {
        running.stop();
    }
}

/// Why this launcher cannot run virtiofsd here, if it cannot.
pub fn unavailable() -> Option<String> {
    if installed().is_none() {
        return Some(format!(
            "a filesystem (virtiofs) needs virtiofsd, which is installed at neither {} (the Rust one: Debian 13's package virtiofsd) nor {} (QEMU's C one: Debian 12's package qemu-system-common)",
            VIRTIOFSDS[0].0, VIRTIOFSDS[1].0
        ));
    }
    if !crate::config::running_as_root() {
        return Some(
            "a filesystem (virtiofs) needs a root launcher: virtiofsd sandboxes itself in namespaces only root can make"
                .to_string(),
        );
    }
    None
}

/// The virtiofsd work of one domain start: what to share, where to run
/// the daemons and where to keep them.
pub struct VirtiofsJob {
    pub shares: Vec<VirtiofsShare>,
    /// The socket of the qemu-pr-helper to start, if any.
    pub pr_helper: Option<PathBuf>,
    pub daemons: Option<Arc<LibvirtDaemons>>,
    pub slot: VirtiofsSlot,
    pub fatal: FatalSender,
}

impl VirtiofsJob {
    /// Replaces whatever an earlier start ran with a virtiofsd for each
    /// share, each listening when this returns; none is left running on
    /// failure.
    pub fn run(&self) -> Result<(), String> {
        stop(&self.slot);
        let placement = self
            .daemons
            .as_ref()
            .map_or_else(|| Arc::new(Placement::Pod), |d| d.placement.clone());
        let mut running = RunningShares {
            daemons: Vec::new(),
            pr_helper: None,
        };
        if let Some(socket) = &self.pr_helper {
            if let Some(dir) = socket.parent() {
                fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let helper = Supervisor::spawn(
                super::pr_helper::spec(socket),
                placement.clone(),
                &self.fatal,
            )
            .and_then(|one| one.wait_ready(READY_TIMEOUT))
            .map_err(|e| format!("qemu-pr-helper: {e}"))?;
            log::info!(
                "pr-helper: qemu-pr-helper listens on {} (pid {:?})",
                socket.display(),
                helper.pid()
            );
            running.pr_helper = Some((socket.clone(), helper));
        }
        // Started side by side, then waited for.
        let mut starting = Vec::new();
        for share in &self.shares {
            if let Some(dir) = share.socket.parent() {
                fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            if !share.source.is_dir() {
                abandon(starting);
                return Err(format!(
                    "filesystem {:?} shares {}, which is not a directory here",
                    share.name,
                    share.source.display()
                ));
            }
            match Supervisor::spawn(spec(share)?, placement.clone(), &self.fatal) {
                Ok(one) => starting.push((share.clone(), one)),
                Err(e) => {
                    abandon(starting);
                    return Err(format!("filesystem {:?}: {e}", share.name));
                }
            }
        }
        let mut failed = None;
        for (share, one) in starting {
            if failed.is_some() {
                one.abandon();
                continue;
            }
            match one.wait_ready(READY_TIMEOUT) {
                Ok(supervisor) => {
                    log::info!(
                        "virtiofs: filesystem {:?} shares {}{} on {} (virtiofsd pid {:?})",
                        share.name,
                        share.source.display(),
                        if share.read_only { " read-only" } else { "" },
                        share.socket.display(),
                        supervisor.pid()
                    );
                    running.daemons.push(Virtiofsd { share, supervisor });
                }
                Err(e) => failed = Some(format!("filesystem {:?}: {e}", share.name)),
            }
        }
        if let Some(e) = failed {
            running.stop();
            return Err(e);
        }
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some(running);
        }
        Ok(())
    }
}

/// `-o` splits its options at commas: a path's commas (and backslashes)
/// are escaped as libfuse reads them.
fn fuse_option_value(path: &Path) -> String {
    path.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace(',', "\\,")
}

fn abandon(starting: Vec<(VirtiofsShare, super::supervisor::Starting)>) {
    for (_, one) in starting {
        one.abandon();
    }
}

/// The command line of the virtiofsd installed here for `share`.
fn spec(share: &VirtiofsShare) -> Result<DaemonSpec, String> {
    let (binary, flavor) = installed()
        .ok_or_else(|| unavailable().unwrap_or_else(|| "virtiofsd is not installed".to_string()))?;
    spec_for(share, binary, flavor)
}

/// KubeVirt's virtiofsd options (`--socket-path`, `--shared-dir`,
/// `--cache=auto`) in `flavor`'s words.
fn spec_for(share: &VirtiofsShare, binary: &str, flavor: Flavor) -> Result<DaemonSpec, String> {
    let c_path = |p: &PathBuf| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| format!("{} has a NUL byte", p.display()))
    };
    let socket = format!("--socket-path={}", share.socket.display());
    let args = match flavor {
        Flavor::Rust => vec![
            socket,
            "--shared-dir".into(),
            share.source.display().to_string(),
            "--cache=auto".into(),
        ],
        Flavor::C => vec![
            socket,
            "-o".into(),
            format!("source={}", fuse_option_value(&share.source)),
            "-o".into(),
            "cache=auto".into(),
        ],
    };
    Ok(DaemonSpec {
        name: format!("virtiofsd-{}", share.name),
        binary: PathBuf::from(binary),
        args,
        env: Vec::new(),
        ready: Readiness::Listening(share.socket.clone()),
        start_cpu: None,
        read_only: if share.read_only {
            Some(c_path(&share.source)?)
        } else {
            None
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commas_in_a_shared_path_are_escaped_for_fuse_options() {
        assert_eq!(fuse_option_value(Path::new("/a,b\\c")), "/a\\,b\\\\c");
        assert_eq!(fuse_option_value(Path::new("/plain/dir")), "/plain/dir");
    }

    #[test]
    fn a_read_only_share_is_seen_read_only_by_its_virtiofsd() {
        let share = VirtiofsShare {
            name: "cm".into(),
            socket: "/run/kv/virtiofs-containers/cm.sock".into(),
            source: "/private/config-map/cm".into(),
            read_only: true,
        };
        let c = spec_for(&share, VIRTIOFSDS[1].0, Flavor::C).unwrap();
        assert_eq!(c.binary, Path::new("/usr/lib/qemu/virtiofsd"));
        assert_eq!(
            c.args,
            [
                "--socket-path=/run/kv/virtiofs-containers/cm.sock",
                "-o",
                "source=/private/config-map/cm",
                "-o",
                "cache=auto"
            ]
        );
        assert_eq!(c.read_only.as_deref(), Some(c"/private/config-map/cm"));
        let rust = spec_for(&share, VIRTIOFSDS[0].0, Flavor::Rust).unwrap();
        assert_eq!(rust.binary, Path::new("/usr/libexec/virtiofsd"));
        assert_eq!(
            rust.args,
            [
                "--socket-path=/run/kv/virtiofs-containers/cm.sock",
                "--shared-dir",
                "/private/config-map/cm",
                "--cache=auto"
            ]
        );
        // Read-only by the same bind mount: the C one has no such mode.
        assert_eq!(rust.read_only.as_deref(), Some(c"/private/config-map/cm"));
        let writable = VirtiofsShare {
            read_only: false,
            ..share
        };
        assert!(
            spec_for(&writable, VIRTIOFSDS[0].0, Flavor::Rust)
                .unwrap()
                .read_only
                .is_none()
        );
    }
}
