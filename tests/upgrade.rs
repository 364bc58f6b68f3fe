//! `upgrade` (issue 34): the launcher's binary is replaced under a running
//! guest. The launcher keeps its PID and its socket file (which never
//! disappears), a client pinging all along gets every ping answered or its
//! connection closed (and a reconnect works at once: no `connect` ever
//! fails), the guest keeps its QEMU process, and a binary that fails its
//! check is refused with nothing changed. On libvirt's test driver (no
//! guest) and on the host's libvirtd with the real test guest.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::guest::*;
use common::upgrade::*;
use common::*;
use serde_json::{Value, json};

/// Sends `upgrade` with `arguments` on a fresh connection; the reply.
fn upgrade(launcher: &Launcher, arguments: Value) -> Value {
    let mut client = launcher.client();
    client.request("upgrade", arguments)
}

/// An executable script at `path` with `body`.
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn upgrades_on_the_test_driver_keep_the_process_and_the_socket_and_refuse_a_bad_binary() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(STEP);
    let pid = launcher.pid();
    let socket = launcher.ready_socket();
    let watch = SocketWatch::start(socket.clone());
    let pinger = Pinger::start(socket.clone());
    std::thread::sleep(Duration::from_millis(100));

    for round in 1..=5 {
        let reply = upgrade(&launcher, Value::Null);
        assert_eq!(
            reply["return"]["version"],
            format!("virt-launcher {}", env!("CARGO_PKG_VERSION")),
            "{reply}"
        );
        wait_resumed(&mut launcher, round, STEP);
        assert_eq!(launcher.pid(), pid);
        assert!(launcher.child.try_wait().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGUSR2: the same, to the launcher's own path.
    launcher.signal("USR2");
    wait_resumed(&mut launcher, 6, STEP);

    // Refused, nothing changed: not a launcher, a launcher that cannot
    // read the state (a downgrade), a relative path.
    let tree = TempTree::new("upgrade-bins");
    let (class, desc) = launcher
        .client()
        .err_class("upgrade", json!({"binary": "/bin/false"}));
    assert_eq!(class, "InvalidArgument", "{desc}");
    assert!(desc.contains("nothing changed"), "{desc}");
    let old = tree.path("old-launcher");
    script(
        &old,
        "case \"$1\" in --version) echo 'virt-launcher 0.0.1';; *) echo 'hand-over state version 1 unknown' >&2; exit 2;; esac",
    );
    let (class, desc) = launcher
        .client()
        .err_class("upgrade", json!({"binary": old}));
    assert_eq!(class, "InvalidArgument", "{desc}");
    assert!(desc.contains("--upgrade-check"), "{desc}");
    assert!(desc.contains("hand-over state version 1 unknown"), "{desc}");
    let (class, desc) = launcher
        .client()
        .err_class("upgrade", json!({"binary": "virt-launcher"}));
    assert_eq!(class, "InvalidArgument", "{desc}");
    assert_eq!(resumed(&launcher), 6);
    // The launcher goes on as before; its state file is gone.
    launcher.client().ok("ping", Value::Null);
    assert!(!launcher.tree.path("private/upgrade-state.json").exists());

    let tally = pinger.finish();
    let missing = watch.finish();
    eprintln!(
        "pings: {tally:?}; socket missing {missing} times; hand-overs: {:?}",
        hand_over_ms(&launcher)
    );
    assert!(tally.failed_connects.is_empty(), "{tally:?}");
    assert!(tally.wrong.is_empty(), "{tally:?}");
    assert!(tally.answered > 20, "{tally:?}");
    assert_eq!(missing, 0, "the socket file disappeared");

    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
    assert!(!socket.exists());
}

#[test]
fn a_sigterm_right_after_the_upgrade_reply_still_stops_the_launcher_once() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    for round in 0..3 {
        let mut launcher = Launcher::start_test(&[]);
        launcher.wait_ready(STEP);
        let mut client = launcher.client();
        let reply = client.request("upgrade", Value::Null);
        assert!(reply.get("return").is_some(), "{reply}");
        if round > 0 {
            std::thread::sleep(Duration::from_millis(round * 2));
        }
        launcher.signal("TERM");
        // Not killed by the signal during the exec (status -1), not lost.
        assert_eq!(launcher.wait_exit(STEP), 0, "{}", launcher.log_text());
        let log = launcher.log_text();
        assert_eq!(
            log.matches("received while no domain was running").count(),
            1,
            "{log}"
        );
    }
}

/// Destroys and undefines a domain of the host's libvirtd.
struct HostDomain(String);

impl Drop for HostDomain {
    fn drop(&mut self) {
        for action in ["destroy", "undefine"] {
            let _ = std::process::Command::new("virsh")
                .args(["-c", "qemu:///system", action, &self.0])
                .output();
        }
    }
}

#[test]
fn upgrades_under_a_running_guest_on_the_hosts_libvirtd_keep_its_qemu() {
    if !require(&[Need::Root, Need::Qemu, Need::TestGuest, Need::HostLibvirtd]) {
        return;
    }
    let name = format!("upgrade{}", std::process::id());
    let domain = format!("e2e_{name}");
    let _cleanup = HostDomain(domain.clone());
    // A guest that ignores the power button: the graceful stop at the end
    // runs to its deadline, across a hand-over.
    let mut opts = GuestOptions::new(&name);
    opts.ignore_acpi = true;
    let args = [
        "--connect",
        "qemu:///system",
        "--grace-period-seconds",
        "12",
        "--force-emulation",
        "--name",
        &name,
        "--namespace",
        "e2e",
    ]
    .map(String::from);
    let mut launcher = Launcher::start_in(TempTree::new("upgrade-guest"), &args);
    launcher.wait_ready(STEP);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    let qemu = qemu_pids(&domain);
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    // The guest counts, every 10 ms, into a file.
    let (code, _) = guest_sh(
        &mut client,
        "(i=0; while true; do i=$((i+1)); echo $i > /run/counter; sleep 0.01; done) >/dev/null 2>&1 &",
    );
    assert_eq!(code, 0);
    let counter = |client: &mut Client| -> u64 {
        let (_, out) = guest_sh(client, "cat /run/counter");
        out.trim().parse().unwrap_or(0)
    };

    let pid = launcher.pid();
    let socket = launcher.ready_socket();
    let watch = SocketWatch::start(socket.clone());
    let pinger = Pinger::start(socket.clone());
    std::thread::sleep(Duration::from_millis(100));
    for round in 1..=5 {
        let reply = upgrade(&launcher, Value::Null);
        assert!(reply.get("return").is_some(), "{reply}");
        wait_resumed(&mut launcher, round, STEP);
        assert_eq!(launcher.pid(), pid);
        assert_eq!(qemu_pids(&domain), qemu, "QEMU changed in round {round}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let tally = pinger.finish();
    let missing = watch.finish();
    eprintln!(
        "pings: {tally:?}; socket missing {missing} times; hand-overs: {:?}",
        hand_over_ms(&launcher)
    );
    assert!(tally.failed_connects.is_empty(), "{tally:?}");
    assert!(tally.wrong.is_empty(), "{tally:?}");
    assert_eq!(missing, 0, "the socket file disappeared");

    // The adopted guest: running, never paused or redefined, its agent
    // answering without a reconnect, its counter going on.
    let mut client = launcher.client();
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["state"], "Running", "{status}");
    assert_eq!(status["phase"], "Running", "{status}");
    let before = counter(&mut client);
    std::thread::sleep(Duration::from_millis(300));
    let after = counter(&mut client);
    assert!(
        after > before,
        "the guest's counter stalled: {before} then {after}"
    );

    // A binary that fails its check is refused, the guest untouched.
    let (class, _) = client.err_class("upgrade", json!({"binary": "/bin/false"}));
    assert_eq!(class, "InvalidArgument");
    assert_eq!(qemu_pids(&domain), qemu);

    // A graceful stop under way is handed over with its deadline: the new
    // launcher forces the guest off when the old one would have, once.
    launcher.signal("TERM");
    let stopping = wait_status(&mut client, STEP, "ShuttingDown", |s| {
        s["phase"] == "ShuttingDown"
    });
    eprintln!("before the hand-over: {}", stopping["shutdown"]);
    std::thread::sleep(Duration::from_secs(3));
    let reply = upgrade(&launcher, Value::Null);
    assert!(reply.get("return").is_some(), "{reply}");
    wait_resumed(&mut launcher, 6, STEP);
    let status = launcher.client().ok("query-status", Value::Null);
    eprintln!("after the hand-over: {}", status["shutdown"]);
    assert_eq!(status["phase"], "ShuttingDown", "{status}");
    let remaining = status["shutdown"]["remaining_seconds"].as_f64().unwrap();
    assert!(remaining < 10.0, "the grace period began again: {status}");
    assert_eq!(qemu_pids(&domain), qemu);
    // Status 7: the grace period expired and the guest was forced off.
    assert_eq!(launcher.wait_exit(STEP), 7);
    let log = launcher.log_text();
    assert_eq!(log.matches("SHUTDOWN_GRACE_EXPIRED").count(), 1, "{log}");
    wait_no_qemu(&domain, STEP);
}
