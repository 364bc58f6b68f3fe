//! What jobs produce, as typed values: the manager's shared vocabulary,
//! a leaf that names no other module of the manager (reads of the domain,
//! statistics samples, operation results). The manager reads their fields (a
//! sync that started paused, a freeze's thaw timeout); they become JSON only
//! when they are written into a client's reply (`into_reply`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::command::{DomainFields, VmStatsQuery};
use crate::domxml::Domain;
use crate::hotplug::plan::Change;
use crate::hypervisor::{DomainStatus, RebootMode};
use crate::migration::TargetAddress;
use crate::protocol::{Encoded, Return};
use crate::replies;
use crate::replies::DirtyRate;
pub use crate::replies::{Executed, Frozen};

/// One read of the live domain.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LiveDomain {
    pub(super) uuid: String,
    pub(super) xml: String,
    /// The parsed XML.
    pub(super) domain: Arc<Domain>,
    /// `domain` as JSON, as replies carry it (`spec`), encoded once.
    pub(super) spec: Encoded,
    /// `xml` as a JSON string, encoded once (escaping a few kilobytes of
    /// XML for every reply cost more than the rest of a cached reply).
    pub(super) xml_json: Encoded,
    /// The disks with an I/O error, read when that paused the domain.
    pub(super) disk_errors: Vec<crate::hypervisor::DiskError>,
    pub(super) read: Instant,
}

/// A fresh read, as a job returns it.
#[derive(Debug, PartialEq)]
pub(super) struct DomainRead {
    pub(super) live: LiveDomain,
    /// The state read with it (`None`: the domain no longer exists).
    pub(super) status: Option<DomainStatus>,
    /// The cache's generation when the read started.
    pub(super) generation: u64,
    pub(super) fields: DomainFields,
}

/// A sample of the domain's statistics.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StatsSample {
    /// The statistics as a JSON object, encoded once for every reply.
    pub(super) encoded: Encoded,
    pub(super) taken: Instant,
}

impl StatsSample {
    pub(super) fn new(stats: &Map<String, Value>, taken: Instant) -> StatsSample {
        StatsSample {
            encoded: Encoded::new(stats),
            taken,
        }
    }
}

/// What a job read for a `query-vm-stats`.
#[derive(Debug, PartialEq)]
pub(super) struct VmStatsRead {
    pub(super) query: VmStatsQuery,
    pub(super) agent: Vec<(&'static str, Result<Value, String>)>,
    pub(super) stats: Option<(Result<StatsSample, String>, u64)>,
    pub(super) dirty_rate: Option<Result<DirtyRate, String>>,
    pub(super) taken: Instant,
}

/// A job's successful result.
#[derive(Debug, PartialEq)]
pub enum JobValue {
    /// Success with nothing to say: `{}`.
    Empty,
    /// A domain operation (pause, kill, ...), with the state libvirt
    /// reported after it.
    Operated(Operated),
    Synced(Synced),
    /// `query-domain`'s read, which the manager keeps and answers from.
    Described(Box<DomainRead>),
    /// A reply built already (`query-stats`, and `query-domain` once the
    /// manager kept its read).
    Reply(Return),
    /// `guest-exec`.
    Executed(Executed),
    /// `freeze`.
    Frozen(Frozen),
    /// `unfreeze` (and the safety thaw).
    Thawed {
        thawed_filesystems: u64,
    },
    /// `prepare-migration-target`: where the source sends the guest.
    TargetPrepared {
        target: TargetAddress,
    },
    /// What a `query-vm-stats` job read, which the manager keeps and
    /// answers from.
    VmStats(Box<VmStatsRead>),
    /// `memory-dump`'s dump is written.
    Dumped {
        size_bytes: u64,
    },
    /// `backup`'s job runs, over these disks.
    BackupStarted {
        disks: Vec<BackupDisk>,
    },
}

/// A domain operation that libvirt carried out.
#[derive(Debug, Clone, PartialEq)]
pub struct Operated {
    /// The state read after the operation: `None` when that read failed
    /// (the operation itself worked), `Some(None)` when the domain no
    /// longer exists.
    pub after: Option<Option<DomainStatus>>,
    pub detail: OperationDetail,
}

/// What an operation says besides the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationDetail {
    None,
    /// `shutdown`: the ACPI power button was pressed.
    AcpiPowerButton,
    /// `reboot`: how the guest was asked.
    Rebooted(RebootMode),
    /// `delete`: the definition is gone.
    Undefined,
}

/// What `sync` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncAction {
    None,
    DefinedAndStarted,
    RedefinedAndStarted,
    Resumed,
    /// The running domain was changed live (`changes` says how).
    Updated,
}

impl SyncAction {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncAction::None => "none",
            SyncAction::DefinedAndStarted => "defined-and-started",
            SyncAction::RedefinedAndStarted => "redefined-and-started",
            SyncAction::Resumed => "resumed",
            SyncAction::Updated => "updated",
        }
    }

    /// A new QEMU process was started.
    pub fn started(self) -> bool {
        matches!(
            self,
            SyncAction::DefinedAndStarted | SyncAction::RedefinedAndStarted
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Synced {
    pub domain: String,
    pub action: SyncAction,
    /// Started paused just now, as the VMI's startStrategy asks.
    pub started_paused: bool,
    /// The state after the sync, when it could be read.
    pub after: Option<DomainStatus>,
    /// What was changed in the running domain, in order.
    pub changes: Vec<Change>,
    /// How long each step took, in order.
    pub steps: Steps,
}

/// How long the steps of an operation took, in the order they ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Steps(pub Vec<(&'static str, Duration)>);

impl Steps {
    /// Runs `step` and records how long it took under `name`.
    pub fn time<T>(&mut self, name: &'static str, step: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = step();
        self.0.push((name, started.elapsed()));
        out
    }

    /// Milliseconds by name (a step that ran twice, as the hooks before
    /// and after the disks, summed), with microsecond resolution.
    pub fn milliseconds(&self) -> BTreeMap<&'static str, f64> {
        let mut sums = BTreeMap::new();
        for (name, took) in &self.0 {
            *sums.entry(*name).or_insert(Duration::ZERO) += *took;
        }
        sums.into_iter()
            .map(|(name, took)| (name, (took.as_secs_f64() * 1e6).round() / 1e3))
            .collect()
    }

    /// "plan 0.05 ms, define 12.1 ms, ..." for the log.
    pub fn describe(&self) -> String {
        self.0
            .iter()
            .map(|(name, took)| format!("{name} {:.2} ms", took.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl JobValue {
    /// The `return` object of the client's reply.
    pub fn into_reply(self) -> Return {
        match self {
            JobValue::Empty => Return::new(),
            JobValue::Reply(reply) => reply,
            JobValue::Operated(Operated { after, detail }) => {
                let mut reply = replies::Operated::default();
                match detail {
                    OperationDetail::None => {}
                    OperationDetail::AcpiPowerButton => reply.acpi_power_button = Some(true),
                    OperationDetail::Rebooted(mode) => {
                        reply.mode = Some(match mode {
                            RebootMode::GuestAgent => "guest-agent",
                            RebootMode::Acpi => "acpi",
                        });
                    }
                    OperationDetail::Undefined => reply.undefined = Some(true),
                }
                match after {
                    Some(status) => reply.with_status(status.unwrap_or(DomainStatus::NON_EXISTENT)),
                    None => reply,
                }
                .into()
            }
            JobValue::Synced(synced) => replies::Synced {
                action: synced.action.as_str(),
                changes: synced.changes,
                domain: synced.domain,
                reason: synced.after.map(|s| s.reason.as_str()),
                started_paused: synced.started_paused,
                state: synced.after.map(|s| s.state.as_str()),
                steps_ms: synced.steps.milliseconds(),
            }
            .into(),
            // The manager answers these itself (`on_domain_read`); a read
            // that reaches here has only its state to say.
            JobValue::Described(read) => replies::Operated::default()
                .with_status(read.status.unwrap_or(DomainStatus::NON_EXISTENT))
                .into(),
            JobValue::Executed(executed) => executed.into(),
            JobValue::Frozen(frozen) => frozen.into(),
            JobValue::Thawed { thawed_filesystems } => {
                replies::Thawed { thawed_filesystems }.into()
            }
            JobValue::TargetPrepared { target } => replies::TargetPrepared { target }.into(),
            JobValue::Dumped { size_bytes } => replies::Dumped { size_bytes }.into(),
            // The manager answers with the whole record (`on_backup_begun`).
            JobValue::BackupStarted { disks } => replies::BackupStarted {
                disks: serde_json::to_value(&disks).unwrap_or(Value::Null),
            }
            .into(),
            // The manager answers these itself (`vm_stats_reply`).
            JobValue::VmStats(_) => Return::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypervisor::{DomainState, StateReason};

    /// The `return` object as the socket writes it.
    fn line(value: JobValue) -> String {
        serde_json::to_string(&value.into_reply()).unwrap()
    }

    #[test]
    fn operations_show_the_state_after_and_their_own_fields() {
        let running = DomainStatus::new(DomainState::Running, StateReason::Booted);
        let reply = JobValue::Operated(Operated {
            after: Some(Some(running)),
            detail: OperationDetail::Rebooted(RebootMode::Acpi),
        });
        assert_eq!(
            line(reply),
            r#"{"mode":"acpi","reason":"Booted","state":"Running"}"#
        );
        // Gone after the operation.
        let reply = JobValue::Operated(Operated {
            after: Some(None),
            detail: OperationDetail::None,
        });
        assert_eq!(line(reply), r#"{"reason":"NonExistent","state":"NoState"}"#);
        // The read after failed: only the operation's own fields.
        let reply = JobValue::Operated(Operated {
            after: None,
            detail: OperationDetail::Undefined,
        });
        assert_eq!(line(reply), r#"{"undefined":true}"#);
        let reply = JobValue::Operated(Operated {
            after: Some(Some(running)),
            detail: OperationDetail::AcpiPowerButton,
        });
        assert_eq!(
            line(reply),
            r#"{"acpi_power_button":true,"reason":"Booted","state":"Running"}"#
        );
    }

    #[test]
    fn sync_reply_has_state_only_when_read() {
        let synced = Synced {
            domain: "ns_vm".into(),
            action: SyncAction::DefinedAndStarted,
            started_paused: true,
            after: Some(DomainStatus::new(DomainState::Paused, StateReason::User)),
            changes: Vec::new(),
            steps: Steps(vec![
                ("start", Duration::from_millis(250)),
                ("define", Duration::from_micros(12_345)),
            ]),
        };
        assert_eq!(
            line(JobValue::Synced(synced.clone())),
            r#"{"action":"defined-and-started","changes":[],"domain":"ns_vm","reason":"User","started_paused":true,"state":"Paused","steps_ms":{"define":12.345,"start":250.0}}"#
        );
        let unread = Synced {
            after: None,
            steps: Steps::default(),
            ..synced
        };
        assert_eq!(
            line(JobValue::Synced(unread)),
            r#"{"action":"defined-and-started","changes":[],"domain":"ns_vm","started_paused":true,"steps_ms":{}}"#
        );
    }

    #[test]
    fn guest_results_keep_their_wire_names() {
        let reply = JobValue::Frozen(Frozen {
            already_frozen: false,
            frozen_filesystems: 2,
            unfreeze_timeout_seconds: 60,
        });
        assert_eq!(
            line(reply),
            r#"{"already_frozen":false,"frozen_filesystems":2,"unfreeze_timeout_seconds":60}"#
        );
        let reply = JobValue::Executed(Executed {
            pid: 7,
            exit_code: Some(1),
            signal: None,
            stdout: "x".into(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            elapsed_seconds: 0.5,
        });
        assert_eq!(
            line(reply),
            r#"{"elapsed_seconds":0.5,"exit_code":1,"pid":7,"signal":null,"stderr":"","stderr_truncated":false,"stdout":"x","stdout_truncated":false}"#
        );
        assert_eq!(
            line(JobValue::Thawed {
                thawed_filesystems: 3
            }),
            r#"{"thawed_filesystems":3}"#
        );
        assert_eq!(line(JobValue::Empty), "{}");
    }
}

/// One disk of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct BackupDisk {
    /// The VMI's volume (and disk) name.
    pub(super) volume: String,
    /// The guest's device name, e.g. "vda".
    pub(super) target: String,
    /// Push mode: the file libvirt writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) file: Option<PathBuf>,
    /// Pull mode: the NBD export's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) export: Option<String>,
}
