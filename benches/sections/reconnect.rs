//! Reconnecting to libvirt (--spawn-libvirt, as root): how long a lost
//! connection takes to come back, and the launcher's open files and memory
//! before and after 20 reconnects (a leak shows as one more socket each).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::common::daemon::{admin_socket, disconnect_clients, fd_count, rss_kib, spawned_pid};
use super::common::{Client, Launcher, TempTree, named};

const T: Duration = Duration::from_secs(60);

fn wait_reconnected(watcher: &mut Client) -> Instant {
    watcher.wait_event(T, "LIBVIRT_DISCONNECTED", named("LIBVIRT_DISCONNECTED"));
    watcher.wait_event(T, "LIBVIRT_RECONNECTED", named("LIBVIRT_RECONNECTED"));
    Instant::now()
}

pub fn reconnect() {
    println!("libvirt reconnects (--spawn-libvirt, no guest):");
    let tree = TempTree::new("bench-reconnect");
    let admin = admin_socket(&tree.path("private"));
    let args: Vec<String> = [
        "--spawn-libvirt",
        "--name",
        "benchreconnect",
        "--namespace",
        "bench",
        "--qemu-timeout",
        "30m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut launcher = Launcher::start_in(tree, &args);
    launcher.wait_ready(T);
    let pid = launcher.pid();
    let mut watcher = launcher.client();
    watcher.ok(
        "subscribe",
        json!({"events": ["LIBVIRT_DISCONNECTED", "LIBVIRT_RECONNECTED"]}),
    );
    let mut client = launcher.client();
    disconnect_clients(&admin);
    wait_reconnected(&mut watcher);
    let (fds_before, rss_before) = (fd_count(pid), rss_kib(pid));
    let mut samples = Vec::new();
    for _ in 0..20 {
        let dropped = Instant::now();
        disconnect_clients(&admin);
        samples.push(wait_reconnected(&mut watcher) - dropped);
    }
    samples.sort();
    let (fds_after, rss_after) = (fd_count(pid), rss_kib(pid));
    println!(
        "  connection dropped by the daemon -> LIBVIRT_RECONNECTED: p50 {:.1} ms, max {:.1} ms (20 rounds)",
        samples[samples.len() / 2].as_secs_f64() * 1000.0,
        samples[samples.len() - 1].as_secs_f64() * 1000.0
    );
    println!(
        "  after 20 reconnects: open files {fds_before} -> {fds_after}, RSS {:.1} -> {:.1} MiB",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    let status = client.ok("query-status", Value::Null);
    if let Some(daemon) = spawned_pid(&status, "libvirtd") {
        let killed = Instant::now();
        let _ = Command::new("kill")
            .args(["-KILL", &daemon.to_string()])
            .status();
        let back = wait_reconnected(&mut watcher) - killed;
        println!(
            "  libvirtd killed -> restarted by its supervisor (1 s delay) -> LIBVIRT_RECONNECTED: {:.2} s",
            back.as_secs_f64()
        );
    }
    launcher.signal("TERM");
    launcher.wait_exit(T);
}
