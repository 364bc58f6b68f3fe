//! Events the launcher streams to subscribers: their names, and the hub
//! that fans them out to subscribed connections (`hub`).

pub mod hub;

use std::sync::Arc;

use serde::Serialize;

use crate::hypervisor::LifecycleEvent;
use crate::protocol::{Timestamp, encode_event};
pub use hub::{EventHub, EventsHandover, SubscribeRefusal, SubscriberQueue};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    DomainLifecycle,
    DomainReboot,
    AgentConnected,
    AgentDisconnected,
    DeviceAdded,
    DeviceRemoved,
    VolumeStatusChanged,
    JobCompleted,
    ShutdownStarted,
    ShutdownGraceExpired,
    LibvirtDisconnected,
    LibvirtReconnected,
    GuestInfoChanged,
    MigrationStarted,
    MigrationProgress,
    MigrationCompleted,
    MigrationFailed,
    MemoryDumpCompleted,
    MemoryDumpFailed,
    BackupCompleted,
    BackupFailed,
    EventsDropped,
}

impl EventKind {
    pub const ALL: [EventKind; 22] = [
        EventKind::DomainLifecycle,
        EventKind::DomainReboot,
        EventKind::AgentConnected,
        EventKind::AgentDisconnected,
        EventKind::DeviceAdded,
        EventKind::DeviceRemoved,
        EventKind::VolumeStatusChanged,
        EventKind::JobCompleted,
        EventKind::ShutdownStarted,
        EventKind::ShutdownGraceExpired,
        EventKind::LibvirtDisconnected,
        EventKind::LibvirtReconnected,
        EventKind::GuestInfoChanged,
        EventKind::MigrationStarted,
        EventKind::MigrationProgress,
        EventKind::MigrationCompleted,
        EventKind::MigrationFailed,
        EventKind::MemoryDumpCompleted,
        EventKind::MemoryDumpFailed,
        EventKind::BackupCompleted,
        EventKind::BackupFailed,
        EventKind::EventsDropped,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EventKind::DomainLifecycle => "DOMAIN_LIFECYCLE",
            EventKind::DomainReboot => "DOMAIN_REBOOT",
            EventKind::AgentConnected => "AGENT_CONNECTED",
            EventKind::AgentDisconnected => "AGENT_DISCONNECTED",
            EventKind::DeviceAdded => "DEVICE_ADDED",
            EventKind::DeviceRemoved => "DEVICE_REMOVED",
            EventKind::VolumeStatusChanged => "VOLUME_STATUS_CHANGED",
            EventKind::JobCompleted => "JOB_COMPLETED",
            EventKind::ShutdownStarted => "SHUTDOWN_STARTED",
            EventKind::ShutdownGraceExpired => "SHUTDOWN_GRACE_EXPIRED",
            EventKind::LibvirtDisconnected => "LIBVIRT_DISCONNECTED",
            EventKind::LibvirtReconnected => "LIBVIRT_RECONNECTED",
            EventKind::GuestInfoChanged => "GUEST_INFO_CHANGED",
            EventKind::MigrationStarted => "MIGRATION_STARTED",
            EventKind::MigrationProgress => "MIGRATION_PROGRESS",
            EventKind::MigrationCompleted => "MIGRATION_COMPLETED",
            EventKind::MigrationFailed => "MIGRATION_FAILED",
            EventKind::MemoryDumpCompleted => "MEMORY_DUMP_COMPLETED",
            EventKind::MemoryDumpFailed => "MEMORY_DUMP_FAILED",
            EventKind::BackupCompleted => "BACKUP_COMPLETED",
            EventKind::BackupFailed => "BACKUP_FAILED",
            EventKind::EventsDropped => "EVENTS_DROPPED",
        }
    }

    pub fn summary(self) -> &'static str {
        match self {
            EventKind::DomainLifecycle => {
                "libvirt lifecycle event: data has domain, event, detail, and the resulting state and reason."
            }
            EventKind::DomainReboot => {
                "The guest rebooted (libvirt may report one reboot more than once)."
            }
            EventKind::AgentConnected => "The QEMU guest agent in the guest connected.",
            EventKind::AgentDisconnected => {
                "The QEMU guest agent disconnected (data.reason says why)."
            }
            EventKind::DeviceAdded => {
                "A device was plugged into the running domain: data has its alias and kind."
            }
            EventKind::DeviceRemoved => {
                "A device was removed from the domain: data has its alias and kind."
            }
            EventKind::VolumeStatusChanged => {
                "A hotplugged volume changed phase (attaching, ready, detaching, detached): data has name, target, phase and reason."
            }

            EventKind::JobCompleted => {
                "A libvirt job (for example a migration) completed; data holds its statistics."
            }
            EventKind::ShutdownStarted => {
                "A signal started the graceful stop: data has the signal, grace_period_seconds and the deadline."
            }
            EventKind::ShutdownGraceExpired => {
                "The grace period ran out and the domain is being forced off."
            }
            EventKind::LibvirtDisconnected => {
                "The connection to the libvirt daemon was lost; the launcher reconnects."
            }
            EventKind::LibvirtReconnected => "The connection to the libvirt daemon is back.",
            EventKind::GuestInfoChanged => {
                "The guest's OS info, interfaces or filesystem freeze status changed: data has all three."
            }
            EventKind::MigrationStarted => {
                "A migration began: data has the role (source or target) and the target's libvirt URI."
            }
            EventKind::MigrationProgress => {
                "At most once a second while migrating: iteration, data processed, remaining and total, dirty rate, bandwidth."
            }
            EventKind::MigrationCompleted => {
                "The migration finished: data has the role and, on the source, libvirt's final statistics (downtime, total time)."
            }
            EventKind::MigrationFailed => {
                "The migration failed or was cancelled: data has the reason; the guest keeps running on the source."
            }
            EventKind::MemoryDumpCompleted => {
                "A memory dump finished: data has the path, its size in bytes and when it started and ended."
            }
            EventKind::MemoryDumpFailed => {
                "A memory dump failed: data has the path, the reason and when it started and ended."
            }
            EventKind::BackupCompleted => {
                "A backup ended as it should (a push backup wrote its files, a pull backup's export was ended): data is the backup as query-status shows it."
            }
            EventKind::BackupFailed => {
                "A backup failed or was aborted: data is the backup as query-status shows it, with the failure."
            }
            EventKind::EventsDropped => {
                "This subscriber fell behind and data.count older events were dropped."
            }
        }
    }

    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// An event ready for the wire. The line is encoded once and shared by all
/// subscribers.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: EventKind,
    /// Its number among the events the launcher published (from 1, kept
    /// across an upgrade); 0 until the hub publishes it.
    pub seq: u64,
    pub line: Arc<str>,
    /// For `DOMAIN_LIFECYCLE`, libvirt's event as the launcher read it:
    /// what a front end in the process reads instead of the line's JSON.
    pub lifecycle: Option<LifecycleEvent>,
}

impl Event {
    /// The event of `kind` with `data`, its typed payload.
    pub fn new(kind: EventKind, data: &impl Serialize) -> Event {
        Event {
            kind,
            seq: 0,
            line: encode_event(kind.name(), data, Timestamp::now()).into(),
            lifecycle: None,
        }
    }

    /// A published event's line as an upgrade handed it over (it names
    /// its `seq`); `None` if it does not read as one.
    pub fn from_published_line(line: &str) -> Option<Event> {
        #[derive(serde::Deserialize)]
        struct Head {
            seq: u64,
            event: String,
        }
        let head: Head = serde_json::from_str(line).ok()?;
        let kind = EventKind::from_name(&head.event)?;
        let line = if line.ends_with('\n') {
            line.to_string()
        } else {
            format!("{line}\n")
        };
        Some(Event {
            kind,
            seq: head.seq,
            line: line.into(),
            lifecycle: None,
        })
    }

    /// A `DOMAIN_LIFECYCLE` event: `data` on the wire, `lifecycle` for the
    /// process's own readers.
    pub fn lifecycle(lifecycle: LifecycleEvent, data: &impl Serialize) -> Event {
        Event {
            lifecycle: Some(lifecycle),
            ..Event::new(EventKind::DomainLifecycle, data)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut names = std::collections::HashSet::new();
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_name(kind.name()), Some(kind));
            assert!(names.insert(kind.name()));
        }
        assert_eq!(EventKind::from_name("nope"), None);
    }

    #[test]
    fn event_line_is_one_json_line() {
        let e = Event::new(EventKind::AgentConnected, &json!({"domain": "a_b"}));
        assert!(e.line.ends_with('\n'));
        assert_eq!(e.line.matches('\n').count(), 1);
        let v: Value = serde_json::from_str(&e.line).unwrap();
        assert_eq!(v["event"], "AGENT_CONNECTED");
        assert_eq!(v["data"]["domain"], "a_b");
        assert!(v["timestamp"]["seconds"].as_i64().unwrap() > 1_600_000_000);
    }
}
