//! The reaper of a pod's libvirt daemon: the launcher's own binary,
//! re-executed in a hidden mode, with the daemon's command line after it:
//!
//! ```text
//! virt-launcher __pod-daemon-reaper /usr/sbin/libvirtd -f /var/run/libvirt/libvirtd.conf
//! ```
//!
//! Why: libvirt starts QEMU (the domain's, and the short-lived ones that
//! probe its capabilities) by a double fork, so QEMU's parent is gone as
//! soon as it runs and the kernel hands it to the nearest subreaper, else
//! to PID 1. When such a QEMU ends, it stays a zombie until that process
//! reaps it, and libvirt, which waits for the process to vanish, waits
//! with it (up to 15 s, polling every 200 ms). In a pod, PID 1 is the
//! launcher (as `virt-launcher-monitor`) or the container runtime's init;
//! the launcher's own children are reaped by the threads that wait for
//! them, and a reaper of everything there would take their statuses. So
//! the daemon runs under this process instead, which marks itself a
//! subreaper, runs the daemon as its child (ended with it: parent-death
//! signal), passes on the stop signals the launcher's supervisor sends, and
//! reaps every process handed to it. It ends with the daemon, with the
//! daemon's status.

use std::ffi::OsString;
use std::process::Command;

use crate::os::{self, BeforeExec};

/// `argv[1]` of the hidden mode.
pub const MODE: &str = "__pod-daemon-reaper";

/// The signals passed on to the daemon: what the supervisor and a pod's
/// end send.
const PASSED_ON: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// Runs the reaper when this process was started as one; `None`
/// otherwise. Called first thing in `main`. Returns the exit status.
pub fn run_if_requested() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != MODE {
        return None;
    }
    let Some(program) = args.next() else {
        eprintln!("{MODE}: no daemon to run");
        return Some(2);
    };
    Some(run(program, args.collect()))
}

fn run(program: OsString, args: Vec<OsString>) -> i32 {
    if let Err(e) = os::set_child_subreaper() {
        eprintln!("{MODE}: cannot become a subreaper: {e}");
        return 1;
    }
    // Handled from before the daemon starts, so that none is lost; the
    // iterator's thread passes each on once the daemon runs.
    let mut signals = match signal_hook::iterator::Signals::new(PASSED_ON) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("{MODE}: cannot handle signals: {e}");
            return 1;
        }
    };
    let mut command = Command::new(&program);
    command.args(&args);
    os::before_exec(
        &mut command,
        vec![BeforeExec::ParentDeathSignal(libc::SIGKILL)],
    );
    let daemon = match command.spawn() {
        Ok(child) => child.id(),
        Err(e) => {
            eprintln!("{MODE}: cannot start {}: {e}", program.to_string_lossy());
            return 127;
        }
    };
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let _ = os::send_signal(daemon, signal);
            }
        });
    loop {
        match os::wait_any_child() {
            Ok(Some((pid, status))) if pid == daemon => return status,
            Ok(Some(_)) => {}
            Ok(None) => return 1,
            Err(e) => {
                eprintln!("{MODE}: waitpid: {e}");
                return 1;
            }
        }
    }
}
