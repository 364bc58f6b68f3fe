//! The numbers of libvirt's RPC protocol this client uses: programs,
//! procedures, limits, flags and error codes. Procedure numbers never
//! change once released (new ones are only appended), so these, taken
//! from libvirt 9.0's `remote_protocol.x`, `qemu_protocol.x` and
//! `virkeepaliveprotocol.x`, hold for every daemon since.

use std::time::Duration;

/// One RPC program of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    pub number: u32,
    pub version: u32,
    pub name: &'static str,
}

/// REMOTE_PROGRAM: connections, domains, events.
pub const REMOTE: Program = Program {
    number: 0x2000_8086,
    version: 1,
    name: "REMOTE",
};
/// QEMU_PROGRAM: the QEMU driver's own calls (the guest agent command).
pub const QEMU: Program = Program {
    number: 0x2000_8087,
    version: 1,
    name: "QEMU",
};
/// KEEPALIVE_PROGRAM ("keep"): PING and PONG messages.
pub const KEEPALIVE: Program = Program {
    number: 0x6b65_6570,
    version: 1,
    name: "KEEPALIVE",
};

pub const KEEPALIVE_PING: i32 = 1;
pub const KEEPALIVE_PONG: i32 = 2;

/// How long a call may wait for its reply when the procedure says nothing
/// else: far beyond any healthy daemon's answer, short enough that a stuck
/// one frees the worker thread.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// One remote procedure: its program, number and the libvirt API it
/// implements (named in errors, as the `virt` backend names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Procedure {
    pub program: Program,
    pub number: i32,
    pub api: &'static str,
    /// How long a call waits for its reply, unless the caller gives a
    /// deadline of its own.
    pub deadline: Duration,
}

const fn remote(number: i32, api: &'static str) -> Procedure {
    Procedure {
        program: REMOTE,
        number,
        api,
        deadline: DEFAULT_DEADLINE,
    }
}

// Connection.
pub const CONNECT_OPEN: Procedure = remote(1, "virConnectOpen");
pub const CONNECT_CLOSE: Procedure = remote(2, "virConnectClose");
pub const CONNECT_GET_TYPE: Procedure = remote(3, "virConnectGetType");
pub const CONNECT_GET_VERSION: Procedure = remote(4, "virConnectGetVersion");
pub const CONNECT_GET_HOSTNAME: Procedure = remote(59, "virConnectGetHostname");
pub const CONNECT_SUPPORTS_FEATURE: Procedure = remote(60, "virConnectSupportsFeature");
pub const AUTH_LIST: Procedure = remote(66, "virConnectOpen (authentication list)");
pub const AUTH_POLKIT: Procedure = remote(70, "virConnectOpen (polkit authentication)");
pub const CONNECT_GET_LIB_VERSION: Procedure = remote(157, "virConnectGetLibVersion");
pub const CONNECT_REGISTER_CLOSE_CALLBACK: Procedure =
    remote(360, "virConnectRegisterCloseCallback");

// Domains.
pub const DOMAIN_GET_XML_DESC: Procedure = remote(14, "virDomainGetXMLDesc");
pub const DOMAIN_LOOKUP_BY_NAME: Procedure = remote(23, "virDomainLookupByName");
pub const DOMAIN_REBOOT: Procedure = remote(27, "virDomainReboot");
pub const DOMAIN_RESUME: Procedure = remote(28, "virDomainResume");
pub const DOMAIN_SUSPEND: Procedure = remote(34, "virDomainSuspend");
pub const DOMAIN_ATTACH_DEVICE_FLAGS: Procedure = remote(160, "virDomainAttachDeviceFlags");
pub const DOMAIN_DETACH_DEVICE_FLAGS: Procedure = remote(161, "virDomainDetachDeviceFlags");
pub const DOMAIN_ABORT_JOB: Procedure = remote(164, "virDomainAbortJob");
pub const DOMAIN_MIGRATE_SET_MAX_DOWNTIME: Procedure =
    remote(166, "virDomainMigrateSetMaxDowntime");
pub const DOMAIN_UPDATE_DEVICE_FLAGS: Procedure = remote(174, "virDomainUpdateDeviceFlags");
pub const DOMAIN_CREATE_WITH_FLAGS: Procedure = remote(196, "virDomainCreateWithFlags");
pub const DOMAIN_SET_VCPUS_FLAGS: Procedure = remote(199, "virDomainSetVcpusFlags");
pub const DOMAIN_GET_STATE: Procedure = remote(212, "virDomainGetState");
pub const DOMAIN_UNDEFINE_FLAGS: Procedure = remote(231, "virDomainUndefineFlags");
pub const DOMAIN_DESTROY_FLAGS: Procedure = remote(234, "virDomainDestroyFlags");
pub const DOMAIN_SCREENSHOT: Procedure = remote(211, "virDomainScreenshot");
pub const DOMAIN_RESET: Procedure = remote(245, "virDomainReset");
pub const DOMAIN_SHUTDOWN_FLAGS: Procedure = remote(258, "virDomainShutdownFlags");
pub const DOMAIN_GET_DISK_ERRORS: Procedure = remote(263, "virDomainGetDiskErrors");
pub const DOMAIN_GET_JOB_STATS: Procedure = remote(298, "virDomainGetJobStats");
/// A peer-to-peer migration: one call that returns when the migration has
/// completed or failed, so its deadline is the migration's, not a call's.
pub const DOMAIN_MIGRATE_PERFORM3_PARAMS: Procedure = Procedure {
    deadline: Duration::from_secs(24 * 3600),
    ..remote(305, "virDomainMigrateToURI3")
};
/// A memory dump: one call that returns when QEMU has written all of the
/// guest's memory, so its deadline is the dump's, not a call's.
pub const DOMAIN_CORE_DUMP_WITH_FORMAT: Procedure = Procedure {
    deadline: Duration::from_secs(24 * 3600),
    ..remote(334, "virDomainCoreDumpWithFormat")
};
pub const DOMAIN_SET_TIME: Procedure = remote(338, "virDomainSetTime");
pub const CONNECT_GET_ALL_DOMAIN_STATS: Procedure = remote(344, "virDomainListGetStats");
pub const DOMAIN_DEFINE_XML_FLAGS: Procedure = remote(350, "virDomainDefineXMLFlags");
pub const DOMAIN_MIGRATE_START_POST_COPY: Procedure = remote(364, "virDomainMigrateStartPostCopy");
pub const DOMAIN_CHECKPOINT_CREATE_XML: Procedure = remote(411, "virDomainCheckpointCreateXML");
pub const DOMAIN_CHECKPOINT_GET_XML_DESC: Procedure = remote(412, "virDomainCheckpointGetXMLDesc");
pub const DOMAIN_LIST_ALL_CHECKPOINTS: Procedure = remote(413, "virDomainListAllCheckpoints");
pub const DOMAIN_CHECKPOINT_DELETE: Procedure = remote(417, "virDomainCheckpointDelete");
pub const DOMAIN_GET_GUEST_INFO: Procedure = remote(418, "virDomainGetGuestInfo");
pub const DOMAIN_AGENT_SET_RESPONSE_TIMEOUT: Procedure =
    remote(420, "virDomainAgentSetResponseTimeout");
pub const DOMAIN_BACKUP_BEGIN: Procedure = remote(421, "virDomainBackupBegin");
pub const DOMAIN_START_DIRTY_RATE_CALC: Procedure = remote(427, "virDomainStartDirtyRateCalc");

// Events.
pub const CONNECT_DOMAIN_EVENT_CALLBACK_REGISTER_ANY: Procedure =
    remote(316, "virConnectDomainEventRegisterAny");

/// Event messages (type MESSAGE) of the REMOTE program.
pub mod events {
    pub const LIFECYCLE: i32 = 318;
    pub const REBOOT: i32 = 319;
    pub const DEVICE_REMOVED: i32 = 333;
    pub const AGENT_LIFECYCLE: i32 = 348;
    pub const DEVICE_ADDED: i32 = 354;
    pub const CONNECTION_CLOSED: i32 = 362;
    pub const JOB_COMPLETED: i32 = 363;
}

// The QEMU program.
pub const QEMU_DOMAIN_AGENT_COMMAND: Procedure = Procedure {
    program: QEMU,
    number: 3,
    api: "virDomainQemuAgentCommand",
    deadline: DEFAULT_DEADLINE,
};

/// Upper bounds of the protocol (`virnetprotocol.x`, `remote_protocol.x`).
pub mod limits {
    /// VIR_NET_MESSAGE_MAX: a whole message, header included, without the
    /// length word.
    pub const MESSAGE_MAX: usize = 16 * 1024 * 1024;
    /// REMOTE_STRING_MAX.
    pub const STRING_MAX: usize = 4 * 1024 * 1024;
    pub const AUTH_TYPE_LIST_MAX: usize = 20;
    pub const DOMAIN_LIST_MAX: usize = 16384;
    pub const DOMAIN_CHECKPOINT_LIST_MAX: usize = 16384;
    pub const MIGRATE_COOKIE_MAX: usize = 4 * 1024 * 1024;
    pub const JOB_STATS_MAX: usize = 64;
    pub const GET_ALL_DOMAIN_STATS_MAX: usize = 262_144;
    pub const GUEST_INFO_PARAMS_MAX: usize = 2048;
    /// REMOTE_DOMAIN_DISK_ERRORS_MAX.
    pub const DOMAIN_DISK_ERRORS_MAX: usize = 256;
}

/// `virDrvFeature` numbers asked with CONNECT_SUPPORTS_FEATURE.
pub mod features {
    /// The daemon speaks the keepalive program; asking also tells the
    /// daemon that this client answers its PINGs.
    pub const PROGRAM_KEEPALIVE: i32 = 10;
    /// Events carry the callback id they were registered with.
    pub const REMOTE_EVENT_CALLBACK: i32 = 14;
    /// The daemon reports when its side of the connection closes.
    pub const REMOTE_CLOSE_CALLBACK: i32 = 15;
}

/// `remote_auth_type`.
pub mod auth {
    pub const NONE: u32 = 0;
    pub const SASL: u32 = 1;
    pub const POLKIT: u32 = 2;
}

/// `virDomainEventID`.
pub mod event_ids {
    pub const LIFECYCLE: i32 = 0;
    pub const REBOOT: i32 = 1;
    pub const DEVICE_REMOVED: i32 = 15;
    pub const AGENT_LIFECYCLE: i32 = 18;
    pub const DEVICE_ADDED: i32 = 19;
    pub const JOB_COMPLETED: i32 = 21;
}

/// Flags of the calls, under libvirt's names.
pub mod flags {
    pub const DOMAIN_UNDEFINE_KEEP_NVRAM: u32 = 8;
    pub const DOMAIN_START_PAUSED: u32 = 1;
    pub const DOMAIN_SHUTDOWN_ACPI_POWER_BTN: u32 = 1;
    pub const DOMAIN_REBOOT_ACPI_POWER_BTN: u32 = 1;
    pub const DOMAIN_REBOOT_GUEST_AGENT: u32 = 2;
    pub const DOMAIN_DESTROY_GRACEFUL: u32 = 1;
    pub const DOMAIN_XML_SECURE: u32 = 1;
    pub const DOMAIN_XML_MIGRATABLE: u32 = 8;
    pub const DOMAIN_STATS_STATE: u32 = 1;
    pub const DOMAIN_STATS_CPU_TOTAL: u32 = 2;
    pub const DOMAIN_STATS_BALLOON: u32 = 4;
    pub const DOMAIN_STATS_VCPU: u32 = 8;
    pub const DOMAIN_STATS_INTERFACE: u32 = 16;
    pub const DOMAIN_STATS_BLOCK: u32 = 32;
    pub const DOMAIN_STATS_DIRTYRATE: u32 = 512;
    pub const GET_ALL_DOMAINS_STATS_NOWAIT: u32 = 1 << 29;
    pub const DOMAIN_JOB_STATS_COMPLETED: u32 = 1;
    pub const GUEST_INFO_USERS: u32 = 1;
    pub const GUEST_INFO_OS: u32 = 2;
    pub const GUEST_INFO_TIMEZONE: u32 = 4;
    pub const GUEST_INFO_HOSTNAME: u32 = 8;
    pub const GUEST_INFO_FILESYSTEM: u32 = 16;
    pub const GUEST_INFO_INTERFACES: u32 = 64;
    pub const MIGRATE_LIVE: u32 = 1;
    pub const MIGRATE_PEER2PEER: u32 = 2;
    pub const MIGRATE_PERSIST_DEST: u32 = 8;
    pub const MIGRATE_NON_SHARED_INC: u32 = 128;
    pub const MIGRATE_UNSAFE: u32 = 512;
    pub const MIGRATE_AUTO_CONVERGE: u32 = 8192;
    pub const MIGRATE_POSTCOPY: u32 = 32768;
    pub const MIGRATE_COMPRESSED: u32 = 2048;
    pub const MIGRATE_PARALLEL: u32 = 131072;
    pub const DOMAIN_CORE_DUMP_FORMAT_RAW: u32 = 0;
    pub const DUMP_MEMORY_ONLY: u32 = 16;
    pub const DOMAIN_DIRTYRATE_MODE_PAGE_SAMPLING: u32 = 0;
    pub const DOMAIN_CHECKPOINT_CREATE_REDEFINE: u32 = 1;
    pub const DOMAIN_CHECKPOINT_CREATE_REDEFINE_VALIDATE: u32 = 4;
    pub const DOMAIN_CHECKPOINT_XML_NO_DOMAIN: u32 = 2;
    pub const DOMAIN_CHECKPOINT_LIST_TOPOLOGICAL: u32 = 2;
    pub const DOMAIN_CHECKPOINT_DELETE_METADATA_ONLY: u32 = 2;
}

/// Migration parameter names (`VIR_MIGRATE_PARAM_*`).
pub mod migrate_params {
    pub const URI: &str = "migrate_uri";
    pub const DEST_XML: &str = "destination_xml";
    pub const PERSIST_XML: &str = "persistent_xml";
    pub const BANDWIDTH: &str = "bandwidth";
    pub const DISKS_URI: &str = "disks_uri";
    pub const MIGRATE_DISKS: &str = "migrate_disks";
    pub const PARALLEL_CONNECTIONS: &str = "parallel.connections";
    pub const COMPRESSION: &str = "compression";
}

/// `virErrorNumber` values the launcher tells apart, and the RPC error
/// domain.
pub use crate::hypervisor::state::libvirt_error as errors;
