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

#[test]
fn a_running_guest_moves_to_another_launcher_and_keeps_running() {
    if !require(REAL_GUEST) {
        return;
    }
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
    wait_status(&mut b_client, STEP, "agent on B", |s| {
        s["agent"]["connected"] == true
    });
    b_client.ok("guest-ping", Value::Null);
    // KubeVirt's LinkRefresh: the NIC's link goes down and up on the new
    // node, which the guest counts as two carrier changes.
    let carrier_changes = |client: &mut Client| -> u64 {
        let (code, out) = guest_sh(
            client,
            "for i in /sys/class/net/*; do [ \"${i##*/}\" = lo ] || cat $i/carrier_changes; done",
        );
        assert_eq!(code, 0, "{out}");
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("carrier_changes: {out:?}"))
    };
    let carrier_before = carrier_changes(&mut b_client);
    let finalized = b_client.ok("finalize-migration", json!({"refresh_links": ["default"]}));
    assert_eq!(finalized["finalized"], true);
    assert_eq!(finalized["links_refreshed"], json!(["default"]));
    assert_eq!(
        carrier_changes(&mut b_client),
        carrier_before + 2,
        "the guest saw its link go down and up"
    );
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

/// A source guest and a prepared target, for the failure cases.
struct Pair {
    a: Booted,
    b: Launcher,
    b_client: Client,
    b_watch: Client,
    target: Value,
    domain: String,
}

fn pair(tag: &str, name: &str) -> Pair {
    let opts = GuestOptions::new(name);
    let a = boot(TempTree::new(&format!("{tag}-a")), &opts, &[]);
    let (b, b_client, b_watch, target) = prepared_target(TempTree::new(&format!("{tag}-b")), &opts);
    Pair {
        a,
        b,
        b_client,
        b_watch,
        target,
        domain: format!("e2e_{name}"),
    }
}

/// The guest still runs on the source and answers its agent.
fn still_on_source(p: &mut Pair) {
    let status = p.a.client.ok("query-status", Value::Null);
    assert_eq!(
        (status["phase"].as_str(), status["domain"]["state"].as_str()),
        (Some("Running"), Some("Running"))
    );
    p.a.client.ok("guest-ping", Value::Null);
}

/// The target gave up: it removed its files and exited 9.
fn target_cleaned_up(p: &mut Pair) {
    let failed = p
        .b_watch
        .wait_event(STEP, "target MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert_eq!(failed["data"]["role"], "target");
    assert_eq!(p.b.wait_exit(STEP), 9);
    assert!(!p.b.ready_socket().exists());
    assert_target_left_no_files(&p.b.tree);
}

/// A target that gave up removed what prepare-migration-target made (the
/// cloud-init ISO of the test guest).
fn assert_target_left_no_files(tree: &TempTree) {
    let cloud_init = tree.path("ephemeral/cloud-init-data");
    let left: Vec<_> = std::fs::read_dir(&cloud_init)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "the target left files behind: {left:?}");
}

#[test]
fn migrate_cancel_keeps_the_guest_on_the_source() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut p = pair("m-cancel", "cancelled");
    // 1 MiB/s: 192 MiB would take minutes.
    p.a.client.ok(
        "migrate",
        json!({"target": p.target, "bandwidth_mib_per_s": 1}),
    );
    let progress =
        p.a.watcher
            .wait_event(STEP, "MIGRATION_PROGRESS", named("MIGRATION_PROGRESS"));
    assert!(
        progress["data"]["data_total"].as_u64().unwrap() > 100 << 20,
        "{progress}"
    );
    let running = p.a.client.ok("query-migration", Value::Null);
    assert_eq!(
        (
            running["migration"]["role"].as_str(),
            running["migration"]["phase"].as_str()
        ),
        (Some("source"), Some("running"))
    );
    assert_eq!(
        p.b_client.ok("query-migration", Value::Null)["migration"]["role"],
        "target"
    );
    // Neither launcher can be replaced in place mid-migration (upgrade):
    // both refuse, and the migration runs on.
    let source_qemu = qemu_pids(&p.domain);
    let (class, desc) = p.a.client.err_class("upgrade", Value::Null);
    assert_eq!(
        (class.as_str(), desc.contains("a migration is running")),
        ("InvalidState", true),
        "{desc}"
    );
    let (class, desc) = p.b_client.err_class("upgrade", Value::Null);
    assert_eq!(class, "InvalidState", "{desc}");
    assert_eq!(
        p.a.client.ok("query-migration", Value::Null)["migration"]["phase"],
        "running"
    );
    assert_eq!(qemu_pids(&p.domain), source_qemu);

    assert_eq!(
        p.a.client.ok("migrate-cancel", Value::Null)["cancelling"],
        true
    );
    let failed =
        p.a.watcher
            .wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert_eq!(failed["data"]["cancelled"], true, "{failed}");
    assert_eq!(
        p.a.client.ok("query-migration", Value::Null)["migration"]["phase"],
        "cancelled"
    );
    still_on_source(&mut p);
    target_cleaned_up(&mut p);
    // The target's QEMU goes; the source's stays.
    let deadline = Instant::now() + Duration::from_secs(10);
    while qemu_pids(&p.domain).len() != 1 {
        assert!(
            Instant::now() < deadline,
            "QEMUs left: {:?}",
            qemu_pids(&p.domain)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_stalled_migration_fails_on_its_progress_timeout() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut p = pair("m-stall", "stalled");
    // A completion budget far beyond the test's length: only the progress
    // timeout can end this migration.
    p.a.client.ok(
        "migrate",
        json!({
            "target": p.target,
            "bandwidth_mib_per_s": 2,
            "progress_timeout": 3,
            "completion_timeout_per_gib": 3000
        }),
    );
    p.a.watcher
        .wait_event(STEP, "MIGRATION_PROGRESS", named("MIGRATION_PROGRESS"));
    // Freeze the incoming QEMU, as a partitioned network would: nothing
    // moves any more.
    // Found in B's own PID namespace: libvirt's pid file holds the pid
    // inside it, and A's QEMU has the same name.
    let target_qemu = common::processes::launcher_qemu_pids(&p.b, &p.domain);
    assert_eq!(target_qemu.len(), 1, "{target_qemu:?}");
    let target_qemu = target_qemu[0].to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &target_qemu])
            .status()
            .unwrap()
            .success()
    );
    // Stalled until the launcher gives up on it, then the network heals
    // (libvirt's peer-to-peer finish waits for the target). How long that
    // takes varies: a mostly empty guest's pages are tiny on the wire, so
    // the socket buffers towards the stopped QEMU absorb a lot of "progress"
    // before the stream really stands still (slower still on a loaded host).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !p
        .a
        .launcher
        .log_text()
        .contains("(progress_timeout 3 s); aborting")
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &target_qemu])
        .status();
    let failed =
        p.a.watcher
            .wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    let reason = failed["data"]["reason"].as_str().unwrap();
    assert!(reason.contains("progress_timeout 3 s"), "{reason}");
    assert_eq!(failed["data"]["cancelled"], false);
    assert_eq!(
        p.a.client.ok("query-migration", Value::Null)["migration"]["phase"],
        "failed"
    );
    still_on_source(&mut p);
    target_cleaned_up(&mut p);
}

#[test]
fn a_slow_migration_fails_on_its_completion_timeout() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut p = pair("m-slow", "slow");
    // 2 s per GiB of ~192 MiB allows under half a second; at 2 MiB/s the
    // copy needs well over a minute.
    p.a.client.ok(
        "migrate",
        json!({"target": p.target, "bandwidth_mib_per_s": 2, "completion_timeout_per_gib": 2}),
    );
    let failed =
        p.a.watcher
            .wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    let reason = failed["data"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("completion_timeout_per_gib 2 s"),
        "{reason}"
    );
    still_on_source(&mut p);
    target_cleaned_up(&mut p);
}

#[test]
fn bad_migrations_are_refused_and_the_guest_keeps_running() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut p = pair("m-bad", "refused");
    // A target nobody listens on.
    let (class, desc) = p.a.client.err_class(
        "migrate",
        json!({"target": {"libvirt_uri": "qemu+unix:///system?socket=/nonexistent/libvirt-sock"}}),
    );
    assert_eq!(class, "InvalidArgument", "{desc}");
    assert!(desc.contains("/nonexistent/libvirt-sock"));
    // Its own daemon.
    let own = p.a.client.ok("query-status", Value::Null)["libvirt"]["uri"].clone();
    let (class, _) =
        p.a.client
            .err_class("migrate", json!({"target": {"libvirt_uri": own}}));
    assert_eq!(class, "InvalidArgument");
    // Unknown option keys.
    let (class, desc) =
        p.a.client
            .err_class("migrate", json!({"target": p.target, "bandwith": 5}));
    assert_eq!(class, "InvalidArgument", "{desc}");
    // Paused.
    p.a.client.ok("pause", Value::Null);
    let (class, desc) = p.a.client.err_class("migrate", json!({"target": p.target}));
    assert_eq!(class, "InvalidState", "{desc}");
    assert!(desc.contains("Paused"), "{desc}");
    p.a.client.ok("unpause", Value::Null);
    // Already migrating (throttled so it lasts), and what is refused meanwhile.
    p.a.client.ok(
        "migrate",
        json!({"target": p.target, "bandwidth_mib_per_s": 1}),
    );
    let (class, desc) = p.a.client.err_class("migrate", json!({"target": p.target}));
    assert_eq!(class, "InvalidState", "{desc}");
    assert!(desc.contains("already running"), "{desc}");
    assert_eq!(p.a.client.err_class("pause", Value::Null).0, "InvalidState");
    assert_eq!(
        p.a.client.err_class("freeze", Value::Null).0,
        "InvalidState"
    );
    // A launcher that already runs a domain cannot be a target.
    let (class, desc) = p.a.client.err_class(
        "prepare-migration-target",
        json!({"vmi": guest_vmi(&GuestOptions::new("refused"))}),
    );
    assert_eq!(class, "InvalidState", "{desc}");
    // Nor can one prepared twice.
    let (class, _) = p.b_client.err_class(
        "prepare-migration-target",
        json!({"vmi": guest_vmi(&GuestOptions::new("refused"))}),
    );
    assert_eq!(class, "InvalidState");
    p.a.client.ok("migrate-cancel", Value::Null);
    p.a.watcher
        .wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    still_on_source(&mut p);
    target_cleaned_up(&mut p);
    // And the guest is fine after all that.
    assert_eq!(guest_sh(&mut p.a.client, "echo ok").1, "ok\n");
}

#[test]
fn a_local_disk_is_copied_by_block_migration() {
    if !require(REAL_GUEST) {
        return;
    }
    // An emptyDisk lives in the launcher's own ephemeral directory, so the
    // target has its own (empty) copy: its contents must travel.
    let mut opts = GuestOptions::new("blocky");
    opts.extra_volumes = vec![(
        json!({"name": "scratch", "disk": {"bus": "virtio"}}),
        json!({"name": "scratch", "emptyDisk": {"capacity": "64Mi"}}),
    )];
    let mut a = boot(TempTree::new("m-block-a"), &opts, &[]);
    let mark = format!("block-{}", std::process::id());
    let (code, _) = guest_sh(
        &mut a.client,
        &format!("printf {mark} | dd of=/dev/vda bs=512 conv=sync,fsync 2>/dev/null"),
    );
    assert_eq!(code, 0);
    let (mut b, mut b_client, mut b_watch, target) =
        prepared_target(TempTree::new("m-block-b"), &opts);
    a.client.ok("migrate", json!({"target": target}));
    a.watcher.wait_events(
        BOOT,
        &[
            ("MIGRATION_COMPLETED", &named("MIGRATION_COMPLETED")),
            ("Stopped/Migrated", &lifecycle("Stopped", "Migrated")),
        ],
    );
    assert_eq!(a.launcher.wait_exit(STEP), 0);
    b_watch.wait_event(
        STEP,
        "target MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    wait_status(&mut b_client, STEP, "agent on B", |s| {
        s["agent"]["connected"] == true
    });
    let (_, out) = guest_sh(
        &mut b_client,
        &format!("dd if=/dev/vda bs=1 count={} 2>/dev/null", mark.len()),
    );
    assert_eq!(out, mark);
    // The disk B runs on is B's own file, not A's.
    let xml = b_client.ok("query-domain", Value::Null)["xml"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        xml.contains(&b.tree.path("ephemeral").display().to_string()),
        "{xml}"
    );
    b_client.ok("kill", Value::Null);
    assert_eq!(b.wait_exit(STEP), 0);
}

#[test]
fn a_target_can_give_up_and_leaves_the_guest_on_the_source() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("giveup");
    let mut a = boot(TempTree::new("m-giveup-a"), &opts, &[]);

    // A target with a short --qemu-timeout that receives a slow migration:
    // once the domain arrives, the timeout no longer applies.
    let (mut b, mut b_client, mut b_watch, target) = prepared_target_with(
        TempTree::new("m-giveup-b"),
        &opts,
        &["--qemu-timeout", "5s"],
    );
    a.client.ok(
        "migrate",
        json!({"target": target, "bandwidth_mib_per_s": 1}),
    );
    b_watch.wait_event(STEP, "target MIGRATION_STARTED", named("MIGRATION_STARTED"));
    std::thread::sleep(Duration::from_secs(7));
    let status = b_client.ok("query-status", Value::Null);
    assert_eq!(
        status["phase"], "MigrationTarget",
        "the target gave up on its own: {status}"
    );
    // The target cancels: its incoming domain goes, the source keeps the guest.
    assert_eq!(
        b_client.ok("migrate-cancel", Value::Null)["cancelling"],
        true
    );
    let failed = b_watch.wait_event(STEP, "target MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert_eq!(failed["data"]["role"], "target");
    assert_eq!(b.wait_exit(STEP), 9);
    let source_failed =
        a.watcher
            .wait_event(STEP, "source MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert_eq!(source_failed["data"]["role"], "source");
    let progress = a.client.ok("query-migration", Value::Null)["migration"]["progress"].clone();
    assert!(
        progress["data_total"].as_u64().unwrap() > 0,
        "last real figures kept: {progress}"
    );
    a.client.ok("guest-ping", Value::Null);

    // SIGTERM on a prepared target: it cleans up and exits 9 too.
    let (mut c, _c_client, mut c_watch, _) = prepared_target(TempTree::new("m-giveup-c"), &opts);
    c.signal("TERM");
    let failed = c_watch.wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert!(
        failed["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("SIGTERM"),
        "{failed}"
    );
    assert_eq!(c.wait_exit(STEP), 9);
    let uid_dirs: Vec<_> = std::fs::read_dir(c.tree.path("private"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("migration.sock").exists())
        .collect();
    assert!(uid_dirs.is_empty(), "migration sockets left behind");

    // SIGTERM on the source during a migration cancels it with that reason.
    let (_d, _d_client, _d_watch, target) = prepared_target(TempTree::new("m-giveup-d"), &opts);
    a.client.ok(
        "migrate",
        json!({"target": target, "bandwidth_mib_per_s": 1}),
    );
    a.watcher
        .wait_event(STEP, "MIGRATION_PROGRESS", named("MIGRATION_PROGRESS"));
    a.launcher.signal("TERM");
    let failed = a
        .watcher
        .wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert!(
        failed["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("SIGTERM"),
        "{failed}"
    );
    a.watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Shutdown"));
    assert_eq!(a.launcher.wait_exit(STEP), 0);
}

#[test]
fn a_prepared_target_that_waits_too_long_cleans_up_and_exits_5() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("waiter");
    let (mut b, _client, mut watch, _) =
        prepared_target_with(TempTree::new("m-wait"), &opts, &["--qemu-timeout", "3s"]);
    let failed = watch.wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert!(
        failed["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("--qemu-timeout"),
        "{failed}"
    );
    assert_eq!(b.wait_exit(STEP), 5);
    assert_target_left_no_files(&b.tree);
}

#[test]
fn a_slow_migration_switches_to_post_copy_when_allowed_and_completes() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("postcopy");
    let mut a = boot(TempTree::new("m-post-a"), &opts, &[]);
    let uptime_before = uptime(&mut a.client);
    let (mut b, mut b_client, mut b_watch, target) =
        prepared_target(TempTree::new("m-post-b"), &opts);
    // Far too slow for its completion budget: instead of aborting, the
    // guest switches to the target and pulls the rest of its memory.
    a.client.ok(
        "migrate",
        json!({"target": target, "bandwidth_mib_per_s": 1, "completion_timeout_per_gib": 2, "allow_post_copy": true}),
    );
    let switched = a.watcher.wait_event(STEP, "post-copy", |e| {
        e["event"] == "MIGRATION_PROGRESS" && e["data"]["mode"] == "post-copy"
    });
    assert!(
        switched["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("completion_timeout_per_gib"),
        "{switched}"
    );
    let events = a.watcher.wait_events(
        BOOT,
        &[
            ("MIGRATION_COMPLETED", &named("MIGRATION_COMPLETED")),
            ("Stopped/Migrated", &lifecycle("Stopped", "Migrated")),
        ],
    );
    assert_eq!(events[0]["data"]["mode"], "post-copy");
    assert_eq!(a.launcher.wait_exit(STEP), 0);
    b_watch.wait_event(
        STEP,
        "target MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    wait_status(&mut b_client, STEP, "agent on B", |s| {
        s["agent"]["connected"] == true
    });
    assert!(uptime(&mut b_client) > uptime_before);
    b_client.ok("kill", Value::Null);
    assert_eq!(b.wait_exit(STEP), 0);
}

/// The other runtime stack's wrapper, `VL_OTHER_STACK` (scripts/newer-stack.sh
/// --tests sets it to itself: libvirt 11.3 and QEMU 10.0 in a root
/// filesystem, beside the host's libvirt 9.0 and QEMU 7.2), or `None`: the
/// tests between the two stacks run only there.
fn other_stack() -> Option<Vec<String>> {
    match std::env::var("VL_OTHER_STACK") {
        Ok(wrapper) if !wrapper.is_empty() => Some(vec![wrapper]),
        _ => {
            eprintln!(
                "the migrations between two runtime stacks run in scripts/newer-stack.sh --tests"
            );
            None
        }
    }
}

/// The test guest's VMI with its machine type pinned, as KubeVirt pins it
/// (spec.domain.machine.type): QEMU 7.2's newest q35, which QEMU 10 still
/// has; and its CPU model when given (spec.domain.cpu.model), else
/// KubeVirt's default, host-model: each QEMU's own, which libvirt 11 with
/// QEMU 10 refuses from QEMU 7.2 ("missing features: pcommit").
fn pinned_vmi(opts: &GuestOptions, cpu_model: Option<&str>) -> Value {
    let mut vmi = guest_vmi(opts);
    vmi["spec"]["domain"]["machine"] = json!({"type": "pc-q35-7.2"});
    if let Some(model) = cpu_model {
        vmi["spec"]["domain"]["cpu"]["model"] = json!(model);
    }
    vmi
}

fn qemu_version(client: &mut Client) -> String {
    let v = client.ok("query-version", Value::Null);
    v["hypervisor"].to_string()
}

#[test]
fn a_guest_moves_from_qemu_7_2_to_qemu_10_on_its_pinned_machine_type() {
    if !require(REAL_GUEST) {
        return;
    }
    let Some(newer) = other_stack() else { return };
    let opts = GuestOptions::new("upstack");
    let vmi = pinned_vmi(&opts, Some("qemu64"));
    // A: the host's stack.
    let a_launcher = start_qemu_launcher(TempTree::new("m-up-a"), &opts.name, &[]);
    let mut a = boot_launcher(a_launcher, vmi.clone());
    assert!(qemu_version(&mut a.client).starts_with("\"QEMU 7.2."));
    let (code, written) = guest_sh(
        &mut a.client,
        "head -c 8388608 /dev/urandom > /root/moving && sha256sum /root/moving | cut -d' ' -f1",
    );
    assert_eq!(code, 0, "{written}");
    let uptime_before = uptime(&mut a.client);

    // B: the newer stack.
    let b_launcher = start_qemu_launcher_wrapped(TempTree::new("m-up-b"), &opts.name, &[], &newer);
    let (mut b, mut b_client, mut b_watch, target) = prepare_target(b_launcher, vmi);
    assert!(qemu_version(&mut b_client).starts_with("\"QEMU 10."));
    assert_eq!(target["stack"]["libvirt"], "11.3.0", "{target}");
    a.client.ok("migrate", json!({"target": target}));
    let events = a.watcher.wait_events(
        STEP,
        &[
            ("MIGRATION_COMPLETED", &named("MIGRATION_COMPLETED")),
            ("Stopped/Migrated", &lifecycle("Stopped", "Migrated")),
        ],
    );
    assert_eq!(events[0]["data"]["role"], "source");
    assert_eq!(a.launcher.wait_exit(STEP), 0);
    b_watch.wait_event(
        STEP,
        "target MIGRATION_COMPLETED",
        named("MIGRATION_COMPLETED"),
    );
    let status = wait_status(&mut b_client, STEP, "Running on B", |s| {
        s["phase"] == "Running" && s["agent"]["connected"] == true
    });
    assert_eq!(status["domain"]["state"], "Running");
    b_client.ok("finalize-migration", json!({}));
    // The same guest, on QEMU 10 now: its memory (a RAM root) and uptime.
    let (code, read) = guest_sh(&mut b_client, "sha256sum /root/moving | cut -d' ' -f1");
    assert_eq!((code, read), (0, written));
    let uptime_after = uptime(&mut b_client);
    assert!(
        uptime_after > uptime_before,
        "uptime {uptime_after} <= {uptime_before}: the guest restarted"
    );
    assert_eq!(qemu_pids("e2e_upstack").len(), 1, "one QEMU runs the guest");

    b_client.ok("kill", Value::Null);
    assert_eq!(b.wait_exit(STEP), 0);
    wait_no_qemu("e2e_upstack", Duration::from_secs(5));
}

#[test]
fn a_guest_on_qemu_10_cannot_move_to_qemu_7_2_and_keeps_running() {
    if !require(REAL_GUEST) {
        return;
    }
    let Some(newer) = other_stack() else { return };
    let opts = GuestOptions::new("downstack");
    // KubeVirt's default CPU model, host-model: QEMU 10's. (With the CPU
    // model pinned to qemu64 too, this guest did move back to QEMU 7.2,
    // which neither QEMU nor libvirt promise.)
    let vmi = pinned_vmi(&opts, None);
    // A: the newer stack.
    let a_launcher =
        start_qemu_launcher_wrapped(TempTree::new("m-down-a"), &opts.name, &[], &newer);
    let mut a = boot_launcher(a_launcher, vmi.clone());
    assert!(qemu_version(&mut a.client).starts_with("\"QEMU 10."));
    // B: the host's stack; its address names its versions.
    let b_launcher = start_qemu_launcher(TempTree::new("m-down-b"), &opts.name, &[]);
    let (mut b, mut b_client, _b_watch, target) = prepare_target(b_launcher, vmi);
    assert_eq!(target["stack"]["libvirt"], "9.0.0", "{target}");
    assert!(
        target["stack"]["hypervisor"]
            .as_str()
            .is_some_and(|v| v.starts_with("QEMU 7.2.")),
        "{target}"
    );
    // First with an address that names no stack, as virt-handler's does
    // (KubeVirt's MigrateVirtualMachine carries none): the source asks the
    // target's daemon itself once libvirt has refused. Then with the
    // target's own address, which names it.
    let mut unnamed = target.clone();
    unnamed
        .as_object_mut()
        .expect("the target's address")
        .remove("stack");
    let mut reason = String::new();
    for address in [unnamed, target] {
        a.client.ok("migrate", json!({ "target": address }));
        let failed = a
            .watcher
            .wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
        reason = failed["data"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // libvirt's own words (the target's libvirt 9.0 does not know a
        // CPU feature of QEMU 10's CPU model), then why.
        assert!(
            reason.starts_with("virDomainMigrateToURI3 failed: ")
                && reason.contains("; the target runs libvirt 9.0.0 with QEMU 7.2.")
                && reason.contains("older than this launcher's libvirt 11.")
                && reason.ends_with(
                    "libvirt and QEMU migrate a guest only to the same or a newer version"
                ),
            "{address}: {failed}"
        );
        assert_eq!(failed["data"]["cancelled"], false);
    }
    let migration = &a.client.ok("query-migration", Value::Null)["migration"];
    assert_eq!(
        (&migration["phase"], &migration["failure"]),
        (&json!("failed"), &json!(reason)),
        "{migration}"
    );
    // The guest runs on, on QEMU 10 only.
    let status = a.client.ok("query-status", Value::Null);
    assert_eq!(
        (status["phase"].as_str(), status["domain"]["state"].as_str()),
        (Some("Running"), Some("Running"))
    );
    a.client.ok("guest-ping", Value::Null);
    assert_eq!(
        qemu_pids("e2e_downstack").len(),
        1,
        "one QEMU runs the guest"
    );
    // The target's libvirt refused before any domain was made there: the
    // target still waits, and gives up when told.
    assert_eq!(
        b_client.ok("query-status", Value::Null)["phase"],
        "MigrationTarget"
    );
    b_client.ok("migrate-cancel", Value::Null);
    assert_eq!(b.wait_exit(STEP), 9);

    a.client.ok("kill", Value::Null);
    assert_eq!(a.launcher.wait_exit(STEP), 0);
    wait_no_qemu("e2e_downstack", Duration::from_secs(5));
}
