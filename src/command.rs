//! The commands of the socket protocol. The table `COMMANDS` declares each
//! command once: its name, its one-line summary and how its arguments are
//! parsed. A request becomes a typed `Command` here, before anything
//! happens, so unknown commands and bad arguments never cause side effects.
//!
//! Commands come in four groups, and the group decides who runs them:
//! `LocalCommand`s are answered by the client's connection itself; domain,
//! guest-agent and migration commands go to the domain manager as a
//! `ManagerRequest`, each with a `ReplyTo` for its one reply.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::convert::ClusterOptions;
use crate::events::EventKind;
use crate::migration::MigrationOptions;
use crate::protocol::{CommandError, CommandResult, ErrorClass};

/// One command: its name on the wire, what `query-commands` says about
/// it, and how its arguments become a `Command`.
pub struct CommandSpec {
    pub name: &'static str,
    pub summary: &'static str,
    parse: fn(Arguments) -> Result<Command, CommandError>,
}

/// Every command, in the order the greeting and the docs list them.
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "ping",
        summary: "Answers {} when the launcher's domain manager is alive.",
        parse: |a| a.none(DomainCommand::Ping),
    },
    CommandSpec {
        name: "query-version",
        summary: "Versions of the launcher, the libvirt library, the libvirt daemon and the hypervisor.",
        parse: |a| a.none(DomainCommand::QueryVersion),
    },
    CommandSpec {
        name: "query-commands",
        summary: "The commands this launcher understands.",
        parse: |a| a.none(LocalCommand::QueryCommands),
    },
    CommandSpec {
        name: "query-status",
        summary: "The launcher's phase and the domain's state and reason, from the launcher's own view (never blocks on libvirt).",
        parse: |a| a.none(DomainCommand::QueryStatus),
    },
    CommandSpec {
        name: "sync",
        summary: "Reconcile to arguments.vmi (a KubeVirt VMI), with the cluster's arguments.options if given: define the domain if missing, start it if down, resume it if paused by something other than pause; returns the domain's state.",
        parse: |a| {
            let args: SyncArgs = a.typed()?;
            Ok(DomainCommand::Sync {
                vmi: vmi_object(args.vmi)?,
                options: args.options.map(Box::new),
            }
            .into())
        },
    },
    CommandSpec {
        name: "pause",
        summary: "Suspend the running domain.",
        parse: |a| a.none(DomainCommand::Pause),
    },
    CommandSpec {
        name: "unpause",
        summary: "Resume a domain suspended by pause.",
        parse: |a| a.none(DomainCommand::Unpause),
    },
    CommandSpec {
        name: "shutdown",
        summary: "Ask the guest to power off by ACPI. Returns at once; completion shows as DOMAIN_LIFECYCLE events and the launcher then exits with status 0.",
        parse: |a| a.none(DomainCommand::Shutdown),
    },
    CommandSpec {
        name: "reboot",
        summary: "Soft reboot: through the guest agent when it is connected, else by ACPI.",
        parse: |a| a.none(DomainCommand::Reboot),
    },
    CommandSpec {
        name: "reset",
        summary: "Hard reset of the guest, like pressing the reset button.",
        parse: |a| a.none(DomainCommand::Reset),
    },
    CommandSpec {
        name: "kill",
        summary: "Force the domain off (libvirt destroy). The launcher then exits with status 0.",
        parse: |a| a.none(DomainCommand::Kill),
    },
    CommandSpec {
        name: "delete",
        summary: "Undefine the domain. A running domain keeps running as a transient one.",
        parse: |a| a.none(DomainCommand::Delete),
    },
    CommandSpec {
        name: "query-domain",
        summary: "The live domain: name, uuid, state, reason, the domain XML and its parsed form, served from a cache that every event changing the domain invalidates (age_ms says how old); arguments.fields picks parts, arguments.max_age_ms bounds the age.",
        parse: |a| {
            a.integers(&[("max_age_ms", 0, MAX_AGE_MS)])?;
            let args: DomainQueryArgs = a.typed()?;
            Ok(DomainCommand::QueryDomain(args.into_query()?).into())
        },
    },
    CommandSpec {
        name: "query-stats",
        summary: "libvirt bulk statistics of the domain (cpu, balloon, vcpu, block, interface), named as virsh domstats names them, from a sample a background job refreshes while clients ask (age_ms says how old); arguments.max_age_ms bounds the age (0: a fresh sample).",
        parse: |a| {
            a.integers(&[("max_age_ms", 0, MAX_AGE_MS)])?;
            let args: StatsQueryArgs = a.typed()?;
            Ok(DomainCommand::QueryStats {
                max_age: args.max_age_ms.map(Duration::from_millis),
            }
            .into())
        },
    },
    CommandSpec {
        name: "query-qemu-version",
        summary: "The version of QEMU behind the libvirt daemon, read from the daemon now, as KubeVirt's GetQemuVersion gives it (\"QEMU 7.2.22\").",
        parse: |a| a.none(DomainCommand::QueryQemuVersion),
    },
    CommandSpec {
        name: "query-dirty-rate",
        summary: "Measure how fast the running guest writes to its memory (libvirt's dirty rate, page sampling) over arguments.seconds (default 1, as KubeVirt); refused while the guest migrates.",
        parse: |a| {
            let args: DirtyRateArgs = a.typed()?;
            if !(1..=MAX_DIRTY_RATE_SECONDS).contains(&args.seconds) {
                return Err(CommandError::invalid_argument(format!(
                    "arguments.seconds: {} is out of range (1 to {MAX_DIRTY_RATE_SECONDS})",
                    args.seconds
                )));
            }
            Ok(DomainCommand::QueryDirtyRate {
                seconds: args.seconds,
            }
            .into())
        },
    },
    CommandSpec {
        name: "memory-dump",
        summary: "Dump the guest's memory (an ELF core, as KubeVirt's memory dump) to arguments.path, or into the VMI's memoryDump volume arguments.volume as KubeVirt names it. Returns at once; progress and the outcome show in query-status and as MEMORY_DUMP_* events.",
        parse: |a| {
            let args: MemoryDumpArgs = a.typed()?;
            let target = match (args.path, args.volume) {
                (Some(path), None) => DumpTarget::Path(dump_path(&path)?),
                (None, Some(volume)) => DumpTarget::Volume(volume),
                _ => {
                    return Err(CommandError::invalid_argument(
                        "arguments: give either path (a file) or volume (the VMI's memoryDump volume)",
                    ));
                }
            };
            Ok(DomainCommand::MemoryDump { target }.into())
        },
    },
    CommandSpec {
        name: "screenshot",
        summary: "A PNG screenshot of the guest's display (base64 in data, with its MIME type and size); refused when the VMI has no graphics device.",
        parse: |a| a.none(DomainCommand::Screenshot),
    },
    CommandSpec {
        name: "query-vm-stats",
        summary: "What KubeVirt's GetVMStats collects, each part with its age: the domain statistics (arguments.domain_stats, default true), the dirty rate (arguments.dirty_rate, default false) and the guest agent's answers to the commands in arguments.agent (default all of KubeVirt's).",
        parse: |a| {
            let args: VmStatsArgs = a.typed()?;
            Ok(DomainCommand::QueryVmStats(args.into_query()?).into())
        },
    },
    CommandSpec {
        name: "backup",
        summary: "Back up the VMI's changedBlockTracking disks through libvirt's backup API with a new checkpoint (arguments.checkpoint): full, or incremental since the checkpoint arguments.incremental; push mode writes arguments.target_dir/<checkpoint>-<volume>.<format> (qcow2 or raw), pull mode exports the disks over NBD on the unix socket arguments.socket until backup-abort. Returns once the job runs; progress in query-status, the end as BACKUP_COMPLETED or BACKUP_FAILED.",
        parse: |a| {
            let args: BackupArgs = a.typed()?;
            Ok(DomainCommand::Backup(args.into_request()?).into())
        },
    },
    CommandSpec {
        name: "backup-abort",
        summary: "Stop the running backup: a push backup ends as aborted (the guest keeps running), a pull backup ends its NBD export (the normal end of a pull backup).",
        parse: |a| a.none(DomainCommand::BackupAbort),
    },
    CommandSpec {
        name: "query-checkpoints",
        summary: "The domain's checkpoints as libvirt keeps them, oldest first, each with its XML (what redefine-checkpoint takes).",
        parse: |a| a.none(DomainCommand::QueryCheckpoints),
    },
    CommandSpec {
        name: "redefine-checkpoint",
        summary: "Tell libvirt again about checkpoint arguments.name whose bitmaps the disk images carry (after libvirt lost its record, e.g. the domain was defined anew): from arguments.xml (query-checkpoints' XML), or over every changedBlockTracking disk. libvirt checks the bitmaps; the reply says valid true, or valid false and why (then take a full backup).",
        parse: |a| {
            let args: RedefineCheckpointArgs = a.typed()?;
            checkpoint_name("arguments.name", &args.name)?;
            Ok(DomainCommand::RedefineCheckpoint {
                name: args.name,
                xml: args.xml,
                creation_time: args.creation_time,
            }
            .into())
        },
    },
    CommandSpec {
        name: "delete-checkpoint",
        summary: "Delete checkpoint arguments.name: its bitmaps in the disk images and libvirt's record, or with arguments.metadata_only only the record.",
        parse: |a| {
            let args: DeleteCheckpointArgs = a.typed()?;
            checkpoint_name("arguments.name", &args.name)?;
            Ok(DomainCommand::DeleteCheckpoint {
                name: args.name,
                metadata_only: args.metadata_only,
            }
            .into())
        },
    },
    CommandSpec {
        name: "upgrade",
        summary: "Hand the running guest over to a new launcher binary in place (arguments.binary, an absolute path; default: the launcher's own path, read again from disk): the new binary is checked first (--version and --upgrade-check on the state handed over), then the launcher answers and execs it with the same PID, the same socket and the guest untouched. Refused with InvalidState while a migration, a backup or a memory dump runs.",
        parse: |a| {
            let args: UpgradeArgs = a.typed()?;
            let binary = match args.binary {
                Some(path) => {
                    let path = PathBuf::from(path);
                    if !path.is_absolute() {
                        return Err(CommandError::invalid_argument(format!(
                            "arguments.binary: {}: must be an absolute path",
                            path.display()
                        )));
                    }
                    Some(path)
                }
                None => None,
            };
            Ok(DomainCommand::Upgrade { binary }.into())
        },
    },
    CommandSpec {
        name: "guest-ping",
        summary: "Ping the QEMU guest agent (arguments.timeout_seconds, default 5).",
        parse: |a| {
            a.integers(&[("timeout_seconds", 1, MAX_GUEST_TIMEOUT_SECONDS)])?;
            let args: GuestPingArgs = a.typed()?;
            Ok(GuestCommand::Ping {
                timeout_seconds: args.timeout_seconds,
            }
            .into())
        },
    },
    CommandSpec {
        name: "query-guest-info",
        summary: "What the guest agent last reported: agent version and commands, hostname, OS, timezone, freeze status, users and filesystems (at most 10 each). Served from the launcher's cache.",
        parse: |a| a.none(GuestCommand::QueryGuestInfo),
    },
    CommandSpec {
        name: "query-users",
        summary: "Users logged in to the guest, from the agent (full list).",
        parse: |a| a.none(GuestCommand::QueryUsers),
    },
    CommandSpec {
        name: "query-filesystems",
        summary: "The guest's mounted filesystems, from the agent (full list).",
        parse: |a| a.none(GuestCommand::QueryFilesystems),
    },
    CommandSpec {
        name: "query-interfaces",
        summary: "The guest's network interfaces from the agent, without lo; the primary IPv4 address first.",
        parse: |a| a.none(GuestCommand::QueryInterfaces),
    },
    CommandSpec {
        name: "query-os-info",
        summary: "The guest's OS (os-release and kernel), hostname and timezone, from the agent.",
        parse: |a| a.none(GuestCommand::QueryOsInfo),
    },
    CommandSpec {
        name: "guest-exec",
        summary: "Run arguments.command with arguments.args in the guest through the agent and wait up to arguments.timeout_seconds (default 30): exit code, stdout and stderr. A non-zero exit is a result, not an error.",
        parse: |a| {
            a.integers(&[("timeout_seconds", 1, MAX_GUEST_TIMEOUT_SECONDS)])?;
            let args: GuestExecArgs = a.typed()?;
            if args.command.is_empty() {
                return Err(CommandError::invalid_argument(
                    "arguments.command must name the program to run in the guest",
                ));
            }
            Ok(GuestCommand::Exec(args).into())
        },
    },
    CommandSpec {
        name: "freeze",
        summary: "Freeze the guest's filesystems; they thaw by themselves after arguments.unfreeze_timeout_seconds (0: never).",
        parse: |a| {
            a.integers(&[("unfreeze_timeout_seconds", 0, MAX_GUEST_TIMEOUT_SECONDS)])?;
            let args: FreezeArgs = a.typed()?;
            Ok(GuestCommand::Freeze {
                unfreeze_timeout_seconds: args.unfreeze_timeout_seconds,
            }
            .into())
        },
    },
    CommandSpec {
        name: "unfreeze",
        summary: "Thaw the guest's filesystems.",
        parse: |a| a.none(GuestCommand::Unfreeze),
    },
    CommandSpec {
        name: "prepare-migration-target",
        summary: "On the target launcher: prepare directories and disks for arguments.vmi arriving by migration; returns the address (libvirt URI, migration URI, paths) to give the source's migrate.",
        parse: |a| Ok(MigrationCommand::PrepareTarget { vmi: a.vmi()? }.into()),
    },
    CommandSpec {
        name: "migrate",
        summary: "On the source launcher: live-migrate the guest to arguments.target (prepare-migration-target's reply), with KubeVirt's migration options. Returns at once; progress and the outcome come as MIGRATION_* events. After success the launcher exits with status 0.",
        parse: |a| {
            a.integers(MigrationOptions::INTEGER_RANGES)?;
            let options: MigrationOptions = a.typed()?;
            if options.target.libvirt_uri.is_empty() {
                return Err(CommandError::invalid_argument(
                    "arguments.target.libvirt_uri must name the target's libvirt daemon",
                ));
            }
            Ok(MigrationCommand::Migrate(Box::new(options)).into())
        },
    },
    CommandSpec {
        name: "migrate-cancel",
        summary: "Cancel the running migration: on the source the guest keeps running there; on a prepared target the launcher cleans up and exits.",
        parse: |a| a.none(MigrationCommand::Cancel),
    },
    CommandSpec {
        name: "query-migration",
        summary: "The migration's role, phase, progress, timings and outcome (null when none).",
        parse: |a| a.none(MigrationCommand::Query),
    },
    CommandSpec {
        name: "finalize-migration",
        summary: "On the target after the guest arrived: post-migration steps (the guest clock is set through the agent; the links of the interfaces in arguments.refresh_links go down and up, to renew their DHCP leases).",
        parse: |a| {
            let args: FinalizeArgs = a.typed()?;
            Ok(MigrationCommand::Finalize {
                refresh_links: args.refresh_links,
            }
            .into())
        },
    },
    CommandSpec {
        name: "subscribe",
        summary: "Send events on this connection; arguments.events limits them to the listed names, arguments.since first replays the retained events after that seq.",
        parse: |a| {
            let args: SubscribeArgs = a.typed()?;
            let events = args.events.map(event_filter).transpose()?;
            Ok(LocalCommand::Subscribe {
                events,
                since: args.since,
            }
            .into())
        },
    },
    CommandSpec {
        name: "unsubscribe",
        summary: "Stop sending events on this connection.",
        parse: |a| a.none(LocalCommand::Unsubscribe),
    },
];

pub fn command_names() -> Vec<&'static str> {
    COMMANDS.iter().map(|c| c.name).collect()
}

/// A request that passed validation, by who runs it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Answered by the client's connection itself.
    Local(LocalCommand),
    /// Sent to the domain manager.
    Manager(ManagerCommand),
}

/// Commands a connection answers without the domain manager.
#[derive(Debug, Clone, PartialEq)]
pub enum LocalCommand {
    QueryCommands,
    /// `since`: replay the retained events after that number.
    Subscribe {
        events: Option<Vec<EventKind>>,
        since: Option<u64>,
    },
    Unsubscribe,
}

/// Commands the domain manager runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ManagerCommand {
    Domain(DomainCommand),
    Guest(GuestCommand),
    Migration(MigrationCommand),
}

/// The launcher and its domain: queries answered from the manager's view,
/// `sync`, and operations libvirt carries out.
#[derive(Debug, Clone, PartialEq)]
pub enum DomainCommand {
    Ping,
    QueryVersion,
    QueryStatus,
    Sync {
        vmi: Value,
        /// What virt-handler sends beside the VMI; `None`: the launcher's
        /// defaults.
        options: Option<Box<ClusterOptions>>,
    },
    Pause,
    Unpause,
    Shutdown,
    Reboot,
    Reset,
    Kill,
    Delete,
    QueryDomain(DomainQuery),
    QueryStats {
        /// Serve a cached sample only if it is at most this old; `None`:
        /// the launcher's default.
        max_age: Option<Duration>,
    },
    QueryQemuVersion,
    QueryDirtyRate {
        seconds: u32,
    },
    MemoryDump {
        target: DumpTarget,
    },
    Screenshot,
    QueryVmStats(VmStatsQuery),
    Backup(BackupRequest),
    BackupAbort,
    QueryCheckpoints,
    RedefineCheckpoint {
        name: String,
        xml: Option<String>,
        creation_time: Option<u64>,
    },
    DeleteCheckpoint {
        name: String,
        metadata_only: bool,
    },
    /// Hand over to the binary at this path (`None`: the launcher's own).
    Upgrade {
        binary: Option<PathBuf>,
    },
}

/// How `backup` hands the disks over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupTarget {
    /// libvirt writes each disk to `dir/<checkpoint>-<volume>.<format>`.
    Push { dir: PathBuf, format: BackupFormat },
    /// QEMU serves each disk (export name: the volume) over NBD on a unix
    /// socket until the backup is ended.
    Pull { socket: PathBuf },
}

/// The format of a push backup's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackupFormat {
    Qcow2,
    Raw,
}

impl BackupFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            BackupFormat::Qcow2 => "qcow2",
            BackupFormat::Raw => "raw",
        }
    }
}

/// What `backup` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupRequest {
    pub target: BackupTarget,
    /// The checkpoint the backup creates; `None`: named after the time.
    pub checkpoint: Option<String>,
    /// Only what changed since this checkpoint; `None`: everything.
    pub incremental: Option<String>,
}

/// Where `memory-dump` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpTarget {
    /// Absolute, in an existing directory, not an existing file.
    Path(PathBuf),
    /// The VMI's memoryDump volume of this name, mounted by virt-handler
    /// in the hotplug directory.
    Volume(String),
}

/// What `query-vm-stats` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmStatsQuery {
    pub domain_stats: bool,
    pub dirty_rate: bool,
    /// How long a dirty rate measurement takes (KubeVirt: 1 s).
    pub dirty_rate_seconds: u32,
    /// Agent commands, each once, from `VM_STATS_AGENT_COMMANDS`.
    pub agent: Vec<&'static str>,
}

/// The guest agent commands KubeVirt's GetVMStats may ask.
pub const VM_STATS_AGENT_COMMANDS: [&str; 14] = [
    "guest-get-load",
    "guest-get-cpustats",
    "guest-get-diskstats",
    "guest-get-time",
    "guest-get-vcpus",
    "guest-get-memory-block-info",
    "guest-get-users",
    "guest-get-osinfo",
    "guest-get-disks",
    "guest-get-host-name",
    "guest-get-timezone",
    "guest-network-get-route",
    "guest-network-get-interfaces",
    "guest-get-memory-blocks",
];

/// What `query-domain` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainQuery {
    /// Serve a cached read only if it is at most this old; `None`: the
    /// launcher's default.
    pub max_age: Option<Duration>,
    pub fields: DomainFields,
}

impl DomainQuery {
    /// Every field, with the default age: what a query without arguments
    /// asks for.
    pub const ALL: DomainQuery = DomainQuery {
        max_age: None,
        fields: DomainFields::ALL,
    };
}

/// The optional parts of `query-domain`'s reply (`name` is always there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainFields {
    pub uuid: bool,
    /// `state` and `reason`.
    pub state: bool,
    pub xml: bool,
    pub spec: bool,
    pub network: bool,
    /// The VMI's volumes and their phases (`volumes`).
    pub volumes: bool,
    /// The guest agent's last report of what KubeVirt shows in the
    /// domain's status (`guest`), kept after the guest stops.
    pub guest: bool,
}

impl DomainFields {
    pub const ALL: DomainFields = DomainFields {
        uuid: true,
        state: true,
        xml: true,
        spec: true,
        network: true,
        volumes: true,
        guest: true,
    };
    pub const NAMES: [&'static str; 7] = [
        "uuid", "state", "xml", "spec", "network", "volumes", "guest",
    ];

    /// Whether the fields need the domain's XML (else the launcher's own
    /// view answers).
    pub fn need_xml(self) -> bool {
        self.uuid || self.xml || self.spec || self.volumes
    }
}

/// The guest-agent commands: none reaches the agent unless it is
/// connected.
#[derive(Debug, Clone, PartialEq)]
pub enum GuestCommand {
    Ping { timeout_seconds: u64 },
    QueryGuestInfo,
    QueryUsers,
    QueryFilesystems,
    QueryInterfaces,
    QueryOsInfo,
    Exec(GuestExecArgs),
    Freeze { unfreeze_timeout_seconds: u64 },
    Unfreeze,
}

/// Live migration between two launchers.
#[derive(Debug, Clone, PartialEq)]
pub enum MigrationCommand {
    PrepareTarget {
        vmi: Value,
    },
    Migrate(Box<MigrationOptions>),
    Cancel,
    Query,
    /// `refresh_links`: interfaces (by VMI name) whose link goes down and
    /// up (KubeVirt's `LinkRefresh` interface migration).
    Finalize {
        refresh_links: Vec<String>,
    },
}

impl Command {
    /// Validates a command name and its arguments.
    pub fn parse(name: &str, arguments: Map<String, Value>) -> Result<Command, CommandError> {
        let spec = COMMANDS.iter().find(|c| c.name == name).ok_or_else(|| {
            CommandError::new(
                ErrorClass::CommandNotFound,
                format!("unknown command \"{name}\"; query-commands lists the known ones"),
            )
        })?;
        (spec.parse)(Arguments {
            command: spec.name,
            map: arguments,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Command::Local(c) => c.name(),
            Command::Manager(c) => c.name(),
        }
    }
}

impl LocalCommand {
    pub fn name(&self) -> &'static str {
        match self {
            LocalCommand::QueryCommands => "query-commands",
            LocalCommand::Subscribe { .. } => "subscribe",
            LocalCommand::Unsubscribe => "unsubscribe",
        }
    }
}

impl ManagerCommand {
    pub fn name(&self) -> &'static str {
        match self {
            ManagerCommand::Domain(c) => c.name(),
            ManagerCommand::Guest(c) => c.name(),
            ManagerCommand::Migration(c) => c.name(),
        }
    }
}

impl DomainCommand {
    pub fn name(&self) -> &'static str {
        match self {
            DomainCommand::Ping => "ping",
            DomainCommand::QueryVersion => "query-version",
            DomainCommand::QueryStatus => "query-status",
            DomainCommand::Sync { .. } => "sync",
            DomainCommand::Pause => "pause",
            DomainCommand::Unpause => "unpause",
            DomainCommand::Shutdown => "shutdown",
            DomainCommand::Reboot => "reboot",
            DomainCommand::Reset => "reset",
            DomainCommand::Kill => "kill",
            DomainCommand::Delete => "delete",
            DomainCommand::QueryDomain(_) => "query-domain",
            DomainCommand::QueryStats { .. } => "query-stats",
            DomainCommand::QueryQemuVersion => "query-qemu-version",
            DomainCommand::QueryDirtyRate { .. } => "query-dirty-rate",
            DomainCommand::MemoryDump { .. } => "memory-dump",
            DomainCommand::Screenshot => "screenshot",
            DomainCommand::QueryVmStats(_) => "query-vm-stats",
            DomainCommand::Backup(_) => "backup",
            DomainCommand::BackupAbort => "backup-abort",
            DomainCommand::QueryCheckpoints => "query-checkpoints",
            DomainCommand::RedefineCheckpoint { .. } => "redefine-checkpoint",
            DomainCommand::DeleteCheckpoint { .. } => "delete-checkpoint",
            DomainCommand::Upgrade { .. } => "upgrade",
        }
    }
}

impl GuestCommand {
    pub fn name(&self) -> &'static str {
        match self {
            GuestCommand::Ping { .. } => "guest-ping",
            GuestCommand::QueryGuestInfo => "query-guest-info",
            GuestCommand::QueryUsers => "query-users",
            GuestCommand::QueryFilesystems => "query-filesystems",
            GuestCommand::QueryInterfaces => "query-interfaces",
            GuestCommand::QueryOsInfo => "query-os-info",
            GuestCommand::Exec(_) => "guest-exec",
            GuestCommand::Freeze { .. } => "freeze",
            GuestCommand::Unfreeze => "unfreeze",
        }
    }
}

impl MigrationCommand {
    pub fn name(&self) -> &'static str {
        match self {
            MigrationCommand::PrepareTarget { .. } => "prepare-migration-target",
            MigrationCommand::Migrate(_) => "migrate",
            MigrationCommand::Cancel => "migrate-cancel",
            MigrationCommand::Query => "query-migration",
            MigrationCommand::Finalize { .. } => "finalize-migration",
        }
    }
}

impl From<LocalCommand> for Command {
    fn from(c: LocalCommand) -> Command {
        Command::Local(c)
    }
}

impl From<DomainCommand> for Command {
    fn from(c: DomainCommand) -> Command {
        Command::Manager(ManagerCommand::Domain(c))
    }
}

impl From<GuestCommand> for Command {
    fn from(c: GuestCommand) -> Command {
        Command::Manager(ManagerCommand::Guest(c))
    }
}

impl From<MigrationCommand> for Command {
    fn from(c: MigrationCommand) -> Command {
        Command::Manager(ManagerCommand::Migration(c))
    }
}

/// A command for the domain manager, and where its one reply goes.
pub struct ManagerRequest {
    pub command: ManagerCommand,
    pub reply: ReplyTo,
}

/// Where one request's reply goes. Sending consumes it, so a request is
/// answered at most once; if it is dropped unanswered, the waiting client
/// is told so at once instead of waiting forever: a one-off channel
/// ([`ReplyTo::channel`]) disconnects, a connection's reused one
/// ([`ReplySlot`]) receives an `Internal` error naming the command.
#[derive(Debug)]
pub struct ReplyTo {
    /// `None` once answered.
    to: Option<Sender<CommandResult>>,
    /// For a reused channel, which stays connected: the command the error
    /// sent on drop names.
    reused_for: Option<&'static str>,
}

impl ReplyTo {
    /// A reply slot and the receiver its one reply arrives on.
    pub fn channel() -> (ReplyTo, Receiver<CommandResult>) {
        let (tx, rx) = bounded(1);
        let reply = ReplyTo {
            to: Some(tx),
            reused_for: None,
        };
        (reply, rx)
    }

    pub fn send(mut self, result: CommandResult) {
        if let Some(to) = self.to.take() {
            // The client may have gone; its reply has nowhere to go then.
            // Never full: each channel has at most one request in flight
            // (try_send all the same: the manager must never block on it).
            let _ = to.try_send(result);
        }
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        if let (Some(to), Some(command)) = (self.to.take(), self.reused_for) {
            let _ = to.try_send(Err(CommandError::internal(format!(
                "{command}: the domain manager dropped this request without answering it"
            ))));
        }
    }
}

/// A connection's reply channel, made once and used for every request it
/// sends the manager: a connection waits for each reply before it reads
/// the next line, so at most one is ever in flight, and a channel per
/// request cost an allocation and a free (crossbeam's channels are
/// cache-line aligned) and its teardown on every round trip.
pub struct ReplySlot {
    tx: Sender<CommandResult>,
    rx: Receiver<CommandResult>,
}

impl ReplySlot {
    pub fn new() -> ReplySlot {
        let (tx, rx) = bounded(1);
        ReplySlot { tx, rx }
    }

    /// Empties the slot, for a request that never reached the manager:
    /// it was dropped unsent, and its reply slot's drop left an error
    /// here that the connection's next request would otherwise read.
    pub fn discard(&self) {
        let _ = self.rx.try_recv();
    }

    /// Where the reply to `command` goes.
    pub fn reply_to(&self, command: &'static str) -> ReplyTo {
        ReplyTo {
            to: Some(self.tx.clone()),
            reused_for: Some(command),
        }
    }

    /// The reply to the one request in flight (sent with a [`ReplyTo`] from
    /// [`ReplySlot::reply_to`] that reached the manager): an answer, or the
    /// error its drop sends.
    pub fn wait(&self) -> CommandResult {
        // The slot holds a sender itself, so the channel never disconnects.
        self.rx.recv().unwrap_or_else(|_| {
            Err(CommandError::internal(
                "the reply channel closed without an answer",
            ))
        })
    }
}

impl Default for ReplySlot {
    fn default() -> ReplySlot {
        ReplySlot::new()
    }
}

/// `guest-exec` arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestExecArgs {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default = "default_exec_timeout")]
    pub timeout_seconds: u64,
}

fn default_exec_timeout() -> u64 {
    30
}

/// Longest wait a guest command may ask for.
pub const MAX_GUEST_TIMEOUT_SECONDS: u64 = 3600;

/// `max_age_ms` of `query-domain` and `query-stats`: at most ten years, the
/// longest duration any input may give (an answer that old is never kept;
/// a larger number would mean the same).
pub const MAX_AGE_MS: u64 = crate::limits::MAX_SECONDS * 1000;

/// A command's arguments, with the command's name for error messages.
struct Arguments {
    command: &'static str,
    map: Map<String, Value>,
}

impl Arguments {
    /// For commands without arguments: any is refused.
    fn none(self, command: impl Into<Command>) -> Result<Command, CommandError> {
        match self.map.keys().next() {
            None => Ok(command.into()),
            Some(key) => Err(CommandError::invalid_argument(format!(
                "unknown argument \"{key}\": {} takes no arguments",
                self.command
            ))),
        }
    }

    /// The whole-number arguments `ranges` names (name, least, most),
    /// checked before [`Self::typed`] so that one out of its range, negative,
    /// fractional, too large for any integer or not a number at all is
    /// refused naming the argument and its range. An absent or null one is
    /// left to the command's default.
    fn integers(&self, ranges: &[(&str, u64, u64)]) -> Result<(), CommandError> {
        for &(name, least, most) in ranges {
            let value = match self.map.get(name) {
                None | Some(Value::Null) => continue,
                Some(value) => value,
            };
            let whole = value.is_u64() || value.is_i64();
            match value.as_u64() {
                Some(n) if (least..=most).contains(&n) => {}
                _ if whole => {
                    return Err(CommandError::invalid_argument(format!(
                        "arguments.{name}: {value} is out of range ({least} to {most})"
                    )));
                }
                _ => {
                    return Err(CommandError::invalid_argument(format!(
                        "arguments.{name}: expected a whole number from {least} to {most}, got {value}"
                    )));
                }
            }
        }
        Ok(())
    }

    fn typed<T: DeserializeOwned>(self) -> Result<T, CommandError> {
        serde_json::from_value(Value::Object(self.map))
            .map_err(|e| CommandError::invalid_argument(format!("arguments: {e}")))
    }

    /// `arguments.vmi`, which must be an object.
    fn vmi(self) -> Result<Value, CommandError> {
        let args: VmiArgs = self.typed()?;
        vmi_object(args.vmi)
    }
}

fn vmi_object(vmi: Value) -> Result<Value, CommandError> {
    if !vmi.is_object() {
        return Err(CommandError::invalid_argument(
            "arguments.vmi must be a VirtualMachineInstance object",
        ));
    }
    Ok(vmi)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VmiArgs {
    vmi: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinalizeArgs {
    #[serde(default)]
    refresh_links: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SyncArgs {
    vmi: Value,
    #[serde(default)]
    options: Option<ClusterOptions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VmStatsArgs {
    #[serde(default = "yes")]
    domain_stats: bool,
    #[serde(default)]
    dirty_rate: bool,
    agent: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

impl VmStatsArgs {
    fn into_query(self) -> Result<VmStatsQuery, CommandError> {
        let agent = match self.agent {
            None => VM_STATS_AGENT_COMMANDS.to_vec(),
            Some(names) => {
                let mut agent = Vec::new();
                for name in &names {
                    let known = VM_STATS_AGENT_COMMANDS
                        .iter()
                        .find(|c| *c == name)
                        .ok_or_else(|| {
                            CommandError::invalid_argument(format!(
                                "arguments.agent: \"{name}\" is not one of the agent commands KubeVirt's GetVMStats asks: {}",
                                VM_STATS_AGENT_COMMANDS.join(", ")
                            ))
                        })?;
                    if !agent.contains(known) {
                        agent.push(*known);
                    }
                }
                agent
            }
        };
        Ok(VmStatsQuery {
            domain_stats: self.domain_stats,
            dirty_rate: self.dirty_rate,
            dirty_rate_seconds: default_dirty_rate_seconds(),
            agent,
        })
    }
}

/// The longest dirty rate measurement: libvirt takes up to 60 s.
pub const MAX_DIRTY_RATE_SECONDS: u32 = 60;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirtyRateArgs {
    #[serde(default = "default_dirty_rate_seconds")]
    seconds: u32,
}

/// KubeVirt measures for a second.
fn default_dirty_rate_seconds() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackupArgs {
    #[serde(default)]
    mode: Option<String>,
    checkpoint: Option<String>,
    incremental: Option<String>,
    target_dir: Option<String>,
    format: Option<BackupFormat>,
    socket: Option<String>,
}

impl BackupArgs {
    fn into_request(self) -> Result<BackupRequest, CommandError> {
        if let Some(name) = &self.checkpoint {
            checkpoint_name("arguments.checkpoint", name)?;
        }
        if let Some(name) = &self.incremental {
            checkpoint_name("arguments.incremental", name)?;
        }
        let absolute = |field: &str, value: &str| {
            let path = PathBuf::from(value);
            if path.is_absolute() {
                Ok(path)
            } else {
                Err(CommandError::invalid_argument(format!(
                    "arguments.{field}: {value:?} must be an absolute path"
                )))
            }
        };
        let target = match self.mode.as_deref().unwrap_or("push") {
            "push" => {
                if self.socket.is_some() {
                    return Err(CommandError::invalid_argument(
                        "arguments.socket: only a pull backup has a socket",
                    ));
                }
                let dir = self.target_dir.ok_or_else(|| {
                    CommandError::invalid_argument(
                        "arguments.target_dir: a push backup needs the directory to write the disks into",
                    )
                })?;
                BackupTarget::Push {
                    dir: absolute("target_dir", &dir)?,
                    format: self.format.unwrap_or(BackupFormat::Qcow2),
                }
            }
            "pull" => {
                if self.target_dir.is_some() || self.format.is_some() {
                    return Err(CommandError::invalid_argument(
                        "arguments: target_dir and format are for a push backup; a pull backup has a socket",
                    ));
                }
                let socket = self.socket.ok_or_else(|| {
                    CommandError::invalid_argument(
                        "arguments.socket: a pull backup needs the unix socket path to serve NBD on",
                    )
                })?;
                BackupTarget::Pull {
                    socket: absolute("socket", &socket)?,
                }
            }
            other => {
                return Err(CommandError::invalid_argument(format!(
                    "arguments.mode: {other:?} is neither push nor pull"
                )));
            }
        };
        Ok(BackupRequest {
            target,
            checkpoint: self.checkpoint,
            incremental: self.incremental,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedefineCheckpointArgs {
    name: String,
    xml: Option<String>,
    creation_time: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpgradeArgs {
    #[serde(default)]
    binary: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteCheckpointArgs {
    name: String,
    #[serde(default)]
    metadata_only: bool,
}

/// A checkpoint name becomes a file name part and a QEMU bitmap name:
/// letters, digits and `-_.`, not starting with a dot, at most 64.
fn checkpoint_name(field: &str, name: &str) -> Result<(), CommandError> {
    let fine = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if fine {
        Ok(())
    } else {
        Err(CommandError::invalid_argument(format!(
            "{field}: {name:?} is not a checkpoint name (1 to 64 of letters, digits, '-', '_' and '.', not starting with '.')"
        )))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryDumpArgs {
    path: Option<String>,
    volume: Option<String>,
}

/// Where a memory dump may go: an absolute path of a file that does not
/// exist yet, in a directory that does (libvirt creates the file; an
/// earlier dump or anything else there is never overwritten).
fn dump_path(path: &str) -> Result<PathBuf, CommandError> {
    let path = Path::new(path);
    let bad = |why: &str| {
        Err(CommandError::invalid_argument(format!(
            "arguments.path: {}: {why}",
            path.display()
        )))
    };
    if !path.is_absolute() {
        return bad("must be an absolute path");
    }
    if path.file_name().is_none() || path.to_str().is_none_or(|p| p.ends_with('/')) {
        return bad("must name a file");
    }
    if path.symlink_metadata().is_ok() {
        return bad("already exists; the dump is never written over a file");
    }
    match path.parent().map(std::fs::metadata) {
        Some(Ok(meta)) if meta.is_dir() => Ok(path.to_path_buf()),
        Some(Ok(_)) => bad("its parent is not a directory"),
        _ => bad("its directory does not exist"),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsQueryArgs {
    max_age_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainQueryArgs {
    max_age_ms: Option<u64>,
    fields: Option<Vec<String>>,
}

impl DomainQueryArgs {
    fn into_query(self) -> Result<DomainQuery, CommandError> {
        let fields = match self.fields {
            None => DomainFields::ALL,
            Some(names) => {
                let mut fields = DomainFields {
                    uuid: false,
                    state: false,
                    xml: false,
                    spec: false,
                    network: false,
                    volumes: false,
                    guest: false,
                };
                for name in &names {
                    let flag = match name.as_str() {
                        "uuid" => &mut fields.uuid,
                        "state" => &mut fields.state,
                        "xml" => &mut fields.xml,
                        "spec" => &mut fields.spec,
                        "network" => &mut fields.network,
                        "volumes" => &mut fields.volumes,
                        "guest" => &mut fields.guest,
                        other => {
                            return Err(CommandError::invalid_argument(format!(
                                "arguments.fields: unknown field \"{other}\"; known fields: {} (name is always returned)",
                                DomainFields::NAMES.join(", ")
                            )));
                        }
                    };
                    *flag = true;
                }
                fields
            }
        };
        Ok(DomainQuery {
            max_age: self.max_age_ms.map(Duration::from_millis),
            fields,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GuestPingArgs {
    #[serde(default = "default_ping_timeout")]
    timeout_seconds: u64,
}

fn default_ping_timeout() -> u64 {
    5
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FreezeArgs {
    #[serde(default)]
    unfreeze_timeout_seconds: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscribeArgs {
    events: Option<Vec<String>>,
    #[serde(default)]
    since: Option<u64>,
}

/// `subscribe`'s event names: known, not empty, each once.
fn event_filter(names: Vec<String>) -> Result<Vec<EventKind>, CommandError> {
    if names.is_empty() {
        return Err(CommandError::invalid_argument(
            "arguments.events is empty; leave it out for every event, or use unsubscribe",
        ));
    }
    let mut kinds = Vec::new();
    for name in &names {
        let kind = EventKind::from_name(name).ok_or_else(|| {
            CommandError::invalid_argument(format!(
                "arguments.events: unknown event \"{name}\"; known events: {}",
                EventKind::ALL.map(|k| k.name()).join(", ")
            ))
        })?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    /// Arguments each command accepts (most take none).
    fn valid_arguments(name: &str) -> Map<String, Value> {
        match name {
            "sync" | "prepare-migration-target" => args(json!({"vmi": {}})),
            "migrate" => args(json!({"target": {"libvirt_uri": "qemu:///system"}})),
            "guest-exec" => args(json!({"command": "/bin/true"})),
            "memory-dump" => args(json!({"path": "/tmp/virt-launcher-test-no-such.dump"})),
            "backup" => args(json!({"target_dir": "/tmp"})),
            "redefine-checkpoint" | "delete-checkpoint" => args(json!({"name": "cp1"})),
            _ => Map::new(),
        }
    }

    #[test]
    fn backup_arguments() {
        let parse = |a: Value| Command::parse("backup", args(a));
        let command =
            parse(json!({"mode": "pull", "socket": "/run/b.sock", "incremental": "cp1"})).unwrap();
        assert_eq!(
            command,
            DomainCommand::Backup(BackupRequest {
                target: BackupTarget::Pull {
                    socket: PathBuf::from("/run/b.sock")
                },
                checkpoint: None,
                incremental: Some("cp1".into()),
            })
            .into()
        );
        let command =
            parse(json!({"target_dir": "/b", "format": "raw", "checkpoint": "c-2"})).unwrap();
        assert_eq!(
            command,
            DomainCommand::Backup(BackupRequest {
                target: BackupTarget::Push {
                    dir: PathBuf::from("/b"),
                    format: BackupFormat::Raw
                },
                checkpoint: Some("c-2".into()),
                incremental: None,
            })
            .into()
        );
        for (bad, says) in [
            (json!({}), "arguments.target_dir"),
            (json!({"target_dir": "b"}), "absolute"),
            (json!({"mode": "pull"}), "arguments.socket"),
            (
                json!({"mode": "pull", "socket": "/s", "format": "raw"}),
                "push backup",
            ),
            (
                json!({"mode": "stream", "target_dir": "/b"}),
                "neither push nor pull",
            ),
            (json!({"target_dir": "/b", "format": "vmdk"}), "arguments"),
            (
                json!({"target_dir": "/b", "checkpoint": "../x"}),
                "not a checkpoint name",
            ),
        ] {
            let err = parse(bad.clone()).unwrap_err();
            assert_eq!(err.class, ErrorClass::InvalidArgument, "{bad}");
            assert!(err.desc.contains(says), "{bad}: {}", err.desc);
        }
    }

    #[test]
    fn every_listed_command_parses_and_names_round_trip() {
        for spec in COMMANDS {
            let command = Command::parse(spec.name, valid_arguments(spec.name)).unwrap();
            assert_eq!(command.name(), spec.name);
        }
    }

    /// One of each command. The match makes a new variant fail to compile
    /// until it is added here (and so to COMMANDS, checked below).
    fn one_of_each() -> Vec<Command> {
        let all: Vec<Command> = vec![
            DomainCommand::Ping.into(),
            DomainCommand::QueryVersion.into(),
            LocalCommand::QueryCommands.into(),
            DomainCommand::QueryStatus.into(),
            DomainCommand::Sync {
                vmi: json!({}),
                options: None,
            }
            .into(),
            DomainCommand::Pause.into(),
            DomainCommand::Unpause.into(),
            DomainCommand::Shutdown.into(),
            DomainCommand::Reboot.into(),
            DomainCommand::Reset.into(),
            DomainCommand::Kill.into(),
            DomainCommand::Delete.into(),
            DomainCommand::QueryDomain(DomainQuery::ALL).into(),
            DomainCommand::QueryStats { max_age: None }.into(),
            DomainCommand::QueryQemuVersion.into(),
            DomainCommand::QueryDirtyRate { seconds: 1 }.into(),
            DomainCommand::MemoryDump {
                target: DumpTarget::Path(PathBuf::from("/tmp/x")),
            }
            .into(),
            DomainCommand::Screenshot.into(),
            DomainCommand::QueryVmStats(VmStatsQuery {
                domain_stats: true,
                dirty_rate: false,
                dirty_rate_seconds: 1,
                agent: Vec::new(),
            })
            .into(),
            DomainCommand::Backup(BackupRequest {
                target: BackupTarget::Pull {
                    socket: PathBuf::from("/tmp/s"),
                },
                checkpoint: None,
                incremental: None,
            })
            .into(),
            DomainCommand::BackupAbort.into(),
            DomainCommand::QueryCheckpoints.into(),
            DomainCommand::RedefineCheckpoint {
                name: "c".into(),
                xml: None,
                creation_time: None,
            }
            .into(),
            DomainCommand::DeleteCheckpoint {
                name: "c".into(),
                metadata_only: false,
            }
            .into(),
            DomainCommand::Upgrade { binary: None }.into(),
            GuestCommand::Ping { timeout_seconds: 5 }.into(),
            GuestCommand::QueryGuestInfo.into(),
            GuestCommand::QueryUsers.into(),
            GuestCommand::QueryFilesystems.into(),
            GuestCommand::QueryInterfaces.into(),
            GuestCommand::QueryOsInfo.into(),
            GuestCommand::Exec(GuestExecArgs {
                command: "x".into(),
                args: vec![],
                timeout_seconds: 1,
            })
            .into(),
            GuestCommand::Freeze {
                unfreeze_timeout_seconds: 0,
            }
            .into(),
            GuestCommand::Unfreeze.into(),
            MigrationCommand::PrepareTarget { vmi: json!({}) }.into(),
            MigrationCommand::Migrate(Box::new(
                serde_json::from_value(json!({"target": {"libvirt_uri": "x"}})).unwrap(),
            ))
            .into(),
            MigrationCommand::Cancel.into(),
            MigrationCommand::Query.into(),
            MigrationCommand::Finalize {
                refresh_links: Vec::new(),
            }
            .into(),
            LocalCommand::Subscribe {
                events: None,
                since: None,
            }
            .into(),
            LocalCommand::Unsubscribe.into(),
        ];
        for command in &all {
            match command {
                Command::Local(
                    LocalCommand::QueryCommands
                    | LocalCommand::Subscribe { .. }
                    | LocalCommand::Unsubscribe,
                )
                | Command::Manager(
                    ManagerCommand::Domain(
                        DomainCommand::Ping
                        | DomainCommand::QueryVersion
                        | DomainCommand::QueryStatus
                        | DomainCommand::Sync { .. }
                        | DomainCommand::Pause
                        | DomainCommand::Unpause
                        | DomainCommand::Shutdown
                        | DomainCommand::Reboot
                        | DomainCommand::Reset
                        | DomainCommand::Kill
                        | DomainCommand::Delete
                        | DomainCommand::QueryDomain(_)
                        | DomainCommand::QueryStats { .. }
                        | DomainCommand::QueryQemuVersion
                        | DomainCommand::QueryDirtyRate { .. }
                        | DomainCommand::MemoryDump { .. }
                        | DomainCommand::Screenshot
                        | DomainCommand::QueryVmStats(_)
                        | DomainCommand::Backup(_)
                        | DomainCommand::BackupAbort
                        | DomainCommand::QueryCheckpoints
                        | DomainCommand::RedefineCheckpoint { .. }
                        | DomainCommand::DeleteCheckpoint { .. }
                        | DomainCommand::Upgrade { .. },
                    )
                    | ManagerCommand::Guest(
                        GuestCommand::Ping { .. }
                        | GuestCommand::QueryGuestInfo
                        | GuestCommand::QueryUsers
                        | GuestCommand::QueryFilesystems
                        | GuestCommand::QueryInterfaces
                        | GuestCommand::QueryOsInfo
                        | GuestCommand::Exec(_)
                        | GuestCommand::Freeze { .. }
                        | GuestCommand::Unfreeze,
                    )
                    | ManagerCommand::Migration(
                        MigrationCommand::PrepareTarget { .. }
                        | MigrationCommand::Migrate(_)
                        | MigrationCommand::Cancel
                        | MigrationCommand::Query
                        | MigrationCommand::Finalize { .. },
                    ),
                ) => {}
            }
        }
        all
    }

    #[test]
    fn every_command_is_listed_once_in_table_order() {
        let all = one_of_each();
        assert_eq!(COMMANDS.len(), all.len());
        for (spec, command) in COMMANDS.iter().zip(&all) {
            assert_eq!(spec.name, command.name());
            // The table's parser builds the same variant.
            let parsed = Command::parse(spec.name, valid_arguments(spec.name)).unwrap();
            assert_eq!(
                std::mem::discriminant(&parsed),
                std::mem::discriminant(command)
            );
        }
    }

    #[test]
    fn local_commands_never_reach_the_manager() {
        for spec in COMMANDS {
            let command = Command::parse(spec.name, valid_arguments(spec.name)).unwrap();
            let local = matches!(command, Command::Local(_));
            assert_eq!(
                local,
                ["query-commands", "subscribe", "unsubscribe"].contains(&spec.name),
                "{}",
                spec.name
            );
        }
    }

    #[test]
    fn a_dropped_reply_is_seen_at_once() {
        let (reply, answer) = ReplyTo::channel();
        drop(reply);
        assert!(answer.recv().is_err());
        let (reply, answer) = ReplyTo::channel();
        reply.send(Ok(crate::protocol::Return::new()));
        assert_eq!(answer.recv().unwrap(), Ok(crate::protocol::Return::new()));
    }

    #[test]
    fn a_reused_reply_channel_carries_one_answer_per_request() {
        let slot = ReplySlot::new();
        for n in 0..3u64 {
            let reply = slot.reply_to("query-status");
            let answer = crate::replies::Thawed {
                thawed_filesystems: n,
            };
            reply.send(Ok(answer.into()));
            assert_eq!(slot.wait(), Ok(answer.into()));
        }
        // Dropped unanswered: the waiting client hears so, naming the command.
        drop(slot.reply_to("pause"));
        let err = slot.wait().unwrap_err();
        assert_eq!(err.class, ErrorClass::Internal);
        assert_eq!(
            err.desc,
            "pause: the domain manager dropped this request without answering it"
        );
        // Dropped unsent and discarded: the next request's answer is its own.
        drop(slot.reply_to("ping"));
        slot.discard();
        slot.reply_to("ping")
            .send(Ok(crate::protocol::Return::new()));
        assert_eq!(slot.wait(), Ok(crate::protocol::Return::new()));
        assert!(slot.rx.is_empty());
    }

    #[test]
    fn unknown_command_is_command_not_found() {
        let err = Command::parse("frobnicate", Map::new()).unwrap_err();
        assert_eq!(err.class, ErrorClass::CommandNotFound);
        assert!(err.desc.contains("frobnicate"));
    }

    #[test]
    fn sync_takes_the_clusters_options() {
        let parsed = Command::parse(
            "sync",
            args(json!({"vmi": {}, "options": {
                "smbios": {"manufacturer": "Acme"},
                "memBalloonStatsPeriod": 3,
                "preallocatedVolumes": ["thick"],
                "freePageReportingDisabled": true
            }})),
        )
        .unwrap();
        let Command::Manager(ManagerCommand::Domain(DomainCommand::Sync { options, .. })) = parsed
        else {
            panic!("not a sync: {parsed:?}");
        };
        let options = options.expect("options");
        assert_eq!(options.smbios.unwrap().manufacturer, "Acme");
        assert_eq!(options.mem_balloon_stats_period, 3);
        assert!(options.preallocated_volumes.contains("thick"));
        assert!(options.free_page_reporting_disabled);
        let Command::Manager(ManagerCommand::Domain(DomainCommand::Sync { options, .. })) =
            Command::parse("sync", args(json!({"vmi": {}}))).unwrap()
        else {
            panic!("not a sync");
        };
        assert_eq!(options, None);
    }

    #[test]
    fn unknown_argument_keys_are_invalid_argument() {
        let err = Command::parse("ping", args(json!({"x": 1}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert_eq!(err.desc, "unknown argument \"x\": ping takes no arguments");
        let err = Command::parse("sync", args(json!({"vmi": {}, "force": true}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(err.desc.contains("force"), "{}", err.desc);
        let err = Command::parse("sync", Map::new()).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert_eq!(err.desc, "arguments: missing field `vmi`");
        let err = Command::parse("sync", args(json!({"vmi": "x"}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        let err = Command::parse("sync", args(json!({"vmi": {}, "options": {"smbois": {}}})))
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(err.desc.contains("smbois"), "{}", err.desc);
        let err =
            Command::parse("migrate", args(json!({"target": {"libvirt_uri": ""}}))).unwrap_err();
        assert!(err.desc.contains("libvirt_uri"), "{}", err.desc);
    }

    #[test]
    fn guest_command_arguments() {
        assert_eq!(
            Command::parse("guest-ping", Map::new()).unwrap(),
            GuestCommand::Ping { timeout_seconds: 5 }.into()
        );
        let exec = Command::parse(
            "guest-exec",
            args(json!({"command": "cat", "args": ["/x"]})),
        )
        .unwrap();
        assert_eq!(
            exec,
            GuestCommand::Exec(GuestExecArgs {
                command: "cat".into(),
                args: vec!["/x".into()],
                timeout_seconds: 30
            })
            .into()
        );
        for bad in [
            ("guest-exec", json!({"command": ""})),
            ("guest-exec", json!({"command": "x", "timeout_seconds": 0})),
            ("guest-exec", json!({"args": []})),
            ("guest-ping", json!({"timeout_seconds": 99999})),
            ("freeze", json!({"unfreeze_timeout_seconds": -1})),
        ] {
            let err = Command::parse(bad.0, args(bad.1.clone())).unwrap_err();
            assert_eq!(err.class, ErrorClass::InvalidArgument, "{bad:?}");
        }
        assert_eq!(
            Command::parse("freeze", Map::new()).unwrap(),
            GuestCommand::Freeze {
                unfreeze_timeout_seconds: 0
            }
            .into()
        );
    }

    #[test]
    fn query_arguments() {
        assert_eq!(
            Command::parse("query-stats", Map::new()).unwrap(),
            DomainCommand::QueryStats { max_age: None }.into()
        );
        assert_eq!(
            Command::parse("query-stats", args(json!({"max_age_ms": 0}))).unwrap(),
            DomainCommand::QueryStats {
                max_age: Some(Duration::ZERO)
            }
            .into()
        );
        assert_eq!(
            Command::parse("query-domain", Map::new()).unwrap(),
            DomainCommand::QueryDomain(DomainQuery::ALL).into()
        );
        let parsed = Command::parse(
            "query-domain",
            args(json!({"fields": ["state", "xml", "state"], "max_age_ms": 250})),
        )
        .unwrap();
        assert_eq!(
            parsed,
            DomainCommand::QueryDomain(DomainQuery {
                max_age: Some(Duration::from_millis(250)),
                fields: DomainFields {
                    uuid: false,
                    state: true,
                    xml: true,
                    spec: false,
                    network: false,
                    volumes: false,
                    guest: false,
                },
            })
            .into()
        );
        let err = Command::parse("query-domain", args(json!({"fields": ["nope"]}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert_eq!(
            err.desc,
            "arguments.fields: unknown field \"nope\"; known fields: uuid, state, xml, spec, network, volumes, guest (name is always returned)"
        );
        for bad in [
            ("query-stats", json!({"max_age_ms": -1})),
            ("query-stats", json!({"max_age": 1})),
            ("query-domain", json!({"fields": "xml"})),
            ("query-domain", json!({"max_age_ms": "1"})),
        ] {
            let err = Command::parse(bad.0, args(bad.1.clone())).unwrap_err();
            assert_eq!(err.class, ErrorClass::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn every_whole_number_argument_has_a_range_named_in_the_error() {
        let ten_years = 315_360_000u64;
        let target = json!({"libvirt_uri": "qemu+unix:///system"});
        // (command, argument, least, most, other arguments it needs)
        let cases = [
            ("query-domain", "max_age_ms", 0, ten_years * 1000, json!({})),
            ("query-stats", "max_age_ms", 0, ten_years * 1000, json!({})),
            ("guest-ping", "timeout_seconds", 1, 3600, json!({})),
            (
                "guest-exec",
                "timeout_seconds",
                1,
                3600,
                json!({"command": "x"}),
            ),
            ("freeze", "unfreeze_timeout_seconds", 0, 3600, json!({})),
            (
                "migrate",
                "bandwidth_mib_per_s",
                0,
                1 << 20,
                json!({"target": target}),
            ),
            (
                "migrate",
                "completion_timeout_per_gib",
                0,
                ten_years,
                json!({"target": target}),
            ),
            (
                "migrate",
                "progress_timeout",
                0,
                ten_years,
                json!({"target": target}),
            ),
            (
                "migrate",
                "max_downtime_ms",
                0,
                2_000_000,
                json!({"target": target}),
            ),
        ];
        let with = |base: &Value, name: &str, value: Value| {
            let mut map = args(base.clone());
            map.insert(name.to_string(), value);
            map
        };
        for (command, name, least, most, base) in cases {
            for ok in [least, most] {
                let parsed = Command::parse(command, with(&base, name, json!(ok)));
                assert!(parsed.is_ok(), "{command} {name}={ok}: {parsed:?}");
            }
            let mut out_of_range = vec![json!(most + 1), json!(u64::MAX), json!(i64::MIN)];
            if least > 0 {
                out_of_range.push(json!(least - 1));
            } else {
                out_of_range.push(json!(-1));
            }
            for bad in out_of_range {
                let err = Command::parse(command, with(&base, name, bad.clone())).unwrap_err();
                assert_eq!(err.class, ErrorClass::InvalidArgument);
                assert_eq!(
                    err.desc,
                    format!("arguments.{name}: {bad} is out of range ({least} to {most})"),
                    "{command}"
                );
            }
            for bad in [
                json!(1e308),
                json!(0.5),
                json!("5"),
                json!([1]),
                json!(true),
            ] {
                let err = Command::parse(command, with(&base, name, bad.clone())).unwrap_err();
                assert_eq!(
                    err.desc,
                    format!(
                        "arguments.{name}: expected a whole number from {least} to {most}, got {bad}"
                    ),
                    "{command}"
                );
            }
        }
    }

    #[test]
    fn day_two_arguments() {
        assert_eq!(
            Command::parse("query-dirty-rate", Map::new()).unwrap(),
            DomainCommand::QueryDirtyRate { seconds: 1 }.into()
        );
        assert_eq!(
            Command::parse("query-dirty-rate", args(json!({"seconds": 5}))).unwrap(),
            DomainCommand::QueryDirtyRate { seconds: 5 }.into()
        );
        let dir = crate::scratch::ScratchDir::new("dump-path");
        let file = dir.join("guest.memory.dump");
        assert_eq!(
            Command::parse("memory-dump", args(json!({"path": file}))).unwrap(),
            DomainCommand::MemoryDump {
                target: DumpTarget::Path(file.clone())
            }
            .into()
        );
        assert_eq!(
            Command::parse("memory-dump", args(json!({"volume": "dump"}))).unwrap(),
            DomainCommand::MemoryDump {
                target: DumpTarget::Volume("dump".into())
            }
            .into()
        );
        std::fs::write(&file, b"x").unwrap();
        let missing_dir = dir.join("no/such/dir.dump");
        for (bad, why) in [
            (json!({"seconds": 0}), "out of range"),
            (json!({"seconds": 61}), "out of range"),
        ] {
            let err = Command::parse("query-dirty-rate", args(bad)).unwrap_err();
            assert_eq!(err.class, ErrorClass::InvalidArgument);
            assert!(err.desc.contains(why), "{}", err.desc);
        }
        let all = Command::parse("query-vm-stats", Map::new()).unwrap();
        assert_eq!(
            all,
            DomainCommand::QueryVmStats(VmStatsQuery {
                domain_stats: true,
                dirty_rate: false,
                dirty_rate_seconds: 1,
                agent: VM_STATS_AGENT_COMMANDS.to_vec(),
            })
            .into()
        );
        let some = Command::parse(
            "query-vm-stats",
            args(json!({"domain_stats": false, "dirty_rate": true,
                        "agent": ["guest-get-time", "guest-get-load", "guest-get-time"]})),
        )
        .unwrap();
        assert_eq!(
            some,
            DomainCommand::QueryVmStats(VmStatsQuery {
                domain_stats: false,
                dirty_rate: true,
                dirty_rate_seconds: 1,
                agent: vec!["guest-get-time", "guest-get-load"],
            })
            .into()
        );
        let err =
            Command::parse("query-vm-stats", args(json!({"agent": ["guest-exec"]}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(err.desc.contains("guest-exec"), "{}", err.desc);
        for (bad, why) in [
            (json!({"path": "guest.dump"}), "must be an absolute path"),
            (json!({"path": file}), "already exists"),
            (json!({"path": missing_dir}), "directory does not exist"),
            (json!({"path": "/"}), "must name a file"),
            (json!({}), "either path"),
            (json!({"path": "/tmp/x.dump", "volume": "v"}), "either path"),
        ] {
            let err = Command::parse("memory-dump", args(bad)).unwrap_err();
            assert_eq!(err.class, ErrorClass::InvalidArgument);
            assert!(err.desc.contains(why), "{}", err.desc);
        }
    }

    #[test]
    fn subscribe_filters_are_checked() {
        assert_eq!(
            Command::parse("subscribe", args(json!({"events": ["DOMAIN_LIFECYCLE"]}))).unwrap(),
            LocalCommand::Subscribe {
                events: Some(vec![EventKind::DomainLifecycle]),
                since: None
            }
            .into()
        );
        assert_eq!(
            Command::parse(
                "subscribe",
                args(json!({"events": ["AGENT_CONNECTED", "AGENT_CONNECTED"]}))
            )
            .unwrap(),
            LocalCommand::Subscribe {
                events: Some(vec![EventKind::AgentConnected]),
                since: None
            }
            .into()
        );
        assert_eq!(
            Command::parse("subscribe", args(json!({"events": null}))).unwrap(),
            LocalCommand::Subscribe {
                events: None,
                since: None
            }
            .into()
        );
        assert_eq!(
            Command::parse("subscribe", args(json!({"since": 41}))).unwrap(),
            LocalCommand::Subscribe {
                events: None,
                since: Some(41)
            }
            .into()
        );
        let err = Command::parse("subscribe", args(json!({"since": -1}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        let err = Command::parse("subscribe", args(json!({"events": []}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        let err = Command::parse("subscribe", args(json!({"events": ["NOPE"]}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(err.desc.contains("NOPE"));
    }
}
