//! The client subcommands of the binary (`probe`, `freeze`, `unfreeze`,
//! `ctl`) against launchers on libvirt's test driver, and against
//! launchers that are gone or wedged: what a user sees (exit status,
//! output, the one-line reason) and that no subcommand waits past its
//! timeout. The guest-agent side on a real guest is in tests/agent.rs.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(10);

/// What a subcommand run left: its status, standard output and error, and
/// how long it took.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `virt-launcher ARGS`, killing it (and failing) after `limit`.
fn run_within(args: &[&str], limit: Duration) -> Run {
    let started = Instant::now();
    let mut child = Command::new(launcher_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn virt-launcher");
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("virt-launcher {args:?} still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    let read = |pipe: Option<Box<dyn std::io::Read>>| {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut text);
        }
        text
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    Run {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr,
        took,
    }
}

fn run(args: &[&str]) -> Run {
    run_within(args, T)
}

/// A failed run says why in exactly one line on standard error.
fn one_line_reason(r: &Run, subcommand: &str) -> String {
    assert_eq!(
        r.stderr.lines().count(),
        1,
        "expected one line on stderr: {:?}",
        r.stderr
    );
    let prefix = format!("virt-launcher {subcommand}: ");
    assert!(r.stderr.starts_with(&prefix), "{:?}", r.stderr);
    r.stderr.trim_end().to_string()
}

fn synced() -> (Launcher, Client) {
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut client = launcher.client();
    assert_eq!(
        client.ok("sync", json!({"vmi": launcher.demo_vmi()}))["state"],
        "Running"
    );
    (launcher, client)
}

fn sock(l: &Launcher) -> String {
    l.ready_socket().to_string_lossy().into_owned()
}

#[test]
fn ctl_sends_one_command_and_prints_its_reply() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (launcher, mut client) = synced();
    let s = sock(&launcher);
    // Not a terminal: one line of JSON, the return object.
    let r = run(&["ctl", "--socket", &s, "query-status"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
    let status: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["domain"]["name"], launcher.domain_name().as_str());
    // --raw: the launcher's own line.
    let r = run(&["ctl", "--socket", &s, "--raw", "ping"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "{\"return\":{},\"id\":1}\n")
    );
    // --kubevirt-share-dir finds the same socket.
    let share = launcher.tree.path("share");
    let r = run(&[
        "ctl",
        "--kubevirt-share-dir",
        share.to_str().unwrap(),
        "pause",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let paused: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(paused, json!({"reason": "User", "state": "Paused"}));
    assert_eq!(
        client.ok("query-status", Value::Null)["domain"]["state"],
        "Paused"
    );

    // An error: status 1, the class and description on one line of stderr.
    let r = run(&["ctl", "--socket", &s, "pause"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    let reason = one_line_reason(&r, "ctl");
    assert!(
        reason.starts_with("virt-launcher ctl: InvalidState: pause: the domain must be running"),
        "{reason}"
    );
    // With --raw the error line goes to stdout, still status 1.
    let r = run(&["ctl", "--socket", &s, "--raw", "pause"]);
    assert_eq!(r.code, 1);
    let line: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(line["error"]["class"], "InvalidState");
    assert_eq!(line["id"], 1);
    let r = run(&["ctl", "--socket", &s, "frobnicate"]);
    assert_eq!(r.code, 1);
    assert!(one_line_reason(&r, "ctl").contains("frobnicate: CommandNotFound: "));
    let r = run(&["ctl", "--socket", &s, "unpause"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn ctl_indents_its_output_on_a_terminal() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(&[Need::Program("script")]) {
        return;
    }
    let (launcher, _client) = synced();
    // script(1) runs the command on a pseudo-terminal.
    let command = format!(
        "{} ctl --socket {} query-status",
        launcher_bin().display(),
        sock(&launcher)
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script (bsdutils)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    assert!(text.starts_with("{\n  \""), "{text}");
    let status: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status["phase"], "Running");
}

#[test]
fn ctl_arguments_are_a_json_object_or_key_value_pairs() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (launcher, _client) = synced();
    let s = sock(&launcher);
    // KEY=VALUE with a JSON value: reaches the command as a number (the
    // agent is not connected, so guest-ping is Unavailable, not
    // InvalidArgument).
    let r = run(&["ctl", "--socket", &s, "guest-ping", "timeout_seconds=2"]);
    assert_eq!(r.code, 1);
    let reason = one_line_reason(&r, "ctl");
    assert!(reason.contains("Unavailable: guest-ping: "), "{reason}");
    // A value that is not JSON is a string: the launcher says so.
    let r = run(&["ctl", "--socket", &s, "guest-ping", "timeout_seconds=soon"]);
    assert_eq!(r.code, 1);
    let reason = one_line_reason(&r, "ctl");
    assert!(reason.contains("InvalidArgument: "), "{reason}");
    assert!(reason.contains("guest-ping"), "{reason}");
    // One JSON object.
    let r = run(&[
        "ctl",
        "--socket",
        &s,
        "subscribe",
        r#"{"events":["DOMAIN_LIFECYCLE"]}"#,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut ret: Value = serde_json::from_str(&r.stdout).unwrap();
    // How many events the launcher has published so far: a number.
    assert!(ret["last_seq"].is_u64(), "{ret}");
    ret["last_seq"] = json!("#");
    assert_eq!(
        ret,
        json!({"events": ["DOMAIN_LIFECYCLE"], "last_seq": "#", "subscribed": true})
    );
    // Bad ARGUMENTS are a usage error (status 2), before connecting.
    let r = run(&["ctl", "--socket", &s, "guest-ping", "timeout_seconds"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("is not KEY=VALUE"), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1);
}

#[test]
fn ctl_alone_lists_the_launchers_commands() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let client = launcher.client();
    let r = run(&["ctl", "--socket", &sock(&launcher)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let names: Vec<&str> = r
        .stdout
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let greeting: Vec<&str> = client.hello["hello"]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(names, greeting);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("ping ") && l.contains("Answers {}")),
        "{}",
        r.stdout
    );
}

/// A `ctl --events` process and its output, line by line.
struct Follower {
    child: Child,
    /// Its stdout's lines; an empty string at end of file.
    lines: std::sync::mpsc::Receiver<String>,
}

impl Follower {
    fn start(args: &[&str]) -> Follower {
        let mut child = Command::new(launcher_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ctl --events");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let mut line = String::new();
                let end = !matches!(out.read_line(&mut line), Ok(n) if n > 0);
                if tx.send(line).is_err() || end {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    /// The next line, or "" at end of file; fails after `limit`.
    fn next_line(&self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .expect("no line from ctl --events")
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn ctl_events_follows_events_until_the_launcher_exits() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (mut launcher, mut client) = synced();
    let s = sock(&launcher);
    let all = Follower::start(&["ctl", "--socket", &s, "--events"]);
    let mut lifecycle = Follower::start(&[
        "ctl",
        "--socket",
        &s,
        "--raw",
        "--events",
        "DOMAIN_LIFECYCLE",
    ]);
    // Pause and unpause until both followers, which subscribe in their own
    // time (one may be subscribed before the other), have seen an event.
    let deadline = Instant::now() + T;
    let (mut first_raw, mut first_all) = (None, None);
    while first_raw.is_none() || first_all.is_none() {
        assert!(
            Instant::now() < deadline,
            "no event reached ctl --events: --raw {first_raw:?}, all {first_all:?}"
        );
        client.ok("pause", Value::Null);
        client.ok("unpause", Value::Null);
        let wait = Duration::from_millis(200);
        if first_raw.is_none() {
            first_raw = lifecycle.lines.recv_timeout(wait).ok();
        }
        if first_all.is_none() {
            first_all = all.lines.recv_timeout(wait).ok();
        }
    }
    let first = first_raw.unwrap_or_default();
    let raw: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(raw["event"], "DOMAIN_LIFECYCLE");
    assert!(
        raw["timestamp"]["seconds"].is_i64(),
        "--raw keeps the whole line: {first}"
    );
    let event: Value = serde_json::from_str(&first_all.unwrap_or_default()).unwrap();
    assert!(event.get("event").is_some(), "{event}");

    // An unknown event name: the launcher's InvalidArgument for subscribe.
    let r = run(&["ctl", "--socket", &s, "--events", "NOPE"]);
    assert_eq!(r.code, 1);
    let reason = one_line_reason(&r, "ctl");
    assert!(reason.contains("InvalidArgument: "), "{reason}");
    assert!(reason.contains("NOPE"), "{reason}");

    // SIGTERM: the final events arrive, then the launcher closes the
    // connection and ctl exits 0.
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
    let mut seen = Vec::new();
    loop {
        let line = lifecycle.next_line(T);
        if line.is_empty() {
            break;
        }
        seen.push(line);
    }
    assert!(
        seen.iter().any(|l| l.contains("\"event\":\"Stopped\"")),
        "{seen:?}"
    );
    let status = lifecycle.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    std::io::Read::read_to_string(lifecycle.child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(
        stderr,
        "virt-launcher ctl: the launcher closed the connection\n"
    );
}

#[test]
fn probe_without_an_agent_fails_at_once_with_the_reason() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (launcher, _client) = synced();
    let r = run(&["probe", "--socket", &sock(&launcher), "--timeout", "5s"]);
    assert_eq!(r.code, 1);
    let reason = one_line_reason(&r, "probe");
    assert!(
        reason.contains("the guest agent did not answer: Unavailable: "),
        "{reason}"
    );
    assert!(r.stdout.is_empty());
    // Generous bound: "at once" means long before the 5 s timeout.
    assert!(r.took < Duration::from_secs(4), "{:?}", r.took);
}

#[test]
fn probe_of_a_launcher_that_is_gone_fails_at_once() {
    let tree = TempTree::new("probe-gone");
    let missing = tree.path("sockets/launcher-sock");
    let r = run(&["probe", "--socket", missing.to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert!(
        one_line_reason(&r, "probe").contains("no launcher socket at"),
        "{}",
        r.stderr
    );
    // A socket file left by a launcher that died: nobody listens.
    let stale = tree.path("stale-sock");
    drop(UnixListener::bind(&stale).unwrap());
    let r = run(&[
        "probe",
        "--socket",
        stale.to_str().unwrap(),
        "--timeout",
        "30s",
    ]);
    assert_eq!(r.code, 1);
    assert!(
        one_line_reason(&r, "probe").contains("nothing listens on"),
        "{}",
        r.stderr
    );
    assert!(r.took < Duration::from_secs(10), "{:?}", r.took);
    // The default socket, under --kubevirt-share-dir.
    let r = run(&["probe", "--kubevirt-share-dir", tree.root.to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains(&format!(
        "no launcher socket at {}/sockets/launcher-sock",
        tree.root.display()
    )));
}

/// The probe's reason for a wedged launcher, after checking it kept to
/// its 1 s timeout (with a generous bound for a loaded machine).
fn probe_wedged(socket: &Path) -> String {
    let r = run_within(
        &[
            "probe",
            "--socket",
            socket.to_str().unwrap(),
            "--timeout",
            "1s",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.took >= Duration::from_millis(900),
        "gave up early: {:?}",
        r.took
    );
    assert!(
        r.took < Duration::from_secs(8),
        "waited past its timeout: {:?}",
        r.took
    );
    let reason = one_line_reason(&r, "probe");
    assert!(reason.contains("did not answer within 1 s"), "{reason}");
    reason
}

#[test]
fn probe_of_a_wedged_launcher_gives_up_at_its_timeout() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    // A listener that accepts nothing: the connection is queued, the
    // greeting never comes.
    let tree = TempTree::new("probe-wedged");
    let silent = tree.path("silent-sock");
    let _listener = UnixListener::bind(&silent).unwrap();
    assert!(probe_wedged(&silent).contains("waiting for the greeting"));

    // A listener whose backlog is full: connect(2) itself blocks.
    let full = tree.path("full-sock");
    let _full_listener = listener_with_backlog_0(&full);
    let _queued = UnixStream::connect(&full).unwrap();
    assert!(probe_wedged(&full).contains("waiting for the connection to be accepted"));

    // A real launcher, stopped (SIGSTOP) with a domain.
    let (launcher, _client) = synced();
    launcher.signal("STOP");
    let reason = probe_wedged(&launcher.ready_socket());
    launcher.signal("CONT");
    assert!(reason.contains("waiting for"), "{reason}");
    // It answers again once it runs.
    let r = run(&["ctl", "--socket", &sock(&launcher), "ping"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A listening socket with a backlog of 0: one queued connection fills it
/// (std's listener always asks for a long backlog).
fn listener_with_backlog_0(path: &Path) -> OwnedFd {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // address is a zeroed sockaddr_un filled within its bounds.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let owned = OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap();
        let bytes = path.as_os_str().as_bytes();
        assert!(bytes.len() < addr.sun_path.len());
        for (i, b) in bytes.iter().enumerate() {
            addr.sun_path[i] = libc::c_char::from_ne_bytes([*b]);
        }
        let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_un>()).unwrap();
        assert_eq!(
            libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len),
            0
        );
        assert_eq!(libc::listen(fd, 0), 0);
        owned
    }
}

#[test]
fn freeze_and_unfreeze_do_nothing_without_a_running_guest_agent() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    // As virt-freezer: success, nothing frozen, and why.
    let (launcher, mut client) = synced();
    let s = sock(&launcher);
    for (sub, what) in [
        ("freeze", "nothing to freeze"),
        ("unfreeze", "nothing to thaw"),
    ] {
        let r = run(&[sub, "--socket", &s]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(r.stdout, format!("no guest agent is connected; {what}\n"));
    }
    client.ok("pause", Value::Null);
    let r = run(&["freeze", "--socket", &s]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "the domain is not running (state Paused); nothing to freeze\n"
    );
    // No launcher: a failure.
    let r = run(&["unfreeze", "--socket", "/nonexistent/launcher-sock"]);
    assert_eq!(r.code, 1);
    one_line_reason(&r, "unfreeze");
}

#[test]
fn every_subcommand_has_its_own_help_and_refuses_bad_flags() {
    for sub in ["probe", "freeze", "unfreeze", "ctl"] {
        let r = run(&[sub, "--help"]);
        assert_eq!(r.code, 0);
        assert!(
            r.stdout.starts_with(&format!("Usage: virt-launcher {sub}")),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains("--socket PATH"));
        let r = run(&[sub, "--bogus"]);
        assert_eq!(r.code, 2);
        assert_eq!(
            r.stderr,
            format!("virt-launcher: {sub}: unknown flag --bogus; see {sub} --help\n")
        );
    }
    let r = run(&["--help"]);
    for sub in ["probe", "freeze", "unfreeze", "ctl"] {
        assert!(r.stdout.contains(&format!("\n  {sub} ")), "{}", r.stdout);
    }
}

#[test]
fn absurd_timeouts_and_a_lone_dash_are_usage_errors_not_panics() {
    // Each subcommand against a socket that does not exist: a value that
    // parsed would fail with status 1 at once, so status 2 and the range
    // in the message show the value was refused as a bad command line.
    let dir = TempTree::new("absurd");
    let socket = dir.path("no-launcher.sock");
    let socket = socket.to_str().expect("UTF-8 path");
    for sub in ["probe", "freeze", "unfreeze", "ctl"] {
        for huge in ["18446744073709551615", "5000000000000000h", "87601h"] {
            let r = run(&[sub, "--socket", socket, "--timeout", huge]);
            assert_eq!(r.code, 2, "{sub} --timeout {huge}: {}", r.stderr);
            assert_eq!(
                r.stderr,
                format!(
                    "virt-launcher: {sub}: --timeout: invalid value \"{huge}\": must be at most 87600h (ten years)\n"
                )
            );
        }
        // The largest timeout is accepted: the missing launcher is the
        // failure, at once.
        let r = run(&[sub, "--socket", socket, "--timeout", "87600h"]);
        assert_eq!(r.code, 1, "{sub}: {}", r.stderr);
        one_line_reason(&r, sub);
        // A lone "-" after a flag is a missing value, as the man page says.
        let r = run(&[sub, "--socket", "-"]);
        assert_eq!(r.code, 2, "{sub}: {}", r.stderr);
        assert!(r.stderr.contains("--socket needs a value"), "{}", r.stderr);
    }
    let r = run(&[
        "freeze",
        "--socket",
        socket,
        "--unfreeze-timeout",
        "18446744073709551615",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.ends_with("must be at most 3600 s (1h)\n"),
        "{}",
        r.stderr
    );
}
