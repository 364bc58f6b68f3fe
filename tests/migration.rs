//! Live migration between two launchers on one machine, each with its own
//! libvirt daemon, as two pods on two nodes would be: the target is
//! prepared, the source migrates, the target takes over.

mod common;

use std::time::{Duration, Instant};

use common::guest::*;
use common::*;
use serde_json::{Value, json};

fn uptime(client: &mut Client) -> f64 {
    guest_sh(client, "cut -d' ' -f1 /proc/uptime")
        .1
        .trim()
        .parse()
        .unwrap()
}

/// A prepared target launcher for `opts`, its watcher, and the address
/// prepare-migration-target returned.
fn prepared_target(tree: TempTree, opts: &GuestOptions) -> (Launcher, Client, Client, Value) {
    let launcher = start_qemu_launcher(tree, &opts.name, &[]);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let ret = client.request_timeout(
        "prepare-migration-target",
        json!({"vmi": guest_vmi(opts)}),
        STEP,
    );
    let target = ret["return"]["target"].clone();
    assert!(target.is_object(), "prepare-migration-target failed: {ret}");
    assert_eq!(
        client.ok("query-status", Value::Null)["phase"],
        "MigrationTarget"
    );
    (launcher, client, watcher, target)
}

#[test]
fn a_running_guest_moves_to_another_launcher_and_keeps_running() {
    let images_dir = TempTree::new("m-live");
    let disk = images_dir.path("data.img");
    ext4_image(&disk, 64);
    let mut opts = GuestOptions::new("mover");
    opts.data_disk = Some(disk);
    let mut a = boot(TempTree::new("m-live-a"), &opts, &[]);
    let mark = format!("moved-{}", std::process::id());
    assert_eq!(
        guest_sh(
            &mut a.client,
            &format!("echo {mark} > /mnt/data/marker && sync")
        )
        .0,
        0
    );
    let uptime_before = uptime(&mut a.client);

    let (mut b, mut b_client, mut b_watch, target) =
        prepared_target(TempTree::new("m-live-b"), &opts);
    let t = Instant::now();
    let started = a.client.ok("migrate", json!({"target": target}));
    assert_eq!(started["started"], true);
    a.watcher
        .wait_event(STEP, "MIGRATION_STARTED", named("MIGRATION_STARTED"));
    // The source's domain stops (migrated) and the migration reports its
    // outcome, in either order.
    let events = a.watcher.wait_events(
        STEP,
        &[
            ("MIGRATION_COMPLETED", &named("MIGRATION_COMPLETED")),
            ("Stopped/Migrated", &lifecycle("Stopped", "Migrated")),
        ],
    );
    let took = t.elapsed();
    assert_eq!(events[0]["data"]["role"], "source");
    assert!(
        events[0]["data"]["downtime_ms"].as_u64().is_some(),
        "{}",
        events[0]
    );
    assert_eq!(a.launcher.wait_exit(STEP), 0);
    assert!(!a.launcher.ready_socket().exists());
    assert!(a.launcher.log_text().contains("the domain migrated away"));

    // B owns the guest now.
    b_watch.wait_event(
        STEP,
        "target MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    let status = wait_status(&mut b_client, STEP, "Running on B", |s| {
        s["phase"] == "Running"
    });
    assert_eq!(status["domain"]["state"], "Running");
    assert_eq!(status["migration"]["phase"], "completed");
    let finalized = b_client.ok("finalize-migration", Value::Null);
    assert_eq!(finalized["finalized"], true);
    wait_status(&mut b_client, STEP, "agent on B", |s| {
        s["agent"]["connected"] == true
    });
    b_client.ok("guest-ping", Value::Null);
    // Same guest: never rebooted, and the data is there.
    let uptime_after = uptime(&mut b_client);
    assert!(
        uptime_after > uptime_before,
        "uptime {uptime_after} <= {uptime_before}: the guest restarted"
    );
    assert_eq!(
        guest_sh(&mut b_client, "cat /mnt/data/marker").1.trim(),
        mark
    );
    eprintln!("migration took {took:?}");

    // SIGTERM on B: the usual graceful stop.
    b.signal("TERM");
    b_watch.wait_event(STEP, "Stopped on B", lifecycle("Stopped", "Shutdown"));
    assert_eq!(b.wait_exit(STEP), 0);
    wait_no_qemu("e2e_mover", Duration::from_secs(5));
}
