//! The QEMU guest agent: a poller thread that refreshes what the agent
//! reports, and the cache the domain manager keeps of it. The agent is
//! reached only through libvirt (virDomainQemuAgentCommand and
//! virDomainGetGuestInfo), which owns the channel and its sync protocol.

pub mod cache;
pub mod model;
pub mod poller;

use model::{AgentVersion, FreezeStatus, GuestFilesystem, GuestLoad, GuestSystem, GuestUser};

/// What the manager tells the poller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollerControl {
    /// The agent is connected and the domain runs: poll.
    Start,
    /// The agent is gone or the domain is paused or stopped: stop polling.
    Stop,
}

/// The kinds of data polled, each on its own interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollKind {
    /// `guest-info` (--qemu-agent-version-interval).
    Version,
    /// `guest-get-fsinfo` (--qemu-agent-file-interval).
    Filesystems,
    /// `guest-fsfreeze-status` (--qemu-fsfreeze-status-interval).
    FsFreeze,
    /// Hostname, OS, timezone and interfaces (--qemu-agent-sys-interval).
    System,
    /// Logged-in users (--qemu-agent-user-interval).
    Users,
    /// Load averages (--qemu-agent-sys-interval), where the agent has it.
    Load,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AgentData {
    Version(AgentVersion),
    Filesystems(Vec<GuestFilesystem>),
    FsFreeze(FreezeStatus),
    System(Box<GuestSystem>),
    Users(Vec<GuestUser>),
    Load(GuestLoad),
}

/// One poll's outcome, sent to the manager.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentUpdate {
    pub kind: PollKind,
    pub result: Result<AgentData, String>,
}
