//! Worker jobs: every hypervisor call the manager makes runs on its own
//! short-lived thread and reports back on a channel, so the manager thread
//! never blocks on libvirt. Each job has a deadline; a client whose job
//! overruns it gets `Timeout` while the job finishes in the background and
//! its result is still applied.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};

use crate::disks::PreparedDisks;
use crate::hypervisor::{DomainStatus, Hypervisor};
use crate::protocol::{CommandError, CommandResult, ErrorClass};
use crate::threads::{self, FatalSender};

pub type JobId = u64;

/// What kind of work a job is, which decides what the manager does when it
/// completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// A client command. `exclusive` ones (they change the domain) run one
    /// at a time.
    Command { name: &'static str, exclusive: bool },
    /// Re-reads the domain's state (after a reconnect).
    StatusRefresh,
    /// Opens a new libvirt connection.
    Reconnect,
    /// Work the launcher does by itself, with no client waiting: the
    /// graceful stop's ACPI requests and destroy, the guest clock sync, the
    /// safety thaw.
    Internal { name: &'static str },
}

impl JobKind {
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Command { name, .. } | JobKind::Internal { name } => name,
            JobKind::StatusRefresh => "status-refresh",
            JobKind::Reconnect => "reconnect",
        }
    }
}

/// What a job learned about the domain, besides its reply.
#[derive(Debug, PartialEq)]
pub enum Observation {
    Nothing,
    /// The domain's state as libvirt reported it (`None`: not defined).
    Status(Option<DomainStatus>),
    /// The guest's filesystems are now "frozen" or "thawed".
    FsFreeze(String),
    /// Files made for an incoming migration, to remove if it never comes.
    PreparedDisks(PreparedDisks),
}

pub struct JobOutput {
    pub result: CommandResult,
    pub observed: Observation,
}

impl JobOutput {
    pub fn reply(result: CommandResult) -> JobOutput {
        JobOutput {
            result,
            observed: Observation::Nothing,
        }
    }
}

pub struct JobDone {
    pub id: JobId,
    pub output: JobOutput,
}

/// A job that completed, with what the manager needs to finish it.
pub struct Finished {
    pub kind: JobKind,
    pub output: JobOutput,
    /// The client still waiting for the reply, unless it already got
    /// `Timeout`.
    pub reply: Option<Sender<CommandResult>>,
    pub elapsed: Duration,
}

struct Pending {
    kind: JobKind,
    reply: Option<Sender<CommandResult>>,
    started: Instant,
    deadline: Instant,
}

pub struct JobRunner {
    hypervisor: Arc<dyn Hypervisor>,
    fatal: FatalSender,
    done_tx: Sender<JobDone>,
    done_rx: Receiver<JobDone>,
    next_id: JobId,
    pending: HashMap<JobId, Pending>,
}

impl JobRunner {
    pub fn new(hypervisor: Arc<dyn Hypervisor>, fatal: FatalSender) -> JobRunner {
        let (done_tx, done_rx) = unbounded();
        JobRunner {
            hypervisor,
            fatal,
            done_tx,
            done_rx,
            next_id: 1,
            pending: HashMap::new(),
        }
    }

    /// Where completed jobs arrive; the manager selects on it.
    pub fn completions(&self) -> &Receiver<JobDone> {
        &self.done_rx
    }

    /// The running exclusive job, if any.
    pub fn exclusive_running(&self) -> Option<&'static str> {
        self.pending.values().find_map(|p| match p.kind {
            JobKind::Command {
                name,
                exclusive: true,
            } => Some(name),
            _ => None,
        })
    }

    /// Busy when an exclusive job (one that changes the domain) runs:
    /// `command` must wait for it.
    pub fn ensure_idle(&self, command: &str) -> Result<(), CommandError> {
        match self.exclusive_running() {
            None => Ok(()),
            Some(running) => Err(CommandError::new(
                ErrorClass::Busy,
                format!("{command}: {running} is still in progress; retry when it completes"),
            )),
        }
    }

    pub fn is_running(&self, kind: JobKind) -> bool {
        self.pending.values().any(|p| p.kind == kind)
    }

    /// Starts `work` on a worker thread. On failure to start, the client is
    /// answered at once.
    pub fn spawn<F>(
        &mut self,
        kind: JobKind,
        reply: Option<Sender<CommandResult>>,
        timeout: Duration,
        work: F,
    ) where
        F: FnOnce(&dyn Hypervisor) -> JobOutput + Send + 'static,
    {
        let id = self.next_id;
        self.next_id += 1;
        let hypervisor = self.hypervisor.clone();
        let done_tx = self.done_tx.clone();
        let name = format!("job-{}", kind.name());
        let spawned = threads::spawn_named(&name, &self.fatal, move || {
            let output = work(hypervisor.as_ref());
            let _ = done_tx.send(JobDone { id, output });
        });
        match spawned {
            Ok(_) => {
                let now = Instant::now();
                self.pending.insert(
                    id,
                    Pending {
                        kind,
                        reply,
                        started: now,
                        deadline: now + timeout,
                    },
                );
            }
            Err(e) => {
                log::error!("manager: cannot start a worker for {}: {e}", kind.name());
                if let Some(reply) = reply {
                    let _ = reply.send(Err(CommandError::internal(format!(
                        "cannot start a worker thread: {e}"
                    ))));
                }
            }
        }
    }

    /// Matches a completion with its job.
    pub fn finish(&mut self, done: JobDone) -> Option<Finished> {
        let pending = self.pending.remove(&done.id)?;
        Some(Finished {
            kind: pending.kind,
            output: done.output,
            reply: pending.reply,
            elapsed: pending.started.elapsed(),
        })
    }

    /// Whether some client still waits for a job's reply.
    pub fn has_waiting_clients(&self) -> bool {
        self.pending.values().any(|p| p.reply.is_some())
    }

    /// The earliest deadline of a job whose client is still waiting.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending
            .values()
            .filter(|p| p.reply.is_some())
            .map(|p| p.deadline)
            .min()
    }

    /// Answers `Timeout` to clients whose job overran its deadline. The jobs
    /// keep running; their results are applied when they finish.
    pub fn expire(&mut self, now: Instant) {
        for pending in self.pending.values_mut() {
            if pending.deadline <= now
                && let Some(reply) = pending.reply.take()
            {
                let waited = pending.started.elapsed();
                log::warn!(
                    "manager: {} has not finished after {:.1} s; answering Timeout",
                    pending.kind.name(),
                    waited.as_secs_f64()
                );
                let _ = reply.send(Err(CommandError::new(
                        ErrorClass::Timeout,
                        format!(
                            "{} did not finish within {:.0} s; it continues in the background and its outcome will show in events and query-status",
                            pending.kind.name(),
                            waited.as_secs_f64()
                        ),
                    )));
            }
        }
    }
}
