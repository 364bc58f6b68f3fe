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
fn a_subscriber_reconnecting_after_an_upgrade_resumes_from_its_last_event_number() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(STEP);
    let mut watcher = launcher.client();
    let subscribed = watcher.ok("subscribe", json!({"events": ["DOMAIN_LIFECYCLE"]}));
    let mut c = launcher.client();
    c.ok("sync", json!({ "vmi": launcher.demo_vmi() }));
    let started = watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    let started_seq = started["seq"].as_u64().expect("events carry seq");
    assert!(
        started_seq > subscribed["last_seq"].as_u64().unwrap(),
        "{started} after {subscribed}"
    );
    c.ok("pause", Value::Null);
    let paused = watcher.wait_event(STEP, "Suspended", lifecycle("Suspended", "Paused"));
    let paused_seq = paused["seq"].as_u64().unwrap();
    assert!(paused_seq > started_seq, "{paused} after {started}");

    // The watcher saw the pause; it "missed" the unpause, published just
    // before the upgrade closed its connection.
    c.ok("unpause", Value::Null);
    let resumed_event = watcher.wait_event(STEP, "Resumed", lifecycle("Resumed", "Unpaused"));
    let reply = upgrade(&launcher, Value::Null);
    assert!(reply.get("return").is_some(), "{reply}");
    wait_resumed(&mut launcher, 1, STEP);

    // Reconnected: subscribing since the pause replays the resume with its
    // number, then new events go on numbering after it.
    let mut again = launcher.client();
    let subscribed = again.ok(
        "subscribe",
        json!({"events": ["DOMAIN_LIFECYCLE"], "since": paused_seq}),
    );
    assert!(subscribed["last_seq"].as_u64().unwrap() >= resumed_event["seq"].as_u64().unwrap());
    let replayed = again.wait_event(STEP, "replayed Resumed", lifecycle("Resumed", "Unpaused"));
    assert_eq!(replayed, resumed_event, "the same line, number and all");
    // (The test driver's domain lived in the old process: a sync defines
    // and starts it again.)
    c = launcher.client();
    c.ok("sync", json!({ "vmi": launcher.demo_vmi() }));
    let after = again.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    assert!(
        after["seq"].as_u64().unwrap() > replayed["seq"].as_u64().unwrap(),
        "{after} after {replayed}"
    );
    // A number this launcher never published is refused.
    let (class, desc) = launcher
        .client()
        .err_class("subscribe", json!({"since": 1_000_000}));
    assert_eq!(class, "InvalidArgument", "{desc}");
    assert!(desc.contains("after the last event"), "{desc}");

    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
}

#[test]
fn a_sigterm_right_after_the_upgrade_reply_still_stops_the_launcher_once() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    // Right after the reply the launcher waits for replies due, then
    // execs: signals from at once to a few milliseconds later land
    // before, during and after the exec.
    for round in 0..6 {
        let mut launcher = Launcher::start_test(&[]);
        launcher.wait_ready(STEP);
        let mut client = launcher.client();
        let reply = client.request("upgrade", Value::Null);
        assert!(reply.get("return").is_some(), "{reply}");
        if round > 0 {
            std::thread::sleep(Duration::from_micros(round * 700));
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

/// Upgrades in a row on the real guest (the "done when").
const ROUNDS: usize = 20;

/// The guest counts, every 10 ms, into /run/counter; `counter` reads it.
fn start_counter(client: &mut Client) {
    let (code, _) = guest_sh(
        client,
        "(i=0; while true; do i=$((i+1)); echo $i > /run/counter; sleep 0.01; done) >/dev/null 2>&1 &",
    );
    assert_eq!(code, 0);
}

fn counter(client: &mut Client) -> u64 {
    let (_, out) = guest_sh(client, "cat /run/counter");
    out.trim().parse().unwrap_or(0)
}

/// [`upgrade_rounds`] while the guest counts (`start_counter` through
/// `client`): its counter goes on across them. Returns a client of the
/// launcher after them.
fn upgrade_rounds_under_a_counting_guest(
    launcher: &mut Launcher,
    mut client: Client,
    domain: &str,
) -> Client {
    start_counter(&mut client);
    let before = counter(&mut client);
    upgrade_rounds(launcher, domain, ROUNDS);
    let mut client = launcher.client();
    let after = counter(&mut client);
    assert!(
        after > before,
        "the guest's counter stalled: {before} then {after}"
    );
    client
}

/// `rounds` upgrades in a row of a launcher whose guest runs `domain`,
/// while a client pings every 10 ms: the launcher's PID, the QEMU process
/// and (with `--spawn-libvirt`) the daemons and their namespace's init
/// never change, every ping is answered or its connection closed (a
/// reconnect works at once), none is answered wrongly or twice, and the
/// socket file never disappears. Then the guest runs, as before.
fn upgrade_rounds(launcher: &mut Launcher, domain: &str, rounds: usize) {
    let qemu = qemu_pids(domain);
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    let spawned = |launcher: &Launcher| {
        let status = launcher.client().ok("query-status", Value::Null);
        status["libvirt"]["spawned"].clone()
    };
    let daemons = spawned(launcher);
    let pid = launcher.pid();
    let socket = launcher.ready_socket();
    let watch = SocketWatch::start(socket.clone());
    let pinger = Pinger::start(socket.clone());
    let already = resumed(launcher);
    std::thread::sleep(Duration::from_millis(100));
    for round in 1..=rounds {
        let reply = upgrade(launcher, Value::Null);
        assert!(reply.get("return").is_some(), "round {round}: {reply}");
        wait_resumed(launcher, already + round, STEP);
        assert_eq!(launcher.pid(), pid);
        assert_eq!(qemu_pids(domain), qemu, "QEMU changed in round {round}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let tally = pinger.finish();
    let missing = watch.finish();
    eprintln!(
        "pings: {tally:?}; socket missing {missing} times; hand-overs: {:?}",
        hand_over_ms(launcher)
    );
    assert!(tally.failed_connects.is_empty(), "{tally:?}");
    assert!(tally.wrong.is_empty(), "{tally:?}");
    assert!(tally.answered > rounds as u64, "{tally:?}");
    assert_eq!(missing, 0, "the socket file disappeared");
    assert_eq!(spawned(launcher), daemons, "the daemons changed");
    let status = launcher.client().ok("query-status", Value::Null);
    assert_eq!(status["domain"]["state"], "Running", "{status}");
    assert_eq!(status["phase"], "Running", "{status}");
}

/// Whether process `pid` exists (a zombie counts as gone).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn upgrades_under_a_running_guest_with_spawned_daemons_keep_them_and_its_qemu() {
    if !require(&[Need::Root, Need::Qemu, Need::TestGuest]) {
        return;
    }
    let opts = GuestOptions::new(&format!("upgsp{}", std::process::id()));
    let domain = format!("e2e_{}", opts.name);
    let Booted {
        mut launcher,
        client,
        ..
    } = boot(TempTree::new("upgrade-spawned"), &opts, &[]);
    let mut client = upgrade_rounds_under_a_counting_guest(&mut launcher, client, &domain);
    // The last migration's outcome is handed over: a migration to a
    // launcher that is not there fails (the guest stays), and after an
    // upgrade query-migration shows it as before.
    let mut watcher = launcher.client();
    watcher.ok("subscribe", json!({"events": ["MIGRATION_FAILED"]}));
    client.ok(
        "migrate",
        json!({"target": {"libvirt_uri": "qemu+tcp://127.0.0.1:1/system"}}),
    );
    watcher.wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    let failed = client.ok("query-migration", Value::Null)["migration"].clone();
    assert_eq!(failed["phase"], "failed", "{failed}");
    let reply = upgrade(&launcher, Value::Null);
    assert!(reply.get("return").is_some(), "{reply}");
    wait_resumed(&mut launcher, ROUNDS + 1, STEP);
    let mut client = launcher.client();
    let after = client.ok("query-migration", Value::Null)["migration"].clone();
    for field in ["phase", "role", "failure", "target_uri"] {
        assert_eq!(after[field], failed[field], "{field}: {after} / {failed}");
    }
    // Times to the microsecond (the state file holds them as seconds).
    for field in ["started", "ended", "elapsed_seconds"] {
        let (a, b) = (after[field].as_f64(), failed[field].as_f64());
        assert!(
            a.zip(b).is_some_and(|(a, b)| (a - b).abs() < 1e-5),
            "{field}: {after} / {failed}"
        );
    }
    assert_eq!(qemu_pids(&domain).len(), 1);

    // The daemons are still supervised: a killed virtlogd is restarted.
    let status = client.ok("query-status", Value::Null);
    let spawned = status["libvirt"]["spawned"].clone();
    let virtlogd = spawned["daemons"][1]["pid"].as_u64().unwrap();
    assert_eq!(spawned["daemons"][1]["name"], "virtlogd", "{spawned}");
    std::process::Command::new("kill")
        .arg(virtlogd.to_string())
        .status()
        .unwrap();
    let restarted = wait_status(&mut client, STEP, "virtlogd restarted", |s| {
        s["libvirt"]["spawned"]["daemons"][1]["restarts"] == 1
            && s["libvirt"]["spawned"]["daemons"][1]["pid"].is_u64()
    });
    let mut processes: Vec<u64> = vec![spawned["init_pid"].as_u64().unwrap()];
    for daemon in restarted["libvirt"]["spawned"]["daemons"]
        .as_array()
        .unwrap()
    {
        processes.push(daemon["pid"].as_u64().unwrap());
    }
    let qemu = qemu_pids(&domain);
    // A graceful stop works as before, and nothing the launcher started
    // outlives it: daemons, their namespace's init, QEMU.
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0, "{}", launcher.log_text());
    wait_no_qemu(&domain, STEP);
    for pid in processes.into_iter().chain(qemu.into_iter().map(u64::from)) {
        assert!(!alive(pid), "process {pid} outlived the launcher");
    }
    let log = launcher.log_text();
    assert_eq!(
        log.matches("upgrade: resumed from").count(),
        ROUNDS + 1,
        "{log}"
    );
}

#[test]
fn a_launcher_killed_after_an_upgrade_with_spawned_daemons_leaves_nothing() {
    if !require(&[Need::Root, Need::Qemu, Need::TestGuest]) {
        return;
    }
    let opts = GuestOptions::new(&format!("upgkill{}", std::process::id()));
    let domain = format!("e2e_{}", opts.name);
    let Booted { mut launcher, .. } = boot(TempTree::new("upgrade-killed"), &opts, &[]);
    let reply = upgrade(&launcher, Value::Null);
    assert!(reply.get("return").is_some(), "{reply}");
    wait_resumed(&mut launcher, 1, STEP);
    // The namespace still dies with the launcher that took it over: its
    // init, the daemons and QEMU go, within 5 s, as before any upgrade.
    let tree = common::processes::ProcessTree::of(&launcher, Some(&domain));
    assert_eq!(tree.qemu.len(), 1, "{:?}", tree.qemu);
    let sent = std::time::Instant::now();
    launcher.signal("KILL");
    let gone = tree.wait_gone(sent, Duration::from_secs(5));
    assert_eq!(launcher.wait_exit(STEP), -1);
    tree.wait_reaped(sent, STEP);
    eprintln!("{} processes gone {gone:?} after SIGKILL", tree.size());
    assert!(qemu_pids(&domain).is_empty());
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
    // The adopted guest: running, never paused or redefined, its agent
    // answering without a reconnect, its counter going on.
    let mut client = upgrade_rounds_under_a_counting_guest(&mut launcher, client, &domain);

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
    wait_resumed(&mut launcher, ROUNDS + 1, STEP);
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
