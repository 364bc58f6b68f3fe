//! Hostile input and faults, black box, on libvirt's test driver: flags a
//! user can get wrong, logs, signals, the lock, the files the launcher
//! creates, and clients that misbehave. Each test asserts what a user sees.

mod common;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(10);

/// The flags of a launcher for VMI default/demo on the test driver.
fn test_args(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--connect",
        "test:///default",
        "--name",
        "demo",
        "--namespace",
        "default",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Runs the binary to completion with `args` plus the directory flags of
/// `tree`; returns (status, stderr).
fn run_to_exit(tree: &TempTree, args: &[OsString]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(dir_flags(tree))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run virt-launcher");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn a_value_flag_never_swallows_the_next_flag() {
    let tree = TempTree::new("swallow");
    let (status, stderr) = run_to_exit(
        &tree,
        &os(&[
            "--connect",
            "test:///default",
            "--name",
            "a",
            "--namespace",
            "b",
            "--uid",
            "--allow-emulation",
        ]),
    );
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("--uid needs a value"), "{stderr}");
    // Nothing was created: the command line is checked before any file.
    assert!(!tree.path("private").exists(), "private dir created");
    assert!(!tree.path("share").exists(), "share dir created");
}

#[test]
fn flag_values_are_checked_before_anything_starts() {
    let tree = TempTree::new("flags");
    for (args, needle) in [
        (vec!["--version=3"], "--version: invalid value \"3\""),
        (vec!["--verbose=maybe"], "--verbose: invalid value"),
        (
            vec![
                "--libvirt-log-filters",
                "garbage",
                "--name",
                "a",
                "--namespace",
                "b",
            ],
            "--libvirt-log-filters: invalid value \"garbage\"",
        ),
        (
            vec!["--qemu-timeout", "0", "--name", "a", "--namespace", "b"],
            "--qemu-timeout: invalid value \"0\": must be more than zero",
        ),
        (
            vec![
                "--qemu-agent-sys-interval=0s",
                "--name",
                "a",
                "--namespace",
                "b",
            ],
            "--qemu-agent-sys-interval",
        ),
        (
            vec![
                "--client-idle-timeout",
                "soon",
                "--name",
                "a",
                "--namespace",
                "b",
            ],
            "--client-idle-timeout",
        ),
    ] {
        let (status, stderr) = run_to_exit(&tree, &os(&args));
        assert_eq!(status, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!tree.path("share").exists(), "{args:?} created files");
    }
    // --version=false is not --version: the launcher goes on to need a name.
    let (status, stderr) = run_to_exit(&tree, &os(&["--version=false"]));
    assert_eq!(status, Some(2));
    assert!(stderr.contains("--name is required"), "{stderr}");
}

#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error() {
    let tree = TempTree::new("utf8");
    let mut args = os(&["--connect", "test:///default", "--namespace", "b"]);
    args.push(OsString::from_vec(b"--name=\xffvm".to_vec()));
    let (status, stderr) = run_to_exit(&tree, &args);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("is not valid UTF-8"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Whether `line` starts with an RFC 3339 UTC timestamp with microseconds,
/// then a level: `2026-11-30T14:22:05.123456Z INFO  [main] ...`.
fn is_log_line(line: &str) -> bool {
    let b = line.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    b.len() > 28
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..26)
        && b[26] == b'Z'
        && b[27] == b' '
        && ["ERROR", "WARN ", "INFO ", "DEBUG", "TRACE"]
            .iter()
            .any(|l| line[28..].starts_with(l))
}

#[test]
fn vv_traces_every_request_reply_and_libvirt_call_and_rust_log_wins() {
    let mut launcher = Launcher::start_in_env(TempTree::new("trace"), &test_args(&["-vv"]), None);
    launcher.wait_ready(T);
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": demo_vmi() }));
    client.ok("pause", Value::Null);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
    let log = launcher.log_text();
    // Every record starts a line with its timestamp; the lines of a
    // multi-line message (a domain XML) are indented below it.
    for line in log.lines() {
        assert!(
            is_log_line(line) || line.starts_with("    "),
            "not a log line: {line:?}"
        );
    }
    let traced = |needle: &str| {
        log.lines()
            .any(|l| is_log_line(l) && l[28..].starts_with("TRACE") && l.contains(needle))
    };
    // The request and its reply, as they crossed the socket.
    assert!(traced(r#"-> {"execute":"pause","id":2}"#), "{log}");
    assert!(
        log.lines().any(|l| l.contains(" TRACE ")
            && l.contains("<- {\"return\":")
            && l.ends_with(",\"id\":2}")),
        "{log}"
    );
    // The libvirt calls, each with its duration.
    assert!(
        traced("libvirt: virConnectOpen(test:///default): ok in "),
        "{log}"
    );
    assert!(
        traced("libvirt: virDomainSuspend(default_demo): ok in "),
        "{log}"
    );
    assert!(traced("libvirt: virDomainDefineXMLFlags("), "{log}");
    assert!(
        traced("libvirt: virDomainGetState(default_demo): ok in "),
        "{log}"
    );

    // RUST_LOG takes precedence over -vv: no debug or trace lines at all.
    let mut quiet =
        Launcher::start_in_env(TempTree::new("rustlog"), &test_args(&["-vv"]), Some("info"));
    quiet.wait_ready(T);
    quiet.client().ok("ping", Value::Null);
    quiet.signal("TERM");
    assert_eq!(quiet.wait_exit(T), 0);
    let log = quiet.log_text();
    assert!(log.contains(" INFO  [main] ready: "), "{log}");
    assert!(
        !log.contains(" TRACE ") && !log.contains(" DEBUG "),
        "RUST_LOG=info still logged debug or trace lines:\n{log}"
    );
}

#[test]
fn number_ids_are_echoed_exactly_and_blank_lines_get_no_reply() {
    let mut launcher = Launcher::start_in(TempTree::new("ids"), &test_args(&[]));
    launcher.wait_ready(T);
    let mut client = launcher.client();
    client.send_raw(
        b"\n   \n\r\n{\"execute\":\"ping\",\"id\":-0}\n{\"execute\":\"ping\",\"id\":1.50}\n",
    );
    // The raw lines, as the client reads them: blank lines produced nothing.
    let first = client.read_raw_line(T);
    let second = client.read_raw_line(T);
    assert_eq!(first, "{\"return\":{},\"id\":-0}\n");
    assert_eq!(second, "{\"return\":{},\"id\":1.50}\n");
    assert!(
        client
            .read_raw_line_within(Duration::from_millis(300))
            .is_none()
    );
}

#[test]
fn idle_clients_can_be_limited_but_subscribers_and_busy_clients_stay() {
    let mut launcher = Launcher::start_in(
        TempTree::new("idle"),
        &test_args(&["--client-idle-timeout", "1s"]),
    );
    launcher.wait_ready(T);
    let mut idle = launcher.client();
    let mut subscriber = launcher.client();
    subscriber.ok("subscribe", Value::Null);
    // The idle connection goes (without a reply line), however long the
    // machine takes to notice.
    assert!(idle.closed_within(Duration::from_secs(20)));
    let mut busy = launcher.client();
    // A client that keeps talking, and a subscriber waiting for events,
    // are not idle.
    for _ in 0..6 {
        busy.ok("ping", Value::Null);
        std::thread::sleep(Duration::from_millis(400));
    }
    assert!(!subscriber.closed_within(Duration::from_millis(500)));
    subscriber.ok("ping", Value::Null);
    busy.ok("ping", Value::Null);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
}

/// "N more like it not logged" counts in `log` for lines containing `what`,
/// plus the lines themselves.
fn warnings_accounted(log: &str, what: &str, summary: &str) -> (usize, u64) {
    let mut logged = 0;
    let mut suppressed = 0;
    for line in log.lines() {
        if line.contains(" WARN ") && line.contains(what) {
            logged += 1;
            if let Some(n) = line
                .rsplit(" (")
                .next()
                .and_then(|rest| rest.strip_suffix(" more like it not logged)"))
            {
                suppressed += n.parse::<u64>().unwrap_or(0);
            }
        }
        if line.contains(" WARN ")
            && let Some(n) = line
                .split("server: ")
                .nth(1)
                .and_then(|rest| rest.strip_suffix(summary))
        {
            suppressed += n.parse::<u64>().unwrap_or(0);
        }
    }
    (logged, suppressed)
}

#[test]
fn a_flood_of_refused_connections_is_summarised_not_logged_line_by_line() {
    let mut launcher = Launcher::start_in_env(
        TempTree::new("flood"),
        &test_args(&["--max-clients", "1"]),
        Some("info"),
    );
    launcher.wait_ready(T);
    // The readiness probe's connection may still hold the one slot for a
    // moment.
    let deadline = Instant::now() + T;
    let mut refused_before = 0;
    let mut holder = loop {
        match Client::try_connect(&launcher.ready_socket()) {
            Ok(client) => break client,
            Err(_) if Instant::now() < deadline => {
                refused_before += 1;
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(line) => panic!("no slot: {line}"),
        }
    };
    const FLOOD: usize = 200;
    for _ in 0..FLOOD {
        match Client::try_connect(&launcher.ready_socket()) {
            Err(line) => assert_eq!(line["error"]["class"], "Busy", "{line}"),
            Ok(_) => panic!("a connection beyond --max-clients was served"),
        }
    }
    holder.ok("ping", Value::Null);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
    let log = launcher.log_text();
    let (logged, suppressed) = warnings_accounted(
        &log,
        "refusing a client",
        " more refused connections were not logged",
    );
    assert!(logged <= 5, "{logged} refusal lines:\n{log}");
    assert_eq!(
        logged as u64 + suppressed,
        (FLOOD + refused_before) as u64,
        "{log}"
    );
    assert!(log.lines().count() < 40, "{log}");
}
