//! Supervision of one daemon: a thread starts it and waits for it,
//! restarts it a second after it dies, pipes its stderr into the
//! launcher's log, and stops it in order when asked.

use super::error::DaemonError;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};

use super::placement::Placement;
use crate::os;
use crate::protocol::codec::{Frame, LineReader};
use crate::threads::{self, FatalSender};

/// How long after a daemon dies it is started again; doubled (up to
/// `MAX_RESTART_DELAY`) while it keeps dying within `STABLE_RUN` of
/// starting, so a crash loop does not flood the log.
const RESTART_DELAY: Duration = Duration::from_secs(1);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
const STABLE_RUN: Duration = Duration::from_secs(30);
/// Longest line of daemon output copied to the log.
const MAX_LOG_LINE: usize = 512 * 1024;

/// What to run.
#[derive(Clone)]
pub struct DaemonSpec {
    pub name: String,
    pub binary: PathBuf,
    pub args: Vec<String>,
    /// Set in the daemon's environment (session mode's XDG directories).
    pub env: Vec<(String, String)>,
    pub ready: Readiness,
    /// The CPU its first start runs on until it is ready (see
    /// `capabilities`); then it gets the launcher's CPUs.
    pub start_cpu: Option<usize>,
    /// A directory the daemon sees read-only, in a mount namespace of its
    /// own (`os::read_only_view`).
    pub read_only: Option<CString>,
}

/// How a daemon says it is ready.
#[derive(Clone, Debug)]
pub enum Readiness {
    /// READY=1 on this datagram socket (sd_notify protocol, libvirt's).
    Notify(PathBuf),
    /// Its listening socket appears at this path (virtiofsd, which speaks
    /// no sd_notify); a socket left there is removed before each start.
    Listening(PathBuf),
}

impl DaemonSpec {
    /// Starts the daemon once, with its stderr copied to the log. Only the
    /// first start reports readiness; restarts are noticed by the
    /// manager's reconnect.
    fn spawn(
        &self,
        placement: &Placement,
        report_ready: bool,
        last_error: &Arc<Mutex<Option<String>>>,
        stderr_fd: &Mutex<Option<RawFd>>,
        fatal: &FatalSender,
    ) -> io::Result<Child> {
        let mut command = Command::new(&self.binary);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if report_ready {
            if let Readiness::Notify(socket) = &self.ready {
                command.env("NOTIFY_SOCKET", socket);
            }
            if let Some(cpus) = self.start_cpu.and_then(os::CpuSet::single) {
                os::before_exec(&mut command, vec![os::BeforeExec::CpuAffinity(cpus)]);
            }
        }
        if let Readiness::Listening(socket) = &self.ready {
            remove_stale(socket)?;
        }
        let then = self
            .read_only
            .iter()
            .map(|dir| os::BeforeExec::ReadOnlyView(dir.clone()))
            .collect();
        let mut child = placement.spawn_then(command, then)?;
        if let Some(stderr) = child.stderr.take() {
            if let Ok(mut fd) = stderr_fd.lock() {
                *fd = Some(stderr.as_raw_fd());
            }
            self.log_output(OwnedFd::from(stderr).into(), last_error, fatal);
        }
        Ok(child)
    }

    /// Copies the daemon's output to the log, on a thread of its own.
    fn log_output(
        &self,
        stderr: std::fs::File,
        last_error: &Arc<Mutex<Option<String>>>,
        fatal: &FatalSender,
    ) {
        let name = self.name.clone();
        let last_error = last_error.clone();
        let _ = threads::spawn_named(&format!("{name}-log"), fatal, move || {
            copy_to_log(&name, stderr, &last_error)
        });
    }
}

/// Removes what an earlier run left at a daemon's socket path.
fn remove_stale(socket: &Path) -> io::Result<()> {
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// libvirt writes "<time>: <tid>: error : <function>:<line> : <message>".
fn copy_to_log(name: &str, stderr: std::fs::File, last_error: &Mutex<Option<String>>) {
    let mut lines = LineReader::new(stderr, MAX_LOG_LINE);
    while let Ok(Some(frame)) = lines.next_frame() {
        if let Frame::Line(line) = frame {
            let text = String::from_utf8_lossy(&line);
            if let Some((_, message)) = text.split_once(": error : ") {
                log::warn!("{name}: {text}");
                if let Ok(mut last) = last_error.lock() {
                    *last = Some(message.to_string());
                }
            } else {
                log::info!("{name}: {text}");
            }
        }
    }
}

/// A running, supervised daemon.
pub struct Supervisor {
    pub name: String,
    pid: Arc<Mutex<Option<u32>>>,
    last_error: Arc<Mutex<Option<String>>>,
    restarts: Arc<AtomicU32>,
    stopping: Arc<AtomicBool>,
    stop_tx: Sender<()>,
    done_rx: Receiver<()>,
    /// Still on the one CPU it started on (see `release_start_cpu`).
    pinned: AtomicBool,
    /// The read end of the daemon's stderr pipe (handed to a new launcher
    /// by `upgrade`).
    stderr_fd: Arc<Mutex<Option<RawFd>>>,
}

/// A daemon started and not yet ready.
pub struct Starting {
    supervisor: Supervisor,
    /// The bound notify socket ([`Readiness::Notify`]).
    notify: Option<UnixDatagram>,
    ready: Readiness,
    start_cpu: Option<usize>,
}

impl Supervisor {
    /// Starts the daemon where `placement` says and supervises it; `wait_ready`
    /// then waits until it reports ready (so that two daemons start side
    /// by side). The supervisor's own thread starts it, so that a
    /// parent-death signal tied to the starting thread fires only when the
    /// supervision ends.
    pub fn spawn(
        spec: DaemonSpec,
        placement: Arc<Placement>,
        fatal: &FatalSender,
    ) -> Result<Starting, DaemonError> {
        let notify = match &spec.ready {
            Readiness::Notify(socket) => Some(bind_notify(socket)?),
            Readiness::Listening(_) => None,
        };
        let last_error = Arc::new(Mutex::new(None));
        let pid = Arc::new(Mutex::new(None));
        let restarts = Arc::new(AtomicU32::new(0));
        let stopping = Arc::new(AtomicBool::new(false));
        let (stop_tx, stop_rx) = bounded(1);
        let (done_tx, done_rx) = bounded(1);
        let stderr_fd = Arc::new(Mutex::new(None));
        let watcher = Watcher {
            spec: spec.clone(),
            placement,
            pid: pid.clone(),
            last_error: last_error.clone(),
            restarts: restarts.clone(),
            stopping: stopping.clone(),
            stop_rx,
            done_tx,
            stderr_fd: stderr_fd.clone(),
            fatal: fatal.clone(),
        };
        let (spawned_tx, spawned_rx) = bounded(1);
        threads::spawn_named(
            &format!("{}-supervisor", spec.name),
            fatal,
            move || match watcher.spec.spawn(
                &watcher.placement,
                true,
                &watcher.last_error,
                &watcher.stderr_fd,
                &watcher.fatal,
            ) {
                Ok(child) => {
                    watcher.set_pid(Some(child.id()));
                    let _ = spawned_tx.send(Ok(()));
                    watcher.watch(Running::Spawned(child));
                }
                Err(e) => {
                    let _ = spawned_tx.send(Err(e));
                    let _ = watcher.done_tx.send(());
                }
            },
        )
        .map_err(|e| DaemonError::os(format!("cannot start the {} supervisor", spec.name), e))?;
        spawned_rx
            .recv()
            .map_err(|_| {
                DaemonError::refused(format!(
                    "the {} supervisor ended before starting it",
                    spec.name
                ))
            })?
            .map_err(|e| DaemonError::os(format!("cannot start {}", spec.binary.display()), e))?;
        Ok(Starting {
            supervisor: Supervisor {
                name: spec.name.clone(),
                pid,
                last_error,
                restarts,
                stopping,
                stop_tx,
                done_rx,
                pinned: AtomicBool::new(false),
                stderr_fd,
            },
            notify,
            ready: spec.ready,
            start_cpu: spec.start_cpu,
        })
    }

    /// Takes over the supervision of daemon `pid`, a child of this process
    /// that the launcher this one replaced started (`upgrade`), with its
    /// stderr pipe inherited as `stderr`; it is restarted as usual when it
    /// dies.
    pub fn adopt(
        spec: DaemonSpec,
        placement: Arc<Placement>,
        pid: u32,
        stderr: Option<OwnedFd>,
        restarts: u32,
        fatal: &FatalSender,
    ) -> Result<Supervisor, DaemonError> {
        let last_error = Arc::new(Mutex::new(None));
        let stderr_fd = Arc::new(Mutex::new(None));
        if let Some(stderr) = stderr {
            if let Ok(mut fd) = stderr_fd.lock() {
                *fd = Some(stderr.as_raw_fd());
            }
            spec.log_output(std::fs::File::from(stderr), &last_error, fatal);
        }
        let (stop_tx, stop_rx) = bounded(1);
        let (done_tx, done_rx) = bounded(1);
        let supervisor = Supervisor {
            name: spec.name.clone(),
            pid: Arc::new(Mutex::new(Some(pid))),
            last_error,
            restarts: Arc::new(AtomicU32::new(restarts)),
            stopping: Arc::new(AtomicBool::new(false)),
            stop_tx,
            done_rx,
            pinned: AtomicBool::new(false),
            stderr_fd,
        };
        let watcher = Watcher {
            spec,
            placement,
            pid: supervisor.pid.clone(),
            last_error: supervisor.last_error.clone(),
            restarts: supervisor.restarts.clone(),
            stopping: supervisor.stopping.clone(),
            stop_rx,
            done_tx,
            stderr_fd: supervisor.stderr_fd.clone(),
            fatal: fatal.clone(),
        };
        threads::spawn_named(
            &format!("{}-supervisor", supervisor.name),
            fatal,
            move || watcher.watch(Running::Adopted(pid)),
        )
        .map_err(|e| {
            DaemonError::os(
                format!("cannot start the {} supervisor", supervisor.name),
                e,
            )
        })?;
        Ok(supervisor)
    }

    /// What a new launcher needs to take the supervision over: the
    /// daemon's pid and its stderr pipe's descriptor (to inherit).
    pub fn handover(&self) -> Option<(u32, Option<RawFd>)> {
        let pid = self.pid()?;
        let fd = self.stderr_fd.lock().ok().and_then(|fd| *fd);
        Some((pid, fd))
    }
}

/// The daemon process a supervisor waits for.
enum Running {
    /// Started by this supervisor.
    Spawned(Child),
    /// Taken over from the launcher this one replaced.
    Adopted(u32),
}

impl Running {
    fn wait(&mut self) -> io::Result<String> {
        match self {
            Running::Spawned(child) => child.wait().map(|s| s.to_string()),
            Running::Adopted(pid) => os::wait_pid(*pid),
        }
    }
}

impl Starting {
    /// Waits until the daemon reports ready; stops it if it does not.
    pub fn wait_ready(self, timeout: Duration) -> Result<Supervisor, DaemonError> {
        let Starting {
            supervisor,
            notify,
            ready,
            start_cpu,
        } = self;
        let ready = match (&ready, &notify) {
            (Readiness::Notify(socket), Some(notify)) => {
                let ready = wait_ready(notify, &supervisor.name, timeout);
                let _ = std::fs::remove_file(socket);
                ready
            }
            (Readiness::Listening(socket), _) => wait_listening(&supervisor, socket, timeout),
            (Readiness::Notify(_), None) => Err(DaemonError::refused(format!(
                "{} has no notify socket",
                supervisor.name
            ))),
        };
        if let Err(e) = ready {
            let detail = supervisor
                .last_error()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            supervisor.stop(Duration::from_secs(5));
            return Err(e.detailed(detail));
        }
        // The daemon stays on its start CPU until it has answered the
        // launcher's first `virConnectGetVersion`
        // (`Supervisor::release_start_cpu`): libvirt validates its
        // capabilities entry, CPUID included, when that call first builds
        // its capabilities, not before it reports ready.
        supervisor
            .pinned
            .store(start_cpu.is_some(), Ordering::Release);
        Ok(supervisor)
    }

    /// Stops a daemon that will not be waited for (another failed).
    pub fn abandon(self) {
        if let Readiness::Notify(socket) = &self.ready {
            let _ = std::fs::remove_file(socket);
        }
        self.supervisor.stop(Duration::from_secs(5));
    }
}

/// Gives every thread of daemon `pid` the launcher's CPUs back, after a
/// start pinned to one (twice: a thread created during the first pass
/// may have inherited the old set).
fn release_cpu(name: &str, pid: u32) {
    let cpus = match os::cpu_affinity(0) {
        Ok(cpus) => cpus,
        Err(e) => {
            log::warn!("daemons: cannot read the launcher's CPUs to give {name}: {e}");
            return;
        }
    };
    for _ in 0..2 {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return;
        };
        for task in tasks.flatten() {
            if let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok())
                && let Err(e) = os::set_cpu_affinity(tid, &cpus)
            {
                log::debug!("daemons: cannot widen the CPUs of {name} thread {tid}: {e}");
            }
        }
    }
}

impl Supervisor {
    /// Gives a daemon started pinned to one CPU the launcher's CPUs back
    /// (once; nothing for a daemon that was not pinned).
    pub fn release_start_cpu(&self) {
        if self.pinned.swap(false, Ordering::AcqRel)
            && let Some(pid) = self.pid()
        {
            release_cpu(&self.name, pid);
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid.lock().ok().and_then(|p| *p)
    }

    /// The last error line the daemon wrote, for failure messages.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Stops the daemon: SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&self, grace: Duration) {
        self.ask_to_stop();
        self.wait_stopped(grace);
    }

    /// Sends the daemon SIGTERM (and stops restarting it) without waiting,
    /// so that daemons stop side by side; `wait_stopped` waits.
    pub fn ask_to_stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.stop_tx.try_send(());
        if let Some(pid) = self.pid() {
            let _ = os::send_signal(pid, libc::SIGTERM);
        }
    }

    /// Waits up to `grace` for the daemon asked to stop, then kills it.
    pub fn wait_stopped(&self, grace: Duration) {
        if self.done_rx.recv_timeout(grace).is_ok() {
            return;
        }
        if let Some(pid) = self.pid() {
            log::warn!(
                "daemons: {} did not stop within {grace:?}; killing it",
                self.name
            );
            let _ = os::send_signal(pid, libc::SIGKILL);
        }
        let _ = self.done_rx.recv_timeout(Duration::from_secs(2));
    }
}

/// The supervisor thread's state.
struct Watcher {
    spec: DaemonSpec,
    placement: Arc<Placement>,
    pid: Arc<Mutex<Option<u32>>>,
    last_error: Arc<Mutex<Option<String>>>,
    restarts: Arc<AtomicU32>,
    stopping: Arc<AtomicBool>,
    stop_rx: Receiver<()>,
    done_tx: Sender<()>,
    stderr_fd: Arc<Mutex<Option<RawFd>>>,
    fatal: FatalSender,
}

impl Watcher {
    fn set_pid(&self, pid: Option<u32>) {
        if let Ok(mut p) = self.pid.lock() {
            *p = pid;
        }
    }

    fn watch(&self, mut child: Running) {
        let name = self.spec.name.as_str();
        let mut delay = RESTART_DELAY;
        let mut started = Instant::now();
        loop {
            let status = child.wait();
            self.set_pid(None);
            // Wakes a start-up still waiting for READY=1.
            if let Readiness::Notify(socket) = &self.spec.ready
                && let Ok(sock) = UnixDatagram::unbound()
            {
                let _ = sock.send_to(b"EXITED=1", socket);
            }
            if self.stopping.load(Ordering::Acquire) {
                break;
            }
            delay = if started.elapsed() >= STABLE_RUN {
                RESTART_DELAY
            } else {
                (delay * 2).min(MAX_RESTART_DELAY)
            }
            .max(RESTART_DELAY);
            match status {
                Ok(s) => log::warn!(
                    "daemons: {name} exited ({s}); restarting it in {} s",
                    delay.as_secs()
                ),
                Err(e) => log::warn!("daemons: lost track of {name} ({e}); restarting it"),
            }
            // Restart until it starts, or until asked to stop.
            loop {
                match self.stop_rx.recv_timeout(delay) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => {
                        let _ = self.done_tx.send(());
                        return;
                    }
                }
                if self.stopping.load(Ordering::Acquire) {
                    let _ = self.done_tx.send(());
                    return;
                }
                if self.placement.has_ended() {
                    // The launcher is exiting (see the init's watcher);
                    // wait for the stop instead of failing every delay.
                    log::error!("daemons: the daemons' namespace has ended; not restarting {name}");
                    delay = MAX_RESTART_DELAY;
                    continue;
                }
                match self.spec.spawn(
                    &self.placement,
                    false,
                    &self.last_error,
                    &self.stderr_fd,
                    &self.fatal,
                ) {
                    Ok(c) => {
                        self.set_pid(Some(c.id()));
                        self.restarts.fetch_add(1, Ordering::Relaxed);
                        log::info!("daemons: {name} restarted (pid {})", c.id());
                        child = Running::Spawned(c);
                        started = Instant::now();
                        break;
                    }
                    Err(e) => log::error!("daemons: cannot restart {name}: {e}"),
                }
            }
        }
        let _ = self.done_tx.send(());
    }
}

fn bind_notify(path: &Path) -> Result<UnixDatagram, DaemonError> {
    let _ = std::fs::remove_file(path);
    UnixDatagram::bind(path)
        .map_err(|e| DaemonError::os(format!("cannot listen on {}", path.display()), e))
}

/// Waits until the daemon's listening socket is there, or it exits.
fn wait_listening(
    supervisor: &Supervisor,
    socket: &Path,
    timeout: Duration,
) -> Result<(), DaemonError> {
    let deadline = Instant::now() + timeout;
    loop {
        if socket.exists() {
            return Ok(());
        }
        if supervisor.pid().is_none() {
            return Err(DaemonError::refused(format!(
                "{} exited during start-up; its messages are in the log above",
                supervisor.name
            )));
        }
        if Instant::now() >= deadline {
            return Err(DaemonError::refused(format!(
                "{} did not listen on {} within {} s",
                supervisor.name,
                socket.display(),
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the daemon's READY=1 (libvirt speaks the sd_notify protocol
/// when NOTIFY_SOCKET is set), or its exit.
fn wait_ready(notify: &UnixDatagram, name: &str, timeout: Duration) -> Result<(), DaemonError> {
    notify
        .set_read_timeout(Some(timeout))
        .map_err(|e| DaemonError::os(format!("cannot wait for {name}"), e))?;
    let mut buf = [0u8; 4096];
    loop {
        let n = notify.recv(&mut buf).map_err(|e| {
            DaemonError::os(
                format!("{name} did not report ready within {} s", timeout.as_secs()),
                e,
            )
        })?;
        let message = String::from_utf8_lossy(&buf[..n]);
        if message.lines().any(|l| l == "READY=1") {
            return Ok(());
        }
        if message.contains("EXITED=1") {
            return Err(DaemonError::Refused(format!(
                "{name} exited during start-up; its messages are in the log above"
            )));
        }
    }
}
