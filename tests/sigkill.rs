//! Nothing outlives a launcher run with --spawn-libvirt: SIGKILLed at any
//! moment (a running guest, a sync still starting QEMU, a migration on
//! either side), it takes its daemons, virtlogd and QEMU with it, as a
//! dying pod does. Real libvirt, real QEMU, the real test guest.

mod common;

use std::time::{Duration, Instant};

use common::guest::*;
use common::processes::{ProcessTree, daemons_init, launcher_qemu_pids};
use common::*;
use serde_json::{Value, json};

/// What the issue asks: nothing left 5 s after the SIGKILL.
const GONE: Duration = Duration::from_secs(5);

/// SIGKILLs the launcher; returns how long until every process of its
/// tree had exited, and until the last one was reaped too (which depends
/// on the host's init: the daemons were the launcher's children).
fn kill_and_wait_gone(launcher: &mut Launcher, tree: &ProcessTree) -> (Duration, Duration) {
    let sent = Instant::now();
    launcher.signal("KILL");
    let exited = tree.wait_gone(sent, GONE);
    // Killed by the signal: no exit status of its own.
    assert_eq!(launcher.wait_exit(STEP), -1);
    let reaped = tree.wait_reaped(sent, STEP);
    (exited, reaped)
}

/// Types `command` on the serial console at `socket` (again every half
/// second) until a line of output is exactly `expected`, which must not
/// be the command as echoed.
fn assert_serial_console_answers(socket: &std::path::Path, command: &str, expected: &str) {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let deadline = Instant::now() + STEP;
    let mut seen = String::new();
    while Instant::now() < deadline {
        stream
            .write_all(format!("\r{command}\r").as_bytes())
            .unwrap();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if seen.lines().any(|l| l.trim() == expected) {
                return;
            }
        }
    }
    panic!("no {expected:?} on the serial console; it showed: {seen:?}");
}

#[test]
fn a_sigkilled_launcher_takes_its_daemons_and_qemu_with_it() {
    if !require(REAL_GUEST) {
        return;
    }
    for round in 0..3 {
        let opts = GuestOptions::new("killed");
        let (mut launcher, mut client) = if round == 0 {
            // A fully booted guest, its agent connected.
            let g = boot(TempTree::new("k-boot"), &opts, &[]);
            (g.launcher, g.client)
        } else {
            // A guest still booting.
            let launcher = start_qemu_launcher(TempTree::new("k-boot"), "killed", &[]);
            let mut watcher = launcher.client();
            watcher.ok("subscribe", Value::Null);
            let mut client = launcher.client();
            let synced = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
            assert!(synced.get("return").is_some(), "sync failed: {synced}");
            watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
            (launcher, client)
        };
        let status = client.ok("query-status", Value::Null);
        let init = daemons_init(launcher.pid()).expect("no namespace init");
        assert_eq!(status["libvirt"]["spawned"]["init_pid"], init.pid);
        // Everything runs inside the namespace: the daemons and QEMU.
        let daemons = status["libvirt"]["spawned"]["daemons"].as_array().unwrap();
        for daemon in daemons {
            let pid = u32::try_from(daemon["pid"].as_u64().unwrap()).unwrap();
            let process = common::processes::Process::read(pid).unwrap();
            assert_eq!(process.pid_ns, init.pid_ns, "{} outside", daemon["name"]);
        }
        let qemu = launcher_qemu_pids(&launcher, "e2e_killed");
        assert_eq!(qemu.len(), 1, "{qemu:?}");
        if round == 0 {
            // The serial console works from inside the namespaces: a shell
            // on the guest's ttyS0 answers through the launcher's socket.
            let uid = status["uid"].as_str().unwrap();
            let console = launcher.tree.path(&format!("private/{uid}/virt-serial0"));
            assert_serial_console_answers(&console, "echo $((6*7))console", "42console");
        }

        let tree = ProcessTree::of(&launcher, Some("e2e_killed"));
        // The launcher, the init, virtlogd, the libvirt daemon and QEMU.
        assert!(tree.size() >= 5, "only {} processes", tree.size());
        assert_eq!(tree.qemu, qemu);
        let took = kill_and_wait_gone(&mut launcher, &tree);
        eprintln!(
            "round {round}: {} processes exited {:?}, reaped {:?} after SIGKILL",
            tree.size(),
            took.0,
            took.1
        );
        assert!(qemu_pids("e2e_killed").is_empty());
    }
}

#[test]
fn a_launcher_sigkilled_while_a_sync_starts_qemu_leaves_nothing() {
    if !require(REAL_GUEST) {
        return;
    }
    // Killed: as soon as the sync is sent (VMI conversion, disks), as soon
    // as QEMU exists (libvirt still starting it), and a moment later.
    for (round, after_qemu) in [None, Some(Duration::ZERO), Some(Duration::from_millis(300))]
        .into_iter()
        .enumerate()
    {
        let name = format!("starting{round}");
        let domain = format!("e2e_{name}");
        let mut launcher = start_qemu_launcher(TempTree::new("k-sync"), &name, &[]);
        let mut client = launcher.client();
        let sync = json!({"execute": "sync", "id": 1, "arguments": {"vmi": guest_vmi(&GuestOptions::new(&name))}});
        client.send_raw(format!("{sync}\n").as_bytes());
        if let Some(delay) = after_qemu {
            let deadline = Instant::now() + STEP;
            while launcher_qemu_pids(&launcher, &domain).is_empty() {
                assert!(Instant::now() < deadline, "QEMU never started");
                if let Some(reply) = client.read_line(Duration::from_millis(2)) {
                    panic!("the sync ended before QEMU was seen: {reply}");
                }
            }
            std::thread::sleep(delay);
        }
        let tree = ProcessTree::of(&launcher, Some(&domain));
        let replied = client.read_line(Duration::from_millis(1));
        if after_qemu == Some(Duration::ZERO) {
            // The point of this round: QEMU exists, the sync has not
            // finished.
            assert!(
                replied.is_none(),
                "the sync had already finished: {replied:?}"
            );
            assert_eq!(tree.qemu.len(), 1);
        }
        let took = kill_and_wait_gone(&mut launcher, &tree);
        eprintln!(
            "round {round}: {} processes ({} QEMU) exited {:?}, reaped {:?} after SIGKILL",
            tree.size(),
            tree.qemu.len(),
            took.0,
            took.1
        );
        assert!(qemu_pids(&domain).is_empty());
    }
}

#[test]
fn a_launcher_sigkilled_during_a_migration_leaves_nothing_on_either_side() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("kmigrant");
    let domain = "e2e_kmigrant";
    let mut a = boot(TempTree::new("k-mig-a"), &opts, &[]);

    // The target dies mid-migration: its incoming QEMU goes with it, and
    // the guest stays on the source.
    let (mut b, _b_client, _b_watch, target) = prepared_target(TempTree::new("k-mig-b"), &opts);
    a.client.ok(
        "migrate",
        json!({"target": target, "bandwidth_mib_per_s": 1}),
    );
    a.watcher
        .wait_event(STEP, "MIGRATION_PROGRESS", named("MIGRATION_PROGRESS"));
    assert_eq!(launcher_qemu_pids(&b, domain).len(), 1);
    let source_qemu = launcher_qemu_pids(&a.launcher, domain);
    assert_eq!(source_qemu.len(), 1);
    // Both QEMUs carry the domain's name: B's tree is found by its
    // namespace and directories.
    let b_tree = ProcessTree::of(&b, None);
    assert_eq!(b_tree.qemu.len(), 1);
    let took = kill_and_wait_gone(&mut b, &b_tree);
    eprintln!(
        "target: {} processes exited {:?}, reaped {:?} after SIGKILL",
        b_tree.size(),
        took.0,
        took.1
    );
    let failed = a
        .watcher
        .wait_event(STEP, "MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert_eq!(failed["data"]["role"], "source");
    let status = a.client.ok("query-status", Value::Null);
    assert_eq!(
        (status["phase"].as_str(), status["domain"]["state"].as_str()),
        (Some("Running"), Some("Running")),
        "{status}"
    );
    a.client.ok("guest-ping", Value::Null);
    assert_eq!(launcher_qemu_pids(&a.launcher, domain), source_qemu);

    // The source dies mid-migration: its QEMU goes with it; the target
    // gives up, cleans up and exits, leaving nothing either.
    let (mut c, _c_client, mut c_watch, target) = prepared_target(TempTree::new("k-mig-c"), &opts);
    a.client.ok(
        "migrate",
        json!({"target": target, "bandwidth_mib_per_s": 1}),
    );
    a.watcher
        .wait_event(STEP, "MIGRATION_PROGRESS", named("MIGRATION_PROGRESS"));
    assert_eq!(launcher_qemu_pids(&c, domain).len(), 1);
    let a_tree = ProcessTree::of(&a.launcher, None);
    assert_eq!(a_tree.qemu, source_qemu);
    // C exits on its own as soon as A is gone.
    let c_tree = ProcessTree::of(&c, None);
    assert_eq!(c_tree.qemu.len(), 1);
    let took = kill_and_wait_gone(&mut a.launcher, &a_tree);
    eprintln!(
        "source: {} processes exited {:?}, reaped {:?} after SIGKILL",
        a_tree.size(),
        took.0,
        took.1
    );
    let failed = c_watch.wait_event(STEP, "target MIGRATION_FAILED", named("MIGRATION_FAILED"));
    assert_eq!(failed["data"]["role"], "target");
    assert_eq!(c.wait_exit(STEP), 9);
    // A normal exit ends the namespace too.
    c_tree.wait_gone(Instant::now(), GONE);
    assert!(qemu_pids(domain).is_empty());
}

#[test]
fn a_killed_namespace_init_takes_the_daemons_and_the_launcher_exits_1() {
    if !require(REAL_GUEST) {
        return;
    }
    let mut launcher = start_qemu_launcher(TempTree::new("k-init"), "orphaned", &[]);
    let tree = ProcessTree::of(&launcher, Some("e2e_orphaned"));
    let init = daemons_init(launcher.pid()).expect("no namespace init");
    // The daemons see what they need: a /proc of their own namespace
    // (whose PID 1 is the init, and which holds only the namespace's few
    // processes) and the launcher's directories.
    let status = launcher.client().ok("query-status", Value::Null);
    let private = launcher.tree.path("private");
    for daemon in status["libvirt"]["spawned"]["daemons"].as_array().unwrap() {
        let pid = daemon["pid"].as_u64().unwrap();
        let root = std::path::PathBuf::from(format!("/proc/{pid}/root"));
        let pid1 = std::fs::read_to_string(root.join("proc/1/comm")).unwrap();
        assert_eq!(pid1.trim(), "vl-pidns-init", "{}", daemon["name"]);
        let processes = std::fs::read_dir(root.join("proc"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .count();
        assert!(
            (3..10).contains(&processes),
            "{}'s /proc shows {processes} processes",
            daemon["name"]
        );
        let inside = root.join(private.strip_prefix("/").unwrap());
        assert!(
            inside.is_dir(),
            "{} cannot see {}",
            daemon["name"],
            private.display()
        );
    }
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &init.pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // The kernel ends the daemons with their init; the launcher, which
    // cannot work without them, says so and exits.
    assert_eq!(launcher.wait_exit(STEP), 1);
    let log = launcher.log_text();
    assert!(
        log.contains("the init of the daemons' PID namespace")
            && log.contains("ended unexpectedly"),
        "{log}"
    );
    tree.wait_gone(Instant::now(), GONE);
}
