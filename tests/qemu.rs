//! End to end on real libvirt and QEMU: each test starts a launcher with
//! its own libvirt daemons (--spawn-libvirt), boots the test guest under
//! plain emulation, and talks to it only through the launcher's socket.

mod common;

use std::time::{Duration, Instant};

use common::guest::*;
use common::*;
use serde_json::{Value, json};

fn event_time(e: &Value) -> f64 {
    e["timestamp"]["seconds"].as_f64().unwrap()
        + e["timestamp"]["microseconds"].as_f64().unwrap() / 1e6
}

#[test]
fn boots_connects_the_agent_reports_stats_and_pauses() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut g = boot(TempTree::new("q-boot"), &GuestOptions::new("boot"), &[]);
    let status = g.client.ok("query-status", Value::Null);
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["domain"]["state"], "Running");
    assert_eq!(status["agent"]["connected"], true);
    assert_eq!(status["libvirt"]["spawned"]["daemons"][0]["restarts"], 0);

    // Real CPU time and balloon figures (the guest reports its own memory
    // once the balloon driver's stats period has passed).
    let deadline = Instant::now() + STEP;
    let stats = loop {
        let stats = g.client.ok("query-stats", Value::Null)["stats"].clone();
        if stats.get("balloon.available").is_some() {
            break stats;
        }
        assert!(Instant::now() < deadline, "no guest balloon stats: {stats}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(stats["cpu.time"].as_u64().unwrap() > 100_000_000, "{stats}");
    assert_eq!(stats["balloon.maximum"], 192 * 1024);
    assert!(stats["balloon.current"].as_u64().unwrap() > 0);
    assert!(stats["balloon.available"].as_u64().unwrap() > 64 * 1024);
    assert_eq!(stats["vcpu.current"], 1);

    let paused = g.client.ok("pause", Value::Null);
    assert_eq!(
        (paused["state"].as_str(), paused["reason"].as_str()),
        (Some("Paused"), Some("User"))
    );
    let e = g
        .watcher
        .wait_event(STEP, "Suspended", lifecycle("Suspended", "Paused"));
    assert_eq!(e["data"]["state"], "Paused");
    assert_eq!(
        g.client.ok("query-status", Value::Null)["domain"]["state"],
        "Paused"
    );
    assert_eq!(g.client.ok("unpause", Value::Null)["state"], "Running");
    let e = g
        .watcher
        .wait_event(STEP, "Resumed", lifecycle("Resumed", "Unpaused"));
    assert_eq!(e["data"]["state"], "Running");
    // The guest really runs again.
    assert_eq!(guest_sh(&mut g.client, "echo alive").1, "alive\n");
}

#[test]
fn sigterm_powers_a_cooperative_guest_off_by_acpi_and_exits_zero() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut g = boot(TempTree::new("q-term"), &GuestOptions::new("term"), &[]);
    g.launcher.signal("TERM");
    let started = g
        .watcher
        .wait_event(STEP, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    assert_eq!(started["data"]["grace_period_seconds"], 30);
    let stopped = g
        .watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Shutdown"));
    // Detail Shutdown: the guest powered itself off (a forced stop at the
    // end of the grace period is Destroyed). How long it took is a figure
    // of scripts/bench.sh (qemu).
    assert_eq!(stopped["data"]["state"], "Shutoff");
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    assert!(!g.launcher.ready_socket().exists());
    wait_no_qemu("e2e_term", Duration::from_secs(5));
    assert!(g.launcher.log_text().contains("the guest powered off"));
}

/// The guest's serial console as QEMU logged it (KubeVirt's
/// `<private-dir>/<uid>/virt-serial0-log`); empty until there is one.
fn console_log(launcher: &Launcher) -> String {
    let private = launcher.tree.path("private");
    std::fs::read_dir(&private)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("virt-serial0-log"))
        .find(|path| path.exists())
        .map(|path| std::fs::read_to_string(path).unwrap_or_default())
        .unwrap_or_default()
}

/// How many times the launcher's log says it pressed the ACPI power button.
fn acpi_presses(launcher: &Launcher) -> usize {
    launcher
        .log_text()
        .matches("manager: ACPI power button press ")
        .count()
}

#[test]
fn sigterm_during_boot_is_repeated_until_the_guest_listens() {
    if !require(REAL_GUEST) {
        return;
    }
    // The first ACPI press comes before the guest's acpid runs; the
    // repeats every 5 s must still power it off. A grace period long
    // enough for the guest to finish booting on a loaded machine.
    let launcher = start_qemu_launcher(
        TempTree::new("q-early"),
        "early",
        &["--grace-period-seconds", "110"],
    );
    let mut launcher = launcher;
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    client.request_timeout(
        "sync",
        json!({"vmi": guest_vmi(&GuestOptions::new("early"))}),
        STEP,
    );
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    launcher.signal("TERM");
    let deadline = Instant::now() + STEP;
    while acpi_presses(&launcher) == 0 {
        assert!(
            Instant::now() < deadline,
            "no ACPI press logged after SIGTERM:\n{}",
            launcher.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Read after the first press: the guest had not finished booting
    // then (its init prints "tg: guest up" and only then starts acpid),
    // so nothing in it could hear that press.
    let console = console_log(&launcher);
    assert!(
        !console.contains("tg: guest up"),
        "the guest was already up at the first press, which proves nothing:\n{console}"
    );
    watcher.wait_event(BOOT, "Stopped", lifecycle("Stopped", "Shutdown"));
    assert_eq!(launcher.wait_exit(STEP), 0);
    // The launcher pressed again, and the guest, once up, heard a press
    // and powered itself off.
    let presses = acpi_presses(&launcher);
    assert!(
        presses >= 2,
        "{presses} ACPI press(es): the first one, missed, was never repeated:\n{}",
        launcher.log_text()
    );
    let console = console_log(&launcher);
    let up = console.find("tg: guest up");
    let heard = console.find("tg: ACPI power button: powering off");
    assert!(
        matches!((up, heard), (Some(up), Some(heard)) if up < heard),
        "the guest's console does not show it up and then hearing the button:\n{console}"
    );
}

#[test]
fn a_guest_that_ignores_acpi_is_forced_off_when_the_grace_period_ends() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut opts = GuestOptions::new("stubborn");
    opts.ignore_acpi = true;
    let mut g = boot(
        TempTree::new("q-grace"),
        &opts,
        &["--grace-period-seconds", "8"],
    );
    g.launcher.signal("TERM");
    let started = g
        .watcher
        .wait_event(STEP, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    // A second signal must not cut the grace period short.
    std::thread::sleep(Duration::from_secs(2));
    g.launcher.signal("TERM");
    let expired = g.watcher.wait_event(
        STEP,
        "SHUTDOWN_GRACE_EXPIRED",
        named("SHUTDOWN_GRACE_EXPIRED"),
    );
    let waited = event_time(&expired) - event_time(&started);
    assert!(
        (7.0..=9.0).contains(&waited),
        "forced off after {waited:.2} s, not 8 ± 1 s"
    );
    let stopped = g
        .watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Destroyed"));
    assert_eq!(stopped["data"]["state"], "Shutoff");
    assert_eq!(g.launcher.wait_exit(STEP), 7);
    assert!(!g.launcher.ready_socket().exists());
    wait_no_qemu("e2e_stubborn", Duration::from_secs(5));
}

#[test]
fn data_written_before_sigterm_is_there_after_a_new_boot() {
    if !require(REAL_GUEST) {
        return;
    }
    let images_dir = TempTree::new("q-disk");
    let disk = images_dir.path("data.img");
    ext4_image(&disk, 64);
    let mark = format!("marker-{}", std::process::id());

    let mut opts = GuestOptions::new("disk");
    opts.data_disk = Some(disk.clone());
    let mut g = boot(TempTree::new("q-disk-a"), &opts, &[]);
    let (code, _) = guest_sh(
        &mut g.client,
        &format!("echo {mark} > /mnt/data/marker && sync"),
    );
    assert_eq!(code, 0);
    g.launcher.signal("TERM");
    g.watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Shutdown"));
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    wait_no_qemu("e2e_disk", Duration::from_secs(5));

    let mut again = boot(TempTree::new("q-disk-b"), &opts, &[]);
    let (code, out) = guest_sh(&mut again.client, "cat /mnt/data/marker");
    assert_eq!((code, out.trim()), (0, mark.as_str()));
    again.client.ok("kill", Value::Null);
    assert_eq!(again.launcher.wait_exit(STEP), 0);
}

#[test]
fn qemu_killed_with_sigkill_is_reported_as_a_crash() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut g = boot(TempTree::new("q-crash"), &GuestOptions::new("crash"), &[]);
    let pids = qemu_pids("e2e_crash");
    assert_eq!(pids.len(), 1, "{pids:?}");
    let ok = std::process::Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let stopped = g
        .watcher
        .wait_event(STEP, "Stopped", lifecycle_event("Stopped"));
    assert_eq!(stopped["data"]["state"], "Shutoff");
    let reason = stopped["data"]["reason"].as_str().unwrap().to_string();
    assert!(reason == "Failed" || reason == "Crashed", "reason {reason}");
    assert_eq!(g.launcher.wait_exit(STEP), 6);
    assert!(!g.launcher.ready_socket().exists());
    assert!(g.launcher.log_text().contains("stopped unexpectedly"));
}

fn lifecycle_event(event: &str) -> impl Fn(&Value) -> bool {
    let event = event.to_string();
    move |e| e["event"] == "DOMAIN_LIFECYCLE" && e["data"]["event"] == event.as_str()
}

/// The guest kernel's boot id: a new one at every boot.
fn boot_id(client: &mut Client) -> String {
    let (code, out) = guest_sh(client, "cat /proc/sys/kernel/random/boot_id");
    assert_eq!(code, 0, "{out}");
    let id = out.trim().to_string();
    assert_eq!(id.len(), 36, "not a boot id: {id:?}");
    id
}

#[test]
fn reset_reboot_delete_and_kill_on_a_live_guest() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut g = boot(TempTree::new("q-ops"), &GuestOptions::new("ops"), &[]);
    // reset: a hard reset; the guest boots again (a new boot id) and its
    // agent returns.
    let first_boot = boot_id(&mut g.client);
    g.client.ok("reset", Value::Null);
    g.watcher
        .wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    let after_reset = boot_id(&mut g.client);
    assert_ne!(after_reset, first_boot, "the guest did not boot again");

    // reboot: through the agent, since it is connected.
    let reboot = g.client.ok("reboot", Value::Null);
    assert_eq!(reboot["mode"], "guest-agent");
    g.watcher
        .wait_event(BOOT, "DOMAIN_REBOOT", named("DOMAIN_REBOOT"));
    g.watcher
        .wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    assert_eq!(
        g.client.ok("query-status", Value::Null)["domain"]["state"],
        "Running"
    );
    assert_ne!(
        boot_id(&mut g.client),
        after_reset,
        "the guest did not reboot"
    );

    // delete: the definition goes, the guest keeps running.
    let deleted = g.client.ok("delete", Value::Null);
    assert_eq!(
        (deleted["undefined"].as_bool(), deleted["state"].as_str()),
        (Some(true), Some("Running"))
    );
    g.watcher
        .wait_event(STEP, "Undefined", lifecycle("Undefined", "Removed"));
    assert_eq!(guest_sh(&mut g.client, "echo still-here").1, "still-here\n");

    // kill: forced off, exit 0.
    g.client.ok("kill", Value::Null);
    g.watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Destroyed"));
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    wait_no_qemu("e2e_ops", Duration::from_secs(5));
}

#[test]
fn a_killed_libvirt_daemon_is_restarted_and_the_guest_never_stops() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut g = boot(TempTree::new("q-daemon"), &GuestOptions::new("daemon"), &[]);
    let uptime_before: f64 = guest_sh(&mut g.client, "cut -d' ' -f1 /proc/uptime")
        .1
        .trim()
        .parse()
        .unwrap();
    let status = g.client.ok("query-status", Value::Null);
    let daemon_pid = status["libvirt"]["spawned"]["daemons"][0]["pid"]
        .as_u64()
        .unwrap();
    let qemu_before = qemu_pids("e2e_daemon");
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &daemon_pid.to_string()])
            .status()
            .unwrap()
            .success()
    );

    g.watcher
        .wait_event(STEP, "LIBVIRT_DISCONNECTED", named("LIBVIRT_DISCONNECTED"));
    // query-status answers while libvirt is away, from the launcher's view.
    let during = g.client.ok("query-status", Value::Null);
    // Answered before the daemon's restart, not after it: libvirt is still
    // away in the reply.
    assert_eq!(during["libvirt"]["connected"], false, "{during}");
    assert_eq!(during["domain"]["state"], "Running");
    g.watcher
        .wait_event(STEP, "LIBVIRT_RECONNECTED", named("LIBVIRT_RECONNECTED"));

    let after = wait_status(&mut g.client, STEP, "reconnected", |s| {
        s["libvirt"]["connected"] == true
    });
    assert_eq!(after["libvirt"]["spawned"]["daemons"][0]["restarts"], 1);
    assert_ne!(
        after["libvirt"]["spawned"]["daemons"][0]["pid"]
            .as_u64()
            .unwrap(),
        daemon_pid
    );
    // Events flow again through the new connection.
    g.client.ok("pause", Value::Null);
    g.watcher
        .wait_event(STEP, "Suspended", lifecycle("Suspended", "Paused"));
    g.client.ok("unpause", Value::Null);
    g.watcher
        .wait_event(STEP, "Resumed", lifecycle("Resumed", "Unpaused"));
    // The same QEMU, and the guest kept its uptime: it never stopped.
    assert_eq!(qemu_pids("e2e_daemon"), qemu_before);
    let uptime_after: f64 = guest_sh(&mut g.client, "cut -d' ' -f1 /proc/uptime")
        .1
        .trim()
        .parse()
        .unwrap();
    assert!(
        uptime_after > uptime_before,
        "{uptime_after} <= {uptime_before}"
    );
    g.client.ok("kill", Value::Null);
    assert_eq!(g.launcher.wait_exit(STEP), 0);
}

#[test]
fn runs_on_the_hosts_libvirt_daemon_without_spawning_one() {
    if !require(&[Need::Root, Need::Qemu, Need::TestGuest, Need::HostLibvirtd]) {
        return;
    }
    // The host daemon scripts/setup-host.sh starts (qemu:///system).
    let name = format!("host{}", std::process::id());
    let launcher = Launcher::start_in(
        TempTree::new("q-host"),
        &[
            "--connect",
            "qemu:///system",
            "--force-emulation",
            "--name",
            &name,
            "--namespace",
            "e2e",
        ]
        .map(String::from),
    );
    let mut launcher = launcher;
    launcher.wait_ready(STEP);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let ret = client.request_timeout(
        "sync",
        json!({"vmi": guest_vmi(&GuestOptions::new(&name))}),
        STEP,
    );
    assert!(
        ret.get("return").is_some(),
        "sync on the host daemon failed: {ret}"
    );
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["libvirt"]["uri"], "qemu:///system");
    assert_eq!(status["libvirt"]["spawned"], Value::Null, "{status}");
    // No daemon of its own under the launcher (QEMU is the host daemon's
    // child): none of the processes --spawn-libvirt starts.
    let daemons: Vec<String> = common::processes::descendants(launcher.pid())
        .iter()
        .filter(|p| {
            ["libvirtd", "virtqemud", "virtlogd", "vl-pidns-init"].contains(&p.comm.as_str())
        })
        .map(|p| format!("{} {}", p.pid, p.cmdline))
        .collect();
    assert!(daemons.is_empty(), "the launcher spawned {daemons:?}");
    launcher.signal("TERM");
    watcher.wait_event(STEP, "Stopped", lifecycle("Stopped", "Shutdown"));
    assert_eq!(launcher.wait_exit(STEP), 0);
    wait_no_qemu(&format!("e2e_{name}"), Duration::from_secs(5));
}

/// Destroys and undefines a domain on the host's daemon when dropped, so
/// that a failed test leaves no guest behind on the shared daemon.
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
fn a_new_launcher_adopts_a_guest_left_running_on_the_hosts_daemon_with_its_agent() {
    if !require(&[Need::Root, Need::Qemu, Need::TestGuest, Need::HostLibvirtd]) {
        return;
    }
    // Without --spawn-libvirt a SIGKILLed launcher's guest keeps running on
    // the shared daemon (docs/limits.md). The next launcher on the same
    // directories replaces the stale socket and locks, adopts the running
    // domain and reads its agent channel's state from it: guest commands
    // work at once, without an AGENT_CONNECTED that libvirt will not send
    // again for an agent that connected long ago.
    let name = format!("adopt{}", std::process::id());
    let domain = format!("e2e_{name}");
    let _cleanup = HostDomain(domain.clone());
    let args = [
        "--connect",
        "qemu:///system",
        "--force-emulation",
        "--name",
        &name,
        "--namespace",
        "e2e",
        "--uid",
        "a1d0b7e5-0000-4000-8000-00000000ad07",
    ]
    .map(String::from);
    let mut first = Launcher::start_in(TempTree::new("q-adopt"), &args);
    first.wait_ready(STEP);
    let mut watcher = first.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = first.client();
    let synced = client.request_timeout(
        "sync",
        json!({"vmi": guest_vmi(&GuestOptions::new(&name))}),
        STEP,
    );
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));

    first.signal("KILL");
    assert_eq!(first.wait_exit(STEP), -1);
    let qemu = qemu_pids(&domain);
    assert_eq!(qemu.len(), 1, "the guest did not keep running: {qemu:?}");
    // The same directories for the next launcher.
    let tree = std::mem::replace(&mut first.tree, TempTree::new("q-adopt-gone"));
    assert!(tree.path("share/sockets/launcher-sock").exists());

    let mut second = Launcher::start_in(tree, &args);
    second.wait_ready(STEP);
    let mut client = second.client();
    let status = wait_status(&mut client, STEP, "the adopted guest's agent", |s| {
        s["domain"]["state"] == "Running" && s["agent"]["connected"] == true
    });
    assert_eq!(status["phase"], "Running", "{status}");
    client.ok("guest-ping", Value::Null);
    let (code, out) = guest_sh(&mut client, "echo adopted");
    assert_eq!((code, out.trim()), (0, "adopted"));
    // Its QEMU is still the one the first launcher started.
    assert_eq!(qemu_pids(&domain), qemu);
    // What the first launcher applied is known from its private directory:
    // a change that needs a restart is refused, the same VMI changes nothing.
    let vmi = guest_vmi(&GuestOptions::new(&name));
    let mut other_machine = vmi.clone();
    other_machine["spec"]["domain"]["machine"] = json!({"type": "pc-q35-7.1"});
    let (class, desc) = client.err_class("sync", json!({ "vmi": other_machine }));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with("arguments.vmi.spec.domain.machine.type: changed from"),
        "{desc}"
    );
    let same = client.request_timeout("sync", json!({ "vmi": vmi }), STEP);
    assert_eq!(same["return"]["changes"], json!([]), "{same}");
    client.ok("kill", Value::Null);
    assert_eq!(second.wait_exit(STEP), 0);
    wait_no_qemu(&domain, Duration::from_secs(5));
}

#[test]
fn sigterm_on_a_frozen_paused_guest_still_powers_it_off_cleanly() {
    if !require(REAL_GUEST) {
        return;
    }
    let tree = TempTree::new("q-frozen");
    let disk = tree.path("data.img");
    ext4_image(&disk, 64);
    let mut opts = GuestOptions::new("frozen");
    opts.data_disk = Some(disk);
    let mut g = boot(TempTree::new("q-frozen-run"), &opts, &[]);
    assert_eq!(
        guest_sh(&mut g.client, "echo before > /mnt/data/f && sync").0,
        0
    );
    g.client.ok("freeze", Value::Null);
    g.client.ok("pause", Value::Null);
    g.launcher.signal("TERM");
    // The launcher resumes and thaws the guest, which then powers off by
    // ACPI like any other: no forced stop.
    let stopped = g
        .watcher
        .wait_event(STEP, "Stopped", lifecycle_event("Stopped"));
    assert_eq!(stopped["data"]["detail"], "Shutdown", "{stopped}");
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    let log = g.launcher.log_text();
    assert!(log.contains("resumed the paused guest"), "{log}");
    assert!(log.contains("thawed the guest's filesystems"), "{log}");
}

fn kill_spawned_libvirtd(client: &mut Client) -> u32 {
    let status = client.ok("query-status", Value::Null);
    let daemon = common::daemon::spawned_pid(&status, "libvirtd").expect("libvirtd's pid");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &daemon.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    daemon
}

#[test]
fn an_agent_that_connects_while_libvirt_restarts_is_seen_after_the_reconnect() {
    if !require(REAL_GUEST) {
        return;
    }
    // Issue 9: the agent connected while the launcher was reconnecting, its
    // event went to nobody, and guest commands stayed Unavailable forever.
    let opts = GuestOptions::new("agentreconnect");
    let launcher = start_qemu_launcher(TempTree::new("q-agent-reconnect"), &opts.name, &[]);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    // Right after the start: the guest boots (seconds under emulation)
    // while the daemon is gone and restarted.
    kill_spawned_libvirtd(&mut client);
    watcher.wait_event(STEP, "LIBVIRT_DISCONNECTED", named("LIBVIRT_DISCONNECTED"));
    watcher.wait_event(STEP, "LIBVIRT_RECONNECTED", named("LIBVIRT_RECONNECTED"));
    // Whether the agent came up before the reconnect (then the launcher
    // reads its channel's state) or after it (then libvirt's event comes).
    let connected = watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    eprintln!("AGENT_CONNECTED after the reconnect: {}", connected["data"]);
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["agent"]["connected"], true, "{status}");
    assert_eq!(client.ok("guest-ping", Value::Null), json!({}));
    assert_eq!(guest_sh(&mut client, "echo ok").1, "ok\n");
    client.ok("kill", Value::Null);
    let mut launcher = launcher;
    assert_eq!(launcher.wait_exit(STEP), 0);
}

#[test]
fn a_daemon_that_dies_while_sync_starts_qemu_gets_a_true_reply_and_the_next_sync_works() {
    if !require(REAL_GUEST) {
        return;
    }
    // Issue 9: the reply said "the domain was undefined again" when it was
    // not. The daemon is killed as soon as QEMU appears, while libvirt is
    // still starting the domain.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let opts = GuestOptions::new("startlost");
        let launcher = start_qemu_launcher(TempTree::new("q-start-lost"), &opts.name, &[]);
        let mut watcher = launcher.client();
        watcher.ok(
            "subscribe",
            json!({"events": ["LIBVIRT_DISCONNECTED", "LIBVIRT_RECONNECTED", "DOMAIN_LIFECYCLE"]}),
        );
        let mut client = launcher.client();
        let mut killer = launcher.client();
        let socket = launcher.ready_socket();
        let syncing = std::thread::spawn(move || {
            let mut c = Client::connect(&socket);
            c.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP)
        });
        let deadline = Instant::now() + STEP;
        while qemu_pids("e2e_startlost").is_empty() {
            assert!(Instant::now() < deadline, "QEMU never started");
            std::thread::sleep(Duration::from_millis(2));
        }
        kill_spawned_libvirtd(&mut killer);
        let reply = syncing.join().unwrap();
        if reply.get("return").is_some() {
            // The start finished before the daemon died: the window was
            // missed. Clean up and try again (rare).
            assert!(attempt < 3, "the start always finished first: {reply}");
            watcher.wait_event(STEP, "LIBVIRT_RECONNECTED", named("LIBVIRT_RECONNECTED"));
            client.ok("kill", Value::Null);
            let mut launcher = launcher;
            launcher.wait_exit(STEP);
            continue;
        }
        let error = &reply["error"];
        assert_eq!(error["class"], "Unavailable", "{reply}");
        assert!(
            error["desc"]
                .as_str()
                .unwrap()
                .contains("whether it started is not known"),
            "{reply}"
        );
        assert!(
            !reply.to_string().contains("undefined again"),
            "the reply claims an undo that did not happen: {reply}"
        );
        watcher.wait_event(STEP, "LIBVIRT_RECONNECTED", named("LIBVIRT_RECONNECTED"));
        // What is true now shows in query-status; a sync brings the domain
        // up whatever libvirt made of the interrupted start.
        let status = wait_status(&mut client, STEP, "reconnected", |s| {
            s["libvirt"]["connected"] == true
        });
        eprintln!("after the lost start: {}", status["domain"]);
        let again = client.request_timeout(
            "sync",
            json!({"vmi": guest_vmi(&GuestOptions::new("startlost"))}),
            STEP,
        );
        let ret = again
            .get("return")
            .unwrap_or_else(|| panic!("the next sync failed: {again}"));
        assert_eq!(ret["state"], "Running", "{again}");
        eprintln!("the next sync: {}", ret["action"]);
        client.ok("kill", Value::Null);
        let mut launcher = launcher;
        assert_eq!(launcher.wait_exit(STEP), 0);
        wait_no_qemu("e2e_startlost", Duration::from_secs(10));
        return;
    }
}

/// The pid namespace of process `pid`, as the kernel names it.
fn pid_namespace(pid: u64) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|e| panic!("pid namespace of {pid}: {e}"))
}

#[test]
fn filesystems_share_a_writable_claim_and_a_read_only_config_map_through_virtiofs() {
    if !require(REAL_GUEST) {
        return;
    }
    let tree = TempTree::new("q-vfs");
    // The pod's mounts of the claim and the configMap, where KubeVirt's
    // layout puts them.
    let claim = tree.path("private/vmi-disks/data");
    let config = tree.path("private/config-map/settings");
    std::fs::create_dir_all(&claim).unwrap();
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(claim.join("hello.txt"), "from the host\n").unwrap();
    std::fs::write(config.join("mode"), "blue\n").unwrap();
    let mut vmi = guest_vmi(&GuestOptions::new("vfs"));
    vmi["spec"]["domain"]["devices"]["filesystems"] =
        json!([{"name": "data", "virtiofs": {}}, {"name": "settings", "virtiofs": {}}]);
    vmi["spec"]["volumes"] = json!([
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "settings", "configMap": {"name": "settings"}},
    ]);
    let mut g = boot_vmi(tree, "vfs", vmi, &[]);

    let (code, out) = guest_sh(
        &mut g.client,
        "mkdir -p /mnt/data /mnt/settings && mount -t virtiofs data /mnt/data \
         && mount -t virtiofs settings /mnt/settings && cat /mnt/data/hello.txt /mnt/settings/mode \
         && echo written by the guest > /mnt/data/from-guest.txt",
    );
    assert_eq!((code, out.as_str()), (0, "from the host\nblue\n"));
    assert_eq!(
        std::fs::read_to_string(claim.join("from-guest.txt")).unwrap(),
        "written by the guest\n"
    );
    let (code, out) = guest_sh(
        &mut g.client,
        "echo red > /mnt/settings/mode 2>&1; echo \"rc=$?\"; touch /mnt/settings/new 2>&1; cat /mnt/settings/mode",
    );
    assert!(out.contains("Read-only file system"), "{code} {out}");
    assert!(out.ends_with("blue\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(config.join("mode")).unwrap(),
        "blue\n"
    );
    assert!(!config.join("new").exists());

    // One supervised virtiofsd per filesystem, in the daemons' PID
    // namespace.
    let status = g.client.ok("query-status", Value::Null);
    let shares = status["virtiofs"].as_array().cloned().unwrap_or_default();
    assert_eq!(shares.len(), 2, "{status}");
    assert_eq!(
        (
            &shares[0]["name"],
            &shares[0]["readOnly"],
            &shares[1]["name"],
            &shares[1]["readOnly"]
        ),
        (
            &json!("data"),
            &json!(false),
            &json!("settings"),
            &json!(true)
        ),
        "{status}"
    );
    let init = status["libvirt"]["spawned"]["init_pid"].as_u64().unwrap();
    let settings_pid = shares[1]["pid"].as_u64().unwrap();
    assert_eq!(pid_namespace(settings_pid), pid_namespace(init));
    let data_pid = shares[0]["pid"].as_u64().unwrap();

    // A virtiofsd that dies is started again.
    let ok = std::process::Command::new("kill")
        .args(["-9", &settings_pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let deadline = Instant::now() + STEP;
    loop {
        let status = g.client.ok("query-status", Value::Null);
        let settings = &status["virtiofs"][1];
        if settings["restarts"] == 1 && settings["pid"].as_u64().is_some_and(|p| p != settings_pid)
        {
            break;
        }
        assert!(Instant::now() < deadline, "not restarted: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // They stop with the domain.
    g.client.ok("kill", Value::Null);
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    for pid in [data_pid, settings_pid] {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "virtiofsd {pid} is still running"
        );
    }
}

/// The qemu-pr-helper a LUN with `reservation: true` needs is started as
/// KubeVirt's pr-helper container runs it (`-k <socket>`), listening before
/// the job returns, supervised (restarted when killed) and stopped with
/// its socket removed. QEMU's use of it needs a SCSI LUN with persistent
/// reservations, which this host has not; the converter's unit test checks
/// the domain's `<reservations>`.
#[test]
fn the_pr_helper_of_lun_reservations_is_started_supervised_and_stopped() {
    if !require(&[Need::Root, Need::Program("qemu-pr-helper")]) {
        return;
    }
    use virt_launcher::daemons::virtiofs::{VirtiofsJob, VirtiofsSlot, report_pr_helper, stop};
    let tree = TempTree::new("pr-helper");
    let socket = tree.path("share/daemons/pr/pr-helper.sock");
    let (fatal, _fatal_rx) = crossbeam_channel::unbounded();
    let slot = VirtiofsSlot::default();
    let job = VirtiofsJob {
        shares: Vec::new(),
        pr_helper: Some(socket.clone()),
        daemons: None,
        slot: slot.clone(),
        fatal,
    };
    job.run().expect("start qemu-pr-helper");
    assert!(socket.exists(), "{} is not there", socket.display());
    let first = report_pr_helper(&slot).expect("a running qemu-pr-helper");
    assert_eq!(first["socket"], socket.display().to_string(), "{first}");
    let pid_of = |v: &Value| v["pid"].as_u64().and_then(|p| i32::try_from(p).ok());
    let pid = pid_of(&first).expect("its pid");
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert_eq!(
        cmdline
            .split('\0')
            .filter(|a| !a.is_empty())
            .collect::<Vec<_>>(),
        [
            "/usr/bin/qemu-pr-helper",
            "-k",
            &socket.display().to_string()
        ]
    );
    // Killed, it is started again.
    // SAFETY: kill(2) with a pid and a signal number touches no memory.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = report_pr_helper(&slot).expect("still supervised");
        if now["restarts"].as_u64() == Some(1)
            && pid_of(&now).is_some_and(|p| p != pid)
            && socket.exists()
        {
            break;
        }
        assert!(Instant::now() < deadline, "not restarted: {now}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let restarted = pid_of(&report_pr_helper(&slot).unwrap()).unwrap();
    stop(&slot);
    assert!(report_pr_helper(&slot).is_none());
    assert!(!socket.exists(), "the socket was left behind");
    let gone = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(format!("/proc/{restarted}")).is_ok()
        && std::fs::read_to_string(format!("/proc/{restarted}/stat"))
            .is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(
            Instant::now() < gone,
            "qemu-pr-helper {restarted} still runs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A disk's `blockSize.custom` as the guest sees it: the logical and
/// physical sizes on every stack, and the discard granularity where the
/// daemon's libvirt writes it (9.7 and newer: the newer stack,
/// scripts/newer-stack.sh); an older libvirt gets a sync refused with the
/// field and the version it needs, and nothing is started.
#[test]
fn a_disks_block_sizes_and_discard_granularity_reach_the_guest() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut opts = GuestOptions::new("blksz");
    let granularity = 65536;
    opts.extra_volumes.push((
        json!({"name": "scratch", "disk": {"bus": "virtio"}, "serial": "bsz1",
               "blockSize": {"custom": {"logical": 512, "physical": 4096,
                                        "discardGranularity": granularity}}}),
        json!({"name": "scratch", "emptyDisk": {"capacity": "64Mi"}}),
    ));
    let mut vmi = guest_vmi(&opts);
    let launcher = start_qemu_launcher(TempTree::new("q-blksz"), "blksz", &[]);
    let mut client = launcher.client();
    let daemon = client.ok("query-version", Value::Null)["libvirt"]["daemon"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let version = virt_launcher::hypervisor::state::parse_libvirt_version(&daemon)
        .unwrap_or_else(|| panic!("the daemon's version {daemon:?} does not read"));
    let writes_granularity = version >= 9_007_000;
    eprintln!("libvirt {daemon}: discard_granularity written: {writes_granularity}");
    if !writes_granularity {
        let (class, desc) = client.err_class("sync", json!({ "vmi": vmi }));
        assert_eq!(class, "InvalidArgument", "{desc}");
        assert!(
            desc.contains("spec.domain.devices.disks[0].blockSize.custom.discardGranularity")
                && desc.contains("needs libvirt 9.7.0 or newer")
                && desc.contains(&daemon),
            "{desc}"
        );
        assert_eq!(
            client.ok("query-status", Value::Null)["domain"]["defined"],
            false
        );
        // Without it, the sizes alone reach the guest, which then sees
        // QEMU's default granularity: the logical block size.
        vmi["spec"]["domain"]["devices"]["disks"][0]["blockSize"]["custom"]
            .as_object_mut()
            .expect("blockSize.custom")
            .remove("discardGranularity");
    }
    let mut g = boot_launcher(launcher, vmi);
    let xml = g.client.ok("query-domain", Value::Null)["xml"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let blockio = if writes_granularity {
        format!(
            "<blockio logical_block_size='512' physical_block_size='4096' discard_granularity='{granularity}'/>"
        )
    } else {
        "<blockio logical_block_size='512' physical_block_size='4096'/>".to_string()
    };
    assert!(xml.contains(&blockio), "{blockio} not in {xml}");
    let (code, out) = guest_sh(
        &mut g.client,
        "for d in /sys/block/vd*; do [ \"$(cat $d/serial)\" = bsz1 ] && \
         echo $(cat $d/queue/logical_block_size $d/queue/physical_block_size $d/queue/discard_granularity); \
         done; true",
    );
    assert_eq!(code, 0, "{out}");
    let want = if writes_granularity {
        format!("512 4096 {granularity}")
    } else {
        "512 4096 512".to_string()
    };
    assert_eq!(out.trim(), want, "the guest's view of the disk");
    g.client.ok("kill", Value::Null);
    let _ = g.launcher.wait_exit(STEP);
}
