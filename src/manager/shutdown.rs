//! The graceful stop after SIGTERM or SIGINT: ask the guest to power off by
//! ACPI, repeat the request every 5 s (a guest still booting misses the
//! first), and force the domain off when the grace period runs out. A pod's
//! end must never silently become a pulled power cord, nor a hang.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::errors::hypervisor_error;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::JobValue;
use super::timers::Timer;
use super::{DomainManager, Phase};
use crate::agent::model::FreezeStatus;
use crate::events::EventKind;
use crate::exit::ExitCode;
use crate::hypervisor::DomainState;
use crate::signals::Signal;

/// KubeVirt's default terminationGracePeriodSeconds.
const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// Why the domain is expected to stop, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopIntent {
    /// `shutdown` asked the guest to power off.
    Shutdown,
    /// `kill` forced it off.
    Kill,
    /// A signal asked the guest to power off.
    Signal,
    /// The grace period ran out; the launcher forced it off.
    GraceExpired,
}

/// How the domain is being stopped.
pub(super) struct GracefulStop {
    /// How long a signalled guest has to power off: --grace-period-seconds,
    /// else the synced VMI's terminationGracePeriodSeconds.
    pub(super) period: Duration,
    /// Why the domain is expected to stop, once something asked it to.
    pub(super) intent: Option<StopIntent>,
    /// When the graceful stop after a signal began and when its grace
    /// period ends.
    pub(super) window: Option<(Instant, Instant)>,
    /// ACPI power button presses since the signal, numbered in the log: a
    /// guest still booting misses the first ones.
    pub(super) presses: u32,
}

impl GracefulStop {
    pub(super) fn new(flag: Option<Duration>) -> GracefulStop {
        GracefulStop {
            period: flag.unwrap_or(DEFAULT_GRACE_PERIOD),
            intent: None,
            window: None,
            presses: 0,
        }
    }
}

/// SHUTDOWN_STARTED's data: the deadline in seconds since the epoch.
#[derive(Debug, Serialize)]
struct ShutdownStarted<'a> {
    deadline: u64,
    domain: &'a str,
    grace_period_seconds: u64,
    signal: &'static str,
}

/// SHUTDOWN_GRACE_EXPIRED's data.
#[derive(Debug, Serialize)]
struct GraceExpired<'a> {
    domain: &'a str,
    grace_period_seconds: u64,
}

impl DomainManager {
    /// A stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT; the signal thread
    /// handles the others itself).
    pub(super) fn handle_signal(&mut self, signal: Signal) {
        let name = signal.name();
        match self.phase {
            Phase::ShuttingDown => {
                let left = self
                    .stop
                    .window
                    .map(|(_, end)| end.saturating_duration_since(Instant::now()).as_secs())
                    .unwrap_or(0);
                log::warn!(
                    "manager: {name} received again; the grace period continues ({left} s left)"
                );
                return;
            }
            Phase::Exiting => return,
            _ => {}
        }
        // A pod's end stops an outgoing migration; the guest stays here
        // and is shut down like any other.
        if self.migration_running_as_source()
            && let Some(cancel) = &self.migration.cancel
        {
            log::info!("manager: {name}: cancelling the running migration first");
            cancel.cancel(&format!("cancelled by {name}: the launcher is stopping"));
        }
        // A target gives its incoming migration up.
        if self.phase == Phase::MigrationTarget {
            log::info!("manager: {name}: giving up the incoming migration");
            self.give_up_target(&format!(
                "{name} received while waiting for the migrating domain"
            ));
            return;
        }
        if !self.domain.status.state.is_active() {
            self.finish(
                ExitCode::Ok,
                format!("{name} received while no domain was running"),
            );
            return;
        }
        let grace = self.stop.period;
        let now = Instant::now();
        let deadline = crate::limits::later(now, grace);
        self.phase = Phase::ShuttingDown;
        self.stop.window = Some((now, deadline));
        self.stop.intent = Some(StopIntent::Signal);
        let deadline_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.saturating_add(grace).as_secs())
            .unwrap_or(0);
        log::info!(
            "manager: {name}: asking the guest to power off; forcing it off in {} s",
            grace.as_secs()
        );
        self.publish(
            EventKind::ShutdownStarted,
            ShutdownStarted {
                deadline: deadline_unix,
                domain: &self.config.domain_name,
                grace_period_seconds: grace.as_secs(),
                signal: name,
            },
        );
        if grace.is_zero() {
            self.on_grace_deadline();
            return;
        }
        self.press_power_button();
        self.timers.arm(Timer::GraceDeadline, deadline);
        self.arm_acpi_repeat(deadline);
    }

    fn arm_acpi_repeat(&mut self, deadline: Instant) {
        let next = crate::limits::deadline_in(self.timing.acpi_repeat);
        if next < deadline {
            self.timers.arm(Timer::RepeatAcpi, next);
        }
    }

    pub(super) fn on_repeat_acpi(&mut self) {
        let Some((_, deadline)) = self.stop.window else {
            return;
        };
        if self.phase != Phase::ShuttingDown || !self.domain.status.state.is_active() {
            return;
        }
        self.press_power_button();
        self.arm_acpi_repeat(deadline);
    }

    /// Presses the ACPI power button. A guest that cannot act on it is
    /// made able to first: a paused one is resumed, and frozen filesystems
    /// are thawed (a shutdown blocks on a frozen filesystem), so the stop
    /// stays graceful instead of ending as a forced one.
    fn press_power_button(&mut self) {
        if self.jobs.is_running(Operation::AcpiShutdown) {
            return;
        }
        self.stop.presses = self.stop.presses.saturating_add(1);
        log::info!(
            "manager: ACPI power button press {} (again every {} s until the guest powers off)",
            self.stop.presses,
            self.timing.acpi_repeat.as_secs()
        );
        let name = self.config.domain_name.clone();
        let frozen = self.agent.cache.fsfreeze_status == Some(FreezeStatus::Frozen);
        let timeout = self.timing.acpi_repeat;
        self.jobs
            .spawn(Operation::AcpiShutdown, None, timeout, move |hv| {
                // Resume first: a paused guest's agent cannot thaw anything.
                if let Ok(Some(status)) = hv.domain_status(&name)
                    && status.state == DomainState::Paused
                {
                    match hv.resume(&name) {
                        Ok(()) => {
                            log::info!("manager: resumed the paused guest so it can power off")
                        }
                        Err(e) => log::warn!("manager: could not resume the paused guest: {e}"),
                    }
                }
                let mut observed = Observation::Nothing;
                if frozen {
                    let thaw = r#"{"execute":"guest-fsfreeze-thaw"}"#;
                    match hv.agent_command(&name, thaw, Duration::from_secs(5)) {
                        Ok(_) => {
                            log::info!(
                                "manager: thawed the guest's filesystems before the shutdown"
                            );
                            observed = Observation::FsFreeze(FreezeStatus::Thawed);
                        }
                        Err(e) => log::warn!("manager: could not thaw before the shutdown: {e}"),
                    }
                }
                JobOutput {
                    result: hv
                        .shutdown_acpi(&name)
                        .map(|()| JobValue::Empty)
                        .map_err(|e| hypervisor_error(&e)),
                    observed,
                }
            });
    }

    /// The grace period is over: force the domain off, and keep trying
    /// every second until it is off.
    pub(super) fn on_grace_deadline(&mut self) {
        if self.phase != Phase::ShuttingDown || !self.domain.status.state.is_active() {
            return;
        }
        self.timers.cancel(Timer::RepeatAcpi);
        if self.stop.intent != Some(StopIntent::GraceExpired) {
            self.stop.intent = Some(StopIntent::GraceExpired);
            log::warn!(
                "manager: the guest did not power off within {} s; forcing it off",
                self.stop.period.as_secs()
            );
            self.publish(
                EventKind::ShutdownGraceExpired,
                GraceExpired {
                    domain: &self.config.domain_name,
                    grace_period_seconds: self.stop.period.as_secs(),
                },
            );
        }
        if !self.jobs.is_running(Operation::ForceOff) {
            let name = self.config.domain_name.clone();
            self.jobs
                .spawn(Operation::ForceOff, None, self.timing.command, move |hv| {
                    JobOutput::reply(
                        hv.destroy(&name, false)
                            .map(|()| JobValue::Empty)
                            .map_err(|e| hypervisor_error(&e)),
                    )
                });
        }
        self.timers
            .arm_in(Timer::GraceDeadline, self.timing.destroy_retry);
    }
}
