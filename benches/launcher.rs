//! Figures, not pass/fail: `scripts/bench.sh` (or `cargo bench --bench
//! launcher`) prints how fast and how small the launcher is.
//!
//! Sections: `test` (libvirt's test driver: start-up, round trips, memory,
//! conversion), `qemu` (the test guest on real libvirt and QEMU: sync,
//! agent, SIGTERM, poll cost), `migration`, `reconnect` (libvirt
//! reconnects under --spawn-libvirt), `exit` (SIGTERM -> exit on the
//! test driver, `kill` -> exit on the real guest), `sigkill` (a killed
//! launcher's tree gone), `hotplug` (sync of a running guest: the
//! unchanged re-sync, a disk plugged in), `nonroot` (start -> ready of
//! --spawn-libvirt as an unprivileged user beside root, and
//! `virt-launcher probe` exec -> exit), `network` (pod networking:
//! set-up time, DHCP answer time, TCP throughput per binding), `vs-go`
//! (issue 16's rows beside KubeVirt's Go launcher), `backends` (the
//! default and the static build side by side), `allocator` (the static
//! build's allocator beside musl's malloc), `kubevirt` (KubeVirt
//! mode through virt-handler's client, beside KubeVirt's launcher),
//! `mixed` (live migration between this launcher and KubeVirt's, each
//! pairing's total time and downtime, across two nodes) and `backup`
//! (full and incremental backups and a memory dump, beside
//! `qemu-img convert`). Pass
//! section names to run only those; `conversion` runs the conversion,
//! domain XML reading and ISO figures alone.

#[path = "sections/backends.rs"]
mod backends;
#[path = "sections/backup.rs"]
mod backup;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "sections/conversion.rs"]
mod conversion;
#[path = "sections/domxml.rs"]
mod domxml;
#[path = "sections/exit.rs"]
mod exit;
#[path = "sections/hotplug.rs"]
mod hotplug;
#[path = "sections/iso9660.rs"]
mod iso9660;
#[path = "sections/kubevirt.rs"]
mod kubevirt;
#[path = "sections/mixed.rs"]
mod mixed;
#[path = "sections/network.rs"]
mod network;
#[path = "sections/nonroot.rs"]
mod nonroot;
#[path = "sections/reconnect.rs"]
mod reconnect;
#[path = "sections/sigkill.rs"]
mod sigkill;
#[path = "sections/upgrade.rs"]
mod upgrade;
#[path = "sections/vs_go.rs"]
mod vs_go;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::guest::*;
use common::*;
use serde_json::{Value, json};
use virt_launcher::hypervisor::libvirt::LibvirtHypervisor;
use virt_launcher::hypervisor::{GuestInfoKind, Hypervisor};

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    println!(
        "virt-launcher {} benchmarks ({} cores)",
        env!("CARGO_PKG_VERSION"),
        cores()
    );
    if run("test") {
        startup();
        round_trips_and_memory();
        slow_subscriber();
        conversion::conversion();
        domxml::reading();
        iso9660::iso9660();
        binary_size();
    }
    // The pure sections alone: `cargo bench --bench launcher -- conversion`.
    if !run("test") && wanted.iter().any(|w| w == "conversion") {
        conversion::conversion();
        domxml::reading();
        iso9660::iso9660();
    }
    if run("qemu") {
        qemu();
    }
    if run("migration") {
        migration();
    }
    if run("reconnect") {
        reconnect::reconnect();
    }
    if run("nonroot") {
        nonroot::nonroot();
    }
    if run("exit") {
        exit::exit_figures();
    }
    if run("sigkill") {
        sigkill::sigkill();
    }
    if run("hotplug") {
        hotplug::hotplug();
    }
    if run("network") {
        network::network();
    }
    if run("vs-go") {
        vs_go::vs_go();
    }
    if run("backends") {
        backends::backends();
    }
    if run("allocator") {
        backends::allocator();
    }
    if run("kubevirt") {
        kubevirt::kubevirt();
    }
    if run("mixed") {
        mixed::mixed();
    }
    if run("backup") {
        backup::backup();
    }
    if run("upgrade") {
        upgrade::upgrade();
    }
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// p50 and p99 of a set of durations, in microseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64, f64) {
    samples.sort();
    // The sample at `percent` of the sorted list (nearest rank).
    let at = |percent: usize| {
        let rank = ((samples.len() - 1) * percent + 50) / 100;
        samples[rank].as_secs_f64() * 1e6
    };
    (at(50), at(99), at(100))
}

fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn startup() {
    let mut samples = Vec::new();
    for _ in 0..30 {
        let tree = TempTree::new("bench-start");
        let started = Instant::now();
        let launcher = Launcher::start_in(
            tree,
            &[
                "--connect",
                "test:///default",
                "--name",
                "b",
                "--namespace",
                "bench",
            ]
            .map(String::from),
        );
        let socket = launcher.ready_socket();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            std::thread::sleep(Duration::from_micros(200));
        }
        samples.push(started.elapsed());
        drop(launcher);
    }
    let (p50, p99, max) = percentiles(samples);
    println!(
        "exec -> ready socket (test:///default, 30 runs): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms   [target <= 25 ms]",
        p50 / 1000.0,
        p99 / 1000.0,
        max / 1000.0
    );
}

fn time_requests(client: &mut Client, command: &str, n: usize) -> Vec<Duration> {
    let line = format!("{{\"execute\":\"{command}\",\"id\":1}}\n");
    (0..n)
        .map(|_| {
            let t = Instant::now();
            client.send_raw(line.as_bytes());
            let reply = client.read_reply(Duration::from_secs(10));
            let took = t.elapsed();
            assert!(reply.get("return").is_some() || reply.get("error").is_some());
            took
        })
        .collect()
}

fn round_trips_and_memory() {
    let mut launcher = Launcher::start_in(
        TempTree::new("bench-rt"),
        &[
            "--connect",
            "test:///default",
            "--vmi",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/vmi.json"),
        ]
        .map(String::from),
    );
    launcher.wait_ready(Duration::from_secs(10));
    let mut client = launcher.client();
    // Let the standalone sync finish first.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.ok("query-status", Value::Null)["domain"]["state"] != "Running" {
        assert!(Instant::now() < deadline);
    }
    let rss_ready = rss_kib(launcher.pid());
    time_requests(&mut client, "ping", 1000); // warm up
    for command in ["ping", "query-status"] {
        let (p50, p99, max) = percentiles(time_requests(&mut client, command, 10_000));
        println!(
            "{command} round trip (10,000 on one connection): p50 {p50:.1} us, p99 {p99:.1} us, max {max:.0} us{}",
            if command == "ping" {
                "   [target p50 <= 30 us]"
            } else {
                ""
            }
        );
    }
    let mut mixed = 0;
    while mixed < 100_000 {
        time_requests(
            &mut client,
            if mixed % 2 == 0 {
                "ping"
            } else {
                "query-status"
            },
            1000,
        );
        mixed += 1000;
    }
    let rss_after = rss_kib(launcher.pid());
    println!(
        "RSS: {:.1} MiB after ready, {:.1} MiB after 100,000 more requests (growth {} KiB)   [target <= 20 MiB, growth <= 1 MiB]",
        rss_ready as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        i128::from(rss_after) - i128::from(rss_ready)
    );
}

/// The manager never waits for a subscriber: 3,000 pause/unpause with a
/// subscriber that reads nothing (tests/daemon.rs checks that each is
/// answered and the subscriber is told what it lost), and a query-status
/// right after.
fn slow_subscriber() {
    let mut launcher = Launcher::start_in(
        TempTree::new("bench-slow"),
        &[
            "--connect",
            "test:///default",
            "--vmi",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/vmi.json"),
        ]
        .map(String::from),
    );
    launcher.wait_ready(Duration::from_secs(10));
    let mut client = launcher.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.ok("query-status", Value::Null)["domain"]["state"] != "Running" {
        assert!(Instant::now() < deadline);
    }
    let mut slow = launcher.client();
    slow.ok("subscribe", json!({"events": ["DOMAIN_LIFECYCLE"]}));
    let started = Instant::now();
    for _ in 0..1500 {
        client.ok("pause", Value::Null);
        client.ok("unpause", Value::Null);
    }
    let all = started.elapsed();
    let t = Instant::now();
    client.ok("query-status", Value::Null);
    let status = t.elapsed();
    println!(
        "3,000 pause/unpause with a subscriber that reads nothing: {:.2} s; query-status right after: {:.0} us   [target < 60 s, < 1 s]",
        all.as_secs_f64(),
        status.as_secs_f64() * 1e6
    );
}

fn binary_size() {
    let bin = Path::new(BIN);
    let stripped =
        std::env::temp_dir().join(format!("virt-launcher-stripped-{}", std::process::id()));
    fs::copy(bin, &stripped).unwrap();
    let ok = Command::new("strip")
        .arg(&stripped)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0) as f64 / (1 << 20) as f64;
    println!(
        "binary: {:.2} MiB as built ({}), {}",
        size(bin),
        bin.display(),
        if ok {
            format!("{:.2} MiB stripped", size(&stripped))
        } else {
            "strip not available".into()
        }
    );
    let _ = fs::remove_file(stripped);
}

fn qemu() {
    let opts = GuestOptions::new("bench");
    let launcher = start_qemu_launcher(TempTree::new("bench-qemu"), "bench", &[]);
    let mut launcher = launcher;
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();

    let t = Instant::now();
    let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    let sync_reply = t.elapsed();
    assert!(synced.get("return").is_some(), "{synced}");
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    let running = t.elapsed();
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    let agent = t.elapsed();

    // The exact XML the launcher defined, for the baseline below.
    let status = client.ok("query-status", Value::Null);
    let uri = status["libvirt"]["uri"].as_str().unwrap().to_string();
    let conn = virt::connect::Connect::open(Some(&uri)).unwrap();
    let defined_xml = conn
        .lookup_domain_by_name("e2e_bench")
        .unwrap()
        .xml_desc(virt::sys::VIR_DOMAIN_XML_INACTIVE)
        .unwrap();
    println!(
        "sync -> AGENT_CONNECTED: {:.1} s (plain emulation)",
        agent.as_secs_f64()
    );

    // What one full poll round costs, through the same calls the poller
    // makes (on a connection of this process, which needs libvirt's event
    // implementation registered, as the launcher does at start-up).
    virt_launcher::hypervisor::event_loop::register().unwrap();
    let (tx, _rx) = crossbeam_channel::unbounded();
    let hv: Arc<dyn Hypervisor> =
        Arc::new(LibvirtHypervisor::connect(&uri, "e2e_bench", tx.into()).unwrap());
    hv.set_agent_timeout("e2e_bench", Duration::from_secs(5))
        .unwrap();
    let round = || {
        let t = Instant::now();
        for cmd in [
            r#"{"execute":"guest-info"}"#,
            r#"{"execute":"guest-get-fsinfo"}"#,
            r#"{"execute":"guest-fsfreeze-status"}"#,
        ] {
            hv.agent_command("e2e_bench", cmd, Duration::from_secs(5))
                .unwrap();
        }
        hv.guest_info(
            "e2e_bench",
            &[
                GuestInfoKind::Hostname,
                GuestInfoKind::Os,
                GuestInfoKind::Timezone,
                GuestInfoKind::Interfaces,
            ],
        )
        .unwrap();
        hv.guest_info("e2e_bench", &[GuestInfoKind::Users]).unwrap();
        t.elapsed()
    };
    let rounds: Vec<Duration> = (0..20).map(|_| round()).collect();
    let (p50, _, max) = percentiles(rounds);
    println!(
        "one full agent poll round (5 calls): p50 {:.1} ms, max {:.1} ms",
        p50 / 1000.0,
        max / 1000.0
    );

    // query-guest-info is served from the cache.
    let deadline = Instant::now() + STEP;
    while client.ok("query-guest-info", Value::Null)["hostname"] == "" {
        assert!(Instant::now() < deadline);
    }
    let (p50, p99, _) = percentiles(time_requests(&mut client, "query-guest-info", 2000));
    println!(
        "query-guest-info round trip (2,000): p50 {p50:.1} us, p99 {p99:.1} us   [target p50 <= 50 us]"
    );
    println!(
        "launcher RSS with a running guest: {:.1} MiB",
        rss_kib(launcher.pid()) as f64 / 1024.0
    );

    let t = Instant::now();
    launcher.signal("TERM");
    let started = watcher.wait_event(STEP, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    let stopped = watcher.wait_event(STEP, "Stopped", lifecycle("Stopped", "Shutdown"));
    let code = launcher.wait_exit(STEP);
    println!(
        "SIGTERM -> exit (cooperative guest, ACPI): {:.2} s, status {code}; SHUTDOWN_STARTED -> Stopped (Shutdown) {:.2} s   [target < 20 s]",
        t.elapsed().as_secs_f64(),
        event_seconds(&stopped) - event_seconds(&started)
    );
    drop(conn);

    // Baseline: the same XML created directly on a fresh daemon of the
    // same kind (a second launcher's, which runs no domain itself).
    let other = start_qemu_launcher(TempTree::new("bench-bare"), "baseline", &[]);
    let mut other_client = other.client();
    let other_uri = other_client.ok("query-status", Value::Null)["libvirt"]["uri"]
        .as_str()
        .unwrap()
        .to_string();
    let conn = virt::connect::Connect::open(Some(&other_uri)).unwrap();
    let bare_xml = defined_xml.replace("<name>e2e_bench</name>", "<name>e2e_bare</name>");
    let t = Instant::now();
    let dom = conn.create_domain_xml(&bare_xml, 0).unwrap();
    let bare = t.elapsed();
    dom.destroy().unwrap();
    println!(
        "sync -> Running: {:.0} ms (sync reply {:.0} ms); bare virDomainCreateXML of the same XML: {:.0} ms; ratio {:.2}   [target <= 1.2]",
        running.as_secs_f64() * 1e3,
        sync_reply.as_secs_f64() * 1e3,
        bare.as_secs_f64() * 1e3,
        running.as_secs_f64() / bare.as_secs_f64()
    );
}

/// An event's timestamp, in seconds since the epoch.
pub fn event_seconds(e: &Value) -> f64 {
    e["timestamp"]["seconds"].as_f64().unwrap_or(0.0)
        + e["timestamp"]["microseconds"].as_f64().unwrap_or(0.0) / 1e6
}

/// Moves one guest across three fresh launchers and times each hop.
fn migration() {
    let opts = GuestOptions::new("hopper");
    let mut current = boot(TempTree::new("bench-mig-0"), &opts, &[]);
    let mut rows = Vec::new();
    for hop in 1..=3 {
        let target_launcher =
            start_qemu_launcher(TempTree::new(&format!("bench-mig-{hop}")), "hopper", &[]);
        let mut watcher = target_launcher.client();
        watcher.ok("subscribe", Value::Null);
        let mut client = target_launcher.client();
        let prepared = client.request_timeout(
            "prepare-migration-target",
            json!({"vmi": guest_vmi(&opts)}),
            STEP,
        );
        let target = prepared["return"]["target"].clone();
        let t = Instant::now();
        let sent = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        current.client.ok("migrate", json!({"target": target}));
        // The guest runs on the target when the target says so.
        let arrived = watcher.wait_event(
            STEP,
            "target MIGRATION_COMPLETED",
            named("MIGRATION_COMPLETED"),
        );
        let ts = &arrived["timestamp"];
        let on_target =
            ts["seconds"].as_f64().unwrap() + ts["microseconds"].as_f64().unwrap() / 1e6 - sent;
        // This launcher was the previous hop's target: its own
        // (role target) completion is already in its event stream.
        let done = current
            .watcher
            .wait_event(STEP, "MIGRATION_COMPLETED", |e| {
                e["event"] == "MIGRATION_COMPLETED" && e["data"]["role"] == "source"
            });
        let total = t.elapsed();
        let completed_at = Instant::now();
        // B answers the guest agent.
        let agent = loop {
            let reply = client.request("guest-ping", json!({"timeout_seconds": 5}));
            if reply.get("return").is_some() {
                break completed_at.elapsed();
            }
            assert!(completed_at.elapsed() < STEP, "{reply}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let downtime = done["data"]["downtime_ms"].as_u64().unwrap_or(0);
        let libvirt_ms = done["data"]["time_elapsed_ms"].as_u64().unwrap_or(0);
        rows.push((on_target, total, libvirt_ms, downtime, agent));
        let _ = current.launcher.wait_exit(STEP);
        current = Booted {
            launcher: target_launcher,
            client,
            watcher,
            booted_at: Instant::now(),
        };
    }
    println!(
        "live migration of the test guest (192 MiB, plain emulation, same host, unix sockets):"
    );
    for (i, (on_target, total, libvirt_ms, downtime, agent)) in rows.iter().enumerate() {
        println!(
            "  hop {}: migrate -> guest running on the target {:.0} ms; -> source done (MIGRATION_COMPLETED) {:.0} ms (libvirt job {} ms); downtime {} ms; MIGRATION_COMPLETED -> target answers guest-ping {:.0} ms",
            i + 1,
            on_target * 1e3,
            total.as_secs_f64() * 1e3,
            libvirt_ms,
            downtime,
            agent.as_secs_f64() * 1e3
        );
    }
    current.client.ok("kill", Value::Null);
    let _ = current.launcher.wait_exit(STEP);
}
