//! The PID and mount namespaces the launcher's libvirt daemons run in.
//!
//! A KubeVirt launcher pod is a PID namespace of its own: when the pod
//! dies, however abruptly, the kernel ends every process in it, QEMU
//! included. Here the same comes from a PID namespace whose PID 1 is a
//! minimal init (`init.rs`, the launcher's binary re-executed) that dies
//! with the launcher. The daemons, and so QEMU and any helper they start,
//! live in that namespace; a SIGKILLed launcher takes all of them with it.
//!
//! The init also owns the private mount namespace: a privileged libvirt
//! daemon uses fixed host paths (/run/libvirt, /var/lib/libvirt, ...); the
//! init bind-mounts the launcher's private directories over them and
//! mounts a /proc of the new PID namespace.
//!
//! The daemons stay children of the launcher, so its supervisors wait for
//! them, restart them and read their stderr as before. Every process that
//! goes into the namespace is forked by one thread of the launcher, the
//! spawner (`pidns-spawner`): it unshares a PID namespace for its children
//! (per thread, so no other thread is affected), so the first child it
//! forks, the init, is the namespace's PID 1 and every later one a member.
//! The spawner never returns to the launcher's own PID namespace (a
//! non-root launcher, in its user namespace, may not enter that one
//! again) and starts no thread (a thread whose children go to another PID
//! namespace cannot); it only forks what the supervisors send it. The
//! child joins the mount namespace before exec. Orphans inside (QEMU after
//! libvirt's double fork) are reaped by the init.
//!
//! The init gets PR_SET_PDEATHSIG(SIGKILL), which follows the thread that
//! forked it: the spawner, which lives as long as these namespaces (and
//! so the launcher) do.

use super::error::DaemonError;
use std::fs::File;
use std::io::{self, PipeWriter, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};

use super::init;
use crate::os::{self, BeforeExec, Namespace, PidFd};
use crate::threads::{self, Fatal, FatalSender};

/// The daemons' namespaces, held open, and the init that holds the PID
/// namespace alive.
pub struct DaemonNamespaces {
    init_pid: u32,
    init: PidFd,
    /// `pid:[inode]` of the daemons' PID namespace; stays unique while
    /// `pid_ns` is open.
    pid_ns_identity: String,
    /// Keeps the namespace's identity unique while it is open.
    _pid_ns: File,
    mount_ns: Arc<File>,
    /// The spawner thread's queue.
    spawner: Sender<SpawnRequest>,
    /// The write end of the init's lifeline; closing it ends the init.
    lifeline: Mutex<Option<PipeWriter>>,
    ending: Arc<AtomicBool>,
    exited: Arc<AtomicBool>,
    /// Receives once the init has exited (and so the namespace is empty).
    ended: Receiver<()>,
    /// Taken over from the launcher this one replaced (`upgrade`): the
    /// init and the daemons are children of the thread that execed, now
    /// the main thread, so the next hand-over execs from there; what the
    /// spawner starts gets no parent-death signal (tied to the spawner
    /// thread, it would fire at that exec): the namespace's end takes it.
    adopted: bool,
}

impl DaemonNamespaces {
    /// Starts the spawner thread and, from it, the init, which
    /// bind-mounts each `(source, target)` pair and a fresh /proc in its
    /// mount namespace; waits up to `timeout` for it to report ready. An
    /// init that exits later, unasked, is reported on `fatal`: the kernel
    /// has then ended every process in the namespace.
    /// `in_user_namespace`: the launcher runs in a user namespace of its
    /// own (session mode), where a program it executes drops every
    /// capability unless told to keep one; the init keeps CAP_SYS_ADMIN
    /// there for its mounts.
    pub fn create(
        mounts: &[(PathBuf, PathBuf)],
        in_user_namespace: bool,
        timeout: Duration,
        fatal: &FatalSender,
    ) -> Result<DaemonNamespaces, DaemonError> {
        let (lifeline_rx, lifeline_tx) =
            io::pipe().map_err(|e| DaemonError::os("cannot create a pipe", e))?;
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0("virt-launcher")
            .arg(init::MODE)
            .stdin(lifeline_rx)
            .stdout(Stdio::piped())
            .env_clear()
            // A Ctrl-C at the launcher's terminal is the launcher's to
            // handle (it stops the guest first), not the namespace's.
            .process_group(0);
        for (source, target) in mounts {
            command.arg(source).arg(target);
        }
        let mut steps = vec![BeforeExec::ParentDeathSignal(libc::SIGKILL)];
        if in_user_namespace {
            // Its mounts need CAP_SYS_ADMIN (in the launcher's user
            // namespace only: it has none over the host).
            const CAP_SYS_ADMIN: u32 = 21;
            steps.push(BeforeExec::KeepCapability(CAP_SYS_ADMIN));
        }
        os::before_exec(&mut command, steps);
        let (spawner, init_spawned) = start_spawner(SpawnerStart::NewNamespace(command), fatal)?;
        let mut child = init_spawned
            .and_then(|child| child.ok_or_else(|| io::Error::other("no init was started")))
            .map_err(|e| DaemonError::os("cannot start the namespace's init", e))?;
        // The child is unreaped until the watcher below waits for it, so
        // its pid is still its own here.
        let init_pid = child.id();
        let opened = PidFd::open(init_pid)
            .map_err(|e| DaemonError::os("cannot open a pidfd for the init", e))
            .and_then(|init| {
                let stdout = child
                    .stdout
                    .take()
                    .ok_or_else(|| DaemonError::refused("the init's stdout is missing"))?;
                read_report(stdout, timeout)?;
                OpenedNamespaces::of(init_pid, init)
            });
        let opened = match opened {
            Ok(opened) => opened,
            Err(e) => {
                return Err(match init_failure(&mut child) {
                    Some(status) => e.detailed(format!(" (the init {status})")),
                    None => e,
                });
            }
        };
        Self::watched(
            InitProcess::Spawned(child),
            init_pid,
            opened,
            spawner,
            lifeline_tx,
            fatal,
        )
    }

    /// Takes over the namespaces of the launcher this one replaced
    /// (`upgrade`): its init, `init_pid`, a child of this process, and the
    /// write end of its lifeline, inherited as `lifeline`. The exec came
    /// from the thread whose children go to the daemons' PID namespace; the
    /// main thread's went back to the launcher's own at start-up
    /// (`crate::upgrade`), and a new spawner thread's go to the daemons'.
    pub fn adopt(
        init_pid: u32,
        lifeline: OwnedFd,
        fatal: &FatalSender,
    ) -> Result<DaemonNamespaces, DaemonError> {
        let init = PidFd::open(init_pid).map_err(|e| {
            DaemonError::os(format!("cannot open a pidfd for the init {init_pid}"), e)
        })?;
        let opened = OpenedNamespaces::of(init_pid, init)?;
        if Namespace::Pid.identity_of(std::process::id()).ok()
            == Some(opened.pid_ns_identity.clone())
        {
            return Err(DaemonError::Refused(format!(
                "process {init_pid} is not the init of a PID namespace of the launcher's"
            )));
        }
        let join = opened
            .pid_ns
            .try_clone()
            .map_err(|e| DaemonError::os("cannot duplicate a namespace descriptor", e))?;
        let (spawner, _) = start_spawner(SpawnerStart::Join(join), fatal)?;
        Self::watched(
            InitProcess::Adopted(init_pid),
            init_pid,
            opened,
            spawner,
            PipeWriter::from(lifeline),
            fatal,
        )
    }

    /// The namespaces of a started or adopted init, once a thread waits
    /// for that init: what `create` and `adopt` both end with.
    fn watched(
        process: InitProcess,
        init_pid: u32,
        opened: OpenedNamespaces,
        spawner: Sender<SpawnRequest>,
        lifeline: PipeWriter,
        fatal: &FatalSender,
    ) -> Result<DaemonNamespaces, DaemonError> {
        let adopted = matches!(process, InitProcess::Adopted(_));
        let ending = Arc::new(AtomicBool::new(false));
        let exited = Arc::new(AtomicBool::new(false));
        let ended = watch_init(process, init_pid, ending.clone(), exited.clone(), fatal)?;
        Ok(DaemonNamespaces {
            init_pid,
            init: opened.init,
            pid_ns_identity: opened.pid_ns_identity,
            _pid_ns: opened.pid_ns,
            mount_ns: Arc::new(opened.mount_ns),
            spawner,
            lifeline: Mutex::new(Some(lifeline)),
            ending,
            exited,
            ended,
            adopted,
        })
    }

    /// What a new launcher needs to take the namespaces over: the init's
    /// pid and the lifeline's descriptor (to inherit).
    pub fn handover(&self) -> Option<(u32, RawFd)> {
        let lifeline = self.lifeline.lock().ok()?;
        Some((self.init_pid, lifeline.as_ref()?.as_raw_fd()))
    }

    /// Replaces the process with `command` (`upgrade`) from the thread
    /// that forked the init and the daemons, so that no parent-death
    /// signal fires: the spawner, or in a launcher that took over, the
    /// calling (main) thread. Returns only on failure.
    pub fn exec(&self, command: Command) -> io::Error {
        if self.adopted {
            return crate::upgrade::exec_now(command);
        }
        let (reply, failed) = bounded(1);
        if self
            .spawner
            .send(SpawnRequest::Exec { command, reply })
            .is_err()
        {
            return io::Error::other("the daemons' spawner thread has stopped");
        }
        failed
            .recv()
            .unwrap_or_else(|_| io::Error::other("the daemons' spawner thread has stopped"))
    }

    /// The init's pid (in the launcher's PID namespace).
    pub fn init_pid(&self) -> u32 {
        self.init_pid
    }

    /// Spawns `command` inside both namespaces, in a process group of its
    /// own, with SIGTERM as its parent-death signal. The child is a child
    /// of the launcher, so `Child::wait` works as usual; its pid (in
    /// `Child::id`) is the launcher's view of it.
    pub fn spawn(&self, mut command: Command, then: Vec<BeforeExec>) -> io::Result<Child> {
        if self.has_ended() {
            return Err(io::Error::other("the daemons' PID namespace has ended"));
        }
        // Ctrl-C at the launcher's terminal must not kill a daemon before
        // the launcher stops it in order.
        command.process_group(0);
        let mut steps = vec![BeforeExec::JoinNamespace(
            self.mount_ns.clone(),
            Namespace::Mount,
        )];
        if !self.adopted {
            steps.push(BeforeExec::ParentDeathSignal(libc::SIGTERM));
        }
        steps.extend(then);
        os::before_exec(&mut command, steps);
        let (reply, spawned) = bounded(1);
        self.spawner
            .send(SpawnRequest::Spawn { command, reply })
            .map_err(|_| io::Error::other("the daemons' spawner thread has stopped"))?;
        spawned
            .recv()
            .map_err(|_| io::Error::other("the daemons' spawner thread has stopped"))?
    }

    /// Whether the init has exited (asked to or not).
    pub fn has_ended(&self) -> bool {
        self.exited.load(Ordering::Acquire)
    }

    /// The launcher's pid of the process whose pid is `ns_pid` inside the
    /// namespace (as libvirt writes it in its pid files).
    pub fn host_pid(&self, ns_pid: u32) -> Option<u32> {
        self.members()
            .into_iter()
            .find(|&(_, inner)| inner == ns_pid)
            .map(|(host, _)| host)
    }

    /// Every process in the namespace: (launcher's pid, pid inside).
    fn members(&self) -> Vec<(u32, u32)> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                Namespace::Pid
                    .identity_of(pid)
                    .is_ok_and(|id| id == self.pid_ns_identity)
            })
            .filter_map(|pid| Some((pid, inner_pid(pid)?)))
            .collect()
    }

    /// Ends the namespace: closes the lifeline, so the init exits and the
    /// kernel kills every process still in it, and waits up to `timeout`
    /// for that (then SIGKILLs the init). When this returns after the init
    /// exited, the namespace is empty: the kernel lets its init go only
    /// after every other member is gone.
    pub fn end(&self, timeout: Duration) {
        self.ending.store(true, Ordering::Release);
        if let Ok(mut lifeline) = self.lifeline.lock() {
            lifeline.take();
        }
        if self.has_ended() || self.ended.recv_timeout(timeout).is_ok() {
            return;
        }
        log::warn!(
            "daemons: the namespace's init (pid {}) did not exit within {timeout:?}; killing it",
            self.init_pid
        );
        let _ = self.init.send_signal(libc::SIGKILL);
        let _ = self.ended.recv_timeout(Duration::from_secs(5));
    }
}

impl Drop for DaemonNamespaces {
    fn drop(&mut self) {
        // Dropping the lifeline ends the init; it must not be reported.
        self.ending.store(true, Ordering::Release);
    }
}

/// A request to the spawner thread.
enum SpawnRequest {
    /// Start this command in the namespaces; the child goes back.
    Spawn {
        command: Command,
        reply: Sender<io::Result<Child>>,
    },
    /// Replace the process with this command (`upgrade`); only a failure
    /// goes back.
    Exec {
        command: Command,
        reply: Sender<io::Error>,
    },
}

/// How the spawner thread begins.
enum SpawnerStart {
    /// In a new PID namespace, whose init (PID 1) this is.
    NewNamespace(Command),
    /// In the existing PID namespace open as this file (`upgrade`).
    Join(File),
}

/// Starts the spawner thread (see the module documentation), which forks
/// an init as PID 1 of a new PID namespace (or joins one) and then every
/// command sent on the returned queue into it. Returns the queue and the
/// init's spawn.
fn start_spawner(
    start: SpawnerStart,
    fatal: &FatalSender,
) -> Result<(Sender<SpawnRequest>, io::Result<Option<Child>>), DaemonError> {
    let (requests, queue) = bounded::<SpawnRequest>(0);
    let (init_tx, init_rx) = bounded(1);
    threads::spawn_named("pidns-spawner", fatal, move || {
        // Only this thread's children go to the namespace.
        let started = match start {
            SpawnerStart::NewNamespace(mut init) => {
                os::unshare(Namespace::Pid).and_then(|()| init.spawn().map(Some))
            }
            SpawnerStart::Join(ns) => os::setns(ns.as_fd(), Namespace::Pid).map(|()| None),
        };
        let failed = started.is_err();
        let _ = init_tx.send(started);
        if failed {
            return;
        }
        // Until the namespaces are dropped: then this thread ends, and
        // with it the init (its parent-death signal) if still running.
        for request in queue {
            match request {
                SpawnRequest::Spawn { mut command, reply } => {
                    let _ = reply.send(command.spawn());
                }
                SpawnRequest::Exec { command, reply } => {
                    let error = crate::upgrade::exec_now(command);
                    crate::upgrade::unblock_stop_signals();
                    let _ = reply.send(error);
                }
            }
        }
    })
    .map_err(|e| DaemonError::os("cannot start the daemons' spawner thread", e))?;
    let spawned = init_rx.recv().map_err(|_| {
        DaemonError::refused("the daemons' spawner thread stopped before the init started")
    })?;
    Ok((requests, spawned))
}

/// Reads the init's one-line report: `ready` or `error: ...`.
fn read_report(mut stdout: ChildStdout, timeout: Duration) -> Result<(), DaemonError> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DaemonError::Refused(format!(
                "the namespace's init did not report ready within {} s",
                timeout.as_secs()
            )));
        }
        let ready = os::wait_readable(&[stdout.as_fd()], Some(left))
            .map_err(|e| DaemonError::os("cannot wait for the namespace's init", e))?;
        if !ready[0] {
            continue;
        }
        let mut chunk = [0u8; 512];
        let n = stdout
            .read(&mut chunk)
            .map_err(|e| DaemonError::os("cannot read the namespace's init", e))?;
        if n == 0 {
            break;
        }
        line.extend_from_slice(&chunk[..n]);
        if line.contains(&b'\n') || line.len() > 64 * 1024 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&line);
    let first = text.lines().next().unwrap_or("").trim();
    match first.strip_prefix("error: ") {
        _ if first == "ready" => Ok(()),
        Some(reason) => Err(DaemonError::Refused(format!(
            "the namespace's init failed: {reason}"
        ))),
        None if first.is_empty() => Err(DaemonError::refused(
            "the namespace's init exited during set-up",
        )),
        None => Err(DaemonError::Refused(format!(
            "the namespace's init said {first:?}"
        ))),
    }
}

/// The init's exit status, if it has exited or exits within a second
/// (after a failed set-up); else it is killed and reaped.
fn init_failure(child: &mut Child) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status.to_string()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Waits for the init on a thread of its own; reports its exit on the
/// returned channel, and on `fatal` when nobody asked for it.
/// The init, as the launcher that waits for it has it.
enum InitProcess {
    /// Forked by this launcher.
    Spawned(Child),
    /// Taken over from the launcher this one replaced (`upgrade`): a
    /// child of this process all the same.
    Adopted(u32),
}

impl InitProcess {
    fn wait(&mut self) -> io::Result<String> {
        match self {
            InitProcess::Spawned(child) => child.wait().map(|s| s.to_string()),
            InitProcess::Adopted(pid) => os::wait_pid(*pid),
        }
    }
}

/// The init's pidfd and its PID and mount namespaces, opened through
/// /proc while the init is known to be alive.
struct OpenedNamespaces {
    init: PidFd,
    pid_ns: File,
    mount_ns: File,
    pid_ns_identity: String,
}

impl OpenedNamespaces {
    fn of(init_pid: u32, init: PidFd) -> Result<OpenedNamespaces, DaemonError> {
        let open = |ns: Namespace| {
            ns.open_of(init_pid).map_err(|e| {
                DaemonError::os(
                    format!("cannot open the daemons' {} namespace", ns.proc_name()),
                    e,
                )
            })
        };
        Ok(OpenedNamespaces {
            init,
            pid_ns: open(Namespace::Pid)?,
            mount_ns: open(Namespace::Mount)?,
            pid_ns_identity: Namespace::Pid
                .identity_of(init_pid)
                .map_err(|e| DaemonError::os("cannot read the daemons' PID namespace", e))?,
        })
    }
}

fn watch_init(
    mut child: InitProcess,
    pid: u32,
    ending: Arc<AtomicBool>,
    exited: Arc<AtomicBool>,
    fatal: &FatalSender,
) -> Result<Receiver<()>, DaemonError> {
    let (ended_tx, ended_rx) = bounded(1);
    let fatal_tx = fatal.clone();
    threads::spawn_named("pidns-init", fatal, move || {
        let status = child.wait();
        exited.store(true, Ordering::Release);
        if !ending.load(Ordering::Acquire) {
            let how = match status {
                Ok(s) => s,
                Err(e) => format!("was lost ({e})"),
            };
            let message = format!(
                "the init of the daemons' PID namespace (pid {pid}) ended unexpectedly ({how}); \
                 the kernel has ended every daemon and QEMU in it"
            );
            log::error!("daemons: {message}");
            let _ = fatal_tx.send(Fatal {
                thread: "pidns-init".into(),
                message,
            });
        }
        let _ = ended_tx.send(());
    })
    .map_err(|e| DaemonError::os("cannot start the init's watcher", e))?;
    Ok(ended_rx)
}

/// The innermost pid of process `pid` (the last NSpid field): its pid in
/// the namespace it lives in.
fn inner_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_outside_any_inner_namespace_has_its_own_pid_inside() {
        assert_eq!(inner_pid(std::process::id()), Some(std::process::id()));
        assert_eq!(inner_pid(0), None);
    }
}
