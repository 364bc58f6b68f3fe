//! The domain-manager thread: the only owner of the domain's state.
//!
//! Everything arrives as a message: client requests (each with a
//! `ReplyTo` for its one reply), libvirt events, agent polls, signals,
//! migration reports, job completions and timers. The manager never
//! blocks on libvirt; calls run as jobs on worker threads (see `jobs`) and
//! come back as completions.
//!
//! Its state is grouped by purpose, each group in the module that reacts
//! to it: the domain as the launcher sees it (`lifecycle`), the connection
//! to libvirt (`connection`), the guest agent (`guest`), the graceful stop
//! (`shutdown`), the migration (`migration`), live changes (`hotplug`),
//! the `query-domain` cache (`domain_cache`) and the exit (`exit`). The
//! agent, the graceful stop, the migration, hotplug and the cache keep
//! their fields private and change through methods named for what
//! happened; the launcher's phase changes only in `phase`. What the
//! modules share (reads, samples, job results) is in `reply`, a leaf.
//! Commands are in `domain` (the domain commands), `sync`, `guest` and
//! `migration`.

mod backup;
mod connection;
mod devices;
mod diagnostics;
mod domain;
mod domain_cache;
mod errors;
mod exit;
mod guest;
mod hotplug;
pub mod inbox;
mod jobs;
mod lifecycle;
mod link_refresh;
mod memory_dump;
mod migration;
mod phase;
mod reply;
mod shutdown;
mod stats;
mod sync;
mod timers;
mod upgrade;
mod vm_stats;
mod workers;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::Value;

use crate::agent::PollerControl;
use crate::command::{ManagerCommand, ManagerRequest, ReplyTo};
use crate::config::Config;
use crate::daemons::LibvirtDaemons;
use crate::events::{Event, EventHub, EventKind};
use crate::hypervisor::{Hypervisor, HypervisorEvent};
use crate::threads::FatalSender;
use connection::Link;
pub use exit::ExitRequest;
use exit::ExitState;
use guest::AgentState;
pub use hotplug::{VolumePhase, VolumeStatus};
pub use inbox::{Inbox, ManagerInput};
use jobs::{Finished, JobRunner, Observation, Operation};
use lifecycle::DomainView;
use migration::MigrationState;
use phase::LauncherPhase;
pub use phase::Phase;
use reply::JobValue;
use shutdown::GracefulStop;
pub use sync::HostFacts;
use timers::{Timer, Timers};
pub use upgrade::UpgradeRequest;

/// Messages from the main thread.
#[derive(Debug)]
pub enum Control {
    /// The launcher is about to announce readiness; the manager leaves
    /// Initializing and acknowledges, so the first client after the rename
    /// never sees the old phase.
    Ready { ack: Sender<()> },
    /// Standalone mode: sync this VMI; the outcome goes back on `reply`.
    SyncStandalone { vmi: Value, reply: ReplyTo },
    /// The hand-over to a new binary was given up; the launcher goes on.
    UpgradeAborted,
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
    /// Where `upgrade` goes once the manager agreed to it.
    pub upgrade: Sender<UpgradeRequest>,
    pub fatal: FatalSender,
    /// The VMI's pod networking, removed by the main thread on exit.
    pub network: crate::network::NetworkSlot,
    /// The filesystems' virtiofsd, stopped by the main thread on exit.
    pub virtiofs: crate::daemons::virtiofs::VirtiofsSlot,
    /// The manager's own inbox: its workers report there.
    pub inbox: Inbox,
    /// What the launcher this one replaced (`upgrade`) handed over.
    pub resumed: Option<crate::upgrade::HandoverState>,
}

/// How long the manager waits for things. Fixed in the launcher; the
/// manager's unit tests shorten them.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// How long a command's libvirt call may take before the client is
    /// told `Timeout` (sync uses --qemu-timeout instead).
    command: Duration,
    /// How long to wait for libvirt's Stopped event after a job saw the
    /// domain stop.
    final_event: Duration,
    /// How long replies still due and removing the domain's definition
    /// may delay the exit.
    exit_cleanup: Duration,
    /// How often to retry connecting to libvirt after losing it.
    reconnect: Duration,
    /// How often the graceful stop presses the ACPI power button again (a
    /// guest still booting misses the first).
    acpi_repeat: Duration,
    /// How soon a failed forced stop is tried again.
    destroy_retry: Duration,
    /// How long sync waits for the guest to release a device it detaches
    /// before it answers Timeout (the device stays until the guest lets
    /// it go).
    detach: Duration,
    /// The statistics cache (`stats`): how often it is refreshed while
    /// clients ask, how old a sample a plain `query-stats` accepts, and
    /// how long after the last `query-stats` the refresh stops.
    stats_refresh: Duration,
    stats_max_age: Duration,
    stats_idle_stop: Duration,
    /// How old a cached read a plain `query-domain` accepts
    /// (`domain_cache`).
    domain_max_age: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            command: Duration::from_secs(30),
            final_event: Duration::from_secs(2),
            exit_cleanup: Duration::from_secs(5),
            reconnect: Duration::from_secs(1),
            acpi_repeat: Duration::from_secs(5),
            destroy_retry: Duration::from_secs(1),
            detach: Duration::from_secs(30),
            stats_refresh: stats::REFRESH,
            stats_max_age: stats::DEFAULT_MAX_AGE,
            stats_idle_stop: stats::IDLE_STOP,
            domain_max_age: domain_cache::DEFAULT_MAX_AGE,
        }
    }
}

pub struct DomainManager {
    config: Arc<Config>,
    hypervisor: Arc<dyn Hypervisor>,
    hub: Arc<EventHub>,
    host: HostFacts,
    /// The launcher's own libvirt daemons (--spawn-libvirt).
    daemons: Option<Arc<LibvirtDaemons>>,
    timing: Timing,
    jobs: JobRunner,
    timers: Timers,
    phase: LauncherPhase,
    started: Instant,
    domain: DomainView,
    link: Link,
    agent: AgentState,
    stop: GracefulStop,
    migration: MigrationState,
    hotplug: hotplug::HotplugState,
    /// The live domain as `query-domain` last read it.
    domain_cache: domain_cache::DomainCache,
    /// The domain's statistics as `query-stats` last sampled them.
    stats: stats::StatsCache,
    /// The hypervisor's version, read by a job after the start.
    hypervisor_version: diagnostics::HypervisorVersion,
    /// What `query-vm-stats` last read of the guest agent and the dirty
    /// rate.
    vm_stats: vm_stats::VmStatsCache,
    /// The last memory dump (`memory-dump`).
    memory_dump: memory_dump::MemoryDumpState,
    backup: backup::BackupState,
    exit: ExitState,
    upgrade: Sender<UpgradeRequest>,
    /// A hand-over to a new binary is under way.
    upgrading: bool,
    /// What the launcher this one replaced handed over, until `run` reads
    /// it.
    resumed: Option<crate::upgrade::HandoverState>,
    /// The VMI's pod networking (bridges, taps, DHCP servers).
    network: crate::network::NetworkSlot,
    /// The filesystems' virtiofsd.
    virtiofs: crate::daemons::virtiofs::VirtiofsSlot,
    /// The downward metrics' threads, started when a domain that uses
    /// them runs.
    metrics: crate::metrics::Threads,
    fatal: FatalSender,
}

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
            upgrade,
            fatal,
            network,
            virtiofs,
            inbox,
            resumed,
        } = parts;
        let memory_dump = memory_dump::MemoryDumpState::load(&config.dirs.private);
        let backup = backup::BackupState::load(&config.dirs.private);
        let metrics = crate::metrics::Threads::new(
            &config.dirs.private,
            crate::metrics::Collector::new(inbox.requests()),
            fatal.clone(),
        );
        DomainManager {
            jobs: JobRunner::new(hypervisor.clone(), fatal.clone(), inbox.job_completions()),
            stop: GracefulStop::new(config.grace_period),
            config,
            hypervisor,
            hub,
            host,
            daemons,
            timing: Timing::default(),
            timers: Timers::default(),
            phase: LauncherPhase::default(),
            started: Instant::now(),
            domain: DomainView::default(),
            link: Link::default(),
            agent: AgentState::new(poller),
            migration: MigrationState::new(inbox.migration_updates()),
            hotplug: hotplug::HotplugState::new(inbox.hotplug_progress()),
            domain_cache: domain_cache::DomainCache::default(),
            stats: stats::StatsCache::default(),
            hypervisor_version: diagnostics::HypervisorVersion::default(),
            memory_dump,
            backup,
            vm_stats: vm_stats::VmStatsCache::default(),
            exit: ExitState::new(exit),
            upgrade,
            upgrading: false,
            resumed,
            network,
            virtiofs,
            metrics,
            fatal,
        }
    }

    /// Runs until its inbox sends `Stop` or closes. Decisions to exit go to
    /// the main thread, which ends the process; until then the manager
    /// keeps answering.
    pub fn run(mut self, inbox: Receiver<ManagerInput>) {
        // Adopt a domain that already exists (a restarted launcher).
        self.refresh_status();
        self.read_hypervisor_version();
        if let Some(resumed) = self.resumed.take() {
            self.resume_after_upgrade(resumed);
        }
        loop {
            let wait = self.next_wakeup().saturating_duration_since(Instant::now());
            match inbox.recv_timeout(wait) {
                Ok(ManagerInput::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
                Ok(ManagerInput::Request(request)) => self.handle_request(request),
                Ok(ManagerInput::Hypervisor(event)) => self.handle_hypervisor_event(event),
                Ok(ManagerInput::Agent(update)) => self.handle_agent_update(update),
                Ok(ManagerInput::Signal(signal)) => self.handle_signal(signal),
                Ok(ManagerInput::Control(message)) => self.handle_control(message),
                Ok(ManagerInput::JobDone(done)) => {
                    if let Some(finished) = self.jobs.finish(*done) {
                        self.handle_job_done(finished);
                    }
                }
                Ok(ManagerInput::Migration(update)) => {
                    // A migrating domain changes under the caches.
                    self.domain_changed();
                    self.handle_migration_update(update);
                }
                Ok(ManagerInput::Hotplug(progress)) => self.on_hotplug_progress(progress),
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
                Timer::StatsRefresh => self.on_stats_refresh_due(),
                Timer::MemoryDumpProgress => self.on_memory_dump_progress_due(),
                Timer::BackupProgress => self.on_backup_progress_due(),
            }
        }
    }

    fn handle_control(&mut self, message: Control) {
        match message {
            Control::Ready { ack } => {
                let _ = ack.send(());
                self.phase.ready(self.domain.started_once);
                if !self.domain.started_once {
                    self.timers
                        .arm_in(Timer::QemuTimeout, self.config.qemu_timeout);
                }
            }
            Control::SyncStandalone { vmi, reply } => self.start_sync(vmi, None, reply),
            Control::UpgradeAborted => self.upgrade_aborted(),
        }
    }

    fn handle_request(&mut self, request: ManagerRequest) {
        let ManagerRequest { command, reply } = request;
        if let Some(refusal) = self.refused_while_upgrading(&command) {
            return reply.send(Err(refusal));
        }
        match command {
            ManagerCommand::Domain(command) => self.run_domain_command(command, reply),
            ManagerCommand::Guest(command) => self.run_guest_command(command, reply),
            ManagerCommand::Migration(command) => self.run_migration_command(command, reply),
        }
    }

    fn handle_hypervisor_event(&mut self, event: HypervisorEvent) {
        // Every event is news about the domain (or the connection to it).
        self.domain_changed();
        match event {
            HypervisorEvent::Lifecycle(lifecycle) => self.on_lifecycle(lifecycle),
            HypervisorEvent::AgentLifecycle(agent) => self.on_agent_lifecycle(agent),
            HypervisorEvent::Reboot => self.publish(
                EventKind::DomainReboot,
                DomainOnly {
                    domain: &self.config.domain_name,
                },
            ),
            HypervisorEvent::DeviceAdded { alias } => self.on_device_added(alias),
            HypervisorEvent::DeviceRemoved { alias } => self.on_device_removed(alias),
            HypervisorEvent::JobCompleted { stats } => {
                self.on_backup_job_completed(&stats);
                self.on_libvirt_job_completed(stats)
            }
            HypervisorEvent::ConnectionClosed { connection, reason } => {
                self.on_connection_lost(connection, reason)
            }
        }
    }

    fn handle_job_done(&mut self, finished: Finished) {
        let Finished {
            operation,
            mut output,
            reply,
            elapsed,
            overtaken,
        } = finished;
        log::debug!(
            "manager: job {} finished in {:.3} ms",
            operation.name(),
            elapsed.as_secs_f64() * 1000.0
        );
        if !operation.is_read_only() {
            self.domain_changed();
        }
        match operation {
            Operation::Reconnect => self.on_reconnect_done(&output.result),
            Operation::UndefineOnExit
            | Operation::AcpiShutdown
            | Operation::ForceOff
            | Operation::GuestTimeSync
            | Operation::AutoThaw
            | Operation::AdoptGuestNics
            | Operation::DestroyIncoming => {
                if let Err(e) = &output.result {
                    log::warn!("manager: {} failed: {e}", operation.name());
                }
            }
            Operation::Freeze => self.on_freeze_done(&output.result),
            Operation::Unpause if output.result.is_ok() => {
                let _ = self.start_guest_time_sync();
            }
            Operation::Delete if output.result.is_ok() => {
                // Undefined now, even before libvirt's Undefined event
                // arrives: a second delete must not reach libvirt.
                self.domain.defined = false;
                self.exit.awaiting_delete = false;
            }
            Operation::Sync => self.on_sync_finished(&output.result),
            Operation::QueryDomain => {
                if let Ok(JobValue::Described(read)) = output.result {
                    output.result = Ok(JobValue::Reply(self.on_domain_read(*read).into()));
                }
            }
            Operation::StatsRefresh => self.after_stats_refresh(),
            Operation::ReadHypervisorVersion => {
                if let Err(e) = &output.result {
                    self.on_hypervisor_version_failed(e);
                }
            }
            Operation::QueryVmStats => {
                if let Ok(JobValue::VmStats(read)) = output.result {
                    output.result = Ok(JobValue::Reply(self.vm_stats_reply(*read).into()));
                }
            }
            Operation::MemoryDump => self.on_memory_dump_finished(&output.result),
            Operation::Backup => self.on_backup_begun(&mut output.result),
            Operation::BackupProgress | Operation::BackupEnded => {
                if let Err(e) = &output.result {
                    log::debug!("manager: {} failed: {e}", operation.name());
                }
            }
            Operation::MemoryDumpProgress => {
                if let Err(e) = &output.result {
                    log::debug!("manager: reading the memory dump's progress failed: {e}");
                }
            }
            Operation::Pause
            | Operation::Unpause
            | Operation::Shutdown
            | Operation::Reboot
            | Operation::Reset
            | Operation::Kill
            | Operation::Delete
            | Operation::QueryStats
            | Operation::GuestPing
            | Operation::GuestExec
            | Operation::Unfreeze
            | Operation::PrepareMigrationTarget
            | Operation::QueryQemuVersion
            | Operation::QueryDirtyRate
            | Operation::Screenshot
            | Operation::BackupAbort
            | Operation::Checkpoint
            | Operation::LinkRefresh
            | Operation::StatusRefresh => {}
        }
        match output.observed {
            // What the job read is older than a lifecycle event that
            // arrived meanwhile: the events (which follow every change)
            // are the newer news.
            Observation::Status(_) if overtaken => log::debug!(
                "manager: ignoring the state {} read; an event arrived meanwhile",
                operation.name()
            ),
            Observation::Status(status) => self.apply_observed_status(status),
            Observation::FsFreeze(state) => {
                self.apply_agent_data(crate::agent::AgentData::FsFreeze(state))
            }
            Observation::PreparedDisks(prepared, uid) => self.on_target_prepared(prepared, uid),
            Observation::Connected(connection) => self.on_reconnected(connection),
            Observation::HypervisorVersion(version) => self.on_hypervisor_version(version),
            Observation::Refreshed { status, agent } => self.on_refreshed(status, agent, overtaken),
            Observation::StatsSample { sample, generation } => {
                self.on_stats_sampled(sample, generation)
            }
            Observation::JobStats(stats) => self.on_memory_dump_progress(&stats),
            Observation::BackupJobStats(stats) => self.on_backup_progress(&stats),
            Observation::BackupEnded(stats) => self.on_backup_ended(&stats),
            Observation::Nothing => {}
        }
        if let Some(reply) = reply {
            reply.send(output.result.map(JobValue::into_reply));
        }
        self.start_exit_cleanup();
        self.exit_when_settled();
    }

    /// Tells subscribers: `data` is the event's typed payload, encoded
    /// once for all of them.
    fn publish(&self, kind: EventKind, data: impl serde::Serialize) {
        self.hub.publish(Event::new(kind, &data));
    }
}

/// The data of events that name only the domain.
#[derive(Debug, serde::Serialize)]
struct DomainOnly<'a> {
    domain: &'a str,
}

fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}
