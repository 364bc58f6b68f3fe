//! PID 1 of the daemons' PID namespace: the launcher's own binary,
//! re-executed (through /proc/self/exe) in a hidden mode:
//!
//! ```text
//! virt-launcher __pid-namespace-init SOURCE TARGET [SOURCE TARGET ...]
//! ```
//!
//! Why a re-exec: the launcher already runs threads when it starts the
//! daemons, and after fork only async-signal-safe calls are sound in the
//! child, so the child cannot run Rust code that allocates or locks. Exec
//! gives the init a fresh single-threaded process, in which it may set up
//! the mount namespace and loop with ordinary code, and its own name in
//! `ps`. std's `Command` does the fork and exec.
//!
//! What it does, in order:
//! - dies with the launcher: the launcher set PR_SET_PDEATHSIG(SIGKILL)
//!   between fork and exec; its stdin is the read end of a pipe whose only
//!   writer is the launcher (the lifeline), so end of file there means the
//!   launcher is gone. Checking it once at start closes the window in
//!   which the launcher died before the death signal was set (getppid()
//!   cannot tell: it is always 0 in a new PID namespace, whose members do
//!   not see their parent);
//! - makes a private mount namespace: every mount private, each SOURCE
//!   bind-mounted over its TARGET, and a fresh /proc of this PID namespace
//!   (libvirt reads /proc/PID of the QEMU processes it starts, whose pids
//!   are this namespace's);
//! - writes `ready` (or `error: ...`) on stdout;
//! - then only reaps the orphans the kernel hands it (QEMU after libvirt's
//!   double fork, any helper) and waits for the lifeline to close. It
//!   sends no signal to anyone and forwards none: as PID 1 of a namespace
//!   it receives only signals it handles (none), SIGKILL from outside
//!   excepted.
//!
//! When it exits, for any reason, the kernel kills every process left in
//! the namespace: daemons, QEMU, helpers.

use super::error::DaemonError;
use std::ffi::{CString, OsString};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;

use crate::os::{self, ChildExitSignals, Namespace};

/// `argv[1]` of the hidden mode.
pub const MODE: &str = "__pid-namespace-init";
/// Its name in `ps` and /proc/PID/comm.
const NAME: &std::ffi::CStr = c"vl-pidns-init";

/// Runs the init when this process was started as one; `None` otherwise.
/// Called first thing in `main`, before flags are parsed or any thread
/// starts. Returns the exit status.
pub fn run_if_requested() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != MODE {
        return None;
    }
    let mounts: Vec<OsString> = args.collect();
    Some(match run(mounts) {
        Ok(()) => 0,
        Err(e) => {
            let message = format!("virt-launcher PID namespace init: {e}");
            // The launcher reads this line as the reason for the failure
            // while it waits for "ready"; afterwards the pipe is closed
            // and stderr (the launcher's log) is where it can be seen.
            let _ = writeln!(io::stdout(), "error: {e}");
            eprintln!("{message}");
            1
        }
    })
}

fn run(mounts: Vec<OsString>) -> Result<(), DaemonError> {
    if std::process::id() != 1 {
        return Err(DaemonError::Refused(format!(
            "{MODE} is an internal mode of virt-launcher --spawn-libvirt, only valid as PID 1 of a new PID namespace"
        )));
    }
    let _ = os::set_process_name(NAME);
    let lifeline = io::stdin();
    if launcher_gone(&lifeline, Some(std::time::Duration::ZERO))? {
        return Ok(());
    }
    set_up_mounts(mounts)?;
    // Before "ready": no daemon (hence no orphan) exists before it.
    let children =
        ChildExitSignals::new().map_err(|e| DaemonError::os("cannot watch SIGCHLD", e))?;
    let mut stdout = io::stdout();
    stdout
        .write_all(b"ready\n")
        .and_then(|()| stdout.flush())
        .map_err(|e| DaemonError::os("cannot report readiness", e))?;
    loop {
        os::reap_exited_children();
        let ready = os::wait_readable(&[lifeline.as_fd(), children.as_fd()], None)
            .map_err(|e| DaemonError::os("cannot wait", e))?;
        if ready[1] {
            children.clear();
        }
        if ready[0] && launcher_gone(&lifeline, None)? {
            return Ok(());
        }
    }
}

/// Whether the lifeline is at end of file: the launcher closed it (to end
/// the namespace) or died. With a zero timeout, checks without waiting.
fn launcher_gone(
    lifeline: &io::Stdin,
    timeout: Option<std::time::Duration>,
) -> Result<bool, DaemonError> {
    let ready = os::wait_readable(&[lifeline.as_fd()], timeout)
        .map_err(|e| DaemonError::os("cannot watch the launcher", e))?;
    if !ready[0] {
        return Ok(false);
    }
    let mut buf = [0u8; 64];
    // The launcher never writes; anything read is ignored.
    match lifeline.lock().read(&mut buf) {
        Ok(0) | Err(_) => Ok(true),
        Ok(_) => Ok(false),
    }
}

fn set_up_mounts(mounts: Vec<OsString>) -> Result<(), DaemonError> {
    if !mounts.len().is_multiple_of(2) {
        return Err(DaemonError::refused(
            "bind mounts come as SOURCE TARGET pairs",
        ));
    }
    let c = |s: OsString| {
        CString::new(s.into_vec())
            .map_err(|_| DaemonError::refused("a mount path contains a NUL byte"))
    };
    let mut paths = Vec::with_capacity(mounts.len());
    for path in mounts {
        paths.push(c(path)?);
    }
    os::unshare(Namespace::Mount)
        .map_err(|e| DaemonError::os("cannot create a mount namespace", e))?;
    // Nothing below may propagate back to the launcher's namespace.
    os::make_mounts_private(c"/")
        .map_err(|e| DaemonError::os("cannot make the mounts private", e))?;
    for pair in paths.chunks(2) {
        let (source, target) = (&pair[0], &pair[1]);
        os::bind_mount(source, target).map_err(|e| {
            DaemonError::os(
                format!(
                    "cannot bind-mount {} over {}",
                    source.to_string_lossy(),
                    target.to_string_lossy()
                ),
                e,
            )
        })?;
    }
    os::mount_proc(c"/proc").map_err(|e| DaemonError::os("cannot mount /proc", e))
}
