//! Worker jobs: every hypervisor call the manager makes runs on a worker
//! thread (`workers.rs`: one that is idle, else a new one) and reports
//! back on a channel, so the manager thread never blocks on libvirt. Each
//! job has a deadline; a client whose job overruns it gets `Timeout` while
//! the job finishes in the background and its result is still applied.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::reply::JobValue;
use super::workers::{self, WorkerPool};
use crate::agent::model::FreezeStatus;
use crate::command::ReplyTo;
use crate::disks::PreparedDisks;
use crate::hypervisor::{ConnectionId, DomainStatus, Hypervisor};
use crate::protocol::{CommandError, ErrorClass};
use crate::sink::Sink;
use crate::threads::FatalSender;

pub type JobId = u64;

/// What a job does, which decides what the manager does when it completes
/// and whether it runs alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    // Client commands that run on a worker; named as the commands are.
    Sync,
    Pause,
    Unpause,
    Shutdown,
    Reboot,
    Reset,
    Kill,
    Delete,
    QueryDomain,
    QueryStats,
    GuestPing,
    GuestExec,
    Freeze,
    Unfreeze,
    PrepareMigrationTarget,
    QueryQemuVersion,
    QueryDirtyRate,
    Screenshot,
    QueryVmStats,
    /// `memory-dump`'s dump, which the client does not wait for.
    MemoryDump,
    /// `backup`: starts libvirt's backup job.
    Backup,
    /// `backup-abort`.
    BackupAbort,
    /// `query-checkpoints`, `redefine-checkpoint`, `delete-checkpoint`.
    Checkpoint,
    // Work the launcher does by itself, with no client waiting.
    /// Reads a running memory dump's progress.
    MemoryDumpProgress,
    /// Reads a running backup's progress.
    BackupProgress,
    /// Reads how a backup job ended, after libvirt's JOB_COMPLETED.
    BackupEnded,
    /// Re-reads the domain's state (at start and after a reconnect).
    StatusRefresh,
    /// Reads the hypervisor's version (at start and after a reconnect),
    /// which a fresh daemon answers only once it has probed QEMU.
    ReadHypervisorVersion,
    /// Takes a new sample of the domain's statistics for the cache.
    StatsRefresh,
    /// Opens a new libvirt connection.
    Reconnect,
    /// Removes a stopped domain's definition before exiting.
    UndefineOnExit,
    /// The graceful stop's ACPI power button.
    AcpiShutdown,
    /// The graceful stop's forced stop once the grace period is over.
    ForceOff,
    /// Sets the guest clock after unpause or a migration.
    GuestTimeSync,
    /// Takes interfaces' links down and up after a migration.
    LinkRefresh,
    /// The freeze's safety thaw.
    AutoThaw,
    /// Destroys a domain still arriving by migration.
    DestroyIncoming,
    /// A migration target reads the arriving domain's NICs, so that its
    /// pod network (DHCP) serves the MACs the guest came with.
    AdoptGuestNics,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Sync => "sync",
            Operation::Pause => "pause",
            Operation::Unpause => "unpause",
            Operation::Shutdown => "shutdown",
            Operation::Reboot => "reboot",
            Operation::Reset => "reset",
            Operation::Kill => "kill",
            Operation::Delete => "delete",
            Operation::QueryDomain => "query-domain",
            Operation::QueryStats => "query-stats",
            Operation::GuestPing => "guest-ping",
            Operation::GuestExec => "guest-exec",
            Operation::Freeze => "freeze",
            Operation::Unfreeze => "unfreeze",
            Operation::PrepareMigrationTarget => "prepare-migration-target",
            Operation::QueryQemuVersion => "query-qemu-version",
            Operation::QueryDirtyRate => "query-dirty-rate",
            Operation::Screenshot => "screenshot",
            Operation::MemoryDump => "memory-dump",
            Operation::QueryVmStats => "query-vm-stats",
            Operation::MemoryDumpProgress => "memory-dump-progress",
            Operation::Backup => "backup",
            Operation::BackupAbort => "backup-abort",
            Operation::Checkpoint => "checkpoint",
            Operation::BackupProgress => "backup-progress",
            Operation::BackupEnded => "backup-ended",
            Operation::StatusRefresh => "status-refresh",
            Operation::ReadHypervisorVersion => "read-hypervisor-version",
            Operation::StatsRefresh => "stats-refresh",
            Operation::Reconnect => "reconnect",
            Operation::UndefineOnExit => "undefine-on-exit",
            Operation::AcpiShutdown => "acpi-shutdown",
            Operation::ForceOff => "destroy",
            Operation::GuestTimeSync => "guest-time-sync",
            Operation::LinkRefresh => "link-refresh",
            Operation::AutoThaw => "auto-thaw",
            Operation::DestroyIncoming => "destroy-incoming",
            Operation::AdoptGuestNics => "adopt-guest-nics",
        }
    }

    /// Only reads: the domain is the same after it as before (so the
    /// launcher's caches of it stay). A reconnect is not: the daemon at
    /// the other end may hold a different domain now.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            Operation::QueryDomain
                | Operation::QueryStats
                | Operation::StatsRefresh
                | Operation::StatusRefresh
                | Operation::ReadHypervisorVersion
                | Operation::GuestPing
                | Operation::GuestExec
                | Operation::AdoptGuestNics
                | Operation::QueryQemuVersion
                | Operation::QueryDirtyRate
                | Operation::Screenshot
                | Operation::MemoryDump
                | Operation::MemoryDumpProgress
                | Operation::QueryVmStats
                | Operation::BackupProgress
                | Operation::BackupEnded
        )
    }

    /// Exclusive operations change the domain: one at a time, and a client
    /// command that would overlap one gets `Busy`.
    pub fn is_exclusive(self) -> bool {
        matches!(
            self,
            Operation::Sync
                | Operation::Pause
                | Operation::Unpause
                | Operation::Shutdown
                | Operation::Reboot
                | Operation::Reset
                | Operation::Delete
                | Operation::Freeze
                | Operation::PrepareMigrationTarget
        )
    }
}

/// What a job learned about the domain, besides its result.
#[derive(Debug, PartialEq)]
pub enum Observation {
    Nothing,
    /// The domain's state as libvirt reported it (`None`: not defined).
    Status(Option<DomainStatus>),
    /// The guest's filesystems are now frozen or thawed.
    FsFreeze(FreezeStatus),
    /// Files made for an incoming migration, to remove if it never comes,
    /// and KubeVirt's UID of that migration, when KubeVirt prepared it.
    PreparedDisks(PreparedDisks, Option<String>),
    /// A new connection to libvirt is up.
    Connected(ConnectionId),
    /// The hypervisor's version, as `query-version` names it
    /// ("QEMU 7.2.22").
    HypervisorVersion(String),
    /// The domain's state and its guest agent channel's (`None`: not
    /// known), read after a (re)connect.
    Refreshed {
        status: Option<DomainStatus>,
        agent: Option<bool>,
    },
    /// A sample of the domain's statistics, taken by a job that started at
    /// the stats cache's `generation`.
    StatsSample {
        sample: super::reply::StatsSample,
        generation: u64,
    },
    /// libvirt's statistics of the domain's running job.
    JobStats(Vec<crate::hypervisor::Stat>),
    /// libvirt's statistics of the running backup job.
    BackupJobStats(Vec<crate::hypervisor::Stat>),
    /// The statistics of the backup job that ended.
    BackupEnded(Vec<crate::hypervisor::Stat>),
}

pub type JobResult = Result<JobValue, CommandError>;

pub struct JobOutput {
    pub result: JobResult,
    pub observed: Observation,
}

impl JobOutput {
    pub fn reply(result: JobResult) -> JobOutput {
        JobOutput {
            result,
            observed: Observation::Nothing,
        }
    }
}

/// A job's result, from its worker; only the manager opens it.
pub struct JobDone {
    pub(super) id: JobId,
    pub(super) output: JobOutput,
}

/// A job that completed, with what the manager needs to finish it.
pub struct Finished {
    pub operation: Operation,
    pub output: JobOutput,
    /// The client still waiting for the reply, unless it already got
    /// `Timeout`.
    pub reply: Option<ReplyTo>,
    pub elapsed: Duration,
    /// A domain lifecycle event arrived while the job ran, so the state it
    /// read may be older than what the manager already knows.
    pub overtaken: bool,
}

struct Pending {
    operation: Operation,
    reply: Option<ReplyTo>,
    /// `domain_events` when the job started.
    domain_events_at_start: u64,
    started: Instant,
    deadline: Instant,
}

pub struct JobRunner {
    hypervisor: Arc<dyn Hypervisor>,
    workers: WorkerPool,
    /// Where workers report finished jobs (the manager's inbox).
    done: Sink<JobDone>,
    next_id: JobId,
    pending: HashMap<JobId, Pending>,
    /// Domain lifecycle events the manager has handled so far.
    domain_events: u64,
}

impl JobRunner {
    pub fn new(
        hypervisor: Arc<dyn Hypervisor>,
        fatal: FatalSender,
        done: Sink<JobDone>,
    ) -> JobRunner {
        JobRunner {
            hypervisor,
            workers: WorkerPool::new(fatal, workers::IDLE_EXIT),
            done,
            next_id: 1,
            pending: HashMap::new(),
            domain_events: 0,
        }
    }

    /// The manager handled a domain lifecycle event: jobs running now read
    /// the domain before it.
    pub fn note_domain_event(&mut self) {
        self.domain_events += 1;
    }

    /// The running exclusive job, if any.
    pub fn exclusive_running(&self) -> Option<Operation> {
        self.pending
            .values()
            .map(|p| p.operation)
            .find(|op| op.is_exclusive())
    }

    /// Busy when an exclusive job (one that changes the domain) runs:
    /// `command` must wait for it.
    pub fn ensure_idle(&self, command: &str) -> Result<(), CommandError> {
        match self.exclusive_running() {
            None => Ok(()),
            Some(running) => Err(CommandError::new(
                ErrorClass::Busy,
                format!(
                    "{command}: {} is still in progress; retry when it completes",
                    running.name()
                ),
            )),
        }
    }

    pub fn is_running(&self, operation: Operation) -> bool {
        self.pending.values().any(|p| p.operation == operation)
    }

    /// Starts `work` on a worker thread. On failure to start, the client is
    /// answered at once.
    pub fn spawn<F>(
        &mut self,
        operation: Operation,
        reply: Option<ReplyTo>,
        timeout: Duration,
        work: F,
    ) where
        F: FnOnce(&dyn Hypervisor) -> JobOutput + Send + 'static,
    {
        let id = self.next_id;
        self.next_id += 1;
        let hypervisor = self.hypervisor.clone();
        let done = self.done.clone();
        let label = format!("job-{}", operation.name());
        let spawned = self.workers.run(label, move || {
            let output = work(hypervisor.as_ref());
            let _ = done.send(JobDone { id, output });
        });
        match spawned {
            Ok(_) => {
                let now = Instant::now();
                self.pending.insert(
                    id,
                    Pending {
                        operation,
                        reply,
                        domain_events_at_start: self.domain_events,
                        started: now,
                        deadline: crate::limits::later(now, timeout),
                    },
                );
            }
            Err(e) => {
                log::error!(
                    "manager: cannot start a worker for {}: {e}",
                    operation.name()
                );
                if let Some(reply) = reply {
                    reply.send(Err(CommandError::internal(format!(
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
            operation: pending.operation,
            output: done.output,
            reply: pending.reply,
            elapsed: pending.started.elapsed(),
            overtaken: self.domain_events != pending.domain_events_at_start,
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
                    pending.operation.name(),
                    waited.as_secs_f64()
                );
                reply.send(Err(CommandError::new(
                    ErrorClass::Timeout,
                    format!(
                        "{} did not finish within {:.0} s; it continues in the background and its outcome will show in events and query-status",
                        pending.operation.name(),
                        waited.as_secs_f64()
                    ),
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::COMMANDS;

    /// The operations client commands run, under their commands' names
    /// (query-status shows them as `job`).
    const CLIENT_OPERATIONS: [Operation; 20] = [
        Operation::Sync,
        Operation::Pause,
        Operation::Unpause,
        Operation::Shutdown,
        Operation::Reboot,
        Operation::Reset,
        Operation::Kill,
        Operation::Delete,
        Operation::QueryDomain,
        Operation::QueryStats,
        Operation::GuestPing,
        Operation::GuestExec,
        Operation::Freeze,
        Operation::Unfreeze,
        Operation::PrepareMigrationTarget,
        Operation::QueryQemuVersion,
        Operation::QueryDirtyRate,
        Operation::Screenshot,
        Operation::MemoryDump,
        Operation::QueryVmStats,
    ];

    #[test]
    fn client_operations_are_named_as_their_commands() {
        for op in CLIENT_OPERATIONS {
            assert!(
                COMMANDS.iter().any(|c| c.name == op.name()),
                "{op:?} is named {} but no command is",
                op.name()
            );
        }
    }

    #[test]
    fn exclusive_operations_are_the_documented_ones() {
        // docs/protocol.md §9 "One state change at a time".
        let exclusive: Vec<&str> = CLIENT_OPERATIONS
            .iter()
            .filter(|op| op.is_exclusive())
            .map(|op| op.name())
            .collect();
        assert_eq!(
            exclusive,
            [
                "sync",
                "pause",
                "unpause",
                "shutdown",
                "reboot",
                "reset",
                "delete",
                "freeze",
                "prepare-migration-target"
            ]
        );
    }
}
