//! Reconnecting to libvirt leaks nothing. A launcher with its own libvirt
//! daemon (--spawn-libvirt, as root) loses its connection again and again,
//! by the daemon dropping it and by the daemon being killed and restarted,
//! and reconnects each time; its open files and memory stay flat. Before
//! the fix each reconnect kept the old connection alive (its event
//! callbacks held references on it): one more socket per reconnect.

mod common;

use std::time::{Duration, Instant};

use common::daemon::{admin_socket, disconnect_clients, fd_count, rss_kib, spawned_pid};
use common::*;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

fn reconnected(watcher: &mut Client) {
    watcher.wait_event(T, "LIBVIRT_DISCONNECTED", named("LIBVIRT_DISCONNECTED"));
    watcher.wait_event(T, "LIBVIRT_RECONNECTED", named("LIBVIRT_RECONNECTED"));
}

#[test]
fn twenty_reconnects_and_two_daemon_restarts_leave_files_and_memory_flat() {
    if !require(&[Need::Root, Need::Qemu]) {
        return;
    }
    let tree = TempTree::new("reconnect");
    let admin = admin_socket(&tree.path("private"));
    let args: Vec<String> = [
        "--spawn-libvirt",
        "--name",
        "reconnect",
        "--namespace",
        "e2e",
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

    // One round first, so that what a reconnect allocates once is counted
    // before the baseline.
    assert_eq!(disconnect_clients(&admin), 1, "the launcher's connection");
    reconnected(&mut watcher);
    let (fds_before, rss_before) = (fd_count(pid), rss_kib(pid));

    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(disconnect_clients(&admin), 1);
        reconnected(&mut watcher);
    }
    let per_reconnect = started.elapsed() / 20;
    // Twice a real restart: the daemon is killed; its supervisor starts it
    // again (after 1 s, then 2 s) and the launcher reconnects.
    for restart in 1..=2u64 {
        let status = client.ok("query-status", Value::Null);
        let daemon = spawned_pid(&status, "libvirtd").expect("libvirtd's pid");
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &daemon.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        reconnected(&mut watcher);
        let status = client.ok("query-status", Value::Null);
        assert_eq!(status["libvirt"]["connected"], true);
        assert_eq!(
            status["libvirt"]["spawned"]["daemons"][0]["restarts"],
            restart
        );
    }

    let (fds_after, rss_after) = (fd_count(pid), rss_kib(pid));
    eprintln!(
        "reconnect: {} ms each; fds {fds_before} -> {fds_after}; RSS {rss_before} -> {rss_after} KiB",
        per_reconnect.as_millis()
    );
    // One leaked connection is one socket: 22 reconnects would be 22.
    assert!(
        fds_after <= fds_before + 2,
        "open files grew from {fds_before} to {fds_after} over 22 reconnects"
    );
    assert!(
        rss_after <= rss_before + 2048,
        "RSS grew from {rss_before} to {rss_after} KiB over 22 reconnects"
    );
    // Still a working launcher.
    assert_eq!(client.ok("ping", Value::Null), json!({}));
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(T), 0);
}
