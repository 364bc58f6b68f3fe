//! The manager's part of `upgrade` (see `crate::upgrade`): refuse while
//! something that cannot be handed over runs, describe the state for the
//! new launcher, then let the main thread check the new binary and exec
//! it. While the hand-over is under way, commands that would change
//! anything are refused (Unavailable) and a stop signal is held for the
//! new launcher, so nothing is half done when the process is replaced.

use std::path::PathBuf;

use super::{DomainManager, Phase};
use crate::command::{DomainCommand, GuestCommand, ManagerCommand, MigrationCommand, ReplyTo};
use crate::protocol::{CommandError, ErrorClass};
use crate::signals::Signal;
use crate::upgrade::HandoverState;

/// The manager's request to the main thread: check `binary` and exec it.
pub struct UpgradeRequest {
    /// The new binary (`None`: the launcher's own path).
    pub binary: Option<PathBuf>,
    pub state: HandoverState,
    pub reply: ReplyTo,
}

/// Whether `command` may change the domain or the launcher (refused while
/// a hand-over is under way; queries are still answered).
fn changes_something(command: &ManagerCommand) -> bool {
    match command {
        ManagerCommand::Domain(command) => !matches!(
            command,
            DomainCommand::Ping
                | DomainCommand::QueryVersion
                | DomainCommand::QueryStatus
                | DomainCommand::QueryDomain(_)
                | DomainCommand::QueryStats { .. }
                | DomainCommand::QueryQemuVersion
                | DomainCommand::QueryVmStats(_)
                | DomainCommand::QueryCheckpoints
                | DomainCommand::Screenshot
        ),
        ManagerCommand::Guest(command) => matches!(
            command,
            GuestCommand::Exec(_) | GuestCommand::Freeze { .. } | GuestCommand::Unfreeze
        ),
        ManagerCommand::Migration(command) => !matches!(command, MigrationCommand::Query),
    }
}

impl DomainManager {
    /// While a hand-over is under way: the refusal of a command that
    /// would change something.
    pub(super) fn refused_while_upgrading(&self, command: &ManagerCommand) -> Option<CommandError> {
        (self.upgrading && changes_something(command)).then(|| {
            CommandError::new(
                ErrorClass::Unavailable,
                "the launcher is handing over to a new binary; retry once it answers again",
            )
        })
    }

    /// Why an upgrade cannot start now, if it cannot.
    fn upgrade_refusal(&self) -> Option<CommandError> {
        let invalid = |why: String| Some(CommandError::invalid_state(format!("upgrade: {why}")));
        if self.upgrading {
            return Some(CommandError::new(
                ErrorClass::Busy,
                "upgrade: a hand-over is already under way",
            ));
        }
        match self.phase.now() {
            Phase::Initializing => return invalid("the launcher is still starting".into()),
            Phase::MigrationTarget => {
                return invalid(
                    "this launcher is a migration target waiting for its guest; upgrade after the migration".into(),
                );
            }
            Phase::Exiting => return invalid("the launcher is exiting".into()),
            Phase::WaitingForDomain | Phase::Running | Phase::ShuttingDown => {}
        }
        if self.migration_running_as_source() {
            return invalid(
                "a migration is running; cancel it (migrate-cancel) or wait for it to end".into(),
            );
        }
        if let Some(backup) = self.backup.running() {
            return invalid(format!(
                "backup {} is running; abort it (backup-abort) or wait for it to end",
                backup.checkpoint
            ));
        }
        if self.memory_dump.running().is_some() {
            return invalid("a memory dump is running; wait for it to end".into());
        }
        if let Some(running) = self.jobs.exclusive_running() {
            return Some(CommandError::new(
                ErrorClass::Busy,
                format!(
                    "upgrade: {} is still in progress; retry when it completes",
                    running.name()
                ),
            ));
        }
        if let Some(daemons) = &self.daemons {
            let unavailable = |why: &str| {
                Some(CommandError::new(
                    ErrorClass::Unavailable,
                    format!("upgrade with the launcher's own libvirt daemons: {why}"),
                ))
            };
            if let Err(why) = daemons.handover() {
                return unavailable(&why);
            }
            // What else runs in the daemons' namespace is not handed over.
            if self.network.lock().is_ok_and(|n| n.is_some()) {
                return unavailable("not supported yet with pod networking");
            }
            if self.virtiofs.lock().is_ok_and(|v| v.is_some()) {
                return unavailable("not supported yet with virtiofs filesystems");
            }
        }
        if self.config.kubevirt.hook_sidecars > 0 {
            return Some(CommandError::new(
                ErrorClass::Unavailable,
                "upgrade: not supported yet with hook sidecars",
            ));
        }
        None
    }

    /// `upgrade`: refuses, or hands the request to the main thread.
    pub(super) fn start_upgrade(&mut self, binary: Option<PathBuf>, reply: ReplyTo) {
        if let Some(refusal) = self.upgrade_refusal() {
            log::info!("manager: {refusal}");
            return reply.send(Err(refusal));
        }
        let daemons = self.daemons.as_ref().and_then(|d| d.handover().ok());
        let state = HandoverState {
            // Taken by the main thread right before the exec.
            events: None,
            version: crate::upgrade::state_version(daemons.is_some()),
            daemons,
            migration: self
                .migration
                .status()
                .and_then(|status| serde_json::to_value(status).ok()),
            from: env!("CARGO_PKG_VERSION").to_string(),
            phase: self.phase.as_str().to_string(),
            domain_state: self.domain.status.state.as_str().to_string(),
            agent_connected: self.agent.is_connected(),
            grace_period_seconds: self.stop.period().as_secs(),
            shutdown_requested_at: self.stop.shutdown_requested_at(),
            graceful_stop: (self.phase == Phase::ShuttingDown)
                .then(|| self.stop.handover(None))
                .flatten(),
            subscribers: self.hub.subscriber_count(),
            vcpu_threads: self.vcpu_threads(),
            handed_over_at_us: crate::upgrade::now_us(),
        };
        let request = super::UpgradeRequest {
            binary,
            state,
            reply,
        };
        match self.upgrade.send(request) {
            Ok(()) => {
                log::info!("manager: handing over to a new binary; holding changes meanwhile");
                self.upgrading = true;
                crate::upgrade::set_handing_over(true);
            }
            Err(returned) => returned.into_inner().reply.send(Err(CommandError::internal(
                "upgrade: the main thread is not listening",
            ))),
        }
    }

    /// The launcher this one replaced handed `state` over: what the live
    /// domain does not tell (a `shutdown`'s time, a graceful stop's
    /// deadline) goes on.
    pub(super) fn resume_after_upgrade(&mut self, state: HandoverState) {
        if let Some(at) = state.shutdown_requested_at {
            self.stop.restore_shutdown_requested_at(at);
        }
        if let Some(stop) = &state.graceful_stop {
            self.resume_graceful_stop(stop);
        }
        if let Some(record) = state
            .migration
            .as_ref()
            .and_then(crate::migration::MigrationRecord::from_status)
        {
            self.migration.adopt_handed_over(record);
        }
        self.adopt_vcpu_threads(state.vcpu_threads);
    }

    /// The main thread gave the hand-over up (the new binary failed its
    /// check, or the exec failed): back to normal, and a stop signal held
    /// meanwhile is acted on now.
    pub(super) fn upgrade_aborted(&mut self) {
        self.upgrading = false;
        crate::upgrade::set_handing_over(false);
        if let Some(signal) = crate::upgrade::take_held_signal().and_then(Signal::from_raw) {
            self.handle_signal(signal);
        }
    }

    /// A stop signal during the hand-over: held for the new launcher
    /// (true), or acted on now (false).
    pub(super) fn hold_signal_while_upgrading(&self, signal: Signal) -> bool {
        if self.upgrading {
            log::info!(
                "manager: {} during the hand-over: the launcher acts on it once the hand-over ends",
                signal.name()
            );
            crate::upgrade::hold_signal(signal.raw());
        }
        self.upgrading
    }
}
