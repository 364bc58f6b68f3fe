//! The guest agent on the real test guest: what the launcher reports must
//! be what the guest really has, guest commands must work, and an absent
//! agent must never slow the launcher down.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::guest::*;
use common::*;
use serde_json::{Value, json};

/// `target/test-guest/versions`: what the guest was built from.
fn guest_versions() -> HashMap<String, String> {
    images();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/test-guest/versions");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Polls a guest query until `pred` holds (the poller refreshes each kind
/// on its own interval, starting 10 s after the agent connects).
fn wait_query(
    client: &mut Client,
    command: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + STEP;
    loop {
        let ret = client.ok(command, Value::Null);
        if pred(&ret) {
            return ret;
        }
        assert!(Instant::now() < deadline, "{what}: {ret}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn reports_what_the_guest_really_has_and_runs_guest_commands() {
    if !require(REAL_GUEST) {
        return;
    }
    let versions = guest_versions();
    let tree = TempTree::new("a-info");
    let disk = tree.path("data.img");
    ext4_image(&disk, 64);
    // A file the test writes onto the disk before the guest ever sees it.
    let host_file = tree.path("hello.txt");
    let greeting = format!("written by the test {}\n", std::process::id());
    std::fs::write(&host_file, &greeting).unwrap();
    let ok = Command::new("debugfs")
        .args(["-w", "-R"])
        .arg(format!("write {} hello.txt", host_file.display()))
        .arg(&disk)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "debugfs write failed");

    let mut opts = GuestOptions::new("infoguest");
    opts.data_disk = Some(disk);
    opts.mac = "52:54:00:7e:57:22".into();
    let mut g = boot(TempTree::new("a-info-run"), &opts, &[]);

    // OS, hostname, agent version: exactly what the guest was built with.
    // The poller's first round runs as the agent connects.
    let info = wait_query(&mut g.client, "query-guest-info", "first poll", |r| {
        r["hostname"] != "" && r["guestAgentVersion"] != ""
    });
    assert_eq!(info["hostname"], "infoguest");
    assert_eq!(info["os"]["id"], "tg-guest");
    assert_eq!(
        info["os"]["prettyName"],
        "tg test guest (Debian 12 packages)"
    );
    assert_eq!(
        info["os"]["kernelRelease"].as_str(),
        versions.get("kernel").map(String::as_str)
    );
    assert_eq!(
        info["guestAgentVersion"].as_str(),
        versions.get("qemu_ga").map(String::as_str)
    );
    assert!(
        info["supportedCommands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "guest-exec")
    );
    assert_eq!(info["fsFreezeStatus"], "thawed");
    assert_eq!(info["timezone"], "UTC, 0");
    let os = g.client.ok("query-os-info", Value::Null);
    assert_eq!(os["os"]["machine"], "x86_64");
    assert_eq!(os["hostname"], "infoguest");

    // The NIC: the VMI's MAC, the address the guest got by DHCP, no lo.
    let ifs = wait_query(&mut g.client, "query-interfaces", "DHCP address", |r| {
        r["interfaces"][0]["ipAddress"] == "10.0.2.15"
    });
    let list = ifs["interfaces"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{ifs}");
    assert_eq!(list[0]["interfaceName"], "eth0");
    assert_eq!(list[0]["mac"], "52:54:00:7e:57:22");
    assert_eq!(list[0]["ipAddresses"][0], "10.0.2.15");

    // The mounted data disk, and the console's auto-logged-in root.
    let fs = wait_query(&mut g.client, "query-filesystems", "data disk", |r| {
        r["filesystems"].as_array().is_some_and(|l| !l.is_empty())
    });
    let data = &fs["filesystems"][0];
    assert_eq!(
        (data["mountPoint"].as_str(), data["fileSystemType"].as_str()),
        (Some("/mnt/data"), Some("ext4"))
    );
    assert_eq!(data["disk"][0]["busType"], "virtio");
    // qemu-ga takes disk serials from udev, which this busybox guest lacks;
    // the VMI's serial must still reach the guest's disk.
    assert_eq!(
        guest_sh(&mut g.client, "cat /sys/block/vda/serial").1,
        "data1"
    );
    assert!(data["totalBytes"].as_u64().unwrap() > 40 << 20);
    let users = wait_query(&mut g.client, "query-users", "logged-in root", |r| {
        r["users"]
            .as_array()
            .is_some_and(|l| l.iter().any(|u| u["userName"] == "root"))
    });
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let login = users["users"][0]["loginTime"].as_f64().unwrap();
    assert!(
        (now - login).abs() < 600.0,
        "login time {login} vs now {now}"
    );

    // guest-exec: the file the test wrote; a failing command is a result.
    let (code, out) = guest_sh(&mut g.client, "cat /mnt/data/hello.txt");
    assert_eq!((code, out.as_str()), (0, greeting.as_str()));
    let r = g.client.ok(
        "guest-exec",
        json!({"command": "/bin/sh", "args": ["-c", "echo oops >&2; exit 7"]}),
    );
    assert_eq!(
        (r["exit_code"].as_i64(), r["stderr"].as_str()),
        (Some(7), Some("oops\n"))
    );
    let (class, _) = g
        .client
        .err_class("guest-exec", json!({"command": "/no/such/program"}));
    assert_eq!(class, "InvalidArgument");
    let began = Instant::now();
    let (class, desc) = g.client.err_class(
        "guest-exec",
        json!({"command": "/bin/sleep", "args": ["30"], "timeout_seconds": 2}),
    );
    assert_eq!(class, "Timeout", "{desc}");
    assert!(began.elapsed() < Duration::from_secs(10));

    // freeze / unfreeze, seen in the cache and as events.
    let frozen = g.client.ok("freeze", Value::Null);
    assert!(
        frozen["frozen_filesystems"].as_u64().unwrap() >= 1,
        "{frozen}"
    );
    assert_eq!(
        g.client.ok("query-guest-info", Value::Null)["fsFreezeStatus"],
        "frozen"
    );
    g.watcher.wait_event(STEP, "frozen", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "frozen"
    });
    // The agent refuses most commands while frozen.
    let (class, desc) = g
        .client
        .err_class("guest-exec", json!({"command": "/bin/true"}));
    assert_eq!(class, "InvalidState", "{desc}");
    assert!(desc.contains("unfreeze"), "{desc}");
    assert!(g.client.ok("freeze", Value::Null)["already_frozen"] == true);
    g.client.ok("unfreeze", Value::Null);
    g.watcher.wait_event(STEP, "thawed", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "thawed"
    });
    // Writes work again after the thaw.
    assert_eq!(
        guest_sh(
            &mut g.client,
            "echo x > /mnt/data/after && sync && cat /mnt/data/after"
        )
        .1,
        "x\n"
    );

    // A freeze thaws by itself when its timeout runs out.
    let t = Instant::now();
    g.client
        .ok("freeze", json!({"unfreeze_timeout_seconds": 3}));
    g.watcher.wait_event(STEP, "frozen", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "frozen"
    });
    g.watcher.wait_event(STEP, "auto-thaw", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "thawed"
    });
    assert!(t.elapsed() >= Duration::from_secs(3));
    assert_eq!(
        g.client.ok("query-guest-info", Value::Null)["fsFreezeStatus"],
        "thawed"
    );
    let (code, _) = guest_sh(&mut g.client, "echo y > /mnt/data/after2 && sync");
    assert_eq!(code, 0);
}

#[test]
fn without_its_agent_the_guest_is_unavailable_but_the_launcher_stays_fast() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut g = boot(
        TempTree::new("a-gone"),
        &GuestOptions::new("agentless"),
        &[],
    );
    g.client.ok("guest-ping", json!({"timeout_seconds": 5}));

    // Stop qemu-ga inside the guest for 25 s, through the agent itself.
    let (code, _) = guest_sh(&mut g.client, "/bin/tg-agent-off 25");
    assert_eq!(code, 0);
    let gone = g
        .watcher
        .wait_event(STEP, "AGENT_DISCONNECTED", named("AGENT_DISCONNECTED"));
    assert_eq!(gone["data"]["reason"], "channel event");
    for command in [
        "guest-ping",
        "query-guest-info",
        "query-interfaces",
        "guest-exec",
    ] {
        let args = if command == "guest-exec" {
            json!({"command": "/bin/true"})
        } else {
            Value::Null
        };
        // Refused at once, not after the agent's 5 s timeout (a generous
        // bound: the machine is loaded; the figure is in the benchmarks).
        let t = Instant::now();
        let (class, desc) = g.client.err_class(command, args);
        assert_eq!(class, "Unavailable", "{command}: {desc}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{command} took {:?}",
            t.elapsed()
        );
    }
    let mut slowest = Duration::ZERO;
    for _ in 0..50 {
        let t = Instant::now();
        let status = g.client.ok("query-status", Value::Null);
        slowest = slowest.max(t.elapsed());
        assert_eq!(status["agent"]["connected"], false);
    }
    // Never waits for the agent: far below its 5 s timeout.
    assert!(
        slowest < Duration::from_secs(1),
        "query-status took {slowest:?} without an agent"
    );

    // The agent comes back by itself and everything works again.
    g.watcher
        .wait_event(STEP, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    g.client.ok("guest-ping", Value::Null);
}

/// The guest's wall clock minus its uptime, read together: constant while
/// nothing sets the clock (both stand still while the guest is paused),
/// and moved by exactly what a setting of the wall clock moved it.
fn clock_offset(client: &mut Client) -> f64 {
    // busybox's date has whole seconds only: enough against a pause of 8.
    let (code, out) = guest_sh(client, "date +%s; cut -d' ' -f1 /proc/uptime");
    assert_eq!(code, 0, "{out}");
    let values: Vec<f64> = out
        .split_whitespace()
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{v:?}: {e}")))
        .collect();
    assert_eq!(values.len(), 2, "{out:?}");
    values[0] - values[1]
}

#[test]
fn unpause_sets_the_guest_clock_from_the_host() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut g = boot(TempTree::new("a-clock"), &GuestOptions::new("clock"), &[]);
    let skew = |c: &mut Client| -> f64 {
        let (_, out) = guest_sh(c, "date +%s");
        let host = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        out.trim().parse::<f64>().unwrap() - host
    };
    let skew_before = skew(&mut g.client);
    assert!(skew_before.abs() < 3.0);
    let offset_before = clock_offset(&mut g.client);
    let read_before = Instant::now();
    g.client.ok("pause", Value::Null);
    // While paused, an emulated guest's clocks stand still: after the
    // unpause its wall clock is behind the host's by the pause.
    let pause = 8.0;
    std::thread::sleep(Duration::from_secs_f64(pause));
    g.client.ok("unpause", Value::Null);
    // The launcher sets the clock through the agent right after unpause.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = skew(&mut g.client);
        if s.abs() < 3.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "guest clock still off by {s:.1} s after unpause"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    // The premise, and that the clock was set, not just running: the
    // guest's uptime went on from where the pause left it, and its wall
    // clock was moved forward past its uptime by the pause, give or take
    // the skew it had before (setting it from the host takes that away
    // too: a guest behind the host moves further, one ahead less), and at
    // most the time since the first reading plus that lag. busybox's date
    // has whole seconds, and the skew and both offsets are read with it: a
    // second for each reading. (Had the clock not been set, it would not
    // have moved against the uptime at all.)
    let moved = clock_offset(&mut g.client) - offset_before;
    let since = read_before.elapsed().as_secs_f64();
    let ahead_before = skew_before.max(0.0);
    assert!(
        moved >= pause - ahead_before - 3.0,
        "the guest's wall clock moved {moved:.1} s against its uptime (its skew before: {skew_before:.1} s): it did not stand still for the {pause} s of the pause, or was not set"
    );
    let lag_before = (-skew_before).max(0.0);
    assert!(
        moved <= since + lag_before + 2.0,
        "the guest's wall clock moved {moved:.1} s against its uptime in {since:.1} s (it lagged the host by {lag_before:.1} s before)"
    );
    assert!(
        g.launcher
            .log_text()
            .contains("guest clock set from the host after unpause")
    );
}

/// Runs `virt-launcher ARGS`; returns its status and standard output.
fn subcommand(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(launcher_bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run virt-launcher");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_probe_freeze_unfreeze_and_ctl_subcommands_reach_the_real_agent() {
    if !require(REAL_GUEST) {
        return;
    }
    let tree = TempTree::new("a-sub");
    let disk = tree.path("data.img");
    ext4_image(&disk, 64);
    let mut opts = GuestOptions::new("subcommands");
    opts.data_disk = Some(disk);
    let mut g = boot(TempTree::new("a-sub-run"), &opts, &[]);
    let socket = g.launcher.ready_socket();
    let s = socket.to_str().unwrap();

    // probe: the agent answers, nothing is printed.
    let (code, out, err) = subcommand(&["probe", "--socket", s, "--timeout", "10s"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");

    // freeze: the guest's filesystems are frozen until unfreeze.
    let (code, out, err) = subcommand(&["freeze", "--socket", s, "--unfreeze-timeout", "0"]);
    assert_eq!(code, 0, "{err}");
    let count: u64 = out
        .strip_prefix("froze ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {out:?}"));
    assert!(count >= 1, "{out}");
    assert!(out.ends_with("they stay frozen until unfreeze\n"), "{out}");
    g.watcher.wait_event(STEP, "frozen", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "frozen"
    });
    let (class, _) = g
        .client
        .err_class("guest-exec", json!({"command": "/bin/true"}));
    assert_eq!(class, "InvalidState");
    let (code, out, _) = subcommand(&["freeze", "--socket", s]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("the guest's filesystems were already frozen"),
        "{out}"
    );

    // unfreeze: thawed, writes work again.
    let (code, out, err) = subcommand(&["unfreeze", "--socket", s]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("thawed {count} filesystems in the guest\n"));
    g.watcher.wait_event(STEP, "thawed", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "thawed"
    });

    // ctl with KEY=VALUE arguments runs a program in the guest.
    let (code, out, err) = subcommand(&[
        "ctl",
        "--socket",
        s,
        "guest-exec",
        "command=/bin/sh",
        r#"args=["-c","echo x > /mnt/data/f && cat /mnt/data/f"]"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let ret: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (ret["exit_code"].as_i64(), ret["stdout"].as_str()),
        (Some(0), Some("x\n"))
    );
    g.client.ok("kill", Value::Null);
    assert_eq!(g.launcher.wait_exit(STEP), 0);
}
