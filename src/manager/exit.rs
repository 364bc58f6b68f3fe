//! The launcher's end: the exit status a stop means, and the exit itself.
//! The manager decides; the main thread ends the process once the manager
//! sends it the decision, which waits for replies still due and for the
//! stopped domain's definition to be removed.

use crossbeam_channel::Sender;

use super::errors::hypervisor_error;
use super::jobs::{JobOutput, Operation};
use super::reply::JobValue;
use super::shutdown::StopIntent;
use super::timers::{Timer, Timers};
use super::{DomainManager, Phase, humanize};
use crate::exit::ExitCode;
use crate::hypervisor::{HypervisorErrorKind, StateReason};

/// The manager's decision that the launcher is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitRequest {
    pub code: ExitCode,
    pub reason: String,
}

/// The exit: where the decision goes, and the decision while it is held.
pub(super) struct ExitState {
    to_main: Sender<ExitRequest>,
    /// The exit decision, held while replies are still due and the
    /// domain's definition is removed.
    pending: Option<ExitRequest>,
    cleanup_started: bool,
    /// KubeVirt mode: the stopped domain is left for virt-handler's
    /// `DeleteVirtualMachine`, which the exit waits for (at most
    /// `KUBEVIRT_DELETE_WAIT`), as KubeVirt's launcher waits for its final
    /// notification.
    pub(super) awaiting_delete: bool,
}

/// How long a launcher in KubeVirt mode waits, once its domain stopped,
/// for virt-handler to delete it (KubeVirt's launcher: 15 s).
const KUBEVIRT_DELETE_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

impl ExitState {
    pub(super) fn new(to_main: Sender<ExitRequest>) -> ExitState {
        ExitState {
            to_main,
            pending: None,
            cleanup_started: false,
            awaiting_delete: false,
        }
    }

    pub(super) fn is_pending(&self) -> bool {
        self.pending.is_some()
    }
}

/// The exit status and reason for a domain that stopped with `reason`,
/// given why the launcher expected it to stop.
pub(super) fn stop_outcome(
    reason: StateReason,
    intent: Option<StopIntent>,
    grace_seconds: u64,
) -> (ExitCode, String) {
    match (reason, intent) {
        (StateReason::Migrated, _) => (ExitCode::Ok, "the domain migrated away".into()),
        (StateReason::Shutdown, _) => (ExitCode::Ok, "the guest powered off".into()),
        (StateReason::Destroyed, Some(StopIntent::Kill)) => {
            (ExitCode::Ok, "the domain was killed on request".into())
        }
        (StateReason::Destroyed, Some(StopIntent::GraceExpired)) => (
            ExitCode::GracePeriodExpired,
            format!(
                "the guest did not power off within the {grace_seconds} s grace period and was forced off"
            ),
        ),
        (StateReason::Destroyed, _) => (
            ExitCode::DomainCrashed,
            "the domain was destroyed by something outside the launcher".into(),
        ),
        (StateReason::NonExistent, _) => (
            ExitCode::DomainCrashed,
            "the domain disappeared while libvirt was unreachable".into(),
        ),
        (other, _) => (
            ExitCode::DomainCrashed,
            format!(
                "the domain stopped unexpectedly (reason {}): the guest crashed or QEMU died",
                other.as_str()
            ),
        ),
    }
}

impl DomainManager {
    pub(super) fn on_qemu_timeout(&mut self) {
        if self.domain.started_once || self.phase == Phase::Exiting {
            return;
        }
        if self.phase == Phase::MigrationTarget {
            let reason = format!(
                "no migrating domain arrived within {} (--qemu-timeout)",
                humanize(self.config.qemu_timeout)
            );
            self.end_target(reason, ExitCode::QemuTimeout);
            return;
        }
        let reason = format!(
            "no domain was defined and started within {} (--qemu-timeout); sync a VMI sooner or raise the timeout",
            humanize(self.config.qemu_timeout)
        );
        self.finish(ExitCode::QemuTimeout, reason);
    }

    /// The domain stopped: exit with the status its stop means.
    pub(super) fn finish_after_stop(&mut self, reason: StateReason) {
        let (code, why) = stop_outcome(reason, self.stop.intent(), self.stop.period().as_secs());
        self.finish(code, why);
    }

    /// Decides that the launcher is done. The decision goes to the main
    /// thread once clients still waiting for a reply have it, and once a
    /// stopped domain's definition is removed from a shared daemon (its
    /// launcher is its owner; a stale definition would otherwise outlive
    /// it), or after `Timing::exit_cleanup` at most.
    pub(super) fn finish(&mut self, code: ExitCode, reason: String) {
        if !self.phase.exit_decided() {
            return;
        }
        self.timers = Timers::default();
        self.exit.pending = Some(ExitRequest { code, reason });
        let stopped_and_defined = self.domain.defined && !self.domain.status.state.is_active();
        if self.config.kubevirt.mode && stopped_and_defined {
            log::info!(
                "manager: waiting up to {} s for virt-handler to delete the stopped domain",
                KUBEVIRT_DELETE_WAIT.as_secs()
            );
            self.exit.awaiting_delete = true;
            self.timers.arm_in(Timer::ExitNow, KUBEVIRT_DELETE_WAIT);
        } else {
            self.timers.arm_in(Timer::ExitNow, self.timing.exit_cleanup);
        }
        self.start_exit_cleanup();
        self.exit_when_settled();
    }

    /// Removes a stopped domain's definition before exiting, once no
    /// migration still needs it (its final statistics are read from it).
    /// A command still acting on the domain (`kill`, or an exclusive one)
    /// goes first: its reply reads the domain's state when it is done, and
    /// that must be the stop it caused (`Destroyed`), not the definition's
    /// removal (`NonExistent`).
    pub(super) fn start_exit_cleanup(&mut self) {
        if !self.exit.is_pending()
            || self.migration_running_as_source()
            || self.exit.cleanup_started
            || self.jobs.is_running(Operation::Kill)
            || self.jobs.exclusive_running().is_some()
        {
            return;
        }
        self.exit.cleanup_started = true;
        let stopped_and_defined = self.domain.defined && !self.domain.status.state.is_active();
        // The launcher's own daemons (--spawn-libvirt) end with it, and
        // their definitions with them: nothing to remove, nothing to wait
        // for.
        let shared_daemon = self.daemons.is_none();
        if stopped_and_defined && shared_daemon && self.link.is_up() {
            let name = self.config.domain_name.clone();
            self.jobs.spawn(
                Operation::UndefineOnExit,
                None,
                self.timing.exit_cleanup,
                move |hv| {
                    JobOutput::reply(match hv.undefine(&name) {
                        Ok(()) => Ok(JobValue::Empty),
                        Err(e) if e.kind == HypervisorErrorKind::NoDomain => Ok(JobValue::Empty),
                        Err(e) => Err(hypervisor_error(&e)),
                    })
                },
            );
        }
    }

    /// Sends the held exit decision once nothing it would cut short is
    /// still running.
    pub(super) fn exit_when_settled(&mut self) {
        if !self.exit.is_pending() {
            return;
        }
        // A migration's outcome (MIGRATION_COMPLETED) follows the
        // source domain's Stopped/Migrated event; wait for it too.
        let settled = !self.jobs.has_waiting_clients()
            && !self.exit.awaiting_delete
            && !self.jobs.is_running(Operation::UndefineOnExit)
            && !self.migration_running_as_source();
        if settled {
            self.exit_now();
        }
    }

    /// Sends the held exit decision.
    pub(super) fn exit_now(&mut self) {
        if let Some(request) = self.exit.pending.take() {
            let _ = self.exit.to_main.send(request);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_by_reason_and_intent() {
        let code = |reason, intent| stop_outcome(reason, intent, 30).0;
        assert_eq!(code(StateReason::Shutdown, None), ExitCode::Ok);
        assert_eq!(code(StateReason::Migrated, None), ExitCode::Ok);
        assert_eq!(
            code(StateReason::Destroyed, Some(StopIntent::Kill)),
            ExitCode::Ok
        );
        assert_eq!(
            code(StateReason::Destroyed, Some(StopIntent::GraceExpired)),
            ExitCode::GracePeriodExpired
        );
        assert_eq!(
            code(StateReason::Destroyed, Some(StopIntent::Signal)),
            ExitCode::DomainCrashed
        );
        assert_eq!(code(StateReason::Destroyed, None), ExitCode::DomainCrashed);
        assert_eq!(code(StateReason::Crashed, None), ExitCode::DomainCrashed);
        assert_eq!(code(StateReason::Failed, None), ExitCode::DomainCrashed);
        let (_, why) = stop_outcome(StateReason::Crashed, None, 30);
        assert!(why.contains("reason Crashed"), "{why}");
        let (_, why) = stop_outcome(StateReason::Destroyed, Some(StopIntent::GraceExpired), 7);
        assert!(why.contains("7 s grace period"), "{why}");
    }
}
