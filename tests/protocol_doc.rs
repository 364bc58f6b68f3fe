//! docs/protocol.md as written: every `socat` example it shows on libvirt's
//! test driver is run exactly as printed (the same shell line, through the
//! real `socat`) against a launcher started as §1 says, and what `socat`
//! prints must be the lines the document shows. Which examples run depends
//! on the binary under test (`VL_LAUNCHER_BIN`, else cargo's), asked for
//! its backend: the default build checks the examples of the default
//! build's output, and the examples showing the static build's
//! (`"backend":"wire"`) are checked when scripts/test.sh's static pass
//! runs this suite on the static binary (with `VL_TEST_URI`, libvirtd's
//! test driver, as the document's example shows). Each run says how many
//! examples it left to the other. Values that differ from
//! run to run (pids, uptimes) are compared by type; `{...}`, `[...]` and `…`
//! in the document stand for anything. The guest agent's examples (real
//! QEMU in the document) are run the same way on the real test guest,
//! booted as the document's `e2e/docguest` (run it under
//! `flock /work/qemu-tests.lock`). The migration examples, which need two
//! launchers and the addresses one gives the other, are not run here;
//! `tests/migration.rs` checks those replies.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::guest::{GuestOptions, boot};
use common::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(20);

/// The UID of examples/vmi.json, which §1's second command gives `--uid`.
const EXAMPLE_UID: &str = "0c0f4a3e-5b1d-4f6a-9d2e-7a8b9c0d1e2f";

/// The socket path the document writes out in full.
const DEFAULT_SOCKET: &str = "/var/run/kubevirt/sockets/launcher-sock";

/// One fenced example with at least one `$ ... socat ...` line.
#[derive(Debug)]
struct Example {
    /// 1-based line of the opening fence.
    line: usize,
    /// The `### heading` (or `## heading`) it sits under.
    section: String,
    /// The `$ ` lines, without the prompt.
    commands: Vec<String>,
    /// Every other line of the block: what the commands print (or, in an
    /// interactive session, what was typed: `typed`).
    output: Vec<String>,
    /// In an interactive session (`socat READLINE`), the request lines
    /// typed; `output` then has the lines the launcher wrote.
    typed: Vec<String>,
}

impl Example {
    /// The first command the socat lines execute.
    fn execute(&self) -> Option<String> {
        // Inside a double-quoted shell string the quotes are escaped.
        let joined = self.commands.join("\n").replace('\\', "");
        let at = joined.find("\"execute\":\"")? + "\"execute\":\"".len();
        let rest = &joined[at..];
        let end = rest.find('"')?;
        Some(rest[..end].to_string())
    }

    /// The socket variable its socat lines name.
    fn socket(&self) -> &'static str {
        let joined = self.commands.join("\n");
        if joined.contains("UNIX-CONNECT:$A") || joined.contains("UNIX-CONNECT:$B") {
            "two launchers"
        } else {
            "one launcher"
        }
    }
}

fn examples(doc: &str) -> Vec<Example> {
    let mut found = Vec::new();
    let mut section = String::new();
    let mut block: Option<(usize, Vec<String>)> = None;
    for (i, raw) in doc.lines().enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.starts_with("```") {
            match block.take() {
                None => block = Some((i + 1, Vec::new())),
                Some((line, lines)) => {
                    let (commands, mut output): (Vec<String>, Vec<String>) =
                        lines.into_iter().partition(|l| l.starts_with("$ "));
                    // The prompt after a session ends.
                    output.retain(|l| l != "$");
                    let interactive = commands.iter().any(|c| c.contains("READLINE"));
                    let typed = if interactive {
                        let (typed, written) = output
                            .into_iter()
                            .partition(|l| l.starts_with("{\"execute\""));
                        output = written;
                        typed
                    } else {
                        Vec::new()
                    };
                    if commands
                        .iter()
                        .any(|c| c.contains("socat") || c.starts_with("$ virt-launcher ctl"))
                    {
                        found.push(Example {
                            line,
                            section: section.clone(),
                            commands: commands.iter().map(|c| c[2..].to_string()).collect(),
                            output,
                            typed,
                        });
                    }
                }
            }
            continue;
        }
        match &mut block {
            Some((_, lines)) => lines.push(trimmed.to_string()),
            None => {
                if let Some(h) = raw.strip_prefix("### ").or(raw.strip_prefix("## ")) {
                    section = h.trim().to_string();
                }
            }
        }
    }
    found
}

/// Sections whose examples the document marks as real QEMU: the guest
/// agent's commands.
const REAL_QEMU_SECTIONS: &[&str] = &[
    "guest-ping",
    "query-guest-info",
    "query-users",
    "query-filesystems",
    "query-interfaces",
    "query-os-info",
    "guest-exec",
    "freeze",
    "unfreeze",
];

/// How the launcher must be started and what must happen before the
/// example, for the document's output to be the launcher's.
struct Scenario {
    /// Started as §1's first command (`--vmi examples/vmi.json`); else as
    /// its second (no `--vmi`, `--uid` of the example VMI).
    with_vmi: bool,
    /// Commands sent (and answered with `return`) before the example.
    before: &'static [&'static str],
}

fn scenario(execute: &str, example: &Example) -> Scenario {
    let fresh = Scenario {
        with_vmi: true,
        before: &[],
    };
    match execute {
        "ping"
        | "query-version"
        | "query-commands"
        | "query-status"
        | "pause"
        | "reboot"
        | "reset"
        | "kill"
        | "delete"
        | "query-domain"
        | "query-stats"
        | "subscribe"
        | "unsubscribe"
        | "query-qemu-version"
        | "query-dirty-rate"
        | "memory-dump"
        | "screenshot"
        | "query-vm-stats"
        | "backup"
        | "redefine-checkpoint"
        | "upgrade" => fresh,
        // The binary's own client (§1), and §15's session, on a launcher
        // started as §1's first command.
        "ctl" | "subscribe-session" => fresh,
        // A repeated sync (its reply says "none"): §1's first command
        // synced the same VMI. The first sync: a launcher without one.
        "sync" => Scenario {
            with_vmi: example
                .output
                .iter()
                .any(|l| l.contains("\"action\":\"none\"")),
            before: &[],
        },
        // On the test driver: refused whatever the launcher runs.
        "prepare-migration-target" => fresh,
        // Two unpauses: the first needs a paused domain.
        "unpause" => Scenario {
            with_vmi: true,
            before: &["pause"],
        },
        // The document's shutdown example follows a delete.
        "shutdown" => Scenario {
            with_vmi: true,
            before: &["delete"],
        },
        other => panic!(
            "docs/protocol.md line {}: no scenario for the {other:?} example; add one to tests/protocol_doc.rs",
            example.line
        ),
    }
}

fn start(scenario: &Scenario, tag: &str) -> Launcher {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut args: Vec<String> = vec!["--connect".into(), test_uri()];
    if scenario.with_vmi {
        args.push("--vmi".into());
        args.push(
            repo.join("examples/vmi.json")
                .to_string_lossy()
                .into_owned(),
        );
    } else {
        for flag in [
            "--name",
            "demo",
            "--namespace",
            "default",
            "--uid",
            EXAMPLE_UID,
        ] {
            args.push(flag.into());
        }
    }
    let mut launcher = Launcher::start_in(TempTree::new(tag), &args);
    launcher.wait_ready(T);
    if scenario.with_vmi {
        // --vmi's sync has run once query-status shows the domain running.
        let mut client = launcher.client();
        let deadline = std::time::Instant::now() + T;
        while client.ok("query-status", Value::Null)["phase"] != "Running" {
            assert!(std::time::Instant::now() < deadline, "--vmi never synced");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut client = launcher.client();
    for command in scenario.before {
        client.ok(command, Value::Null);
    }
    launcher
}

/// Runs the example's `$` lines in one shell, in the repository (for
/// `examples/vmi.json`), with `$SOCK` set to the launcher's socket and
/// the `virt-launcher` under test first on `PATH`; standard error goes with
/// standard output, as on a terminal. A line that runs "until Ctrl-C" is
/// left out; an interactive session gets what was typed on its input.
fn run(example: &Example, socket: &Path) -> Vec<String> {
    let commands: Vec<String> = example
        .commands
        .iter()
        .filter(|c| !c.contains("until Ctrl-C"))
        .map(|c| {
            c.replace(DEFAULT_SOCKET, "$SOCK")
                .replace("socat READLINE ", "socat -t 1 - ")
        })
        .collect();
    let script = format!("exec 2>&1\n{}", commands.join("\n"));
    let bin = launcher_bin();
    let bin_dir = bin.parent().expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("sh")
        .args(["-u", "-c", &script])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("SOCK", socket)
        .env("PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sh");
    // What was typed; a session's input stays open, as a terminal's does,
    // until the launcher closes the connection.
    let mut stdin = child.stdin.take().expect("stdin");
    for line in &example.typed {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .expect("type a line");
    }
    if example.typed.is_empty() {
        drop(stdin);
    }
    let mut printed = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut printed)
        .expect("read what the example printed");
    child.wait().expect("wait for sh");
    printed.lines().map(str::to_string).collect()
}

/// Fields whose value differs from run to run (or boot to boot): compared
/// by type only.
const VOLATILE: &[&str] = &[
    "pid",
    // Event numbers: how many events came before.
    "seq",
    "last_seq",
    "uptime_seconds",
    "elapsed_seconds",
    "timestamp",
    "loginTime",
    // How old a cached answer is.
    "age_ms",
    // When a memory dump started and ended.
    "started",
    "ended",
];

/// Objects whose keys are fixed but whose values differ from run to run:
/// the keys are compared, the values by type. How long each step of a
/// sync took: which steps ran is what the document shows.
const VOLATILE_VALUES: &[&str] = &["steps_ms"];

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<null>",
        Value::Bool(_) => "<bool>",
        Value::Number(_) => "<number>",
        Value::String(_) => "<string>",
        Value::Array(_) => "<array>",
        Value::Object(_) => "<object>",
    }
}

fn normalise(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if VOLATILE.contains(&key.as_str()) {
                    *v = Value::String(type_name(v).into());
                } else if let (true, Value::Object(values)) =
                    (VOLATILE_VALUES.contains(&key.as_str()), &mut *v)
                {
                    for value in values.values_mut() {
                        *value = Value::String(type_name(value).into());
                    }
                } else {
                    normalise(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// The document's abbreviations: each stands for any text.
const ELISIONS: &[&str] = &["{...}", "[...]", "…"];

/// Whether `actual` is `pattern` with each elision replaced by some text.
fn matches_elided(pattern: &str, actual: &str) -> bool {
    let mut pieces = vec![pattern.to_string()];
    for elision in ELISIONS {
        pieces = pieces
            .iter()
            .flat_map(|p| p.split(elision).map(str::to_string).collect::<Vec<_>>())
            .collect();
    }
    let (first, rest) = pieces.split_first().expect("split gives one piece");
    let Some(mut left) = actual.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    for piece in middle {
        match left.find(piece.as_str()) {
            Some(at) => left = &left[at + piece.len()..],
            None => return false,
        }
    }
    left.ends_with(last.as_str())
}

/// `"key":VALUE` with VALUE (a number or string up to the next `,`, `}`
/// or `]`) replaced by `#`, for every volatile key: for lines the document
/// abbreviates, which are compared as text.
fn normalise_text(line: &str) -> String {
    let mut out = line.to_string();
    for key in VOLATILE {
        let needle = format!("\"{key}\":");
        let mut from = 0;
        while let Some(at) = out[from..].find(&needle) {
            let start = from + at + needle.len();
            let len = out[start..]
                .find([',', '}', ']'])
                .unwrap_or(out.len() - start);
            out.replace_range(start..start + len, "#");
            from = start + 1;
        }
    }
    out
}

/// Whether the launcher's line `actual` is what the document shows.
fn line_matches(documented: &str, actual: &str) -> bool {
    match (
        serde_json::from_str::<Value>(documented),
        serde_json::from_str::<Value>(actual),
    ) {
        (Ok(mut doc), Ok(mut got)) => {
            normalise(&mut doc);
            normalise(&mut got);
            doc == got
        }
        _ => matches_elided(&normalise_text(documented), &normalise_text(actual)),
    }
}

/// Whether `printed` is the document's `documented`, line by line. Events
/// are compared among themselves: one can come before or after the reply
/// of the command that caused it (§15).
fn lines_match(documented: &[String], printed: &[String]) -> bool {
    let is_event = |l: &&String| l.starts_with("{\"event\":") || l.starts_with("{\"seq\":");
    let split = |lines: &[String]| -> (Vec<String>, Vec<String>) {
        lines.iter().cloned().partition(|l| is_event(&l))
    };
    let (doc_events, doc_rest) = split(documented);
    let (events, rest) = split(printed);
    [(doc_events, events), (doc_rest, rest)]
        .iter()
        .all(|(d, p)| d.len() == p.len() && d.iter().zip(p).all(|(d, a)| line_matches(d, a)))
}

/// Runs `example` against the launcher listening on `socket` and compares.
fn run_and_compare(example: &Example, socket: &Path) -> Result<(), String> {
    let mut printed = run(example, socket);
    // "The first line of every socat run is the greeting; the examples
    // usually omit it."
    let shows_greeting = example.output.iter().any(|l| l.starts_with("{\"hello\":"));
    if !shows_greeting {
        printed.retain(|l| !l.starts_with("{\"hello\":"));
    }
    // "the `Undefined` event of that removal [at exit] ... may follow or
    // not" (§15).
    if !example
        .output
        .iter()
        .any(|l| l.contains("\"event\":\"Undefined\""))
    {
        printed.retain(|l| !l.contains("\"event\":\"Undefined\""));
    }
    if lines_match(&example.output, &printed) {
        Ok(())
    } else {
        Err(format!(
            "docs/protocol.md line {} ({}): the document shows\n{}\nbut the launcher printed\n{}",
            example.line,
            example.section,
            example.output.join("\n"),
            printed.join("\n")
        ))
    }
}

fn check(example: &Example) -> Result<(), String> {
    let execute = example.execute().unwrap_or_else(|| "ctl".into());
    let scenario = scenario(&execute, example);
    let mut launcher = start(&scenario, "doc");
    let result = run_and_compare(example, &launcher.ready_socket());
    launcher.signal("TERM");
    launcher.wait_exit(T);
    result
}

#[test]
fn the_elision_matcher_is_strict_outside_the_elisions() {
    assert!(matches_elided(
        r#"{"return":{"events":[...],"a":1},"id":1}"#,
        r#"{"return":{"events":["X","Y"],"a":1},"id":1}"#
    ));
    assert!(!matches_elided(
        r#"{"return":{"events":[...],"a":1},"id":1}"#,
        r#"{"return":{"events":["X"],"a":2},"id":1}"#
    ));
    assert!(!matches_elided(r#"{"hello":{...}}"#, r#"{"return":{}}"#));
    assert!(line_matches(
        r#"{"return":{"pid":17,"uptime_seconds":0.5},"id":1}"#,
        r#"{"id":1,"return":{"pid":99,"uptime_seconds":3.25}}"#
    ));
    assert!(!line_matches(
        r#"{"return":{"pid":17},"id":1}"#,
        r#"{"return":{"pid":"17"},"id":1}"#
    ));
    // Which steps ran is compared, not how long they took.
    assert!(line_matches(
        r#"{"return":{"steps_ms":{"convert":0.05,"start":0.1}},"id":1}"#,
        r#"{"return":{"steps_ms":{"start":2.5,"convert":1}},"id":1}"#
    ));
    assert!(!line_matches(
        r#"{"return":{"steps_ms":{"convert":0.05,"start":0.1}},"id":1}"#,
        r#"{"return":{"steps_ms":{}},"id":1}"#
    ));
}

/// The backend of the binary under test, as its greeting names it (and as
/// `VL_LAUNCHER_BACKEND` says it must be, when the run states one).
fn backend_under_test() -> String {
    let scenario = Scenario {
        with_vmi: false,
        before: &[],
    };
    let mut launcher = start(&scenario, "doc-backend");
    let backend = launcher.client().hello["hello"]["backend"]
        .as_str()
        .expect("the greeting names the backend")
        .to_string();
    launcher.signal("TERM");
    launcher.wait_exit(T);
    if let Some(expected) = expected_backend() {
        assert_eq!(
            backend, expected,
            "the binary under test runs another backend"
        );
    }
    backend
}

/// The backend whose output an example shows: the static build's where it
/// says `"backend":"wire"`, else the default build's.
fn shown_backend(example: &Example) -> &'static str {
    if example
        .output
        .iter()
        .any(|l| l.contains("\"backend\":\"wire\""))
    {
        "wire"
    } else {
        "virt"
    }
}

#[test]
fn every_test_driver_socat_example_in_protocol_md_is_what_the_launcher_prints() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(&[Need::Program("socat")]) {
        return;
    }
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/protocol.md");
    let doc = std::fs::read_to_string(&doc_path).expect("read docs/protocol.md");
    let all = examples(&doc);
    let backend = backend_under_test();
    let mut checked = Vec::new();
    let mut other_backend = Vec::new();
    let mut failures = Vec::new();
    for example in &all {
        if example.socket() == "two launchers"
            || REAL_QEMU_SECTIONS.contains(&example.section.as_str())
        {
            continue;
        }
        let shown = format!(
            "line {}: {}",
            example.line,
            example.commands.join(" ").replace('\\', "")
        );
        // An example of the other build's output is checked when that
        // build is the binary under test (scripts/test.sh runs this suite
        // on both).
        if shown_backend(example) != backend {
            other_backend.push(shown);
            continue;
        }
        match check(example) {
            Ok(()) => checked.push(shown),
            Err(e) => failures.push(e),
        }
    }
    let other = if backend == "wire" { "virt" } else { "wire" };
    eprintln!(
        "checked {} examples on the {backend} backend:\n{}\nNOT checked here: {} examples of the {other} backend's output, checked when this suite runs on that build (scripts/test.sh):\n{}",
        checked.len(),
        checked.join("\n"),
        other_backend.len(),
        other_backend.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The parser found the examples: on the default build every command of
    // the test driver's tour is among them; on the static build, the
    // examples that show its own output.
    let tour: &[&str] = if backend == "wire" {
        &["query-version"]
    } else {
        &[
            "ping",
            "query-version",
            "query-commands",
            "query-status",
            "sync",
            "pause",
            "unpause",
            "shutdown",
            "reboot",
            "reset",
            "kill",
            "delete",
            "query-domain",
            "query-stats",
            "query-qemu-version",
            "query-dirty-rate",
            "memory-dump",
            "screenshot",
            "query-vm-stats",
            "subscribe",
            "unsubscribe",
            "prepare-migration-target",
        ]
    };
    for command in tour {
        assert!(
            checked
                .iter()
                .any(|c| c.contains(&format!("\"execute\":\"{command}\""))),
            "no {command} example was checked on the {backend} backend: {checked:?}"
        );
    }
}

/// The guest agent's examples that have a `$` line, in the document's
/// order, on the real test guest (VMI e2e/docguest, as in the document).
#[test]
fn every_guest_agent_socat_example_in_protocol_md_is_what_the_launcher_prints_on_a_real_guest() {
    if !require(&[
        Need::Root,
        Need::Qemu,
        Need::TestGuest,
        Need::Program("socat"),
    ]) {
        return;
    }
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/protocol.md");
    let doc = std::fs::read_to_string(&doc_path).expect("read docs/protocol.md");
    let agent_examples: Vec<Example> = examples(&doc)
        .into_iter()
        .filter(|e| REAL_QEMU_SECTIONS.contains(&e.section.as_str()))
        .collect();
    let names: Vec<String> = agent_examples
        .iter()
        .map(|e| e.execute().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        ["guest-ping", "query-guest-info", "guest-exec", "freeze"],
        "the guest agent's examples changed: check that this test still sets up what they need"
    );
    let mut guest = boot(
        TempTree::new("doc-agent"),
        &GuestOptions::new("docguest"),
        &[],
    );
    // The cached replies are empty until the agent poller's first round
    // after AGENT_CONNECTED: wait for it, as the document's capture did.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let info = guest.client.ok("query-guest-info", Value::Null);
        if info["os"]["id"] != "" && info["userList"].as_array().is_some_and(|u| !u.is_empty()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent's data never arrived: {info}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let socket = guest.launcher.ready_socket();
    let failures: Vec<String> = agent_examples
        .iter()
        .filter_map(|e| run_and_compare(e, &socket).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    guest.client.ok("unfreeze", Value::Null);
    guest.client.ok("kill", Value::Null);
    assert_eq!(guest.launcher.wait_exit(T), 0);
}
