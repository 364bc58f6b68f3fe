//! Live migration between two launchers, as KubeVirt's DomainManager does
//! it: the target prepares (`prepare-migration-target`), the source
//! migrates peer to peer to the target's libvirt daemon (`migrate`), and
//! the target finalizes (`finalize-migration`). The source's side runs on
//! a worker thread (see `worker`), never on the manager thread.

pub mod hook;
pub mod worker;

use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domxml::Domain;
use crate::hypervisor::Stat;

/// KubeVirt's MigrationOptions, under the names of this protocol.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationOptions {
    /// Where the guest goes: `prepare-migration-target`'s reply.
    pub target: TargetAddress,
    /// Bandwidth cap in MiB/s; unset: unlimited.
    #[serde(default)]
    pub bandwidth_mib_per_s: Option<u64>,
    /// Seconds allowed per GiB of guest memory before giving up (or
    /// switching to post-copy).
    #[serde(default = "default_completion_timeout_per_gib")]
    pub completion_timeout_per_gib: u64,
    /// Seconds without progress before giving up (or post-copy).
    #[serde(default = "default_progress_timeout")]
    pub progress_timeout: u64,
    #[serde(default)]
    pub max_downtime_ms: Option<u64>,
    #[serde(default)]
    pub allow_auto_converge: bool,
    #[serde(default)]
    pub allow_post_copy: bool,
    #[serde(default, rename = "unsafe")]
    pub unsafe_migration: bool,
    /// Set only by KubeVirt's `MigrateVirtualMachine` (never read from the
    /// JSON protocol): what KubeVirt's launcher decides from the VMI.
    #[serde(skip)]
    pub kubevirt: Option<KubeVirtMigration>,
}

/// What KubeVirt's `MigrateVirtualMachine` adds to a migration: the
/// migration's identity, the disks its VMI says to copy, and the options
/// the JSON protocol has no name for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeVirtMigration {
    /// The VMI's `status.migrationState` migration UID, kept in the
    /// domain's migration metadata.
    pub migration_uid: String,
    /// Target devices of the disks to copy (KubeVirt's
    /// `getDiskTargetsForMigration`): the domain goes with its own paths,
    /// the target pod has the same ones.
    pub copy_disks: Vec<String>,
    pub parallel_connections: Option<u32>,
    pub compression: Option<String>,
}

impl MigrationOptions {
    /// The range of each whole-number option (name, least, most), checked
    /// before the options are read. Bandwidth: 0 (as absent: unlimited) to
    /// 1 TiB/s. The timeouts: 0 (no limit) to ten years. Downtime: QEMU's
    /// own range, up to 2000 s.
    pub const INTEGER_RANGES: &'static [(&'static str, u64, u64)] = &[
        ("bandwidth_mib_per_s", 0, MAX_BANDWIDTH_MIB_PER_S),
        ("completion_timeout_per_gib", 0, crate::limits::MAX_SECONDS),
        ("progress_timeout", 0, crate::limits::MAX_SECONDS),
        ("max_downtime_ms", 0, MAX_DOWNTIME_MS),
    ];
}

/// `bandwidth_mib_per_s` at most: 1 TiB/s.
pub const MAX_BANDWIDTH_MIB_PER_S: u64 = 1 << 20;

/// `max_downtime_ms` at most: QEMU's `downtime-limit` takes up to 2000 s.
pub const MAX_DOWNTIME_MS: u64 = 2_000_000;

/// KubeVirt's defaults.
fn default_completion_timeout_per_gib() -> u64 {
    150
}

fn default_progress_timeout() -> u64 {
    150
}

/// How the source reaches the target: what `prepare-migration-target`
/// returns. Fields it does not know are ignored, not refused: the address
/// is one launcher's reply passed to another, which may be an older
/// version (a fleet moving to a new launcher by migration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetAddress {
    /// The target launcher's libvirt daemon.
    pub libvirt_uri: String,
    /// Where the guest's memory streams to (unix:///... on the target).
    #[serde(default)]
    pub migration_uri: Option<String>,
    /// Where local disks stream to.
    #[serde(default)]
    pub disks_uri: Option<String>,
    /// The target launcher's directories, so the source can give the
    /// domain the target's paths. Absent: same paths on both sides.
    #[serde(default)]
    pub paths: Option<LauncherPaths>,
    /// The target's libvirt daemon and hypervisor, so that a source on a
    /// newer stack can say why libvirt refused: a guest migrates only to
    /// the same or a newer libvirt and QEMU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<StackVersions>,
}

/// A launcher's runtime stack, as `query-version` names it (part of the
/// target's address: unknown fields ignored as there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackVersions {
    /// The libvirt daemon's version, e.g. "9.0.0".
    pub libvirt: String,
    /// The hypervisor's, e.g. "QEMU 7.2.22".
    pub hypervisor: String,
}

impl StackVersions {
    /// Why a migration from `ours` to `target` cannot be expected to
    /// work: the target's libvirt or hypervisor is older. `None` when
    /// neither is, or a version does not read.
    pub fn older_target(ours: &StackVersions, target: &StackVersions) -> Option<String> {
        let libvirt =
            |v: &StackVersions| crate::hypervisor::state::parse_libvirt_version(&v.libvirt);
        // "QEMU 7.2.22": the driver, then the version.
        let hypervisor = |v: &StackVersions| {
            let (driver, version) = v.hypervisor.rsplit_once(' ')?;
            Some((
                driver.to_string(),
                crate::hypervisor::state::parse_libvirt_version(version)?,
            ))
        };
        let older_libvirt = libvirt(target)? < libvirt(ours)?;
        let older_hypervisor = match (hypervisor(target), hypervisor(ours)) {
            (Some((theirs, t)), Some((mine, o))) => theirs == mine && t < o,
            _ => false,
        };
        (older_libvirt || older_hypervisor).then(|| {
            format!(
                "the target runs libvirt {} with {}, older than this launcher's libvirt {} with {}: \
                 libvirt and QEMU migrate a guest only to the same or a newer version",
                target.libvirt, target.hypervisor, ours.libvirt, ours.hypervisor
            )
        })
    }
}

/// The directories per-launcher files live in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LauncherPaths {
    pub private_dir: PathBuf,
    pub ephemeral_disk_dir: PathBuf,
    pub container_disk_dir: PathBuf,
    pub hotplug_disk_dir: PathBuf,
    pub uid: String,
    /// `--backend-storage-dir`, when given: a persistent EFI variable
    /// store there is the target's own (`nvram/<name>_VARS.fd`), where
    /// QEMU's pflash writes the migrated variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_storage_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Source,
    Target,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationPhase {
    /// Target: prepared, waiting for the domain.
    Prepared,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl MigrationPhase {
    /// The phase as replies write it.
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationPhase::Prepared => "prepared",
            MigrationPhase::Running => "running",
            MigrationPhase::Completed => "completed",
            MigrationPhase::Failed => "failed",
            MigrationPhase::Cancelled => "cancelled",
        }
    }
}

/// What the source's worker reports to the manager.
#[derive(Debug, Clone, PartialEq)]
pub enum MigrationUpdate {
    Progress(Vec<Stat>),
    SwitchedToPostCopy {
        reason: String,
    },
    Completed {
        stats: Vec<Stat>,
    },
    Failed {
        reason: String,
        cancelled: bool,
    },
    /// The target's versions, asked of its daemon after a failure when
    /// its address named none (virt-handler's does not): sent just
    /// before `Failed`.
    TargetStack(StackVersions),
}

/// The manager's record of a migration, for `query-migration` (handed to
/// a new launcher by `upgrade`, as its status: [`MigrationRecord::from_status`]).
#[derive(Debug, Clone)]
pub struct MigrationRecord {
    pub role: Role,
    pub phase: MigrationPhase,
    pub started: SystemTime,
    pub ended: Option<SystemTime>,
    pub target_uri: Option<String>,
    pub post_copy: bool,
    pub progress: Option<MigrationProgress>,
    pub failure: Option<String>,
    pub completed_stats: Option<Map<String, Value>>,
    /// KubeVirt's migration UID, when KubeVirt started this migration.
    pub migration_uid: Option<String>,
    /// A cancel's progress (KubeVirt's `MigrationAbortStatus`).
    pub abort: Option<AbortStatus>,
}

/// Where a cancel stands, with KubeVirt's words for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AbortStatus {
    Aborting,
    Succeeded,
    Failed,
}

impl MigrationRecord {
    pub fn new(role: Role, phase: MigrationPhase, target_uri: Option<String>) -> MigrationRecord {
        MigrationRecord {
            role,
            phase,
            started: SystemTime::now(),
            ended: None,
            target_uri,
            post_copy: false,
            progress: None,
            failure: None,
            completed_stats: None,
            migration_uid: None,
            abort: None,
        }
    }

    pub fn is_running(&self) -> bool {
        self.phase == MigrationPhase::Running
    }

    pub fn end(&mut self, phase: MigrationPhase) {
        self.phase = phase;
        self.ended = Some(SystemTime::now());
    }

    /// As `query-migration` and `query-status` show it.
    pub fn status(&self) -> MigrationStatus {
        let seconds = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        };
        let elapsed = self
            .ended
            .unwrap_or_else(SystemTime::now)
            .duration_since(self.started)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        MigrationStatus {
            abort: self.abort,
            completed: self.completed_stats.clone(),
            elapsed_seconds: elapsed,
            ended: self.ended.map(seconds),
            failure: self.failure.clone(),
            migration_uid: self.migration_uid.clone(),
            mode: self.mode(),
            phase: self.phase,
            progress: self.progress.clone(),
            role: self.role,
            started: seconds(self.started),
            target_uri: self.target_uri.clone(),
        }
    }

    /// An ended migration's record read back from its `status` (`upgrade`
    /// hands it over so); the progress figures are not kept (an ended
    /// migration's `completed` statistics say more). `None` for anything
    /// else.
    pub fn from_status(status: &Value) -> Option<MigrationRecord> {
        let text = |key: &str| status.get(key).and_then(Value::as_str);
        let owned = |key: &str| text(key).map(str::to_string);
        let time = |key: &str| {
            let seconds = status
                .get(key)?
                .as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0)?;
            SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs_f64(seconds))
        };
        let role = match text("role")? {
            "source" => Role::Source,
            "target" => Role::Target,
            _ => return None,
        };
        let phase = match text("phase")? {
            "completed" => MigrationPhase::Completed,
            "failed" => MigrationPhase::Failed,
            "cancelled" => MigrationPhase::Cancelled,
            _ => return None,
        };
        let abort = match text("abort") {
            Some("Aborting") => Some(AbortStatus::Aborting),
            Some("Succeeded") => Some(AbortStatus::Succeeded),
            Some("Failed") => Some(AbortStatus::Failed),
            _ => None,
        };
        Some(MigrationRecord {
            role,
            phase,
            started: time("started")?,
            ended: time("ended"),
            target_uri: owned("target_uri"),
            post_copy: text("mode") == Some("post-copy"),
            progress: None,
            failure: owned("failure"),
            completed_stats: status.get("completed").and_then(Value::as_object).cloned(),
            migration_uid: owned("migration_uid"),
            abort,
        })
    }

    /// "pre-copy", or "post-copy" once switched.
    pub fn mode(&self) -> &'static str {
        if self.post_copy {
            "post-copy"
        } else {
            "pre-copy"
        }
    }
}

/// A migration as `query-migration` shows it (keys in byte order, as
/// every reply writes them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationStatus {
    /// A cancel's progress (KubeVirt's `MigrationAbortStatus`).
    pub abort: Option<AbortStatus>,
    /// libvirt's final job statistics.
    pub completed: Option<Map<String, Value>>,
    pub elapsed_seconds: f64,
    pub ended: Option<f64>,
    pub failure: Option<String>,
    /// KubeVirt's migration UID, when KubeVirt started this migration.
    pub migration_uid: Option<String>,
    pub mode: &'static str,
    pub phase: MigrationPhase,
    pub progress: Option<MigrationProgress>,
    pub role: Role,
    pub started: f64,
    pub target_uri: Option<String>,
}

/// The figures a MIGRATION_PROGRESS event carries and `query-migration`
/// shows, from libvirt's job statistics as libvirt reported them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationProgress {
    pub data_processed: Value,
    pub data_remaining: Value,
    pub data_total: Value,
    pub disk_processed: Value,
    pub disk_remaining: Value,
    pub iteration: Value,
    pub memory_bps: Value,
    pub memory_dirty_rate: Value,
    /// "pre-copy" or "post-copy".
    pub mode: &'static str,
    pub time_elapsed_ms: Value,
}

impl MigrationProgress {
    /// The figures of `stats`, in `mode`.
    pub fn from_stats(stats: &[Stat], mode: &'static str) -> MigrationProgress {
        let get = |name: &str| {
            stats
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Null)
        };
        MigrationProgress {
            data_processed: get("data_processed"),
            data_remaining: get("data_remaining"),
            data_total: get("data_total"),
            disk_processed: get("disk_processed"),
            disk_remaining: get("disk_remaining"),
            iteration: get("memory_iteration"),
            memory_bps: get("memory_bps"),
            memory_dirty_rate: get("memory_dirty_rate"),
            mode,
            time_elapsed_ms: get("time_elapsed"),
        }
    }
}

/// The migration's UID as KubeVirt's launcher reads it from the VMI
/// (`status.migrationState`, the source's own state first).
pub fn kubevirt_migration_uid(vmi: &Value) -> Option<String> {
    let state = vmi.get("status")?.get("migrationState")?;
    state
        .get("sourceState")
        .and_then(|s| s.get("migrationUid"))
        .or_else(|| state.get("migrationUid"))
        .and_then(Value::as_str)
        .filter(|uid| !uid.is_empty())
        .map(str::to_string)
}

/// Gives the source's migratable XML the target launcher's paths: every
/// per-launcher file (console socket and log, cloud-init and config ISOs,
/// overlays, empty disks) lives in that launcher's own directories.
pub fn rewrite_paths(xml: &str, from: &LauncherPaths, to: &LauncherPaths) -> String {
    // Most specific first: the per-VMI directory inside the private one.
    let pairs = [
        (
            from.private_dir.join(&from.uid),
            to.private_dir.join(&to.uid),
        ),
        (from.private_dir.clone(), to.private_dir.clone()),
        (
            from.ephemeral_disk_dir.clone(),
            to.ephemeral_disk_dir.clone(),
        ),
        (
            from.container_disk_dir.clone(),
            to.container_disk_dir.clone(),
        ),
        (from.hotplug_disk_dir.clone(), to.hotplug_disk_dir.clone()),
    ];
    let backend = match (&from.backend_storage_dir, &to.backend_storage_dir) {
        (Some(from), Some(to)) => Some((from.clone(), to.clone())),
        _ => None,
    };
    let mut out = xml.to_string();
    // The backend-storage directory first: it may lie in another one.
    for (old, new) in backend.into_iter().chain(pairs) {
        let (old, new) = (old.display().to_string(), new.display().to_string());
        if old == new || old.is_empty() {
            continue;
        }
        // Only whole paths in attribute values or element text.
        for (lead, trail) in [
            ("'", "/"),
            ("\"", "/"),
            (">", "/"),
            ("'", "'"),
            ("\"", "\""),
            (">", "<"),
        ] {
            out = out.replace(
                &format!("{lead}{old}{trail}"),
                &format!("{lead}{new}{trail}"),
            );
        }
    }
    out
}

/// The disks only this launcher has (under its ephemeral directory:
/// containerDisk overlays, empty disks) that the guest can write: their
/// contents must be copied (block migration). Read-only ones (cloud-init
/// ISOs) the target makes itself.
pub fn local_disks(xml: &str, paths: &LauncherPaths) -> Vec<String> {
    let Ok(domain) = Domain::from_xml(xml) else {
        return Vec::new();
    };
    let ephemeral = paths.ephemeral_disk_dir.display().to_string();
    domain
        .devices
        .disks
        .iter()
        .filter(|d| d.readonly.is_none() && d.device.as_deref().unwrap_or("disk") == "disk")
        .filter(|d| {
            d.source
                .as_ref()
                .and_then(|s| s.file.as_deref())
                .is_some_and(|f| f.starts_with(&format!("{ephemeral}/")))
        })
        .map(|d| d.target.dev.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn phases_are_named_as_replies_write_them() {
        use MigrationPhase as P;
        for phase in [
            P::Prepared,
            P::Running,
            P::Completed,
            P::Failed,
            P::Cancelled,
        ] {
            assert_eq!(json!(phase), json!(phase.as_str()));
        }
    }

    #[test]
    fn a_target_address_from_a_newer_launcher_with_fields_unknown_here_is_accepted() {
        let address: TargetAddress = serde_json::from_value(serde_json::json!({
            "libvirt_uri": "qemu+unix:///system?socket=/run/t/libvirt-sock",
            "stack": {"libvirt": "11.3.0", "hypervisor": "QEMU 10.0.2", "firmware": "x"},
            "placement": {"node": 1}
        }))
        .expect("an address with extra fields");
        assert_eq!(
            address.libvirt_uri,
            "qemu+unix:///system?socket=/run/t/libvirt-sock"
        );
        assert_eq!(address.stack.map(|s| s.libvirt), Some("11.3.0".to_string()));
    }

    #[test]
    fn an_older_target_stack_is_named_and_a_newer_or_unreadable_one_is_not() {
        let stack = |libvirt: &str, hypervisor: &str| StackVersions {
            libvirt: libvirt.into(),
            hypervisor: hypervisor.into(),
        };
        let newer = stack("11.3.0", "QEMU 10.0.2");
        let older = stack("9.0.0", "QEMU 7.2.22");
        let why = StackVersions::older_target(&newer, &older).unwrap();
        assert_eq!(
            why,
            "the target runs libvirt 9.0.0 with QEMU 7.2.22, older than this launcher's \
             libvirt 11.3.0 with QEMU 10.0.2: libvirt and QEMU migrate a guest only to the \
             same or a newer version"
        );
        assert_eq!(StackVersions::older_target(&older, &newer), None);
        assert_eq!(StackVersions::older_target(&older, &older), None);
        // An older QEMU alone is enough; another driver is not compared.
        assert!(StackVersions::older_target(&newer, &stack("11.3.0", "QEMU 9.2.0")).is_some());
        assert_eq!(
            StackVersions::older_target(&newer, &stack("11.3.0", "TEST 0.0.2")),
            None
        );
        assert_eq!(
            StackVersions::older_target(&newer, &stack("x", "QEMU 7.2.0")),
            None
        );
    }

    fn paths(root: &str, uid: &str) -> LauncherPaths {
        LauncherPaths {
            private_dir: format!("{root}/private").into(),
            ephemeral_disk_dir: format!("{root}/eph").into(),
            container_disk_dir: format!("{root}/cd").into(),
            hotplug_disk_dir: format!("{root}/hp").into(),
            uid: uid.into(),
            backend_storage_dir: None,
        }
    }

    #[test]
    fn a_persistent_efi_store_moves_to_the_targets_backend_storage_dir() {
        let xml = "<os><nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'>/a/state/nvram/vm_VARS.fd</nvram></os>";
        let mut from = paths("/a", "u1");
        let mut to = paths("/b", "u2");
        // Without the target's directory (KubeVirt's pod daemons keep it
        // at the same path on both sides) nothing changes.
        from.backend_storage_dir = Some("/a/state".into());
        assert_eq!(rewrite_paths(xml, &from, &to), xml);
        to.backend_storage_dir = Some("/b/state".into());
        assert!(
            rewrite_paths(xml, &from, &to).contains(">/b/state/nvram/vm_VARS.fd<"),
            "{}",
            rewrite_paths(xml, &from, &to)
        );
    }

    #[test]
    fn rewrites_whole_paths_only() {
        let xml = "<serial type='unix'><source mode='bind' path='/a/private/u1/virt-serial0'/><log file='/a/private/u1/virt-serial0-log'/></serial>\
                   <disk><source file='/a/eph/disk-data/root/disk.qcow2'/></disk>\
                   <disk><source file='/a/private/config-map-disks/app.iso'/></disk>\
                   <disk><source file='/a/ephemeral-other/x'/></disk><nvram>/a/private/u1/nvram</nvram>";
        let out = rewrite_paths(xml, &paths("/a", "u1"), &paths("/b", "u2"));
        assert!(out.contains("path='/b/private/u2/virt-serial0'"));
        assert!(out.contains("file='/b/private/u2/virt-serial0-log'"));
        assert!(out.contains("file='/b/eph/disk-data/root/disk.qcow2'"));
        assert!(out.contains("file='/b/private/config-map-disks/app.iso'"));
        // A sibling directory sharing a prefix is left alone.
        assert!(out.contains("file='/a/ephemeral-other/x'"));
        assert!(out.contains("<nvram>/b/private/u2/nvram</nvram>"));
    }

    #[test]
    fn finds_writable_local_disks() {
        let xml = "<domain type='kvm'><name>x</name><memory>1</memory><os><type>hvm</type></os><devices>\
            <disk type='file' device='disk'><source file='/a/eph/disk-data/root/disk.qcow2'/><target dev='vda' bus='virtio'/></disk>\
            <disk type='file' device='disk'><source file='/a/eph/cloud-init-data/ns/n/noCloud.iso'/><target dev='vdb' bus='virtio'/><readonly/></disk>\
            <disk type='file' device='disk'><source file='/shared/data.img'/><target dev='vdc' bus='virtio'/></disk>\
            <disk type='file' device='disk'><source file='/a/eph/empty-disks/scratch.qcow2'/><target dev='vdd' bus='virtio'/></disk>\
            </devices></domain>";
        assert_eq!(local_disks(xml, &paths("/a", "u1")), vec!["vda", "vdd"]);
    }

    #[test]
    fn options_use_kubevirt_defaults_and_reject_unknown_keys() {
        let opts: MigrationOptions = serde_json::from_value(json!({
            "target": {"libvirt_uri": "qemu+unix:///system?socket=/x"}
        }))
        .unwrap();
        assert_eq!(
            (opts.completion_timeout_per_gib, opts.progress_timeout),
            (150, 150)
        );
        assert!(!opts.allow_post_copy && !opts.unsafe_migration);
        assert!(
            serde_json::from_value::<MigrationOptions>(json!({
                "target": {"libvirt_uri": "x"}, "bandwith": 5
            }))
            .is_err()
        );
    }
}
