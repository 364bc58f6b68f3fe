//! What each command returns, as typed values (Firecracker's `VmmData` in
//! spirit): the manager and the connection build a [`Return`], the JSON
//! server encodes it once when it writes the reply line, and the gRPC front
//! end reads the same values.
//!
//! The wire writes every object's keys in byte order (what a JSON map of
//! the same members gives, and what docs/protocol.md shows), so each
//! struct here declares its fields in that order. Members that are other
//! modules' types (agent data, plan steps, addresses) are written through
//! [`sorted`], which gives their keys the same order whatever their
//! declaration says. The tests check both.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::{Error as _, Serializer};
use serde_json::{Map, Value};

use crate::agent::model::{GuestFilesystem, GuestInterface, GuestOsInfo, GuestUser};
use crate::hypervisor::DomainStatus;
use crate::migration::MigrationStatus;
use crate::protocol::Encoded;

/// Writes `value` with the keys of every object in byte order, as a JSON
/// map of the same members would be written.
pub fn sorted<T: Serialize, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(S::Error::custom)?
        .serialize(serializer)
}

/// The object a successful command returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Return {
    /// `{}`: success with nothing to say.
    Empty(Empty),
    // The connection's own commands.
    Commands(CommandList),
    Subscribed(Subscribed),
    Unsubscribed(Unsubscribed),
    // The domain.
    Version(Version),
    Status(Box<Status>),
    Operated(Operated),
    Synced(Synced),
    Domain(Box<DomainReply>),
    Stats(StatsReply),
    VmStats(Box<VmStats>),
    QemuVersion(QemuVersion),
    DirtyRate(DirtyRate),
    Screenshot(Screenshot),
    // The guest agent.
    /// `query-guest-info`: KubeVirt's VirtualMachineInstanceGuestAgentInfo,
    /// as the agent's cache builds it.
    GuestInfo(Value),
    Users(Users),
    Filesystems(Filesystems),
    Interfaces(Interfaces),
    OsInfo(OsInfo),
    Executed(Executed),
    Frozen(Frozen),
    Thawed(Thawed),
    // Migration and the memory dump.
    Migration(Box<MigrationReply>),
    TargetPrepared(TargetPrepared),
    MigrationStarted(MigrationStarted),
    Cancelling(Cancelling),
    Finalized(Finalized),
    Dumped(Dumped),
    /// `memory-dump`: the dump's record as it starts.
    MemoryDump(MemoryDumpStatus),
    // Backups and checkpoints.
    Backup(Box<BackupStatus>),
    BackupStarted(BackupStarted),
    Checkpoints(Checkpoints),
    CheckpointValidity(CheckpointValidity),
    /// `upgrade`.
    Upgrading(Upgrading),
}

impl Default for Return {
    fn default() -> Return {
        Return::Empty(Empty {})
    }
}

impl Return {
    /// `{}`.
    pub fn new() -> Return {
        Return::default()
    }

    /// The bytes of the members carried encoded, for the reply line's
    /// buffer.
    pub fn encoded_bytes(&self) -> usize {
        let len = |e: &Option<Encoded>| e.as_ref().map_or(0, |e| e.get().len());
        match self {
            Return::Domain(domain) => len(&domain.spec) + len(&domain.xml),
            Return::Stats(stats) => stats.stats.get().len(),
            Return::VmStats(vm) => match &vm.domain_stats {
                Some(Part::Read(stats)) => stats.stats.get().len(),
                _ => 0,
            },
            _ => 0,
        }
    }

    /// `query-domain`'s reply, when this is one.
    pub fn as_domain(&self) -> Option<&DomainReply> {
        match self {
            Return::Domain(domain) => Some(domain),
            _ => None,
        }
    }

    /// `query-stats`' reply, when this is one.
    pub fn as_stats(&self) -> Option<&StatsReply> {
        match self {
            Return::Stats(stats) => Some(stats),
            _ => None,
        }
    }
}

/// `Return::as_name`: the reply of one command, when this is its reply;
/// for the front ends that read the typed values (the gRPC service).
macro_rules! reply_of {
    ($($(#[$doc:meta])* $name:ident => $variant:ident($ty:ty);)*) => {
        impl Return {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Option<&$ty> {
                    match self {
                        Return::$variant(reply) => Some(reply),
                        _ => None,
                    }
                }
            )*
        }
    };
}

reply_of! {
    /// `query-migration`'s reply.
    as_migration => Migration(MigrationReply);
    /// `query-status`' reply.
    as_status => Status(Status);
    /// `query-guest-info`'s reply (KubeVirt's guest agent info).
    as_guest_info => GuestInfo(Value);
    /// `query-users`' reply.
    as_users => Users(Users);
    /// `query-filesystems`' reply.
    as_filesystems => Filesystems(Filesystems);
    /// `query-interfaces`' reply.
    as_interfaces => Interfaces(Interfaces);
    /// `query-os-info`'s reply.
    as_os_info => OsInfo(OsInfo);
    /// `guest-exec`'s reply.
    as_executed => Executed(Executed);
    /// `query-dirty-rate`'s reply.
    as_dirty_rate => DirtyRate(DirtyRate);
    /// `query-qemu-version`'s reply.
    as_qemu_version => QemuVersion(QemuVersion);
    /// `screenshot`'s reply.
    as_screenshot => Screenshot(Screenshot);
    /// `query-vm-stats`' reply.
    as_vm_stats => VmStats(VmStats);
}

impl Return {
    /// The object as JSON values: for the front ends that read members by
    /// name, tests and logs; the socket writes the typed value.
    pub fn into_object(self) -> Map<String, Value> {
        match serde_json::to_value(&self) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        }
    }
}

macro_rules! variants {
    ($($variant:ident($type:ty)),* $(,)?) => {
        $(impl From<$type> for Return {
            fn from(value: $type) -> Return {
                Return::$variant(value.into())
            }
        })*
    };
}

variants!(
    Empty(Empty),
    Commands(CommandList),
    Subscribed(Subscribed),
    Unsubscribed(Unsubscribed),
    Version(Version),
    Status(Status),
    Operated(Operated),
    Synced(Synced),
    Domain(DomainReply),
    Stats(StatsReply),
    VmStats(VmStats),
    QemuVersion(QemuVersion),
    DirtyRate(DirtyRate),
    Screenshot(Screenshot),
    Users(Users),
    Filesystems(Filesystems),
    Interfaces(Interfaces),
    OsInfo(OsInfo),
    Executed(Executed),
    Frozen(Frozen),
    Thawed(Thawed),
    Migration(MigrationReply),
    TargetPrepared(TargetPrepared),
    MigrationStarted(MigrationStarted),
    Cancelling(Cancelling),
    Upgrading(Upgrading),
    Finalized(Finalized),
    Dumped(Dumped),
    MemoryDump(MemoryDumpStatus),
    Backup(BackupStatus),
    BackupStarted(BackupStarted),
    Checkpoints(Checkpoints),
    CheckpointValidity(CheckpointValidity),
);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Empty {}

/// `query-commands`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandList {
    pub commands: Vec<CommandSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandSummary {
    pub name: &'static str,
    pub summary: &'static str,
}

/// `subscribe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Subscribed {
    pub events: Vec<&'static str>,
    /// The number of the last event published before the subscription
    /// (0: none): every later one is delivered or counted as dropped.
    pub last_seq: u64,
    pub subscribed: bool,
}

/// `unsubscribe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Unsubscribed {
    pub subscribed: bool,
    pub was_subscribed: bool,
}

/// `query-version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Version {
    pub backend: &'static str,
    pub hypervisor: String,
    pub launcher: &'static str,
    pub libvirt: LibvirtVersion,
    pub protocol: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibvirtVersion {
    pub daemon: String,
    pub library: Option<String>,
    pub uri: String,
}

/// `query-status`: the launcher's own view, never a libvirt call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub agent: AgentStatus,
    /// The last backup's record.
    pub backup: Option<BackupStatus>,
    pub domain: DomainSummary,
    /// The exclusive job running.
    pub job: Option<&'static str>,
    pub libvirt: LibvirtStatus,
    pub memory_dump: Option<MemoryDumpStatus>,
    pub migration: Option<MigrationStatus>,
    pub phase: &'static str,
    /// The qemu-pr-helper of the VMI's LUN reservations; only while one
    /// runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pr_helper: Option<Value>,
    pub shutdown: Option<GraceWindow>,
    /// When the first `shutdown` command came (seconds since the epoch);
    /// absent before one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_requested: Option<f64>,
    pub uid: String,
    pub uptime_seconds: f64,
    /// The virtiofsd serving the VMI's filesystems; only for a VMI that
    /// shares some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtiofs: Option<Value>,
    pub vmi: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AgentStatus {
    pub connected: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DomainSummary {
    pub defined: bool,
    pub name: String,
    pub paused_by_user: bool,
    pub reason: &'static str,
    pub state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LibvirtStatus {
    pub connected: bool,
    /// The daemons the launcher spawned (their own report).
    pub spawned: Option<Value>,
    pub uri: String,
}

/// The graceful stop under way.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GraceWindow {
    pub remaining_seconds: f64,
    pub started_seconds_ago: f64,
}

/// The last memory dump, as `query-status` shows it: times in seconds
/// since the epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryDumpStatus {
    pub ended: Option<f64>,
    pub failure: Option<String>,
    pub path: std::path::PathBuf,
    pub phase: &'static str,
    /// Only while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<MemoryDumpProgress>,
    pub size_bytes: Option<u64>,
    pub started: f64,
}

/// How far a running dump is, from libvirt's job statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MemoryDumpProgress {
    pub memory_processed: u64,
    pub memory_total: u64,
}

/// A domain operation (pause, kill, ...): the state read after it (absent
/// when that read failed) and what the operation says besides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Operated {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi_power_button: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undefined: Option<bool>,
}

impl Operated {
    /// Shows `status` as the state after the operation.
    pub fn with_status(mut self, status: DomainStatus) -> Operated {
        self.state = Some(status.state.as_str());
        self.reason = Some(status.reason.as_str());
        self
    }
}

/// `sync`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Synced {
    pub action: &'static str,
    #[serde(serialize_with = "sorted")]
    pub changes: Vec<crate::hotplug::plan::Change>,
    pub domain: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    pub started_paused: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    /// Each step's milliseconds, by name.
    pub steps_ms: BTreeMap<&'static str, f64>,
}

/// `query-domain`: the members asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DomainReply {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// The disks with an I/O error, when that is what paused the domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_errors: Option<Vec<DiskErrorReply>>,
    /// The guest agent's last report of what KubeVirt shows in the
    /// domain's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest: Option<GuestReport>,
    pub name: String,
    /// The pod network's report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The parsed domain XML, encoded once per read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<Encoded>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<crate::manager::VolumeStatus>>,
    /// The domain XML as a JSON string, encoded once per read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xml: Option<Encoded>,
}

/// `query-domain`'s `guest`: what the guest agent last reported of the
/// OS, the interfaces and the freeze status (what KubeVirt's launcher puts
/// in the domain's status). Kept once the guest stops, as KubeVirt's
/// launcher keeps it; a new start of the domain empties it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GuestReport {
    /// `thawed` or `frozen`; `null` before the agent reported one.
    #[serde(rename = "fsFreezeStatus")]
    pub fs_freeze_status: Option<&'static str>,
    #[serde(serialize_with = "sorted")]
    pub interfaces: Vec<GuestInterface>,
    #[serde(serialize_with = "sorted")]
    pub os: Option<GuestOsInfo>,
}

/// A disk on which the guest met an I/O error (`query-domain`'s
/// `disk_errors`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskErrorReply {
    /// `no-space` (the storage behind the disk is full) or `io-error`.
    pub error: &'static str,
    /// The disk's target device.
    pub target: String,
    /// The VMI volume behind the disk (empty for a disk the VMI does not
    /// name).
    pub volume: String,
}

/// `query-stats`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsReply {
    pub age_ms: u64,
    pub domain: String,
    /// libvirt's statistics by name, encoded once per sample.
    pub stats: Encoded,
}

/// `query-vm-stats`: each part asked for, read or with why not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmStats {
    /// By agent command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<BTreeMap<String, Part<AgentReturn>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty_rate: Option<Part<AgedDirtyRate>>,
    pub domain: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain_stats: Option<Part<AgedStats>>,
    pub errors: Vec<String>,
    /// Present when the agent was asked about (`null`: unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_agent_version: Option<Option<String>>,
}

/// A part of `query-vm-stats`: what was read, or why it was not.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Part<T> {
    Read(T),
    Failed { error: String },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentReturn {
    pub age_ms: u64,
    /// What the guest agent returned, as it returned it.
    #[serde(rename = "return")]
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgedStats {
    pub age_ms: u64,
    pub stats: Encoded,
}

/// A dirty rate kept, with its age (the domain is the reply's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgedDirtyRate {
    pub age_ms: u64,
    pub calc_period_seconds: Value,
    pub calc_start_time: Value,
    pub megabytes_per_second: i64,
    pub mode: Value,
}

/// `query-qemu-version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QemuVersion {
    pub version: String,
}

/// `query-dirty-rate`: libvirt's figures as it reported them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirtyRate {
    pub calc_period_seconds: Value,
    pub calc_start_time: Value,
    pub domain: String,
    pub megabytes_per_second: i64,
    pub mode: Value,
}

impl DirtyRate {
    pub fn aged(&self, age_ms: u64) -> AgedDirtyRate {
        AgedDirtyRate {
            age_ms,
            calc_period_seconds: self.calc_period_seconds.clone(),
            calc_start_time: self.calc_start_time.clone(),
            megabytes_per_second: self.megabytes_per_second,
            mode: self.mode.clone(),
        }
    }
}

/// `screenshot`: a PNG, base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Screenshot {
    pub data: String,
    pub height: u32,
    pub mime: &'static str,
    pub size_bytes: usize,
    pub width: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Users {
    #[serde(serialize_with = "sorted")]
    pub users: Vec<GuestUser>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Filesystems {
    #[serde(serialize_with = "sorted")]
    pub filesystems: Vec<GuestFilesystem>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interfaces {
    #[serde(serialize_with = "sorted")]
    pub interfaces: Vec<GuestInterface>,
    /// The pod network's report.
    pub network: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OsInfo {
    pub hostname: Option<String>,
    #[serde(serialize_with = "sorted")]
    pub os: Option<GuestOsInfo>,
    pub timezone: String,
}

/// `guest-exec`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Executed {
    pub elapsed_seconds: f64,
    pub exit_code: Option<i64>,
    pub pid: i64,
    pub signal: Option<i64>,
    pub stderr: String,
    pub stderr_truncated: bool,
    pub stdout: String,
    pub stdout_truncated: bool,
}

/// `freeze`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Frozen {
    pub already_frozen: bool,
    pub frozen_filesystems: u64,
    pub unfreeze_timeout_seconds: u64,
}

/// `unfreeze` (and the safety thaw).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Thawed {
    pub thawed_filesystems: u64,
}

/// `query-migration`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationReply {
    pub migration: Option<MigrationStatus>,
}

/// `prepare-migration-target`: where the source sends the guest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetPrepared {
    #[serde(serialize_with = "sorted")]
    pub target: crate::migration::TargetAddress,
}

/// `migrate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationStarted {
    pub started: bool,
    pub target_uri: String,
}

/// `upgrade`: the new binary passed its check; the launcher execs it
/// once this reply is sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Upgrading {
    pub binary: std::path::PathBuf,
    /// The new binary's `--version`.
    pub version: String,
    /// The hand-over state the new launcher resumes from.
    pub state_file: std::path::PathBuf,
}

/// `migrate-cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cancelling {
    pub cancelling: bool,
}

/// `finalize-migration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finalized {
    pub finalized: bool,
    pub guest_time_sync: &'static str,
    /// The interfaces whose link went down and up (`refresh_links`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links_refreshed: Vec<String>,
}

/// A backup's record: `backup`'s reply and `query-status`' `backup`.
/// The backup module's own types are carried as their JSON values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackupStatus {
    pub checkpoint: String,
    pub disks: Value,
    pub ended: Option<f64>,
    pub failure: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    pub incremental: Option<String>,
    pub mode: Value,
    pub phase: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    pub started: f64,
}

/// The backup job's disks, before the manager answers with the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackupStarted {
    pub disks: Value,
}

/// `query-checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checkpoints {
    pub checkpoints: Vec<CheckpointXml>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointXml {
    pub name: String,
    pub xml: String,
}

/// `redefine-checkpoint`: whether libvirt took the checkpoint back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointValidity {
    pub checkpoint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub valid: bool,
}

/// `memory-dump`'s dump is written (the command itself answers `{}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dumped {
    pub size_bytes: u64,
}

/// Checks that `value` is written with every object's keys in byte order:
/// the same line as the JSON tree of the same members.
#[cfg(test)]
pub fn assert_keys_sorted<T: Serialize>(value: &T) {
    let line = serde_json::to_string(value).unwrap();
    let tree = serde_json::to_value(value).unwrap();
    assert_eq!(line, serde_json::to_string(&tree).unwrap());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypervisor::{DomainState, StateReason};

    #[test]
    fn every_reply_writes_its_keys_in_byte_order() {
        let encoded = Encoded::new(&serde_json::json!({"b": 1, "a": [2]}));
        let replies: Vec<Return> = vec![
            Return::new(),
            CommandList {
                commands: vec![CommandSummary {
                    name: "ping",
                    summary: "s",
                }],
            }
            .into(),
            Subscribed {
                events: vec!["X"],
                subscribed: true,
                last_seq: 7,
            }
            .into(),
            Unsubscribed {
                subscribed: false,
                was_subscribed: true,
            }
            .into(),
            Version {
                backend: "virt",
                hypervisor: "9.0.0".into(),
                launcher: "0.1.0",
                libvirt: LibvirtVersion {
                    daemon: "10".into(),
                    library: Some("10".into()),
                    uri: "test:///default".into(),
                },
                protocol: 1,
            }
            .into(),
            Status {
                agent: AgentStatus { connected: false },
                backup: Some(BackupStatus {
                    checkpoint: "cp1".into(),
                    disks: serde_json::json!([{"volume": "d", "target": "vda"}]),
                    ended: None,
                    failure: None,
                    format: Some("qcow2".into()),
                    incremental: None,
                    mode: "push".into(),
                    phase: "Running".into(),
                    progress: Some(serde_json::json!({"total": 2, "processed": 1})),
                    socket: None,
                    started: 1.0,
                }),
                domain: DomainSummary {
                    defined: true,
                    name: "ns_vm".into(),
                    paused_by_user: false,
                    reason: "Booted",
                    state: "Running",
                },
                job: Some("sync"),
                libvirt: LibvirtStatus {
                    connected: true,
                    spawned: None,
                    uri: "test:///default".into(),
                },
                memory_dump: Some(MemoryDumpStatus {
                    ended: None,
                    failure: None,
                    path: "/d".into(),
                    phase: "InProgress",
                    progress: Some(MemoryDumpProgress {
                        memory_processed: 1,
                        memory_total: 2,
                    }),
                    size_bytes: None,
                    started: 1.5,
                }),
                migration: None,
                phase: "Running",
                shutdown: Some(GraceWindow {
                    remaining_seconds: 1.0,
                    started_seconds_ago: 2.0,
                }),
                shutdown_requested: None,
                uid: "u".into(),
                uptime_seconds: 3.0,
                virtiofs: Some(serde_json::json!([{"name": "fs", "pid": 7}])),
                pr_helper: None,
                vmi: "ns/vm".into(),
            }
            .into(),
            Operated {
                acpi_power_button: Some(true),
                mode: Some("acpi"),
                undefined: Some(true),
                ..Operated::default()
            }
            .with_status(DomainStatus::new(DomainState::Running, StateReason::Booted))
            .into(),
            Synced {
                action: "none",
                changes: Vec::new(),
                domain: "ns_vm".into(),
                reason: Some("Booted"),
                started_paused: false,
                state: Some("Running"),
                steps_ms: BTreeMap::from([("start", 1.0), ("define", 2.0)]),
            }
            .into(),
            DomainReply {
                disk_errors: None,
                guest: Some(GuestReport::default()),
                age_ms: Some(1),
                name: "ns_vm".into(),
                network: Some(Value::Array(Vec::new())),
                reason: Some("Booted"),
                spec: Some(encoded.clone()),
                state: Some("Running"),
                uuid: Some("u".into()),
                volumes: Some(Vec::new()),
                xml: Some(Encoded::new("<domain/>")),
            }
            .into(),
            StatsReply {
                age_ms: 1,
                domain: "ns_vm".into(),
                stats: encoded.clone(),
            }
            .into(),
            VmStats {
                agent: Some(BTreeMap::from([
                    (
                        "guest-get-load".to_string(),
                        Part::Read(AgentReturn {
                            age_ms: 1,
                            value: serde_json::json!({"b": 1, "a": 2}),
                        }),
                    ),
                    (
                        "guest-get-cpustats".to_string(),
                        Part::Failed { error: "e".into() },
                    ),
                ])),
                dirty_rate: Some(Part::Read(
                    DirtyRate {
                        calc_period_seconds: Value::from(1),
                        calc_start_time: Value::from(2),
                        domain: "ns_vm".into(),
                        megabytes_per_second: 3,
                        mode: Value::from("page-sampling"),
                    }
                    .aged(4),
                )),
                domain: "ns_vm".into(),
                domain_stats: Some(Part::Read(AgedStats {
                    age_ms: 1,
                    stats: encoded,
                })),
                errors: vec!["x".into()],
                guest_agent_version: Some(None),
            }
            .into(),
            QemuVersion {
                version: "QEMU 9".into(),
            }
            .into(),
            Screenshot {
                data: "iVBO".into(),
                height: 1,
                mime: "image/png",
                size_bytes: 3,
                width: 2,
            }
            .into(),
            Executed {
                elapsed_seconds: 0.5,
                exit_code: Some(0),
                pid: 1,
                signal: None,
                stderr: String::new(),
                stderr_truncated: false,
                stdout: "x".into(),
                stdout_truncated: false,
            }
            .into(),
            Frozen {
                already_frozen: false,
                frozen_filesystems: 2,
                unfreeze_timeout_seconds: 60,
            }
            .into(),
            Thawed {
                thawed_filesystems: 2,
            }
            .into(),
            MigrationReply { migration: None }.into(),
            MigrationStarted {
                started: true,
                target_uri: "u".into(),
            }
            .into(),
            Cancelling { cancelling: true }.into(),
            Finalized {
                finalized: true,
                guest_time_sync: "started",
                links_refreshed: vec!["default".into()],
            }
            .into(),
            Dumped { size_bytes: 1 }.into(),
            BackupStarted {
                disks: serde_json::json!([{"volume": "d"}]),
            }
            .into(),
            Checkpoints {
                checkpoints: vec![CheckpointXml {
                    name: "cp1".into(),
                    xml: "<domaincheckpoint/>".into(),
                }],
            }
            .into(),
            CheckpointValidity {
                checkpoint: "cp1".into(),
                reason: Some("no bitmap".into()),
                valid: false,
            }
            .into(),
        ];
        for reply in &replies {
            assert_keys_sorted(reply);
        }
        assert_eq!(serde_json::to_string(&Return::new()).unwrap(), "{}");
    }
}
