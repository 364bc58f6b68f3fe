//! What jobs produce, as typed values. The manager reads their fields (a
//! sync that started paused, a freeze's thaw timeout); they become JSON only
//! when they are written into a client's reply (`into_reply`).

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::domain_cache::DomainRead;
use crate::hotplug::plan::Change;
use crate::hypervisor::{DomainStatus, RebootMode};
use crate::migration::TargetAddress;
use crate::protocol::Return;

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
    VmStats(Box<super::vm_stats::VmStatsRead>),
    /// `memory-dump`'s dump is written.
    Dumped {
        size_bytes: u64,
    },
    /// `backup`'s job runs, over these disks.
    BackupStarted {
        disks: Vec<super::backup::BackupDisk>,
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

    /// `{"name": milliseconds, ...}`, with microsecond resolution.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        for (name, took) in &self.0 {
            let ms = (took.as_secs_f64() * 1e6).round() / 1e3;
            map.insert((*name).to_string(), json!(ms));
        }
        Value::Object(map)
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Executed {
    pub pid: i64,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub elapsed_seconds: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Frozen {
    pub frozen_filesystems: u64,
    pub already_frozen: bool,
    pub unfreeze_timeout_seconds: u64,
}

/// `state` and `reason` as a reply shows them.
pub fn status_fields(status: DomainStatus) -> Map<String, Value> {
    object(json!({ "state": status.state.as_str(), "reason": status.reason.as_str() }))
}

pub fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn serialized(value: &impl Serialize) -> Map<String, Value> {
    serde_json::to_value(value).map(object).unwrap_or_default()
}

impl JobValue {
    /// The `return` object of the client's reply.
    pub fn into_reply(self) -> Return {
        match self {
            JobValue::Reply(reply) => reply,
            built => built.into_members().into(),
        }
    }

    fn into_members(self) -> Map<String, Value> {
        match self {
            JobValue::Empty => Map::new(),
            JobValue::Operated(Operated { after, detail }) => {
                let mut reply = match after {
                    Some(status) => status_fields(status.unwrap_or(DomainStatus::NON_EXISTENT)),
                    None => Map::new(),
                };
                match detail {
                    OperationDetail::None => {}
                    OperationDetail::AcpiPowerButton => {
                        reply.insert("acpi_power_button".into(), Value::Bool(true));
                    }
                    OperationDetail::Rebooted(mode) => {
                        let mode = match mode {
                            RebootMode::GuestAgent => "guest-agent",
                            RebootMode::Acpi => "acpi",
                        };
                        reply.insert("mode".into(), mode.into());
                    }
                    OperationDetail::Undefined => {
                        reply.insert("undefined".into(), Value::Bool(true));
                    }
                }
                reply
            }
            JobValue::Synced(synced) => {
                let mut reply = object(json!({
                    "domain": synced.domain,
                    "action": synced.action.as_str(),
                    "started_paused": synced.started_paused,
                    "changes": synced.changes,
                    "steps_ms": synced.steps.to_json(),
                }));
                if let Some(status) = synced.after {
                    reply.extend(status_fields(status));
                }
                reply
            }
            // The manager answers these itself (`on_domain_read`); a read
            // that reaches here has only its state to say.
            JobValue::Described(read) => {
                status_fields(read.status.unwrap_or(DomainStatus::NON_EXISTENT))
            }
            JobValue::Reply(reply) => reply.into_object(),
            JobValue::Executed(executed) => serialized(&executed),
            JobValue::Frozen(frozen) => serialized(&frozen),
            JobValue::Thawed { thawed_filesystems } => {
                object(json!({ "thawed_filesystems": thawed_filesystems }))
            }
            JobValue::TargetPrepared { target } => {
                object(json!({ "target": serde_json::to_value(&target).unwrap_or(Value::Null) }))
            }
            JobValue::Dumped { size_bytes } => object(json!({ "size_bytes": size_bytes })),
            // The manager answers with the whole record (`on_backup_begun`).
            JobValue::BackupStarted { disks } => object(json!({ "disks": disks })),
            // The manager answers these itself (`vm_stats_reply`).
            JobValue::VmStats(_) => Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypervisor::{DomainState, StateReason};

    #[test]
    fn operations_show_the_state_after_and_their_own_fields() {
        let running = DomainStatus::new(DomainState::Running, StateReason::Booted);
        let reply = JobValue::Operated(Operated {
            after: Some(Some(running)),
            detail: OperationDetail::Rebooted(RebootMode::Acpi),
        })
        .into_reply();
        assert_eq!(
            Value::Object(reply.into_object()),
            json!({"state": "Running", "reason": "Booted", "mode": "acpi"})
        );
        // Gone after the operation.
        let reply = JobValue::Operated(Operated {
            after: Some(None),
            detail: OperationDetail::None,
        })
        .into_reply();
        assert_eq!(
            Value::Object(reply.into_object()),
            json!({"state": "NoState", "reason": "NonExistent"})
        );
        // The read after failed: only the operation's own fields.
        let reply = JobValue::Operated(Operated {
            after: None,
            detail: OperationDetail::Undefined,
        })
        .into_reply();
        assert_eq!(
            Value::Object(reply.into_object()),
            json!({"undefined": true})
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
                ("define", Duration::from_micros(12_345)),
                ("start", Duration::from_millis(250)),
            ]),
        };
        assert_eq!(
            Value::Object(JobValue::Synced(synced.clone()).into_reply().into_object()),
            json!({"domain": "ns_vm", "action": "defined-and-started", "started_paused": true,
                   "changes": [], "state": "Paused", "reason": "User",
                   "steps_ms": {"define": 12.345, "start": 250.0}})
        );
        let unread = Synced {
            after: None,
            steps: Steps::default(),
            ..synced
        };
        assert_eq!(
            Value::Object(JobValue::Synced(unread).into_reply().into_object()),
            json!({"domain": "ns_vm", "action": "defined-and-started", "started_paused": true, "changes": [],
                   "steps_ms": {}})
        );
    }

    #[test]
    fn guest_results_keep_their_wire_names() {
        let reply = JobValue::Frozen(Frozen {
            frozen_filesystems: 2,
            already_frozen: false,
            unfreeze_timeout_seconds: 60,
        })
        .into_reply();
        assert_eq!(
            Value::Object(reply.into_object()),
            json!({"frozen_filesystems": 2, "already_frozen": false, "unfreeze_timeout_seconds": 60})
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
        })
        .into_reply()
        .into_object();
        assert_eq!(reply["exit_code"], 1);
        assert_eq!(reply["signal"], Value::Null);
        assert_eq!(reply["pid"], 7);
    }
}
