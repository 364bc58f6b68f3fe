//! Where the launcher's daemons run.
//!
//! With `--spawn-libvirt` the launcher makes the pod's isolation itself: the
//! daemons go into PID and mount namespaces of their own ([`DaemonNamespaces`]).
//! Inside a KubeVirt pod (`--kubevirt`) the pod already is that isolation,
//! and a pod gives no capability to make namespaces: the daemons are plain
//! children on the container's own paths, as KubeVirt's launcher starts them.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use super::namespace::DaemonNamespaces;
use crate::os::{self, BeforeExec};

pub enum Placement {
    /// In the launcher's own PID and mount namespaces.
    Namespaces(DaemonNamespaces),
    /// Plain children in the pod's namespaces.
    Pod,
}

impl Placement {
    /// Spawns `command` where the daemons run, in a process group of its own
    /// (Ctrl-C at the launcher's terminal is the launcher's to handle) and
    /// with SIGTERM as its parent-death signal.
    pub fn spawn(&self, command: Command) -> io::Result<Child> {
        self.spawn_then(command, Vec::new())
    }

    /// As [`Placement::spawn`], the child taking `then` last, once it is
    /// where the daemons run.
    pub fn spawn_then(&self, mut command: Command, then: Vec<BeforeExec>) -> io::Result<Child> {
        match self {
            Placement::Namespaces(namespaces) => namespaces.spawn(command, then),
            Placement::Pod => {
                command.process_group(0);
                let mut steps = vec![BeforeExec::ParentDeathSignal(libc::SIGTERM)];
                steps.extend(then);
                os::before_exec(&mut command, steps);
                command.spawn()
            }
        }
    }

    /// Whether the daemons' namespaces have ended (never, in a pod: the
    /// pod ends with the launcher).
    pub fn has_ended(&self) -> bool {
        match self {
            Placement::Namespaces(namespaces) => namespaces.has_ended(),
            Placement::Pod => false,
        }
    }

    /// The launcher's pid of the process libvirt's pid files call `pid`.
    pub fn host_pid(&self, pid: u32) -> Option<u32> {
        match self {
            Placement::Namespaces(namespaces) => namespaces.host_pid(pid),
            Placement::Pod => Some(pid),
        }
    }

    /// The pid of the namespaces' init, if there is one.
    pub fn init_pid(&self) -> Option<u32> {
        match self {
            Placement::Namespaces(namespaces) => Some(namespaces.init_pid()),
            Placement::Pod => None,
        }
    }

    /// The namespaces, when the daemons run in namespaces of the
    /// launcher's own.
    pub fn namespaces(&self) -> Option<&DaemonNamespaces> {
        match self {
            Placement::Namespaces(namespaces) => Some(namespaces),
            Placement::Pod => None,
        }
    }

    /// Ends the namespaces and everything left in them.
    pub fn end(&self, timeout: Duration) {
        if let Placement::Namespaces(namespaces) = self {
            namespaces.end(timeout);
        }
    }
}
