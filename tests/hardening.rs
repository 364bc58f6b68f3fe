//! Hostile input and faults, black box, on libvirt's test driver: flags a
//! user can get wrong, logs, signals, the lock, the files the launcher
//! creates, and clients that misbehave. Each test asserts what a user sees.

mod common;

use std::ffi::OsString;
use std::fs;
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
fn absurd_numbers_are_usage_errors_before_anything_is_created() {
    let tree = TempTree::new("numbers");
    let ten_years = "must be at most 87600h (ten years)";
    let seconds = "expected a whole number of seconds, 0 to 315360000 (ten years)";
    let bytes = "must be at least 64 bytes and at most 1024MiB";
    let clients = "expected a whole number from 1 to 65536";
    let mut cases = vec![
        ("--qemu-timeout", "5000000000000000h", ten_years),
        ("--qemu-timeout", "18446744073709551615", ten_years),
        ("--client-idle-timeout", "18446744073709551615", ten_years),
        ("--grace-period-seconds", "18446744073709551615", seconds),
        ("--grace-period-seconds", "9223372036854775807", seconds),
        ("--grace-period-seconds", "315360001", seconds),
        ("--max-line-bytes", "18446744073709551615", bytes),
        ("--max-line-bytes", "63", bytes),
        ("--max-line-bytes", "1025MiB", bytes),
        ("--max-clients", "18446744073709551616", clients),
        ("--max-clients", "65537", clients),
    ];
    for interval in [
        "--qemu-agent-sys-interval",
        "--qemu-agent-file-interval",
        "--qemu-agent-user-interval",
        "--qemu-agent-version-interval",
        "--qemu-fsfreeze-status-interval",
    ] {
        cases.push((interval, "18446744073709551615ms", ten_years));
    }
    for (flag, value, range) in cases {
        // A launcher that took the value would stop on its own within 2 s
        // (status 5): the flag under test comes later and wins.
        let args = test_args(&["--qemu-timeout=2s", &format!("{flag}={value}")]);
        let (status, stderr) = run_to_exit(
            &tree,
            &os(&args.iter().map(String::as_str).collect::<Vec<_>>()),
        );
        assert_eq!(status, Some(2), "{flag}={value}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag}: invalid value \"{value}\": {range}")),
            "{flag}={value}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!tree.path("share").exists(), "{flag}={value} created files");
        assert!(
            !tree.path("private").exists(),
            "{flag}={value} created files"
        );
    }
}

#[test]
fn the_largest_numbers_in_range_run_and_stop_cleanly() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    // Every number at the top of its documented range: the launcher
    // starts, runs a domain, and a signal's graceful stop (with a grace
    // period of ten years) ends it with status 0.
    let mut launcher = Launcher::start_in(
        TempTree::new("largest"),
        &test_args(&[
            "--qemu-timeout=87600h",
            "--grace-period-seconds=315360000",
            "--max-line-bytes=1024MiB",
            "--max-clients=65536",
            "--client-idle-timeout=87600h",
            "--qemu-agent-sys-interval=87600h",
            "--qemu-fsfreeze-status-interval=315360000",
        ]),
    );
    launcher.wait_ready(T);
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": demo_vmi() }));
    client.ok("subscribe", Value::Null);
    launcher.signal("TERM");
    let started = client.wait_event(T, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    assert_eq!(
        started["data"]["grace_period_seconds"], 315_360_000,
        "{started}"
    );
    assert_eq!(launcher.wait_exit(T), 0, "{}", launcher.log_text());
    assert!(
        !launcher.log_text().contains("panicked"),
        "{}",
        launcher.log_text()
    );
}

#[test]
fn a_vmi_grace_period_out_of_range_is_refused_and_sigterm_still_stops_gracefully() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_in(TempTree::new("vmi-grace"), &test_args(&[]));
    launcher.wait_ready(T);
    let mut client = launcher.client();
    for bad in [
        json!(i64::MAX),
        json!(u64::MAX),
        json!(315_360_001),
        json!(-1),
        json!(1e308),
    ] {
        let mut vmi = demo_vmi();
        vmi["spec"]["terminationGracePeriodSeconds"] = bad.clone();
        let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
        assert_eq!(class, "InvalidArgument", "{bad}: {desc}");
        assert!(
            desc.contains("spec.terminationGracePeriodSeconds"),
            "{bad}: {desc}"
        );
    }
    let mut vmi = demo_vmi();
    vmi["spec"]["terminationGracePeriodSeconds"] = json!(i64::MAX);
    let (_, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert!(
        desc.ends_with("spec.terminationGracePeriodSeconds: 9223372036854775807 is out of range (0 to 315360000, ten years)"),
        "{desc}"
    );
    // The largest grace period is taken; the guest powers off at the ACPI
    // request, well within it.
    vmi["spec"]["terminationGracePeriodSeconds"] = json!(315_360_000);
    client.ok("sync", json!({ "vmi": vmi }));
    client.ok("subscribe", Value::Null);
    launcher.signal("TERM");
    let started = client.wait_event(T, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    assert_eq!(
        started["data"]["grace_period_seconds"], 315_360_000,
        "{started}"
    );
    assert_eq!(launcher.wait_exit(T), 0, "{}", launcher.log_text());
    assert!(
        !launcher.log_text().contains("panicked"),
        "{}",
        launcher.log_text()
    );
}

#[test]
fn a_lone_dash_after_a_flag_is_a_missing_value_not_a_directory() {
    let tree = TempTree::new("dash");
    // The launcher that took "-" as its directory stopped on its own
    // within 2 s (status 5).
    let args = test_args(&["--qemu-timeout=2s", "--private-dir", "-"]);
    let out = Command::new(BIN)
        .args(dir_flags(&tree))
        .args(&args)
        .current_dir(&tree.root)
        .env_remove("RUST_LOG")
        .output()
        .expect("run virt-launcher");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--private-dir needs a value (DIR), but the next argument \"-\" is a flag; write --private-dir=VALUE"),
        "{stderr}"
    );
    assert!(!tree.path("-").exists(), "a directory named - was created");
    assert!(!tree.path("share").exists(), "files were created");
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
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_in_env(TempTree::new("trace"), &test_args(&["-vv"]), None);
    launcher.wait_ready(T);
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": launcher.demo_vmi() }));
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
    if !require(&[Need::TestDriver]) {
        return;
    }
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
fn a_request_nested_too_deep_in_its_id_runs_nothing_and_says_why_it_has_no_id() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut client = launcher.client();
    client.ok("sync", json!({"vmi": launcher.demo_vmi()}));
    // The request object and 127 arrays: 128 levels, one too many.
    for arrays in [127, 400_000] {
        let id = format!("{}{}", "[".repeat(arrays), "]".repeat(arrays));
        client.send_raw(format!("{{\"execute\":\"pause\",\"id\":{id}}}\n").as_bytes());
        // Read as text: a reply that echoed such an id would itself be
        // too deep for serde_json.
        let reply = client.read_raw_line(T);
        assert!(
            reply.starts_with(
                "{\"error\":{\"class\":\"ParseError\",\"desc\":\"invalid JSON: recursion limit exceeded at line 1 column "
            ) && reply.ends_with(
                "; the request's \\\"id\\\" is nested too deep to be echoed, so this reply has none\"}}\n"
            ),
            "{}",
            reply.chars().take(300).collect::<String>()
        );
    }
    // Nothing ran: the domain was never paused.
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["state"], "Running", "{status}");
    // One level less is a request: its id comes back as sent.
    let id = format!("{}{}", "[".repeat(126), "]".repeat(126));
    client.send_raw(format!("{{\"execute\":\"ping\",\"id\":{id}}}\n").as_bytes());
    assert_eq!(
        client.read_raw_line(T),
        format!("{{\"return\":{{}},\"id\":{id}}}\n")
    );
}

#[test]
fn idle_clients_can_be_limited_but_subscribers_and_busy_clients_stay() {
    if !require(&[Need::TestDriver]) {
        return;
    }
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
    if !require(&[Need::TestDriver]) {
        return;
    }
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

#[test]
fn sighup_and_sigquit_stop_gracefully_like_sigterm() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    for signal in ["HUP", "QUIT"] {
        let mut launcher = Launcher::start_in(TempTree::new("hup"), &test_args(&[]));
        launcher.wait_ready(T);
        let mut client = launcher.client();
        client.ok("sync", json!({ "vmi": demo_vmi() }));
        client.ok("subscribe", Value::Null);
        launcher.signal(signal);
        let started = client.wait_event(T, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
        assert_eq!(
            started["data"]["signal"],
            format!("SIG{signal}"),
            "{started}"
        );
        // The test driver's guest honours the power button: exit 0, and
        // nothing is left behind.
        assert_eq!(launcher.wait_exit(T), 0, "SIG{signal}");
        assert!(
            !launcher.ready_socket().exists(),
            "SIG{signal} left the socket"
        );
        for lock in [
            "share/sockets/launcher-sock.lock",
            "private/virt-launcher.lock",
            "ephemeral/virt-launcher.lock",
        ] {
            assert!(
                !launcher.tree.path(lock).exists(),
                "SIG{signal} left {lock}"
            );
        }
        assert!(
            launcher
                .log_text()
                .contains(&format!("signals: received SIG{signal}")),
            "{}",
            launcher.log_text()
        );
    }
}

#[test]
fn sigusr1_logs_the_state_sigusr2_upgrades_in_place_and_sigpipe_is_ignored() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_in(TempTree::new("usr"), &test_args(&[]));
    launcher.wait_ready(T);
    let pid = launcher.pid();
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": demo_vmi() }));
    for signal in ["USR1", "PIPE"] {
        launcher.signal(signal);
    }
    let deadline = Instant::now() + T;
    while !launcher.log_text().contains("\"phase\":\"Running\"") {
        assert!(Instant::now() < deadline, "{}", launcher.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(launcher.log_text().contains("signals: SIGUSR1: state {"));
    // SIGUSR2: upgrade to the launcher's own binary (tests/upgrade.rs).
    launcher.signal("USR2");
    while !launcher.log_text().contains("upgrade: resumed from") {
        assert!(Instant::now() < deadline, "{}", launcher.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(launcher.log_text().contains("signals: SIGUSR2: upgrading"));
    // Still running, the same process, answering: none of the three stops it.
    assert_eq!(launcher.pid(), pid);
    launcher.client().ok("query-status", Value::Null);
    assert!(launcher.child.try_wait().unwrap().is_none());
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
}

#[test]
fn the_lock_comes_before_libvirt_and_covers_every_writable_directory() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut first = Launcher::start_in(TempTree::new("lock-a"), &test_args(&[]));
    first.wait_ready(T);
    let mut client = first.client();
    client.ok("sync", json!({ "vmi": cloud_init_vmi() }));
    let iso = first
        .tree
        .path("ephemeral/cloud-init-data/default/demo/noCloud.iso");
    let before = fs::read(&iso).expect("cloud-init ISO");

    // The same directories, and libvirt out of reach: refused at once with
    // status 3 (not 4 after the 15 s libvirt connect timeout).
    let (status, stderr) = run_to_exit(
        &first.tree,
        &os(&[
            "--connect",
            "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
            "--name",
            "demo",
            "--namespace",
            "default",
        ]),
    );
    assert_eq!(status, Some(3), "{stderr}");
    assert!(
        stderr.contains("another virt-launcher is running"),
        "{stderr}"
    );

    // Another share directory but the same private and ephemeral ones:
    // refused too, naming the directory it shares.
    let other = TempTree::new("lock-b");
    let p = |t: &TempTree, s: &str| t.path(s).to_string_lossy().into_owned();
    let out = Command::new(BIN)
        .args([
            "--kubevirt-share-dir".to_string(),
            p(&other, "share"),
            "--private-dir".into(),
            p(&first.tree, "private"),
            "--ephemeral-disk-dir".into(),
            p(&first.tree, "ephemeral"),
            "--container-disk-dir".into(),
            p(&other, "cd"),
            "--hotplug-disk-dir".into(),
            p(&other, "hp"),
        ])
        .args(test_args(&["--vmi", "/dev/null"])[..6].iter())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--private-dir"), "{stderr}");
    // The first launcher's files are as they were.
    assert_eq!(fs::read(&iso).unwrap(), before);
    client.ok("ping", Value::Null);
}

#[test]
fn the_lock_is_an_flock_not_the_files_existence() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("flock");
    let sockets = tree.path("share/sockets");
    fs::create_dir_all(&sockets).unwrap();
    let lock_path = sockets.join("launcher-sock.lock");
    // A lock file that exists but that nobody holds (a launcher was
    // SIGKILLed) does not stop a start...
    fs::write(&lock_path, b"").unwrap();
    let mut launcher = Launcher::start_in(tree, &test_args(&[]));
    launcher.wait_ready(T);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
    // ...while one that a process holds with flock does, at once.
    fs::create_dir_all(&sockets).unwrap();
    let holder = fs::File::create(&lock_path).unwrap();
    holder.lock().unwrap();
    let (status, stderr) = run_to_exit(
        &launcher.tree,
        &os(&test_args(&[])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()),
    );
    assert_eq!(status, Some(3), "{stderr}");
    assert!(stderr.contains("--kubevirt-share-dir"), "{stderr}");
    drop(holder);
}

#[test]
fn a_sigkilled_launchers_socket_and_locks_are_stale_and_replaced() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut first = Launcher::start_in(TempTree::new("killed"), &test_args(&[]));
    first.wait_ready(T);
    first.signal("KILL");
    first.wait_exit(T);
    assert!(
        first.ready_socket().exists(),
        "a SIGKILLed launcher leaves its socket"
    );
    assert!(first.sockets_dir().join("launcher-sock.lock").exists());
    let tree = std::mem::replace(&mut first.tree, TempTree::new("killed-spare"));
    let mut second = Launcher::start_in(tree, &test_args(&[]));
    second.wait_ready(T);
    let client = second.client();
    assert_eq!(client.hello["hello"]["pid"], second.pid());
    // The lock file is private to the launcher's user.
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(
        mode(&second.sockets_dir().join("launcher-sock.lock")),
        0o600
    );
    assert_eq!(mode(&second.sockets_dir()), 0o755);
    assert_eq!(mode(&second.tree.path("private/virt-launcher.lock")), 0o600);
    second.signal("TERM");
    assert_eq!(second.wait_exit(T), 0);
}

#[test]
fn anything_but_a_stale_socket_at_launcher_sock_is_refused_not_deleted() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    for (what, make) in [
        (
            "a regular file",
            Box::new(|p: &std::path::Path| fs::write(p, b"mine").unwrap())
                as Box<dyn Fn(&std::path::Path)>,
        ),
        (
            "a FIFO",
            Box::new(|p: &std::path::Path| {
                assert!(Command::new("mkfifo").arg(p).status().unwrap().success())
            }),
        ),
    ] {
        let tree = TempTree::new("notsock");
        fs::create_dir_all(tree.path("share/sockets")).unwrap();
        let path = tree.path("share/sockets/launcher-sock");
        make(&path);
        let (status, stderr) = run_to_exit(
            &tree,
            &os(&test_args(&[])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()),
        );
        assert_eq!(status, Some(3), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("is {what}, not a socket")),
            "{stderr}"
        );
        assert!(fs::symlink_metadata(&path).is_ok(), "{what} was deleted");
    }
}

/// The demo VMI with a cloud-init disk (user data in an ISO).
fn cloud_init_vmi() -> Value {
    let mut vmi = demo_vmi();
    vmi["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "cloudinitdisk", "disk": {"bus": "virtio"}}]);
    vmi["spec"]["volumes"] = json!([{
        "name": "cloudinitdisk",
        "cloudInitNoCloud": {"userData": "#cloud-config\npassword: secret\n"}
    }]);
    vmi
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Starts a launcher under `umask 000`, as a careless service manager
/// might run it.
fn start_with_umask_000(tree: TempTree, args: &[String]) -> Launcher {
    let wrapper = ["sh", "-c", "umask 000; exec \"$0\" \"$@\""].map(String::from);
    Launcher::start_wrapped(tree, &wrapper, args, Some("debug"))
}

#[test]
fn under_umask_000_every_mode_is_still_exact_and_user_data_private() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("umask");
    // A link planted where the cloud-init ISO is staged, pointing at a file
    // root owns: it must be neither written through nor become the image.
    let cloud_dir = tree.path("ephemeral/cloud-init-data/default/demo");
    fs::create_dir_all(&cloud_dir).unwrap();
    let victim = tree.path("victim");
    fs::write(&victim, b"root's file").unwrap();
    std::os::unix::fs::symlink(&victim, cloud_dir.join("noCloud.iso.staging")).unwrap();
    let mut launcher = start_with_umask_000(tree, &test_args(&[]));
    launcher.wait_ready(T);
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": cloud_init_vmi() }));
    let p = |rel: &str| launcher.tree.path(rel);
    assert_eq!(fs::read(&victim).unwrap(), b"root's file");
    let iso = p("ephemeral/cloud-init-data/default/demo/noCloud.iso");
    assert!(fs::symlink_metadata(&iso).unwrap().file_type().is_file());
    for (path, mode) in [
        ("ephemeral/cloud-init-data/default/demo/noCloud.iso", 0o600),
        ("ephemeral/cloud-init-data", 0o755),
        ("private/vm-disks", 0o750),
        ("share/sockets", 0o755),
        ("share/sockets/launcher-sock", 0o600),
        ("share/sockets/launcher-sock.lock", 0o600),
        ("private/virt-launcher.lock", 0o600),
        ("ephemeral/virt-launcher.lock", 0o600),
    ] {
        assert_eq!(mode_of(&p(path)), mode, "{path}");
    }
    drop(client);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
}

#[test]
fn created_directories_are_exact_under_umask_000() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    // The cloud-init directories do not exist before the sync: created by
    // it, they must be 0755, not 0777.
    let mut launcher = start_with_umask_000(TempTree::new("umask-dirs"), &test_args(&[]));
    launcher.wait_ready(T);
    let mut client = launcher.client();
    client.ok("sync", json!({ "vmi": cloud_init_vmi() }));
    for dir in [
        "ephemeral/cloud-init-data/default",
        "ephemeral/cloud-init-data/default/demo",
    ] {
        assert_eq!(mode_of(&launcher.tree.path(dir)), 0o755, "{dir}");
    }
    drop(client);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
}

#[test]
fn a_symlink_in_place_of_a_launcher_directory_is_refused_not_followed() {
    let tree = TempTree::new("vmdisks");
    let target = tree.path("elsewhere");
    fs::create_dir_all(&target).unwrap();
    fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    fs::create_dir_all(tree.path("private")).unwrap();
    std::os::unix::fs::symlink(&target, tree.path("private/vm-disks")).unwrap();
    let (status, stderr) = run_to_exit(
        &tree,
        &os(&test_args(&[])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()),
    );
    assert_eq!(status, Some(3), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(mode_of(&target), 0o700, "the link's target was chmodded");
    // A dangling link at a lock file: refused, and its target not created.
    let tree = TempTree::new("locklink");
    fs::create_dir_all(tree.path("share/sockets")).unwrap();
    std::os::unix::fs::symlink(
        tree.path("created-by-root"),
        tree.path("share/sockets/launcher-sock.lock"),
    )
    .unwrap();
    let (status, stderr) = run_to_exit(
        &tree,
        &os(&test_args(&[])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()),
    );
    assert_eq!(status, Some(3), "{stderr}");
    assert!(!tree.path("created-by-root").exists());
}

/// The reply to a sync refused at the define, the step after the disks
/// were prepared: libvirt's refusal of the duplicate UUID.
fn assert_refused_at_define(reply: &Value) {
    let error = &reply["error"];
    assert_eq!(error["class"], "Internal", "{reply}");
    assert_eq!(
        error["desc"],
        "libvirt call failed: operation failed: domain 'test' is already defined with uuid 6695eb01-f6a4-8304-79aa-97f2502e193f",
        "{reply}"
    );
    assert!(
        error["causes"][0]
            .as_str()
            .is_some_and(|c| c.starts_with("virDomainDefineXMLFlags failed: ")),
        "not the define that failed: {reply}"
    );
}

#[test]
fn a_failed_sync_keeps_an_image_it_did_not_create() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("rollback");
    let iso = tree.path("ephemeral/cloud-init-data/default/demo/noCloud.iso");
    fs::create_dir_all(iso.parent().unwrap()).unwrap();
    fs::write(&iso, b"left by an earlier launcher").unwrap();
    // Debug: the log names each file a rollback restores or removes.
    let mut launcher = Launcher::start_in_env(tree, &test_args(&[]), Some("debug"));
    launcher.wait_ready(T);
    let mut client = launcher.client();
    // The test driver's own domain "test" has this UUID: the definition is
    // refused after the disks were prepared (the image was written, then
    // rolled back).
    let mut vmi = cloud_init_vmi();
    vmi["spec"]["domain"]["firmware"] = json!({"uuid": "6695eb01-f6a4-8304-79aa-97f2502e193f"});
    let reply = client.request("sync", json!({ "vmi": vmi }));
    assert_refused_at_define(&reply);
    assert_eq!(fs::read(&iso).unwrap(), b"left by an earlier launcher");
    let dir = iso.parent().unwrap();
    let mut left: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["noCloud.iso"]);
    // And without an earlier image the failed sync leaves none.
    fs::remove_file(&iso).unwrap();
    let reply = client.request("sync", json!({ "vmi": vmi }));
    assert_refused_at_define(&reply);
    assert!(!iso.exists());
    // The image was written before the failure, and rolled back after it:
    // the earlier one put back, the new one removed.
    let log = launcher.log_text();
    for rolled_back in ["restored", "removed"] {
        assert!(
            log.contains(&format!("disks: {rolled_back} {}", iso.display())),
            "no rollback ({rolled_back}) of {}:\n{log}",
            iso.display()
        );
    }
}

#[test]
fn a_full_disk_while_writing_the_cloud_init_iso_is_internal() {
    if !require(&[Need::Root]) {
        return;
    }
    let tree = TempTree::new("enospc");
    let ephemeral = tree.path("ephemeral");
    fs::create_dir_all(&ephemeral).unwrap();
    // A 256 KiB filesystem: room for the directories, not for the image
    // (ISO 9660 needs more than its first 32 KiB of system area and
    // descriptors, and the user data below is larger still).
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs"])
        .arg(&ephemeral)
        .status()
        .expect("run mount");
    assert!(mounted.success(), "mount tmpfs (the tests run as root)");
    // Dropped before the launcher (declared after it), even on a panic: a
    // lazy unmount, so the tree can then be removed.
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let mut launcher = Launcher::start_in(tree, &test_args(&[]));
    let _unmount = Unmount(ephemeral.clone());
    launcher.wait_ready(T);
    let mut client = launcher.client();
    let mut vmi = cloud_init_vmi();
    vmi["spec"]["volumes"][0]["cloudInitNoCloud"]["userData"] =
        json!(format!("#cloud-config\n# {}\n", "x".repeat(400 * 1024)));
    let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
    assert_eq!(class, "Internal", "{desc}");
    assert!(desc.contains("No space left on device"), "{desc}");
    // Nothing half-written is left.
    let dir = launcher.tree.path("ephemeral/cloud-init-data/default/demo");
    assert!(!dir.join("noCloud.iso").exists() && !dir.join("noCloud.iso.staging").exists());
    drop(client);
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
}

#[test]
fn an_unprivileged_user_cannot_hold_the_lock_after_an_unclean_exit() {
    if !require(&[Need::Root]) {
        return;
    }
    let mut first = Launcher::start_in(TempTree::new("nobody"), &test_args(&[]));
    first.wait_ready(T);
    first.signal("KILL");
    first.wait_exit(T);
    // The lock files stay behind; another user can neither open them nor,
    // through them, block the next start.
    for lock in [
        "share/sockets/launcher-sock.lock",
        "private/virt-launcher.lock",
        "ephemeral/virt-launcher.lock",
    ] {
        let path = first.tree.path(lock);
        let script = format!("exec 9<'{}' && flock -n 9", path.display());
        let out = Command::new("su")
            .args(["-s", "/bin/sh", "nobody", "-c", &script])
            .output()
            .expect("run su");
        assert!(
            !out.status.success(),
            "user nobody could open and lock {lock}"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{lock}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let tree = std::mem::replace(&mut first.tree, TempTree::new("nobody-spare"));
    let mut second = Launcher::start_in(tree, &test_args(&[]));
    second.wait_ready(T);
    second.signal("TERM");
    assert_eq!(second.wait_exit(T), 0);
}
