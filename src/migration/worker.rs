//! The source's migration worker. One thread makes the blocking
//! `virDomainMigrateToURI3` call; a monitor thread reads the job's
//! statistics every 400 ms (libvirt has no progress event) to report
//! progress and to enforce KubeVirt's two timeouts: no progress for
//! `progress_timeout`, or longer than `completion_timeout_per_gib` per GiB
//! to move. On a timeout the migration switches to post-copy when allowed,
//! otherwise it is aborted. The manager thread only gets messages.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, select};

use super::{
    LauncherPaths, MigrationOptions, MigrationUpdate, StackVersions, local_disks, rewrite_paths,
};
use crate::domxml::Domain;
use crate::hypervisor::{HvResult, Hypervisor, MigrationRequest, Stat};
use crate::sink::Sink;
use crate::threads::{self, FatalSender};

/// How often the monitor reads the job's statistics (as KubeVirt does).
const MONITOR_INTERVAL: Duration = Duration::from_millis(400);
const GIB: f64 = (1u64 << 30) as f64;
/// How long a failed migration's source waits for the target's daemon to
/// say its versions: the reason is sent without them after that.
const TARGET_VERSIONS_WAIT: Duration = Duration::from_secs(10);

/// Cancels a running migration.
pub struct CancelHandle(Sender<String>);

impl CancelHandle {
    /// Cancels; `why` becomes the MIGRATION_FAILED reason.
    pub fn cancel(&self, why: &str) {
        let _ = self.0.try_send(why.to_string());
    }
}

/// Why the monitor stepped in.
#[derive(Debug, Clone, PartialEq)]
enum Intervention {
    Cancelled(String),
    TimedOut(String),
}

/// Starts migrating `domain` from a launcher with directories `ours`.
/// Progress and the outcome arrive on `updates`.
pub fn spawn(
    hypervisor: Arc<dyn Hypervisor>,
    domain: String,
    ours: LauncherPaths,
    options: &MigrationOptions,
    updates: Sink<MigrationUpdate>,
    fatal: &FatalSender,
) -> std::io::Result<CancelHandle> {
    let (done_tx, done_rx) = bounded::<HvResult<()>>(1);
    let (cancel_tx, cancel_rx) = bounded::<String>(1);
    let hv = hypervisor.clone();
    let name = domain.clone();
    let opts = options.clone();
    threads::spawn_named("migration", fatal, move || {
        let result = build_request(hv.as_ref(), &name, &ours, &opts)
            .and_then(|request| hv.migrate(&name, &request));
        let _ = done_tx.send(result);
    })?;
    let monitor = Monitor {
        hypervisor,
        domain,
        progress_timeout: Duration::from_secs(options.progress_timeout),
        completion_timeout_per_gib: options.completion_timeout_per_gib,
        allow_post_copy: options.allow_post_copy,
        max_downtime_ms: options.max_downtime_ms,
        // Only the daemon can say when the address does not.
        ask_target: options
            .target
            .stack
            .is_none()
            .then(|| options.target.libvirt_uri.clone()),
        updates,
    };
    threads::spawn_named("migration-monitor", fatal, move || {
        monitor.run(done_rx, cancel_rx)
    })?;
    Ok(CancelHandle(cancel_tx))
}

struct Monitor {
    hypervisor: Arc<dyn Hypervisor>,
    domain: String,
    progress_timeout: Duration,
    completion_timeout_per_gib: u64,
    allow_post_copy: bool,
    max_downtime_ms: Option<u64>,
    /// The target daemon's URI, to ask its versions of after a refusal.
    ask_target: Option<String>,
    updates: Sink<MigrationUpdate>,
}

/// The migration as libvirt is asked for it: the domain with the target's
/// paths, and the local disks to copy.
fn build_request(
    hv: &dyn Hypervisor,
    name: &str,
    ours: &LauncherPaths,
    options: &MigrationOptions,
) -> HvResult<MigrationRequest> {
    let target = &options.target;
    if let Some(kubevirt) = &options.kubevirt {
        // KubeVirt's way: the target pod has the same paths, the VMI says
        // which disks to copy, and libvirt's own safety checks stand
        // unless the options waive them.
        return Ok(MigrationRequest {
            target_uri: target.libvirt_uri.clone(),
            migration_uri: target.migration_uri.clone(),
            dest_xml: Some(hv.migratable_xml(name)?),
            bandwidth_mib_per_s: options.bandwidth_mib_per_s.filter(|b| *b > 0),
            disks_uri: target
                .disks_uri
                .clone()
                .filter(|_| !kubevirt.copy_disks.is_empty()),
            block_disks: kubevirt.copy_disks.clone(),
            auto_converge: options.allow_auto_converge,
            post_copy: options.allow_post_copy,
            unsafe_migration: options.unsafe_migration,
            parallel_connections: kubevirt.parallel_connections,
            compression: kubevirt.compression.clone(),
        });
    }
    let (dest_xml, block_disks) = match &target.paths {
        Some(theirs) => {
            let xml = hv.migratable_xml(name)?;
            (
                Some(rewrite_paths(&xml, ours, theirs)),
                local_disks(&xml, ours),
            )
        }
        // Same paths on both sides: shared storage, nothing to copy.
        None => (None, Vec::new()),
    };
    if !block_disks.is_empty() {
        log::info!("migration: copying local disks {block_disks:?}");
    }
    // libvirt calls a disk on a local filesystem unsafe to migrate, since
    // it cannot know the target sees the same file. A target reached
    // through a local socket runs on this host: same file, same page
    // cache, so the disk really is shared.
    let same_host = target.libvirt_uri.starts_with("qemu+unix:");
    if same_host && !options.unsafe_migration {
        log::info!("migration: the target is on this host; its disks are shared");
    }
    Ok(MigrationRequest {
        target_uri: target.libvirt_uri.clone(),
        migration_uri: target.migration_uri.clone(),
        dest_xml,
        // 0 is KubeVirt's "no limit", as absent.
        bandwidth_mib_per_s: options.bandwidth_mib_per_s.filter(|b| *b > 0),
        disks_uri: target.disks_uri.clone(),
        block_disks,
        auto_converge: options.allow_auto_converge,
        post_copy: options.allow_post_copy,
        unsafe_migration: options.unsafe_migration || same_host,
        parallel_connections: None,
        compression: None,
    })
}

/// The monitor's view of the job over time. Pure, so the timeout rules
/// can be tested with made-up statistics.
pub struct Watch {
    started: Instant,
    last_progress: Instant,
    lowest_remaining: Option<u64>,
    progress_timeout: Duration,
    completion_timeout_per_gib: u64,
    fallback_bytes: u64,
}

impl Watch {
    pub fn new(
        now: Instant,
        progress_timeout: Duration,
        completion_timeout_per_gib: u64,
        fallback_bytes: u64,
    ) -> Watch {
        Watch {
            started: now,
            last_progress: now,
            lowest_remaining: None,
            progress_timeout,
            completion_timeout_per_gib,
            fallback_bytes,
        }
    }

    /// Takes one sample; returns why the migration must not go on, if so.
    pub fn sample(
        &mut self,
        now: Instant,
        data_remaining: Option<u64>,
        data_total: Option<u64>,
    ) -> Option<String> {
        // Progress: the data left to move reached a new low. A sample
        // without a total carries no figures (libvirt reports zeros when
        // it cannot read QEMU's statistics, e.g. while the stream is
        // stuck): it is no progress.
        let figures = data_total.is_some_and(|t| t > 0);
        if let Some(remaining) = data_remaining.filter(|_| figures)
            && self.lowest_remaining.is_none_or(|low| remaining < low)
        {
            self.lowest_remaining = Some(remaining);
            self.last_progress = now;
        }
        if !self.progress_timeout.is_zero()
            && now.duration_since(self.last_progress) > self.progress_timeout
        {
            return Some(format!(
                "no progress for {} s (progress_timeout {} s)",
                now.duration_since(self.last_progress).as_secs(),
                self.progress_timeout.as_secs()
            ));
        }
        // The budget starts counting once libvirt reports figures (before,
        // the migration is still being set up and cannot switch to
        // post-copy); it covers at least `fallback_bytes` (the guest's
        // memory), since a block migration first reports the disks alone.
        let bytes = data_total
            .filter(|t| *t > 0)
            .map_or(0, |total| total.max(self.fallback_bytes));
        if self.completion_timeout_per_gib > 0 && bytes > 0 {
            let gib = bytes as f64 / GIB;
            // libvirt's data_total is any u64: a budget too long for a
            // Duration is no limit, not a panic.
            let allowed = Duration::try_from_secs_f64(self.completion_timeout_per_gib as f64 * gib)
                .unwrap_or(Duration::MAX);
            if now.duration_since(self.started) > allowed {
                return Some(format!(
                    "did not complete within {:.1} s (completion_timeout_per_gib {} s x {:.2} GiB)",
                    allowed.as_secs_f64(),
                    self.completion_timeout_per_gib,
                    gib
                ));
            }
        }
        None
    }
}

fn stat_u64(stats: &[Stat], name: &str) -> Option<u64> {
    stats
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_u64())
}

impl Monitor {
    /// The target's libvirt and hypervisor versions, asked of its daemon
    /// on a connection of their own (a refusal of an older libvirt or QEMU
    /// then says so), when its address named none. A daemon that does not
    /// answer in time is left behind: its thread ends with the call.
    fn target_versions(&self) -> Option<StackVersions> {
        let uri = self.ask_target.clone()?;
        let (tx, rx) = bounded(1);
        let hv = self.hypervisor.clone();
        let asked = std::thread::Builder::new()
            .name("migration-target-versions".into())
            .spawn(move || {
                let _ = tx.send(hv.versions_at(&uri));
            });
        if let Err(e) = asked {
            log::debug!("migration: cannot ask the target's versions: {e}");
            return None;
        }
        match rx.recv_timeout(TARGET_VERSIONS_WAIT) {
            Ok(Ok(versions)) => Some(StackVersions {
                libvirt: versions.libvirt,
                hypervisor: versions.hypervisor,
            }),
            Ok(Err(e)) => {
                log::debug!("migration: the target's daemon did not say its versions: {e}");
                None
            }
            Err(_) => {
                log::debug!("migration: the target's daemon did not say its versions in time");
                None
            }
        }
    }

    /// Aborts the migration job; false when there is none yet to abort.
    fn try_abort(&self) -> bool {
        match self.hypervisor.abort_job(&self.domain) {
            Ok(()) => true,
            Err(e) => {
                log::debug!("migration: abort not taken yet: {e}");
                false
            }
        }
    }

    fn run(self, done: Receiver<HvResult<()>>, cancel: Receiver<String>) {
        let hv = self.hypervisor.as_ref();
        let started = Instant::now();
        // The completion budget counts at least the guest's memory. In a
        // block migration libvirt's data_total starts with the disks'
        // first chunk alone (64 KiB), which would make the budget a few
        // milliseconds and abort a migration that is going fine.
        let memory = hv
            .domain_xml(&self.domain)
            .ok()
            .and_then(|(xml, _)| Domain::from_xml(&xml).ok())
            .and_then(|domain| domain.memory.to_bytes())
            .unwrap_or(0);
        let mut watch = Watch::new(
            started,
            self.progress_timeout,
            self.completion_timeout_per_gib,
            memory,
        );
        let mut intervention: Option<Intervention> = None;
        // An abort asked for before libvirt has started the job ("no job
        // is active") is tried again until it takes.
        let mut abort_pending = false;
        let mut post_copy = false;
        let mut downtime_set = false;
        let outcome = loop {
            select! {
                recv(done) -> result => break result.unwrap_or_else(|_| {
                    Err(crate::hypervisor::HypervisorError::new(
                        crate::hypervisor::HypervisorErrorKind::Other,
                        "virDomainMigrateToURI3",
                        "the migration thread ended without a result",
                    ))
                }),
                recv(cancel) -> why => {
                    if intervention.is_none() {
                        log::info!("migration: cancelling on request");
                        intervention = Some(Intervention::Cancelled(
                            why.unwrap_or_else(|_| "cancelled".to_string()),
                        ));
                        abort_pending = !self.try_abort();
                    }
                },
                default(MONITOR_INTERVAL) => {
                    if abort_pending {
                        abort_pending = !self.try_abort();
                    }
                    let Ok(stats) = hv.job_stats(&self.domain, false) else { continue };
                    // No job yet (type 0) means the migration has not started.
                    if stat_u64(&stats, "type").unwrap_or(0) == 0 {
                        continue;
                    }
                    if !downtime_set {
                        downtime_set = true;
                        if let Some(ms) = self.max_downtime_ms
                            && let Err(e) = hv.migrate_set_max_downtime(&self.domain, ms) {
                                log::warn!("migration: cannot set the maximum downtime: {e}");
                            }
                    }
                    let verdict = watch.sample(
                        Instant::now(),
                        stat_u64(&stats, "data_remaining"),
                        stat_u64(&stats, "data_total"),
                    );
                    let _ = self.updates.send(MigrationUpdate::Progress(stats));
                    if let (Some(reason), None) = (verdict, &intervention) {
                        if self.allow_post_copy && !post_copy {
                            log::warn!("migration: {reason}; switching to post-copy");
                            match hv.migrate_start_post_copy(&self.domain) {
                                Ok(()) => {
                                    post_copy = true;
                                    let _ = self.updates.send(MigrationUpdate::SwitchedToPostCopy { reason });
                                    // Post-copy always completes; stop timing it.
                                    watch = Watch::new(Instant::now(), Duration::ZERO, 0, 0);
                                }
                                Err(e) => {
                                    log::warn!("migration: post-copy refused ({e}); aborting");
                                    intervention = Some(Intervention::TimedOut(reason));
                                    abort_pending = !self.try_abort();
                                }
                            }
                        } else {
                            log::warn!("migration: {reason}; aborting");
                            intervention = Some(Intervention::TimedOut(reason));
                            abort_pending = !self.try_abort();
                        }
                    }
                },
            }
        };
        let update = match (outcome, intervention) {
            (Ok(()), _) => MigrationUpdate::Completed {
                stats: hv.job_stats(&self.domain, true).unwrap_or_default(),
            },
            (Err(_), Some(Intervention::Cancelled(why))) => MigrationUpdate::Failed {
                reason: why,
                cancelled: true,
            },
            (Err(e), Some(Intervention::TimedOut(reason))) => MigrationUpdate::Failed {
                reason: format!("{reason}; aborted ({})", e.message),
                cancelled: false,
            },
            (Err(e), None) => {
                if let Some(theirs) = self.target_versions() {
                    let _ = self.updates.send(MigrationUpdate::TargetStack(theirs));
                }
                MigrationUpdate::Failed {
                    reason: e.to_string(),
                    cancelled: false,
                }
            }
        };
        let _ = self.updates.send(update);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn progress_is_a_new_low_of_remaining_data() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let total = Some(192 * MIB);
        let mut w = Watch::new(t0, s(5), 0, 192 * MIB);
        assert_eq!(w.sample(t0 + s(1), Some(100 * MIB), total), None);
        // Remaining goes up and down (dirty pages) but no new low.
        assert_eq!(w.sample(t0 + s(3), Some(120 * MIB), total), None);
        assert_eq!(w.sample(t0 + s(5), Some(101 * MIB), total), None);
        let stalled = w.sample(t0 + s(7), Some(110 * MIB), total).unwrap();
        assert!(stalled.contains("progress_timeout 5 s"), "{stalled}");
        // Zeros (no figures) are not progress.
        let mut w = Watch::new(t0, s(5), 0, 0);
        w.sample(t0 + s(1), Some(100 * MIB), total);
        assert_eq!(w.sample(t0 + s(3), Some(0), Some(0)), None);
        assert!(w.sample(t0 + s(7), Some(0), Some(0)).is_some());
        // A new low resets it.
        let mut w = Watch::new(t0, s(5), 0, 192 * MIB);
        w.sample(t0 + s(1), Some(100 * MIB), total);
        assert_eq!(w.sample(t0 + s(5), Some(99 * MIB), total), None);
        assert_eq!(w.sample(t0 + s(9), Some(98 * MIB), total), None);
    }

    #[test]
    fn completion_timeout_scales_with_the_data_to_move() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // 10 s per GiB, 192 MiB of memory: 1.875 s allowed.
        let mut w = Watch::new(t0, s(0), 10, 192 * MIB);
        assert_eq!(w.sample(t0 + s(1), Some(MIB), Some(192 * MIB)), None);
        let late = w.sample(t0 + s(2), Some(MIB), Some(192 * MIB)).unwrap();
        assert!(late.contains("completion_timeout_per_gib 10 s"), "{late}");
        // 1 GiB of disk to copy too: 11.9 s allowed.
        let mut w = Watch::new(t0, s(0), 10, 192 * MIB);
        assert_eq!(w.sample(t0 + s(5), Some(MIB), Some(1216 * MIB)), None);
        // A block migration's first samples count only the disks' first
        // chunk: the guest's memory still sets the budget.
        let mut w = Watch::new(t0, s(0), 150, 192 * MIB);
        assert_eq!(
            w.sample(t0 + Duration::from_millis(1250), Some(65536), Some(65536)),
            None
        );
    }

    #[test]
    fn the_budget_waits_for_libvirts_figures() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // 2 s per GiB of 192 MiB: 0.375 s, but nothing is reported yet.
        let mut w = Watch::new(t0, s(0), 2, 192 * MIB);
        assert_eq!(w.sample(t0 + s(1), Some(0), Some(0)), None);
        assert_eq!(w.sample(t0 + s(2), None, None), None);
        assert!(w.sample(t0 + s(3), Some(MIB), Some(192 * MIB)).is_some());
    }

    #[test]
    fn the_largest_budget_and_data_total_do_not_overflow() {
        let t0 = Instant::now();
        // Ten years per GiB of all the data libvirt could report: no limit
        // reached, no panic.
        let mut w = Watch::new(t0, Duration::ZERO, crate::limits::MAX_SECONDS, u64::MAX);
        assert_eq!(
            w.sample(
                t0 + Duration::from_secs(1000),
                Some(u64::MAX),
                Some(u64::MAX)
            ),
            None
        );
    }

    #[test]
    fn zero_disables_a_timeout() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0, Duration::ZERO, 0, 192 * MIB);
        assert_eq!(
            w.sample(t0 + Duration::from_secs(100_000), Some(5), None),
            None
        );
    }
}
