//! Parsing the command line against [`FLAGS`]. No side effects: resolving
//! the identity from a `--vmi` file and checking paths happens later, in
//! `config`.
//!
//! The rules, all ending in a [`UsageError`] (exit status 2) that names the
//! flag:
//! - `--flag VALUE` and `--flag=VALUE` for flags that take a value. A
//!   separate value never starts with `-` (a lone `-` included):
//!   `--uid --allow-emulation` is a missing value, not the uid
//!   "--allow-emulation". A value that really starts with `-` is written
//!   `--flag=-value`.
//! - `--switch`, `--switch=true`, `--switch=false` for on/off flags, all of
//!   them (`--verbose=false` adds nothing, `--version=3` is an error).
//! - `-v`, `-vv`, `-vvv` count; `-h` is `--help`.
//! - Arguments that are not UTF-8 are refused.

use std::ffi::OsString;
use std::fmt;

use super::defs::{Args, FLAGS, FlagKind, FlagSpec};
use super::values::parse_bool;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Run(Box<Args>),
    Help,
    Version,
    GenerateMan,
    /// `--upgrade-check FILE`.
    UpgradeCheck(std::path::PathBuf),
    /// A client subcommand (`probe`, `freeze`, `unfreeze`, `ctl`).
    Subcommand(super::subcommands::Subcommand),
}

/// A bad command line. The message names the flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Parses the arguments after the program name.
pub fn parse<I, S>(argv: I) -> Result<Action, UsageError>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let argv = argv
        .into_iter()
        .enumerate()
        .map(|(i, arg)| {
            arg.into().into_string().map_err(|raw| {
                UsageError(format!(
                    "argument {} ({}) is not valid UTF-8; every flag and value must be",
                    i + 1,
                    raw.to_string_lossy()
                ))
            })
        })
        .collect::<Result<Vec<String>, UsageError>>()?;
    // A subcommand is the first argument, as in `virt-launcher probe`.
    if let Some(spec) = argv.first().and_then(|a| super::subcommands::find(a)) {
        return super::subcommands::parse(spec, &argv[1..]).map(Action::Subcommand);
    }
    let mut args = Args::defaults();
    let mut iter = argv.into_iter().peekable();
    while let Some(arg) = iter.next() {
        // `-vv` is `-v -v`, as in most tools.
        if let Some(vs) = arg
            .strip_prefix('-')
            .filter(|s| s.len() > 1 && s.chars().all(|c| c == 'v'))
        {
            let count = u8::try_from(vs.len()).unwrap_or(u8::MAX);
            args.verbosity = args.verbosity.saturating_add(count);
            continue;
        }
        let (spec, inline_value) = lookup(&arg)?;
        match spec.kind {
            FlagKind::Switch(apply) => {
                let on = match &inline_value {
                    None => true,
                    Some(v) => parse_bool(v).map_err(|why| invalid(spec, v, &why))?,
                };
                apply(&mut args, on);
            }
            FlagKind::Value { name, apply } => {
                let value = match inline_value {
                    Some(v) => v,
                    None => match iter.next_if(|next| !looks_like_a_flag(next)) {
                        Some(v) => v,
                        None => return Err(missing_value(spec, name, iter.peek())),
                    },
                };
                apply(&mut args, &value).map_err(|why| invalid(spec, &value, &why))?;
            }
        }
    }
    if args.force_emulation {
        args.allow_emulation = true;
    }
    Ok(if args.help {
        Action::Help
    } else if args.version {
        Action::Version
    } else if args.generate_man {
        Action::GenerateMan
    } else if let Some(file) = args.upgrade_check.take() {
        Action::UpgradeCheck(file)
    } else {
        Action::Run(Box::new(args))
    })
}

/// Whether a separate argument is a flag rather than a value: anything
/// that starts with `-`, a lone `-` included (no flag gives it a meaning,
/// and `--private-dir -` is more likely a slip than a directory named
/// `-`, which `--private-dir=-` still names).
pub(super) fn looks_like_a_flag(arg: &str) -> bool {
    arg.starts_with('-')
}

fn missing_value(spec: &FlagSpec, value_name: &str, next: Option<&String>) -> UsageError {
    match next {
        Some(flag) => UsageError(format!(
            "--{} needs a value ({value_name}), but the next argument \"{flag}\" is a flag; write --{}=VALUE for a value that starts with '-'",
            spec.long, spec.long
        )),
        None => UsageError(format!(
            "--{} needs a value ({value_name}); see --help",
            spec.long
        )),
    }
}

fn invalid(spec: &FlagSpec, value: &str, why: &str) -> UsageError {
    UsageError(format!("--{}: invalid value \"{value}\": {why}", spec.long))
}

/// Finds the flag an argument names, with its `=value` if it has one.
fn lookup(arg: &str) -> Result<(&'static FlagSpec, Option<String>), UsageError> {
    if let Some(long) = arg.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (long, None),
        };
        return FLAGS
            .iter()
            .find(|f| f.long == name)
            .map(|f| (f, value))
            .ok_or_else(|| UsageError(format!("unknown flag --{name}; see --help")));
    }
    if let Some(short) = arg.strip_prefix('-') {
        let mut chars = short.chars();
        if let (Some(c), None) = (chars.next(), chars.next())
            && let Some(f) = FLAGS.iter().find(|f| f.short == Some(c))
        {
            return Ok((f, None));
        }
        return Err(UsageError(format!("unknown flag {arg}; see --help")));
    }
    Err(UsageError(format!(
        "unexpected argument \"{arg}\": every setting is a --flag, and a subcommand (probe, freeze, unfreeze, ctl) comes first; see --help"
    )))
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;

    fn run(argv: &[&str]) -> Args {
        match parse(argv.iter().copied()) {
            Ok(Action::Run(args)) => *args,
            other => panic!("expected Run, got {other:?}"),
        }
    }

    fn usage_error(argv: &[&str]) -> String {
        match parse(argv.iter().copied()) {
            Err(UsageError(msg)) => msg,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_kubevirt() {
        let a = run(&[]);
        assert_eq!(a.kubevirt_share_dir, PathBuf::from("/var/run/kubevirt"));
        assert_eq!(a.private_dir, PathBuf::from("/var/run/kubevirt-private"));
        assert_eq!(
            a.ephemeral_disk_dir,
            PathBuf::from("/var/run/kubevirt-ephemeral-disks")
        );
        assert_eq!(
            a.container_disk_dir,
            PathBuf::from("/var/run/kubevirt/container-disks")
        );
        assert_eq!(
            a.hotplug_disk_dir,
            PathBuf::from("/var/run/kubevirt/hotplug-disks")
        );
        assert_eq!(a.qemu_timeout, Duration::from_secs(180));
        assert_eq!(a.grace_period_seconds, None);
        assert_eq!(a.max_clients, 16);
        assert_eq!(a.max_line_bytes, 1 << 20);
        assert_eq!(a.client_idle_timeout, None);
        assert_eq!(a.agent_intervals.sys, Duration::from_secs(120));
        assert_eq!(a.agent_intervals.file, Duration::from_secs(300));
        assert_eq!(a.agent_intervals.user, Duration::from_secs(10));
        assert_eq!(a.agent_intervals.version, Duration::from_secs(300));
        assert_eq!(a.agent_intervals.fsfreeze, Duration::from_secs(5));
        assert!(!a.allow_emulation && !a.force_emulation && !a.spawn_libvirt);
        assert_eq!(a.connect, None);
        assert_eq!(a.verbosity, 0);
    }

    #[test]
    fn values_by_space_and_by_equals() {
        let a = run(&[
            "--name",
            "vm1",
            "--namespace=ns1",
            "--qemu-timeout",
            "90s",
            "--grace-period-seconds=5",
            "--max-line-bytes",
            "64KiB",
            "-v",
            "--verbose",
            "-vv",
            "--allow-emulation",
            "--connect",
            "test:///default",
            "--client-idle-timeout=5m",
        ]);
        assert_eq!(a.name.as_deref(), Some("vm1"));
        assert_eq!(a.namespace.as_deref(), Some("ns1"));
        assert_eq!(a.qemu_timeout, Duration::from_secs(90));
        assert_eq!(a.grace_period_seconds, Some(5));
        assert_eq!(a.max_line_bytes, 65536);
        assert_eq!(a.verbosity, 4);
        assert!(a.allow_emulation);
        assert_eq!(a.connect.as_deref(), Some("test:///default"));
        assert_eq!(a.client_idle_timeout, Some(Duration::from_secs(300)));
    }

    #[test]
    fn a_value_flag_never_takes_the_next_flag_as_its_value() {
        let err = usage_error(&["--uid", "--allow-emulation"]);
        assert!(err.starts_with("--uid needs a value (UID)"), "{err}");
        assert!(err.contains("\"--allow-emulation\" is a flag"), "{err}");
        assert!(err.contains("--uid=VALUE"), "{err}");
        assert!(usage_error(&["--name", "-v"]).starts_with("--name needs a value"));
        assert!(usage_error(&["--vmi", "-h"]).starts_with("--vmi needs a value"));
        // The = form carries any value, a lone "-" too; a separate "-" is
        // read as a flag, as the man page says.
        assert_eq!(run(&["--uid=--odd"]).uid.as_deref(), Some("--odd"));
        assert_eq!(run(&["--uid=-"]).uid.as_deref(), Some("-"));
        let err = usage_error(&["--private-dir", "-"]);
        assert!(
            err.starts_with("--private-dir needs a value (DIR)"),
            "{err}"
        );
        assert!(err.contains("\"-\" is a flag"), "{err}");
        assert!(err.contains("--private-dir=VALUE"), "{err}");
        assert!(usage_error(&["-"]).contains("unknown flag -;"));
        assert!(usage_error(&["--grace-period-seconds", "-1"]).contains("needs a value"));
    }

    #[test]
    fn every_switch_takes_an_optional_boolean() {
        assert!(!run(&["--allow-emulation=false"]).allow_emulation);
        assert!(run(&["--spawn-libvirt=true"]).spawn_libvirt);
        assert!(!run(&["--spawn-libvirt", "--spawn-libvirt=false"]).spawn_libvirt);
        let a = run(&["--force-emulation"]);
        assert!(a.force_emulation && a.allow_emulation);
        assert!(usage_error(&["--allow-emulation=maybe"]).contains("--allow-emulation"));
        // --verbose=false adds nothing; --verbose=true is -v.
        assert_eq!(run(&["--verbose=false"]).verbosity, 0);
        assert_eq!(run(&["--verbose=true", "-v"]).verbosity, 2);
        // The informational switches too.
        assert!(usage_error(&["--version=3"]).starts_with("--version: invalid value \"3\""));
        assert!(usage_error(&["--help=please"]).starts_with("--help: invalid value"));
        assert!(matches!(parse(["--version=false"]), Ok(Action::Run(_))));
        assert_eq!(parse(["--version=true"]), Ok(Action::Version));
        assert!(usage_error(&["--generate-man=x"]).starts_with("--generate-man:"));
    }

    #[test]
    fn errors_name_the_flag() {
        assert_eq!(
            usage_error(&["--bogus"]),
            "unknown flag --bogus; see --help"
        );
        assert!(
            usage_error(&["--qemu-timeout", "soon"])
                .starts_with("--qemu-timeout: invalid value \"soon\"")
        );
        assert_eq!(
            usage_error(&["--qemu-timeout", "0"]),
            "--qemu-timeout: invalid value \"0\": must be more than zero"
        );
        assert!(usage_error(&["--qemu-agent-user-interval=0s"]).contains("more than zero"));
        assert!(usage_error(&["--max-clients", "0"]).starts_with("--max-clients:"));
        assert!(
            usage_error(&["--libvirt-log-filters", "garbage"])
                .starts_with("--libvirt-log-filters: invalid value \"garbage\"")
        );
        assert!(usage_error(&["--name"]).starts_with("--name needs a value"));
        assert!(usage_error(&["--name="]).contains("must not be empty"));
        assert!(usage_error(&["stray"]).contains("unexpected argument \"stray\""));
        assert!(usage_error(&["-x"]).contains("unknown flag -x"));
    }

    #[test]
    fn non_utf8_arguments_are_usage_errors() {
        let bad = OsString::from_vec(vec![b'-', b'-', b'n', b'a', b'm', b'e', b'=', 0xff]);
        match parse([OsString::from("--namespace=ns"), bad]) {
            Err(UsageError(msg)) => {
                assert!(
                    msg.starts_with("argument 2 (--name=\u{fffd}) is not valid UTF-8"),
                    "{msg}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn help_version_and_man_actions() {
        assert_eq!(parse(["--help"]), Ok(Action::Help));
        assert_eq!(parse(["-h"]), Ok(Action::Help));
        assert_eq!(parse(["--version"]), Ok(Action::Version));
        assert_eq!(parse(["--generate-man"]), Ok(Action::GenerateMan));
        assert_eq!(parse(["--version", "--help"]), Ok(Action::Help));
        // A bad flag after --help is still reported.
        assert!(parse(["--help", "--nope"]).is_err());
    }

    #[test]
    fn a_subcommand_comes_first() {
        use crate::cli::subcommands::Subcommand;
        assert!(matches!(
            parse(["probe", "--timeout", "2s"]),
            Ok(Action::Subcommand(Subcommand::Probe(_)))
        ));
        assert!(matches!(
            parse(["ctl", "--help"]),
            Ok(Action::Subcommand(Subcommand::Help(spec))) if spec.name == "ctl"
        ));
        // Only as the first argument.
        assert!(usage_error(&["--name", "x", "probe"]).contains("subcommand"));
        assert!(usage_error(&["probe", "--name", "x"]).starts_with("probe: unknown flag --name"));
    }
}
