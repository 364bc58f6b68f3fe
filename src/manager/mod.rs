//! The domain-manager thread: the only owner of the domain's state.
//!
//! Everything arrives as a message: client requests (each with its own
//! reply sender), libvirt events, signals, job completions and timers. The
//! manager never blocks on libvirt; calls run as jobs on worker threads
//! (see `jobs`) and come back as completions.

mod commands;
mod guest;
mod jobs;
mod migration;
mod reply;
mod shutdown;
mod sync;
mod timers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};
use serde_json::{Value, json};

use crate::agent::cache::GuestAgentCache;
use crate::agent::{AgentData, AgentUpdate, PollerControl};
use crate::command::{ManagerCommand, ManagerRequest, ReplyTo};
use crate::config::Config;
use crate::daemons::LibvirtDaemons;
use crate::disks::PreparedDisks;
use crate::events::{Event, EventHub, EventKind};
use crate::exit::ExitCode;
use crate::hypervisor::{
    AgentLifecycle, CloseReason, DomainState, DomainStatus, Hypervisor, HypervisorEvent,
    LifecycleEvent, Stat, StateReason,
};
use crate::migration::worker::CancelHandle;
use crate::migration::{MigrationRecord, MigrationUpdate};
use crate::threads::FatalSender;
use jobs::{Finished, JobOutput, JobRunner, Observation, Operation};
use reply::JobValue;
pub use shutdown::signal_name;
pub use sync::HostFacts;
use timers::{Timer, Timers};

/// Messages from the main thread.
#[derive(Debug)]
pub enum Control {
    /// The launcher is about to announce readiness; the manager leaves
    /// Initializing and acknowledges, so the first client after the rename
    /// never sees the old phase.
    Ready { ack: Sender<()> },
    /// Standalone mode: sync this VMI; the outcome goes back on `reply`.
    SyncStandalone { vmi: Value, reply: ReplyTo },
}

/// The manager's decision that the launcher is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitRequest {
    pub code: ExitCode,
    pub reason: String,
}

/// Everything the manager is built from.
pub struct ManagerParts {
    pub config: Arc<Config>,
    pub hypervisor: Arc<dyn Hypervisor>,
    pub hub: Arc<EventHub>,
    pub host: HostFacts,
    pub daemons: Option<Arc<LibvirtDaemons>>,
    pub poller: Option<Sender<PollerControl>>,
    pub exit: Sender<ExitRequest>,
    pub fatal: FatalSender,
}

pub struct ManagerInputs {
    pub requests: Receiver<ManagerRequest>,
    pub hypervisor_events: Receiver<HypervisorEvent>,
    pub agent_updates: Receiver<AgentUpdate>,
    pub signals: Receiver<i32>,
    pub control: Receiver<Control>,
}

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

/// Why the domain is expected to stop, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopIntent {
    /// `shutdown` asked the guest to power off.
    Shutdown,
    /// `kill` forced it off.
    Kill,
    /// A signal asked the guest to power off.
    Signal,
    /// The grace period ran out; the launcher forced it off.
    GraceExpired,
}

/// The launcher's view of its domain, kept current from events and job
/// results so that queries never wait for libvirt.
#[derive(Debug, Clone)]
struct DomainView {
    status: DomainStatus,
    defined: bool,
    /// The domain has run under this launcher; its stop ends the launcher.
    started_once: bool,
    /// Paused by `pause` (or started paused): `sync` must not resume it.
    paused_by_user: bool,
    agent_connected: bool,
}

pub struct DomainManager {
    config: Arc<Config>,
    hypervisor: Arc<dyn Hypervisor>,
    hub: Arc<EventHub>,
    host: HostFacts,
    /// The launcher's own libvirt daemons (--spawn-libvirt).
    daemons: Option<Arc<LibvirtDaemons>>,
    jobs: JobRunner,
    timers: Timers,
    exit: Sender<ExitRequest>,
    phase: Phase,
    domain: DomainView,
    stop_intent: Option<StopIntent>,
    /// When the graceful stop began and when its grace period ends.
    grace: Option<(Instant, Instant)>,
    reconnecting: bool,
    started: Instant,
    /// What the guest agent last reported.
    agent: GuestAgentCache,
    /// The agent poller, and whether it was last told to poll.
    poller: Option<Sender<PollerControl>>,
    poller_active: bool,
    /// The exit decision, held while the domain's definition is removed.
    pending_exit: Option<ExitRequest>,
    exit_cleanup_started: bool,
    /// libvirt's statistics of the last completed job (a migration's
    /// downtime and duration).
    last_completed_job: Option<Vec<Stat>>,
    /// How long a signalled guest has to power off: --grace-period-seconds,
    /// else the synced VMI's terminationGracePeriodSeconds.
    grace_period: Duration,
    /// The migration this launcher takes part in, if any.
    migration: Option<MigrationRecord>,
    migration_cancel: Option<CancelHandle>,
    /// The source worker's reports come in here.
    migration_tx: Sender<MigrationUpdate>,
    migration_rx: Receiver<MigrationUpdate>,
    last_progress_event: Option<Instant>,
    /// Files a target made for the incoming domain, until it arrives.
    prepared_target: Option<PreparedDisks>,
    fatal: FatalSender,
}

/// How long a command's libvirt call may take before the client is told
/// `Timeout` (sync uses --qemu-timeout instead).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for libvirt's Stopped event after a job saw the
/// domain stop.
const FINAL_EVENT_WAIT: Duration = Duration::from_secs(2);
/// KubeVirt's default terminationGracePeriodSeconds.
const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);
/// How long replies still due and removing the domain's definition may
/// delay the exit.
const EXIT_CLEANUP_WAIT: Duration = Duration::from_secs(5);
/// How often to retry connecting to libvirt after losing it.
const RECONNECT_INTERVAL: Duration = Duration::from_secs(1);

impl DomainManager {
    pub fn new(parts: ManagerParts) -> DomainManager {
        let ManagerParts {
            config,
            hypervisor,
            hub,
            host,
            daemons,
            poller,
            exit,
            fatal,
        } = parts;
        let grace_period = config.grace_period.unwrap_or(DEFAULT_GRACE_PERIOD);
        let (migration_tx, migration_rx) = crossbeam_channel::unbounded();
        DomainManager {
            jobs: JobRunner::new(hypervisor.clone(), fatal.clone()),
            config,
            hypervisor,
            hub,
            host,
            daemons,
            timers: Timers::default(),
            exit,
            phase: Phase::Initializing,
            domain: DomainView {
                status: DomainStatus::NON_EXISTENT,
                defined: false,
                started_once: false,
                paused_by_user: false,
                agent_connected: false,
            },
            stop_intent: None,
            grace: None,
            reconnecting: false,
            started: Instant::now(),
            agent: GuestAgentCache::default(),
            poller,
            poller_active: false,
            pending_exit: None,
            exit_cleanup_started: false,
            last_completed_job: None,
            grace_period,
            migration: None,
            migration_cancel: None,
            migration_tx,
            migration_rx,
            last_progress_event: None,
            prepared_target: None,
            fatal,
        }
    }

    /// Runs until every input is closed. Decisions to exit go to the main
    /// thread, which ends the process; until then the manager keeps
    /// answering.
    pub fn run(mut self, inputs: ManagerInputs) {
        // Adopt a domain that already exists (a restarted launcher).
        self.refresh_status();
        let completions = self.jobs.completions().clone();
        let migration_updates = self.migration_rx.clone();
        let mut requests_open = true;
        let mut signals_open = true;
        let mut control_open = true;
        let never_requests = crossbeam_channel::never();
        let never_signals = crossbeam_channel::never();
        let never_control = crossbeam_channel::never();
        loop {
            let wait = self.next_wakeup().saturating_duration_since(Instant::now());
            let requests = if requests_open {
                &inputs.requests
            } else {
                &never_requests
            };
            let signals = if signals_open {
                &inputs.signals
            } else {
                &never_signals
            };
            let control = if control_open {
                &inputs.control
            } else {
                &never_control
            };
            select! {
                recv(requests) -> msg => match msg {
                    Ok(request) => self.handle_request(request),
                    Err(_) => requests_open = false,
                },
                recv(inputs.hypervisor_events) -> msg => match msg {
                    Ok(event) => self.handle_hypervisor_event(event),
                    Err(_) => return,
                },
                recv(migration_updates) -> msg => {
                    if let Ok(update) = msg {
                        self.handle_migration_update(update);
                        if self.pending_exit.is_some() {
                            self.start_exit_cleanup();
                            self.exit_when_settled();
                        }
                    }
                },
                recv(inputs.agent_updates) -> msg => {
                    if let Ok(update) = msg {
                        self.handle_agent_update(update);
                    }
                },
                recv(signals) -> msg => match msg {
                    Ok(signal) => self.handle_signal(signal),
                    Err(_) => signals_open = false,
                },
                recv(control) -> msg => match msg {
                    Ok(message) => self.handle_control(message),
                    Err(_) => control_open = false,
                },
                recv(completions) -> msg => {
                    if let Some(finished) = msg.ok().and_then(|done| self.jobs.finish(done)) {
                        self.handle_job_done(finished);
                    }
                },
                default(wait) => {},
            }
            self.fire_due_timers();
        }
    }

    fn next_wakeup(&self) -> Instant {
        let far = Instant::now() + Duration::from_secs(3600);
        [self.timers.next(), self.jobs.next_deadline()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(far)
    }

    fn fire_due_timers(&mut self) {
        let now = Instant::now();
        self.jobs.expire(now);
        for timer in self.timers.take_due(now) {
            match timer {
                Timer::QemuTimeout => self.on_qemu_timeout(),
                Timer::RepeatAcpi => self.on_repeat_acpi(),
                Timer::GraceDeadline => self.on_grace_deadline(),
                Timer::Reconnect => self.start_reconnect(),
                Timer::FinalEvent => self.on_final_event_overdue(),
                Timer::AutoThaw => self.on_auto_thaw(),
                Timer::ExitNow => self.exit_now(),
            }
        }
    }

    fn handle_control(&mut self, message: Control) {
        match message {
            Control::Ready { ack } => {
                let _ = ack.send(());
                if self.phase == Phase::Initializing {
                    self.phase = if self.domain.started_once {
                        Phase::Running
                    } else {
                        Phase::WaitingForDomain
                    };
                }
                if !self.domain.started_once {
                    self.timers
                        .arm_in(Timer::QemuTimeout, self.config.qemu_timeout);
                }
            }
            Control::SyncStandalone { vmi, reply } => self.start_sync(vmi, reply),
        }
    }

    fn on_qemu_timeout(&mut self) {
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

    /// Decides that the launcher is done. The decision goes to the main
    /// thread once clients still waiting for a reply have it, and once a
    /// stopped domain's definition is removed (its launcher is its owner;
    /// on a shared daemon a stale definition would otherwise outlive it),
    /// or after `EXIT_CLEANUP_WAIT` at most.
    fn finish(&mut self, code: ExitCode, reason: String) {
        if self.phase == Phase::Exiting {
            return;
        }
        self.phase = Phase::Exiting;
        self.timers = Timers::default();
        self.pending_exit = Some(ExitRequest { code, reason });
        self.timers.arm_in(Timer::ExitNow, EXIT_CLEANUP_WAIT);
        self.start_exit_cleanup();
        self.exit_when_settled();
    }

    /// Removes a stopped domain's definition before exiting, once no
    /// migration still needs it (its final statistics are read from it).
    fn start_exit_cleanup(&mut self) {
        if self.migration_running_as_source() || self.exit_cleanup_started {
            return;
        }
        self.exit_cleanup_started = true;
        let stopped_and_defined = self.domain.defined && !self.domain.status.state.is_active();
        if stopped_and_defined && self.hypervisor.is_connected() {
            let name = self.config.domain_name.clone();
            self.jobs.spawn(
                Operation::UndefineOnExit,
                None,
                EXIT_CLEANUP_WAIT,
                move |hv| {
                    JobOutput::reply(match hv.undefine(&name) {
                        Ok(()) => Ok(JobValue::Empty),
                        Err(e) if e.kind == crate::hypervisor::HypervisorErrorKind::NoDomain => {
                            Ok(JobValue::Empty)
                        }
                        Err(e) => Err(commands::hypervisor_error(&e)),
                    })
                },
            );
        }
    }

    /// Sends the held exit decision once nothing it would cut short is
    /// still running.
    fn exit_when_settled(&mut self) {
        // A migration's outcome (MIGRATION_COMPLETED) follows the
        // source domain's Stopped/Migrated event; wait for it too.
        let settled = !self.jobs.has_waiting_clients()
            && !self.jobs.is_running(Operation::UndefineOnExit)
            && !self.migration_running_as_source();
        if settled {
            self.exit_now();
        }
    }

    /// Sends the held exit decision.
    fn exit_now(&mut self) {
        if let Some(request) = self.pending_exit.take() {
            let _ = self.exit.send(request);
        }
    }

    fn publish(&self, kind: EventKind, data: Value) {
        self.hub.publish(Event::new(kind, data));
    }

    fn handle_hypervisor_event(&mut self, event: HypervisorEvent) {
        let domain = self.config.domain_name.clone();
        match event {
            HypervisorEvent::Lifecycle(lifecycle) => self.on_lifecycle(lifecycle),
            HypervisorEvent::AgentLifecycle(AgentLifecycle { connected, reason }) => {
                self.domain.agent_connected = connected;
                self.update_poller();
                let kind = if connected {
                    EventKind::AgentConnected
                } else {
                    EventKind::AgentDisconnected
                };
                self.publish(
                    kind,
                    json!({ "domain": domain, "reason": reason.describe() }),
                );
            }
            HypervisorEvent::Reboot => {
                self.publish(EventKind::DomainReboot, json!({ "domain": domain }))
            }
            HypervisorEvent::DeviceRemoved { alias } => self.publish(
                EventKind::DeviceRemoved,
                json!({ "domain": domain, "alias": alias }),
            ),
            HypervisorEvent::JobCompleted { stats } => {
                self.last_completed_job = Some(stats.clone());
                let stats: serde_json::Map<String, Value> = stats.into_iter().collect();
                self.publish(
                    EventKind::JobCompleted,
                    json!({ "domain": domain, "stats": stats }),
                )
            }
            HypervisorEvent::ConnectionClosed { reason } => self.on_connection_lost(reason),
        }
    }

    fn on_lifecycle(&mut self, lifecycle: LifecycleEvent) {
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
                if let Some(status) = other.status() {
                    self.domain.status = status;
                }
            }
        }
        if let LifecycleEvent::Resumed(_) = lifecycle {
            self.domain.paused_by_user = false;
        }
        self.publish(
            EventKind::DomainLifecycle,
            json!({
                "domain": self.config.domain_name,
                "event": lifecycle.name(),
                "detail": lifecycle.detail(),
                "state": self.domain.status.state.as_str(),
                "reason": self.domain.status.reason.as_str(),
            }),
        );
        if self.on_target_lifecycle(lifecycle) {
            return;
        }
        self.after_status_change(Some(lifecycle));
    }

    /// Reacts to the domain starting or stopping, whoever noticed it.
    fn after_status_change(&mut self, lifecycle: Option<LifecycleEvent>) {
        let status = self.domain.status;
        if !status.state.is_active() {
            self.domain.agent_connected = false;
        }
        self.update_poller();
        // A migration target's incoming domain is not its own until it runs.
        if status.state.is_active()
            && !self.domain.started_once
            && self.phase != Phase::MigrationTarget
        {
            self.domain.started_once = true;
            self.timers.cancel(Timer::QemuTimeout);
            if self.phase == Phase::WaitingForDomain {
                self.phase = Phase::Running;
            }
        }
        if !self.domain.started_once {
            return;
        }
        match lifecycle {
            Some(LifecycleEvent::Stopped(_)) => {
                self.timers.cancel(Timer::FinalEvent);
                self.domain.agent_connected = false;
                let (code, reason) = self.stop_outcome(status.reason);
                self.finish(code, reason);
            }
            Some(_) => {}
            // A job saw the domain stopped. libvirt's Stopped event normally
            // follows within milliseconds and is the final event
            // subscribers must get, so give it a moment.
            None if !status.state.is_active() => {
                if self.timers.next_of(Timer::FinalEvent).is_none() {
                    self.timers.arm_in(Timer::FinalEvent, FINAL_EVENT_WAIT);
                }
            }
            None => self.timers.cancel(Timer::FinalEvent),
        }
    }

    fn on_final_event_overdue(&mut self) {
        if self.domain.status.state.is_active() {
            return;
        }
        log::warn!("manager: the domain stopped but libvirt sent no Stopped event");
        self.domain.agent_connected = false;
        let (code, reason) = self.stop_outcome(self.domain.status.reason);
        self.finish(code, reason);
    }

    /// The exit code for a domain that stopped with `reason`.
    fn stop_outcome(&self, reason: StateReason) -> (ExitCode, String) {
        let intent = self.stop_intent;
        match (reason, intent) {
            (StateReason::Migrated, _) => (ExitCode::Ok, "the domain migrated away".into()),
            (StateReason::Shutdown, _) => (ExitCode::Ok, "the guest powered off".into()),
            (StateReason::Destroyed, Some(StopIntent::Kill)) => {
                (ExitCode::Ok, "the domain was killed on request".into())
            }
            (StateReason::Destroyed, Some(StopIntent::GraceExpired)) => (
                ExitCode::GracePeriodExpired,
                format!(
                    "the guest did not power off within the {} s grace period and was forced off",
                    self.grace_period.as_secs()
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

    fn on_connection_lost(&mut self, reason: CloseReason) {
        if self.reconnecting || self.phase == Phase::Exiting {
            return;
        }
        let reason = reason.describe();
        log::warn!("manager: lost the libvirt connection ({reason}); reconnecting");
        self.hypervisor.connection_lost();
        self.reconnecting = true;
        self.publish(
            EventKind::LibvirtDisconnected,
            json!({ "uri": self.hypervisor.info().uri, "reason": reason }),
        );
        self.start_reconnect();
    }

    fn start_reconnect(&mut self) {
        if !self.reconnecting || self.jobs.is_running(Operation::Reconnect) {
            return;
        }
        self.jobs
            .spawn(Operation::Reconnect, None, COMMAND_TIMEOUT, |hv| {
                JobOutput::reply(
                    hv.reconnect()
                        .map(|()| JobValue::Empty)
                        .map_err(|e| commands::hypervisor_error(&e)),
                )
            });
    }

    fn refresh_status(&mut self) {
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::StatusRefresh,
            None,
            COMMAND_TIMEOUT,
            move |hv| match hv.domain_status(&name) {
                Ok(status) => JobOutput {
                    result: Ok(JobValue::Empty),
                    observed: Observation::Status(status),
                },
                Err(e) => JobOutput::reply(Err(commands::hypervisor_error(&e))),
            },
        );
    }

    fn handle_job_done(&mut self, finished: Finished) {
        let Finished {
            operation,
            output,
            reply,
            elapsed,
        } = finished;
        log::debug!(
            "manager: job {} finished in {:.3} ms",
            operation.name(),
            elapsed.as_secs_f64() * 1000.0
        );
        match operation {
            Operation::Reconnect => match &output.result {
                Ok(_) => {
                    self.reconnecting = false;
                    log::info!("manager: reconnected to libvirt");
                    self.publish(
                        EventKind::LibvirtReconnected,
                        json!({ "uri": self.hypervisor.info().uri }),
                    );
                    self.refresh_status();
                }
                Err(e) => {
                    log::debug!("manager: reconnect failed: {}", e.desc);
                    self.timers.arm_in(Timer::Reconnect, RECONNECT_INTERVAL);
                }
            },
            Operation::UndefineOnExit
            | Operation::AcpiShutdown
            | Operation::ForceOff
            | Operation::GuestTimeSync
            | Operation::AutoThaw
            | Operation::DestroyIncoming => {
                if let Err(e) = &output.result {
                    log::warn!("manager: {} failed: {e}", operation.name());
                }
            }
            Operation::Freeze => self.on_freeze_done(&output.result),
            Operation::Unpause if output.result.is_ok() => {
                let _ = self.start_guest_time_sync();
            }
            Operation::Sync => self.on_sync_done(&output.result),
            Operation::Pause if output.result.is_ok() => {
                self.domain.paused_by_user = true;
            }
            Operation::Pause
            | Operation::Unpause
            | Operation::Shutdown
            | Operation::Reboot
            | Operation::Reset
            | Operation::Kill
            | Operation::Delete
            | Operation::QueryDomain
            | Operation::QueryStats
            | Operation::GuestPing
            | Operation::GuestExec
            | Operation::Unfreeze
            | Operation::PrepareMigrationTarget
            | Operation::StatusRefresh => {}
        }
        match output.observed {
            Observation::Status(status) => self.apply_observed_status(status),
            Observation::FsFreeze(state) => self.apply_agent_data(AgentData::FsFreeze(state)),
            Observation::PreparedDisks(prepared) => self.on_target_prepared(prepared),
            Observation::Nothing => {}
        }
        if let Some(reply) = reply {
            reply.send(output.result.map(JobValue::into_reply));
        }
        if self.pending_exit.is_some() {
            self.exit_when_settled();
        }
        if !self.hypervisor.is_connected() && !self.reconnecting {
            self.on_connection_lost(CloseReason::CallFailed);
        }
    }

    /// Applies a state libvirt reported in answer to a call.
    fn apply_observed_status(&mut self, status: Option<DomainStatus>) {
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

    fn handle_request(&mut self, request: ManagerRequest) {
        let ManagerRequest { command, reply } = request;
        match command {
            ManagerCommand::Domain(command) => self.run_domain_command(command, reply),
            ManagerCommand::Guest(command) => self.run_guest_command(command, reply),
            ManagerCommand::Migration(command) => self.run_migration_command(command, reply),
        }
    }
}

fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}
