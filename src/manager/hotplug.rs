//! `sync` of a running (or paused) domain: the changes of the VMI are
//! applied live, one step at a time (see `crate::hotplug`).
//!
//! The manager keeps what the last sync applied (the VMI and the domain the
//! converter made of it). A sync whose conversion equals that record, on a
//! domain that needs nothing else, is answered at once without calling
//! libvirt. Anything else runs in the sync job: the live XML is read, the
//! steps are planned and checked (a refusal touches nothing), then each
//! step runs in turn. A detach is done only when libvirt's device-removed
//! event says the guest let the device go; the manager hands those events
//! to the job while it runs. Volume phases come back to the manager as
//! progress messages, which it publishes as VOLUME_STATUS_CHANGED and
//! shows in query-domain.
//!
//! The record is kept in memory only (KubeVirt keeps none either): after a
//! launcher restart the first sync compares devices with the live domain
//! but cannot tell which other fields of the VMI changed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};
use serde::Serialize;
use serde_json::Value;

use super::DomainManager;
use super::errors::hypervisor_error;
use super::reply::{JobValue, SyncAction, Synced};
use crate::domxml::Domain;
use crate::events::EventKind;
use crate::hotplug::changes::{self, NotLive};
use crate::hotplug::plan::{self, Change, Desired, Step};
use crate::hotplug::ready::{self, HostPaths};
use crate::hypervisor::{Affect, DomainState, Hypervisor, HypervisorErrorKind, StateReason};
use crate::protocol::{CommandError, ErrorClass};
use crate::sink::Sink;
use crate::unprivileged::{self, Identity, VfioHost};
use crate::vmi::VirtualMachineInstance;

/// What the last successful sync applied to the running domain.
#[derive(Debug, Clone)]
struct Applied {
    /// The VMI, as JSON.
    vmi: Value,
    /// The domain the converter made of it.
    domain: Domain,
    /// Something changed the domain since (a sync that failed midway, a
    /// device the guest released late): the next sync must look at the
    /// live domain even for the same VMI.
    dirty: bool,
}

/// Where a hotplugged volume is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumePhase {
    Attaching,
    Ready,
    Detaching,
    /// Only in events: the volume is gone from the domain.
    Detached,
}

/// KubeVirt's volumeStatus in spirit, for query-domain and
/// VOLUME_STATUS_CHANGED (keys in byte order, as replies write them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VolumeStatus {
    pub hotpluggable: bool,
    pub name: String,
    pub phase: VolumePhase,
    pub reason: String,
    pub target: String,
}

/// VOLUME_STATUS_CHANGED's data: the volume's status and its domain.
#[derive(Debug, Serialize)]
struct VolumeEvent<'a> {
    domain: &'a str,
    hotpluggable: bool,
    name: &'a str,
    phase: VolumePhase,
    reason: &'a str,
    target: &'a str,
}

/// What the sync job reports while it runs.
#[derive(Debug)]
pub enum Progress {
    Volume(VolumeStatus),
}

/// The file in the private directory that holds the VMI last applied.
const APPLIED_RECORD: &str = "applied-vmi.json";

/// The manager's share of live changes.
pub(super) struct HotplugState {
    /// What the last successful sync applied.
    applied: Option<Applied>,
    /// The VMI and domain of the sync job that runs, recorded when it
    /// succeeds.
    pending: Option<(Value, Domain)>,
    /// Volumes in transition (attaching, detaching), by name; query-domain
    /// shows them over what the live XML says.
    volumes: BTreeMap<String, VolumeStatus>,
    /// While a sync job runs: where device-removed aliases go.
    removals: Option<Sender<String>>,
    /// Where the live-update worker reports (the manager's inbox).
    progress: Sink<Progress>,
    /// vCPU threads QEMU made since the domain started (those it started
    /// with and every one a sync added): under TCG each holds a
    /// translation context for good ([`plan::Tcg`]). `None` when unknown:
    /// the launcher did not start the domain (a restart next to it, a
    /// migration target) and was not handed the count at an upgrade.
    vcpu_threads: Option<u32>,
}

impl HotplugState {
    pub(super) fn new(progress: Sink<Progress>) -> HotplugState {
        HotplugState {
            applied: None,
            pending: None,
            volumes: BTreeMap::new(),
            removals: None,
            progress,
            vcpu_threads: None,
        }
    }

    /// The VMI the running domain was last made from (or changed to).
    fn applied_vmi(&self) -> Option<&Value> {
        self.applied.as_ref().map(|a| &a.vmi)
    }

    /// A sync job starts changing the domain to `domain` (from `vmi`):
    /// until it ends, the device removals libvirt reports go to the job,
    /// on the receiver returned.
    fn sync_started(&mut self, vmi: &Value, domain: &Domain) -> Receiver<String> {
        let (removals_tx, removals) = unbounded();
        self.removals = Some(removals_tx);
        self.pending = Some((vmi.clone(), domain.clone()));
        removals
    }

    /// Whether a sync job is changing the domain.
    fn sync_running(&self) -> bool {
        self.removals.is_some()
    }

    /// The sync job ended (`synced` when it succeeded). When it succeeded,
    /// what it applied is the domain's now (returned, to be recorded);
    /// otherwise the domain may have changed halfway.
    fn sync_ended(&mut self, synced: Option<&Synced>, refused: bool) -> bool {
        self.removals = None;
        let pending = self.pending.take();
        let pending_vcpus = pending.as_ref().map(|(_, d)| plan::vcpus(d).0);
        match (synced, pending) {
            (Some(synced), Some((vmi, domain))) => {
                self.count_vcpu_threads(synced, pending_vcpus);
                self.applied = Some(Applied {
                    vmi,
                    domain,
                    dirty: false,
                });
                true
            }
            _ => {
                // A sync that failed after its first step may have added
                // vCPUs: the count is no longer known. (One refused before
                // anything was touched added none.)
                let applied_vcpus = self.applied.as_ref().map(|a| plan::vcpus(&a.domain).0);
                if !refused
                    && pending_vcpus.is_none_or(|want| applied_vcpus.is_none_or(|had| want > had))
                {
                    self.vcpu_threads = None;
                }
                self.domain_changed_elsewhere();
                false
            }
        }
    }

    /// A sync started the domain (with the VMI's `started_with` vCPUs) or
    /// added vCPUs to it: QEMU made that many vCPU threads.
    fn count_vcpu_threads(&mut self, synced: &Synced, started_with: Option<u32>) {
        if matches!(
            synced.action,
            SyncAction::DefinedAndStarted | SyncAction::RedefinedAndStarted
        ) {
            self.vcpu_threads = started_with;
        }
        for change in &synced.changes {
            if change.change == "set-vcpus"
                && let (Some(from), Some(to)) = (change.from, change.to)
                && to > from
            {
                let added = u32::try_from(to - from).unwrap_or(u32::MAX);
                self.vcpu_threads = self.vcpu_threads.map(|n| n.saturating_add(added));
            }
        }
    }

    /// Whether the running domain is `domain` as the last sync left it,
    /// with nothing changed since.
    fn still_applied(&self, domain: &Domain) -> bool {
        self.applied
            .as_ref()
            .is_some_and(|a| !a.dirty && &a.domain == domain)
    }

    /// The domains the launcher is applying and last applied.
    fn known_domains(&self) -> impl Iterator<Item = &Domain> {
        let pending = self.pending.as_ref().map(|(_, d)| d);
        let applied = self.applied.as_ref().map(|a| &a.domain);
        pending.into_iter().chain(applied)
    }

    /// Something other than a successful sync changed the domain: the
    /// next sync looks at the live domain even for the same VMI.
    fn domain_changed_elsewhere(&mut self) {
        if let Some(applied) = self.applied.as_mut() {
            applied.dirty = true;
        }
    }

    /// libvirt removed the device `alias`: the running sync job may be
    /// waiting for it; without one, the launcher did not ask for it.
    fn device_removed(&mut self, alias: &str) {
        if let Some(tx) = &self.removals {
            let _ = tx.send(alias.to_string());
        } else {
            self.domain_changed_elsewhere();
        }
    }

    /// Takes a volume's new status; false when there is nothing to tell
    /// (a detach already reported).
    fn volume_changed(&mut self, status: &VolumeStatus) -> bool {
        match status.phase {
            VolumePhase::Attaching | VolumePhase::Detaching => {
                self.volumes.insert(status.name.clone(), status.clone());
                true
            }
            VolumePhase::Ready => {
                self.volumes.remove(&status.name);
                true
            }
            // Published once: by whichever of the job and the event saw
            // it first.
            VolumePhase::Detached => self.volumes.remove(&status.name).is_some(),
        }
    }
}

/// Everything the sync job needs to change a running domain.
pub(super) struct LiveChange {
    pub(super) vmi_domain: Domain,
    hotplug_dir: PathBuf,
    guest_memory: Option<(u64, String)>,
    disk_paths: BTreeMap<String, String>,
    affect: Affect,
    /// Whether host devices are checked in sysfs (not on the test driver).
    check_host: bool,
    /// QEMU runs as the launcher's unprivileged user (non-root mode): what
    /// it could not do is refused before the first step
    /// (`crate::unprivileged::check_live_steps`).
    unprivileged: Option<(VfioHost, Identity)>,
    detach_timeout: Duration,
    removals: Receiver<String>,
    progress: Sink<Progress>,
    /// What QEMU allows with vCPUs under emulation.
    tcg: plan::Tcg,
    /// The daemon's version and driver, when the manager's read of the
    /// hypervisor's version had not answered (or failed) as the sync
    /// began: the job reads it (`LiveChange::read_unknown_stack`) before
    /// it decides `tcg.no_removal`.
    unread_stack: Option<(String, crate::hypervisor::DriverKind)>,
}

impl LiveChange {
    /// Decides whether this stack can take a vCPU away under TCG when the
    /// manager did not know its hypervisor's version: read on the sync
    /// job's worker, where the daemon has answered a define already (the
    /// domain runs), so the read does not wait for its QEMU probe. A read
    /// that fails leaves the removal refused, naming why; the rest of the
    /// sync goes on.
    pub(super) fn read_unknown_stack(&mut self, hv: &dyn Hypervisor) {
        let Some((daemon_version, driver)) = self.unread_stack.take() else {
            return;
        };
        let hypervisor = super::diagnostics::read_hypervisor(hv, driver)
            .unwrap_or_else(|e| format!("a hypervisor whose version cannot be read ({e})"));
        self.tcg.no_removal = plan::tcg_vcpu_removal(&daemon_version, &hypervisor);
    }
}

/// "arguments.vmi.<path>: <message>" as an InvalidArgument.
fn refused(e: &NotLive) -> CommandError {
    if e.path.is_empty() {
        CommandError::invalid_argument(format!("arguments.vmi: {}", e.message))
    } else {
        CommandError::invalid_argument(format!("arguments.vmi.{}: {}", e.path, e.message))
    }
}

impl DomainManager {
    /// Whether sync will find the domain running or paused (the launcher's
    /// view, kept current by libvirt's events).
    pub(super) fn domain_is_live(&self) -> bool {
        self.domain.status.state.is_active()
    }

    /// Refuses, before anything is touched, a VMI that asks for more than
    /// a running domain can take or changes what cannot change live.
    pub(super) fn check_live_vmi(
        &self,
        vmi_json: &Value,
        vmi: &VirtualMachineInstance,
    ) -> Result<(), CommandError> {
        if !self.domain_is_live() {
            return Ok(());
        }
        changes::check_bounds(vmi).map_err(|e| refused(&e))?;
        let before = self
            .hotplug
            .applied_vmi()
            .cloned()
            .or_else(|| self.recorded_vmi());
        if let Some(before) = &before {
            self.check_passt_unchanged(before, vmi)?;
        }
        if let Some(applied) = self.hotplug.applied_vmi() {
            changes::check(applied, vmi_json).map_err(|e| refused(&e))?;
        } else if let Some(recorded) = self.recorded_vmi() {
            // A launcher restarted next to a running domain: what an
            // earlier launcher applied is on disk.
            changes::check(&recorded, vmi_json).map_err(|e| refused(&e))?;
        }
        Ok(())
    }

    /// The passt interfaces the launcher runs passt for (libvirt < 9.2)
    /// are on QEMU's command line: none can be plugged in or out live.
    fn check_passt_unchanged(
        &self,
        before: &Value,
        vmi: &VirtualMachineInstance,
    ) -> Result<(), CommandError> {
        let info = self.hypervisor.info();
        let version = crate::hypervisor::state::parse_libvirt_version(&info.daemon_version);
        if crate::convert::passt_by_libvirt(version) {
            return Ok(());
        }
        let Ok(before) = crate::vmi::parse_vmi(before) else {
            return Ok(());
        };
        let passt = |vmi: &VirtualMachineInstance| -> Vec<String> {
            let (interfaces, _) = crate::convert::interfaces_and_networks(vmi);
            interfaces
                .iter()
                .filter(|i| i.state != Some(crate::vmi::InterfaceState::Absent))
                .filter(|i| {
                    crate::network::plan::binding_of(i, "")
                        .is_ok_and(|b| b == crate::network::plan::Binding::Passt)
                })
                .map(|i| i.name.clone())
                .collect()
        };
        let (was, now) = (passt(&before), passt(vmi));
        if was != now {
            return Err(CommandError::invalid_argument(format!(
                "arguments.vmi.spec.domain.devices.interfaces: the passt interfaces of a running VMI cannot change (were {was:?}, now {now:?}): with libvirt {} (< 9.2) the launcher runs passt itself and QEMU joins it on its command line, which cannot change live; restart the VMI",
                info.daemon_version
            )));
        }
        Ok(())
    }

    /// The VMI the running domain was last made from (or changed to).
    pub(super) fn applied_vmi(&self) -> Option<&Value> {
        self.hotplug.applied_vmi()
    }

    /// vCPU threads QEMU made since the domain started, when known.
    pub(super) fn vcpu_threads(&self) -> Option<u32> {
        self.hotplug.vcpu_threads
    }

    /// The launcher this one replaced knew the count (an upgrade).
    pub(super) fn adopt_vcpu_threads(&mut self, threads: Option<u32>) {
        self.hotplug.vcpu_threads = threads;
    }

    /// Where the VMI last applied is kept, so that a restarted launcher
    /// still knows it (the launcher's private directory).
    fn applied_record(&self) -> PathBuf {
        self.config.dirs.private.join(APPLIED_RECORD)
    }

    /// The VMI an earlier launcher recorded; `None` when there is none or
    /// it cannot be read (then only the live domain is compared).
    pub(super) fn recorded_vmi(&self) -> Option<Value> {
        crate::safe_fs::read_record(&self.applied_record(), "a VMI")
    }

    /// Writes the VMI applied to [`applied_record`] (a whole new file
    /// renamed over the old one, so a crash leaves one or the other).
    ///
    /// [`applied_record`]: DomainManager::applied_record
    fn record_applied(&self, vmi: &Value) {
        let path = self.applied_record();
        // Owner only: a VMI can carry cloud-init user data with secrets.
        let written = serde_json::to_vec(vmi)
            .map_err(std::io::Error::other)
            .and_then(|bytes| crate::safe_fs::replace_file(&path, "json.new", &bytes, 0o600));
        if let Err(e) = written {
            log::warn!(
                "manager: cannot record the applied VMI in {}: {e}; a restarted launcher will compare only the live domain",
                path.display()
            );
        }
    }

    /// The reply for a VMI the running domain already has, when nothing
    /// else is to do: no libvirt call at all.
    pub(super) fn unchanged_sync(&self, domain: &Domain) -> Option<super::reply::Synced> {
        if !self.hotplug.still_applied(domain) {
            return None;
        }
        let status = self.domain.status;
        let settled = match status.state {
            DomainState::Running | DomainState::Blocked => true,
            // sync resumes a domain paused by anything but the user or a
            // migration: that needs the job.
            DomainState::Paused => {
                status.is_paused_by_user() || status.reason == StateReason::Migration
            }
            _ => false,
        };
        settled.then(|| super::reply::Synced {
            domain: self.config.domain_name.clone(),
            action: super::reply::SyncAction::None,
            started_paused: false,
            after: Some(status),
            changes: Vec::new(),
            steps: super::reply::Steps::default(),
        })
    }

    /// What the sync job needs to change the running domain to `domain`;
    /// from now until the job ends, device removals go to it.
    pub(super) fn prepare_live_change(
        &mut self,
        vmi_json: &Value,
        vmi: &VirtualMachineInstance,
        domain: &Domain,
    ) -> LiveChange {
        let removals = self.hotplug.sync_started(vmi_json, domain);
        let memory = vmi.spec.domain.memory.as_ref();
        let guest_memory = memory
            .filter(|m| m.max_guest.is_some())
            .and_then(|m| m.guest.as_ref())
            .and_then(|q| q.floor().ok())
            .and_then(|bytes| u64::try_from(bytes).ok())
            .map(|bytes| (bytes, "spec.domain.memory.guest".to_string()));
        let disk_paths = vmi
            .spec
            .domain
            .devices
            .disks
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.clone(), format!("spec.domain.devices.disks[{i}]")))
            .collect();
        let info = self.hypervisor.info();
        let driver = info.driver;
        // Read from the start on; should that read not be in, the job
        // reads it.
        let hypervisor = self.hypervisor_version.get();
        let tcg = plan::Tcg {
            no_removal: hypervisor
                .and_then(|version| plan::tcg_vcpu_removal(&info.daemon_version, version)),
            vcpu_threads: self.hotplug.vcpu_threads,
        };
        let unread_stack = hypervisor
            .is_none()
            .then(|| (info.daemon_version.clone(), driver));
        LiveChange {
            vmi_domain: domain.clone(),
            hotplug_dir: self.config.dirs.hotplug_disks.clone(),
            guest_memory,
            disk_paths,
            affect: if self.domain.defined {
                Affect::LIVE_AND_CONFIG
            } else {
                Affect::LIVE
            },
            check_host: driver == crate::hypervisor::DriverKind::Qemu,
            unprivileged: (self.config.qemu_unprivileged()
                && driver == crate::hypervisor::DriverKind::Qemu)
                .then(|| (VfioHost::system(), Identity::current())),
            detach_timeout: self.timing.detach,
            removals,
            progress: self.hotplug.progress.clone(),
            tcg,
            unread_stack,
        }
    }

    /// A sync job ended: record what it applied, or that the domain may
    /// have changed.
    pub(super) fn on_sync_finished(&mut self, result: &super::jobs::JobResult) {
        let synced = match result {
            Ok(JobValue::Synced(synced)) => Some(synced),
            _ => None,
        };
        // What the plan refuses ([`refused`]) is refused before any step.
        let refused = result.as_ref().is_err_and(|e| {
            e.class == ErrorClass::InvalidArgument && e.desc.starts_with("arguments.vmi")
        });
        if self.hotplug.sync_ended(synced, refused)
            && let Some(vmi) = self.hotplug.applied_vmi()
        {
            self.record_applied(vmi);
        }
    }

    pub(super) fn on_hotplug_progress(&mut self, progress: Progress) {
        match progress {
            Progress::Volume(status) => self.set_volume_status(status),
        }
    }

    fn set_volume_status(&mut self, status: VolumeStatus) {
        if !self.hotplug.volume_changed(&status) {
            return;
        }
        log::info!(
            "manager: volume {} ({}) is {:?}: {}",
            status.name,
            status.target,
            status.phase,
            status.reason
        );
        self.publish(
            EventKind::VolumeStatusChanged,
            VolumeEvent {
                domain: &self.config.domain_name,
                hotpluggable: status.hotpluggable,
                name: &status.name,
                phase: status.phase,
                reason: &status.reason,
                target: &status.target,
            },
        );
    }

    /// libvirt removed a device: a running sync may be waiting for it, and
    /// a volume whose detach timed out earlier is finally gone.
    pub(super) fn hotplug_device_removed(&mut self, alias: &str) {
        self.hotplug.device_removed(alias);
        let name = alias.trim_start_matches("ua-");
        if let Some(status) = self.hotplug.volumes.get(name)
            && status.phase == VolumePhase::Detaching
        {
            let status = VolumeStatus {
                phase: VolumePhase::Detached,
                reason: "the guest released it".to_string(),
                ..status.clone()
            };
            self.set_volume_status(status);
        }
    }

    /// The kind of device a user alias names, from what the launcher
    /// applied or is applying; `None` when it does not know it.
    pub(super) fn applied_device_kind(&self, alias: &str) -> Option<&'static str> {
        let has = |a: &Option<crate::domxml::Alias>| a.as_ref().is_some_and(|a| a.name == alias);
        self.hotplug.known_domains().find_map(|domain| {
            if domain.devices.disks.iter().any(|d| has(&d.alias)) {
                Some("disk")
            } else if domain.devices.interfaces.iter().any(|i| has(&i.alias)) {
                Some("interface")
            } else if domain.devices.hostdevs.iter().any(|h| has(&h.alias)) {
                Some("hostdev")
            } else {
                None
            }
        })
    }

    /// The volumes for query-domain: the live domain's, with the phases of
    /// those in transition. A volume still detaching that the live domain
    /// no longer has is gone (its event was lost): said so now.
    pub(super) fn volume_statuses(&mut self, live: Vec<VolumeStatus>) -> Vec<VolumeStatus> {
        let mut by_name: BTreeMap<String, VolumeStatus> =
            live.into_iter().map(|v| (v.name.clone(), v)).collect();
        let gone: Vec<VolumeStatus> = self
            .hotplug
            .volumes
            .values()
            .filter(|v| v.phase == VolumePhase::Detaching && !by_name.contains_key(&v.name))
            .cloned()
            .collect();
        let job_running = self.hotplug.sync_running();
        for status in gone {
            // While a sync job runs, its own detach may still be waiting
            // for the event; the job reports it.
            if !job_running {
                self.set_volume_status(VolumeStatus {
                    phase: VolumePhase::Detached,
                    reason: "no longer in the domain".to_string(),
                    ..status
                });
            }
        }
        for (name, status) in &self.hotplug.volumes {
            by_name.insert(name.clone(), status.clone());
        }
        by_name.into_values().collect()
    }
}

/// The volumes of a live domain: every disk a VMI named (`ua-` alias).
pub(super) fn live_volumes(domain: &Domain, hotplug_dir: &std::path::Path) -> Vec<VolumeStatus> {
    domain
        .devices
        .disks
        .iter()
        .filter_map(|d| {
            let alias = d.alias.as_ref()?.name.strip_prefix("ua-")?;
            Some(VolumeStatus {
                name: alias.to_string(),
                target: d.target.dev.clone(),
                phase: VolumePhase::Ready,
                reason: String::new(),
                hotpluggable: plan::hotplug_image(d, hotplug_dir).is_some(),
            })
        })
        .collect()
}

/// The sync job's live part: read the live domain, plan, check, and run
/// each step. Returns what was done; a failure says what was done before
/// it, and the step that failed was not half done.
pub(super) fn apply_live(
    hv: &dyn Hypervisor,
    name: &str,
    change: &LiveChange,
    network: Option<&crate::network::NetworkJob>,
) -> Result<Vec<Change>, CommandError> {
    let (xml, _uuid) = hv.domain_xml(name).map_err(|e| hypervisor_error(&e))?;
    let live = Domain::from_xml(&xml).map_err(|e| {
        CommandError::internal(format!("cannot parse the domain XML libvirt returned: {e}"))
    })?;
    let desired = Desired {
        domain: &change.vmi_domain,
        hotplug_dir: &change.hotplug_dir,
        guest_memory: change.guest_memory.clone(),
        disk_paths: change.disk_paths.clone(),
        tcg: change.tcg.clone(),
    };
    let mut steps = plan::plan(&live, &desired).map_err(|e| refused(&e))?;
    let host = HostPaths::system();
    ready::check(&steps, change.check_host.then_some(&host))
        .map_err(|e| CommandError::invalid_argument(format!("sync: {}", e.message)))?;
    if change.check_host {
        set_cache_modes(&mut steps)?;
    }
    if let Some((vfio, who)) = &change.unprivileged {
        unprivileged::check_live_steps(&steps, &live, &change.vmi_domain, vfio, who)
            .map_err(|e| CommandError::new(ErrorClass::Unavailable, format!("sync: {e}")))?;
    }
    let mut done: Vec<Change> = Vec::new();
    let total = steps.len();
    for step in &steps {
        log::info!("manager: sync: {}", step.describe());
        let result = match (step, network) {
            (Step::AttachInterface { name: nic, .. }, Some(job)) => {
                attach_pod_interface(hv, name, step, nic, change, job)
            }
            // Once the guest let the NIC go, its bridge, tap and DHCP
            // server go too.
            (Step::DetachInterface { name: nic, .. }, Some(job)) => {
                run_step(hv, name, step, change).map(|()| {
                    job.release(nic);
                })
            }
            _ => run_step(hv, name, step, change),
        };
        if let Err(e) = result {
            return Err(midway(e, step, &done, total));
        }
        done.push(step.change());
    }
    Ok(done)
}

/// A plugged-in disk's cache and I/O modes, chosen from its image as at
/// the domain's start (KubeVirt's launcher does the same before it
/// attaches a disk).
fn set_cache_modes(steps: &mut [Step]) -> Result<(), CommandError> {
    for step in steps {
        let Step::AttachDisk { xml, .. } = step else {
            continue;
        };
        let mut domain = Domain::default();
        domain.devices.disks.push(
            crate::domxml::read::from_str(xml).map_err(|e| {
                CommandError::internal(format!("cannot read a disk's XML back: {e}"))
            })?,
        );
        crate::disks::set_cache_modes(
            &mut domain,
            &crate::disks::DiskPlan::default(),
            &mut crate::disks::HostProbe,
        )
        .map_err(|e| CommandError::invalid_argument(format!("sync: {e}")))?;
        *xml = Domain::device_xml("disk", &domain.devices.disks[0])
            .map_err(|e| CommandError::internal(format!("cannot write a disk's XML: {e}")))?;
    }
    Ok(())
}

/// Plugs in an interface on the pod network: its bridge, tap and DHCP
/// server are set up first, as when the domain starts, and the NIC gets
/// the MAC and MTU they decided; all of it goes again if libvirt refuses
/// the NIC. Interfaces without a tap (slirp, passt) are plugged in as they
/// are.
fn attach_pod_interface(
    hv: &dyn Hypervisor,
    name: &str,
    step: &Step,
    nic: &str,
    change: &LiveChange,
    job: &crate::network::NetworkJob,
) -> Result<(), CommandError> {
    let Some(active) = job.run_one(nic) else {
        return run_step(hv, name, step, change);
    };
    let active = active.map_err(|e| {
        CommandError::new(
            ErrorClass::Unavailable,
            format!("cannot set up the pod network for it: {e}"),
        )
    })?;
    let mut one = Domain::default();
    one.devices.interfaces = change
        .vmi_domain
        .devices
        .interfaces
        .iter()
        .filter(|i| {
            i.alias
                .as_ref()
                .is_some_and(|a| a.name == format!("ua-{nic}"))
        })
        .cloned()
        .collect();
    crate::network::setup::patch_domain(&mut one, &active);
    let Some(interface) = one.devices.interfaces.first() else {
        return run_step(hv, name, step, change);
    };
    let xml = Domain::device_xml("interface", interface)
        .map_err(|e| CommandError::internal(e.message))?;
    hv.attach_device(name, &xml, change.affect)
        .map_err(|e| hypervisor_error(&e))?;
    job.add(active);
    Ok(())
}

/// A step's failure, with what was done before it.
fn midway(e: CommandError, step: &Step, done: &[Change], total: usize) -> CommandError {
    let before = if done.is_empty() {
        "nothing was changed before it".to_string()
    } else {
        let list: Vec<String> = done
            .iter()
            .map(|c| match &c.name {
                Some(name) => format!("{} {name}", c.change),
                None => c.change.to_string(),
            })
            .collect();
        format!("done before it, and kept: {}", list.join(", "))
    };
    let after = total - done.len() - 1;
    let rest = if after == 0 {
        String::new()
    } else {
        format!("; the {after} change(s) after it were not tried")
    };
    CommandError {
        class: e.class,
        desc: format!(
            "sync: {} (change {} of {total}) failed: {}; {before}{rest}",
            step.describe(),
            done.len() + 1,
            e.desc
        ),
        causes: e.causes,
    }
}

fn send(change: &LiveChange, status: VolumeStatus) {
    let _ = change.progress.send(Progress::Volume(status));
}

fn volume(name: &str, target: &str, phase: VolumePhase, reason: impl Into<String>) -> VolumeStatus {
    VolumeStatus {
        name: name.to_string(),
        target: target.to_string(),
        phase,
        reason: reason.into(),
        hotpluggable: true,
    }
}

fn run_step(
    hv: &dyn Hypervisor,
    name: &str,
    step: &Step,
    change: &LiveChange,
) -> Result<(), CommandError> {
    let call_failed = |e: &crate::hypervisor::HypervisorError| hypervisor_error(e);
    match step {
        Step::AttachDisk {
            volume: vol,
            target,
            xml,
            ..
        } => {
            send(
                change,
                volume(vol, target, VolumePhase::Attaching, "sync is attaching it"),
            );
            match hv.attach_device(name, xml, change.affect) {
                Ok(()) => {
                    send(
                        change,
                        volume(vol, target, VolumePhase::Ready, "attached by sync"),
                    );
                    Ok(())
                }
                Err(e) => {
                    send(
                        change,
                        volume(
                            vol,
                            target,
                            VolumePhase::Detached,
                            format!("attaching failed: {e}"),
                        ),
                    );
                    Err(call_failed(&e))
                }
            }
        }
        Step::DetachDisk {
            volume: vol,
            alias,
            target,
            xml,
        } => {
            send(
                change,
                volume(vol, target, VolumePhase::Detaching, "sync is detaching it"),
            );
            if let Err(e) = hv.detach_device(name, xml, change.affect) {
                send(
                    change,
                    volume(
                        vol,
                        target,
                        VolumePhase::Ready,
                        format!("detaching failed: {e}"),
                    ),
                );
                return Err(call_failed(&e));
            }
            match wait_removed(hv, name, alias, change) {
                Ok(()) => {
                    send(
                        change,
                        volume(vol, target, VolumePhase::Detached, "the guest released it"),
                    );
                    Ok(())
                }
                Err(waited) => {
                    let why = format!(
                        "the guest has not released it after {} s; it stays attached until the guest lets it go",
                        waited.as_secs()
                    );
                    send(
                        change,
                        volume(vol, target, VolumePhase::Detaching, why.clone()),
                    );
                    Err(CommandError::new(ErrorClass::Timeout, why))
                }
            }
        }
        Step::AttachInterface { xml, .. } => hv
            .attach_device(name, xml, change.affect)
            .map_err(|e| call_failed(&e)),
        Step::DetachInterface { alias, xml, .. } => {
            hv.detach_device(name, xml, change.affect)
                .map_err(|e| call_failed(&e))?;
            wait_removed(hv, name, alias, change).map_err(|waited| {
                CommandError::new(
                    ErrorClass::Timeout,
                    format!(
                        "the guest has not released the interface after {} s; it stays plugged in until the guest lets it go",
                        waited.as_secs()
                    ),
                )
            })
        }
        Step::AttachHostDevice {
            name: dev,
            host_address,
            xml,
            ..
        } => hv.attach_device(name, xml, change.affect).map_err(|e| {
            let err = call_failed(&e);
            CommandError {
                desc: format!(
                    "host device {dev:?} (host address {host_address}): {}",
                    err.desc
                ),
                ..err
            }
        }),
        Step::DetachHostDevice { alias, xml, .. } => {
            hv.detach_device(name, xml, change.affect)
                .map_err(|e| call_failed(&e))?;
            wait_removed(hv, name, alias, change).map_err(|waited| {
                CommandError::new(
                    ErrorClass::Timeout,
                    format!(
                        "the guest has not released the host device after {} s; it stays plugged in until the guest lets it go",
                        waited.as_secs()
                    ),
                )
            })
        }
        Step::SetVcpus { from, to } => match hv.set_vcpus(name, *to, change.affect) {
            // libvirt waits 5 s for the guest to give a vCPU back, then
            // says "timed out" and lets the unplug finish later: wait for
            // it as for any device the guest has to release. Under TCG,
            // where the stack can take a vCPU away at all, QEMU never
            // tells libvirt the vCPU is gone: libvirt sees it when asked
            // again, so the wait asks again.
            Err(e) if e.kind == HypervisorErrorKind::Timeout => {
                let ask_again = to < from && change.tcg.no_removal.is_none();
                wait_vcpus(hv, name, *to, change.detach_timeout, ask_again).map_err(|waited| {
                    CommandError::new(
                        ErrorClass::Timeout,
                        format!(
                            "the guest has not given the vCPUs back after {} s; libvirt removes them when it does",
                            waited.as_secs()
                        ),
                    )
                    .with_cause(e.to_string())
                })?;
                // The live change timed out before libvirt changed the
                // persistent definition: change it now.
                if change.affect.config {
                    hv.set_vcpus(name, *to, Affect::CONFIG)
                        .map_err(|e| call_failed(&e))?;
                }
                Ok(())
            }
            other => other.map_err(|e| call_failed(&e)),
        },
        Step::ResizeMemory { xml, .. } => {
            // KubeVirt changes the requested size live only; the persistent
            // definition follows where libvirt can change it too.
            match hv.update_device(name, xml, change.affect) {
                Err(e) if change.affect.config && e.kind != HypervisorErrorKind::NoDomain => {
                    log::info!(
                        "manager: resizing virtio-mem in the persistent definition failed ({e}); changing the running guest only"
                    );
                    hv.update_device(name, xml, Affect::LIVE)
                        .map_err(|e| call_failed(&e))
                }
                other => other.map_err(|e| call_failed(&e)),
            }
        }
    }
}

/// Waits for libvirt to say the guest released `alias`; returns how long
/// it waited when it did not within the deadline.
fn wait_removed(
    hv: &dyn Hypervisor,
    name: &str,
    alias: &str,
    change: &LiveChange,
) -> Result<(), Duration> {
    let started = Instant::now();
    let deadline = started + change.detach_timeout;
    loop {
        match change.removals.recv_deadline(deadline) {
            Ok(removed) if removed == alias => return Ok(()),
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    // An event can be lost (a full queue, a reconnect): ask libvirt once
    // before saying the guest refused.
    if let Ok((xml, _)) = hv.domain_xml(name)
        && let Ok(live) = Domain::from_xml(&xml)
        && !has_alias(&live, alias)
    {
        return Ok(());
    }
    Err(started.elapsed())
}

/// Waits until the live domain has `count` vCPUs enabled; returns how long
/// it waited when it did not within `timeout`. With `ask_again`, an
/// emulated domain is asked for `count` again every few seconds (libvirt
/// counts a vCPU gone under TCG only when it looks again: a request that
/// finds the guest has not ejected it yet times out once more).
fn wait_vcpus(
    hv: &dyn Hypervisor,
    name: &str,
    count: u32,
    timeout: Duration,
    ask_again: bool,
) -> Result<(), Duration> {
    let started = Instant::now();
    let mut asked = Instant::now();
    loop {
        let live = hv
            .domain_xml(name)
            .ok()
            .and_then(|(xml, _)| Domain::from_xml(&xml).ok());
        if let Some(live) = &live
            && live.vcpu.as_ref().map(|v| v.current.unwrap_or(v.count)) == Some(count)
        {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(started.elapsed());
        }
        let emulated = live.as_ref().is_some_and(|d| d.domain_type == "qemu");
        if ask_again && emulated && asked.elapsed() >= VCPU_ASK_AGAIN {
            asked = Instant::now();
            match hv.set_vcpus(name, count, Affect::LIVE) {
                Ok(()) => log::info!("manager: asked again, libvirt took the vCPUs away"),
                Err(e) => log::info!("manager: vCPUs asked for again: {e}"),
            }
            continue;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How often a vCPU removal under TCG is asked for again while the wait
/// runs.
const VCPU_ASK_AGAIN: Duration = Duration::from_secs(1);

fn has_alias(domain: &Domain, alias: &str) -> bool {
    let is = |a: &Option<crate::domxml::Alias>| a.as_ref().is_some_and(|a| a.name == alias);
    domain.devices.disks.iter().any(|d| is(&d.alias))
        || domain.devices.interfaces.iter().any(|i| is(&i.alias))
        || domain.devices.hostdevs.iter().any(|h| is(&h.alias))
}

#[cfg(test)]
mod tests;
