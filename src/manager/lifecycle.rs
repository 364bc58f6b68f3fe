//! The domain as the launcher sees it, kept current from libvirt's events
//! and from what jobs read, so that queries never wait for libvirt; and the
//! reactions to the domain starting and stopping.

use serde::Serialize;

use super::timers::Timer;
use super::{DomainManager, Phase};
use crate::events::Event;
use crate::hypervisor::{DomainState, DomainStatus, LifecycleEvent, StateReason};

/// The launcher's view of its domain.
#[derive(Debug, Clone)]
pub(super) struct DomainView {
    pub(super) status: DomainStatus,
    /// A persistent definition exists.
    pub(super) defined: bool,
    /// The domain has run under this launcher; its stop ends the launcher.
    pub(super) started_once: bool,
}

impl Default for DomainView {
    fn default() -> DomainView {
        DomainView {
            status: DomainStatus::NON_EXISTENT,
            defined: false,
            started_once: false,
        }
    }
}

/// DOMAIN_LIFECYCLE's data: libvirt's event and the state after it.
#[derive(Debug, Serialize)]
struct LifecycleData<'a> {
    detail: &'static str,
    domain: &'a str,
    event: &'static str,
    reason: &'static str,
    state: &'static str,
}

impl DomainManager {
    pub(super) fn on_lifecycle(&mut self, lifecycle: LifecycleEvent) {
        match lifecycle {
            LifecycleEvent::Defined(_) => {
                self.domain.defined = true;
                if self.domain.status == DomainStatus::NON_EXISTENT {
                    self.domain.status =
                        DomainStatus::new(DomainState::Shutoff, StateReason::Unknown);
                }
            }
            LifecycleEvent::Undefined(_) => {
                self.domain.defined = false;
                if !self.domain.status.state.is_active() {
                    self.domain.status = DomainStatus::NON_EXISTENT;
                }
            }
            other => {
                if matches!(other, LifecycleEvent::Started(_)) {
                    self.agent.domain_started();
                }
                if let Some(status) = other.status() {
                    self.domain.status = status;
                }
            }
        }
        self.jobs.note_domain_event();
        self.hub.publish(Event::lifecycle(
            lifecycle,
            &LifecycleData {
                detail: lifecycle.detail(),
                domain: &self.config.domain_name,
                event: lifecycle.name(),
                reason: self.domain.status.reason.as_str(),
                state: self.domain.status.state.as_str(),
            },
        ));
        if self.on_target_lifecycle(lifecycle) {
            return;
        }
        self.after_status_change(Some(lifecycle));
    }

    /// Applies a state libvirt reported in answer to a call (`None`: the
    /// domain does not exist).
    pub(super) fn apply_observed_status(&mut self, status: Option<DomainStatus>) {
        match status {
            Some(status) => {
                // Existence is news only for a domain we did not know;
                // whether a known one is still defined (persistent) comes
                // from the Defined/Undefined events.
                if self.domain.status == DomainStatus::NON_EXISTENT {
                    self.domain.defined = true;
                }
                self.domain.status = status;
            }
            None => {
                self.domain.defined = false;
                self.domain.status = DomainStatus::NON_EXISTENT;
            }
        }
        self.after_status_change(None);
    }

    /// Reacts to the domain starting or stopping, whoever noticed it.
    fn after_status_change(&mut self, lifecycle: Option<LifecycleEvent>) {
        let status = self.domain.status;
        if !status.state.is_active() {
            self.agent.domain_stopped();
        } else {
            self.metrics.domain_runs();
        }
        self.update_poller();
        // A migration target's incoming domain is not its own until it runs.
        if status.state.is_active()
            && !self.domain.started_once
            && self.phase != Phase::MigrationTarget
        {
            self.domain.started_once = true;
            self.timers.cancel(Timer::QemuTimeout);
            self.phase.domain_started();
        }
        if !self.domain.started_once {
            return;
        }
        match lifecycle {
            Some(LifecycleEvent::Stopped(_)) => {
                self.timers.cancel(Timer::FinalEvent);
                self.agent.domain_stopped();
                self.finish_after_stop(status.reason);
            }
            Some(_) => {}
            // A job saw the domain stopped. libvirt's Stopped event normally
            // follows within milliseconds and is the final event
            // subscribers must get, so give it a moment.
            None if !status.state.is_active() => {
                if self.timers.next_of(Timer::FinalEvent).is_none() {
                    self.timers
                        .arm_in(Timer::FinalEvent, self.timing.final_event);
                }
            }
            None => self.timers.cancel(Timer::FinalEvent),
        }
    }

    pub(super) fn on_final_event_overdue(&mut self) {
        if self.domain.status.state.is_active() {
            return;
        }
        log::warn!("manager: the domain stopped but libvirt sent no Stopped event");
        self.agent.domain_stopped();
        self.finish_after_stop(self.domain.status.reason);
    }
}
