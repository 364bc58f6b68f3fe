//! Command-line flags.
//!
//! `FLAGS` is the single source of truth: the parser, `--help` and the man
//! page (`--generate-man`) are all built from it, so they cannot drift.
//! Parsing has no side effects; resolving the identity from a `--vmi` file
//! and checking paths happens later, in `config`.

pub mod man;
pub mod values;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use values::{parse_bool, parse_byte_size, parse_count, parse_duration, parse_seconds};

/// Everything the command line says, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub kubevirt_share_dir: PathBuf,
    pub private_dir: PathBuf,
    pub ephemeral_disk_dir: PathBuf,
    pub container_disk_dir: PathBuf,
    pub hotplug_disk_dir: PathBuf,
    pub connect: Option<String>,
    pub qemu_timeout: Duration,
    /// None: use the VMI's terminationGracePeriodSeconds.
    pub grace_period_seconds: Option<u64>,
    pub vmi_file: Option<PathBuf>,
    pub allow_emulation: bool,
    pub force_emulation: bool,
    pub spawn_libvirt: bool,
    pub max_clients: usize,
    pub max_line_bytes: usize,
    pub libvirt_log_filters: Option<String>,
    pub verbosity: u8,
    pub agent_intervals: AgentIntervals,
}

/// How often the guest-agent poller refreshes each kind of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentIntervals {
    pub sys: Duration,
    pub file: Duration,
    pub user: Duration,
    pub version: Duration,
    pub fsfreeze: Duration,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Run(Box<Args>),
    Help,
    Version,
    GenerateMan,
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

type Apply = fn(&mut Args, &str) -> Result<(), String>;

/// One flag: its names, its value, its default and its documentation.
pub struct FlagSpec {
    pub long: &'static str,
    pub short: Option<char>,
    /// Name of the value in docs (`DIR`, `DURATION`), or `None` for a switch.
    pub value_name: Option<&'static str>,
    /// Default applied before parsing; also shown in the docs.
    pub default: Option<&'static str>,
    /// Shown in the docs when the default is not a fixed value.
    pub default_doc: Option<&'static str>,
    pub help: &'static str,
    pub apply: Apply,
}

impl FlagSpec {
    fn is_switch(&self) -> bool {
        self.value_name.is_none()
    }

    /// The default as the docs show it, if any.
    pub fn default_text(&self) -> Option<&'static str> {
        self.default_doc.or(self.default)
    }
}

macro_rules! flag {
    ($long:literal, $value:expr, $default:expr, $help:literal, $apply:expr) => {
        FlagSpec {
            long: $long,
            short: None,
            value_name: $value,
            default: $default,
            default_doc: None,
            help: $help,
            apply: $apply,
        }
    };
}

/// Every flag the launcher accepts, in the order `--help` lists them.
pub static FLAGS: &[FlagSpec] = &[
    flag!(
        "name",
        Some("NAME"),
        None,
        "Name of the VMI. The libvirt domain is called NAMESPACE_NAME. Required unless --vmi names the VMI.",
        |a, v| {
            a.name = Some(non_empty(v)?);
            Ok(())
        }
    ),
    flag!(
        "namespace",
        Some("NAMESPACE"),
        None,
        "Namespace of the VMI. Required unless --vmi names it.",
        |a, v| {
            a.namespace = Some(non_empty(v)?);
            Ok(())
        }
    ),
    flag!(
        "uid",
        Some("UID"),
        None,
        "UID of the VMI; names the per-VMI private directory. Defaults to metadata.uid of --vmi, else one is generated.",
        |a, v| {
            a.uid = Some(non_empty(v)?);
            Ok(())
        }
    ),
    flag!(
        "kubevirt-share-dir",
        Some("DIR"),
        Some("/var/run/kubevirt"),
        "Directory shared with virt-handler; the command socket is created in its sockets/ subdirectory.",
        |a, v| {
            a.kubevirt_share_dir = path(v)?;
            Ok(())
        }
    ),
    flag!(
        "private-dir",
        Some("DIR"),
        Some("/var/run/kubevirt-private"),
        "Private directory for disk images made from config maps and secrets, the serial console socket and per-VMI state.",
        |a, v| {
            a.private_dir = path(v)?;
            Ok(())
        }
    ),
    flag!(
        "ephemeral-disk-dir",
        Some("DIR"),
        Some("/var/run/kubevirt-ephemeral-disks"),
        "Base directory for cloud-init and ignition data and for disk overlays.",
        |a, v| {
            a.ephemeral_disk_dir = path(v)?;
            Ok(())
        }
    ),
    flag!(
        "container-disk-dir",
        Some("DIR"),
        Some("/var/run/kubevirt/container-disks"),
        "Where containerDisk base images are found (disk_N.img).",
        |a, v| {
            a.container_disk_dir = path(v)?;
            Ok(())
        }
    ),
    flag!(
        "hotplug-disk-dir",
        Some("DIR"),
        Some("/var/run/kubevirt/hotplug-disks"),
        "Where hotplugged volumes are mounted.",
        |a, v| {
            a.hotplug_disk_dir = path(v)?;
            Ok(())
        }
    ),
    FlagSpec {
        long: "connect",
        short: None,
        value_name: Some("URI"),
        default: None,
        default_doc: Some("qemu:///system as root, qemu:///session otherwise"),
        help: "libvirt connection URI. test:///default is libvirt's in-process test driver, which needs no daemon. Ignored with --spawn-libvirt.",
        apply: |a, v| {
            a.connect = Some(non_empty(v)?);
            Ok(())
        },
    },
    flag!(
        "qemu-timeout",
        Some("DURATION"),
        Some("3m"),
        "How long to wait for a domain to be defined and started (by --vmi or a sync command) before giving up with exit status 5.",
        |a, v| {
            a.qemu_timeout = parse_duration(v)?;
            Ok(())
        }
    ),
    FlagSpec {
        long: "grace-period-seconds",
        short: None,
        value_name: Some("SECONDS"),
        default: None,
        default_doc: Some("the VMI's spec.terminationGracePeriodSeconds, else 30"),
        help: "After SIGTERM or SIGINT, how long the guest has to power off after the ACPI request before it is forced off. 0 forces it off at once.",
        apply: |a, v| {
            a.grace_period_seconds = Some(parse_seconds(v)?);
            Ok(())
        },
    },
    flag!(
        "vmi",
        Some("FILE"),
        None,
        "Standalone mode: read this VMI (KubeVirt JSON) and sync it at start-up, as KubeVirt's STANDALONE_VMI does.",
        |a, v| {
            a.vmi_file = Some(path(v)?);
            Ok(())
        }
    ),
    flag!(
        "allow-emulation",
        None,
        None,
        "Use plain QEMU emulation (domain type qemu) when /dev/kvm is missing or unusable. Without it, a sync on such a host fails with a clear error.",
        |a, v| {
            a.allow_emulation = parse_bool(v)?;
            Ok(())
        }
    ),
    flag!(
        "force-emulation",
        None,
        None,
        "Always use plain QEMU emulation, even where /dev/kvm exists. For hosts whose KVM does not boot guests (for example some nested setups). Implies --allow-emulation.",
        |a, v| {
            a.force_emulation = parse_bool(v)?;
            Ok(())
        }
    ),
    flag!(
        "spawn-libvirt",
        None,
        None,
        "Start and supervise the launcher's own libvirt daemon and virtlogd, with a private runtime directory, as KubeVirt's launcher pod does; connect to that daemon and stop it on exit.",
        |a, v| {
            a.spawn_libvirt = parse_bool(v)?;
            Ok(())
        }
    ),
    flag!(
        "max-clients",
        Some("N"),
        Some("16"),
        "Most command-socket connections served at once. One more gets a Busy error line and is closed.",
        |a, v| {
            a.max_clients = parse_count(v)?;
            Ok(())
        }
    ),
    flag!(
        "max-line-bytes",
        Some("BYTES"),
        Some("1MiB"),
        "Longest request line accepted (suffixes KiB and MiB allowed). A longer line gets RequestTooLarge and is discarded.",
        |a, v| {
            a.max_line_bytes = parse_byte_size(v)?;
            Ok(())
        }
    ),
    flag!(
        "libvirt-log-filters",
        Some("FILTERS"),
        None,
        "libvirt log filters (libvirt's log_filters syntax, e.g. \"1:qemu 3:*\") for the libvirt client library and any daemon the launcher spawns.",
        |a, v| {
            a.libvirt_log_filters = Some(non_empty(v)?);
            Ok(())
        }
    ),
    flag!(
        "qemu-agent-sys-interval",
        Some("DURATION"),
        Some("120s"),
        "Guest-agent poll interval for interfaces, OS info, hostname and timezone.",
        |a, v| {
            a.agent_intervals.sys = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "qemu-agent-file-interval",
        Some("DURATION"),
        Some("300s"),
        "Guest-agent poll interval for the filesystem list.",
        |a, v| {
            a.agent_intervals.file = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "qemu-agent-user-interval",
        Some("DURATION"),
        Some("10s"),
        "Guest-agent poll interval for logged-in users.",
        |a, v| {
            a.agent_intervals.user = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "qemu-agent-version-interval",
        Some("DURATION"),
        Some("300s"),
        "Guest-agent poll interval for the agent version and supported commands.",
        |a, v| {
            a.agent_intervals.version = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "qemu-fsfreeze-status-interval",
        Some("DURATION"),
        Some("5s"),
        "Guest-agent poll interval for the filesystem freeze status.",
        |a, v| {
            a.agent_intervals.fsfreeze = parse_duration(v)?;
            Ok(())
        }
    ),
    FlagSpec {
        long: "verbose",
        short: Some('v'),
        value_name: None,
        default: None,
        default_doc: None,
        help: "More log output: once for debug, twice for trace. RUST_LOG, when set, takes precedence.",
        apply: |a, _| {
            a.verbosity = a.verbosity.saturating_add(1);
            Ok(())
        },
    },
    FlagSpec {
        long: "version",
        short: None,
        value_name: None,
        default: None,
        default_doc: None,
        help: "Print the version and exit.",
        apply: |_, _| Ok(()),
    },
    FlagSpec {
        long: "help",
        short: Some('h'),
        value_name: None,
        default: None,
        default_doc: None,
        help: "Print this help and exit.",
        apply: |_, _| Ok(()),
    },
    FlagSpec {
        long: "generate-man",
        short: None,
        value_name: None,
        default: None,
        default_doc: None,
        help: "Print the man page (roff) built from this flag table and exit.",
        apply: |_, _| Ok(()),
    },
];

fn non_empty(v: &str) -> Result<String, String> {
    if v.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(v.to_string())
    }
}

fn path(v: &str) -> Result<PathBuf, String> {
    non_empty(v).map(PathBuf::from)
}

impl Args {
    /// The defaults, applied through the same code as the command line so
    /// the documented default is exactly what runs.
    pub fn defaults() -> Args {
        let zero = Duration::ZERO;
        let mut args = Args {
            name: None,
            namespace: None,
            uid: None,
            kubevirt_share_dir: PathBuf::new(),
            private_dir: PathBuf::new(),
            ephemeral_disk_dir: PathBuf::new(),
            container_disk_dir: PathBuf::new(),
            hotplug_disk_dir: PathBuf::new(),
            connect: None,
            qemu_timeout: zero,
            grace_period_seconds: None,
            vmi_file: None,
            allow_emulation: false,
            force_emulation: false,
            spawn_libvirt: false,
            max_clients: 0,
            max_line_bytes: 0,
            libvirt_log_filters: None,
            verbosity: 0,
            agent_intervals: AgentIntervals {
                sys: zero,
                file: zero,
                user: zero,
                version: zero,
                fsfreeze: zero,
            },
        };
        for flag in FLAGS {
            if let Some(default) = flag.default {
                // The defaults are literals in this file and covered by a
                // unit test; a bad one is a programming error caught there.
                let _ = (flag.apply)(&mut args, default);
            }
        }
        args
    }
}

/// Parses the arguments after the program name.
pub fn parse<I, S>(argv: I) -> Result<Action, UsageError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut args = Args::defaults();
    let mut action = None;
    let mut iter = argv.into_iter().map(Into::into);
    while let Some(arg) = iter.next() {
        // `-vv` is `-v -v`, as in most tools.
        if let Some(vs) = arg
            .strip_prefix('-')
            .filter(|s| s.len() > 1 && s.chars().all(|c| c == 'v'))
        {
            args.verbosity = args.verbosity.saturating_add(vs.len() as u8);
            continue;
        }
        let (spec, inline_value) = lookup(&arg)?;
        let value = if spec.is_switch() {
            inline_value.unwrap_or_else(|| "true".to_string())
        } else if let Some(v) = inline_value {
            v
        } else {
            iter.next().ok_or_else(|| {
                UsageError(format!(
                    "--{} needs a value ({}); see --help",
                    spec.long,
                    spec.value_name.unwrap_or("VALUE")
                ))
            })?
        };
        match spec.long {
            "help" => action = action.or(Some(Action::Help)),
            "version" => action = action.or(Some(Action::Version)),
            "generate-man" => action = action.or(Some(Action::GenerateMan)),
            _ => {}
        }
        (spec.apply)(&mut args, &value).map_err(|why| {
            UsageError(format!(
                "--{}: invalid value \"{}\": {}",
                spec.long, value, why
            ))
        })?;
    }
    if args.force_emulation {
        args.allow_emulation = true;
    }
    Ok(action.unwrap_or(Action::Run(Box::new(args))))
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
        "unexpected argument \"{arg}\": every setting is a --flag; see --help"
    )))
}

/// The `--help` text.
pub fn help_text() -> String {
    let mut out = format!(
        "virt-launcher {} - runs one KubeVirt VMI through libvirt and QEMU\n\n\
         Usage: virt-launcher --name NAME --namespace NAMESPACE [FLAGS]\n       \
         virt-launcher --vmi FILE [FLAGS]\n\nFlags:\n",
        env!("CARGO_PKG_VERSION")
    );
    for flag in FLAGS {
        let mut names = String::new();
        if let Some(c) = flag.short {
            names.push_str(&format!("-{c}, "));
        }
        names.push_str("--");
        names.push_str(flag.long);
        if let Some(v) = flag.value_name {
            names.push(' ');
            names.push_str(v);
        }
        out.push_str(&format!("  {names}\n"));
        let mut text = flag.help.to_string();
        if let Some(d) = flag.default_text() {
            text.push_str(&format!(" [default: {d}]"));
        }
        for line in wrap(&text, 72) {
            out.push_str(&format!("        {line}\n"));
        }
    }
    out.push_str(
        "\nThe command socket speaks line-delimited JSON; see man virt-launcher and docs/protocol.md.\n",
    );
    out
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        if !current.is_empty() && current.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

#[cfg(test)]
mod tests {
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
    fn every_documented_default_parses() {
        let mut args = Args::defaults();
        for flag in FLAGS {
            if let Some(d) = flag.default {
                (flag.apply)(&mut args, d).unwrap_or_else(|e| panic!("--{}: {e}", flag.long));
            }
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
        assert_eq!(a.agent_intervals.sys, Duration::from_secs(120));
        assert_eq!(a.agent_intervals.file, Duration::from_secs(300));
        assert_eq!(a.agent_intervals.user, Duration::from_secs(10));
        assert_eq!(a.agent_intervals.version, Duration::from_secs(300));
        assert_eq!(a.agent_intervals.fsfreeze, Duration::from_secs(5));
        assert!(!a.allow_emulation && !a.force_emulation && !a.spawn_libvirt);
        assert_eq!(a.connect, None);
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
        ]);
        assert_eq!(a.name.as_deref(), Some("vm1"));
        assert_eq!(a.namespace.as_deref(), Some("ns1"));
        assert_eq!(a.qemu_timeout, Duration::from_secs(90));
        assert_eq!(a.grace_period_seconds, Some(5));
        assert_eq!(a.max_line_bytes, 65536);
        assert_eq!(a.verbosity, 4);
        assert!(a.allow_emulation);
        assert_eq!(a.connect.as_deref(), Some("test:///default"));
    }

    #[test]
    fn switches_take_go_style_booleans() {
        assert!(!run(&["--allow-emulation=false"]).allow_emulation);
        assert!(run(&["--spawn-libvirt=true"]).spawn_libvirt);
        let a = run(&["--force-emulation"]);
        assert!(a.force_emulation && a.allow_emulation);
        assert!(usage_error(&["--allow-emulation=maybe"]).contains("--allow-emulation"));
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
        assert!(usage_error(&["--max-clients", "0"]).starts_with("--max-clients:"));
        assert!(
            usage_error(&["--grace-period-seconds", "-1"]).starts_with("--grace-period-seconds:")
        );
        assert!(usage_error(&["--name"]).starts_with("--name needs a value"));
        assert!(usage_error(&["--name="]).contains("must not be empty"));
        assert!(usage_error(&["stray"]).contains("unexpected argument \"stray\""));
        assert!(usage_error(&["-x"]).contains("unknown flag -x"));
    }

    #[test]
    fn help_version_and_man_actions() {
        assert_eq!(parse(["--help"]), Ok(Action::Help));
        assert_eq!(parse(["-h"]), Ok(Action::Help));
        assert_eq!(parse(["--version"]), Ok(Action::Version));
        assert_eq!(parse(["--generate-man"]), Ok(Action::GenerateMan));
        // A bad flag after --help is still reported.
        assert!(parse(["--help", "--nope"]).is_err());
    }

    #[test]
    fn help_lists_every_flag_with_its_default() {
        // Defaults may be wrapped across lines; compare with single spaces.
        let help = help_text().split_whitespace().collect::<Vec<_>>().join(" ");
        for flag in FLAGS {
            assert!(help.contains(&format!("--{}", flag.long)), "{}", flag.long);
            if let Some(d) = flag.default_text() {
                assert!(help.contains(&format!("[default: {d}]")), "{}", flag.long);
            }
        }
    }
}
