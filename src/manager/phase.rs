//! Where the launcher is in its life, and the only place that moves it on.
//!
//! Every other module asks (`==`, [`LauncherPhase::now`]) and calls a
//! transition named for what happened; none assigns the phase itself, so
//! the order the phases go through can be read here.

/// Where the launcher is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Starting up: the socket is not yet renamed.
    Initializing,
    /// Ready, waiting for a domain (from --vmi or sync).
    WaitingForDomain,
    /// The domain has been started.
    Running,
    /// Prepared as a migration target: waiting for the domain to arrive.
    MigrationTarget,
    /// A signal arrived: the guest is being asked to power off.
    ShuttingDown,
    /// The domain stopped; the launcher is exiting.
    Exiting,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "Initializing",
            Phase::WaitingForDomain => "WaitingForDomain",
            Phase::Running => "Running",
            Phase::MigrationTarget => "MigrationTarget",
            Phase::ShuttingDown => "ShuttingDown",
            Phase::Exiting => "Exiting",
        }
    }
}

/// The launcher's phase, changed only by the transitions below.
#[derive(Debug)]
pub(super) struct LauncherPhase {
    current: Phase,
}

impl Default for LauncherPhase {
    fn default() -> LauncherPhase {
        LauncherPhase {
            current: Phase::Initializing,
        }
    }
}

impl PartialEq<Phase> for LauncherPhase {
    fn eq(&self, other: &Phase) -> bool {
        self.current == *other
    }
}

impl LauncherPhase {
    pub(super) fn now(&self) -> Phase {
        self.current
    }

    pub(super) fn as_str(&self) -> &'static str {
        self.current.as_str()
    }

    /// The launcher announced readiness: it runs the domain it already
    /// started (from --vmi), or waits for one. Only the first time.
    pub(super) fn ready(&mut self, domain_started: bool) {
        if self.current == Phase::Initializing {
            self.enter(if domain_started {
                Phase::Running
            } else {
                Phase::WaitingForDomain
            });
        }
    }

    /// The launcher's own domain started for the first time.
    pub(super) fn domain_started(&mut self) {
        if self.current == Phase::WaitingForDomain {
            self.enter(Phase::Running);
        }
    }

    /// Prepared as a migration target: the domain comes from elsewhere.
    pub(super) fn target_prepared(&mut self) {
        self.enter(Phase::MigrationTarget);
    }

    /// The migrated domain runs here now: this launcher owns it.
    pub(super) fn migrated_domain_arrived(&mut self) {
        self.enter(Phase::Running);
    }

    /// A signal asked the launcher to stop: the graceful stop begins.
    pub(super) fn graceful_stop_started(&mut self) {
        self.enter(Phase::ShuttingDown);
    }

    /// The launcher decided to exit. False when it already had (the first
    /// decision stands).
    pub(super) fn exit_decided(&mut self) -> bool {
        if self.current == Phase::Exiting {
            return false;
        }
        self.enter(Phase::Exiting);
        true
    }

    /// The one assignment of the phase.
    fn enter(&mut self, next: Phase) {
        if next != self.current {
            log::debug!(
                "manager: phase {} -> {}",
                self.current.as_str(),
                next.as_str()
            );
        }
        self.current = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_is_taken_once_and_exiting_is_final() {
        let mut phase = LauncherPhase::default();
        assert_eq!(phase.now(), Phase::Initializing);
        phase.ready(false);
        assert_eq!(phase.now(), Phase::WaitingForDomain);
        // A second readiness does not move a launcher on.
        phase.ready(true);
        assert_eq!(phase.now(), Phase::WaitingForDomain);
        phase.domain_started();
        assert_eq!(phase.now(), Phase::Running);
        phase.graceful_stop_started();
        // A domain seen starting again does not undo the stop.
        phase.domain_started();
        assert!(phase == Phase::ShuttingDown);
        assert!(phase.exit_decided());
        assert!(!phase.exit_decided());
        assert_eq!(phase.as_str(), "Exiting");
    }

    #[test]
    fn a_target_runs_once_the_domain_arrived() {
        let mut phase = LauncherPhase::default();
        phase.ready(false);
        phase.target_prepared();
        // Its incoming domain is not its own start.
        phase.domain_started();
        assert_eq!(phase.now(), Phase::MigrationTarget);
        phase.migrated_domain_arrived();
        assert_eq!(phase.now(), Phase::Running);
    }
}
