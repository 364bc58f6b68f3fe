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
use crate::replies;
use crate::signals::Signal;
use crate::upgrade::GracefulStopHandover;

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
    period: Duration,
    /// Why the domain is expected to stop, once something asked it to.
    intent: Option<StopIntent>,
    /// When the graceful stop after a signal began and when its grace
    /// period ends.
    window: Option<(Instant, Instant)>,
    /// ACPI power button presses since the signal, numbered in the log: a
    /// guest still booting misses the first ones.
    presses: u32,
    /// When the first `shutdown` command asked the guest to power off
    /// (wall-clock time: virt-handler counts its grace period from it, as
    /// KubeVirt's launcher records it in the domain's grace period
    /// metadata).
    shutdown_requested_at: Option<SystemTime>,
}

impl GracefulStop {
    pub(super) fn new(flag: Option<Duration>) -> GracefulStop {
        GracefulStop {
            period: flag.unwrap_or(DEFAULT_GRACE_PERIOD),
            intent: None,
            window: None,
            presses: 0,
            shutdown_requested_at: None,
        }
    }

    /// How long a signalled guest has to power off.
    pub(super) fn period(&self) -> Duration {
        self.period
    }

    /// Why the domain is expected to stop, if something asked it to.
    pub(super) fn intent(&self) -> Option<StopIntent> {
        self.intent
    }

    /// A synced or prepared VMI brings its own grace period.
    pub(super) fn adopt_grace_period(&mut self, period: Duration) {
        self.period = period;
    }

    /// `shutdown` asked the guest to power off; a stop already under way
    /// keeps its own reason.
    pub(super) fn shutdown_requested(&mut self) {
        self.intent.get_or_insert(StopIntent::Shutdown);
        self.shutdown_requested_at
            .get_or_insert_with(SystemTime::now);
    }

    /// When the first `shutdown` command came, in seconds since the epoch.
    pub(super) fn shutdown_requested_at(&self) -> Option<f64> {
        self.shutdown_requested_at
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .map(|since| since.as_secs_f64())
    }

    /// The launcher this one replaced had been asked to shut down at
    /// `at` (seconds since the epoch).
    pub(super) fn restore_shutdown_requested_at(&mut self, at: f64) {
        self.intent.get_or_insert(StopIntent::Shutdown);
        self.shutdown_requested_at =
            UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(at).unwrap_or_default());
    }

    /// `kill` forces the domain off, whatever asked for a stop before.
    pub(super) fn kill_requested(&mut self) {
        self.intent = Some(StopIntent::Kill);
    }

    /// A signal arrived at `now`: the grace period starts; returns when it
    /// ends.
    fn begin_after_signal(&mut self, now: Instant) -> Instant {
        let deadline = crate::limits::later(now, self.period);
        self.window = Some((now, deadline));
        self.intent = Some(StopIntent::Signal);
        deadline
    }

    /// The graceful stop under way, for a hand-over (`upgrade`): its
    /// start and deadline in milliseconds since the epoch.
    pub(super) fn handover(&self, signal: Option<&str>) -> Option<GracefulStopHandover> {
        let (began, deadline) = self.window?;
        let now = Instant::now();
        let now_ms = crate::upgrade::now_ms();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Some(GracefulStopHandover {
            signal: signal.unwrap_or("a signal").to_string(),
            began_at_ms: now_ms.saturating_sub(ms(now.saturating_duration_since(began))),
            deadline_at_ms: now_ms.saturating_add(ms(deadline.saturating_duration_since(now))),
        })
    }

    /// A graceful stop handed over by the launcher this one replaced: the
    /// same deadline; returns it.
    fn resume(&mut self, handed: &GracefulStopHandover, now: Instant) -> Instant {
        let now_ms = crate::upgrade::now_ms();
        let began = now
            .checked_sub(Duration::from_millis(
                now_ms.saturating_sub(handed.began_at_ms),
            ))
            .unwrap_or(now);
        let deadline = crate::limits::later(
            now,
            Duration::from_millis(handed.deadline_at_ms.saturating_sub(now_ms)),
        );
        self.window = Some((began, deadline));
        self.intent = Some(StopIntent::Signal);
        deadline
    }

    /// When the grace period after a signal ends, once one began.
    fn deadline(&self) -> Option<Instant> {
        self.window.map(|(_, deadline)| deadline)
    }

    /// Counts one more press of the power button; returns its number.
    fn power_button_pressed(&mut self) -> u32 {
        self.presses = self.presses.saturating_add(1);
        self.presses
    }

    /// The grace period ran out: the domain is forced off. True the first
    /// time only (the force-off is retried; its announcement is not).
    fn grace_expired(&mut self) -> bool {
        if self.intent == Some(StopIntent::GraceExpired) {
            return false;
        }
        self.intent = Some(StopIntent::GraceExpired);
        true
    }

    /// `query-status`' `shutdown`: how far the graceful stop after a
    /// signal is, while there is one.
    pub(super) fn grace_window(&self, now: Instant) -> Option<replies::GraceWindow> {
        self.window.map(|(began, deadline)| replies::GraceWindow {
            remaining_seconds: deadline.saturating_duration_since(now).as_secs_f64(),
            started_seconds_ago: now.saturating_duration_since(began).as_secs_f64(),
        })
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
        if self.hold_signal_while_upgrading(signal) {
            return;
        }
        match self.phase.now() {
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
        if self.migration_running_as_source() {
            log::info!("manager: {name}: cancelling the running migration first");
            self.migration
                .cancel_running(&format!("cancelled by {name}: the launcher is stopping"));
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
        let grace = self.stop.period();
        let deadline = self.stop.begin_after_signal(Instant::now());
        self.phase.graceful_stop_started();
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

    /// The launcher this one replaced (`upgrade`) was stopping the guest
    /// after a signal: the stop goes on with the same deadline (no second
    /// SHUTDOWN_STARTED; the power button is pressed again).
    pub(super) fn resume_graceful_stop(&mut self, handed: &GracefulStopHandover) {
        let deadline = self.stop.resume(handed, Instant::now());
        self.phase.graceful_stop_started();
        log::info!(
            "manager: the graceful stop after {} goes on; forcing the guest off in {:.1} s",
            handed.signal,
            deadline
                .saturating_duration_since(Instant::now())
                .as_secs_f64()
        );
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
        let Some(deadline) = self.stop.deadline() else {
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
        let press = self.stop.power_button_pressed();
        log::info!(
            "manager: ACPI power button press {} (again every {} s until the guest powers off)",
            press,
            self.timing.acpi_repeat.as_secs()
        );
        let name = self.config.domain_name.clone();
        let frozen = self.agent.filesystems_frozen();
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
        if self.stop.grace_expired() {
            log::warn!(
                "manager: the guest did not power off within {} s; forcing it off",
                self.stop.period().as_secs()
            );
            self.publish(
                EventKind::ShutdownGraceExpired,
                GraceExpired {
                    domain: &self.config.domain_name,
                    grace_period_seconds: self.stop.period().as_secs(),
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
