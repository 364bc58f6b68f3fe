//! The daemon on libvirt's in-process test driver: readiness, the wire
//! protocol, every command and error class, events, signals and exit
//! codes — all through the real socket of the real binary.

mod common;

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(10);

fn synced(extra: &[&str]) -> (Launcher, Client) {
    let mut launcher = Launcher::start_test(extra);
    launcher.wait_ready(T);
    let mut client = launcher.client();
    let ret = client.ok("sync", json!({ "vmi": launcher.demo_vmi() }));
    assert_eq!(ret["state"], "Running", "{ret}");
    (launcher, client)
}

#[test]
fn readiness_greeting_socket_files_and_clean_exit() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    assert!(
        !launcher.init_socket().exists(),
        "init socket must be renamed"
    );
    let meta = fs::metadata(launcher.ready_socket()).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(launcher.sockets_dir().join("launcher-sock.lock").exists());

    let client = launcher.client();
    let hello = &client.hello["hello"];
    assert_eq!(hello["protocol"], 1);
    assert_eq!(hello["server"], "virt-launcher");
    assert_eq!(hello["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(hello["pid"], launcher.pid());
    assert_eq!(hello["vmi"], launcher.vmi_ref().as_str());
    if let Some(backend) = expected_backend() {
        assert_eq!(hello["backend"], backend.as_str());
    }
    assert_eq!(hello["ready"], true);
    assert_eq!(hello["max_line_bytes"], 1048576);
    let commands: Vec<&str> = hello["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for needed in [
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
        "subscribe",
        "unsubscribe",
    ] {
        assert!(
            commands.contains(&needed),
            "{needed} missing from {commands:?}"
        );
    }
    // The directories KubeVirt creates, with its modes.
    let mode = |p: &str| {
        fs::metadata(launcher.tree.path(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("ephemeral/cloud-init-data"), 0o755);
    assert_eq!(mode("private/vm-disks"), 0o750);
    assert_eq!(mode("private/0b5ae8d6-51a0-4b0e-9a6e-000000000001"), 0o755);

    // A signal before any domain exists: exit 0 at once, files removed.
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
    assert!(!launcher.ready_socket().exists());
    assert!(!launcher.sockets_dir().join("launcher-sock.lock").exists());
}

#[test]
fn stale_socket_is_replaced_and_a_live_owner_is_refused() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("stale");
    let sockets = tree.path("share/sockets");
    fs::create_dir_all(&sockets).unwrap();
    // A socket file left behind by a launcher that died.
    drop(UnixListener::bind(sockets.join("launcher-sock")).unwrap());
    let mut first = Launcher::start_in(
        tree,
        &[
            "--connect".into(),
            test_uri(),
            "--name".into(),
            unique_name("a"),
            "--namespace".into(),
            "b".into(),
        ],
    );
    first.wait_ready(T);
    first.client().ok("ping", Value::Null);

    // A second launcher on the same share directory must not steal it.
    let mut args = dir_flags(&first.tree);
    args.extend([
        "--connect".into(),
        test_uri(),
        "--name".into(),
        unique_name("c"),
        "--namespace".into(),
        "d".into(),
    ]);
    let out = Command::new(launcher_bin()).args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("another virt-launcher is running"),
        "{stderr}"
    );
    // The first one is untouched.
    first.client().ok("ping", Value::Null);
}

#[test]
fn protocol_errors_are_answered_and_the_connection_stays_open() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&["--max-line-bytes", "4KiB"]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    assert_eq!(c.hello["hello"]["max_line_bytes"], 4096);

    // Blank lines are ignored; invalid JSON is a ParseError without id.
    c.send_raw(b"\n   \r\n{\"execute\": \"ping\", \n");
    let r = c.read_reply(T);
    assert_eq!(r["error"]["class"], "ParseError");
    assert!(r.get("id").is_none());

    // Not an object / no execute / bad arguments: InvalidRequest, id kept.
    c.send_raw(b"[1,2,3]\n");
    assert_eq!(c.read_reply(T)["error"]["class"], "InvalidRequest");
    c.send_raw(b"{\"id\":{\"nested\":[1,true]}}\n");
    let r = c.read_reply(T);
    assert_eq!(r["error"]["class"], "InvalidRequest");
    assert_eq!(r["id"], json!({"nested":[1,true]}));
    c.send_raw(b"{\"execute\":\"ping\",\"arguments\":5,\"id\":\"s\"}\n");
    let r = c.read_reply(T);
    assert_eq!(
        (r["error"]["class"].as_str(), r["id"].as_str()),
        (Some("InvalidRequest"), Some("s"))
    );

    // Unknown command and unknown argument keys.
    assert_eq!(c.err_class("frobnicate", Value::Null).0, "CommandNotFound");
    let (class, desc) = c.err_class("ping", json!({"verbose": true}));
    assert_eq!(class, "InvalidArgument");
    assert!(desc.contains("verbose"), "{desc}");

    // An oversized line: RequestTooLarge, no id, and the next line works.
    let mut big = b"{\"execute\":\"ping\",\"id\":1,\"pad\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 10_000));
    big.extend_from_slice(b"\"}\n{\"execute\":\"ping\",\"id\":\"after\"}\n");
    c.send_raw(&big);
    let r = c.read_reply(T);
    assert_eq!(r["error"]["class"], "RequestTooLarge");
    assert!(r.get("id").is_none());
    assert!(r["error"]["desc"].as_str().unwrap().contains("4096"));
    let r = c.read_reply(T);
    assert_eq!(r, json!({"return":{}, "id":"after"}));

    // Invalid UTF-8 is a ParseError too.
    c.send_raw(b"{\"execute\":\"\xff\xfe\"}\n");
    assert_eq!(c.read_reply(T)["error"]["class"], "ParseError");

    // Pipelined requests are answered in order, ids verbatim.
    c.send_raw(b"{\"execute\":\"ping\",\"id\":\"a\"}\n{\"execute\":\"query-status\",\"id\":2.5}\n{\"execute\":\"ping\",\"id\":null}\n");
    assert_eq!(c.read_reply(T)["id"], "a");
    assert_eq!(c.read_reply(T)["id"], 2.5);
    let third = c.read_reply(T);
    assert_eq!(third["id"], Value::Null);
    assert!(third.get("return").is_some());
}

#[test]
fn commands_without_a_domain_are_not_found() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    for cmd in [
        "pause",
        "unpause",
        "shutdown",
        "reboot",
        "reset",
        "kill",
        "delete",
        "query-domain",
        "query-stats",
        "query-dirty-rate",
        "screenshot",
        "query-vm-stats",
    ] {
        let (class, desc) = c.err_class(cmd, Value::Null);
        assert_eq!(class, "NotFound", "{cmd}: {desc}");
        assert!(desc.contains("sync a VMI first"), "{desc}");
    }
    let (class, desc) = c.err_class("memory-dump", json!({"path": "/tmp/vl-never.memory.dump"}));
    assert_eq!(class, "NotFound", "memory-dump: {desc}");
    // The daemon's QEMU (here the test driver's version) needs no domain.
    let version = c.ok("query-qemu-version", Value::Null)["version"].clone();
    assert!(
        version.as_str().is_some_and(|v| v.starts_with("TEST ")),
        "{version}"
    );
    let status = c.ok("query-status", Value::Null);
    assert_eq!(status["phase"], "WaitingForDomain");
    assert_eq!(status["domain"]["state"], "NoState");
    assert_eq!(status["domain"]["reason"], "NonExistent");
    let version = c.ok("query-version", Value::Null);
    assert_eq!(version["launcher"], env!("CARGO_PKG_VERSION"));
    assert_eq!(version["backend"], c.hello["hello"]["backend"]);
    match version["backend"].as_str() {
        // The wire backend links no libvirt library.
        Some("wire") => assert_eq!(version["libvirt"]["library"], Value::Null),
        Some("virt") => assert!(
            version["libvirt"]["library"]
                .as_str()
                .unwrap()
                .starts_with(char::is_numeric)
        ),
        other => panic!("unknown backend {other:?}"),
    }
    assert!(
        version["libvirt"]["daemon"]
            .as_str()
            .unwrap()
            .starts_with(char::is_numeric)
    );
    assert_eq!(version["libvirt"]["uri"], test_uri().as_str());
    let listed = c.ok("query-commands", Value::Null);
    assert!(
        listed["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "sync" && c["summary"].as_str().unwrap().len() > 10)
    );
}

#[test]
fn sync_lifecycle_commands_and_events_reach_subscribers_only() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut watcher = launcher.client();
    let sub = watcher.ok("subscribe", Value::Null);
    assert_eq!(sub["subscribed"], true);
    let mut filtered = launcher.client();
    filtered.ok("subscribe", json!({"events": ["SHUTDOWN_STARTED"]}));
    let mut c = launcher.client();

    let ret = c.ok("sync", json!({ "vmi": launcher.demo_vmi() }));
    assert_eq!(
        (ret["state"].as_str(), ret["reason"].as_str()),
        (Some("Running"), Some("Booted"))
    );
    assert_eq!(ret["action"], "defined-and-started");
    watcher.wait_event(T, "Defined", lifecycle("Defined", "Added"));
    let started = watcher.wait_event(T, "Started", lifecycle("Started", "Booted"));
    assert_eq!(started["data"]["domain"], launcher.domain_name().as_str());
    assert_eq!(started["data"]["state"], "Running");
    assert!(started["timestamp"]["seconds"].as_i64().unwrap() > 1_600_000_000);
    assert!(started["timestamp"]["microseconds"].as_i64().unwrap() < 1_000_000);

    // Idempotent: nothing to do the second time.
    let again = c.ok("sync", json!({ "vmi": launcher.demo_vmi() }));
    assert_eq!(again["action"], "none");
    assert_eq!(c.ok("query-status", Value::Null)["phase"], "Running");

    let paused = c.ok("pause", Value::Null);
    assert_eq!(
        (paused["state"].as_str(), paused["reason"].as_str()),
        (Some("Paused"), Some("User"))
    );
    let ev = watcher.wait_event(T, "Suspended", lifecycle("Suspended", "Paused"));
    assert_eq!(ev["data"]["state"], "Paused");
    assert_eq!(c.err_class("pause", Value::Null).0, "InvalidState");
    // sync must not undo a user's pause.
    assert_eq!(
        c.ok("sync", json!({ "vmi": launcher.demo_vmi() }))["state"],
        "Paused"
    );
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["paused_by_user"],
        true
    );
    assert_eq!(c.ok("unpause", Value::Null)["state"], "Running");
    watcher.wait_event(T, "Resumed", lifecycle("Resumed", "Unpaused"));
    assert_eq!(c.err_class("unpause", Value::Null).0, "InvalidState");

    let dom = c.ok("query-domain", Value::Null);
    assert_eq!(dom["name"], launcher.domain_name().as_str());
    assert_eq!(dom["state"], "Running");
    assert_eq!(dom["uuid"].as_str().unwrap().len(), 36);
    assert!(
        dom["xml"]
            .as_str()
            .unwrap()
            .contains(&format!("<name>{}</name>", launcher.domain_name()))
    );
    assert!(dom["spec"].is_object());
    let stats = c.ok("query-stats", Value::Null);
    assert_eq!(stats["domain"], launcher.domain_name().as_str());
    assert_eq!(stats["stats"]["state.state"], 1);

    assert_eq!(c.ok("reboot", Value::Null)["mode"], "acpi");
    c.ok("reset", Value::Null);

    // delete: the running domain becomes transient and keeps running.
    let deleted = c.ok("delete", Value::Null);
    assert_eq!(
        (deleted["undefined"].as_bool(), deleted["state"].as_str()),
        (Some(true), Some("Running"))
    );
    watcher.wait_event(T, "Undefined", lifecycle("Undefined", "Removed"));
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );

    // Events went only to subscribers: the command client saw none, the
    // filtered one none of these.
    assert!(c.read_line(Duration::from_millis(200)).is_none());
    assert!(filtered.read_line(Duration::from_millis(200)).is_none());

    // unsubscribe stops the stream.
    assert_eq!(
        filtered.ok("unsubscribe", Value::Null)["was_subscribed"],
        true
    );

    // kill: forced off, final event, exit 0, socket gone.
    // It was undefined above, so once off it no longer exists at all.
    let killed = c.ok("kill", Value::Null);
    assert_eq!(
        (killed["state"].as_str(), killed["reason"].as_str()),
        (Some("NoState"), Some("NonExistent"))
    );
    let fin = watcher.wait_event(T, "Stopped", lifecycle("Stopped", "Destroyed"));
    assert_eq!(fin["data"]["state"], "Shutoff");
    assert_eq!(launcher.wait_exit(T), 0);
    assert!(watcher.closed_within(T));
    assert!(!launcher.ready_socket().exists());
}

#[test]
fn shutdown_command_powers_off_and_exits_zero() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (mut launcher, mut c) = synced(&[]);
    let mut w = launcher.client();
    w.ok("subscribe", json!({"events": ["DOMAIN_LIFECYCLE"]}));
    assert!(c.request("shutdown", Value::Null).get("return").is_some());
    w.wait_event(T, "Stopped", lifecycle("Stopped", "Shutdown"));
    assert_eq!(launcher.wait_exit(T), 0);
    assert!(!launcher.ready_socket().exists());
}

#[test]
fn sigterm_asks_the_guest_and_exits_zero_when_it_powers_off() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (mut launcher, _c) = synced(&["--grace-period-seconds", "45"]);
    let mut w = launcher.client();
    w.ok("subscribe", Value::Null);
    launcher.signal("TERM");
    let started = w.wait_event(T, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    assert_eq!(started["data"]["signal"], "SIGTERM");
    assert_eq!(started["data"]["grace_period_seconds"], 45);
    w.wait_event(T, "Stopped", lifecycle("Stopped", "Shutdown"));
    assert_eq!(launcher.wait_exit(T), 0);
    assert!(!launcher.ready_socket().exists());
    assert!(launcher.log_text().contains("the guest powered off"));
}

#[test]
fn zero_grace_period_forces_the_domain_off_with_status_7() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (mut launcher, _c) = synced(&["--grace-period-seconds", "0"]);
    let mut w = launcher.client();
    w.ok("subscribe", Value::Null);
    launcher.signal("INT");
    w.wait_event(T, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    w.wait_event(T, "SHUTDOWN_GRACE_EXPIRED", named("SHUTDOWN_GRACE_EXPIRED"));
    w.wait_event(T, "Stopped", lifecycle("Stopped", "Destroyed"));
    assert_eq!(launcher.wait_exit(T), 7);
}

#[test]
fn qemu_timeout_without_a_domain_exits_5() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&["--qemu-timeout", "1s"]);
    launcher.wait_ready(T);
    let began = Instant::now();
    assert_eq!(launcher.wait_exit(T), 5);
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(launcher.log_text().contains("--qemu-timeout"));
    assert!(!launcher.ready_socket().exists());
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    for (args, needle) in [
        (vec!["--bogus"], "--bogus"),
        (
            vec!["--qemu-timeout", "soon", "--name", "a", "--namespace", "b"],
            "--qemu-timeout",
        ),
        (vec!["--max-clients", "0"], "--max-clients"),
        (vec!["--namespace", "b"], "--name is required"),
        (
            vec!["--vmi", "/nonexistent.json"],
            "--vmi /nonexistent.json",
        ),
    ] {
        let out = Command::new(launcher_bin()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    let help = Command::new(launcher_bin()).arg("--help").output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--grace-period-seconds"));
    let version = Command::new(launcher_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("virt-launcher {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unusable_directory_exits_3_naming_the_path() {
    let tree = TempTree::new("dirs");
    fs::write(tree.path("private"), b"not a directory").unwrap();
    let mut launcher = Launcher::start_in(
        tree,
        &[
            "--connect".into(),
            test_uri(),
            "--name".into(),
            unique_name("a"),
            "--namespace".into(),
            "b".into(),
        ],
    );
    assert_eq!(launcher.wait_exit(T), 3);
    let log = launcher.log_text();
    assert!(
        log.contains(&launcher.tree.path("private").display().to_string()),
        "{log}"
    );
}

#[test]
fn unreachable_libvirt_exits_4_after_retrying() {
    let mut launcher = Launcher::start_in(
        TempTree::new("nolibvirt"),
        &[
            "--connect",
            "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
            "--name",
            "a",
            "--namespace",
            "b",
        ]
        .map(String::from),
    );
    let began = Instant::now();
    assert_eq!(launcher.wait_exit(Duration::from_secs(40)), 4);
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(14),
        "gave up too early: {took:?}"
    );
    let log = launcher.log_text();
    assert!(log.contains("cannot connect to libvirt"), "{log}");
    assert!(!launcher.sockets_dir().join("launcher-sock").exists());
}

#[test]
fn standalone_vmi_is_synced_at_start() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("standalone");
    let vmi_path = tree.path("vmi.json");
    let name = unique_name("demo");
    fs::write(&vmi_path, demo_vmi_named(&name, "default").to_string()).unwrap();
    let mut launcher = Launcher::start_in(
        tree,
        &[
            "--connect".into(),
            test_uri(),
            "--vmi".into(),
            vmi_path.to_string_lossy().into_owned(),
        ],
    );
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let deadline = Instant::now() + T;
    loop {
        let status = c.ok("query-status", Value::Null);
        if status["domain"]["state"] == "Running" {
            assert_eq!(status["vmi"], format!("default/{name}").as_str());
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn standalone_vmi_that_cannot_sync_exits_8() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("standalone-bad");
    let vmi_path = tree.path("vmi.json");
    let mut vmi = demo_vmi_named(&unique_name("demo"), "default");
    vmi["spec"]["domain"]["cpu"]["cores"] = json!("many");
    fs::write(&vmi_path, vmi.to_string()).unwrap();
    let mut launcher = Launcher::start_in(
        tree,
        &[
            "--connect".into(),
            test_uri(),
            "--vmi".into(),
            vmi_path.to_string_lossy().into_owned(),
        ],
    );
    assert_eq!(launcher.wait_exit(T), 8);
    assert!(launcher.log_text().contains("spec.domain.cpu.cores"));
}

#[test]
fn clients_beyond_the_limit_get_busy_and_are_closed() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&["--max-clients", "2"]);
    launcher.wait_ready(T);
    // wait_ready's probe connection may hold a slot for a moment.
    let admitted = || {
        let deadline = Instant::now() + T;
        loop {
            if let Ok(c) = Client::try_connect(&launcher.ready_socket()) {
                return c;
            }
            assert!(Instant::now() < deadline, "never admitted");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut a = admitted();
    let _b = admitted();
    let mut refused = std::os::unix::net::UnixStream::connect(launcher.ready_socket()).unwrap();
    let mut text = String::new();
    use std::io::Read;
    refused.set_read_timeout(Some(T)).unwrap();
    refused.read_to_string(&mut text).unwrap();
    let line: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(line["error"]["class"], "Busy");
    assert!(
        line["error"]["desc"]
            .as_str()
            .unwrap()
            .contains("--max-clients")
    );
    assert_eq!(text.matches('\n').count(), 1);
    // The admitted ones still work, and a slot frees up when one leaves.
    a.ok("ping", Value::Null);
    drop(a);
    admitted().ok("ping", Value::Null);
}

#[test]
fn bad_vmi_is_invalid_argument_with_its_path_and_nothing_is_defined() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let mut vmi = launcher.demo_vmi();
    vmi["spec"]["domain"]["devices"]["disks"] = json!([{"name": "d", "disk": {"bus": "foo"}}]);
    vmi["spec"]["volumes"] = json!([{"name": "d", "emptyDisk": {"capacity": "1Gi"}}]);
    let (class, desc) = c.err_class("sync", json!({"vmi": vmi}));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.contains("spec.domain.devices.disks[0].disk.bus"),
        "{desc}"
    );
    let mut other = launcher.demo_vmi();
    other["metadata"]["name"] = json!("someone-else");
    let (class, desc) = c.err_class("sync", json!({"vmi": other}));
    assert_eq!(class, "InvalidArgument");
    assert!(desc.contains("someone-else"), "{desc}");
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );
    assert_eq!(
        c.err_class("sync", json!({"vmi": "text"})).0,
        "InvalidArgument"
    );
    assert_eq!(c.err_class("sync", Value::Null).0, "InvalidArgument");
}

/// Issue 9 item 9: what the docs call strict is strict. Each shape is
/// refused with InvalidArgument naming its path, and nothing is defined.
#[test]
fn lenient_vmi_shapes_are_invalid_argument_with_their_path() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let cases: [(&str, Value, &str); 6] = [
        (
            "/spec/domain/cpu",
            json!([3]),
            "arguments.vmi.spec.domain.cpu: invalid type: sequence, expected an object",
        ),
        (
            "/metadata",
            json!(["demo", "default"]),
            "arguments.vmi.metadata: invalid type: sequence, expected an object",
        ),
        (
            "/spec/domain/memory/guest",
            json!("1Ki"),
            "arguments.vmi.spec.domain.memory.guest: 1Ki is less than the minimum of 1M guest memory",
        ),
        (
            "/spec/domain/memory/guest",
            json!("1Ei"),
            "arguments.vmi.spec.domain.memory.guest: 1Ei is more than x86-64 can address",
        ),
        (
            "/spec/domain/cpu",
            json!({"cores": 0}),
            "arguments.vmi.spec.domain.cpu.cores: cores must be at least 1",
        ),
        (
            "/spec/domain/cpu",
            json!({"cores": 100000}),
            "arguments.vmi.spec.domain.cpu.cores: 100000 cores is more vCPUs than QEMU's x86_64 machines take",
        ),
    ];
    for (pointer, value, expected) in cases {
        let mut vmi = launcher.demo_vmi();
        *vmi.pointer_mut(pointer)
            .unwrap_or_else(|| panic!("demo VMI has no {pointer}")) = value;
        let (class, desc) = c.err_class("sync", json!({"vmi": vmi}));
        assert_eq!(class, "InvalidArgument", "{pointer}: {desc}");
        assert!(desc.starts_with(expected), "{pointer}: {desc}");
    }
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );
}

#[test]
fn slow_subscriber_loses_oldest_events_and_never_stalls_the_manager() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (launcher, mut c) = synced(&[]);
    // A subscriber that does not read.
    let mut slow = launcher.client();
    slow.ok("subscribe", json!({"events": ["DOMAIN_LIFECYCLE"]}));
    // Far more events than the subscriber's socket and queue hold: a
    // manager that waited for the subscriber would stop answering here
    // (the client gives up on a reply after its timeout). How fast it
    // answers meanwhile is a figure of scripts/bench.sh (test).
    for _ in 0..1500 {
        c.ok("pause", Value::Null);
        c.ok("unpause", Value::Null);
    }
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["state"],
        "Running"
    );
    // Now read: somewhere there is an EVENTS_DROPPED with a count.
    let dropped = slow.wait_event(T, "EVENTS_DROPPED", named("EVENTS_DROPPED"));
    assert!(dropped["data"]["count"].as_u64().unwrap() > 0, "{dropped}");
}

#[test]
fn guest_commands_without_an_agent_are_unavailable_at_once() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    // The test driver has no guest agent, so none ever connects.
    let (_launcher, mut c) = synced(&[]);
    for (command, args) in [
        ("guest-ping", Value::Null),
        ("query-guest-info", Value::Null),
        ("query-users", Value::Null),
        ("query-filesystems", Value::Null),
        ("query-interfaces", Value::Null),
        ("query-os-info", Value::Null),
        ("guest-exec", json!({"command": "/bin/true"})),
        ("freeze", Value::Null),
        ("unfreeze", Value::Null),
    ] {
        let t = Instant::now();
        let (class, desc) = c.err_class(command, args);
        assert_eq!(class, "Unavailable", "{command}: {desc}");
        assert!(desc.contains("guest agent is not connected"), "{desc}");
        // At once, not after an agent timeout (seconds); generous bound.
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
    // Bad arguments are still InvalidArgument first.
    assert_eq!(
        c.err_class("guest-exec", json!({"command": ""})).0,
        "InvalidArgument"
    );
    assert_eq!(
        c.err_class("guest-ping", json!({"timeout_seconds": 0})).0,
        "InvalidArgument"
    );
}

#[test]
fn every_request_is_answered_even_when_it_ends_the_launcher() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    // kill and shutdown stop the domain, which ends the launcher; their
    // replies must still arrive, every time.
    for round in 0..12 {
        let (mut launcher, mut c) = synced(&[]);
        let command = if round % 2 == 0 { "kill" } else { "shutdown" };
        let reply = c.request(command, Value::Null);
        assert!(
            reply.get("return").is_some(),
            "round {round}: {command}: {reply}"
        );
        assert_eq!(launcher.wait_exit(T), 0);
    }
}

#[test]
fn the_vmis_grace_period_applies_unless_the_flag_sets_one() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    let mut vmi = launcher.demo_vmi();
    vmi["spec"]["terminationGracePeriodSeconds"] = json!(12);
    launcher.wait_ready(T);
    let mut w = launcher.client();
    w.ok("subscribe", json!({"events": ["SHUTDOWN_STARTED"]}));
    launcher.client().ok("sync", json!({ "vmi": vmi }));
    launcher.signal("TERM");
    let started = w.wait_event(T, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    assert_eq!(started["data"]["grace_period_seconds"], 12);
    assert_eq!(launcher.wait_exit(T), 0);

    let mut launcher = Launcher::start_test(&["--grace-period-seconds", "3"]);
    let mut vmi = launcher.demo_vmi();
    vmi["spec"]["terminationGracePeriodSeconds"] = json!(12);
    launcher.wait_ready(T);
    let mut w = launcher.client();
    w.ok("subscribe", json!({"events": ["SHUTDOWN_STARTED"]}));
    launcher.client().ok("sync", json!({ "vmi": vmi }));
    launcher.signal("TERM");
    let started = w.wait_event(T, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    assert_eq!(started["data"]["grace_period_seconds"], 3);
    assert_eq!(launcher.wait_exit(T), 0);
}

#[test]
fn a_client_stalled_mid_line_is_dropped_but_an_idle_one_stays() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut stalled = launcher.client();
    let mut idle = launcher.client();
    // Slowloris: one byte of a line every 2 s. Each byte comes long before
    // the 30 s limit; the line as a whole must still end within 30 s of its
    // first byte, or the connection goes.
    let mut trickler = launcher.client();
    let trickle = std::thread::spawn(move || {
        let began = Instant::now();
        for byte in b"{\"execute\":\"ping\",\"id\":\"slow\"}".iter().cycle() {
            if began.elapsed() > Duration::from_secs(90) {
                return None;
            }
            trickler.send_raw(&[*byte]);
            if trickler.closed_within(Duration::from_secs(2)) {
                return Some(began.elapsed());
            }
        }
        None
    });
    stalled.send_raw(b"{\"execute\":\"pi");
    let began = Instant::now();
    assert!(
        stalled.closed_within(Duration::from_secs(45)),
        "a stalled partial line kept its connection"
    );
    assert!(
        began.elapsed() >= Duration::from_secs(25),
        "dropped too early: {:?}",
        began.elapsed()
    );
    // The idle connection, silent just as long, still works.
    idle.ok("ping", Value::Null);
    let trickled = trickle.join().unwrap();
    assert!(
        trickled.is_some(),
        "a client trickling one byte every 2 s kept its connection for 90 s"
    );
}

#[test]
fn under_racing_pause_and_unpause_the_reported_state_ends_as_libvirts() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (launcher, mut c) = synced(&["--max-clients", "20"]);
    let socket = launcher.ready_socket();
    let racers: Vec<_> = (0..16)
        .map(|n| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(&socket);
                for i in 0..25 {
                    let command = if (n + i) % 2 == 0 { "pause" } else { "unpause" };
                    let reply = client.request(command, Value::Null);
                    if let Some(error) = reply.get("error") {
                        let class = error["class"].as_str().unwrap_or("");
                        assert!(
                            class == "Busy" || class == "InvalidState",
                            "{command}: {reply}"
                        );
                    }
                }
            })
        })
        .collect();
    for racer in racers {
        racer.join().unwrap();
    }
    // Once no job runs, the launcher's view matches libvirt's within a
    // generous bound (the last events may still be in flight), and
    // paused_by_user agrees with it.
    let deadline = Instant::now() + T;
    loop {
        let status = c.ok("query-status", Value::Null);
        let libvirt = c.ok("query-domain", Value::Null);
        let domain = &status["domain"];
        let agrees = status["job"].is_null()
            && domain["state"] == libvirt["state"]
            && domain["reason"] == libvirt["reason"];
        if agrees {
            let by_user = domain["state"] == "Paused" && domain["reason"] == "User";
            assert_eq!(domain["paused_by_user"], by_user, "{status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the launcher says {domain}, libvirt says {} ({})",
            libvirt["state"],
            libvirt["reason"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_delete_is_refused_and_sends_no_second_undefined_event() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (launcher, mut c) = synced(&[]);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", json!({"events": ["DOMAIN_LIFECYCLE"]}));
    assert_eq!(c.ok("delete", Value::Null)["undefined"], true);
    let (class, desc) = c.err_class("delete", Value::Null);
    assert_eq!(class, "InvalidState", "{desc}");
    assert!(desc.contains("is not defined"), "{desc}");
    watcher.wait_event(T, "Undefined", lifecycle("Undefined", "Removed"));
    // libvirt's test driver would send another for a second undefine.
    assert!(
        watcher.read_line(Duration::from_millis(500)).is_none(),
        "a second event arrived"
    );
}

#[test]
fn migrate_on_the_test_driver_is_unavailable_up_front() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let (launcher, mut c) = synced(&[]);
    let mut watcher = launcher.client();
    watcher.ok(
        "subscribe",
        json!({"events": ["MIGRATION_STARTED", "MIGRATION_FAILED"]}),
    );
    let (class, desc) = c.err_class(
        "migrate",
        json!({"target": {"libvirt_uri": "qemu+tcp://elsewhere/system"}}),
    );
    assert_eq!(class, "Unavailable", "{desc}");
    assert!(desc.contains("test driver cannot migrate"), "{desc}");
    assert!(watcher.read_line(Duration::from_millis(300)).is_none());
    assert_eq!(
        c.ok("query-migration", Value::Null)["migration"],
        Value::Null
    );
}

#[test]
fn test_default_runs_in_process_on_virt_and_is_refused_at_once_on_wire() {
    let backend = expected_backend()
        .expect("VL_LAUNCHER_BIN is set: say its backend with VL_LAUNCHER_BACKEND");
    let mut launcher = Launcher::start_in(
        TempTree::new("in-process"),
        &[
            "--connect".into(),
            "test:///default".into(),
            "--name".into(),
            unique_name("a"),
            "--namespace".into(),
            "b".into(),
        ],
    );
    match backend.as_str() {
        // No libvirt library, so no in-process driver: exit 4 without
        // retrying, saying what to use instead.
        "wire" => {
            let began = Instant::now();
            assert_eq!(launcher.wait_exit(T), 4);
            assert!(began.elapsed() < Duration::from_secs(5));
            let log = launcher.log_text();
            assert!(log.contains("use test+unix:///default"), "{log}");
            assert!(!launcher.sockets_dir().join("launcher-sock").exists());
        }
        "virt" => {
            launcher.wait_ready(T);
            let client = launcher.client();
            assert_eq!(client.hello["hello"]["backend"], "virt");
        }
        other => panic!("unknown backend {other}"),
    }
}
