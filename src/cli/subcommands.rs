//! The client subcommands of the one binary (`probe`, `freeze`,
//! `unfreeze`, `ctl`): their flag tables, parsing into a [`Subcommand`],
//! and the text `--help` and the man page show. Running them is the
//! `client` module's job.
//!
//! The flag syntax is the launcher's (`--flag VALUE`, `--flag=VALUE`, a
//! separate value never starts with `-`, not even a lone `-`, switches take
//! `=true`/`=false`);
//! a subcommand's operands are the arguments that are not flags, and `--`
//! ends the flags.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::parse::{UsageError, looks_like_a_flag};
use super::values::{parse_bool, parse_duration, parse_duration_saturating};
use crate::command::MAX_GUEST_TIMEOUT_SECONDS;
use crate::server::socket::{SocketNames, SocketPaths};

/// One flag of a subcommand.
pub struct SubFlag {
    pub long: &'static str,
    pub short: Option<char>,
    /// The value's name in the docs; `None` for a switch.
    pub value: Option<&'static str>,
    pub default: Option<&'static str>,
    pub help: &'static str,
}

/// One subcommand: its name, operands, flags and documentation.
pub struct SubcommandSpec {
    pub name: &'static str,
    /// The operands after the flags, as the synopsis shows them.
    pub operands: Option<&'static str>,
    /// One line for the launcher's `--help`.
    pub summary: &'static str,
    /// What it does, for its `--help` and the man page (paragraphs
    /// separated by blank lines).
    pub description: &'static str,
    pub flags: &'static [SubFlag],
}

impl std::fmt::Debug for SubcommandSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SubcommandSpec({})", self.name)
    }
}

/// Subcommands are told apart by name (the table holds each once).
impl PartialEq for SubcommandSpec {
    fn eq(&self, other: &SubcommandSpec) -> bool {
        self.name == other.name
    }
}

const SOCKET: SubFlag = SubFlag {
    long: "socket",
    short: None,
    value: Some("PATH"),
    default: None,
    help: "The launcher's command socket. Default: KUBEVIRT_SHARE_DIR/sockets/launcher-sock.",
};

const SHARE_DIR: SubFlag = SubFlag {
    long: "kubevirt-share-dir",
    short: None,
    value: Some("DIR"),
    default: Some("/var/run/kubevirt"),
    help: "The launcher's --kubevirt-share-dir: the socket is DIR/sockets/launcher-sock. Not with --socket.",
};

const HELP: SubFlag = SubFlag {
    long: "help",
    short: Some('h'),
    value: None,
    default: None,
    help: "Print this subcommand's help and exit.",
};

/// Every subcommand, in the order the docs list them.
pub static SUBCOMMANDS: &[SubcommandSpec] = &[
    SubcommandSpec {
        name: "probe",
        operands: None,
        summary: "Ping the guest agent through the launcher (exec readiness and liveness probes).",
        description: "Pings the QEMU guest agent through the launcher's socket (its guest-ping command), as KubeVirt's virt-probe does for a VMI's guest-agent-ping readiness and liveness probes. Exits 0 when the agent answered. Prints nothing on success.\n\nThe whole probe (connecting, the greeting, the agent's answer) ends within --timeout, whatever the launcher does: a launcher that is gone fails at once, and one that is wedged (stopped, or not reading its socket) fails when the timeout passes.",
        flags: &[
            SOCKET,
            SHARE_DIR,
            SubFlag {
                long: "timeout",
                short: None,
                value: Some("DURATION"),
                default: Some("5s"),
                help: "How long the probe may take in all. More than zero, at most 87600h.",
            },
            HELP,
        ],
    },
    SubcommandSpec {
        name: "freeze",
        operands: None,
        summary: "Freeze the guest's filesystems before a backup (as virt-freezer --freeze).",
        description: "Freezes the guest's filesystems through the guest agent before a backup or snapshot, as KubeVirt's virt-freezer --freeze does. As virt-freezer, it succeeds without freezing anything when the domain is not running or no guest agent is connected (a backup then is crash-consistent), and it thaws again when the freeze fails. Frozen filesystems thaw by themselves after --unfreeze-timeout unless unfreeze comes first.",
        flags: &[
            SOCKET,
            SHARE_DIR,
            SubFlag {
                long: "unfreeze-timeout",
                short: None,
                value: Some("DURATION"),
                default: Some("5m"),
                help: "Thaw automatically after this long (whole seconds, at most 1h); 0 never thaws automatically.",
            },
            SubFlag {
                long: "timeout",
                short: None,
                value: Some("DURATION"),
                default: Some("60s"),
                help: "How long the launcher may take to answer. More than zero, at most 87600h.",
            },
            HELP,
        ],
    },
    SubcommandSpec {
        name: "unfreeze",
        operands: None,
        summary: "Thaw the guest's filesystems after a backup (as virt-freezer --unfreeze).",
        description: "Thaws the guest's filesystems after a backup, as KubeVirt's virt-freezer --unfreeze does, and cancels a pending automatic thaw. Succeeds without doing anything when the domain is not running or no guest agent is connected.",
        flags: &[
            SOCKET,
            SHARE_DIR,
            SubFlag {
                long: "timeout",
                short: None,
                value: Some("DURATION"),
                default: Some("60s"),
                help: "How long the launcher may take to answer. More than zero, at most 87600h.",
            },
            HELP,
        ],
    },
    SubcommandSpec {
        name: "ctl",
        operands: Some("[COMMAND [ARGUMENTS...]]"),
        summary: "Send one command to the launcher and print its reply; follow its events.",
        description: "Sends COMMAND (any command of the socket protocol, see COMMAND SOCKET) with ARGUMENTS and prints the reply's return object: indented JSON on a terminal, one line otherwise. Exits 0 when the launcher returned, 1 with the error on standard error when it answered with an error. ARGUMENTS is either one JSON object ('{\"timeout_seconds\":3}') or KEY=VALUE pairs (timeout_seconds=3), each VALUE read as JSON when it is valid JSON and as a string otherwise (command=/bin/true, args='[\"-c\",\"echo hi\"]').\n\nWithout COMMAND it lists the launcher's commands (query-commands). With --events it subscribes, to the event names given as operands or to all events, and prints every event until interrupted or until the launcher closes the connection (exit 0).",
        flags: &[
            SOCKET,
            SHARE_DIR,
            SubFlag {
                long: "raw",
                short: None,
                value: None,
                default: None,
                help: "Print each line exactly as the launcher sent it (the whole reply, error or event line), on standard output.",
            },
            SubFlag {
                long: "events",
                short: None,
                value: None,
                default: None,
                help: "Follow events instead of sending a command; the operands are event names.",
            },
            SubFlag {
                long: "timeout",
                short: None,
                value: Some("DURATION"),
                default: Some("5m"),
                help: "How long the launcher may take to answer (with --events: to accept the subscription). More than zero, at most 87600h.",
            },
            HELP,
        ],
    },
];

/// Where the client finds the launcher, and how long it waits.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTarget {
    pub socket: PathBuf,
    pub timeout: Duration,
}

/// A parsed subcommand.
#[derive(Debug, Clone, PartialEq)]
pub enum Subcommand {
    Probe(ClientTarget),
    Freeze {
        target: ClientTarget,
        unfreeze_timeout_seconds: u64,
    },
    Unfreeze(ClientTarget),
    Ctl {
        target: ClientTarget,
        raw: bool,
        request: CtlRequest,
    },
    /// `--help` of the named subcommand.
    Help(&'static SubcommandSpec),
}

/// What `ctl` does.
#[derive(Debug, Clone, PartialEq)]
pub enum CtlRequest {
    /// No command: list the launcher's commands.
    ListCommands,
    Command {
        execute: String,
        arguments: Map<String, Value>,
    },
    /// Follow events (all when `names` is empty).
    Events { names: Vec<String> },
}

/// The subcommand `name`, if it is one.
pub fn find(name: &str) -> Option<&'static SubcommandSpec> {
    SUBCOMMANDS.iter().find(|s| s.name == name)
}

/// Parses the arguments after the subcommand's name.
pub fn parse(spec: &'static SubcommandSpec, argv: &[String]) -> Result<Subcommand, UsageError> {
    let usage = |message: String| UsageError(format!("{}: {message}", spec.name));
    let mut values: Vec<(&'static str, String)> = Vec::new();
    let mut operands = Vec::new();
    let mut iter = argv.iter().peekable();
    let mut flags_done = false;
    while let Some(arg) = iter.next() {
        if flags_done || !looks_like_a_flag(arg) {
            operands.push(arg.clone());
            continue;
        }
        if arg == "--" {
            flags_done = true;
            continue;
        }
        let (flag, inline) = lookup(spec, arg).map_err(usage)?;
        let value = match (flag.value, inline) {
            (None, None) => "true".to_string(),
            (None, Some(v)) => {
                let on = parse_bool(&v).map_err(|why| {
                    usage(format!("--{}: invalid value \"{v}\": {why}", flag.long))
                })?;
                on.to_string()
            }
            (Some(_), Some(v)) => v,
            (Some(name), None) => match iter.next_if(|next| !looks_like_a_flag(next)) {
                Some(v) => v.clone(),
                None => {
                    return Err(usage(format!(
                        "--{} needs a value ({name}); write --{}=VALUE for a value that starts with '-'",
                        flag.long, flag.long
                    )));
                }
            },
        };
        values.retain(|(long, _)| *long != flag.long);
        values.push((flag.long, value));
    }
    let get = |long: &str| {
        values
            .iter()
            .find(|(l, _)| *l == long)
            .map(|(_, v)| v.as_str())
    };
    if get("help") == Some("true") {
        return Ok(Subcommand::Help(spec));
    }
    let default = |long: &str| {
        spec.flags
            .iter()
            .find(|f| f.long == long)
            .and_then(|f| f.default)
            .unwrap_or("")
    };
    let value_of = |long: &str| get(long).unwrap_or_else(|| default(long));
    let duration = |long: &str| {
        let v = value_of(long);
        parse_duration(v).map_err(|why| usage(format!("--{long}: invalid value \"{v}\": {why}")))
    };
    let switch = |long: &str| get(long) == Some("true");
    let target = ClientTarget {
        socket: socket_path(get("socket"), get("kubevirt-share-dir")).map_err(usage)?,
        timeout: duration("timeout")?,
    };
    if spec.operands.is_none()
        && let Some(first) = operands.first()
    {
        return Err(usage(format!(
            "unexpected argument \"{first}\": {} takes only flags; see {} --help",
            spec.name, spec.name
        )));
    }
    Ok(match spec.name {
        "probe" => Subcommand::Probe(target),
        "freeze" => {
            let v = value_of("unfreeze-timeout");
            let seconds = unfreeze_seconds(v).map_err(|why| {
                usage(format!("--unfreeze-timeout: invalid value \"{v}\": {why}"))
            })?;
            Subcommand::Freeze {
                target,
                unfreeze_timeout_seconds: seconds,
            }
        }
        "unfreeze" => Subcommand::Unfreeze(target),
        _ => Subcommand::Ctl {
            target,
            raw: switch("raw"),
            request: ctl_request(switch("events"), operands).map_err(usage)?,
        },
    })
}

fn lookup(
    spec: &'static SubcommandSpec,
    arg: &str,
) -> Result<(&'static SubFlag, Option<String>), String> {
    if let Some(long) = arg.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (long, None),
        };
        return spec
            .flags
            .iter()
            .find(|f| f.long == name)
            .map(|f| (f, value))
            .ok_or_else(|| format!("unknown flag --{name}; see {} --help", spec.name));
    }
    let short = arg.strip_prefix('-').unwrap_or(arg);
    let mut chars = short.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && let Some(f) = spec.flags.iter().find(|f| f.short == Some(c))
    {
        return Ok((f, None));
    }
    Err(format!("unknown flag {arg}; see {} --help", spec.name))
}

/// `--socket`, else under the share directory `sockets/launcher-json-sock`
/// where it exists (a launcher in KubeVirt mode, whose `launcher-sock`
/// speaks gRPC), else `sockets/launcher-sock`.
fn socket_path(socket: Option<&str>, share_dir: Option<&str>) -> Result<PathBuf, String> {
    match (socket, share_dir) {
        (Some(_), Some(_)) => Err(
            "give --socket or --kubevirt-share-dir, not both: --socket names the socket itself"
                .into(),
        ),
        (Some(""), _) => Err("--socket: must not be empty".into()),
        (Some(path), None) => Ok(PathBuf::from(path)),
        (None, Some("")) => Err("--kubevirt-share-dir: must not be empty".into()),
        (None, share) => {
            let share = share.unwrap_or(SHARE_DIR.default.unwrap_or("/var/run/kubevirt"));
            let share = std::path::Path::new(share);
            let beside_grpc = SocketPaths::new(share, SocketNames::JSON_BESIDE_GRPC).ready;
            if beside_grpc.exists() {
                return Ok(beside_grpc);
            }
            Ok(SocketPaths::new(share, SocketNames::LAUNCHER).ready)
        }
    }
}

/// `--unfreeze-timeout`: whole seconds, 0 to the protocol's limit.
fn unfreeze_seconds(v: &str) -> Result<u64, String> {
    let d = parse_duration_saturating(v)?;
    if d.subsec_nanos() != 0 {
        return Err("must be whole seconds".into());
    }
    if d.as_secs() > MAX_GUEST_TIMEOUT_SECONDS {
        return Err(format!(
            "must be at most {MAX_GUEST_TIMEOUT_SECONDS} s (1h)"
        ));
    }
    Ok(d.as_secs())
}

fn ctl_request(events: bool, operands: Vec<String>) -> Result<CtlRequest, String> {
    if events {
        if let Some(bad) = operands
            .iter()
            .find(|n| n.is_empty() || n.contains(['=', '{']))
        {
            return Err(format!(
                "--events takes event names (DOMAIN_LIFECYCLE, AGENT_CONNECTED, ...), not \"{bad}\""
            ));
        }
        return Ok(CtlRequest::Events { names: operands });
    }
    let mut operands = operands.into_iter();
    let Some(execute) = operands.next() else {
        return Ok(CtlRequest::ListCommands);
    };
    if execute.is_empty() || execute.contains(['=', '{']) {
        return Err(format!(
            "\"{execute}\" is not a command name; the command comes first, then its arguments"
        ));
    }
    let arguments = ctl_arguments(&operands.collect::<Vec<_>>())?;
    Ok(CtlRequest::Command { execute, arguments })
}

/// ARGUMENTS: one JSON object, or KEY=VALUE pairs whose values are JSON
/// when they parse as JSON and strings otherwise.
pub fn ctl_arguments(operands: &[String]) -> Result<Map<String, Value>, String> {
    if let [only] = operands
        && only.trim_start().starts_with('{')
    {
        return match serde_json::from_str::<Value>(only) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err("ARGUMENTS must be a JSON object".into()),
            Err(e) => Err(format!("ARGUMENTS is not a valid JSON object: {e}")),
        };
    }
    let mut map = Map::new();
    for pair in operands {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!(
                "argument \"{pair}\" is not KEY=VALUE (or give all arguments as one JSON object)"
            ));
        };
        if key.is_empty() {
            return Err(format!("argument \"{pair}\" has no key before '='"));
        }
        if map.contains_key(key) {
            return Err(format!("argument {key} is given twice"));
        }
        let value =
            serde_json::from_str::<Value>(value).unwrap_or_else(|_| Value::String(value.into()));
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

/// A subcommand's synopsis: `name [--flag VALUE]... OPERANDS`.
pub fn synopsis(spec: &SubcommandSpec) -> String {
    let mut out = format!("virt-launcher {}", spec.name);
    for flag in spec.flags.iter().filter(|f| f.long != "help") {
        match flag.value {
            Some(v) => out.push_str(&format!(" [--{} {v}]", flag.long)),
            None => out.push_str(&format!(" [--{}]", flag.long)),
        }
    }
    if let Some(operands) = spec.operands {
        out.push(' ');
        out.push_str(operands);
    }
    out
}

/// A subcommand's `--help`.
pub fn help_text(spec: &SubcommandSpec) -> String {
    let mut out = String::from("Usage:");
    for line in super::help::wrap(&synopsis(spec), 70) {
        out.push_str(&format!(" {line}\n      "));
    }
    out.truncate(out.trim_end().len());
    out.push_str("\n\n");
    for paragraph in spec.description.split("\n\n") {
        for line in super::help::wrap(paragraph, 78) {
            out.push_str(&line);
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str("Flags:\n");
    for flag in spec.flags {
        let mut names = String::new();
        if let Some(c) = flag.short {
            names.push_str(&format!("-{c}, "));
        }
        names.push_str(&format!("--{}", flag.long));
        if let Some(v) = flag.value {
            names.push_str(&format!(" {v}"));
        }
        out.push_str(&format!("  {names}\n"));
        let mut text = flag.help.to_string();
        if let Some(d) = flag.default {
            text.push_str(&format!(" [default: {d}]"));
        }
        for line in super::help::wrap(&text, 72) {
            out.push_str(&format!("        {line}\n"));
        }
    }
    out.push('\n');
    for line in super::help::wrap(
        "Exit status: 0 on success, 1 with a one-line reason on standard error when it failed, 2 for a bad command line.",
        78,
    ) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_args(name: &str, argv: &[&str]) -> Result<Subcommand, UsageError> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        parse(find(name).unwrap(), &argv)
    }

    fn target(socket: &str, secs: u64) -> ClientTarget {
        ClientTarget {
            socket: PathBuf::from(socket),
            timeout: Duration::from_secs(secs),
        }
    }

    #[test]
    fn probe_defaults_and_flags() {
        assert_eq!(
            parse_args("probe", &[]),
            Ok(Subcommand::Probe(target(
                "/var/run/kubevirt/sockets/launcher-sock",
                5
            )))
        );
        assert_eq!(
            parse_args("probe", &["--socket", "/s", "--timeout=1s"]),
            Ok(Subcommand::Probe(target("/s", 1)))
        );
        assert_eq!(
            parse_args("probe", &["--kubevirt-share-dir", "/tmp/share"]),
            Ok(Subcommand::Probe(target(
                "/tmp/share/sockets/launcher-sock",
                5
            )))
        );
        match parse_args("probe", &["--timeout", "250ms"]) {
            Ok(Subcommand::Probe(t)) => assert_eq!(t.timeout, Duration::from_millis(250)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn usage_errors_name_the_subcommand_and_flag() {
        let err = |name, argv: &[&str]| parse_args(name, argv).unwrap_err().0;
        assert_eq!(
            err("probe", &["--bogus"]),
            "probe: unknown flag --bogus; see probe --help"
        );
        assert!(err("probe", &["--timeout", "0"]).contains("--timeout: invalid value \"0\""));
        assert!(err("probe", &["--timeout"]).contains("--timeout needs a value"));
        assert!(err("probe", &["stray"]).contains("unexpected argument \"stray\""));
        assert!(
            err("probe", &["--socket", "/a", "--kubevirt-share-dir", "/b"]).contains("not both")
        );
        assert!(err("freeze", &["--unfreeze-timeout", "1500ms"]).contains("whole seconds"));
        assert!(err("freeze", &["--unfreeze-timeout", "2h"]).contains("at most 3600"));
        for huge in [
            "18446744073709551615",
            "5000000000000000h",
            "99999999999999999999",
        ] {
            let message = err("freeze", &["--unfreeze-timeout", huge]);
            assert!(
                message.ends_with("must be at most 3600 s (1h)"),
                "{message}"
            );
            for sub in ["probe", "freeze", "unfreeze", "ctl"] {
                let message = err(sub, &["--timeout", huge]);
                assert!(
                    message.starts_with(&format!("{sub}: --timeout: invalid value")),
                    "{message}"
                );
                assert!(
                    message.ends_with("must be at most 87600h (ten years)"),
                    "{message}"
                );
            }
        }
        // A lone "-" is read as a flag, never as a value or an operand.
        assert!(err("probe", &["--socket", "-"]).contains("--socket needs a value"));
        assert_eq!(err("ctl", &["-"]), "ctl: unknown flag -; see ctl --help");
        assert!(err("ctl", &["--raw=maybe"]).contains("--raw: invalid value"));
        assert!(err("ctl", &["a=1"]).contains("is not a command name"));
        assert!(err("ctl", &["guest-ping", "nokey"]).contains("is not KEY=VALUE"));
        assert!(err("ctl", &["x", "{bad"]).contains("not a valid JSON object"));
        assert!(err("ctl", &["x", "[1]"]).contains("is not KEY=VALUE"));
        assert!(err("ctl", &["x", "a=1", "a=2"]).contains("given twice"));
        assert!(err("ctl", &["--events", "a=b"]).contains("event names"));
    }

    #[test]
    fn freeze_timeouts() {
        match parse_args("freeze", &[]) {
            Ok(Subcommand::Freeze {
                target,
                unfreeze_timeout_seconds,
            }) => {
                assert_eq!(unfreeze_timeout_seconds, 300);
                assert_eq!(target.timeout, Duration::from_secs(60));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_args("freeze", &["--unfreeze-timeout=0"]),
            Ok(Subcommand::Freeze {
                unfreeze_timeout_seconds: 0,
                ..
            })
        ));
        assert!(matches!(
            parse_args("freeze", &["--unfreeze-timeout", "1m30s"]),
            Ok(Subcommand::Freeze {
                unfreeze_timeout_seconds: 90,
                ..
            })
        ));
        // unfreeze has no --unfreeze-timeout.
        assert!(parse_args("unfreeze", &["--unfreeze-timeout", "1s"]).is_err());
    }

    #[test]
    fn ctl_commands_arguments_and_events() {
        let ctl = |argv: &[&str]| match parse_args("ctl", argv) {
            Ok(Subcommand::Ctl { raw, request, .. }) => (raw, request),
            other => panic!("{other:?}"),
        };
        assert_eq!(ctl(&[]), (false, CtlRequest::ListCommands));
        assert_eq!(
            ctl(&["--raw", "query-status"]),
            (
                true,
                CtlRequest::Command {
                    execute: "query-status".into(),
                    arguments: Map::new()
                }
            )
        );
        // KEY=VALUE: JSON when it parses, a string otherwise.
        let (_, req) = ctl(&[
            "guest-exec",
            "command=/bin/sh",
            "args=[\"-c\",\"echo hi\"]",
            "timeout_seconds=3",
            "flag=true",
            "name=\"quoted\"",
            "empty=",
            "eq=a=b",
        ]);
        let CtlRequest::Command { arguments, .. } = req else {
            panic!("{req:?}")
        };
        assert_eq!(
            Value::Object(arguments),
            json!({"command": "/bin/sh", "args": ["-c", "echo hi"], "timeout_seconds": 3,
                   "flag": true, "name": "quoted", "empty": "", "eq": "a=b"})
        );
        let (_, req) = ctl(&["guest-ping", "{\"timeout_seconds\": 2}"]);
        assert_eq!(
            req,
            CtlRequest::Command {
                execute: "guest-ping".into(),
                arguments: json!({"timeout_seconds": 2}).as_object().unwrap().clone()
            }
        );
        assert_eq!(
            ctl(&["--events", "DOMAIN_LIFECYCLE", "AGENT_CONNECTED"]).1,
            CtlRequest::Events {
                names: vec!["DOMAIN_LIFECYCLE".into(), "AGENT_CONNECTED".into()]
            }
        );
        assert_eq!(
            ctl(&["--events"]).1,
            CtlRequest::Events { names: Vec::new() }
        );
        // Flags after the command, and -- before an operand that starts with '-'.
        let (raw, _) = ctl(&["ping", "--raw"]);
        assert!(raw);
        let (_, req) = ctl(&["--", "guest-exec", "command=-x"]);
        assert!(matches!(req, CtlRequest::Command { .. }));
    }

    #[test]
    fn help_is_per_subcommand() {
        for spec in SUBCOMMANDS {
            assert_eq!(
                parse(spec, &["--help".to_string()]),
                Ok(Subcommand::Help(spec))
            );
            assert_eq!(parse(spec, &["-h".to_string()]), Ok(Subcommand::Help(spec)));
            let help = help_text(spec);
            assert!(help.starts_with(&format!("Usage: virt-launcher {}", spec.name)));
            // Every flag of the synopsis is there, in one piece.
            let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(flat.contains(&synopsis(spec)), "{help}");
            for flag in spec.flags {
                assert!(help.contains(&format!("--{}", flag.long)), "{}", flag.long);
            }
            assert!(help.lines().all(|l| l.chars().count() <= 100), "{help}");
        }
    }
}
