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
//!
//! Two modes, by the launcher's user (as KubeVirt's root and non-root
//! launchers):
//! - **system** (root): privileged daemons; QEMU runs as root.
//! - **session** (any other user, no capabilities needed): the daemons run
//!   as that user in libvirt's session mode, and so does QEMU. The kernel
//!   lets an unprivileged process make PID and mount namespaces only in a
//!   user namespace it owns, so the launcher enters one before any thread
//!   starts ([`enter_user_namespace_if_needed`]), with its user and group
//!   ids mapped to themselves: files keep their owners, and the launcher
//!   gains no power over anything outside its own namespaces. The same
//!   directories are mounted over the same paths as in system mode, and
//!   libvirt's XDG directories point at them (`XDG_RUNTIME_DIR=/run`,
//!   `XDG_CONFIG_HOME=/etc`, `XDG_CACHE_HOME=/var/cache`), so the
//!   daemons' sockets keep short paths (a Unix socket path has at most
//!   107 bytes) whatever the launcher's directories are called.

mod capabilities;
mod config;
pub mod error;
pub mod init;
mod namespace;
mod placement;
pub mod pr_helper;
pub mod reaper;
mod supervisor;
pub mod virtiofs;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::os;
use crate::threads::FatalSender;
pub use error::DaemonError;
use namespace::DaemonNamespaces;
use placement::Placement;
use supervisor::{DaemonSpec, Readiness, Supervisor};

/// How long a daemon may take to report ready. A cold QEMU capabilities
/// probe takes a few seconds on a slow host.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long the namespace's init may take to set up its mounts, and to
/// exit (with everything left in the namespace) when the launcher ends it.
const INIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Where a pod's libvirt daemon keeps its sockets, pid files and the
/// configuration KubeVirt's launcher copies there.
const POD_RUNTIME_DIR: &str = "/var/run/libvirt";

/// The fixed paths a privileged libvirt daemon uses, and the launcher
/// directory each is replaced with inside the daemons' namespace (in
/// session mode too, where the XDG variables below point at them).
const OVERLAID: [(&str, &str); 5] = [
    ("run", "/run/libvirt"),
    ("lib", "/var/lib/libvirt"),
    ("cache", "/var/cache/libvirt"),
    ("log", "/var/log/libvirt"),
    ("etc", "/etc/libvirt"),
];

/// A session-mode daemon's environment: libvirt's per-user directories
/// (`$XDG_RUNTIME_DIR/libvirt`, `$XDG_CONFIG_HOME/libvirt`,
/// `$XDG_CACHE_HOME/libvirt`) land on the overlaid paths.
const SESSION_ENV: [(&str, &str); 4] = [
    ("XDG_RUNTIME_DIR", "/run"),
    ("XDG_CONFIG_HOME", "/etc"),
    ("XDG_CACHE_HOME", "/var/cache"),
    ("HOME", "/var/lib/libvirt"),
];

/// How the launcher's daemons run; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonMode {
    /// As root, privileged: QEMU runs as root.
    System,
    /// As the launcher's unprivileged user, in libvirt's session mode.
    Session,
}

impl DaemonMode {
    /// The mode for this process: system as root, else session.
    pub fn for_this_process() -> DaemonMode {
        if crate::config::running_as_root() {
            DaemonMode::System
        } else {
            DaemonMode::Session
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DaemonMode::System => "system",
            DaemonMode::Session => "session",
        }
    }
}

/// In session mode, moves the launcher into a user namespace of its own
/// (see the module documentation). Must run before the launcher starts
/// any thread: the kernel refuses a multi-threaded process.
pub fn enter_user_namespace_if_needed(mode: DaemonMode) -> Result<(), DaemonError> {
    if mode == DaemonMode::System {
        return Ok(());
    }
    os::enter_user_namespace().map_err(|source| DaemonError::NoUserNamespace { source })
}

/// One daemon, handed over (`upgrade`).
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonHandover {
    /// Its pid (in the launcher's PID namespace).
    pub pid: u32,
    /// The read end of its stderr pipe, inherited.
    pub stderr_fd: Option<i32>,
    pub restarts: u32,
}

/// The launcher's own daemons (`--spawn-libvirt`), handed over: the new
/// launcher supervises them, their namespace and QEMU untouched. In the
/// state file as a JSON object, written and read by hand (lean: no derived
/// visitor in the static binary).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(into = "Value", try_from = "Value")]
pub struct DaemonsHandover {
    pub uri: String,
    pub runtime_dir: PathBuf,
    pub host_uuid: String,
    /// The namespace's init (a child of the launcher's process).
    pub init_pid: u32,
    /// The write end of the init's lifeline, inherited.
    pub lifeline_fd: i32,
    pub libvirtd: DaemonHandover,
    pub virtlogd: DaemonHandover,
}

impl From<DaemonsHandover> for Value {
    fn from(h: DaemonsHandover) -> Value {
        let one = |d: &DaemonHandover| json!({"pid": d.pid, "stderr_fd": d.stderr_fd, "restarts": d.restarts});
        json!({
            "uri": h.uri,
            "runtime_dir": h.runtime_dir,
            "host_uuid": h.host_uuid,
            "init_pid": h.init_pid,
            "lifeline_fd": h.lifeline_fd,
            "libvirtd": one(&h.libvirtd),
            "virtlogd": one(&h.virtlogd),
        })
    }
}

impl TryFrom<Value> for DaemonsHandover {
    type Error = String;

    fn try_from(v: Value) -> Result<DaemonsHandover, String> {
        fn number<T: TryFrom<i64>>(v: &Value, key: &str) -> Result<T, String> {
            v.get(key)
                .and_then(Value::as_i64)
                .and_then(|n| T::try_from(n).ok())
                .ok_or_else(|| format!("daemons: no valid {key}"))
        }
        let text = |key: &str| {
            v.get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("daemons: no {key}"))
        };
        let one = |key: &str| -> Result<DaemonHandover, String> {
            let d = v.get(key).ok_or_else(|| format!("daemons: no {key}"))?;
            Ok(DaemonHandover {
                pid: number(d, "pid")?,
                stderr_fd: number(d, "stderr_fd").ok(),
                restarts: number(d, "restarts")?,
            })
        };
        Ok(DaemonsHandover {
            uri: text("uri")?,
            runtime_dir: PathBuf::from(text("runtime_dir")?),
            host_uuid: text("host_uuid")?,
            init_pid: number(&v, "init_pid")?,
            lifeline_fd: number(&v, "lifeline_fd")?,
            libvirtd: one("libvirtd")?,
            virtlogd: one("virtlogd")?,
        })
    }
}

pub struct LibvirtDaemons {
    /// The URI that reaches the spawned daemon.
    pub uri: String,
    pub mode: DaemonMode,
    /// Where the daemons' directories live on the host.
    pub runtime_dir: PathBuf,
    pub host_uuid: String,
    libvirtd: Supervisor,
    virtlogd: Supervisor,
    placement: Arc<Placement>,
    /// The daemon started without a valid capabilities entry and probes
    /// QEMU itself.
    cold_start: bool,
}

impl LibvirtDaemons {
    /// Starts virtlogd and the libvirt daemon under `<private>/libvirt`, in
    /// their namespaces. In session mode the launcher must already be in
    /// its user namespace ([`enter_user_namespace_if_needed`]).
    pub fn start(
        private_dir: &Path,
        backend_storage_dir: Option<&Path>,
        log_filters: Option<&str>,
        fatal: &FatalSender,
    ) -> Result<LibvirtDaemons, DaemonError> {
        let mode = DaemonMode::for_this_process();
        let daemon = config::Daemon::find()?;
        let virtlogd_bin = find_binary("virtlogd")?;
        let runtime_dir = private_dir.join("libvirt");
        for (sub, _) in OVERLAID {
            fs::create_dir_all(runtime_dir.join(sub)).map_err(|e| {
                DaemonError::os(
                    format!("cannot create {}", runtime_dir.join(sub).display()),
                    e,
                )
            })?;
        }
        // The daemons' state, sockets and logs are theirs alone (in
        // session mode libvirt expects its runtime directory to be 0700).
        fs::set_permissions(&runtime_dir, fs::Permissions::from_mode(0o700)).map_err(|e| {
            DaemonError::os(
                format!("cannot set the mode of {}", runtime_dir.display()),
                e,
            )
        })?;
        let host_uuid = config::new_uuid()?;
        config::write_all(
            &runtime_dir.join("etc"),
            &daemon,
            &host_uuid,
            log_filters,
            mode,
        )?;
        let seeded = capabilities::seed(&runtime_dir.join("cache"), mode == DaemonMode::Session);
        match &seeded.cold {
            None => log::debug!(
                "daemons: QEMU capabilities seeded from {} (start on CPU {:?})",
                seeded
                    .from
                    .as_deref()
                    .map_or_else(|| "?".into(), |p| p.display().to_string()),
                seeded.start_cpu
            ),
            Some(why) => log::info!(
                "daemons: {why}; the libvirt daemon probes QEMU before it answers (a few seconds)"
            ),
        }

        let mut mounts = mount_points(&runtime_dir, mode)?;
        if let Some(backend) = backend_storage_dir {
            mounts.extend(backend_storage_mounts(backend, &runtime_dir, mode)?);
        }
        // The daemons see only the emulator the launcher runs (see
        // `capabilities`).
        for emulator in capabilities::hidden_emulators() {
            mounts.push((PathBuf::from("/dev/null"), emulator));
        }
        let driver_dir = qemu_driver_only(&runtime_dir);
        let placement = Arc::new(Placement::Namespaces(DaemonNamespaces::create(
            &mounts,
            mode == DaemonMode::Session,
            INIT_TIMEOUT,
            fatal,
        )?));
        let (libvirtd, virtlogd) = namespace_specs(
            &runtime_dir,
            &daemon,
            virtlogd_bin,
            mode,
            driver_dir,
            seeded.start_cpu,
        );
        if mode == DaemonMode::System {
            open_passt_dir(&runtime_dir.join("run/qemu/passt"));
        }
        let (libvirtd, virtlogd) = start_pair(libvirtd, virtlogd, &placement, fatal)?;
        // The same socket name in both modes; session mode's URI, as
        // KubeVirt's non-root launcher connects.
        let socket = runtime_dir.join("run").join(daemon.socket);
        Ok(LibvirtDaemons {
            uri: format!("qemu+unix:///{}?socket={}", mode.as_str(), socket.display()),
            mode,
            runtime_dir,
            host_uuid,
            libvirtd,
            virtlogd,
            placement,
            cold_start: seeded.cold.is_some(),
        })
    }

    /// What the next launcher needs to take these daemons over
    /// (`upgrade`), or why it cannot.
    pub fn handover(&self) -> Result<DaemonsHandover, String> {
        if self.mode != DaemonMode::System {
            return Err(
                "not supported yet for a non-root launcher's daemons (session mode)".into(),
            );
        }
        let Some((init_pid, lifeline_fd)) = self.placement.namespaces().and_then(|n| n.handover())
        else {
            return Err(
                "not supported yet for the daemons of a KubeVirt pod (--pod-daemons)".into(),
            );
        };
        let one = |s: &Supervisor| {
            s.handover()
                .map(|(pid, stderr_fd)| DaemonHandover {
                    pid,
                    stderr_fd,
                    restarts: s.restarts(),
                })
                .ok_or_else(|| format!("{} is restarting; retry in a few seconds", s.name))
        };
        Ok(DaemonsHandover {
            uri: self.uri.clone(),
            runtime_dir: self.runtime_dir.clone(),
            host_uuid: self.host_uuid.clone(),
            init_pid,
            lifeline_fd,
            libvirtd: one(&self.libvirtd)?,
            virtlogd: one(&self.virtlogd)?,
        })
    }

    /// The descriptors a new launcher inherits with `handover`.
    pub fn handover_fds(handover: &DaemonsHandover) -> Vec<std::os::fd::RawFd> {
        std::iter::once(handover.lifeline_fd)
            .chain(handover.libvirtd.stderr_fd)
            .chain(handover.virtlogd.stderr_fd)
            .collect()
    }

    /// Replaces the process with `command` (`upgrade`) so that the daemons,
    /// their namespace and QEMU live on (see `DaemonNamespaces::exec`).
    pub fn exec(&self, command: std::process::Command) -> std::io::Error {
        match self.placement.namespaces() {
            Some(namespaces) => namespaces.exec(command),
            None => std::io::Error::other("the daemons run in no namespace of the launcher's"),
        }
    }

    /// Takes over the daemons the launcher this one replaced handed over
    /// (`upgrade`): their namespace's init and lifeline, their pids and
    /// stderr pipes (inherited descriptors), and their supervision.
    pub fn adopt(
        private_dir: &Path,
        handover: &DaemonsHandover,
        fatal: &FatalSender,
    ) -> Result<LibvirtDaemons, DaemonError> {
        let mode = DaemonMode::for_this_process();
        if mode != DaemonMode::System {
            return Err(DaemonError::refused(
                "a non-root launcher cannot take daemons over",
            ));
        }
        let runtime_dir = private_dir.join("libvirt");
        if handover.runtime_dir != runtime_dir {
            return Err(DaemonError::Refused(format!(
                "the handed-over daemons run in {}, not in {}",
                handover.runtime_dir.display(),
                runtime_dir.display()
            )));
        }
        // The inherited descriptors are this process's from here on (and
        // no child's).
        let take = |fd: std::os::fd::RawFd| {
            if !os::set_cloexec(fd, true) {
                return Err(DaemonError::Refused(format!(
                    "descriptor {fd} was not inherited"
                )));
            }
            // SAFETY: the descriptor is open (fcntl just succeeded) and was
            // handed over for this use alone; nothing else here owns it.
            Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
        };
        let lifeline = take(handover.lifeline_fd)?;
        let libvirtd_err = handover.libvirtd.stderr_fd.map(take).transpose()?;
        let virtlogd_err = handover.virtlogd.stderr_fd.map(take).transpose()?;
        let daemon = config::Daemon::find()?;
        let virtlogd_bin = find_binary("virtlogd")?;
        let driver_dir = Some(runtime_dir.join("drivers")).filter(|d| d.is_dir());
        let placement = Arc::new(Placement::Namespaces(DaemonNamespaces::adopt(
            handover.init_pid,
            lifeline,
            fatal,
        )?));
        let (libvirtd, virtlogd) =
            namespace_specs(&runtime_dir, &daemon, virtlogd_bin, mode, driver_dir, None);
        let adopt = |spec, one: &DaemonHandover, stderr| {
            Supervisor::adopt(
                spec,
                placement.clone(),
                one.pid,
                stderr,
                one.restarts,
                fatal,
            )
        };
        let virtlogd = adopt(virtlogd, &handover.virtlogd, virtlogd_err)?;
        let libvirtd = adopt(libvirtd, &handover.libvirtd, libvirtd_err)?;
        Ok(LibvirtDaemons {
            uri: handover.uri.clone(),
            mode,
            runtime_dir,
            host_uuid: handover.host_uuid.clone(),
            libvirtd,
            virtlogd,
            placement,
            cold_start: false,
        })
    }
}

/// The daemons of a launcher's own namespaces: (libvirt daemon, virtlogd).
fn namespace_specs(
    runtime_dir: &Path,
    daemon: &config::Daemon,
    virtlogd_bin: PathBuf,
    mode: DaemonMode,
    driver_dir: Option<PathBuf>,
    start_cpu: Option<usize>,
) -> (DaemonSpec, DaemonSpec) {
    {
        let mut env: Vec<(String, String)> = match mode {
            DaemonMode::System => Vec::new(),
            DaemonMode::Session => SESSION_ENV
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let virtlogd_env = env.clone();
        if let Some(dir) = driver_dir {
            env.push((
                "LIBVIRT_DRIVER_DIR".to_string(),
                dir.to_string_lossy().into_owned(),
            ));
        }
        let notify = |name: &str| runtime_dir.join(format!("{name}.notify"));
        let virtlogd = DaemonSpec {
            name: "virtlogd".to_string(),
            binary: virtlogd_bin,
            args: vec![
                "-f".into(),
                "/etc/libvirt/virtlogd.conf".into(),
                "-p".into(),
                "/run/libvirt/virtlogd.pid".into(),
            ],
            env: virtlogd_env,
            ready: Readiness::Notify(notify("virtlogd")),
            start_cpu: None,
            read_only: None,
        };
        let libvirtd = DaemonSpec {
            name: daemon.name.to_string(),
            binary: daemon.binary.clone(),
            args: vec![
                "-f".into(),
                format!("/etc/libvirt/{}.conf", daemon.name),
                "-p".into(),
                format!("/run/libvirt/{}.pid", daemon.name),
            ],
            env,
            ready: Readiness::Notify(notify(daemon.name)),
            start_cpu,
            read_only: None,
        };
        (libvirtd, virtlogd)
    }
}

impl LibvirtDaemons {
    /// KubeVirt mode: starts virtlogd and the libvirt daemon as KubeVirt's
    /// launcher does inside its pod, as plain children on the container's
    /// own paths (the pod is their isolation): the daemon with a copy of
    /// the image's configuration in /var/run/libvirt (plus the log filters),
    /// virtlogd with the image's own. As root (a root pod) they run in
    /// libvirt's system mode; as any other user (KubeVirt's default
    /// non-root pod) in session mode, on the pod's XDG directories
    /// (`pod_session_env`), with the image's qemu.conf copied where a
    /// session daemon reads it, as KubeVirt's launcher does.
    pub fn start_in_pod(
        log_filters: Option<&str>,
        fatal: &FatalSender,
    ) -> Result<LibvirtDaemons, DaemonError> {
        let mode = DaemonMode::for_this_process();
        let session_env = match mode {
            DaemonMode::System => Vec::new(),
            DaemonMode::Session => pod_session_env(),
        };
        let env_dir = |name: &str| {
            session_env
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, dir)| PathBuf::from(dir))
        };
        let daemon = config::Daemon::find()?;
        let virtlogd_bin = find_binary("virtlogd")?;
        let runtime_dir = env_dir("XDG_RUNTIME_DIR")
            .map_or_else(|| PathBuf::from(POD_RUNTIME_DIR), |dir| dir.join("libvirt"));
        fs::create_dir_all(&runtime_dir)
            .map_err(|e| DaemonError::os(format!("cannot create {}", runtime_dir.display()), e))?;
        if let Some(config_home) = env_dir("XDG_CONFIG_HOME") {
            copy_image_qemu_conf(&config_home.join("libvirt"))?;
        }
        let daemon_conf = config::write_pod_daemon_conf(&runtime_dir, &daemon, log_filters)?;
        let virtlogd_conf = Path::new("/etc/libvirt/virtlogd.conf");
        let mut virtlogd_args = Vec::new();
        if virtlogd_conf.is_file() {
            virtlogd_args = vec!["-f".into(), virtlogd_conf.display().to_string()];
        }
        let notify = |name: &str| runtime_dir.join(format!("{name}.notify"));
        let virtlogd = DaemonSpec {
            name: "virtlogd".to_string(),
            binary: virtlogd_bin,
            args: virtlogd_args,
            env: session_env.clone(),
            ready: Readiness::Notify(notify("virtlogd")),
            start_cpu: None,
            read_only: None,
        };
        // The daemon sees only the emulator the launcher runs (see
        // `capabilities`); without a way to, it probes every other one too.
        let mut env = session_env;
        match capabilities::shadow_other_emulators(&runtime_dir.join("hidden-emulators")) {
            Ok(Some(path)) => {
                log::debug!(
                    "daemons: the other QEMU emulators are hidden from {} on its PATH (it logs their failed probes)",
                    daemon.name
                );
                env.push(("PATH".to_string(), path));
            }
            Ok(None) => {}
            Err(e) => log::info!(
                "daemons: {e}; {} probes every QEMU emulator it finds before it answers",
                daemon.name
            ),
        }
        // Under a reaper of its own (see `reaper`): the QEMU processes it
        // double-forks are reaped as soon as they end.
        let libvirtd = DaemonSpec {
            name: daemon.name.to_string(),
            binary: PathBuf::from("/proc/self/exe"),
            args: vec![
                reaper::MODE.into(),
                daemon.binary.display().to_string(),
                "-f".into(),
                daemon_conf.display().to_string(),
            ],
            env,
            ready: Readiness::Notify(notify(daemon.name)),
            start_cpu: None,
            read_only: None,
        };
        // KubeVirt's image has its pre-migration hook client as the
        // daemon's `qemu` hook; this launcher is its own (the daemon looks
        // for hooks only when it starts).
        let hook = Path::new(crate::migration::hook::HOOK_PATH);
        match crate::migration::hook::install(hook) {
            Ok(true) => log::info!(
                "daemons: {} is this launcher: an incoming migration's domain is fitted to this pod",
                hook.display()
            ),
            Ok(false) => log::info!("daemons: keeping the pod's libvirt hook {}", hook.display()),
            Err(e) => log::warn!(
                "daemons: cannot install the migration hook {}: {e}; an incoming migration's domain will be used as the source sends it",
                hook.display()
            ),
        }
        let placement = Arc::new(Placement::Pod);
        let (libvirtd, virtlogd) = start_pair(libvirtd, virtlogd, &placement, fatal)?;
        let host_uuid = fs::read_to_string("/etc/machine-id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Ok(LibvirtDaemons {
            uri: format!(
                "qemu+unix:///{}?socket={}",
                mode.as_str(),
                runtime_dir.join(daemon.socket).display()
            ),
            mode,
            runtime_dir,
            host_uuid,
            libvirtd,
            virtlogd,
            placement,
            cold_start: false,
        })
    }

    /// Once the daemon answered (it validated its capabilities entry on
    /// the CPU it started on, see `capabilities`): gives it the launcher's
    /// CPUs back.
    /// Starts `command` in the daemons' PID namespace, which dies with the
    /// launcher (for the passt the launcher runs, `crate::network::passt`).
    pub fn spawn_member(
        &self,
        command: std::process::Command,
    ) -> std::io::Result<std::process::Child> {
        self.placement.spawn(command)
    }

    pub fn release_start_cpu(&self) {
        self.libvirtd.release_start_cpu();
        self.virtlogd.release_start_cpu();
    }

    /// Once the daemon answered `virConnectGetVersion` (it probed QEMU by
    /// then): after a cold start in session mode, keeps the entry it made
    /// in the user's own session cache, so that this user's next launcher
    /// starts warm. The
    /// host's entry cannot serve an unprivileged user (see
    /// `capabilities::seed`).
    pub fn keep_capabilities(&self) {
        if self.mode != DaemonMode::Session || !self.cold_start {
            return;
        }
        match capabilities::keep_for_user(&self.runtime_dir.join("cache")) {
            Ok(dir) => log::info!(
                "daemons: kept the QEMU capabilities the daemon probed in {}, for this user's next start",
                dir.display()
            ),
            Err(e) => log::debug!("daemons: the probed QEMU capabilities are not kept: {e}"),
        }
    }

    /// Stops the daemons, side by side (QEMU, virtlogd's only writer, is
    /// gone by then). A QEMU of theirs still running (its domain's stop went unobserved, or
    /// the launcher is giving up) is ended first, with SIGTERM so that it
    /// can flush its disks, as KubeVirt's virt-launcher-monitor does. Last,
    /// the namespace ends, taking anything else left in it (a helper) with
    /// it: nothing the launcher started outlives it.
    pub fn stop(&self) {
        let mut steps = Vec::new();
        let mut time = |name: &'static str, step: &dyn Fn()| {
            let started = std::time::Instant::now();
            step();
            steps.push(format!(
                "{name} {:.1} ms",
                started.elapsed().as_secs_f64() * 1e3
            ));
        };
        time("leftover QEMU", &|| self.end_leftover_qemu());
        // Side by side: virtlogd has nothing left to log once QEMU is gone.
        time("daemons", &|| {
            self.libvirtd.ask_to_stop();
            self.virtlogd.ask_to_stop();
            self.libvirtd.wait_stopped(STOP_GRACE);
            self.virtlogd.wait_stopped(STOP_GRACE);
        });
        time("namespace", &|| self.placement.end(INIT_TIMEOUT));
        log::debug!("daemons: stopped ({})", steps.join(", "));
    }

    /// QEMU processes listed in the daemon's pid files, still alive, by
    /// their pids in the launcher's PID namespace (the files hold the
    /// daemons' namespace's pids).
    fn leftover_qemu(&self) -> Vec<u32> {
        // The QEMU driver's state directory: /run/libvirt/qemu, or in
        // session mode $XDG_RUNTIME_DIR/libvirt/qemu/run.
        let dir = match (&*self.placement, self.mode) {
            (Placement::Pod, _) => self.runtime_dir.join("qemu"),
            (_, DaemonMode::System) => self.runtime_dir.join("run/qemu"),
            (_, DaemonMode::Session) => self.runtime_dir.join("run/qemu/run"),
        };
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
                self.placement.host_pid(inner)
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
            "mode": self.mode.as_str(),
            "runtime_dir": self.runtime_dir,
            "host_uuid": self.host_uuid,
            "init_pid": self.placement.init_pid(),
            "daemons": [one(&self.libvirtd), one(&self.virtlogd)],
        })
    }

    /// The libvirt daemon's last error line, to explain a failure.
    pub fn last_error(&self) -> Option<String> {
        self.libvirtd.last_error()
    }

    /// Where the daemon keeps the QEMU log of a domain: /var/log/libvirt,
    /// or in session mode $XDG_CACHE_HOME/libvirt/qemu/log.
    pub fn qemu_log(&self, domain: &str) -> PathBuf {
        let dir = match (&*self.placement, self.mode) {
            (Placement::Pod, _) => PathBuf::from("/var/log/libvirt/qemu"),
            (_, DaemonMode::System) => self.runtime_dir.join("log/qemu"),
            (_, DaemonMode::Session) => self.runtime_dir.join("cache/qemu/log"),
        };
        dir.join(format!("{domain}.log"))
    }
}

/// The XDG directories of a non-root pod's session daemons: the pod's own
/// when its environment sets them (virt-controller does for a non-root
/// pod), else those KubeVirt's pod sets: the runtime directory /var/run
/// (sockets in /var/run/libvirt, QEMU's pid files in
/// /var/run/libvirt/qemu/run), configuration and cache (QEMU's logs) in
/// /var/run/kubevirt-private.
fn pod_session_env() -> Vec<(String, String)> {
    [
        ("XDG_RUNTIME_DIR", "/var/run"),
        ("XDG_CONFIG_HOME", "/var/run/kubevirt-private"),
        ("XDG_CACHE_HOME", "/var/run/kubevirt-private"),
    ]
    .into_iter()
    .map(|(name, default)| {
        let dir = std::env::var(name)
            .ok()
            .filter(|dir| Path::new(dir).is_absolute())
            .unwrap_or_else(|| default.to_string());
        (name.to_string(), dir)
    })
    .collect()
}

/// A session daemon reads qemu.conf from `$XDG_CONFIG_HOME/libvirt`:
/// the image's /etc/libvirt/qemu.conf is copied there (KubeVirt's
/// `SetupLibvirt` for a non-root pod); an image without one leaves
/// libvirt's defaults.
fn copy_image_qemu_conf(dir: &Path) -> Result<(), DaemonError> {
    fs::create_dir_all(dir)
        .map_err(|e| DaemonError::os(format!("cannot create {}", dir.display()), e))?;
    let image = Path::new("/etc/libvirt/qemu.conf");
    match fs::read(image) {
        Ok(conf) => fs::write(dir.join("qemu.conf"), conf).map_err(|e| {
            DaemonError::os(
                format!("cannot write {}", dir.join("qemu.conf").display()),
                e,
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DaemonError::os(
            format!("cannot read {}", image.display()),
            e,
        )),
    }
}

/// libvirt's own passt backend (libvirt 9.2 and newer) starts passt as
/// the QEMU user, root here; passt then drops to user nobody by itself, and
/// Debian 12's passt (2023-03-09) writes its PID file only after that, in
/// libvirt's `/run/libvirt/qemu/passt`, root's and 0755 as libvirt makes
/// it: the start fails ("PID file open: Permission denied"). Made here
/// before the daemon starts, any user may create files in it (sticky, not
/// listed); only this launcher's daemons see it, and libvirt before 9.2
/// leaves it unused.
fn open_passt_dir(dir: &Path) {
    let made = fs::create_dir_all(dir)
        .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(0o1733)));
    if let Err(e) = made {
        log::warn!(
            "daemons: cannot make {} for passt's PID file ({e}); libvirt's passt backend may fail to start passt",
            dir.display()
        );
    }
}

/// Starts both daemons side by side (the libvirt daemon needs virtlogd
/// only when it starts a domain) and waits until both report ready; stops
/// what started if either fails.
fn start_pair(
    libvirtd: DaemonSpec,
    virtlogd: DaemonSpec,
    placement: &Arc<Placement>,
    fatal: &FatalSender,
) -> Result<(Supervisor, Supervisor), DaemonError> {
    let virtlogd = Supervisor::spawn(virtlogd, placement.clone(), fatal)
        .inspect_err(|_| placement.end(INIT_TIMEOUT))?;
    let libvirtd = match Supervisor::spawn(libvirtd, placement.clone(), fatal) {
        Ok(starting) => starting,
        Err(e) => {
            virtlogd.abandon();
            placement.end(INIT_TIMEOUT);
            return Err(e);
        }
    };
    let virtlogd = match virtlogd.wait_ready(READY_TIMEOUT) {
        Ok(ready) => ready,
        Err(e) => {
            libvirtd.abandon();
            placement.end(INIT_TIMEOUT);
            return Err(e);
        }
    };
    let libvirtd = libvirtd.wait_ready(READY_TIMEOUT).inspect_err(|_| {
        virtlogd.stop(STOP_GRACE);
        placement.end(INIT_TIMEOUT);
    })?;
    Ok((libvirtd, virtlogd))
}

/// The (launcher directory, path the daemons see) pairs to mount. As
/// root, a missing mount point is created; an unprivileged launcher
/// cannot, and says which to create.
fn mount_points(
    runtime_dir: &Path,
    mode: DaemonMode,
) -> Result<Vec<(PathBuf, PathBuf)>, DaemonError> {
    let mut mounts = Vec::new();
    let mut missing = Vec::new();
    for (sub, target) in OVERLAID {
        match mode {
            // An empty directory where libvirt is installed but never ran.
            DaemonMode::System => fs::create_dir_all(target)
                .map_err(|e| DaemonError::os(format!("cannot create mount point {target}"), e))?,
            DaemonMode::Session if !Path::new(target).is_dir() => missing.push(target),
            DaemonMode::Session => {}
        }
        mounts.push((runtime_dir.join(sub), PathBuf::from(target)));
    }
    if !missing.is_empty() {
        return Err(DaemonError::Refused(format!(
            "the daemons' directories are mounted over {} in their own mount namespace, and {} missing on this host; \
             a non-root launcher cannot create them: create them once as root (mkdir -p {}; scripts/setup-host.sh does), \
             or run the launcher as root",
            OVERLAID.map(|(_, t)| t).join(", "),
            if missing.len() == 1 {
                format!("{} is", missing[0])
            } else {
                format!("{} are", missing.join(", "))
            },
            missing.join(" ")
        )));
    }
    Ok(mounts)
}

/// The libvirt daemon keeps a TPM's state in its swtpm directory, by
/// domain UUID (libvirt 9.0 cannot put it elsewhere), and swtpm_setup its
/// certificate authority in /var/lib/swtpm-localca. As KubeVirt's pod
/// mounts its backend-storage PVC's `swtpm` and `swtpm-localca` subPaths
/// over them, the daemons' namespace gets `<backend>/swtpm` and
/// `<backend>/swtpm-localca` there: a persistent TPM's state outlives the
/// launcher and its private dir. In session mode the swtpm directory is
/// `$XDG_CONFIG_HOME/libvirt/qemu/swtpm`, and swtpm_setup's authority is
/// per user (not kept).
fn backend_storage_mounts(
    backend: &Path,
    runtime_dir: &Path,
    mode: DaemonMode,
) -> Result<Vec<(PathBuf, PathBuf)>, DaemonError> {
    let create = |dir: &Path| {
        fs::create_dir_all(dir)
            .map_err(|e| DaemonError::os(format!("cannot create {}", dir.display()), e))
    };
    let swtpm = backend.join(crate::convert::BACKEND_SWTPM_DIR);
    create(&swtpm)?;
    // The mount point, in the directory mounted over libvirt's own.
    let (overlay_point, target) = match mode {
        DaemonMode::System => (runtime_dir.join("lib/swtpm"), "/var/lib/libvirt/swtpm"),
        DaemonMode::Session => (
            runtime_dir.join("etc/qemu/swtpm"),
            "/etc/libvirt/qemu/swtpm",
        ),
    };
    create(&overlay_point)?;
    let mut mounts = vec![(swtpm, PathBuf::from(target))];
    const LOCALCA: &str = "/var/lib/swtpm-localca";
    if mode == DaemonMode::System
        && let Ok(host) = fs::metadata(LOCALCA)
    {
        // swtpm_setup runs as the swtpm user (tss), who owns the host's.
        let localca = backend.join(crate::convert::BACKEND_SWTPM_LOCALCA_DIR);
        create(&localca)?;
        use std::os::unix::fs::MetadataExt;
        std::os::unix::fs::chown(&localca, Some(host.uid()), Some(host.gid()))
            .and_then(|()| {
                fs::set_permissions(&localca, fs::Permissions::from_mode(host.mode() & 0o7777))
            })
            .map_err(|e| {
                DaemonError::os(
                    format!("cannot give {} the owner of {LOCALCA}", localca.display()),
                    e,
                )
            })?;
        mounts.push((localca, PathBuf::from(LOCALCA)));
    }
    Ok(mounts)
}

/// Where the installed libvirt keeps its connection drivers (one module
/// each), by distribution.
fn connection_driver_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib64",
        "/usr/local/lib",
    ]
    .iter()
    .map(|lib| Path::new(lib).join("libvirt/connection-driver"))
    .collect();
    // Debian's multiarch directories, /usr/lib/x86_64-linux-gnu and such.
    if let Ok(entries) = fs::read_dir("/usr/lib") {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().contains("-linux-") {
                dirs.push(entry.path().join("libvirt/connection-driver"));
            }
        }
    }
    dirs
}

/// A directory of the launcher's holding only libvirt's QEMU driver (a link
/// to the installed module), for the daemon's `LIBVIRT_DRIVER_DIR`: libvirt
/// skips a driver whose module is not there. The monolithic libvirtd
/// otherwise loads and starts every driver installed (network, storage with
/// its backends, node devices with a udev enumeration, nwfilter, secret,
/// interface), a good part of its start (docs/figures.md), for APIs the
/// launcher never calls: its domain needs only the QEMU driver (interfaces
/// of type `ethernet`, no `<filterref>`, no storage volumes or secrets).
/// virtqemud loads only the QEMU driver anyway. `None` (the daemon loads
/// what is installed) when the module is not found.
fn qemu_driver_only(runtime_dir: &Path) -> Option<PathBuf> {
    const MODULE: &str = "libvirt_driver_qemu.so";
    let module = connection_driver_dirs()
        .into_iter()
        .map(|dir| dir.join(MODULE))
        .find(|m| m.is_file())?;
    let dir = runtime_dir.join("drivers");
    let link = dir.join(MODULE);
    // A link left by an earlier launcher in the same directory is replaced.
    let _ = fs::remove_file(&link);
    let made = fs::create_dir_all(&dir).and_then(|()| std::os::unix::fs::symlink(&module, &link));
    match made {
        Ok(()) => Some(dir),
        Err(e) => {
            log::debug!(
                "daemons: the daemon loads every installed driver ({}: {e})",
                dir.display()
            );
            None
        }
    }
}

fn find_binary(name: &str) -> Result<PathBuf, DaemonError> {
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.exists())
        .ok_or_else(|| {
            DaemonError::Refused(format!(
                "{name} is not installed (looked in /usr/sbin, /usr/bin, /usr/local/sbin)"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Session mode: the backend dir's `swtpm/` goes over the session
    /// daemon's swtpm directory, whose mount point is made in the
    /// directory mounted over /etc/libvirt; no certificate authority.
    #[test]
    fn backend_storage_goes_over_the_session_daemons_swtpm_directory() {
        let root = std::env::temp_dir().join(format!("vl-backend-mounts-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let (backend, runtime) = (root.join("state"), root.join("private/libvirt"));
        let mounts = backend_storage_mounts(&backend, &runtime, DaemonMode::Session)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            mounts,
            [(
                backend.join("swtpm"),
                PathBuf::from("/etc/libvirt/qemu/swtpm")
            )]
        );
        assert!(backend.join("swtpm").is_dir());
        assert!(runtime.join("etc/qemu/swtpm").is_dir());
        let _ = fs::remove_dir_all(&root);
    }
}
