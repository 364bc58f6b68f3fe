//! Client commands other than `sync`: immediate queries answered from the
//! manager's own view, and domain operations run as jobs.

use crossbeam_channel::Sender;
use serde_json::{Map, Value, json};

use super::jobs::{JobKind, JobOutput, Observation};
use super::{COMMAND_TIMEOUT, DomainManager, Phase, StopIntent};
use crate::command::Command;
use crate::hypervisor::{
    DomainState, DomainStatus, Hypervisor, HypervisorError, HypervisorErrorKind, RebootMode,
};
use crate::protocol::{CommandError, CommandResult, ErrorClass};

/// The wire error for a failed hypervisor call.
pub fn hypervisor_error(e: &HypervisorError) -> CommandError {
    let (class, desc) = match e.kind {
        HypervisorErrorKind::NoDomain => (ErrorClass::NotFound, "the domain does not exist"),
        HypervisorErrorKind::InvalidOperation => (
            ErrorClass::InvalidState,
            "libvirt refused the operation in the domain's current state",
        ),
        HypervisorErrorKind::InvalidDefinition => (
            ErrorClass::InvalidArgument,
            "libvirt rejected the domain definition",
        ),
        HypervisorErrorKind::AgentUnavailable => (
            ErrorClass::Unavailable,
            "the guest agent is not connected or not responding",
        ),
        HypervisorErrorKind::Unsupported => (
            ErrorClass::Unavailable,
            "the libvirt driver does not support this operation",
        ),
        HypervisorErrorKind::ConnectionLost => (
            ErrorClass::Unavailable,
            "libvirt is unreachable; the launcher is reconnecting",
        ),
        HypervisorErrorKind::Timeout => (ErrorClass::Timeout, "libvirt timed out"),
        HypervisorErrorKind::Other => (ErrorClass::Internal, "libvirt call failed"),
    };
    CommandError::new(class, format!("{desc}: {}", e.message)).with_cause(e.to_string())
}

pub fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

pub fn status_object(status: DomainStatus) -> Map<String, Value> {
    object(json!({ "state": status.state.as_str(), "reason": status.reason.as_str() }))
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
    op: impl FnOnce(&dyn Hypervisor) -> Result<Map<String, Value>, HypervisorError>,
) -> JobOutput {
    if let Err(e) = precondition(hv, name, command, needs) {
        return JobOutput::reply(Err(e));
    }
    let extra = match op(hv) {
        Ok(extra) => extra,
        Err(e) => return JobOutput::reply(Err(hypervisor_error(&e))),
    };
    match hv.domain_status(name) {
        Ok(status) => {
            let mut reply = status
                .map(status_object)
                .unwrap_or_else(|| status_object(DomainStatus::NON_EXISTENT));
            reply.extend(extra);
            JobOutput {
                result: Ok(reply),
                observed: Observation::Status(status),
            }
        }
        // The operation itself worked; say so even if the read failed.
        Err(_) => JobOutput::reply(Ok(extra)),
    }
}

impl DomainManager {
    pub(super) fn run_command(&mut self, command: Command, reply: Sender<CommandResult>) {
        let result = match command {
            Command::Ping => Ok(Map::new()),
            Command::QueryVersion => Ok(self.query_version()),
            Command::QueryStatus => Ok(self.query_status()),
            other => match self.check_allowed(&other) {
                Ok(()) => {
                    self.start_domain_job(other, reply);
                    return;
                }
                Err(e) => Err(e),
            },
        };
        let _ = reply.send(result);
    }

    fn query_version(&self) -> Map<String, Value> {
        let info = self.hypervisor.info();
        object(json!({
            "launcher": env!("CARGO_PKG_VERSION"),
            "protocol": crate::protocol::PROTOCOL_VERSION,
            "libvirt": {
                "library": info.library_version,
                "daemon": info.daemon_version,
                "uri": info.uri,
            },
            "hypervisor": info.hypervisor_version,
        }))
    }

    fn query_status(&self) -> Map<String, Value> {
        let grace = self.grace.map(|(began, deadline)| {
            json!({
                "started_seconds_ago": began.elapsed().as_secs_f64(),
                "remaining_seconds": deadline
                    .saturating_duration_since(std::time::Instant::now())
                    .as_secs_f64(),
            })
        });
        object(json!({
            "phase": self.phase.as_str(),
            "vmi": self.config.vmi_ref(),
            "uid": self.config.uid,
            "domain": {
                "name": self.config.domain_name,
                "defined": self.domain.defined,
                "state": self.domain.status.state.as_str(),
                "reason": self.domain.status.reason.as_str(),
                "paused_by_user": self.domain.paused_by_user,
            },
            "agent": { "connected": self.domain.agent_connected },
            "libvirt": {
                "uri": self.hypervisor.info().uri,
                "connected": !self.reconnecting && self.hypervisor.is_connected(),
                "spawned": self.daemons.as_ref().map(|d| d.status()),
            },
            "job": self.jobs.exclusive_running(),
            "migration": self.migration.as_ref().map(|m| m.to_json()),
            "shutdown": grace,
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
        }))
    }

    /// Refuses commands that make no sense now, before any side effect.
    fn check_allowed(&self, command: &Command) -> Result<(), CommandError> {
        let name = command.name();
        let read_only = matches!(command, Command::QueryDomain | Command::QueryStats);
        if !read_only && !matches!(command, Command::Kill) && self.migration_running_as_source() {
            return Err(CommandError::invalid_state(format!(
                "{name}: a migration is running; wait for it or migrate-cancel it (kill still works)"
            )));
        }
        if !read_only {
            if self.phase == Phase::Exiting {
                return Err(CommandError::invalid_state(format!(
                    "{name}: the launcher is exiting"
                )));
            }
            let allowed_while_stopping =
                matches!(command, Command::Kill | Command::Shutdown | Command::Delete);
            if self.phase == Phase::ShuttingDown && !allowed_while_stopping {
                return Err(CommandError::invalid_state(format!(
                    "{name}: the launcher is stopping the domain after a signal; only shutdown, kill and delete are accepted"
                )));
            }
            let exclusive = !matches!(command, Command::Kill);
            if exclusive {
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
        // Whether the domain is running or paused is left to libvirt: the
        // cached state can trail a job's result by an event still in
        // flight, and libvirt refuses with OPERATION_INVALID (InvalidState)
        // anyway.
        Ok(())
    }

    fn start_domain_job(&mut self, command: Command, reply: Sender<CommandResult>) {
        let name = self.config.domain_name.clone();
        let kind = JobKind::Command {
            name: command.name(),
            exclusive: !matches!(
                command,
                Command::Kill | Command::QueryDomain | Command::QueryStats
            ),
        };
        let agent_connected = self.domain.agent_connected;
        match command {
            Command::Shutdown => {
                self.stop_intent.get_or_insert(StopIntent::Shutdown);
            }
            Command::Kill => self.stop_intent = Some(StopIntent::Kill),
            _ => {}
        }
        let work = move |hv: &dyn Hypervisor| -> JobOutput {
            match command {
                Command::Pause => op_then_status(hv, &name, "pause", Needs::Running, |hv| {
                    hv.suspend(&name).map(|()| Map::new())
                }),
                Command::Unpause => op_then_status(hv, &name, "unpause", Needs::Paused, |hv| {
                    hv.resume(&name).map(|()| Map::new())
                }),
                Command::Shutdown => op_then_status(hv, &name, "shutdown", Needs::Active, |hv| {
                    hv.shutdown_acpi(&name)
                        .map(|()| object(json!({ "acpi_power_button": true })))
                }),
                Command::Reboot => {
                    let mode = if agent_connected {
                        RebootMode::GuestAgent
                    } else {
                        RebootMode::Acpi
                    };
                    op_then_status(hv, &name, "reboot", Needs::Active, |hv| {
                        let label = match mode {
                            RebootMode::GuestAgent => "guest-agent",
                            RebootMode::Acpi => "acpi",
                        };
                        hv.reboot(&name, mode)
                            .map(|()| object(json!({ "mode": label })))
                    })
                }
                Command::Reset => op_then_status(hv, &name, "reset", Needs::Active, |hv| {
                    hv.reset(&name).map(|()| Map::new())
                }),
                Command::Kill => op_then_status(hv, &name, "kill", Needs::Active, |hv| {
                    hv.destroy(&name, false).map(|()| Map::new())
                }),
                Command::Delete => op_then_status(hv, &name, "delete", Needs::Exists, |hv| {
                    hv.undefine(&name)
                        .map(|()| object(json!({ "undefined": true })))
                }),
                Command::QueryDomain => query_domain(hv, &name),
                Command::QueryStats => query_stats(hv, &name),
                other => JobOutput::reply(Err(CommandError::internal(format!(
                    "{} is not a domain job",
                    other.name()
                )))),
            }
        };
        self.jobs.spawn(kind, Some(reply), COMMAND_TIMEOUT, work);
    }
}

fn query_domain(hv: &dyn Hypervisor, name: &str) -> JobOutput {
    let (xml, uuid) = match hv.domain_xml(name) {
        Ok(x) => x,
        Err(e) => return JobOutput::reply(Err(hypervisor_error(&e))),
    };
    let status = match hv.domain_status(name) {
        Ok(s) => s,
        Err(e) => return JobOutput::reply(Err(hypervisor_error(&e))),
    };
    let spec = match crate::domxml::Domain::from_xml(&xml) {
        Ok(domain) => serde_json::to_value(&domain).unwrap_or(Value::Null),
        Err(e) => {
            return JobOutput::reply(Err(CommandError::internal(format!(
                "cannot parse the domain XML libvirt returned: {e}"
            ))));
        }
    };
    let shown = status.unwrap_or(DomainStatus::NON_EXISTENT);
    JobOutput {
        result: Ok(object(json!({
            "name": name,
            "uuid": uuid,
            "state": shown.state.as_str(),
            "reason": shown.reason.as_str(),
            "spec": spec,
            "xml": xml,
        }))),
        observed: Observation::Status(status),
    }
}

fn query_stats(hv: &dyn Hypervisor, name: &str) -> JobOutput {
    match hv.stats(name) {
        Ok(stats) => {
            let stats: Map<String, Value> = stats.into_iter().collect();
            JobOutput::reply(Ok(object(json!({ "domain": name, "stats": stats }))))
        }
        Err(e) => JobOutput::reply(Err(hypervisor_error(&e))),
    }
}
