//! Domain states, reasons and events under KubeVirt's names.
//!
//! libvirt reports states, reasons, lifecycle events, agent channel changes
//! and connection closes as small integers. KubeVirt names them
//! (`Running`/`Booted`, `Shutoff`/`Destroyed`, ...) and operators know
//! those names, so the wire uses them. Inside the launcher they are enums;
//! their names become strings only at the wire (`as_str`).
//!
//! The `from_libvirt` constructors here are the one place any backend turns
//! libvirt's numbers into values: the `virt` backend's callbacks and a
//! backend that reads libvirt's wire protocol both call them. They are pure,
//! so they are tested without libvirt, and a number from a newer libvirt
//! becomes `Unknown` instead of a panic.

/// Declares an enum whose variants are named as the wire names them, with
/// `as_str` giving that name.
macro_rules! wire_names {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// The name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }

            /// The value a name on the wire stands for (a reply read back
            /// by another front end).
            pub fn from_name(name: &str) -> Option<$name> {
                match name {
                    $(stringify!($variant) => Some($name::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

/// Declares an event detail: its variants in libvirt's order (numbered
/// from 0) and `Unknown` for numbers this version does not know.
macro_rules! libvirt_detail {
    ($(#[$meta:meta])* $name:ident { $($variant:ident),+ $(,)? }) => {
        wire_names! {
            $(#[$meta])*
            $name { $($variant,)+ Unknown }
        }

        impl $name {
            /// From libvirt's number for it.
            pub fn from_libvirt(number: i32) -> $name {
                const NUMBERED: &[$name] = &[$($name::$variant),+];
                numbered(NUMBERED, number).unwrap_or($name::Unknown)
            }
        }
    };
}

/// The entry for libvirt's `number` in a table numbered from 0.
fn numbered<T: Copy>(table: &[T], number: i32) -> Option<T> {
    usize::try_from(number)
        .ok()
        .and_then(|i| table.get(i).copied())
}

wire_names! {
    /// A domain's state (`virDomainState`).
    DomainState {
        NoState,
        Running,
        Blocked,
        Paused,
        ShuttingDown,
        Shutoff,
        Crashed,
        PMSuspended,
    }
}

impl DomainState {
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

wire_names! {
    /// Why a domain is in its state: KubeVirt's names for libvirt's state
    /// reasons, and the reasons lifecycle events leave behind. A few names
    /// differ only in case because KubeVirt spells them so (`PostCopy` for
    /// a running domain, `Postcopy` for a paused one); the wire keeps them.
    StateReason {
        Unknown,
        /// No such domain.
        NonExistent,
        Booted,
        Migrated,
        Restored,
        FromSnapshot,
        Unpaused,
        MigrationCanceled,
        SaveCanceled,
        Wakeup,
        Crashed,
        PostCopy,
        PostCopyFailed,
        Recreated,
        /// Paused by `virDomainSuspend` (the `pause` command) or started
        /// paused.
        User,
        Migration,
        Save,
        Dump,
        IOError,
        Watchdog,
        ShuttingDown,
        Snapshot,
        StartingUp,
        Postcopy,
        PostcopyFailed,
        APIError,
        Shutdown,
        Destroyed,
        Saved,
        Failed,
        Daemon,
        Panicked,
    }
}

/// A state with its reason, e.g. `Shutoff`/`Destroyed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainStatus {
    pub state: DomainState,
    pub reason: StateReason,
}

impl DomainStatus {
    /// What KubeVirt reports for a domain that does not exist.
    pub const NON_EXISTENT: DomainStatus = DomainStatus {
        state: DomainState::NoState,
        reason: StateReason::NonExistent,
    };

    pub const fn new(state: DomainState, reason: StateReason) -> DomainStatus {
        DomainStatus { state, reason }
    }

    /// Paused by the user: by `pause` (libvirt's `virDomainSuspend`), or
    /// started paused. `sync` never resumes such a domain.
    pub fn is_paused_by_user(self) -> bool {
        self.state == DomainState::Paused && self.reason == StateReason::User
    }

    /// From `virDomainGetState`'s state and reason.
    pub fn from_libvirt(state: i32, reason: i32) -> DomainStatus {
        use StateReason as R;
        let (state, reasons): (DomainState, &[StateReason]) = match state {
            1 => (
                DomainState::Running,
                &[
                    R::Unknown,
                    R::Booted,
                    R::Migrated,
                    R::Restored,
                    R::FromSnapshot,
                    R::Unpaused,
                    R::MigrationCanceled,
                    R::SaveCanceled,
                    R::Wakeup,
                    R::Crashed,
                    R::PostCopy,
                    R::PostCopyFailed,
                ],
            ),
            2 => (DomainState::Blocked, &[]),
            3 => (
                DomainState::Paused,
                &[
                    R::Unknown,
                    R::User,
                    R::Migration,
                    R::Save,
                    R::Dump,
                    R::IOError,
                    R::Watchdog,
                    R::FromSnapshot,
                    R::ShuttingDown,
                    R::Snapshot,
                    R::Crashed,
                    R::StartingUp,
                    R::Postcopy,
                    R::PostcopyFailed,
                    R::APIError,
                ],
            ),
            4 => (DomainState::ShuttingDown, &[R::Unknown, R::User]),
            5 => (
                DomainState::Shutoff,
                &[
                    R::Unknown,
                    R::Shutdown,
                    R::Destroyed,
                    R::Crashed,
                    R::Migrated,
                    R::Saved,
                    R::Failed,
                    R::FromSnapshot,
                    R::Daemon,
                ],
            ),
            6 => (DomainState::Crashed, &[R::Unknown, R::Panicked]),
            7 => (DomainState::PMSuspended, &[]),
            _ => (DomainState::NoState, &[]),
        };
        DomainStatus {
            state,
            reason: numbered(reasons, reason).unwrap_or(R::Unknown),
        }
    }
}

libvirt_detail! {
    /// `Defined`: the definition was added or changed.
    DefinedDetail { Added, Updated, Renamed, FromSnapshot }
}

libvirt_detail! {
    /// `Undefined`: the definition was removed.
    UndefinedDetail { Removed, Renamed }
}

libvirt_detail! {
    /// `Started`: a QEMU process now runs the domain.
    StartedDetail { Booted, Migrated, Restored, FromSnapshot, Wakeup, Recreated }
}

libvirt_detail! {
    /// `Suspended`: the domain's vCPUs stopped.
    SuspendedDetail {
        Paused,
        Migrated,
        IOError,
        Watchdog,
        Restored,
        FromSnapshot,
        APIError,
        Postcopy,
        PostcopyFailed,
    }
}

libvirt_detail! {
    /// `Resumed`: the domain's vCPUs run again.
    ResumedDetail { Unpaused, Migrated, FromSnapshot, Postcopy, PostcopyFailed }
}

libvirt_detail! {
    /// `Stopped`: the QEMU process is gone.
    StoppedDetail { Shutdown, Destroyed, Crashed, Migrated, Saved, Failed, FromSnapshot, Recreated }
}

libvirt_detail! {
    /// `Shutdown`: the guest is powering off.
    ShutdownDetail { Finished, Guest, Host }
}

libvirt_detail! {
    /// `PMSuspended`: the guest suspended itself.
    PMSuspendedDetail { Memory, Disk }
}

libvirt_detail! {
    /// `Crashed`: the guest panicked.
    CrashedDetail { Panicked, Crashloaded }
}

/// A libvirt lifecycle event with its detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleEvent {
    Defined(DefinedDetail),
    Undefined(UndefinedDetail),
    Started(StartedDetail),
    Suspended(SuspendedDetail),
    Resumed(ResumedDetail),
    Stopped(StoppedDetail),
    Shutdown(ShutdownDetail),
    PMSuspended(PMSuspendedDetail),
    Crashed(CrashedDetail),
    /// An event this version does not know.
    Unknown,
}

impl LifecycleEvent {
    /// From `virConnectDomainEventCallback`'s event and detail.
    pub fn from_libvirt(event: i32, detail: i32) -> LifecycleEvent {
        match event {
            0 => LifecycleEvent::Defined(DefinedDetail::from_libvirt(detail)),
            1 => LifecycleEvent::Undefined(UndefinedDetail::from_libvirt(detail)),
            2 => LifecycleEvent::Started(StartedDetail::from_libvirt(detail)),
            3 => LifecycleEvent::Suspended(SuspendedDetail::from_libvirt(detail)),
            4 => LifecycleEvent::Resumed(ResumedDetail::from_libvirt(detail)),
            5 => LifecycleEvent::Stopped(StoppedDetail::from_libvirt(detail)),
            6 => LifecycleEvent::Shutdown(ShutdownDetail::from_libvirt(detail)),
            7 => LifecycleEvent::PMSuspended(PMSuspendedDetail::from_libvirt(detail)),
            8 => LifecycleEvent::Crashed(CrashedDetail::from_libvirt(detail)),
            _ => LifecycleEvent::Unknown,
        }
    }

    /// The event's name on the wire (`DOMAIN_LIFECYCLE`'s `event`).
    pub fn name(self) -> &'static str {
        match self {
            LifecycleEvent::Defined(_) => "Defined",
            LifecycleEvent::Undefined(_) => "Undefined",
            LifecycleEvent::Started(_) => "Started",
            LifecycleEvent::Suspended(_) => "Suspended",
            LifecycleEvent::Resumed(_) => "Resumed",
            LifecycleEvent::Stopped(_) => "Stopped",
            LifecycleEvent::Shutdown(_) => "Shutdown",
            LifecycleEvent::PMSuspended(_) => "PMSuspended",
            LifecycleEvent::Crashed(_) => "Crashed",
            LifecycleEvent::Unknown => "Unknown",
        }
    }

    /// The detail's name on the wire (`DOMAIN_LIFECYCLE`'s `detail`).
    pub fn detail(self) -> &'static str {
        match self {
            LifecycleEvent::Defined(d) => d.as_str(),
            LifecycleEvent::Undefined(d) => d.as_str(),
            LifecycleEvent::Started(d) => d.as_str(),
            LifecycleEvent::Suspended(d) => d.as_str(),
            LifecycleEvent::Resumed(d) => d.as_str(),
            LifecycleEvent::Stopped(d) => d.as_str(),
            LifecycleEvent::Shutdown(d) => d.as_str(),
            LifecycleEvent::PMSuspended(d) => d.as_str(),
            LifecycleEvent::Crashed(d) => d.as_str(),
            LifecycleEvent::Unknown => "Unknown",
        }
    }

    /// The state the domain is in after this event, when the event says.
    /// `None` for events that do not change whether the domain runs
    /// (Defined, Undefined) and for unknown ones.
    pub fn status(self) -> Option<DomainStatus> {
        use StateReason as R;
        let status = |state, reason| Some(DomainStatus { state, reason });
        match self {
            LifecycleEvent::Defined(_) | LifecycleEvent::Undefined(_) => None,
            LifecycleEvent::Started(detail) => {
                let reason = match detail {
                    // On a migration's target the domain is started paused,
                    // waiting for the guest's state; it runs only at
                    // Resumed/Migrated.
                    StartedDetail::Migrated => {
                        return status(DomainState::Paused, R::Migration);
                    }
                    StartedDetail::Booted => R::Booted,
                    StartedDetail::Restored => R::Restored,
                    StartedDetail::FromSnapshot => R::FromSnapshot,
                    StartedDetail::Wakeup => R::Wakeup,
                    StartedDetail::Recreated => R::Recreated,
                    StartedDetail::Unknown => R::Unknown,
                };
                status(DomainState::Running, reason)
            }
            LifecycleEvent::Suspended(detail) => {
                // The paused *reason* uses other words than the event
                // detail for the two common cases.
                let reason = match detail {
                    SuspendedDetail::Paused => R::User,
                    SuspendedDetail::Migrated => R::Migration,
                    SuspendedDetail::IOError => R::IOError,
                    SuspendedDetail::Watchdog => R::Watchdog,
                    SuspendedDetail::Restored => R::Restored,
                    SuspendedDetail::FromSnapshot => R::FromSnapshot,
                    SuspendedDetail::APIError => R::APIError,
                    SuspendedDetail::Postcopy => R::Postcopy,
                    SuspendedDetail::PostcopyFailed => R::PostcopyFailed,
                    SuspendedDetail::Unknown => R::Unknown,
                };
                status(DomainState::Paused, reason)
            }
            LifecycleEvent::Resumed(detail) => {
                let reason = match detail {
                    ResumedDetail::Unpaused => R::Unpaused,
                    ResumedDetail::Migrated => R::Migrated,
                    ResumedDetail::FromSnapshot => R::FromSnapshot,
                    ResumedDetail::Postcopy => R::Postcopy,
                    ResumedDetail::PostcopyFailed => R::PostcopyFailed,
                    ResumedDetail::Unknown => R::Unknown,
                };
                status(DomainState::Running, reason)
            }
            LifecycleEvent::Stopped(detail) => {
                let reason = match detail {
                    StoppedDetail::Shutdown => R::Shutdown,
                    StoppedDetail::Destroyed => R::Destroyed,
                    StoppedDetail::Crashed => R::Crashed,
                    StoppedDetail::Migrated => R::Migrated,
                    StoppedDetail::Saved => R::Saved,
                    StoppedDetail::Failed => R::Failed,
                    StoppedDetail::FromSnapshot => R::FromSnapshot,
                    StoppedDetail::Recreated => R::Recreated,
                    StoppedDetail::Unknown => R::Unknown,
                };
                status(DomainState::Shutoff, reason)
            }
            LifecycleEvent::Shutdown(_) => status(DomainState::ShuttingDown, R::User),
            LifecycleEvent::PMSuspended(_) => status(DomainState::PMSuspended, R::Unknown),
            LifecycleEvent::Crashed(_) => status(DomainState::Crashed, R::Panicked),
            LifecycleEvent::Unknown => None,
        }
    }
}

wire_names! {
    /// Why the guest agent's channel changed
    /// (`virConnectDomainEventAgentLifecycleReason`).
    AgentChannelReason {
        Unknown,
        /// The domain (re)started: the channel was set up anew.
        DomainStarted,
        /// The agent in the guest opened or closed its end.
        Channel,
        /// Not libvirt's: the launcher read the channel's state from the
        /// domain after (re)connecting, because the event may have been
        /// missed.
        StateRead,
    }
}

impl AgentChannelReason {
    /// The sentence `AGENT_CONNECTED`/`AGENT_DISCONNECTED` carry as
    /// `reason`.
    pub fn describe(self) -> &'static str {
        match self {
            AgentChannelReason::Unknown => "unknown",
            AgentChannelReason::DomainStarted => "domain started",
            AgentChannelReason::Channel => "channel event",
            AgentChannelReason::StateRead => "channel state read from the domain",
        }
    }
}

/// The guest agent's channel connected or disconnected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLifecycle {
    pub connected: bool,
    pub reason: AgentChannelReason,
}

impl AgentLifecycle {
    /// From `virConnectDomainEventAgentLifecycleCallback`'s state
    /// (1 connected, 2 disconnected) and reason.
    pub fn from_libvirt(state: i32, reason: i32) -> AgentLifecycle {
        const REASONS: &[AgentChannelReason] = &[
            AgentChannelReason::Unknown,
            AgentChannelReason::DomainStarted,
            AgentChannelReason::Channel,
        ];
        AgentLifecycle {
            connected: state == 1,
            reason: numbered(REASONS, reason).unwrap_or(AgentChannelReason::Unknown),
        }
    }
}

wire_names! {
    /// Why the connection to the libvirt daemon closed
    /// (`virConnectCloseReason`, and the backend's own discovery).
    CloseReason {
        Error,
        /// The daemon went away.
        Eof,
        /// The daemon stopped answering keepalive probes.
        Keepalive,
        Client,
        /// A call failed because the connection is dead (the backend
        /// noticed before libvirt's close callback).
        CallFailed,
        /// A reason this version does not know.
        Unknown,
    }
}

impl CloseReason {
    /// From `virConnectCloseFunc`'s reason.
    pub fn from_libvirt(reason: i32) -> CloseReason {
        const REASONS: &[CloseReason] = &[
            CloseReason::Error,
            CloseReason::Eof,
            CloseReason::Keepalive,
            CloseReason::Client,
        ];
        numbered(REASONS, reason).unwrap_or(CloseReason::Unknown)
    }

    /// The sentence `LIBVIRT_DISCONNECTED` carries as `reason`.
    pub fn describe(self) -> &'static str {
        match self {
            CloseReason::Error => "error",
            CloseReason::Eof => "end of file (daemon gone)",
            CloseReason::Keepalive => "keepalive timeout",
            CloseReason::Client => "closed by client",
            CloseReason::CallFailed => "a libvirt call failed",
            CloseReason::Unknown => "unknown",
        }
    }
}

/// A libvirt version number (major * 1,000,000 + minor * 1,000 + micro)
/// as people write it: 9000000 is "9.0.0".
pub fn dotted_version(version: u64) -> String {
    format!(
        "{}.{}.{}",
        version / 1_000_000,
        (version / 1000) % 1000,
        version % 1000
    )
}

/// A libvirt version as libvirt encodes it: major × 1,000,000 + minor ×
/// 1,000 + micro.
pub fn libvirt_version(major: u32, minor: u32, micro: u32) -> u32 {
    major * 1_000_000 + minor * 1_000 + micro
}

/// A version the daemon reports ("9.0.0") as libvirt encodes it
/// (9000000); `None` when it does not read or does not fit.
pub fn parse_libvirt_version(dotted: &str) -> Option<u32> {
    let mut parts = dotted.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let micro = parts.next().flatten().unwrap_or(0);
    if minor >= 1_000 || micro >= 1_000 {
        return None;
    }
    major
        .checked_mul(1_000_000)?
        .checked_add(libvirt_version(0, minor, micro))
}

/// libvirt's error numbers (`virErrorNumber` in virterror.h, a stable
/// ABI) that the launcher tells apart, and the `VIR_FROM_RPC` error domain.
pub mod libvirt_error {
    pub const NO_SUPPORT: i32 = 3;
    pub const NO_CONNECT: i32 = 5;
    pub const INVALID_CONN: i32 = 6;
    pub const INVALID_ARG: i32 = 8;
    pub const XML_ERROR: i32 = 27;
    pub const XML_DETAIL: i32 = 35;
    pub const RPC: i32 = 39;
    pub const NO_DOMAIN: i32 = 42;
    pub const OPERATION_INVALID: i32 = 55;
    pub const CONFIG_UNSUPPORTED: i32 = 67;
    pub const OPERATION_TIMEOUT: i32 = 68;
    pub const OPERATION_UNSUPPORTED: i32 = 84;
    pub const AGENT_UNRESPONSIVE: i32 = 86;
    pub const XML_INVALID_SCHEMA: i32 = 92;
    pub const AGENT_UNSYNCED: i32 = 97;
    pub const INVALID_DOMAIN_CHECKPOINT: i32 = 102;
    pub const NO_DOMAIN_CHECKPOINT: i32 = 103;
    pub const CHECKPOINT_INCONSISTENT: i32 = 109;
    /// VIR_FROM_RPC, an error domain.
    pub const FROM_RPC: i32 = 7;
}

/// A libvirt error as the backend received it.
#[derive(Debug, Clone, Copy)]
pub struct LibvirtError<'a> {
    /// `virErrorNumber`.
    pub code: i32,
    /// `virErrorDomain`.
    pub domain: i32,
    pub message: &'a str,
}

impl super::HypervisorErrorKind {
    /// What a libvirt error means to the launcher, one table for both
    /// backends. `rpc` is what an RPC or connection error means: for the
    /// `virt` backend its own connection failed (`ConnectionLost`); for the
    /// wire backend the daemon did answer, so the error is about a
    /// connection the daemon made, such as a peer-to-peer migration's link
    /// to its target (`Other`).
    pub fn from_libvirt(
        error: LibvirtError<'_>,
        operation: &str,
        rpc: super::HypervisorErrorKind,
    ) -> super::HypervisorErrorKind {
        use super::HypervisorErrorKind as Kind;
        use libvirt_error as e;
        match error.code {
            e::NO_DOMAIN => Kind::NoDomain,
            e::OPERATION_INVALID => Kind::InvalidOperation,
            e::XML_ERROR | e::XML_DETAIL | e::CONFIG_UNSUPPORTED | e::XML_INVALID_SCHEMA => {
                Kind::InvalidDefinition
            }
            e::INVALID_ARG if error.message.contains("unsupported flags") => Kind::Unsupported,
            e::INVALID_ARG if operation == "virDomainDefineXMLFlags" => Kind::InvalidDefinition,
            e::AGENT_UNRESPONSIVE | e::AGENT_UNSYNCED => Kind::AgentUnavailable,
            e::NO_SUPPORT | e::OPERATION_UNSUPPORTED => Kind::Unsupported,
            e::OPERATION_TIMEOUT => Kind::Timeout,
            e::INVALID_DOMAIN_CHECKPOINT | e::NO_DOMAIN_CHECKPOINT | e::CHECKPOINT_INCONSISTENT => {
                Kind::InvalidCheckpoint
            }
            e::RPC | e::INVALID_CONN | e::NO_CONNECT => rpc,
            _ if error.domain == e::FROM_RPC => rpc,
            _ => Kind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: DomainStatus) -> (&'static str, &'static str) {
        (s.state.as_str(), s.reason.as_str())
    }

    #[test]
    fn states_use_kubevirt_names() {
        assert_eq!(
            status(DomainStatus::from_libvirt(1, 1)),
            ("Running", "Booted")
        );
        assert_eq!(status(DomainStatus::from_libvirt(3, 1)), ("Paused", "User"));
        assert_eq!(
            status(DomainStatus::from_libvirt(5, 2)),
            ("Shutoff", "Destroyed")
        );
        assert_eq!(
            status(DomainStatus::from_libvirt(5, 6)),
            ("Shutoff", "Failed")
        );
        assert_eq!(
            status(DomainStatus::from_libvirt(6, 1)),
            ("Crashed", "Panicked")
        );
        assert_eq!(
            status(DomainStatus::from_libvirt(1, 10)),
            ("Running", "PostCopy")
        );
        assert_eq!(
            status(DomainStatus::from_libvirt(3, 12)),
            ("Paused", "Postcopy")
        );
        assert_eq!(
            status(DomainStatus::from_libvirt(2, 0)),
            ("Blocked", "Unknown")
        );
        // Out-of-range values from a newer libvirt do not panic.
        assert_eq!(
            status(DomainStatus::from_libvirt(5, 99)),
            ("Shutoff", "Unknown")
        );
        assert_eq!(
            status(DomainStatus::from_libvirt(42, -1)),
            ("NoState", "Unknown")
        );
        assert_eq!(
            status(DomainStatus::NON_EXISTENT),
            ("NoState", "NonExistent")
        );
    }

    #[test]
    fn lifecycle_events_carry_resulting_state() {
        let e = LifecycleEvent::from_libvirt(2, 0);
        assert_eq!(e, LifecycleEvent::Started(StartedDetail::Booted));
        assert_eq!((e.name(), e.detail()), ("Started", "Booted"));
        assert_eq!(e.status().map(status), Some(("Running", "Booted")));
        let e = LifecycleEvent::from_libvirt(3, 0);
        assert_eq!(e.status().map(status), Some(("Paused", "User")));
        // An incoming migration starts paused; it runs at Resumed/Migrated.
        let e = LifecycleEvent::from_libvirt(2, 1);
        assert_eq!(e.status().map(status), Some(("Paused", "Migration")));
        let e = LifecycleEvent::from_libvirt(4, 1);
        assert_eq!(e.status().map(status), Some(("Running", "Migrated")));
        let e = LifecycleEvent::from_libvirt(5, 5);
        assert_eq!((e.name(), e.detail()), ("Stopped", "Failed"));
        assert_eq!(
            e.status(),
            Some(DomainStatus::new(DomainState::Shutoff, StateReason::Failed))
        );
        let e = LifecycleEvent::from_libvirt(6, 1);
        assert_eq!((e.name(), e.detail()), ("Shutdown", "Guest"));
        assert_eq!(e.status().map(status), Some(("ShuttingDown", "User")));
        let e = LifecycleEvent::from_libvirt(0, 0);
        assert_eq!(
            (e.name(), e.detail(), e.status()),
            ("Defined", "Added", None)
        );
        let e = LifecycleEvent::from_libvirt(8, 1);
        assert_eq!((e.name(), e.detail()), ("Crashed", "Crashloaded"));
        // Unknown numbers, in either place.
        let e = LifecycleEvent::from_libvirt(99, 99);
        assert_eq!(
            (e.name(), e.detail(), e.status()),
            ("Unknown", "Unknown", None)
        );
        let e = LifecycleEvent::from_libvirt(5, 42);
        assert_eq!((e.name(), e.detail()), ("Stopped", "Unknown"));
        assert_eq!(e.status().map(status), Some(("Shutoff", "Unknown")));
        assert_eq!(
            LifecycleEvent::from_libvirt(1, -3),
            LifecycleEvent::Undefined(UndefinedDetail::Unknown)
        );
    }

    #[test]
    fn every_detail_is_numbered_as_libvirt_numbers_it() {
        // The last of each list, by libvirt's number.
        let last = [
            (LifecycleEvent::from_libvirt(0, 3), "FromSnapshot"),
            (LifecycleEvent::from_libvirt(1, 1), "Renamed"),
            (LifecycleEvent::from_libvirt(2, 5), "Recreated"),
            (LifecycleEvent::from_libvirt(3, 8), "PostcopyFailed"),
            (LifecycleEvent::from_libvirt(4, 4), "PostcopyFailed"),
            (LifecycleEvent::from_libvirt(5, 7), "Recreated"),
            (LifecycleEvent::from_libvirt(6, 2), "Host"),
            (LifecycleEvent::from_libvirt(7, 1), "Disk"),
            (LifecycleEvent::from_libvirt(8, 1), "Crashloaded"),
        ];
        for (event, detail) in last {
            assert_eq!(event.detail(), detail, "{event:?}");
        }
    }

    #[test]
    fn agent_channel_and_close_reasons() {
        let a = AgentLifecycle::from_libvirt(1, 2);
        assert!(a.connected);
        assert_eq!(a.reason.describe(), "channel event");
        let a = AgentLifecycle::from_libvirt(2, 1);
        assert!(!a.connected);
        assert_eq!(a.reason, AgentChannelReason::DomainStarted);
        assert_eq!(
            AgentLifecycle::from_libvirt(7, 7).reason,
            AgentChannelReason::Unknown
        );
        assert_eq!(CloseReason::from_libvirt(1), CloseReason::Eof);
        assert_eq!(CloseReason::from_libvirt(2).describe(), "keepalive timeout");
        assert_eq!(CloseReason::from_libvirt(17), CloseReason::Unknown);
    }

    #[test]
    fn paused_by_user_is_paused_with_reason_user() {
        assert!(DomainStatus::from_libvirt(3, 1).is_paused_by_user());
        assert!(!DomainStatus::from_libvirt(3, 2).is_paused_by_user());
        assert!(!DomainStatus::from_libvirt(1, 5).is_paused_by_user());
        assert!(!DomainStatus::from_libvirt(4, 1).is_paused_by_user());
    }

    #[test]
    fn active_states() {
        assert!(DomainState::Running.is_active());
        assert!(DomainState::Paused.is_active());
        assert!(!DomainState::Shutoff.is_active());
        assert!(!DomainState::Crashed.is_active());
        assert!(!DomainState::NoState.is_active());
    }

    #[test]
    fn versions_are_dotted() {
        assert_eq!(dotted_version(9_000_000), "9.0.0");
        assert_eq!(dotted_version(7_002_015), "7.2.15");
    }

    #[test]
    fn daemon_versions_read_as_libvirt_encodes_them() {
        use super::parse_libvirt_version as parse;
        assert_eq!(parse("9.0.0"), Some(9_000_000));
        assert_eq!(parse("10.10.1"), Some(10_010_001));
        assert_eq!(parse("8.5"), Some(8_005_000));
        assert_eq!(parse("nine"), None);
        assert_eq!(parse(""), None);
        // Too big to encode: no overflow, no answer.
        assert_eq!(parse("99999.0.0"), None);
        assert_eq!(parse("9.1000.0"), None);
    }

    #[test]
    fn libvirt_errors_mean_the_same_to_both_backends() {
        use super::super::HypervisorErrorKind as Kind;
        let error = |code, domain, message| LibvirtError {
            code,
            domain,
            message,
        };
        let kind = |e, operation, rpc| Kind::from_libvirt(e, operation, rpc);
        let plain = error(libvirt_error::NO_DOMAIN, 0, "no domain");
        assert_eq!(
            kind(plain, "virDomainSuspend", Kind::ConnectionLost),
            Kind::NoDomain
        );
        let bad_xml = error(libvirt_error::INVALID_ARG, 0, "invalid argument");
        assert_eq!(
            kind(bad_xml, "virDomainDefineXMLFlags", Kind::ConnectionLost),
            Kind::InvalidDefinition
        );
        assert_eq!(
            kind(bad_xml, "virDomainSuspend", Kind::ConnectionLost),
            Kind::Other
        );
        let flags = error(libvirt_error::INVALID_ARG, 0, "unsupported flags (0x4)");
        assert_eq!(
            kind(flags, "virDomainSuspend", Kind::ConnectionLost),
            Kind::Unsupported
        );
        // RPC errors mean what the backend says they mean.
        let rpc = error(libvirt_error::RPC, 0, "cannot connect");
        assert_eq!(
            kind(rpc, "virDomainMigrate", Kind::ConnectionLost),
            Kind::ConnectionLost
        );
        assert_eq!(kind(rpc, "virDomainMigrate", Kind::Other), Kind::Other);
        let from_rpc = error(1, libvirt_error::FROM_RPC, "internal error");
        assert_eq!(
            kind(from_rpc, "virDomainSuspend", Kind::ConnectionLost),
            Kind::ConnectionLost
        );
        assert_eq!(
            kind(error(1, 0, "internal error"), "x", Kind::ConnectionLost),
            Kind::Other
        );
    }

    /// The numbers above are libvirt's (the `virt` backend's bindings).
    #[cfg(feature = "virt")]
    #[test]
    fn libvirt_error_numbers_are_libvirts() {
        use virt::sys;
        let ours = |n: u32| i32::try_from(n).unwrap_or(-1);
        for (number, theirs) in [
            (libvirt_error::NO_SUPPORT, sys::VIR_ERR_NO_SUPPORT),
            (libvirt_error::NO_CONNECT, sys::VIR_ERR_NO_CONNECT),
            (libvirt_error::INVALID_CONN, sys::VIR_ERR_INVALID_CONN),
            (libvirt_error::INVALID_ARG, sys::VIR_ERR_INVALID_ARG),
            (libvirt_error::XML_ERROR, sys::VIR_ERR_XML_ERROR),
            (libvirt_error::XML_DETAIL, sys::VIR_ERR_XML_DETAIL),
            (libvirt_error::RPC, sys::VIR_ERR_RPC),
            (libvirt_error::NO_DOMAIN, sys::VIR_ERR_NO_DOMAIN),
            (
                libvirt_error::OPERATION_INVALID,
                sys::VIR_ERR_OPERATION_INVALID,
            ),
            (
                libvirt_error::CONFIG_UNSUPPORTED,
                sys::VIR_ERR_CONFIG_UNSUPPORTED,
            ),
            (
                libvirt_error::OPERATION_TIMEOUT,
                sys::VIR_ERR_OPERATION_TIMEOUT,
            ),
            (
                libvirt_error::OPERATION_UNSUPPORTED,
                sys::VIR_ERR_OPERATION_UNSUPPORTED,
            ),
            (
                libvirt_error::AGENT_UNRESPONSIVE,
                sys::VIR_ERR_AGENT_UNRESPONSIVE,
            ),
            (
                libvirt_error::XML_INVALID_SCHEMA,
                sys::VIR_ERR_XML_INVALID_SCHEMA,
            ),
            (libvirt_error::AGENT_UNSYNCED, sys::VIR_ERR_AGENT_UNSYNCED),
            (libvirt_error::FROM_RPC, sys::VIR_FROM_RPC),
        ] {
            assert_eq!(number, ours(theirs));
        }
    }
}
