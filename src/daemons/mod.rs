//! `--spawn-libvirt`: the launcher's own libvirt daemon and virtlogd, as a
//! KubeVirt launcher pod has them. Nothing else uses these daemons; they
//! run in a PID namespace of their own that dies with the launcher (so
//! neither they nor QEMU nor any helper can outlive it, even a SIGKILLed
//! launcher) and in a private mount namespace over the launcher's private
//! directories; they are restarted when they die and stopped in order when
//! the launcher exits.
//!
//! Without `--spawn-libvirt` none of this applies: the domain belongs to a
//! shared daemon, which the launcher cannot and must not kill.

mod config;
pub mod init;
mod namespace;
mod supervisor;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::os;
use crate::threads::FatalSender;
use namespace::DaemonNamespaces;
use supervisor::{DaemonSpec, Supervisor};

/// How long a daemon may take to report ready. A cold QEMU capabilities
/// probe takes a few seconds on a slow host.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the namespace's init may take to set up its mounts, and to
/// exit (with everything left in the namespace) when the launcher ends it.
const INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The fixed paths a privileged libvirt daemon uses, and the launcher
/// directory each is replaced with inside the daemons' namespace.
const OVERLAID: [(&str, &str); 5] = [
    ("run", "/run/libvirt"),
    ("lib", "/var/lib/libvirt"),
    ("cache", "/var/cache/libvirt"),
    ("log", "/var/log/libvirt"),
    ("etc", "/etc/libvirt"),
];

pub struct LibvirtDaemons {
    /// The URI that reaches the spawned daemon.
    pub uri: String,
    /// Where the daemons' directories live on the host.
    pub runtime_dir: PathBuf,
    pub host_uuid: String,
    libvirtd: Supervisor,
    virtlogd: Supervisor,
    namespaces: Arc<DaemonNamespaces>,
}

impl LibvirtDaemons {
    /// Starts virtlogd and the libvirt daemon under `<private>/libvirt`, in
    /// their namespaces. Must run on the main thread: the namespace dies
    /// with the thread that creates it.
    pub fn start(
        private_dir: &Path,
        log_filters: Option<&str>,
        fatal: &FatalSender,
    ) -> Result<LibvirtDaemons, String> {
        if !crate::config::running_as_root() {
            return Err(
                "--spawn-libvirt needs root: it gives the daemons private PID and mount namespaces"
                    .into(),
            );
        }
        let daemon = config::Daemon::find()?;
        let virtlogd_bin = find_binary("virtlogd")?;
        let runtime_dir = private_dir.join("libvirt");
        for (sub, _) in OVERLAID {
            fs::create_dir_all(runtime_dir.join(sub))
                .map_err(|e| format!("cannot create {}: {e}", runtime_dir.join(sub).display()))?;
        }
        let host_uuid = config::new_uuid()?;
        config::write_all(&runtime_dir.join("etc"), &daemon, &host_uuid, log_filters)?;
        config::seed_capabilities_cache(&runtime_dir.join("cache"));

        let mut mounts = Vec::new();
        for (sub, target) in OVERLAID {
            // The mount point must exist on the host; an empty directory
            // where libvirt is installed but never ran.
            fs::create_dir_all(target)
                .map_err(|e| format!("cannot create mount point {target}: {e}"))?;
            mounts.push((runtime_dir.join(sub), PathBuf::from(target)));
        }
        let namespaces = Arc::new(DaemonNamespaces::create(&mounts, INIT_TIMEOUT, fatal)?);

        let notify = |name: &str| runtime_dir.join(format!("{name}.notify"));
        let virtlogd = Supervisor::start(
            DaemonSpec {
                name: "virtlogd",
                binary: virtlogd_bin,
                args: vec![
                    "-f".into(),
                    "/etc/libvirt/virtlogd.conf".into(),
                    "-p".into(),
                    "/run/libvirt/virtlogd.pid".into(),
                ],
                notify_socket: notify("virtlogd"),
            },
            namespaces.clone(),
            READY_TIMEOUT,
            fatal,
        )
        .inspect_err(|_| namespaces.end(INIT_TIMEOUT))?;
        let libvirtd = Supervisor::start(
            DaemonSpec {
                name: daemon.name,
                binary: daemon.binary.clone(),
                args: vec![
                    "-f".into(),
                    format!("/etc/libvirt/{}.conf", daemon.name),
                    "-p".into(),
                    format!("/run/libvirt/{}.pid", daemon.name),
                ],
                notify_socket: notify(daemon.name),
            },
            namespaces.clone(),
            READY_TIMEOUT,
            fatal,
        )
        .inspect_err(|_| {
            virtlogd.stop(STOP_GRACE);
            namespaces.end(INIT_TIMEOUT);
        })?;
        let socket = runtime_dir.join("run").join(daemon.socket);
        Ok(LibvirtDaemons {
            uri: format!("qemu+unix:///system?socket={}", socket.display()),
            runtime_dir,
            host_uuid,
            libvirtd,
            virtlogd,
            namespaces,
        })
    }

    /// Stops the daemons, the libvirt daemon first (it uses virtlogd).
    /// A QEMU of theirs still running (its domain's stop went unobserved, or
    /// the launcher is giving up) is ended first, with SIGTERM so that it
    /// can flush its disks, as KubeVirt's virt-launcher-monitor does. Last,
    /// the namespace ends, taking anything else left in it (a helper) with
    /// it: nothing the launcher started outlives it.
    pub fn stop(&self) {
        self.end_leftover_qemu();
        self.libvirtd.stop(STOP_GRACE);
        self.virtlogd.stop(STOP_GRACE);
        self.namespaces.end(INIT_TIMEOUT);
    }

    /// QEMU processes listed in the daemon's pid files, still alive, by
    /// their pids in the launcher's PID namespace (the files hold the
    /// daemons' namespace's pids).
    fn leftover_qemu(&self) -> Vec<u32> {
        let dir = self.runtime_dir.join("run/qemu");
        let Ok(entries) = fs::read_dir(&dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
            .filter_map(|e| {
                let inner = fs::read_to_string(e.path())
                    .ok()?
                    .trim()
                    .parse::<u32>()
                    .ok()?;
                self.namespaces.host_pid(inner)
            })
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("qemu"))
            })
            .collect()
    }

    fn end_leftover_qemu(&self) {
        let pids = self.leftover_qemu();
        if pids.is_empty() {
            return;
        }
        log::warn!("daemons: ending QEMU processes still running: {pids:?}");
        for pid in &pids {
            let _ = os::send_signal(*pid, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline && !self.leftover_qemu().is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
        for pid in self.leftover_qemu() {
            let _ = os::send_signal(pid, libc::SIGKILL);
        }
    }

    /// For query-status.
    pub fn status(&self) -> Value {
        let one =
            |s: &Supervisor| json!({ "name": s.name, "pid": s.pid(), "restarts": s.restarts() });
        json!({
            "runtime_dir": self.runtime_dir,
            "host_uuid": self.host_uuid,
            "init_pid": self.namespaces.init_pid(),
            "daemons": [one(&self.libvirtd), one(&self.virtlogd)],
        })
    }

    /// The libvirt daemon's last error line, to explain a failure.
    pub fn last_error(&self) -> Option<String> {
        self.libvirtd.last_error()
    }

    /// Where the daemon keeps the QEMU log of a domain.
    pub fn qemu_log(&self, domain: &str) -> PathBuf {
        self.runtime_dir
            .join("log/qemu")
            .join(format!("{domain}.log"))
    }
}

fn find_binary(name: &str) -> Result<PathBuf, String> {
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.exists())
        .ok_or_else(|| {
            format!("{name} is not installed (looked in /usr/sbin, /usr/bin, /usr/local/sbin)")
        })
}
