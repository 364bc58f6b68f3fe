//! Replacing the launcher's binary under a running guest (`upgrade`, or
//! SIGUSR2): the hand-over state file, the new binary's check, and the
//! `execve` with the listening sockets inherited.
//!
//! The old launcher's manager refuses the upgrade while something it
//! cannot hand over runs (a migration, a backup, a memory dump, a job that
//! changes the domain); otherwise it describes its state
//! ([`HandoverState`]) and the main thread writes it to
//! `<private-dir>/upgrade-state.json`, runs the new binary's `--version`
//! and `--upgrade-check FILE` (which reads the file exactly as the new
//! launcher will), and only when both succeed answers the client and
//! `execve`s the new binary: same PID, same arguments, the listening
//! command sockets passed as descriptors named in
//! `VIRT_LAUNCHER_LISTEN_FDS`. Nothing else (QEMU, the libvirt daemon, the
//! domain's definition) is touched: the new launcher adopts the running
//! domain as a restarted one does, and answers on the same socket file,
//! which never disappears (connections waiting meanwhile queue in the
//! listening socket's backlog).

use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The newest version of the state file this binary writes: 2 when it
/// hands over spawned libvirt daemons (`daemons`), else 1. A binary reads
/// every version up to its own; an older binary refuses a newer file in
/// its `--upgrade-check`, so a downgrade it could not follow is refused
/// before anything happens.
pub const STATE_VERSION: u32 = 2;

/// The version of a state file with or without daemons to hand over.
pub fn state_version(with_daemons: bool) -> u32 {
    if with_daemons { 2 } else { 1 }
}

/// The state file's name in the private directory.
pub const STATE_FILE: &str = "upgrade-state.json";

/// The environment variable naming the inherited listening sockets:
/// `json=FD` and, in KubeVirt mode, `grpc=FD`, comma-separated.
pub const LISTEN_FDS_ENV: &str = "VIRT_LAUNCHER_LISTEN_FDS";
/// The environment variable naming the state file to resume from.
pub const STATE_ENV: &str = "VIRT_LAUNCHER_UPGRADE_STATE";
/// A stop signal that arrived while the hand-over was committed: the new
/// launcher acts on it as soon as it runs.
pub const PENDING_SIGNAL_ENV: &str = "VIRT_LAUNCHER_PENDING_SIGNAL";
/// The read end of a pipe into which the signal handler writes a stop
/// signal that arrives in the last moments before the exec (after the
/// pending signal was read): the new launcher reads it at start.
pub const LATE_SIGNALS_ENV: &str = "VIRT_LAUNCHER_LATE_SIGNALS";

/// How long the new binary's checks may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// What the old launcher hands over beside the live domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoverState {
    pub version: u32,
    /// The old launcher's version.
    pub from: String,
    /// The launcher's phase when it handed over.
    pub phase: String,
    /// The domain's state as the old manager saw it.
    pub domain_state: String,
    /// Whether the guest agent was connected.
    pub agent_connected: bool,
    /// The grace period (seconds) a signal would give the guest.
    pub grace_period_seconds: u64,
    /// When the first `shutdown` command came (seconds since the epoch).
    #[serde(default)]
    pub shutdown_requested_at: Option<f64>,
    /// Event subscribers connected at the hand-over (they reconnect and
    /// subscribe again: events are per connection).
    #[serde(default)]
    pub subscribers: usize,
    /// The graceful stop after a signal, when one was under way: the new
    /// launcher keeps its deadline.
    #[serde(default)]
    pub graceful_stop: Option<GracefulStopHandover>,
    /// The last migration as `query-migration` showed it (ended: a running
    /// one refuses the upgrade), so that it still shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<serde_json::Value>,
    /// The event hub's numbering and retained events, taken at the exec
    /// (`subscribe`'s `since` goes on across the hand-over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<crate::events::EventsHandover>,
    /// The launcher's own libvirt daemons (`--spawn-libvirt`; version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemons: Option<crate::daemons::DaemonsHandover>,
    /// vCPU threads QEMU made since the domain started, when the old
    /// launcher knew (under TCG each holds a translation context for good:
    /// without the count the new launcher refuses to take vCPUs away).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_threads: Option<u32>,
    /// When the old launcher execed the new binary (microseconds since
    /// the epoch): the new one reports the hand-over's time from it.
    pub handed_over_at_us: u64,
}

/// A graceful stop under way at the hand-over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GracefulStopHandover {
    /// The signal that began it.
    pub signal: String,
    /// When it began and when the guest is forced off (milliseconds since
    /// the epoch).
    pub began_at_ms: u64,
    pub deadline_at_ms: u64,
}

impl HandoverState {
    /// Reads and checks a state file.
    pub fn read(path: &Path) -> Result<HandoverState, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("cannot read the hand-over state {}: {e}", path.display()))?;
        let value: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
        let version = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("{} has no version", path.display()))?;
        if version > u64::from(STATE_VERSION) || version == 0 {
            return Err(format!(
                "{} is a version {version} hand-over state; this launcher ({}) reads versions 1 to {STATE_VERSION}",
                path.display(),
                env!("CARGO_PKG_VERSION")
            ));
        }
        serde_json::from_value(value)
            .map_err(|e| format!("{}: not a hand-over state: {e}", path.display()))
    }

    /// Writes the state to `dir/upgrade-state.json` (through a temporary
    /// file, so the path always holds a whole file).
    pub fn write(&self, dir: &Path) -> io::Result<PathBuf> {
        let path = dir.join(STATE_FILE);
        let temp = dir.join(format!(".{STATE_FILE}.{}", std::process::id()));
        let text = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        std::fs::write(&temp, text)?;
        std::fs::rename(&temp, &path)?;
        Ok(path)
    }
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    now_us() / 1000
}

/// Microseconds since the epoch, now.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

static OWN_PATH: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Remembers the path this binary was started from, before anything can
/// replace the file: `upgrade` without a binary execs that path, re-read
/// from disk.
pub fn remember_own_path() {
    OWN_PATH.get_or_init(|| {
        std::env::current_exe().ok().map(|p| {
            // A binary replaced on disk shows as "path (deleted)".
            let text = p.to_string_lossy();
            match text.strip_suffix(" (deleted)") {
                Some(stripped) => PathBuf::from(stripped),
                None => p,
            }
        })
    });
}

/// The launcher's own path (see [`remember_own_path`]).
pub fn own_path() -> Option<PathBuf> {
    remember_own_path();
    OWN_PATH.get().cloned().flatten()
}

/// `--upgrade-check FILE`: reads the state file as the resuming launcher
/// would; the exit status says whether this binary can take over.
pub fn self_check(path: &Path) -> i32 {
    match HandoverState::read(path) {
        Ok(state) => {
            println!(
                "virt-launcher {}: can resume from {}'s version {} hand-over state",
                env!("CARGO_PKG_VERSION"),
                state.from,
                state.version
            );
            0
        }
        Err(e) => {
            eprintln!("virt-launcher: --upgrade-check: {e}");
            crate::exit::ExitCode::Usage.code()
        }
    }
}

/// Runs `binary` with `args`; its standard output when it exits 0 within
/// the check's time, else why not.
fn run_check(binary: &Path, args: &[&std::ffi::OsStr]) -> Result<String, String> {
    let shown = format!(
        "{} {}",
        binary.display(),
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove(LISTEN_FDS_ENV)
        .env_remove(STATE_ENV)
        .env_remove(PENDING_SIGNAL_ENV)
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    let deadline = Instant::now() + CHECK_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{shown} did not finish within {} s",
                    CHECK_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("cannot wait for {shown}: {e}")),
        }
    };
    let output = child
        .wait_with_output()
        .map_err(|e| format!("cannot read {shown}'s output: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(format!(
            "{shown} failed ({status}){}",
            if stderr.is_empty() {
                String::new()
            } else {
                format!(": {stderr}")
            }
        ));
    }
    Ok(stdout)
}

/// Checks that `binary` is a launcher that can resume from `state`:
/// its `--version` names a virt-launcher, and its `--upgrade-check`
/// reads the file. Returns the new binary's version line.
pub fn check_binary(binary: &Path, state: &Path) -> Result<String, String> {
    let version = run_check(binary, &["--version".as_ref()])?;
    let version = version.lines().next().unwrap_or_default().to_string();
    if !version.starts_with("virt-launcher ") {
        return Err(format!(
            "{} --version printed {version:?}, not a virt-launcher version",
            binary.display()
        ));
    }
    run_check(binary, &["--upgrade-check".as_ref(), state.as_os_str()])?;
    Ok(version)
}

/// A stop signal the manager held while the hand-over was under way
/// (raw number; 0: none).
static HELD_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The manager holds a stop signal that arrived during the hand-over.
pub fn hold_signal(raw: i32) {
    let _ = HELD_SIGNAL.compare_exchange(0, raw, Ordering::AcqRel, Ordering::Acquire);
}

/// Takes the held stop signal, if any.
pub fn take_held_signal() -> Option<i32> {
    match HELD_SIGNAL.swap(0, Ordering::AcqRel) {
        0 => None,
        raw => Some(raw),
    }
}

/// Whether a hand-over is under way (from the manager's yes to the exec
/// or its failure).
static HANDING_OVER: AtomicBool = AtomicBool::new(false);
/// A stop signal that arrived during the hand-over, noted by the signal
/// handler itself: one arriving just before the exec, whose way through
/// the signal thread and the manager would end with the process
/// replaced, is still passed on.
static LATE_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The manager begins (true) or gives up (false) a hand-over.
pub fn set_handing_over(on: bool) {
    HANDING_OVER.store(on, Ordering::Release);
    if !on {
        LATE_SIGNAL.store(0, Ordering::Release);
    }
}

/// The write end of the late-signal pipe (see [`LATE_SIGNALS_ENV`]) while
/// the exec is committed; -1: none.
static LATE_PIPE: AtomicI32 = AtomicI32::new(-1);

/// Called by the stop signals' handler (async-signal-safe: atomics and
/// write(2) only).
pub fn note_signal(raw: i32) {
    if HANDING_OVER.load(Ordering::Acquire) {
        let _ = LATE_SIGNAL.compare_exchange(0, raw, Ordering::AcqRel, Ordering::Acquire);
        let fd = LATE_PIPE.load(Ordering::Acquire);
        if fd >= 0 {
            // The descriptor is never closed while it is published here
            // (see `exec`).
            crate::os::write_byte_signal_safe(fd, u8::try_from(raw).unwrap_or(0));
        }
    }
}

/// The stop signal to pass to the new launcher: the one the manager held,
/// else one the handler noted.
fn pending_signal() -> Option<i32> {
    take_held_signal().or_else(|| match LATE_SIGNAL.swap(0, Ordering::AcqRel) {
        0 => None,
        raw => Some(raw),
    })
}

/// Execs `command` from the calling thread, its stop signals blocked (the
/// mask survives the exec, so a signal waits for the new launcher's
/// handlers) and a stop signal that arrived during the hand-over passed
/// on, read at the last moment. Returns only on failure (the signal then
/// held again, for the manager).
pub fn exec_now(mut command: Command) -> io::Error {
    block_stop_signals();
    let pending = pending_signal();
    if let Some(raw) = pending {
        command.env(PENDING_SIGNAL_ENV, raw.to_string());
    }
    let error = command.exec();
    if let Some(raw) = pending {
        hold_signal(raw);
    }
    error
}

/// The stop signals, blocked in the main thread across the exec (the mask
/// survives `execve`, so one arriving before the new launcher installs its
/// handlers waits instead of killing it).
const STOP_SIGNALS: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR2,
];

/// Blocks the stop signals in the calling thread (the one about to exec).
pub fn block_stop_signals() {
    crate::os::mask_signals(&STOP_SIGNALS, true);
}

/// Unblocks the stop signals (the new launcher, once its handlers are in
/// place; a signal that waited is delivered now).
pub fn unblock_stop_signals() {
    crate::os::mask_signals(&STOP_SIGNALS, false);
}

/// The listening sockets the previous launcher passed, by name (`json`,
/// `grpc`), read from the environment once at start-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inherited {
    pub json: Option<RawFd>,
    pub grpc: Option<RawFd>,
    pub state: Option<PathBuf>,
    pub pending_signal: Option<i32>,
}

impl Inherited {
    /// Reads (and removes, so no child sees them) the variables. Called
    /// while the process has one thread.
    pub fn take_from_env() -> Inherited {
        let mut inherited = Inherited::default();
        if let Some(fds) = std::env::var_os(LISTEN_FDS_ENV) {
            for part in fds.to_string_lossy().split(',') {
                let Some((name, fd)) = part.split_once('=') else {
                    continue;
                };
                let Ok(fd) = fd.parse::<RawFd>() else {
                    continue;
                };
                if !crate::os::is_listening_socket(fd) {
                    log::warn!(
                        "{LISTEN_FDS_ENV}: descriptor {fd} is not a listening socket; ignored"
                    );
                    continue;
                }
                match name {
                    "json" => inherited.json = Some(fd),
                    "grpc" => inherited.grpc = Some(fd),
                    _ => {}
                }
            }
        }
        inherited.state = std::env::var_os(STATE_ENV).map(PathBuf::from);
        // One stop signal, whichever way it came (the same one may have
        // come both ways).
        let late = read_late_signal();
        inherited.pending_signal = std::env::var(PENDING_SIGNAL_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .or(late);
        // SAFETY: only this thread runs (see the caller).
        unsafe {
            std::env::remove_var(LATE_SIGNALS_ENV);
            std::env::remove_var(LISTEN_FDS_ENV);
            std::env::remove_var(STATE_ENV);
            std::env::remove_var(PENDING_SIGNAL_ENV);
        }
        for fd in [inherited.json, inherited.grpc].into_iter().flatten() {
            crate::os::set_cloexec(fd, true);
        }
        if inherited.state.is_some() {
            return_to_own_pid_namespace();
        }
        inherited
    }
}

/// The first stop signal in the late-signal pipe the previous launcher
/// passed (its write end closed at the exec: nothing more comes); the
/// pipe is closed.
fn read_late_signal() -> Option<i32> {
    let fd: RawFd = std::env::var(LATE_SIGNALS_ENV).ok()?.parse().ok()?;
    if !crate::os::set_cloexec(fd, true) {
        return None;
    }
    // SAFETY: the descriptor was open (fcntl succeeded) and passed for
    // this use alone; it is owned, and closed, here.
    let pipe = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    use std::os::fd::AsFd;
    let ready = crate::os::wait_readable(&[pipe.as_fd()], Some(Duration::ZERO)).ok()?;
    if !ready.first().copied().unwrap_or(false) {
        return None;
    }
    let mut byte = [0u8; 1];
    match io::Read::read(&mut std::fs::File::from(pipe), &mut byte) {
        Ok(1) => Some(i32::from(byte[0])).filter(|&raw| raw != 0),
        _ => None,
    }
}

/// With `--spawn-libvirt` the previous launcher execed from its spawner
/// thread, whose children go to the daemons' PID namespace, and so do this
/// process's: the kernel then refuses it any new thread. Back to its own
/// (the namespace it lives in), while it has one thread.
fn return_to_own_pid_namespace() {
    use std::os::fd::AsFd;
    let own = crate::os::Namespace::Pid.open_own();
    let for_children = std::fs::read_link("/proc/thread-self/ns/pid_for_children");
    let own_identity = std::fs::read_link("/proc/thread-self/ns/pid");
    if let (Ok(own), Ok(children), Ok(identity)) = (own, for_children, own_identity)
        && children != identity
        && let Err(e) = crate::os::setns(own.as_fd(), crate::os::Namespace::Pid)
    {
        log::error!("upgrade: cannot return to the launcher's PID namespace: {e}");
    }
}

/// Replaces this process with `binary`, same arguments (and `argv[0]`),
/// the listening sockets and `inherit` inherited; `run` execs the command
/// (from the thread that must do it). Returns only on failure, with the
/// descriptors' close-on-exec flags restored and the signals unblocked.
pub fn exec(
    binary: &Path,
    listeners: &[(&str, RawFd)],
    inherit: &[RawFd],
    state: &Path,
    run: &dyn Fn(Command) -> io::Error,
) -> io::Error {
    let mut args = std::env::args_os();
    let arg0: OsString = args.next().unwrap_or_else(|| binary.as_os_str().to_owned());
    let named: Vec<String> = listeners
        .iter()
        .map(|(name, fd)| format!("{name}={fd}"))
        .collect();
    // A stop signal from here on is written by its handler into a pipe
    // the new launcher reads (the write end closes at the exec).
    let late = match io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return e,
    };
    let late_fd = std::os::fd::AsRawFd::as_raw_fd(&late.0);
    let fds: Vec<RawFd> = listeners
        .iter()
        .map(|(_, fd)| *fd)
        .chain(inherit.iter().copied())
        .chain(std::iter::once(late_fd))
        .collect();
    for (i, fd) in fds.iter().enumerate() {
        if !crate::os::set_cloexec(*fd, false) {
            let error = io::Error::last_os_error();
            for fd in &fds[..i] {
                crate::os::set_cloexec(*fd, true);
            }
            return error;
        }
    }
    crate::os::mask_signals(&STOP_SIGNALS, true);
    let mut command = Command::new(binary);
    command
        .arg0(arg0)
        .args(args)
        .env(LISTEN_FDS_ENV, named.join(","))
        .env(STATE_ENV, state)
        .env(LATE_SIGNALS_ENV, late_fd.to_string());
    LATE_PIPE.store(std::os::fd::AsRawFd::as_raw_fd(&late.1), Ordering::Release);
    let error = run(command);
    LATE_PIPE.store(-1, Ordering::Release);
    // A handler may still hold the write end's number: the pipe is not
    // closed (two descriptors, once per failed exec).
    std::mem::forget(late);
    for fd in &fds {
        crate::os::set_cloexec(*fd, true);
    }
    crate::os::mask_signals(&STOP_SIGNALS, false);
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    fn state() -> HandoverState {
        HandoverState {
            events: None,
            version: STATE_VERSION,
            from: "0.1.0".into(),
            phase: "Running".into(),
            domain_state: "Running".into(),
            agent_connected: true,
            grace_period_seconds: 30,
            shutdown_requested_at: None,
            graceful_stop: Some(GracefulStopHandover {
                signal: "SIGTERM".into(),
                began_at_ms: 5,
                deadline_at_ms: 30_005,
            }),
            subscribers: 2,
            daemons: None,
            migration: None,
            vcpu_threads: Some(3),
            handed_over_at_us: 1,
        }
    }

    #[test]
    fn the_state_file_round_trips_and_a_newer_version_is_refused() {
        let dir = ScratchDir::new("upgrade-state");
        let path = state().write(&dir).unwrap();
        assert_eq!(HandoverState::read(&path).unwrap(), state());
        assert_eq!(self_check(&path), 0);
        let mut newer = serde_json::to_value(state()).unwrap();
        newer["version"] = (STATE_VERSION + 1).into();
        std::fs::write(&path, newer.to_string()).unwrap();
        let err = HandoverState::read(&path).unwrap_err();
        assert!(err.contains("reads versions 1 to"), "{err}");
        assert_ne!(self_check(&path), 0);
        std::fs::write(&path, b"{\"version\":1}").unwrap();
        assert!(HandoverState::read(&path).is_err());
    }

    #[test]
    fn a_state_with_daemons_is_version_2_and_round_trips() {
        let dir = ScratchDir::new("upgrade-daemons");
        let mut with = state();
        with.version = state_version(true);
        let one = |pid| crate::daemons::DaemonHandover {
            pid,
            stderr_fd: Some(7),
            restarts: 1,
        };
        with.daemons = Some(crate::daemons::DaemonsHandover {
            uri: "qemu+unix:///system?socket=/x".into(),
            runtime_dir: "/p/libvirt".into(),
            host_uuid: "u".into(),
            init_pid: 10,
            lifeline_fd: 5,
            libvirtd: one(12),
            virtlogd: crate::daemons::DaemonHandover {
                stderr_fd: None,
                ..one(11)
            },
        });
        let path = with.write(&dir).unwrap();
        assert_eq!(HandoverState::read(&path).unwrap(), with);
        assert_eq!(state_version(false), 1);
        assert_eq!(state_version(true), STATE_VERSION);
    }

    #[test]
    fn a_binary_that_is_not_a_launcher_fails_its_check() {
        let dir = ScratchDir::new("upgrade-check");
        let path = state().write(&dir).unwrap();
        let err = check_binary(Path::new("/bin/false"), &path).unwrap_err();
        assert!(err.contains("failed"), "{err}");
        let err = check_binary(Path::new("/nonexistent/launcher"), &path).unwrap_err();
        assert!(err.contains("cannot run"), "{err}");
        let err = check_binary(Path::new("/bin/echo"), &path).unwrap_err();
        assert!(err.contains("not a virt-launcher"), "{err}");
    }
}
