//! The domain commands: immediate queries answered from the manager's own
//! view, and domain operations run as jobs.

use super::errors::hypervisor_error;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::{JobValue, Operated, OperationDetail};
use super::{DomainManager, Phase};
use crate::command::{DomainCommand, ReplyTo};
use crate::hypervisor::{DomainState, Hypervisor, HypervisorError, RebootMode};
use crate::protocol::{CommandError, ErrorClass, Return};
use crate::replies;

/// The libvirt operations on the domain that client commands ask for
/// (the read-only queries are answered by `domain_cache` and `stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DomainOperation {
    Pause,
    Unpause,
    Shutdown,
    Reboot,
    Reset,
    Kill,
    Delete,
}

impl DomainOperation {
    fn operation(self) -> Operation {
        match self {
            DomainOperation::Pause => Operation::Pause,
            DomainOperation::Unpause => Operation::Unpause,
            DomainOperation::Shutdown => Operation::Shutdown,
            DomainOperation::Reboot => Operation::Reboot,
            DomainOperation::Reset => Operation::Reset,
            DomainOperation::Kill => Operation::Kill,
            DomainOperation::Delete => Operation::Delete,
        }
    }

    fn name(self) -> &'static str {
        self.operation().name()
    }
}

/// Which states a command needs the domain in.
#[derive(Clone, Copy)]
enum Needs {
    Running,
    Paused,
    Active,
    Exists,
}

/// Checks the domain's current state, read from libvirt just before the
/// operation (the manager's cached view may trail by an event in flight),
/// so a refusal is InvalidState with a clear reason on every driver.
fn precondition(
    hv: &dyn Hypervisor,
    name: &str,
    command: &str,
    needs: Needs,
) -> Result<(), CommandError> {
    let status = hv
        .domain_status(name)
        .map_err(|e| hypervisor_error(&e))?
        .ok_or_else(|| {
            CommandError::new(
                ErrorClass::NotFound,
                format!("{command}: the domain {name} does not exist"),
            )
        })?;
    let state = status.state;
    let ok = match needs {
        Needs::Running => matches!(state, DomainState::Running | DomainState::Blocked),
        Needs::Paused => state == DomainState::Paused,
        Needs::Active => state.is_active(),
        Needs::Exists => true,
    };
    if ok {
        return Ok(());
    }
    let want = match needs {
        Needs::Running => "running",
        Needs::Paused => "paused",
        Needs::Active => "running or paused",
        Needs::Exists => "defined",
    };
    Err(CommandError::invalid_state(format!(
        "{command}: the domain must be {want}, but it is {} ({})",
        state.as_str(),
        status.reason.as_str()
    )))
}

/// Checks `needs`, runs `op`, then reads the resulting state so the reply
/// and the manager's view both show it.
fn op_then_status(
    hv: &dyn Hypervisor,
    name: &str,
    command: &str,
    needs: Needs,
    op: impl FnOnce(&dyn Hypervisor) -> Result<OperationDetail, HypervisorError>,
) -> JobOutput {
    if let Err(e) = precondition(hv, name, command, needs) {
        return JobOutput::reply(Err(e));
    }
    let detail = match op(hv) {
        Ok(detail) => detail,
        Err(e) => return JobOutput::reply(Err(hypervisor_error(&e))),
    };
    match hv.domain_status(name) {
        Ok(status) => JobOutput {
            result: Ok(JobValue::Operated(Operated {
                after: Some(status),
                detail,
            })),
            observed: Observation::Status(status),
        },
        // The operation itself worked; say so even if the read failed.
        Err(_) => JobOutput::reply(Ok(JobValue::Operated(Operated {
            after: None,
            detail,
        }))),
    }
}

impl DomainManager {
    pub(super) fn run_domain_command(&mut self, command: DomainCommand, reply: ReplyTo) {
        let operation = match command {
            DomainCommand::Ping => return reply.send(Ok(Return::new())),
            DomainCommand::QueryVersion => return self.answer_query_version(reply),
            DomainCommand::QueryStatus => return reply.send(Ok(self.query_status().into())),
            DomainCommand::Sync { vmi, options } => {
                return self.start_sync(vmi, options.map(|o| *o), reply);
            }
            DomainCommand::Upgrade { binary } => return self.start_upgrade(binary, reply),
            DomainCommand::Pause => DomainOperation::Pause,
            DomainCommand::Unpause => DomainOperation::Unpause,
            DomainCommand::Shutdown => DomainOperation::Shutdown,
            DomainCommand::Reboot => DomainOperation::Reboot,
            DomainCommand::Reset => DomainOperation::Reset,
            DomainCommand::Kill => DomainOperation::Kill,
            DomainCommand::Delete => DomainOperation::Delete,
            DomainCommand::QueryDomain(query) => {
                return match self.check_allowed("query-domain", None) {
                    Ok(()) => self.query_domain(query, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::QueryStats { max_age } => {
                return match self.check_allowed("query-stats", None) {
                    Ok(()) => self.query_stats(max_age, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            // The daemon's, with or without a domain.
            DomainCommand::QueryQemuVersion => return self.query_qemu_version(reply),
            DomainCommand::QueryDirtyRate { seconds } => {
                return match self.check_allowed("query-dirty-rate", None) {
                    Ok(()) => self.query_dirty_rate(seconds, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::MemoryDump { target } => {
                return match self.check_allowed("memory-dump", None) {
                    Ok(()) => self.start_memory_dump(target, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::QueryVmStats(query) => {
                return match self.check_allowed("query-vm-stats", None) {
                    Ok(()) => self.query_vm_stats(query, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::Screenshot => {
                return match self.check_allowed("screenshot", None) {
                    Ok(()) => self.screenshot(reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::Backup(request) => {
                return match self.check_allowed("backup", None) {
                    Ok(()) => self.start_backup(request, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::BackupAbort => {
                return match self.check_allowed("backup-abort", None) {
                    Ok(()) => self.abort_backup(reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::QueryCheckpoints => {
                return match self.check_allowed("query-checkpoints", None) {
                    Ok(()) => self.query_checkpoints(reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::RedefineCheckpoint {
                name,
                xml,
                creation_time,
            } => {
                return match self.check_allowed("redefine-checkpoint", None) {
                    Ok(()) => self.redefine_checkpoint(name, xml, creation_time, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
            DomainCommand::DeleteCheckpoint {
                name,
                metadata_only,
            } => {
                return match self.check_allowed("delete-checkpoint", None) {
                    Ok(()) => self.delete_checkpoint(name, metadata_only, reply),
                    Err(e) => reply.send(Err(e)),
                };
            }
        };
        match self.check_allowed(operation.name(), Some(operation)) {
            Ok(()) => self.start_domain_job(operation, reply),
            Err(e) => reply.send(Err(e)),
        }
    }

    /// `query-version`'s reply, once the hypervisor's version is read.
    pub(super) fn query_version(&self, hypervisor: String) -> replies::Version {
        let info = self.hypervisor.info();
        replies::Version {
            backend: info.backend,
            hypervisor,
            launcher: env!("CARGO_PKG_VERSION"),
            libvirt: replies::LibvirtVersion {
                daemon: info.daemon_version,
                library: info.library_version,
                uri: info.uri,
            },
            protocol: crate::protocol::PROTOCOL_VERSION,
        }
    }

    pub(super) fn query_status(&self) -> replies::Status {
        let shutdown = self.stop.grace_window(std::time::Instant::now());
        // Only for a VMI that shares filesystems, so that every other
        // status keeps its shape.
        let virtiofs = crate::daemons::virtiofs::report(&self.virtiofs);
        let virtiofs = virtiofs
            .as_array()
            .is_some_and(|a| !a.is_empty())
            .then_some(virtiofs);
        replies::Status {
            agent: replies::AgentStatus {
                connected: self.agent.is_connected(),
            },
            domain: replies::DomainSummary {
                defined: self.domain.defined,
                name: self.config.domain_name.clone(),
                paused_by_user: self.domain.status.is_paused_by_user(),
                reason: self.domain.status.reason.as_str(),
                state: self.domain.status.state.as_str(),
            },
            backup: self.backup.last.as_ref().map(|b| b.to_status()),
            job: self.jobs.exclusive_running().map(Operation::name),
            libvirt: replies::LibvirtStatus {
                connected: self.link.is_up(),
                spawned: self.daemons.as_ref().map(|d| d.status()),
                uri: self.hypervisor.info().uri,
            },
            memory_dump: self.memory_dump.last.as_ref().map(|d| d.status()),
            migration: self.migration.status(),
            phase: self.phase.as_str(),
            pr_helper: crate::daemons::virtiofs::report_pr_helper(&self.virtiofs),
            shutdown,
            shutdown_requested: self.stop.shutdown_requested_at(),
            uid: self.config.uid.clone(),
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            virtiofs,
            vmi: self.config.vmi_ref(),
        }
    }

    /// Refuses commands that make no sense now, before any side effect.
    /// `operation` is `None` for the read-only queries.
    fn check_allowed(
        &self,
        name: &str,
        operation: Option<DomainOperation>,
    ) -> Result<(), CommandError> {
        let read_only = operation.is_none();
        let kill = operation == Some(DomainOperation::Kill);
        if !read_only && !kill && self.migration_running_as_source() {
            return Err(CommandError::invalid_state(format!(
                "{name}: a migration is running; wait for it or migrate-cancel it (kill still works)"
            )));
        }
        if !read_only {
            // KubeVirt mode: virt-handler deletes the stopped domain the
            // exit waits for.
            let awaited_delete =
                self.exit.awaiting_delete && operation == Some(DomainOperation::Delete);
            if self.phase == Phase::Exiting && !awaited_delete {
                return Err(CommandError::invalid_state(format!(
                    "{name}: the launcher is exiting"
                )));
            }
            let allowed_while_stopping = matches!(
                operation,
                Some(DomainOperation::Kill | DomainOperation::Shutdown | DomainOperation::Delete)
            );
            if self.phase == Phase::ShuttingDown && !allowed_while_stopping {
                return Err(CommandError::invalid_state(format!(
                    "{name}: the launcher is stopping the domain after a signal; only shutdown, kill and delete are accepted"
                )));
            }
            // kill is never refused as busy: it is how a stuck operation
            // is ended.
            if !kill {
                self.jobs.ensure_idle(name)?;
            }
        }
        if !self.domain.defined && !self.domain.status.state.is_active() {
            return Err(CommandError::new(
                ErrorClass::NotFound,
                format!(
                    "{name}: there is no domain {} yet; sync a VMI first",
                    self.config.domain_name
                ),
            ));
        }
        // A transient domain has no definition to remove. libvirt's QEMU
        // driver refuses, but its test driver "removes" it again and sends
        // a second Undefined event, so it is not asked.
        if operation == Some(DomainOperation::Delete) && !self.domain.defined {
            return Err(CommandError::invalid_state(format!(
                "delete: the domain {} is not defined; it keeps running as a transient domain until it stops",
                self.config.domain_name
            )));
        }
        // Whether the domain is running or paused is left to libvirt: the
        // cached state can trail a job's result by an event still in
        // flight, and libvirt refuses with OPERATION_INVALID (InvalidState)
        // anyway.
        Ok(())
    }

    fn start_domain_job(&mut self, operation: DomainOperation, reply: ReplyTo) {
        let name = self.config.domain_name.clone();
        let agent_connected = self.agent.is_connected();
        match operation {
            DomainOperation::Shutdown => self.stop.shutdown_requested(),
            DomainOperation::Kill => self.stop.kill_requested(),
            _ => {}
        }
        let command = operation.name();
        let work = move |hv: &dyn Hypervisor| -> JobOutput {
            let run = |needs, op: &dyn Fn(&dyn Hypervisor) -> Result<OperationDetail, HypervisorError>| {
                op_then_status(hv, &name, command, needs, op)
            };
            match operation {
                DomainOperation::Pause => run(Needs::Running, &|hv| {
                    hv.suspend(&name).map(|()| OperationDetail::None)
                }),
                DomainOperation::Unpause => run(Needs::Paused, &|hv| {
                    hv.resume(&name).map(|()| OperationDetail::None)
                }),
                DomainOperation::Shutdown => run(Needs::Active, &|hv| {
                    hv.shutdown_acpi(&name)
                        .map(|()| OperationDetail::AcpiPowerButton)
                }),
                DomainOperation::Reboot => {
                    let mode = if agent_connected {
                        RebootMode::GuestAgent
                    } else {
                        RebootMode::Acpi
                    };
                    run(Needs::Active, &|hv| {
                        hv.reboot(&name, mode)
                            .map(|()| OperationDetail::Rebooted(mode))
                    })
                }
                DomainOperation::Reset => run(Needs::Active, &|hv| {
                    hv.reset(&name).map(|()| OperationDetail::None)
                }),
                DomainOperation::Kill => run(Needs::Active, &|hv| {
                    hv.destroy(&name, false).map(|()| OperationDetail::None)
                }),
                DomainOperation::Delete => run(Needs::Exists, &|hv| {
                    hv.undefine(&name).map(|()| OperationDetail::Undefined)
                }),
            }
        };
        self.jobs.spawn(
            operation.operation(),
            Some(reply),
            self.timing.command,
            work,
        );
    }
}
