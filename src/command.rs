//! The commands of the socket protocol: their names, one-line summaries and
//! typed arguments. A request becomes a `Command` here, before anything
//! happens, so unknown commands and bad arguments never cause side effects.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crossbeam_channel::Sender;

use crate::events::EventKind;
use crate::migration::MigrationOptions;
use crate::protocol::{CommandError, CommandResult, ErrorClass};

/// A client command for the domain manager, and where to send its one
/// reply.
pub struct ManagerRequest {
    pub command: Command,
    pub reply: Sender<CommandResult>,
}

pub struct CommandSpec {
    pub name: &'static str,
    pub summary: &'static str,
}

/// Every command, in the order the greeting and the docs list them.
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "ping",
        summary: "Answers {} when the launcher's domain manager is alive.",
    },
    CommandSpec {
        name: "query-version",
        summary: "Versions of the launcher, the libvirt library, the libvirt daemon and the hypervisor.",
    },
    CommandSpec {
        name: "query-commands",
        summary: "The commands this launcher understands.",
    },
    CommandSpec {
        name: "query-status",
        summary: "The launcher's phase and the domain's state and reason, from the launcher's own view (never blocks on libvirt).",
    },
    CommandSpec {
        name: "sync",
        summary: "Reconcile to arguments.vmi (a KubeVirt VMI): define the domain if missing, start it if down, resume it if paused by something other than pause; returns the domain's state.",
    },
    CommandSpec {
        name: "pause",
        summary: "Suspend the running domain.",
    },
    CommandSpec {
        name: "unpause",
        summary: "Resume a domain suspended by pause.",
    },
    CommandSpec {
        name: "shutdown",
        summary: "Ask the guest to power off by ACPI. Returns at once; completion shows as DOMAIN_LIFECYCLE events and the launcher then exits with status 0.",
    },
    CommandSpec {
        name: "reboot",
        summary: "Soft reboot: through the guest agent when it is connected, else by ACPI.",
    },
    CommandSpec {
        name: "reset",
        summary: "Hard reset of the guest, like pressing the reset button.",
    },
    CommandSpec {
        name: "kill",
        summary: "Force the domain off (libvirt destroy). The launcher then exits with status 0.",
    },
    CommandSpec {
        name: "delete",
        summary: "Undefine the domain. A running domain keeps running as a transient one.",
    },
    CommandSpec {
        name: "query-domain",
        summary: "The live domain: name, uuid, state, reason and the parsed domain XML.",
    },
    CommandSpec {
        name: "query-stats",
        summary: "libvirt bulk statistics of the domain (cpu, balloon, vcpu, block, interface), named as virsh domstats names them.",
    },
    CommandSpec {
        name: "guest-ping",
        summary: "Ping the QEMU guest agent (arguments.timeout_seconds, default 5).",
    },
    CommandSpec {
        name: "query-guest-info",
        summary: "What the guest agent last reported: agent version and commands, hostname, OS, timezone, freeze status, users and filesystems (at most 10 each). Served from the launcher's cache.",
    },
    CommandSpec {
        name: "query-users",
        summary: "Users logged in to the guest, from the agent (full list).",
    },
    CommandSpec {
        name: "query-filesystems",
        summary: "The guest's mounted filesystems, from the agent (full list).",
    },
    CommandSpec {
        name: "query-interfaces",
        summary: "The guest's network interfaces from the agent, without lo; the primary IPv4 address first.",
    },
    CommandSpec {
        name: "query-os-info",
        summary: "The guest's OS (os-release and kernel), hostname and timezone, from the agent.",
    },
    CommandSpec {
        name: "guest-exec",
        summary: "Run arguments.command with arguments.args in the guest through the agent and wait up to arguments.timeout_seconds (default 30): exit code, stdout and stderr. A non-zero exit is a result, not an error.",
    },
    CommandSpec {
        name: "freeze",
        summary: "Freeze the guest's filesystems; they thaw by themselves after arguments.unfreeze_timeout_seconds (0: never).",
    },
    CommandSpec {
        name: "unfreeze",
        summary: "Thaw the guest's filesystems.",
    },
    CommandSpec {
        name: "prepare-migration-target",
        summary: "On the target launcher: prepare directories and disks for arguments.vmi arriving by migration; returns the address (libvirt URI, migration URI, paths) to give the source's migrate.",
    },
    CommandSpec {
        name: "migrate",
        summary: "On the source launcher: live-migrate the guest to arguments.target (prepare-migration-target's reply), with KubeVirt's migration options. Returns at once; progress and the outcome come as MIGRATION_* events. After success the launcher exits with status 0.",
    },
    CommandSpec {
        name: "migrate-cancel",
        summary: "Cancel the running migration: on the source the guest keeps running there; on a prepared target the launcher cleans up and exits.",
    },
    CommandSpec {
        name: "query-migration",
        summary: "The migration's role, phase, progress, timings and outcome (null when none).",
    },
    CommandSpec {
        name: "finalize-migration",
        summary: "On the target after the guest arrived: post-migration steps (the guest clock is set through the agent).",
    },
    CommandSpec {
        name: "subscribe",
        summary: "Send events on this connection; arguments.events limits them to the listed names.",
    },
    CommandSpec {
        name: "unsubscribe",
        summary: "Stop sending events on this connection.",
    },
];

pub fn command_names() -> Vec<&'static str> {
    COMMANDS.iter().map(|c| c.name).collect()
}

/// A request that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Ping,
    QueryVersion,
    QueryCommands,
    QueryStatus,
    Sync { vmi: Value },
    Pause,
    Unpause,
    Shutdown,
    Reboot,
    Reset,
    Kill,
    Delete,
    QueryDomain,
    QueryStats,
    Subscribe { events: Option<Vec<EventKind>> },
    Unsubscribe,
    GuestPing { timeout_seconds: u64 },
    QueryGuestInfo,
    QueryUsers,
    QueryFilesystems,
    QueryInterfaces,
    QueryOsInfo,
    GuestExec(GuestExecArgs),
    Freeze { unfreeze_timeout_seconds: u64 },
    Unfreeze,
    PrepareMigrationTarget { vmi: Value },
    Migrate(Box<MigrationOptions>),
    MigrateCancel,
    QueryMigration,
    FinalizeMigration,
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

impl Command {
    /// Validates a command name and its arguments.
    pub fn parse(name: &str, arguments: Map<String, Value>) -> Result<Command, CommandError> {
        let command = match name {
            "ping" => no_args(arguments, Command::Ping)?,
            "query-version" => no_args(arguments, Command::QueryVersion)?,
            "query-commands" => no_args(arguments, Command::QueryCommands)?,
            "query-status" => no_args(arguments, Command::QueryStatus)?,
            "sync" => {
                let args: SyncArgs = typed_args(arguments)?;
                if !args.vmi.is_object() {
                    return Err(CommandError::invalid_argument(
                        "arguments.vmi must be a VirtualMachineInstance object",
                    ));
                }
                Command::Sync { vmi: args.vmi }
            }
            "pause" => no_args(arguments, Command::Pause)?,
            "unpause" => no_args(arguments, Command::Unpause)?,
            "shutdown" => no_args(arguments, Command::Shutdown)?,
            "reboot" => no_args(arguments, Command::Reboot)?,
            "reset" => no_args(arguments, Command::Reset)?,
            "kill" => no_args(arguments, Command::Kill)?,
            "delete" => no_args(arguments, Command::Delete)?,
            "query-domain" => no_args(arguments, Command::QueryDomain)?,
            "query-stats" => no_args(arguments, Command::QueryStats)?,
            "subscribe" => {
                let args: SubscribeArgs = typed_args(arguments)?;
                let events = match args.events {
                    None => None,
                    Some(names) if names.is_empty() => {
                        return Err(CommandError::invalid_argument(
                            "arguments.events is empty; leave it out for every event, or use unsubscribe",
                        ));
                    }
                    Some(names) => Some(
                        names
                            .iter()
                            .map(|n| {
                                EventKind::from_name(n).ok_or_else(|| {
                                    CommandError::invalid_argument(format!(
                                        "arguments.events: unknown event \"{n}\"; known events: {}",
                                        EventKind::ALL.map(|k| k.name()).join(", ")
                                    ))
                                })
                            })
                            .collect::<Result<Vec<_>, _>>()?
                            .into_iter()
                            .fold(Vec::new(), |mut unique, kind| {
                                if !unique.contains(&kind) {
                                    unique.push(kind);
                                }
                                unique
                            }),
                    ),
                };
                Command::Subscribe { events }
            }
            "unsubscribe" => no_args(arguments, Command::Unsubscribe)?,
            "guest-ping" => {
                let args: GuestPingArgs = typed_args(arguments)?;
                Command::GuestPing {
                    timeout_seconds: bounded_seconds("timeout_seconds", args.timeout_seconds, 1)?,
                }
            }
            "query-guest-info" => no_args(arguments, Command::QueryGuestInfo)?,
            "query-users" => no_args(arguments, Command::QueryUsers)?,
            "query-filesystems" => no_args(arguments, Command::QueryFilesystems)?,
            "query-interfaces" => no_args(arguments, Command::QueryInterfaces)?,
            "query-os-info" => no_args(arguments, Command::QueryOsInfo)?,
            "guest-exec" => {
                let args: GuestExecArgs = typed_args(arguments)?;
                if args.command.is_empty() {
                    return Err(CommandError::invalid_argument(
                        "arguments.command must name the program to run in the guest",
                    ));
                }
                bounded_seconds("timeout_seconds", args.timeout_seconds, 1)?;
                Command::GuestExec(args)
            }
            "freeze" => {
                let args: FreezeArgs = typed_args(arguments)?;
                Command::Freeze {
                    unfreeze_timeout_seconds: bounded_seconds(
                        "unfreeze_timeout_seconds",
                        args.unfreeze_timeout_seconds,
                        0,
                    )?,
                }
            }
            "unfreeze" => no_args(arguments, Command::Unfreeze)?,
            "prepare-migration-target" => {
                let args: SyncArgs = typed_args(arguments)?;
                if !args.vmi.is_object() {
                    return Err(CommandError::invalid_argument(
                        "arguments.vmi must be a VirtualMachineInstance object",
                    ));
                }
                Command::PrepareMigrationTarget { vmi: args.vmi }
            }
            "migrate" => {
                let options: MigrationOptions = typed_args(arguments)?;
                if options.target.libvirt_uri.is_empty() {
                    return Err(CommandError::invalid_argument(
                        "arguments.target.libvirt_uri must name the target's libvirt daemon",
                    ));
                }
                Command::Migrate(Box::new(options))
            }
            "migrate-cancel" => no_args(arguments, Command::MigrateCancel)?,
            "query-migration" => no_args(arguments, Command::QueryMigration)?,
            "finalize-migration" => no_args(arguments, Command::FinalizeMigration)?,
            _ => {
                return Err(CommandError::new(
                    ErrorClass::CommandNotFound,
                    format!("unknown command \"{name}\"; query-commands lists the known ones"),
                ));
            }
        };
        Ok(command)
    }

    /// Handled by the connection itself rather than the domain manager.
    pub fn is_connection_local(&self) -> bool {
        matches!(
            self,
            Command::QueryCommands | Command::Subscribe { .. } | Command::Unsubscribe
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            Command::Ping => "ping",
            Command::QueryVersion => "query-version",
            Command::QueryCommands => "query-commands",
            Command::QueryStatus => "query-status",
            Command::Sync { .. } => "sync",
            Command::Pause => "pause",
            Command::Unpause => "unpause",
            Command::Shutdown => "shutdown",
            Command::Reboot => "reboot",
            Command::Reset => "reset",
            Command::Kill => "kill",
            Command::Delete => "delete",
            Command::QueryDomain => "query-domain",
            Command::QueryStats => "query-stats",
            Command::Subscribe { .. } => "subscribe",
            Command::Unsubscribe => "unsubscribe",
            Command::GuestPing { .. } => "guest-ping",
            Command::QueryGuestInfo => "query-guest-info",
            Command::QueryUsers => "query-users",
            Command::QueryFilesystems => "query-filesystems",
            Command::QueryInterfaces => "query-interfaces",
            Command::QueryOsInfo => "query-os-info",
            Command::GuestExec(_) => "guest-exec",
            Command::Freeze { .. } => "freeze",
            Command::Unfreeze => "unfreeze",
            Command::PrepareMigrationTarget { .. } => "prepare-migration-target",
            Command::Migrate(_) => "migrate",
            Command::MigrateCancel => "migrate-cancel",
            Command::QueryMigration => "query-migration",
            Command::FinalizeMigration => "finalize-migration",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SyncArgs {
    vmi: Value,
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

fn bounded_seconds(name: &str, value: u64, min: u64) -> Result<u64, CommandError> {
    if value < min || value > MAX_GUEST_TIMEOUT_SECONDS {
        return Err(CommandError::invalid_argument(format!(
            "arguments.{name}: {value} is out of range ({min} to {MAX_GUEST_TIMEOUT_SECONDS})"
        )));
    }
    Ok(value)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscribeArgs {
    events: Option<Vec<String>>,
}

fn no_args(arguments: Map<String, Value>, command: Command) -> Result<Command, CommandError> {
    match arguments.keys().next() {
        None => Ok(command),
        Some(key) => Err(CommandError::invalid_argument(format!(
            "unknown argument \"{key}\": {} takes no arguments",
            command.name()
        ))),
    }
}

fn typed_args<T: DeserializeOwned>(arguments: Map<String, Value>) -> Result<T, CommandError> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|e| CommandError::invalid_argument(format!("arguments: {e}")))
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

    #[test]
    fn every_listed_command_parses_and_names_round_trip() {
        for spec in COMMANDS {
            let arguments = match spec.name {
                "sync" | "prepare-migration-target" => args(json!({"vmi": {}})),
                "migrate" => args(json!({"target": {"libvirt_uri": "qemu:///system"}})),
                "guest-exec" => args(json!({"command": "/bin/true"})),
                _ => Map::new(),
            };
            let command = Command::parse(spec.name, arguments).unwrap();
            assert_eq!(command.name(), spec.name);
        }
    }

    #[test]
    fn every_command_is_listed() {
        let all = [
            Command::Ping,
            Command::QueryVersion,
            Command::QueryCommands,
            Command::QueryStatus,
            Command::Sync { vmi: json!({}) },
            Command::Pause,
            Command::Unpause,
            Command::Shutdown,
            Command::Reboot,
            Command::Reset,
            Command::Kill,
            Command::Delete,
            Command::QueryDomain,
            Command::QueryStats,
            Command::Subscribe { events: None },
            Command::Unsubscribe,
            Command::GuestPing { timeout_seconds: 5 },
            Command::QueryGuestInfo,
            Command::QueryUsers,
            Command::QueryFilesystems,
            Command::QueryInterfaces,
            Command::QueryOsInfo,
            Command::GuestExec(GuestExecArgs {
                command: "x".into(),
                args: vec![],
                timeout_seconds: 1,
            }),
            Command::Freeze {
                unfreeze_timeout_seconds: 0,
            },
            Command::Unfreeze,
            Command::PrepareMigrationTarget { vmi: json!({}) },
            Command::Migrate(Box::new(
                serde_json::from_value(json!({"target": {"libvirt_uri": "x"}})).unwrap(),
            )),
            Command::MigrateCancel,
            Command::QueryMigration,
            Command::FinalizeMigration,
        ];
        // A new variant must be added above (the match makes this fail to
        // compile otherwise) and to COMMANDS.
        for command in &all {
            match command {
                Command::Ping
                | Command::QueryVersion
                | Command::QueryCommands
                | Command::QueryStatus
                | Command::Sync { .. }
                | Command::Pause
                | Command::Unpause
                | Command::Shutdown
                | Command::Reboot
                | Command::Reset
                | Command::Kill
                | Command::Delete
                | Command::QueryDomain
                | Command::QueryStats
                | Command::Subscribe { .. }
                | Command::Unsubscribe
                | Command::GuestPing { .. }
                | Command::QueryGuestInfo
                | Command::QueryUsers
                | Command::QueryFilesystems
                | Command::QueryInterfaces
                | Command::QueryOsInfo
                | Command::GuestExec(_)
                | Command::Freeze { .. }
                | Command::Unfreeze
                | Command::PrepareMigrationTarget { .. }
                | Command::Migrate(_)
                | Command::MigrateCancel
                | Command::QueryMigration
                | Command::FinalizeMigration => {}
            }
            assert!(
                COMMANDS.iter().any(|c| c.name == command.name()),
                "{} is not in COMMANDS",
                command.name()
            );
        }
        assert_eq!(COMMANDS.len(), all.len());
    }

    #[test]
    fn unknown_command_is_command_not_found() {
        let err = Command::parse("frobnicate", Map::new()).unwrap_err();
        assert_eq!(err.class, ErrorClass::CommandNotFound);
        assert!(err.desc.contains("frobnicate"));
    }

    #[test]
    fn unknown_argument_keys_are_invalid_argument() {
        let err = Command::parse("ping", args(json!({"x": 1}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(err.desc.contains("\"x\""));
        let err = Command::parse("sync", args(json!({"vmi": {}, "force": true}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(err.desc.contains("force"), "{}", err.desc);
        let err = Command::parse("sync", Map::new()).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        let err = Command::parse("sync", args(json!({"vmi": "x"}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
    }

    #[test]
    fn guest_command_arguments() {
        assert_eq!(
            Command::parse("guest-ping", Map::new()).unwrap(),
            Command::GuestPing { timeout_seconds: 5 }
        );
        let exec = Command::parse(
            "guest-exec",
            args(json!({"command": "cat", "args": ["/x"]})),
        )
        .unwrap();
        assert_eq!(
            exec,
            Command::GuestExec(GuestExecArgs {
                command: "cat".into(),
                args: vec!["/x".into()],
                timeout_seconds: 30
            })
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
            Command::Freeze {
                unfreeze_timeout_seconds: 0
            }
        );
    }

    #[test]
    fn subscribe_filters_are_checked() {
        assert_eq!(
            Command::parse("subscribe", args(json!({"events": ["DOMAIN_LIFECYCLE"]}))).unwrap(),
            Command::Subscribe {
                events: Some(vec![EventKind::DomainLifecycle])
            }
        );
        assert_eq!(
            Command::parse(
                "subscribe",
                args(json!({"events": ["AGENT_CONNECTED", "AGENT_CONNECTED"]}))
            )
            .unwrap(),
            Command::Subscribe {
                events: Some(vec![EventKind::AgentConnected])
            }
        );
        let err = Command::parse("subscribe", args(json!({"events": []}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        let err = Command::parse("subscribe", args(json!({"events": ["NOPE"]}))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidArgument);
        assert!(err.desc.contains("NOPE"));
    }
}
