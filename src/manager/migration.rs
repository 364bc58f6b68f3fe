//! Migration commands and the manager's side of a migration: what the
//! target prepares and how it takes over the domain, and how the source
//! starts, watches and cancels the worker that migrates.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};

use super::errors::hypervisor_error;
use super::guest::TimeSync;
use super::jobs::{JobOutput, Observation, Operation};
use super::reply::JobValue;
use super::timers::Timer;
use super::{DomainManager, Phase};
use crate::command::{MigrationCommand, ReplyTo};
use crate::disks;
use crate::events::EventKind;
use crate::exit::ExitCode;
use crate::hypervisor::{DomainState, DriverKind, LifecycleEvent, Stat};
use crate::migration::worker::CancelHandle;
use crate::migration::{
    AbortStatus, LauncherPaths, MigrationOptions, MigrationPhase, MigrationProgress,
    MigrationRecord, MigrationStatus, MigrationUpdate, Role, StackVersions, TargetAddress, worker,
};
use crate::protocol::{CommandError, CommandResult, ErrorClass};
use crate::replies;
use crate::sink::Sink;

/// The target's sockets for the memory and the disk streams, in its
/// `<private>/<uid>/`.
const MIGRATION_SOCKETS: [&str; 2] = ["migration.sock", "migration-disks.sock"];
/// MIGRATION_PROGRESS is sent at most this often.
const PROGRESS_EVENT_EVERY: Duration = Duration::from_secs(1);

/// MIGRATION_STARTED's data (and the target's MIGRATION_COMPLETED).
#[derive(Debug, Serialize)]
struct MigrationEvent<'a> {
    domain: &'a str,
    role: Role,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_uri: Option<&'a str>,
}

/// MIGRATION_PROGRESS's data: the source's figures.
#[derive(Debug, Serialize)]
struct ProgressEvent<'a> {
    data_processed: &'a Value,
    data_remaining: &'a Value,
    data_total: &'a Value,
    disk_processed: &'a Value,
    disk_remaining: &'a Value,
    domain: &'a str,
    iteration: &'a Value,
    memory_bps: &'a Value,
    memory_dirty_rate: &'a Value,
    mode: &'static str,
    role: Role,
    time_elapsed_ms: &'a Value,
}

impl<'a> ProgressEvent<'a> {
    fn new(domain: &'a str, p: &'a MigrationProgress) -> ProgressEvent<'a> {
        ProgressEvent {
            data_processed: &p.data_processed,
            data_remaining: &p.data_remaining,
            data_total: &p.data_total,
            disk_processed: &p.disk_processed,
            disk_remaining: &p.disk_remaining,
            domain,
            iteration: &p.iteration,
            memory_bps: &p.memory_bps,
            memory_dirty_rate: &p.memory_dirty_rate,
            mode: p.mode,
            role: Role::Source,
            time_elapsed_ms: &p.time_elapsed_ms,
        }
    }
}

/// MIGRATION_PROGRESS's data when the source switched to post-copy.
#[derive(Debug, Serialize)]
struct PostCopyEvent<'a> {
    domain: &'a str,
    mode: &'static str,
    reason: &'a str,
    role: Role,
}

/// The source's MIGRATION_COMPLETED: libvirt's final figures.
#[derive(Debug, Serialize)]
struct SourceCompleted<'a> {
    data_total: Option<&'a Value>,
    domain: &'a str,
    downtime_ms: Option<&'a Value>,
    mode: &'static str,
    role: Role,
    stats: &'a Map<String, Value>,
    time_elapsed_ms: Option<&'a Value>,
}

/// The source's MIGRATION_FAILED.
#[derive(Debug, Serialize)]
struct SourceFailed<'a> {
    cancelled: bool,
    domain: &'a str,
    reason: &'a str,
    role: Role,
}

/// The target's MIGRATION_FAILED.
#[derive(Debug, Serialize)]
struct TargetFailed<'a> {
    domain: &'a str,
    reason: &'a str,
    role: Role,
}

/// JOB_COMPLETED's data: libvirt's job statistics by name.
#[derive(Debug, Serialize)]
struct JobCompleted<'a> {
    domain: &'a str,
    stats: &'a Map<String, Value>,
}

/// The migration this launcher takes part in.
pub(super) struct MigrationState {
    /// The migration, once there is one (kept after it ends, for
    /// query-migration).
    record: Option<MigrationRecord>,
    /// Cancels the source's running migration.
    cancel: Option<CancelHandle>,
    /// Where the source worker reports (the manager's inbox).
    updates: Sink<MigrationUpdate>,
    last_progress_event: Option<Instant>,
    /// Files a target made for the incoming domain, until it arrives.
    prepared_target: Option<disks::PreparedDisks>,
    /// libvirt's statistics of the last completed job (a migration's
    /// downtime and duration).
    last_completed_job: Option<Vec<Stat>>,
    /// KubeVirt mode: the pre-migration hook socket a target serves
    /// (crate::migration::hook).
    hook: Option<crate::migration::hook::HookServer>,
    /// The source's target runs an older libvirt or QEMU (why, in words):
    /// added to the reason when the migration fails.
    older_target: Option<String>,
}

/// This launcher's libvirt daemon and hypervisor, as a target names them.
fn stack_versions(info: &crate::hypervisor::HypervisorInfo, hypervisor: String) -> StackVersions {
    StackVersions {
        libvirt: info.daemon_version.clone(),
        hypervisor,
    }
}

impl DomainManager {
    /// This launcher's stack for a comparison with a migration target's:
    /// the hypervisor's version is read from the start on, and the daemon
    /// answered a define since (the domain runs); should the read have
    /// failed, only libvirt's versions compare.
    fn our_stack(&self) -> StackVersions {
        stack_versions(
            &self.hypervisor.info(),
            self.hypervisor_version
                .get()
                .unwrap_or("(a hypervisor whose version was not read)")
                .to_string(),
        )
    }
}

impl MigrationState {
    /// The last migration as the launcher before an upgrade recorded it,
    /// unless this one has a record of its own already.
    pub(super) fn adopt_handed_over(&mut self, record: MigrationRecord) {
        if self.record.is_none() {
            log::info!(
                "manager: the last migration ({}) as the previous launcher recorded it",
                record.phase.as_str()
            );
            self.record = Some(record);
        }
    }

    pub(super) fn new(updates: Sink<MigrationUpdate>) -> MigrationState {
        MigrationState {
            record: None,
            cancel: None,
            updates,
            last_progress_event: None,
            prepared_target: None,
            last_completed_job: None,
            hook: None,
            older_target: None,
        }
    }

    /// `query-migration`'s and `query-status`' `migration`.
    pub(super) fn status(&self) -> Option<MigrationStatus> {
        self.record.as_ref().map(MigrationRecord::status)
    }

    /// Asks the source's running migration to stop (the guest keeps
    /// running here); nothing when none runs.
    pub(super) fn cancel_running(&self, reason: &str) {
        if let Some(cancel) = &self.cancel {
            cancel.cancel(reason);
        }
    }

    /// A target was prepared with `prepared`'s files: it waits for the
    /// incoming domain.
    fn target_prepared(&mut self, prepared: disks::PreparedDisks, migration_uid: Option<String>) {
        self.prepared_target = Some(prepared);
        let mut record = MigrationRecord::new(Role::Target, MigrationPhase::Prepared, None);
        record.migration_uid = migration_uid;
        self.record = Some(record);
    }

    /// The source's worker runs, cancelled through `cancel`.
    fn source_started(
        &mut self,
        cancel: CancelHandle,
        target_uri: String,
        migration_uid: Option<String>,
    ) {
        self.cancel = Some(cancel);
        let mut record =
            MigrationRecord::new(Role::Source, MigrationPhase::Running, Some(target_uri));
        record.migration_uid = migration_uid;
        self.record = Some(record);
        self.last_progress_event = None;
    }

    /// Whether a progress event is due (they are spaced out); if so, the
    /// next one counts from now.
    fn progress_event_due(&mut self) -> bool {
        let due = self
            .last_progress_event
            .is_none_or(|at| at.elapsed() >= PROGRESS_EVENT_EVERY);
        if due {
            self.last_progress_event = Some(Instant::now());
        }
        due
    }

    /// The source's worker ended (completed or failed): nothing is left to
    /// cancel.
    fn source_worker_ended(&mut self) {
        self.cancel = None;
    }

    /// The incoming domain runs here: what the target prepared is its own
    /// now, nothing to roll back.
    fn incoming_domain_kept(&mut self) {
        self.prepared_target = None;
    }

    /// The target gives up: what it prepared, to roll back.
    fn take_prepared_target(&mut self) -> Option<disks::PreparedDisks> {
        self.prepared_target.take()
    }
}

impl DomainManager {
    /// This launcher's directories, as a migration peer sees them.
    pub(super) fn launcher_paths(&self) -> LauncherPaths {
        LauncherPaths {
            private_dir: self.config.dirs.private.clone(),
            ephemeral_disk_dir: self.config.dirs.ephemeral.clone(),
            container_disk_dir: self.config.dirs.container_disks.clone(),
            hotplug_disk_dir: self.config.dirs.hotplug_disks.clone(),
            uid: self.config.uid.clone(),
            backend_storage_dir: self.config.backend_storage_dir.clone(),
        }
    }

    pub(super) fn migration_running_as_source(&self) -> bool {
        self.migration
            .record
            .as_ref()
            .is_some_and(|m| m.role == Role::Source && m.is_running())
    }

    pub(super) fn run_migration_command(&mut self, command: MigrationCommand, reply: ReplyTo) {
        match command {
            MigrationCommand::PrepareTarget { vmi } => self.prepare_migration_target(vmi, reply),
            MigrationCommand::Migrate(options) => reply.send(self.start_migration(*options)),
            MigrationCommand::Cancel => reply.send(self.cancel_migration()),
            MigrationCommand::Query => {
                let migration = self.migration.status();
                reply.send(Ok(replies::MigrationReply { migration }.into()))
            }
            MigrationCommand::Finalize { refresh_links } => {
                self.finalize_migration(refresh_links, reply)
            }
        }
    }

    /// `prepare-migration-target`. Validation first (the VMI), then what
    /// the driver cannot do, then the launcher's state.
    fn prepare_migration_target(&mut self, vmi: Value, reply: ReplyTo) {
        let plan = match self.plan_sync(&vmi, None) {
            Ok(plan) => plan,
            Err(e) => return reply.send(Err(e)),
        };
        let info = self.hypervisor.info();
        if info.driver == DriverKind::Test {
            return reply.send(Err(CommandError::new(
                ErrorClass::Unavailable,
                "prepare-migration-target: libvirt's test driver cannot migrate; use a QEMU daemon",
            )));
        }
        let refuse =
            |why: String| CommandError::invalid_state(format!("prepare-migration-target: {why}"));
        if self.migration.record.is_some() {
            return reply.send(Err(refuse(
                "this launcher is already part of a migration".into(),
            )));
        }
        if self.phase != Phase::WaitingForDomain
            || self.domain.defined
            || self.domain.status.state.is_active()
        {
            return reply.send(Err(refuse(format!(
                "this launcher already runs a domain (phase {}, domain {}); a target must be a fresh launcher",
                self.phase.as_str(),
                self.domain.status.state.as_str()
            ))));
        }
        if let Err(busy) = self.jobs.ensure_idle("prepare-migration-target") {
            return reply.send(Err(busy));
        }
        if self.config.kubevirt.mode
            && let Err(e) = self.serve_migration_hook(&plan)
        {
            return reply.send(Err(CommandError::new(
                ErrorClass::Unavailable,
                format!("prepare-migration-target: cannot serve the migration hook socket: {e}"),
            )));
        }
        self.stop.adopt_grace_period(plan.grace_period);
        let migration_uid = crate::migration::kubevirt_migration_uid(&vmi);
        // Unix sockets in this launcher's own directory, as KubeVirt's
        // migration proxy uses: no TCP ports for two daemons to race for.
        let uid_dir = self.config.dirs.private.join(&self.config.uid);
        // The hypervisor's version is read from the start on; should that
        // read not have answered yet, the job reads it (below).
        let stack = self
            .hypervisor_version
            .get()
            .map(|version| stack_versions(&info, version.to_string()));
        let ours = info.clone();
        let mut address = TargetAddress {
            libvirt_uri: info.uri,
            migration_uri: Some(format!(
                "unix://{}",
                uid_dir.join(MIGRATION_SOCKETS[0]).display()
            )),
            disks_uri: Some(format!(
                "unix://{}",
                uid_dir.join(MIGRATION_SOCKETS[1]).display()
            )),
            paths: Some(self.launcher_paths()),
            stack,
        };
        self.jobs.spawn(
            Operation::PrepareMigrationTarget,
            Some(reply),
            self.config.qemu_timeout,
            move |hv| {
                if address.stack.is_none() {
                    // Only adds to a failed migration's reason: left out
                    // when the daemon cannot tell.
                    address.stack = super::diagnostics::read_hypervisor(hv, ours.driver)
                        .map(|hypervisor| stack_versions(&ours, hypervisor))
                        .map_err(|e| {
                            log::warn!("prepare-migration-target: the address names no hypervisor version: {e}")
                        })
                        .ok();
                }
                // The incoming guest needs its taps (and DHCP server) here,
                // as KubeVirt prepares the target pod's network.
                let mut network = None;
                if let Some(job) = &plan.network {
                    match job.run() {
                        Ok(active) => network = Some(active),
                        Err(e) => {
                            return JobOutput::reply(Err(CommandError::new(
                                ErrorClass::Unavailable,
                                format!(
                                    "prepare-migration-target: cannot set up the pod network: {e}"
                                ),
                            )));
                        }
                    }
                }
                // The hook sidecars, as KubeVirt's target calls them;
                // the network set up for them is removed if they fail.
                let disk_plan = match plan.run_target_hooks(network.as_ref()) {
                    Ok(disk_plan) => plan.sized_as_the_sources(disk_plan),
                    Err(e) => return JobOutput::reply(Err(e)),
                };
                if let (Some(job), Some(active)) = (&plan.network, network) {
                    job.keep(active);
                }
                match disks::prepare(&disk_plan) {
                    Ok(prepared) => JobOutput {
                        result: Ok(JobValue::TargetPrepared { target: address }),
                        observed: Observation::PreparedDisks(prepared, migration_uid),
                    },
                    Err(e) => JobOutput::reply(Err(CommandError::new(
                        ErrorClass::InvalidArgument,
                        format!("prepare-migration-target: cannot prepare the VMI's disks: {e}"),
                    ))),
                }
            },
        );
    }

    /// KubeVirt's target-side pre-migration hook: from now until the
    /// incoming domain's XML has passed through it, the pod's `qemu` hook
    /// gets that XML fitted to the domain planned here (this pod's disk
    /// paths and CPUs). Started as KubeVirt's target starts it, before
    /// the pod is prepared; asked again, it takes the new plan.
    fn serve_migration_hook(&mut self, plan: &super::sync::SyncPlan) -> Result<(), String> {
        use crate::migration::hook::{HookServer, SOCKET_NAME, TargetFit};
        let fit = TargetFit::of(plan.domain(), plan.dedicated_cpus())?;
        if let Some(server) = self.migration.hook.as_ref().filter(|s| s.is_listening()) {
            server.update(fit);
            return Ok(());
        }
        let path = self.config.dirs.share.join(SOCKET_NAME);
        let server = HookServer::start(path.clone(), fit, &self.fatal)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        self.migration.hook = Some(server);
        Ok(())
    }

    /// The target is prepared: it now waits for the incoming domain.
    pub(super) fn on_target_prepared(
        &mut self,
        prepared: disks::PreparedDisks,
        migration_uid: Option<String>,
    ) {
        self.migration.target_prepared(prepared, migration_uid);
        self.phase.target_prepared();
        log::info!("manager: prepared as a migration target; waiting for the domain");
    }

    /// `migrate`. Validation first (the target's address), then what the
    /// driver cannot do, then the launcher's state: the migration starts
    /// only when it can.
    fn start_migration(&mut self, options: MigrationOptions) -> CommandResult {
        let info = self.hypervisor.info();
        let target_uri = options.target.libvirt_uri.clone();
        if target_uri == info.uri {
            return Err(CommandError::invalid_argument(format!(
                "migrate: {target_uri} is this launcher's own libvirt daemon; the target must be another launcher's"
            )));
        }
        check_target_socket(&target_uri)?;
        if info.driver == DriverKind::Test {
            return Err(CommandError::new(
                ErrorClass::Unavailable,
                "migrate: libvirt's test driver cannot migrate; use a QEMU daemon",
            ));
        }
        if let Some(m) = &self.migration.record {
            if m.is_running() {
                return Err(CommandError::invalid_state(
                    "migrate: a migration is already running; migrate-cancel it first",
                ));
            }
            if m.role == Role::Target && m.phase != MigrationPhase::Completed {
                return Err(CommandError::invalid_state(
                    "migrate: this launcher is a migration target",
                ));
            }
        }
        if self.phase != Phase::Running {
            return Err(CommandError::invalid_state(format!(
                "migrate: the launcher is {}, not Running",
                self.phase.as_str()
            )));
        }
        if self.domain.status.state != DomainState::Running {
            return Err(CommandError::invalid_state(format!(
                "migrate: the domain is {} ({}); only a running guest is migrated",
                self.domain.status.state.as_str(),
                self.domain.status.reason.as_str()
            )));
        }
        self.jobs.ensure_idle("migrate")?;
        let ours = self.our_stack();
        let older_target = options
            .target
            .stack
            .as_ref()
            .and_then(|theirs| StackVersions::older_target(&ours, theirs));
        if let Some(why) = &older_target {
            log::warn!("migrate: {why}; trying anyway");
        }
        let cancel = worker::spawn(
            self.hypervisor.clone(),
            self.config.domain_name.clone(),
            self.launcher_paths(),
            &options,
            self.migration.updates.clone(),
            &self.fatal,
        )
        .map_err(|e| CommandError::internal(format!("migrate: cannot start the worker: {e}")))?;
        self.migration.source_started(
            cancel,
            target_uri.clone(),
            options.kubevirt.map(|k| k.migration_uid),
        );
        self.migration.older_target = older_target;
        self.publish(
            EventKind::MigrationStarted,
            MigrationEvent {
                domain: &self.config.domain_name,
                role: Role::Source,
                target_uri: Some(&target_uri),
            },
        );
        Ok(replies::MigrationStarted {
            started: true,
            target_uri,
        }
        .into())
    }

    fn cancel_migration(&mut self) -> CommandResult {
        let Some(record) = self.migration.record.as_mut() else {
            return Err(CommandError::invalid_state(
                "migrate-cancel: there is no migration",
            ));
        };
        match (record.role, record.phase) {
            (Role::Source, MigrationPhase::Running) => {
                record.abort = Some(AbortStatus::Aborting);
                self.migration.cancel_running("cancelled by migrate-cancel");
                Ok(replies::Cancelling { cancelling: true }.into())
            }
            // Prepared, nothing arrived yet: clean up and leave.
            (Role::Target, MigrationPhase::Prepared) => {
                self.abort_target("cancelled on the target before the domain arrived".into());
                Ok(replies::Cancelling { cancelling: true }.into())
            }
            // The domain is arriving: libvirt cannot abort an incoming
            // migration, so destroy the incoming domain; its stop ends this
            // launcher and fails the source's migration.
            (Role::Target, MigrationPhase::Running) => {
                self.destroy_incoming();
                Ok(replies::Cancelling { cancelling: true }.into())
            }
            (_, phase) => Err(CommandError::invalid_state(format!(
                "migrate-cancel: the migration is already {}",
                serde_json::to_value(phase)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ))),
        }
    }

    fn finalize_migration(&mut self, refresh_links: Vec<String>, reply: ReplyTo) {
        let done = self
            .migration
            .record
            .as_ref()
            .is_some_and(|m| m.role == Role::Target && m.phase == MigrationPhase::Completed);
        if !done {
            return reply.send(Err(CommandError::invalid_state(
                "finalize-migration: only a target whose incoming migration completed can finalize",
            )));
        }
        // The guest's clock stood still during the switch-over.
        let guest_time_sync = match self.start_guest_time_sync() {
            TimeSync::Started => "started",
            TimeSync::AlreadyRunning => "already running",
            TimeSync::NoAgent => "skipped: no guest agent",
        };
        if refresh_links.is_empty() {
            return reply.send(Ok(replies::Finalized {
                finalized: true,
                guest_time_sync,
                links_refreshed: Vec::new(),
            }
            .into()));
        }
        // A binding whose guest must ask for a new DHCP lease on the new
        // node (KubeVirt's `LinkRefresh`): its link goes down and up, as
        // KubeVirt's target does before answering.
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::LinkRefresh,
            Some(reply),
            Duration::from_secs(30),
            move |hv| {
                let result = super::link_refresh::refresh(hv, &name, &refresh_links).map(
                    |links_refreshed| {
                        JobValue::Reply(
                            replies::Finalized {
                                finalized: true,
                                guest_time_sync,
                                links_refreshed,
                            }
                            .into(),
                        )
                    },
                );
                JobOutput::reply(result)
            },
        );
    }

    /// The source worker's reports.
    pub(super) fn handle_migration_update(&mut self, update: MigrationUpdate) {
        let domain = self.config.domain_name.clone();
        // Taken out while it changes, so events can be published meanwhile.
        let Some(mut record) = self.migration.record.take() else {
            return;
        };
        match update {
            MigrationUpdate::Progress(stats) => {
                let progress = MigrationProgress::from_stats(&stats, record.mode());
                // Samples before libvirt has figures (or while it cannot
                // read them) say nothing: the last real figures stand.
                let has_figures = progress.data_total.as_u64().is_some_and(|t| t > 0);
                if has_figures {
                    record.progress = Some(progress.clone());
                }
                if has_figures && self.migration.progress_event_due() {
                    self.publish(
                        EventKind::MigrationProgress,
                        ProgressEvent::new(&domain, &progress),
                    );
                }
            }
            MigrationUpdate::TargetStack(theirs) => {
                if self.migration.older_target.is_none() {
                    let ours = self.our_stack();
                    self.migration.older_target = StackVersions::older_target(&ours, &theirs);
                }
            }
            MigrationUpdate::SwitchedToPostCopy { reason } => {
                record.post_copy = true;
                self.publish(
                    EventKind::MigrationProgress,
                    PostCopyEvent {
                        domain: &domain,
                        mode: "post-copy",
                        reason: &reason,
                        role: Role::Source,
                    },
                );
            }
            MigrationUpdate::Completed { stats } => {
                // The worker reads them from the source domain; libvirt's
                // JOB_COMPLETED event carries the same figures.
                let stats = if stats.is_empty() {
                    self.migration
                        .last_completed_job
                        .clone()
                        .unwrap_or_default()
                } else {
                    stats
                };
                let stats: Map<String, Value> = stats.into_iter().collect();
                record.end(MigrationPhase::Completed);
                record.completed_stats = Some(stats.clone());
                self.migration.source_worker_ended();
                log::info!("manager: migration completed");
                self.publish(
                    EventKind::MigrationCompleted,
                    SourceCompleted {
                        data_total: stats.get("data_total"),
                        domain: &domain,
                        downtime_ms: stats.get("downtime"),
                        mode: record.mode(),
                        role: Role::Source,
                        stats: &stats,
                        time_elapsed_ms: stats.get("time_elapsed"),
                    },
                );
            }
            MigrationUpdate::Failed {
                mut reason,
                cancelled,
            } => {
                // A refusal from an older target's libvirt or QEMU (an
                // unknown CPU feature or machine type) says so.
                if let Some(why) = self.migration.older_target.take().filter(|_| !cancelled) {
                    reason = format!("{reason}; {why}");
                }
                record.end(if cancelled {
                    MigrationPhase::Cancelled
                } else {
                    MigrationPhase::Failed
                });
                record.failure = Some(reason.clone());
                if record.abort.is_some() {
                    record.abort = Some(if cancelled {
                        AbortStatus::Succeeded
                    } else {
                        AbortStatus::Failed
                    });
                }
                self.migration.source_worker_ended();
                log::warn!("manager: migration failed: {reason}; the guest keeps running here");
                self.publish(
                    EventKind::MigrationFailed,
                    SourceFailed {
                        cancelled,
                        domain: &domain,
                        reason: &reason,
                        role: Role::Source,
                    },
                );
            }
        }
        self.migration.record = Some(record);
        // An exit may have waited for the outcome (and for the source
        // domain's final statistics before removing its definition).
        self.start_exit_cleanup();
        self.exit_when_settled();
    }

    /// libvirt's JOB_COMPLETED: a migration's final figures.
    pub(super) fn on_libvirt_job_completed(&mut self, stats: Vec<Stat>) {
        self.migration.last_completed_job = Some(stats.clone());
        let stats: Map<String, Value> = stats.into_iter().collect();
        self.publish(
            EventKind::JobCompleted,
            JobCompleted {
                domain: &self.config.domain_name,
                stats: &stats,
            },
        );
    }

    /// The target's view of the incoming domain. True when the event
    /// belongs to the migration and was handled.
    pub(super) fn on_target_lifecycle(&mut self, lifecycle: LifecycleEvent) -> bool {
        if self.phase != Phase::MigrationTarget {
            return false;
        }
        let domain = self.config.domain_name.clone();
        let status = self.domain.status;
        if let LifecycleEvent::Stopped(detail) = lifecycle {
            self.abort_target(format!(
                "the incoming domain stopped ({}) before the migration completed",
                detail.as_str()
            ));
            return true;
        }
        let Some(record) = self.migration.record.as_mut() else {
            return false;
        };
        if record.phase == MigrationPhase::Prepared && status.state.is_active() {
            record.phase = MigrationPhase::Running;
            // The domain is here: --qemu-timeout no longer applies.
            self.timers.cancel(Timer::QemuTimeout);
            self.adopt_guest_nics();
            self.publish(
                EventKind::MigrationStarted,
                MigrationEvent {
                    domain: &domain,
                    role: Role::Target,
                    target_uri: None,
                },
            );
        }
        let Some(record) = self.migration.record.as_mut() else {
            return false;
        };
        if status.state == DomainState::Running {
            // The guest runs here now: this launcher owns it.
            record.end(MigrationPhase::Completed);
            self.phase.migrated_domain_arrived();
            self.migration.incoming_domain_kept();
            log::info!("manager: the migrated domain runs here now");
            self.publish(
                EventKind::MigrationCompleted,
                MigrationEvent {
                    domain: &domain,
                    role: Role::Target,
                    target_uri: None,
                },
            );
        }
        // Let the usual reaction (started, poller) follow.
        false
    }

    /// The arriving domain's NICs keep the MACs the source gave them (from
    /// the source's pod interface when the VMI names none; the target
    /// planned its own pod interface's). Its pod network takes them over
    /// before the guest runs here, so the DHCP server answers the guest's
    /// renewals, as KubeVirt's target keeps the guest's MAC and address.
    fn adopt_guest_nics(&mut self) {
        let has_taps = self
            .network
            .lock()
            .ok()
            .is_some_and(|n| n.as_ref().is_some_and(|n| !n.is_empty()));
        if !has_taps {
            return;
        }
        let name = self.config.domain_name.clone();
        let slot = self.network.clone();
        self.jobs.spawn(
            Operation::AdoptGuestNics,
            None,
            self.timing.command,
            move |hv| {
                let result = hv
                    .domain_xml(&name)
                    .map_err(|e| hypervisor_error(&e))
                    .and_then(|(xml, _)| {
                        crate::domxml::Domain::from_xml(&xml).map_err(|e| {
                            CommandError::internal(format!(
                                "cannot read the arriving domain's XML: {e}"
                            ))
                        })
                    })
                    .map(|domain| {
                        let changed = match slot.lock() {
                            Ok(mut active) => active
                                .as_mut()
                                .map(|a| a.adopt_guest_macs(&domain))
                                .unwrap_or_default(),
                            Err(_) => Vec::new(),
                        };
                        for (iface, old, new) in changed {
                            log::info!(
                                "network {iface}: the migrated guest has MAC {}; its DHCP server answers it (instead of {})",
                                crate::network::dhcp::format_mac(&new),
                                crate::network::dhcp::format_mac(&old)
                            );
                        }
                        JobValue::Empty
                    });
                JobOutput::reply(result)
            },
        );
    }

    /// Destroys a domain still arriving by migration.
    pub(super) fn destroy_incoming(&mut self) {
        let name = self.config.domain_name.clone();
        self.jobs.spawn(
            Operation::DestroyIncoming,
            None,
            self.timing.command,
            move |hv| {
                JobOutput::reply(
                    hv.destroy(&name, false)
                        .map(|()| JobValue::Empty)
                        .map_err(|e| hypervisor_error(&e)),
                )
            },
        );
    }

    /// The target gives up: an incoming domain is destroyed (its stop then
    /// ends the launcher), or, with nothing arriving yet, the launcher
    /// cleans up and leaves at once.
    pub(super) fn give_up_target(&mut self, why: &str) {
        let arriving = self
            .migration
            .record
            .as_ref()
            .is_some_and(|m| m.phase == MigrationPhase::Running);
        if arriving {
            self.destroy_incoming();
        } else {
            self.abort_target(why.to_string());
        }
    }

    /// The incoming migration will not happen: remove what was prepared
    /// and exit.
    fn abort_target(&mut self, reason: String) {
        self.end_target(reason, ExitCode::MigrationAborted);
    }

    /// Ends a target: removes what it prepared, reports MIGRATION_FAILED
    /// and exits with `code`.
    pub(super) fn end_target(&mut self, reason: String, code: ExitCode) {
        if let Some(prepared) = self.migration.take_prepared_target() {
            prepared.rollback();
        }
        let uid_dir = self.config.dirs.private.join(&self.config.uid);
        for socket in MIGRATION_SOCKETS {
            let _ = std::fs::remove_file(uid_dir.join(socket));
        }
        if let Some(record) = self.migration.record.as_mut() {
            record.end(MigrationPhase::Failed);
            record.failure = Some(reason.clone());
        }
        self.publish(
            EventKind::MigrationFailed,
            TargetFailed {
                domain: &self.config.domain_name,
                reason: &reason,
                role: Role::Target,
            },
        );
        self.finish(code, reason);
    }
}

/// A local target (`qemu+unix:...?socket=PATH`) must exist before the
/// source's daemon is sent to it; other URIs are checked by libvirt.
fn check_target_socket(uri: &str) -> Result<(), CommandError> {
    let Some(path) = uri
        .split(['?', '&'])
        .find_map(|part| part.strip_prefix("socket="))
    else {
        return Ok(());
    };
    match std::fs::metadata(Path::new(path)) {
        Ok(meta) if meta.file_type().is_socket() => Ok(()),
        Ok(_) => Err(CommandError::invalid_argument(format!(
            "migrate: {path} is not a socket; arguments.target.libvirt_uri must name the target launcher's libvirt daemon"
        ))),
        Err(e) => Err(CommandError::invalid_argument(format!(
            "migrate: no libvirt daemon listens at {path} ({e}); use the address prepare-migration-target returned"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_socket_must_exist() {
        assert!(check_target_socket("qemu+tcp://elsewhere/system").is_ok());
        let err = check_target_socket("qemu+unix:///system?socket=/nonexistent/libvirt-sock")
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(
            err.desc.contains("/nonexistent/libvirt-sock"),
            "{}",
            err.desc
        );
        let err = check_target_socket("qemu+unix:///system?socket=/etc/hostname").unwrap_err();
        assert!(err.desc.contains("is not a socket"));
    }
}
