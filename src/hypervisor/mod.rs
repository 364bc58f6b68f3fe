//! The narrow interface between the launcher and the hypervisor.
//!
//! Every libvirt call the launcher makes goes through the `Hypervisor`
//! trait, so the domain manager never sees libvirt types. Two backends
//! implement it: `libvirt` with the `virt` crate (all raw FFI lives in
//! `ffi`), and `wire`, which speaks libvirt's RPC protocol itself. Cargo
//! features pick the one that runs (`backend`); a new trait method needs
//! both (see `wire`'s module docs for adding a procedure).

pub mod backend;
#[cfg(feature = "virt")]
pub mod event_loop;
#[cfg(test)]
pub mod fake;
#[cfg(feature = "virt")]
mod ffi;
#[cfg(feature = "virt")]
pub mod libvirt;
pub mod state;
pub mod trace;
pub mod wire;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::sink::Sink;

pub use state::{
    AgentChannelReason, AgentLifecycle, CloseReason, DomainState, DomainStatus, LifecycleEvent,
    StateReason,
};

/// Which libvirt driver is behind the connection. It decides the domain
/// type the converter writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverKind {
    Qemu,
    /// libvirt's in-process `test:///default` driver: no daemon, no guest.
    Test,
}

/// Another daemon's versions, as `query-version` names a launcher's own:
/// the libvirt daemon's dotted (`"11.3.0"`) and the hypervisor's with its
/// driver (`"QEMU 10.0.2"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonVersions {
    pub libvirt: String,
    pub hypervisor: String,
}

/// Facts about the connection, read once when it opens. Not the
/// hypervisor's version (`Hypervisor::hypervisor_version`): a QEMU daemon
/// answers `virConnectGetVersion` only once it has built its capabilities,
/// probing QEMU when its cache has no valid entry (a second or more), and
/// the launcher is ready before then, as KubeVirt's is (its daemon probes
/// at the first define); the manager reads the version on a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HypervisorInfo {
    pub uri: String,
    pub driver: DriverKind,
    /// Which implementation of the trait runs: "virt" (libvirt's C
    /// library through the `virt` crate) or "wire" (libvirt's RPC protocol
    /// spoken directly).
    pub backend: &'static str,
    /// The libvirt library this process is linked against; none for the
    /// wire backend.
    pub library_version: Option<String>,
    /// The libvirt behind the connection (the daemon's, for remote URIs).
    pub daemon_version: String,
}

/// What `virDomainGetGuestInfo` can report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestInfoKind {
    Users,
    Os,
    Timezone,
    Hostname,
    Filesystems,
    Interfaces,
}

/// A live migration to another libvirt daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationRequest {
    /// The target daemon's libvirt URI.
    pub target_uri: String,
    /// Where QEMU sends the guest's state (e.g. tcp://127.0.0.1).
    pub migration_uri: Option<String>,
    /// The domain as the target must define it (its own paths).
    pub dest_xml: Option<String>,
    pub bandwidth_mib_per_s: Option<u64>,
    /// Where local disks stream to (block migration).
    pub disks_uri: Option<String>,
    /// Target devices of local disks to copy (block migration).
    pub block_disks: Vec<String>,
    pub auto_converge: bool,
    pub post_copy: bool,
    pub unsafe_migration: bool,
    /// Parallel migration streams (libvirt's `parallel.connections`).
    pub parallel_connections: Option<u32>,
    /// Compression method for the memory stream (e.g. `zstd`).
    pub compression: Option<String>,
}

/// How `reboot` asks the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebootMode {
    GuestAgent,
    Acpi,
}

/// Which definitions of the domain a device or vCPU change applies to:
/// the running guest (`live`), the persistent definition used at its next
/// start (`config`), or both (libvirt's `VIR_DOMAIN_AFFECT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Affect {
    pub live: bool,
    pub config: bool,
}

impl Affect {
    /// The running guest and the persistent definition, so that a restart
    /// keeps what was changed live.
    pub const LIVE_AND_CONFIG: Affect = Affect {
        live: true,
        config: true,
    };
    /// The running guest only (a transient domain has no persistent
    /// definition).
    pub const LIVE: Affect = Affect {
        live: true,
        config: false,
    };
    /// The persistent definition only.
    pub const CONFIG: Affect = Affect {
        live: false,
        config: true,
    };

    /// libvirt's flag word: `VIR_DOMAIN_AFFECT_LIVE` (1) and
    /// `VIR_DOMAIN_AFFECT_CONFIG` (2), which are also `VIR_DOMAIN_VCPU_LIVE`
    /// and `VIR_DOMAIN_VCPU_CONFIG`.
    pub fn flags(self) -> u32 {
        u32::from(self.live) | (u32::from(self.config) << 1)
    }
}

/// A disk on which the guest met an I/O error, as
/// `virDomainGetDiskErrors` reports it (disks without one are left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskError {
    /// The disk's target device (`vda`).
    pub target: String,
    pub kind: DiskErrorKind,
}

/// libvirt's `virDomainDiskErrorCode`, without `NONE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskErrorKind {
    /// `VIR_DOMAIN_DISK_ERROR_UNSPEC`: an error other than no space.
    Unspecified,
    /// `VIR_DOMAIN_DISK_ERROR_NO_SPACE`: the storage behind the disk is full.
    NoSpace,
}

impl DiskErrorKind {
    /// From libvirt's code; `None` for `VIR_DOMAIN_DISK_ERROR_NONE` (0).
    /// A code newer than this launcher counts as unspecified.
    pub fn from_code(code: i64) -> Option<DiskErrorKind> {
        match code {
            0 => None,
            2 => Some(DiskErrorKind::NoSpace),
            _ => Some(DiskErrorKind::Unspecified),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DiskErrorKind::Unspecified => "io-error",
            DiskErrorKind::NoSpace => "no-space",
        }
    }
}

/// A screenshot as libvirt hands it over.
#[derive(Clone, PartialEq, Eq)]
pub struct Screenshot {
    /// The image's MIME type as libvirt names it (QEMU's is
    /// `image/x-portable-pixmap`).
    pub mime: String,
    pub data: Vec<u8>,
}

impl fmt::Debug for Screenshot {
    /// The size, not the megabytes of pixels (the trace logs results).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Screenshot({}, {} bytes)", self.mime, self.data.len())
    }
}

/// The largest screenshot a backend accepts from the daemon: a 4K
/// display's PPM is 25 MB; anything far beyond is not a screenshot.
pub const MAX_SCREENSHOT_BYTES: usize = 64 * 1024 * 1024;

/// A screenshot stream that went on past `MAX_SCREENSHOT_BYTES`.
pub fn screenshot_too_large(operation: &'static str) -> HypervisorError {
    HypervisorError::new(
        HypervisorErrorKind::Other,
        operation,
        format!(
            "the screenshot stream went on past {} MiB; gave up reading it",
            MAX_SCREENSHOT_BYTES >> 20
        ),
    )
}

/// A statistic, as libvirt's typed parameters give it.
pub type Stat = (String, Value);

/// Something libvirt reported about the launcher's domain or the
/// connection. Produced by callbacks on the event-loop thread.
#[derive(Debug, Clone, PartialEq)]
pub enum HypervisorEvent {
    Lifecycle(LifecycleEvent),
    AgentLifecycle(AgentLifecycle),
    Reboot,
    /// A device was plugged in (libvirt's device-added event): a hotplug
    /// completed in the guest's hardware.
    DeviceAdded {
        alias: String,
    },
    /// A device is gone from the domain (libvirt's device-removed event):
    /// the guest released it, or it was removed while the guest was off.
    DeviceRemoved {
        alias: String,
    },
    JobCompleted {
        stats: Vec<Stat>,
    },
    /// The connection to the daemon closed (EOF, keepalive timeout,
    /// error, or a call that found it dead). Sent once per connection.
    ConnectionClosed {
        connection: ConnectionId,
        reason: CloseReason,
    },
}

/// Which connection to the daemon something belongs to. The connection a
/// backend is created with is `FIRST`; each successful `reconnect` returns
/// a larger one, so news about an old connection is recognisable as stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

impl ConnectionId {
    pub const FIRST: ConnectionId = ConnectionId(1);

    pub fn next(self) -> ConnectionId {
        ConnectionId(self.0 + 1)
    }
}

/// How a backend keeps the contract that a lost connection is reported
/// once: every party that can notice the loss of one connection (libvirt's
/// close callback, the RPC reader, a call that failed) holds a reporter for
/// it, and the first to report marks it dead and sends `ConnectionClosed`.
#[derive(Clone)]
pub struct LossReporter {
    pub tx: Sink<HypervisorEvent>,
    pub connection: ConnectionId,
    /// The id of the connection calls may use; 0 once it is known dead.
    /// Shared by every reporter of the backend and by its calls.
    pub live: Arc<AtomicU64>,
}

impl LossReporter {
    /// Marks the connection dead and reports it, unless that was done (or
    /// it is no longer the live one).
    pub fn report(&self, reason: CloseReason) {
        let marked = self
            .live
            .compare_exchange(self.connection.0, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if marked {
            let _ = self.tx.send(HypervisorEvent::ConnectionClosed {
                connection: self.connection,
                reason,
            });
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HypervisorErrorKind {
    /// The domain does not exist.
    NoDomain,
    /// Not possible in the domain's current state.
    InvalidOperation,
    /// The domain definition was rejected.
    InvalidDefinition,
    /// The guest agent is not connected or does not answer.
    AgentUnavailable,
    /// The driver cannot do this at all (e.g. the test driver and agents).
    Unsupported,
    /// The daemon cannot be reached.
    ConnectionLost,
    /// libvirt gave up waiting (e.g. on a domain's job lock).
    Timeout,
    /// A checkpoint libvirt does not know, or whose bitmaps in the disk
    /// images are missing or broken (`VIR_ERR_NO_DOMAIN_CHECKPOINT`,
    /// `VIR_ERR_INVALID_DOMAIN_CHECKPOINT`, `VIR_ERR_CHECKPOINT_INCONSISTENT`).
    InvalidCheckpoint,
    Other,
}

/// A failed hypervisor call: what was attempted and what libvirt said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HypervisorError {
    pub kind: HypervisorErrorKind,
    /// The libvirt call, e.g. "virDomainSuspend".
    pub operation: &'static str,
    pub message: String,
}

impl HypervisorError {
    pub fn new(
        kind: HypervisorErrorKind,
        operation: &'static str,
        message: impl Into<String>,
    ) -> Self {
        HypervisorError {
            kind,
            operation,
            message: message.into(),
        }
    }

    pub fn not_connected(operation: &'static str) -> Self {
        Self::new(
            HypervisorErrorKind::ConnectionLost,
            operation,
            "not connected to libvirt; the launcher is reconnecting",
        )
    }
}

impl fmt::Display for HypervisorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.operation, self.message)
    }
}

impl std::error::Error for HypervisorError {}

pub type HvResult<T> = Result<T, HypervisorError>;

/// Everything the launcher asks of a hypervisor, for the one domain it
/// runs. Implementations are shared between the domain manager and its
/// worker threads, hence `Send + Sync`; calls may block, which is why the
/// manager runs them on workers with deadlines.
///
/// The connection's state has one owner, the domain manager, which learns
/// of a loss only from `HypervisorEvent::ConnectionClosed`. A backend sends
/// that event once per connection, whether libvirt's close notice or a call
/// that found the connection dead noticed first; from then on its calls
/// fail at once with `ConnectionLost` until `reconnect` succeeds.
pub trait Hypervisor: Send + Sync {
    fn info(&self) -> HypervisorInfo;

    /// The domain's state, or `None` when it is not defined.
    fn domain_status(&self, name: &str) -> HvResult<Option<DomainStatus>>;
    /// Defines (or redefines) a domain from XML. libvirt's parser refuses
    /// what it cannot understand; the XML is not also checked against
    /// libvirt's RelaxNG schema (`VIR_DOMAIN_DEFINE_VALIDATE`), which costs
    /// time on every define (docs/figures.md), and which the converter's
    /// output passes by test (tests/convert_libvirt.rs validates every
    /// example's XML). KubeVirt does not validate either.
    fn define(&self, xml: &str) -> HvResult<()>;
    fn undefine(&self, name: &str) -> HvResult<()>;
    fn start(&self, name: &str, paused: bool) -> HvResult<()>;
    fn suspend(&self, name: &str) -> HvResult<()>;
    fn resume(&self, name: &str) -> HvResult<()>;
    /// Presses the ACPI power button; returns once the request is sent.
    fn shutdown_acpi(&self, name: &str) -> HvResult<()>;
    fn reboot(&self, name: &str, mode: RebootMode) -> HvResult<()>;
    fn reset(&self, name: &str) -> HvResult<()>;
    /// Forces the domain off. `graceful` sends QEMU only SIGTERM; otherwise
    /// libvirt follows up with SIGKILL.
    fn destroy(&self, name: &str, graceful: bool) -> HvResult<()>;
    /// The domain's XML and UUID.
    fn domain_xml(&self, name: &str) -> HvResult<(String, String)>;
    /// `domain_xml` and `domain_status` together, as one read of the
    /// domain: a backend that can have both calls in flight at once does
    /// (the wire backend), which saves a round trip per fresh read. By
    /// default (libvirt's blocking client, the fakes) one after the other.
    fn domain_xml_and_status(
        &self,
        name: &str,
    ) -> HvResult<((String, String), Option<DomainStatus>)> {
        let xml = self.domain_xml(name)?;
        Ok((xml, self.domain_status(name)?))
    }
    /// Bulk statistics, as `virsh domstats` names them.
    fn stats(&self, name: &str) -> HvResult<Vec<Stat>>;

    /// Plugs the device described by `xml` (one device element, e.g.
    /// `<disk>`) into the domain (`virDomainAttachDeviceFlags`).
    fn attach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()>;
    /// Asks for the device described by `xml` to be removed
    /// (`virDomainDetachDeviceFlags`). libvirt may return before the guest
    /// has let the device go; the device-removed event says when it has.
    fn detach_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()>;
    /// Changes a device in place (`virDomainUpdateDeviceFlags`), e.g. the
    /// requested size of a virtio-mem device.
    fn update_device(&self, name: &str, xml: &str, affect: Affect) -> HvResult<()>;
    /// Sets the number of enabled vCPUs (`virDomainSetVcpusFlags`); the
    /// domain's maximum stays.
    fn set_vcpus(&self, name: &str, count: u32, affect: Affect) -> HvResult<()>;

    /// Sends one raw guest-agent command (QMP JSON) through libvirt and
    /// returns the raw reply. libvirt gives up after `timeout`.
    fn agent_command(&self, name: &str, command: &str, timeout: Duration) -> HvResult<String>;
    /// Sets how long libvirt waits for the domain's guest agent on calls
    /// that take no timeout of their own, such as `guest_info`
    /// (`virDomainAgentSetResponseTimeout`; by default libvirt waits
    /// forever, and an agent that stops answering, e.g. because the guest
    /// was paused mid-call, would hold the domain's agent job until the
    /// guest runs again). libvirt keeps the setting in the domain object's
    /// private data (and its status XML, so a daemon restart keeps it),
    /// across agent reconnects, stops and starts; only a new domain object
    /// (defined again after an undefine) starts with the default. Setting
    /// it also rewrites the status XML, so callers set it once (the agent
    /// poller: each time it starts polling), not before every call.
    fn set_agent_timeout(&self, name: &str, timeout: Duration) -> HvResult<()>;
    /// `virDomainGetGuestInfo` for the given kinds, as typed parameters.
    /// libvirt gives up after the domain's agent response timeout
    /// (`set_agent_timeout`).
    fn guest_info(&self, name: &str, kinds: &[GuestInfoKind]) -> HvResult<Vec<Stat>>;
    /// Sets the guest's clock (through the agent) to the host's time now;
    /// libvirt gives up after `timeout`, which this call sets as the
    /// domain's agent response timeout first (it is rare).
    fn sync_guest_time(&self, name: &str, timeout: Duration) -> HvResult<()>;

    /// The domain's XML as a migration carries it.
    fn migratable_xml(&self, name: &str) -> HvResult<String>;
    /// Live-migrates the domain peer to peer; blocks until it completes or
    /// fails.
    fn migrate(&self, name: &str, request: &MigrationRequest) -> HvResult<()>;
    /// Statistics of the running job (or of the last completed one).
    fn job_stats(&self, name: &str, completed: bool) -> HvResult<Vec<Stat>>;
    /// Aborts the running job (a migration).
    fn abort_job(&self, name: &str) -> HvResult<()>;
    /// Switches a running migration to post-copy.
    fn migrate_start_post_copy(&self, name: &str) -> HvResult<()>;
    /// The longest pause the migration may cause at switch-over.
    fn migrate_set_max_downtime(&self, name: &str, milliseconds: u64) -> HvResult<()>;

    /// The hypervisor's version as the daemon reports it now
    /// (`virConnectGetVersion`: major * 1,000,000 + minor * 1,000 +
    /// release). The daemon's first answer waits for its capabilities
    /// (see `HypervisorInfo`); it re-probes its QEMU binary when the
    /// binary changes on disk.
    fn hypervisor_version(&self) -> HvResult<u64>;
    /// The libvirt and hypervisor versions of another daemon, the one at
    /// `uri` (a migration target's, reached as the migration reaches it),
    /// over a connection of its own that is closed before this returns.
    fn versions_at(&self, uri: &str) -> HvResult<DaemonVersions>;
    /// Starts measuring how fast the guest dirties its memory, over
    /// `seconds`, by page sampling (`virDomainStartDirtyRateCalc`).
    /// Returns at once; `dirty_rate_stats` reports the measurement.
    fn start_dirty_rate_calc(&self, name: &str, seconds: u32) -> HvResult<()>;
    /// The `dirtyrate.*` statistics of the domain (the dirty rate group of
    /// `virDomainListGetStats`).
    fn dirty_rate_stats(&self, name: &str) -> HvResult<Vec<Stat>>;
    /// Writes the guest's memory to `path` as an ELF core
    /// (`virDomainCoreDumpWithFormat`, raw format, memory only, as
    /// KubeVirt's memory dump does); blocks until the dump is complete.
    /// libvirt opens `path` itself and hands it to QEMU.
    fn dump_memory(&self, name: &str, path: &Path) -> HvResult<()>;
    /// A screenshot of display `screen` (`virDomainScreenshot`): the image
    /// exactly as QEMU wrote it, read from a libvirt stream.
    fn screenshot(&self, name: &str, screen: u32) -> HvResult<Screenshot>;
    /// The disks on which the guest met an I/O error since it last ran
    /// (`virDomainGetDiskErrors`): what paused a domain whose reason is
    /// `IOError`.
    fn disk_errors(&self, name: &str) -> HvResult<Vec<DiskError>>;

    /// Starts a backup job (`virDomainBackupBegin`) as `backup_xml`
    /// describes it, creating the checkpoint `checkpoint_xml` describes
    /// at the same instant. Returns once the job runs; libvirt's
    /// JOB_COMPLETED event says when it ended (a push backup by itself, a
    /// pull backup once `abort_job` ends it).
    fn backup_begin(
        &self,
        name: &str,
        backup_xml: &str,
        checkpoint_xml: Option<&str>,
    ) -> HvResult<()>;
    /// Creates a checkpoint from its XML (`virDomainCheckpointCreateXML`);
    /// with `redefine`, only its metadata, for bitmaps the disk images
    /// already carry, which libvirt checks exist
    /// (`VIR_DOMAIN_CHECKPOINT_CREATE_REDEFINE | ..._REDEFINE_VALIDATE`).
    fn checkpoint_create(&self, name: &str, xml: &str, redefine: bool) -> HvResult<()>;
    /// The names of the domain's checkpoints, parents before children
    /// (`virDomainListAllCheckpoints`, topological).
    fn checkpoint_names(&self, name: &str) -> HvResult<Vec<String>>;
    /// A checkpoint's XML without the domain definition
    /// (`virDomainCheckpointGetXMLDesc`, `VIR_DOMAIN_CHECKPOINT_XML_NO_DOMAIN`),
    /// which is what redefining it takes.
    fn checkpoint_xml(&self, name: &str, checkpoint: &str) -> HvResult<String>;
    /// Deletes a checkpoint (`virDomainCheckpointDelete`): its bitmaps in
    /// the images too, or with `metadata_only` only libvirt's record of it.
    fn checkpoint_delete(&self, name: &str, checkpoint: &str, metadata_only: bool) -> HvResult<()>;

    /// Replaces a lost connection: releases the old one (its event and
    /// close callbacks, so nothing of it stays behind) and opens a fresh
    /// one with the callbacks registered. Returns the new connection's id.
    fn reconnect(&self) -> HvResult<ConnectionId>;
}
