//! Non-root mode: each test creates an unprivileged user (and removes it)
//! and runs the launcher as that user, with no capabilities, with its own
//! libvirt daemons in session mode (--spawn-libvirt): the real test guest
//! boots under QEMU running as that user, with its agent, pause, graceful
//! SIGTERM, grace expiry, a SIGKILL that leaves nothing behind and a
//! migration between two non-root launchers; another user cannot reach
//! its sockets; what needs root is refused at start or at sync, before
//! anything happens.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::{Duration, Instant};

use common::guest::*;
use common::processes::ProcessTree;
use common::unprivileged::{TestUser, process_uid};
use common::*;
use serde_json::{Value, json};

fn event_time(e: &Value) -> f64 {
    e["timestamp"]["seconds"].as_f64().unwrap()
        + e["timestamp"]["microseconds"].as_f64().unwrap() / 1e6
}

/// The effective capabilities of process `pid`, as /proc shows them.
fn effective_caps(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// An ext4 image for a data disk, owned by `user`.
fn data_disk(user: &TestUser, tree: &TempTree) -> std::path::PathBuf {
    let disk = tree.path("data.img");
    ext4_image(&disk, 64);
    user.give(&tree.root);
    disk
}

#[test]
fn boots_as_an_unprivileged_user_with_its_agent_pause_and_the_subcommands() {
    if !require(REAL_GUEST) {
        return;
    }
    let user = TestUser::create("b");
    let images_dir = TempTree::new("nr-boot-disk");
    let mut opts = GuestOptions::new("nrboot");
    opts.data_disk = Some(data_disk(&user, &images_dir));
    let mut g = boot_as(Some(&user), TempTree::new("nr-boot"), &opts, &[]);

    // The launcher, its daemons, their init and QEMU all run as the user,
    // and QEMU has no capability.
    let status = g.client.ok("query-status", Value::Null);
    let spawned = &status["libvirt"]["spawned"];
    assert_eq!(spawned["mode"], "session", "{status}");
    let uri = status["libvirt"]["uri"].as_str().unwrap();
    assert!(uri.starts_with("qemu+unix:///session?socket="), "{uri}");
    let qemu = qemu_pids("e2e_nrboot");
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    let mut pids = vec![
        g.launcher.pid(),
        u32::try_from(spawned["init_pid"].as_u64().unwrap()).unwrap(),
        qemu[0],
    ];
    for name in ["libvirtd", "virtlogd"] {
        pids.push(common::daemon::spawned_pid(&status, name).expect(name));
    }
    for pid in &pids {
        assert_eq!(process_uid(*pid), Some(user.uid), "process {pid}");
    }
    assert_eq!(effective_caps(qemu[0]), "0000000000000000");

    // The socket is the user's, mode 0600; so are the directories.
    let socket = g.launcher.ready_socket();
    let meta = fs::metadata(&socket).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (user.uid, 0o600));
    for dir in [
        "share/sockets",
        "private",
        "private/libvirt",
        "ephemeral/cloud-init-data",
    ] {
        let meta = fs::metadata(g.launcher.tree.path(dir)).unwrap();
        assert_eq!(meta.uid(), user.uid, "{dir}");
    }
    let runtime = fs::metadata(g.launcher.tree.path("private/libvirt")).unwrap();
    assert_eq!(runtime.permissions().mode() & 0o777, 0o700);

    // The agent works; pause as usual.
    assert_eq!(status["agent"]["connected"], true);
    assert_eq!(guest_sh(&mut g.client, "echo alive").1, "alive\n");
    assert_eq!(g.client.ok("pause", Value::Null)["state"], "Paused");
    g.watcher
        .wait_event(STEP, "Suspended", lifecycle("Suspended", "Paused"));

    // A daemon that dies is restarted, as the user, and the guest lives on.
    // It is killed while the guest is paused: the agent poller is stopped
    // then, so the daemon is not in the middle of reading an agent reply.
    // (Killed halfway through one, the reply's tail stays in the channel;
    // libvirt's next daemon cannot parse it and keeps the agent marked
    // broken: a libvirt limit, not the launcher's, and the test's kill
    // right after an unpause's burst of polls hit it once.)
    let libvirtd = common::daemon::spawned_pid(&status, "libvirtd").unwrap();
    let killed = Command::new("kill")
        .args(["-KILL", &libvirtd.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    g.watcher
        .wait_event(STEP, "LIBVIRT_DISCONNECTED", named("LIBVIRT_DISCONNECTED"));
    g.watcher
        .wait_event(STEP, "LIBVIRT_RECONNECTED", named("LIBVIRT_RECONNECTED"));
    let after = wait_status(&mut g.client, STEP, "reconnected", |s| {
        s["libvirt"]["connected"] == true
    });
    let restarted = common::daemon::spawned_pid(&after, "libvirtd").unwrap();
    assert_ne!(restarted, libvirtd);
    assert_eq!(process_uid(restarted), Some(user.uid));
    assert_eq!(qemu_pids("e2e_nrboot"), qemu);
    assert_eq!(g.client.ok("unpause", Value::Null)["state"], "Running");
    g.watcher
        .wait_event(STEP, "Resumed", lifecycle("Resumed", "Unpaused"));
    // The agent's channel comes back with the new daemon (its state is
    // read again after the reconnect): the probe below needs it.
    wait_status(&mut g.client, STEP, "agent connected again", |s| {
        s["agent"]["connected"] == true
    });

    // The subcommands, run as the same user.
    let s = socket.to_str().unwrap();
    let (code, out, err) = user.virt_launcher(&["probe", "--socket", s, "--timeout", "10s"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let (code, out, err) = user.virt_launcher(&["freeze", "--socket", s]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("froze 1 filesystems"), "{out}");
    g.watcher.wait_event(STEP, "frozen", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "frozen"
    });
    let (code, out, err) = user.virt_launcher(&["unfreeze", "--socket", s]);
    assert_eq!(
        (code, out.as_str()),
        (0, "thawed 1 filesystems in the guest\n"),
        "{err}"
    );
    assert_eq!(
        guest_sh(
            &mut g.client,
            "echo x > /mnt/data/f && sync && cat /mnt/data/f"
        )
        .1,
        "x\n"
    );

    g.client.ok("kill", Value::Null);
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    wait_no_qemu("e2e_nrboot", Duration::from_secs(10));
}

#[test]
fn sigterm_powers_the_guest_off_and_no_process_of_the_user_is_left() {
    if !require(REAL_GUEST) {
        return;
    }
    let user = TestUser::create("t");
    let mut g = boot_as(
        Some(&user),
        TempTree::new("nr-term"),
        &GuestOptions::new("nrterm"),
        &[],
    );
    g.launcher.signal("TERM");
    g.watcher
        .wait_event(STEP, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    // Detail Shutdown: the guest powered itself off by ACPI (a forced stop
    // is Destroyed). How long it took: scripts/bench.sh nonroot.
    g.watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Shutdown"));
    assert_eq!(g.launcher.wait_exit(STEP), 0);
    assert!(!g.launcher.ready_socket().exists());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !user.live_processes().is_empty() {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            user.live_processes()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_guest_that_ignores_acpi_is_forced_off_when_the_grace_period_ends() {
    if !require(REAL_GUEST) {
        return;
    }
    let user = TestUser::create("g");
    let mut opts = GuestOptions::new("nrstubborn");
    opts.ignore_acpi = true;
    let mut g = boot_as(
        Some(&user),
        TempTree::new("nr-grace"),
        &opts,
        &["--grace-period-seconds", "8"],
    );
    g.launcher.signal("TERM");
    let started = g
        .watcher
        .wait_event(STEP, "SHUTDOWN_STARTED", named("SHUTDOWN_STARTED"));
    let expired = g.watcher.wait_event(
        STEP,
        "SHUTDOWN_GRACE_EXPIRED",
        named("SHUTDOWN_GRACE_EXPIRED"),
    );
    let waited = event_time(&expired) - event_time(&started);
    assert!(
        (7.0..=10.0).contains(&waited),
        "forced off after {waited:.2} s"
    );
    g.watcher
        .wait_event(STEP, "Stopped", lifecycle("Stopped", "Destroyed"));
    assert_eq!(g.launcher.wait_exit(STEP), 7);
    wait_no_qemu("e2e_nrstubborn", Duration::from_secs(10));
}

#[test]
fn a_sigkilled_nonroot_launcher_takes_its_daemons_and_qemu_with_it() {
    if !require(REAL_GUEST) {
        return;
    }
    let user = TestUser::create("k");
    let mut g = boot_as(
        Some(&user),
        TempTree::new("nr-kill"),
        &GuestOptions::new("nrkill"),
        &[],
    );
    let tree = ProcessTree::of(&g.launcher, Some("e2e_nrkill"));
    assert_eq!(tree.qemu.len(), 1);
    assert!(tree.size() >= 5, "launcher, init, virtlogd, libvirtd, QEMU");
    let killed = Instant::now();
    g.launcher.signal("KILL");
    g.launcher.wait_exit(STEP);
    let took = tree.wait_gone(killed, Duration::from_secs(30));
    eprintln!("everything gone {took:?} after SIGKILL");
    assert!(
        user.live_processes().is_empty(),
        "{:?}",
        user.live_processes()
    );
}

#[test]
fn a_guest_migrates_between_two_nonroot_launchers() {
    if !require(REAL_GUEST) {
        return;
    }
    let user = TestUser::create("m");
    let opts = GuestOptions::new("nrmover");
    let mut a = boot_as(Some(&user), TempTree::new("nr-mig-a"), &opts, &[]);
    let uptime = |c: &mut Client| -> f64 {
        guest_sh(c, "cut -d' ' -f1 /proc/uptime")
            .1
            .trim()
            .parse()
            .unwrap()
    };
    let before = uptime(&mut a.client);
    let (mut b, mut b_client, mut b_watch, target) =
        prepared_target_as(Some(&user), TempTree::new("nr-mig-b"), &opts, &[]);
    assert!(
        target["libvirt_uri"]
            .as_str()
            .unwrap()
            .starts_with("qemu+unix:///session?socket="),
        "{target}"
    );
    assert_eq!(
        a.client.ok("migrate", json!({"target": target}))["started"],
        true
    );
    a.watcher.wait_events(
        STEP,
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
    wait_status(&mut b_client, STEP, "Running on B", |s| {
        s["phase"] == "Running"
    });
    b_client.ok("finalize-migration", Value::Null);
    wait_status(&mut b_client, STEP, "agent on B", |s| {
        s["agent"]["connected"] == true
    });
    let after = uptime(&mut b_client);
    assert!(
        after > before,
        "uptime {after} <= {before}: the guest restarted"
    );
    // B's QEMU runs as the user too.
    let qemu = qemu_pids("e2e_nrmover");
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    assert_eq!(process_uid(qemu[0]), Some(user.uid));
    b.signal("TERM");
    b_watch.wait_event(STEP, "Stopped on B", lifecycle("Stopped", "Shutdown"));
    assert_eq!(b.wait_exit(STEP), 0);
    wait_no_qemu("e2e_nrmover", Duration::from_secs(10));
}

#[test]
fn another_unprivileged_user_cannot_connect_to_the_sockets() {
    if !require(&[Need::Root, Need::Qemu]) {
        return;
    }
    let owner = TestUser::create("o");
    let other = TestUser::create("x");
    let mut launcher = Launcher::start_as(
        &owner,
        TempTree::new("nr-sock"),
        &["--spawn-libvirt", "--name", "nrsock", "--namespace", "e2e"].map(String::from),
    );
    launcher.wait_ready(STEP);
    let socket = launcher.ready_socket();
    let s = socket.to_str().unwrap();
    // The owner gets in; another user is refused, with the reason.
    let (code, out, err) = owner.virt_launcher(&["ctl", "--socket", s, "--raw", "ping"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "{\"return\":{},\"id\":1}\n"),
        "{err}"
    );
    let (code, _, err) = other.virt_launcher(&["ctl", "--socket", s, "ping"]);
    assert_eq!(code, 1);
    assert!(err.contains("permission denied"), "{err}");
    let (code, _, err) = other.virt_launcher(&["probe", "--socket", s]);
    assert_eq!(code, 1);
    assert!(err.contains("permission denied"), "{err}");
    // Nor can it reach the launcher's libvirt daemon.
    let status = launcher.client().ok("query-status", Value::Null);
    let uri = status["libvirt"]["uri"].as_str().unwrap().to_string();
    let denied = other
        .command("virsh")
        .args(["-c", &uri, "list"])
        .output()
        .unwrap();
    assert!(!denied.status.success());
    let said = String::from_utf8_lossy(&denied.stderr);
    assert!(said.contains("Permission denied"), "{said}");
    let allowed = owner
        .command("virsh")
        .args(["-c", &uri, "list"])
        .output()
        .unwrap();
    assert!(allowed.status.success(), "{allowed:?}");
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
}

#[test]
fn what_needs_root_is_refused_at_start() {
    if !require(&[Need::Root]) {
        return;
    }
    let user = TestUser::create("r");
    // --pod-network=setup: a usage error, before any directory is made.
    let tree = TempTree::new("nr-setup");
    user.give(&tree.root);
    let mut argv: Vec<String> = dir_flags(&tree);
    argv.extend(
        [
            "--spawn-libvirt",
            "--pod-network=setup",
            "--name",
            "x",
            "--namespace",
            "e2e",
        ]
        .map(String::from),
    );
    let out = user.command(launcher_bin()).args(&argv).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--pod-network=setup: a non-root launcher"),
        "{err}"
    );
    assert!(!tree.path("share").exists());

    // A host without the mount points the daemons' directories go over
    // (here: a private mount namespace whose /run is empty): exit 4,
    // naming what to create, and no daemon started.
    let tree = TempTree::new("nr-mounts");
    user.give(&tree.root);
    let mut script = format!(
        "mount -t tmpfs vl-empty-run /run && exec setpriv --reuid={} --regid={} --clear-groups -- {}",
        user.uid,
        user.gid,
        launcher_bin().display()
    );
    for arg in dir_flags(&tree)
        .into_iter()
        .chain(["--spawn-libvirt", "--name", "x", "--namespace", "e2e"].map(String::from))
    {
        script.push(' ');
        script.push_str(&arg);
    }
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("/run/libvirt is missing"), "{err}");
    assert!(err.contains("mkdir -p /run/libvirt"), "{err}");
    assert!(user.live_processes().is_empty());
}

/// A non-root launcher with its daemons, no guest yet, and a client.
fn nonroot_launcher(user: &TestUser, tag: &str, name: &str, extra: &[&str]) -> (Launcher, Client) {
    let launcher = start_qemu_launcher_as(Some(user), TempTree::new(tag), name, extra);
    let client = launcher.client();
    (launcher, client)
}

#[test]
fn what_needs_root_is_refused_at_sync_before_anything_happens() {
    if !require(REAL_GUEST) {
        return;
    }
    let user = TestUser::create("s");

    // A disk the user may not write: refused, nothing defined, no file
    // left behind, and the launcher goes on.
    let images_dir = TempTree::new("nr-disk");
    let disk = images_dir.path("root-only.img");
    ext4_image(&disk, 16);
    fs::set_permissions(&disk, fs::Permissions::from_mode(0o600)).unwrap();
    let mut opts = GuestOptions::new("nrdisk");
    opts.data_disk = Some(disk.clone());
    let (mut launcher, mut client) = nonroot_launcher(&user, "nr-sync", "nrdisk", &[]);
    let reply = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    let error = &reply["error"];
    assert_eq!(error["class"], "Unavailable", "{reply}");
    let desc = error["desc"].as_str().unwrap();
    assert!(
        desc.contains(&format!(
            "{} (read-write: permission denied)",
            disk.display()
        )),
        "{desc}"
    );
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["defined"], false, "{status}");
    assert!(qemu_pids("e2e_nrdisk").is_empty());
    let left: Vec<_> = fs::read_dir(launcher.tree.path("ephemeral/cloud-init-data"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "files left behind: {left:?}");
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
}

/// Whether `user` can open /dev/kvm for reading and writing.
fn kvm_usable_by(user: &TestUser) -> bool {
    user.command("sh")
        .args(["-c", "test -r /dev/kvm && test -w /dev/kvm"])
        .status()
        .unwrap()
        .success()
}

/// A launcher with its own daemons as `user`, without --force-emulation
/// (KVM where it works), and its reply to a sync of the test guest.
fn sync_without_emulation_flags(user: &TestUser, tag: &str) -> (Launcher, Client, Value) {
    let mut launcher = Launcher::start_as(
        user,
        TempTree::new(tag),
        &["--spawn-libvirt", "--name", "nrkvm", "--namespace", "e2e"].map(String::from),
    );
    launcher.wait_ready(STEP);
    let mut client = launcher.client();
    let reply = client.request_timeout(
        "sync",
        json!({"vmi": guest_vmi(&GuestOptions::new("nrkvm"))}),
        STEP,
    );
    (launcher, client, reply)
}

/// Both sides on one host: a user who may not open /dev/kvm gets a sync
/// refused that says why (without --allow-emulation); the same user,
/// given read and write access to the node (an ACL entry for it alone),
/// gets a KVM domain. Needs /dev/kvm, not open to everyone (the CI host's
/// is root's, mode 0600); the guest itself need not boot under KVM.
#[test]
fn kvm_is_refused_to_a_user_who_cannot_open_dev_kvm_and_used_when_it_can() {
    if !require(&[Need::Root, Need::Qemu]) {
        return;
    }
    let kvm = std::path::Path::new("/dev/kvm");
    assert!(
        kvm.exists(),
        "this test needs /dev/kvm (its KVM side runs on it, with --spawn-libvirt as the user)"
    );
    let user = TestUser::create("k");
    assert!(
        !kvm_usable_by(&user),
        "every user may open /dev/kvm here ({:o}): the refusal cannot be shown",
        fs::metadata(kvm).unwrap().permissions().mode()
    );
    let (mut launcher, _client, reply) = sync_without_emulation_flags(&user, "nr-kvm-no");
    assert_eq!(reply["error"]["class"], "Unavailable", "{reply}");
    let desc = reply["error"]["desc"].as_str().unwrap();
    assert!(desc.contains("/dev/kvm: Permission denied"), "{desc}");
    assert!(desc.contains("--allow-emulation"), "{desc}");
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);

    let _grant = user.grant_device(kvm);
    assert!(
        kvm_usable_by(&user),
        "the ACL entry did not let the user open /dev/kvm"
    );
    let (mut launcher, mut client, reply) = sync_without_emulation_flags(&user, "nr-kvm-yes");
    assert!(reply.get("return").is_some(), "{reply}");
    let domain = client.ok("query-domain", Value::Null);
    assert_eq!(domain["spec"]["@type"], "kvm", "{domain}");
    client.ok("kill", Value::Null);
    assert_eq!(launcher.wait_exit(STEP), 0);
}

#[test]
fn a_host_device_is_refused_at_sync_before_anything_happens() {
    if !require(REAL_GUEST) {
        return;
    }
    // A device plugin assigned one of the host's PCI devices to the pod.
    // Whatever this host has (no IOMMU here; else a root-owned group node
    // in /dev/vfio), QEMU running as the user cannot use it through VFIO:
    // the sync says what is needed before anything is defined.
    let address = fs::read_dir("/sys/bus/pci/devices")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .min()
        .expect("a PCI device on this host");
    let user = TestUser::create("h");
    let tree = TempTree::new("nr-hostdev");
    user.give(&tree.root);
    let args: Vec<String> = [
        "--spawn-libvirt",
        "--force-emulation",
        "--name",
        "nrhostdev",
        "--namespace",
        "e2e",
    ]
    .map(String::from)
    .to_vec();
    let wrapper = [
        "env".to_string(),
        format!("PCI_RESOURCE_EXAMPLE_COM_NIC={address}"),
    ];
    let rust_log = std::env::var("VL_TEST_LOG").unwrap_or_else(|_| "debug".into());
    let mut launcher = Launcher::start_with(
        tree,
        &wrapper,
        &args,
        Some(&rust_log),
        Some((user.uid, user.gid)),
    );
    launcher.wait_ready(STEP);
    let mut client = launcher.client();
    let mut vmi = guest_vmi(&GuestOptions::new("nrhostdev"));
    vmi["spec"]["domain"]["devices"]["hostDevices"] =
        json!([{"name": "nic1", "deviceName": "example.com/nic"}]);
    let reply = client.request_timeout("sync", json!({ "vmi": vmi }), STEP);
    assert_eq!(reply["error"]["class"], "Unavailable", "{reply}");
    let desc = reply["error"]["desc"].as_str().unwrap();
    assert!(
        desc.starts_with(&format!(
            "host device \"hostdevice-nic1\" (PCI device {address}): QEMU runs as the launcher's unprivileged user (uid {}) and needs ",
            user.uid
        )),
        "{desc}"
    );
    assert!(desc.ends_with(", or run the launcher as root"), "{desc}");
    let status = client.ok("query-status", Value::Null);
    assert_eq!(status["domain"]["defined"], false, "{status}");
    assert!(qemu_pids("e2e_nrhostdev").is_empty());
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
}

#[test]
fn a_tap_the_user_may_not_open_is_refused_at_sync() {
    if !require(REAL_GUEST) {
        return;
    }
    let user = TestUser::create("n");
    // A pod network namespace with KubeVirt's tap for the pod network,
    // owned by root.
    let ns = format!("vlnr{}", std::process::id());
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["netns", "add", &ns]);
    struct DeleteNs(String);
    impl Drop for DeleteNs {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _ns = DeleteNs(ns.clone());
    ip(&[
        "-n", &ns, "tuntap", "add", "dev", "tap0", "mode", "tap", "user", "0",
    ]);

    let tree = TempTree::new("nr-tap");
    user.give(&tree.root);
    let wrapper: Vec<String> = [
        "ip".to_string(),
        "netns".into(),
        "exec".into(),
        ns.clone(),
        "setpriv".into(),
        format!("--reuid={}", user.uid),
        format!("--regid={}", user.gid),
        "--clear-groups".into(),
        "--".into(),
    ]
    .to_vec();
    let args: Vec<String> = [
        "--spawn-libvirt",
        "--force-emulation",
        "--name",
        "nrtap",
        "--namespace",
        "e2e",
    ]
    .map(String::from)
    .to_vec();
    let mut launcher = Launcher::start_with(tree, &wrapper, &args, Some("debug"), None);
    launcher.wait_ready(STEP);
    let mut client = launcher.client();
    let mut opts = GuestOptions::new("nrtap");
    opts.interface = json!({"name": "default", "masquerade": {}});
    let reply = client.request_timeout("sync", json!({"vmi": guest_vmi(&opts)}), STEP);
    assert_eq!(reply["error"]["class"], "Unavailable", "{reply}");
    let desc = reply["error"]["desc"].as_str().unwrap();
    assert!(
        desc.contains("may not open tap tap0: it belongs to another user"),
        "{desc}"
    );
    assert!(
        desc.contains(&format!("mode tap user {}", user.uid)),
        "{desc}"
    );
    assert_eq!(
        client.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );
    assert!(
        launcher
            .log_text()
            .contains("non-root mode: the launcher creates no network devices")
    );
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
}

#[test]
fn without_spawn_libvirt_a_nonroot_launcher_uses_the_users_session_daemon() {
    if !require(&[Need::Root, Need::Qemu]) {
        return;
    }
    let user = TestUser::create("u");
    let tree = TempTree::new("nr-session");
    user.give(&tree.root);
    // The user has no session daemon, and libvirt is told not to start
    // one: the launcher tries qemu:///session, then says so (exit 4).
    let wrapper: Vec<String> = [
        "env",
        "LIBVIRT_AUTOSTART=0",
        "HOME=/nonexistent",
        "XDG_RUNTIME_DIR=/nonexistent",
    ]
    .map(String::from)
    .to_vec();
    let args = ["--name", "nrsession", "--namespace", "e2e"].map(String::from);
    let mut launcher = Launcher::start_with(
        tree,
        &wrapper,
        &args,
        Some("info"),
        Some((user.uid, user.gid)),
    );
    assert_eq!(launcher.wait_exit(Duration::from_secs(60)), 4);
    let log = launcher.log_text();
    assert!(
        log.contains("cannot connect to libvirt at qemu:///session after"),
        "{log}"
    );

    // With the user's own session daemon running, the launcher finds its
    // socket under XDG_RUNTIME_DIR as libvirt's client does (both
    // backends: the wire backend resolves the path itself).
    let dirs = TempTree::new("nr-sess");
    let (run, home) = (dirs.path("run"), dirs.path("home"));
    for dir in [&run, &home] {
        fs::create_dir_all(dir).unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
    }
    user.give(&dirs.root);
    let env = [
        format!("HOME={}", home.display()),
        format!("XDG_RUNTIME_DIR={}", run.display()),
    ];
    let mut daemon = {
        use std::os::unix::process::CommandExt;
        Command::new("/usr/sbin/libvirtd")
            .args(["--timeout", "120"])
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &run)
            .uid(user.uid)
            .gid(user.gid)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the user's session libvirtd")
    };
    let socket = run.join("libvirt/libvirt-sock");
    let deadline = Instant::now() + STEP;
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "no session daemon socket at {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let tree = TempTree::new("nr-session2");
    user.give(&tree.root);
    let wrapper: Vec<String> = ["env".to_string(), "LIBVIRT_AUTOSTART=0".to_string()]
        .into_iter()
        .chain(env)
        .collect();
    let mut launcher = Launcher::start_with(
        tree,
        &wrapper,
        &args,
        Some("info"),
        Some((user.uid, user.gid)),
    );
    // A fresh session daemon probes QEMU on the first connection.
    launcher.wait_ready(Duration::from_secs(120));
    let status = launcher.client().ok("query-status", Value::Null);
    assert_eq!(status["libvirt"]["uri"], "qemu:///session", "{status}");
    assert_eq!(status["libvirt"]["connected"], true, "{status}");
    launcher.signal("TERM");
    assert_eq!(launcher.wait_exit(STEP), 0);
    // The launcher is ready before the daemon's first QEMU probe ends, and
    // a probe QEMU whose daemon is killed under it waits forever on its
    // monitor. This launcher starts no guest, so any QEMU of the user is
    // the daemon's probe: the daemon is stopped only once it has ended.
    let deadline = Instant::now() + Duration::from_secs(120);
    while user
        .live_processes()
        .iter()
        .any(|p| p.comm.starts_with("qemu-system"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
}
