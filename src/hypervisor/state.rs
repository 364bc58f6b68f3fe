//! Domain states and lifecycle events under KubeVirt's names.
//!
//! libvirt reports states, reasons, events and details as small integers.
//! KubeVirt names them (`Running`/`Booted`, `Shutoff`/`Destroyed`, ...) and
//! operators know those names, so the wire uses them. These tables are pure
//! so they can be tested without libvirt.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DomainState {
    NoState,
    Running,
    Blocked,
    Paused,
    ShuttingDown,
    Shutoff,
    Crashed,
    PMSuspended,
}

impl DomainState {
    pub fn as_str(self) -> &'static str {
        match self {
            DomainState::NoState => "NoState",
            DomainState::Running => "Running",
            DomainState::Blocked => "Blocked",
            DomainState::Paused => "Paused",
            DomainState::ShuttingDown => "ShuttingDown",
            DomainState::Shutoff => "Shutoff",
            DomainState::Crashed => "Crashed",
            DomainState::PMSuspended => "PMSuspended",
        }
    }

    /// A QEMU process exists for the domain.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            DomainState::Running
                | DomainState::Blocked
                | DomainState::Paused
                | DomainState::ShuttingDown
                | DomainState::PMSuspended
        )
    }
}

/// A state with its reason, e.g. `Shutoff`/`Destroyed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DomainStatus {
    pub state: DomainState,
    pub reason: &'static str,
}

impl DomainStatus {
    /// What KubeVirt reports for a domain that does not exist.
    pub const NON_EXISTENT: DomainStatus = DomainStatus {
        state: DomainState::NoState,
        reason: "NonExistent",
    };

    /// From `virDomainGetState`'s state and reason.
    pub fn from_libvirt(state: u32, reason: i32) -> DomainStatus {
        let pick = |names: &[&'static str]| {
            usize::try_from(reason)
                .ok()
                .and_then(|i| names.get(i).copied())
                .unwrap_or("Unknown")
        };
        match state {
            1 => DomainStatus {
                state: DomainState::Running,
                reason: pick(&[
                    "Unknown",
                    "Booted",
                    "Migrated",
                    "Restored",
                    "FromSnapshot",
                    "Unpaused",
                    "MigrationCanceled",
                    "SaveCanceled",
                    "Wakeup",
                    "Crashed",
                    "PostCopy",
                    "PostCopyFailed",
                ]),
            },
            2 => DomainStatus {
                state: DomainState::Blocked,
                reason: "Unknown",
            },
            3 => DomainStatus {
                state: DomainState::Paused,
                reason: pick(&[
                    "Unknown",
                    "User",
                    "Migration",
                    "Save",
                    "Dump",
                    "IOError",
                    "Watchdog",
                    "FromSnapshot",
                    "ShuttingDown",
                    "Snapshot",
                    "Crashed",
                    "StartingUp",
                    "Postcopy",
                    "PostcopyFailed",
                    "APIError",
                ]),
            },
            4 => DomainStatus {
                state: DomainState::ShuttingDown,
                reason: pick(&["Unknown", "User"]),
            },
            5 => DomainStatus {
                state: DomainState::Shutoff,
                reason: pick(&[
                    "Unknown",
                    "Shutdown",
                    "Destroyed",
                    "Crashed",
                    "Migrated",
                    "Saved",
                    "Failed",
                    "FromSnapshot",
                    "Daemon",
                ]),
            },
            6 => DomainStatus {
                state: DomainState::Crashed,
                reason: pick(&["Unknown", "Panicked"]),
            },
            7 => DomainStatus {
                state: DomainState::PMSuspended,
                reason: "Unknown",
            },
            _ => DomainStatus {
                state: DomainState::NoState,
                reason: "Unknown",
            },
        }
    }
}

/// A libvirt lifecycle event, named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleEvent {
    pub event: &'static str,
    pub detail: &'static str,
    /// The state the domain is in after this event, when the event says.
    /// `None` for events that do not change whether the domain runs
    /// (Defined, Undefined of a running domain).
    pub status: Option<DomainStatus>,
}

impl LifecycleEvent {
    /// From `virConnectDomainEventCallback`'s event and detail.
    pub fn from_libvirt(event: i32, detail: i32) -> LifecycleEvent {
        let pick = |names: &[&'static str]| {
            usize::try_from(detail)
                .ok()
                .and_then(|i| names.get(i).copied())
                .unwrap_or("Unknown")
        };
        let status = |state, reason| Some(DomainStatus { state, reason });
        match event {
            0 => LifecycleEvent {
                event: "Defined",
                detail: pick(&["Added", "Updated", "Renamed", "FromSnapshot"]),
                status: None,
            },
            1 => LifecycleEvent {
                event: "Undefined",
                detail: pick(&["Removed", "Renamed"]),
                status: None,
            },
            2 => {
                let detail = pick(&[
                    "Booted",
                    "Migrated",
                    "Restored",
                    "FromSnapshot",
                    "Wakeup",
                    "Recreated",
                ]);
                // On a migration's target the domain is started paused,
                // waiting for the guest's state; it runs only at
                // Resumed/Migrated.
                let status = if detail == "Migrated" {
                    status(DomainState::Paused, "Migration")
                } else {
                    status(DomainState::Running, detail)
                };
                LifecycleEvent {
                    event: "Started",
                    detail,
                    status,
                }
            }
            3 => {
                let detail = pick(&[
                    "Paused",
                    "Migrated",
                    "IOError",
                    "Watchdog",
                    "Restored",
                    "FromSnapshot",
                    "APIError",
                    "Postcopy",
                    "PostcopyFailed",
                ]);
                // The paused *reason* uses different words than the event
                // detail for the two common cases.
                let reason = match detail {
                    "Paused" => "User",
                    "Migrated" => "Migration",
                    other => other,
                };
                LifecycleEvent {
                    event: "Suspended",
                    detail,
                    status: status(DomainState::Paused, reason),
                }
            }
            4 => {
                let detail = pick(&[
                    "Unpaused",
                    "Migrated",
                    "FromSnapshot",
                    "Postcopy",
                    "PostcopyFailed",
                ]);
                LifecycleEvent {
                    event: "Resumed",
                    detail,
                    status: status(DomainState::Running, detail),
                }
            }
            5 => {
                let detail = pick(&[
                    "Shutdown",
                    "Destroyed",
                    "Crashed",
                    "Migrated",
                    "Saved",
                    "Failed",
                    "FromSnapshot",
                    "Recreated",
                ]);
                LifecycleEvent {
                    event: "Stopped",
                    detail,
                    status: status(DomainState::Shutoff, detail),
                }
            }
            6 => LifecycleEvent {
                event: "Shutdown",
                detail: pick(&["Finished", "Guest", "Host"]),
                status: status(DomainState::ShuttingDown, "User"),
            },
            7 => LifecycleEvent {
                event: "PMSuspended",
                detail: pick(&["Memory", "Disk"]),
                status: status(DomainState::PMSuspended, "Unknown"),
            },
            8 => {
                let detail = pick(&["Panicked", "Crashloaded"]);
                LifecycleEvent {
                    event: "Crashed",
                    detail,
                    status: status(DomainState::Crashed, "Panicked"),
                }
            }
            _ => LifecycleEvent {
                event: "Unknown",
                detail: "Unknown",
                status: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_use_kubevirt_names() {
        let s = DomainStatus::from_libvirt(1, 1);
        assert_eq!((s.state, s.reason), (DomainState::Running, "Booted"));
        let s = DomainStatus::from_libvirt(3, 1);
        assert_eq!((s.state, s.reason), (DomainState::Paused, "User"));
        let s = DomainStatus::from_libvirt(5, 2);
        assert_eq!((s.state, s.reason), (DomainState::Shutoff, "Destroyed"));
        let s = DomainStatus::from_libvirt(5, 6);
        assert_eq!((s.state, s.reason), (DomainState::Shutoff, "Failed"));
        let s = DomainStatus::from_libvirt(6, 1);
        assert_eq!((s.state, s.reason), (DomainState::Crashed, "Panicked"));
        // Out-of-range values from a newer libvirt do not panic.
        let s = DomainStatus::from_libvirt(5, 99);
        assert_eq!((s.state, s.reason), (DomainState::Shutoff, "Unknown"));
        let s = DomainStatus::from_libvirt(42, -1);
        assert_eq!((s.state, s.reason), (DomainState::NoState, "Unknown"));
    }

    #[test]
    fn lifecycle_events_carry_resulting_state() {
        let e = LifecycleEvent::from_libvirt(2, 0);
        assert_eq!((e.event, e.detail), ("Started", "Booted"));
        assert_eq!(e.status.map(|s| s.state), Some(DomainState::Running));
        let e = LifecycleEvent::from_libvirt(3, 0);
        assert_eq!(e.status.map(|s| s.reason), Some("User"));
        // An incoming migration starts paused; it runs at Resumed/Migrated.
        let e = LifecycleEvent::from_libvirt(2, 1);
        assert_eq!(
            e.status.map(|s| (s.state, s.reason)),
            Some((DomainState::Paused, "Migration"))
        );
        let e = LifecycleEvent::from_libvirt(4, 1);
        assert_eq!(
            e.status.map(|s| (s.state, s.reason)),
            Some((DomainState::Running, "Migrated"))
        );
        let e = LifecycleEvent::from_libvirt(5, 5);
        assert_eq!((e.event, e.detail), ("Stopped", "Failed"));
        assert_eq!(
            e.status,
            Some(DomainStatus {
                state: DomainState::Shutoff,
                reason: "Failed"
            })
        );
        let e = LifecycleEvent::from_libvirt(6, 1);
        assert_eq!((e.event, e.detail), ("Shutdown", "Guest"));
        let e = LifecycleEvent::from_libvirt(0, 0);
        assert_eq!((e.event, e.detail, e.status), ("Defined", "Added", None));
        let e = LifecycleEvent::from_libvirt(99, 99);
        assert_eq!(e.event, "Unknown");
    }

    #[test]
    fn active_states() {
        assert!(DomainState::Running.is_active());
        assert!(DomainState::Paused.is_active());
        assert!(!DomainState::Shutoff.is_active());
        assert!(!DomainState::Crashed.is_active());
        assert!(!DomainState::NoState.is_active());
    }
}
