//! Live migration in KubeVirt mode across two "nodes": two network
//! namespaces on this machine, each with a launcher in its pod (its own
//! libvirt daemons, scripts/run-in-pod.sh) and virt-handler's notify
//! server, joined by virt-handler's own migration proxies (`kvhandler
//! migration-proxy`: `--source` on the source node, `--target` on the
//! target node, plain TCP over a veth pair between the namespaces).
//! Everything is driven through `kvhandler` (KubeVirt's cmd-client), as
//! virt-handler drives a migration: SyncMigrationTarget on the target,
//! MigrateVirtualMachine on the source, FinalizeVirtualMachineMigration
//! on the target. What is asserted is what virt-handler and the guest see.
//! The pods may run this launcher or KubeVirt's own (a mixed fleet: the
//! guest moves between them both ways). The nodes, pods and proxies are
//! tests/common/fleet.rs. Run as root under `flock /work/qemu-tests.lock`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::fleet::*;
use common::guest::{BOOT, GuestOptions, REAL_GUEST, STEP, qemu_pids, wait_no_qemu};
use common::kubevirt::pod_vmi;
use common::{Need, TempTree, require};

/// The running guest moves from the pod on node A to the pod on node B
/// through virt-handler's proxies, its memory (a file written before, its
/// checksum after) and its uptime intact, and then runs once, on B.
/// `scratch` adds an empty disk, which is copied (the 49153 proxy).
fn migrate_between_nodes(tag: &str, name: &str, scratch: bool) {
    if !require(&[REAL_GUEST, &[Need::Kvhandler]].concat()) {
        return;
    }
    let nodes = Nodes::new();
    let mut opts = GuestOptions::new(name);
    if scratch {
        opts.extra_volumes.push((
            json!({"name": "scratch", "disk": {"bus": "virtio"}, "serial": "scratch1"}),
            json!({"name": "scratch", "emptyDisk": {"capacity": "32Mi"}}),
        ));
    }
    let vmi = pod_vmi(&opts, UID);

    // Node A runs the guest.
    let mut a = Pod::start(
        &format!("{tag}-a"),
        name,
        &nodes.source,
        "virt-launcher-source",
    );
    a.vmi = a.launcher.write_vmi("vmi.json", &vmi);
    assert_eq!(a.ok(&["sync", "--vmi", &a.vmi]), Value::Null);
    a.wait_agent(BOOT);
    // A file in the guest's memory (its root is a RAM filesystem) and,
    // with the scratch disk, data on the disk.
    let (code, out) = a.guest_sh(
        "head -c 8388608 /dev/urandom > /root/moving && sha256sum /root/moving | cut -d' ' -f1",
    );
    assert_eq!(code, 0, "{out}");
    let memory_sum = out.trim().to_string();
    let disk_sum = scratch.then(|| {
        let (code, out) = a.guest_sh(
            "dev=$(for d in /sys/block/vd*; do [ \"$(cat $d/serial 2>/dev/null)\" = scratch1 ] && basename $d; done); \
             head -c 4194304 /dev/urandom > /root/disk && dd if=/root/disk of=/dev/$dev bs=1M conv=fsync 2>/dev/null && \
             head -c 4194304 /dev/$dev | sha256sum | cut -d' ' -f1",
        );
        assert_eq!(code, 0, "{out}");
        out.trim().to_string()
    });
    let uptime_before = a.uptime();

    // Node B: a fresh pod, prepared as the migration target.
    let mut b = Pod::start(
        &format!("{tag}-b"),
        name,
        &nodes.target,
        "virt-launcher-target",
    );
    let migrating = migrating_vmi(&vmi, "migration-1");
    b.vmi = b.launcher.write_vmi("vmi.json", &migrating);
    assert_eq!(
        b.ok(&["sync-migration-target", "--vmi", &b.vmi]),
        Value::Null
    );
    // Asked again (virt-handler retries): still prepared.
    assert_eq!(
        b.ok(&["sync-migration-target", "--vmi", &b.vmi]),
        Value::Null
    );
    let b_share = b.launcher.share_dir();
    assert!(b_share.join("migrationproxy").is_dir());

    // virt-handler's proxies: on B from TCP to the pod's daemon and to the
    // sockets the incoming QEMU listens on; on A from the pod's sockets to
    // B.
    let key = |port: Option<u16>| match port {
        Some(port) => format!("{UID}-{port}-source.sock"),
        None => format!("{UID}-source.sock"),
    };
    let keys = [key(None), key(Some(49152)), key(Some(49153))];
    let mut target_args = Vec::new();
    let mut source_args = Vec::new();
    let daemon = b.daemon_socket();
    let daemon = Path::new(&daemon).file_name().unwrap().to_string_lossy();
    for (i, port) in PORTS.iter().enumerate() {
        let inside = if i == 0 {
            format!("/var/run/libvirt/{daemon}")
        } else {
            format!("/var/run/kubevirt/migrationproxy/{}", keys[i])
        };
        target_args.push("--target".to_string());
        target_args.push(format!("{TARGET_IP}:{port}={inside}"));
        source_args.push("--source".to_string());
        source_args.push(format!(
            "/var/run/kubevirt/migrationproxy/{}={TARGET_IP}:{port}",
            keys[i]
        ));
    }
    let passwd = TempTree::new(&format!("{tag}-proxy"));
    let _target_proxy = Proxy::start(
        &nodes.target,
        &passwd,
        &b.launcher.tree.path("root/run"),
        &target_args,
    );
    let _source_proxy = Proxy::start(
        &nodes.source,
        &passwd,
        &a.launcher.tree.path("root/run"),
        &source_args,
    );
    let deadline = Instant::now() + STEP;
    while !a
        .launcher
        .share_dir()
        .join("migrationproxy")
        .join(&keys[0])
        .exists()
    {
        assert!(Instant::now() < deadline, "the source proxy did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // The source pod's proxy answers (what its libvirt daemon dials),
    // dialled through the directory's descriptor: the whole path may be
    // longer than a unix socket's path can be.
    let socket = a.launcher.share_dir().join("migrationproxy").join(&keys[0]);
    let dir = std::fs::File::open(socket.parent().unwrap()).unwrap();
    let short = format!(
        "/proc/self/fd/{}/{}",
        std::os::fd::AsRawFd::as_raw_fd(&dir),
        keys[0]
    );
    if let Err(e) = std::os::unix::net::UnixStream::connect(&short) {
        let logs: Vec<String> = [&nodes.source, &nodes.target]
            .iter()
            .map(|ns| {
                std::fs::read_to_string(passwd.path(&format!("{ns}.log"))).unwrap_or_default()
            })
            .collect();
        panic!("{}: {e}; the proxies said: {logs:?}", socket.display());
    }
    // MigrateVirtualMachine on A, with virt-handler's options.
    let a_vmi = a.launcher.write_vmi("migrating.json", &migrating);
    let options = a.launcher.write_vmi(
        "options.json",
        &json!({"Bandwidth": "0", "ProgressTimeout": 150, "CompletionTimeoutPerGiB": 150,
                "AllowAutoConverge": false, "AllowPostCopy": false}),
    );
    let t = Instant::now();
    assert_eq!(
        a.ok(&["migrate", "--vmi", &a_vmi, "--options", &options]),
        Value::Null
    );
    // virt-handler sees the migration start in the source's metadata.
    let started = a
        .notify
        .wait(STEP, "the migration's start in the metadata", |e| {
            e["event"] == "domain"
                && e["domain"]["Spec"]["Metadata"]["KubeVirt"]["Migration"]["UID"] == "migration-1"
        });
    let migration = &started["domain"]["Spec"]["Metadata"]["KubeVirt"]["Migration"];
    assert!(migration["StartTimestamp"].is_string(), "{migration}");

    // The source ends: its domain migrated away and the launcher exits 0,
    // having told virt-handler the migration succeeded.
    assert_eq!(a.launcher.wait_exit(BOOT), 0, "{}", a.launcher.log_text());
    let took = t.elapsed();
    // What the notify server has yet to print of the source's last events.
    while a.notify.next(Duration::from_secs(2)).is_some() {}
    let ended = a
        .notify
        .seen
        .iter()
        .filter_map(|e| {
            let m = &e["domain"]["Spec"]["Metadata"]["KubeVirt"]["Migration"];
            m["EndTimestamp"].is_string().then(|| m.clone())
        })
        .next_back();
    let ended = ended.expect("the source reported the migration's end");
    assert_eq!(ended["Failed"], false, "{ended}");
    assert!(a.launcher.log_text().contains("the domain migrated away"));

    // B owns the guest: Running, its migration ended in the metadata.
    let deadline = Instant::now() + STEP;
    loop {
        let domain = b.domain();
        if domain["Status"]["Status"] == "Running"
            && domain["Spec"]["Metadata"]["KubeVirt"]["Migration"]["EndTimestamp"].is_string()
        {
            let m = &domain["Spec"]["Metadata"]["KubeVirt"]["Migration"];
            assert_eq!(
                (m["UID"].as_str(), m["Failed"].as_bool()),
                (Some("migration-1"), Some(false))
            );
            break;
        }
        assert!(Instant::now() < deadline, "B: {}", domain["Status"]);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(b.ok(&["finalize-migration", "--vmi", &b.vmi]), Value::Null);
    b.wait_agent(STEP);
    // The same guest: never restarted, its memory and disk as they were.
    let uptime_after = b.uptime();
    assert!(
        uptime_after > uptime_before,
        "uptime {uptime_after} <= {uptime_before}: the guest restarted"
    );
    let (code, out) = b.guest_sh("sha256sum /root/moving | cut -d' ' -f1");
    assert_eq!((code, out.trim()), (0, memory_sum.as_str()));
    if let Some(sum) = disk_sum {
        let (code, out) = b.guest_sh(
            "dev=$(for d in /sys/block/vd*; do [ \"$(cat $d/serial 2>/dev/null)\" = scratch1 ] && basename $d; done); \
             head -c 4194304 /dev/$dev | sha256sum | cut -d' ' -f1",
        );
        assert_eq!((code, out.trim()), (0, sum.as_str()));
    }
    // Exactly one running domain: A's launcher is gone, one QEMU runs.
    let (code, _) = a.launcher.kv(&["ping"]);
    assert_ne!(code, 0, "the source launcher still answers");
    assert_eq!(qemu_pids(&b.domain).len(), 1, "QEMU processes of the guest");
    eprintln!("migration across the nodes took {took:?}");

    // virt-handler ends B's pod as usual.
    assert_eq!(b.ok(&["kill", "--vmi", &b.vmi]), Value::Null);
    assert_eq!(b.launcher.wait_exit(STEP), 0);
    wait_no_qemu(&b.domain, Duration::from_secs(10));
}

#[test]
fn a_guest_migrates_across_nodes_through_virt_handlers_proxies() {
    migrate_between_nodes("kvm-mem", "kvmover", false);
}

#[test]
fn a_guest_with_a_local_disk_migrates_it_through_the_block_proxy() {
    migrate_between_nodes("kvm-blk", "kvblock", true);
}

/// How a migration is stopped mid-flight.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// CancelVirtualMachineMigration on the source.
    CancelOnSource,
    /// SignalTargetPodCleanup on the target (virt-handler aborting the
    /// migration from the target's side: the target pod ends).
    TargetPodCleanup,
    /// The target pod dies: its launcher's whole process group and its
    /// QEMU are killed.
    TargetDies,
    /// Nothing: the migration fails on its own (at full speed).
    FailsOnItsOwn,
}

/// A migration from `source` to a fresh pod of `kind`, slowed down (1 MiB/s)
/// and stopped mid-flight as `stop` says: the source's metadata says it
/// failed, the source still runs the same guest, the target pod ends
/// clean (no domain, no QEMU, its launcher gone).
#[allow(clippy::too_many_arguments)]
fn stopped_mid_flight(
    source: &mut Pod,
    kind: Launcher,
    from: Node,
    to: Node,
    vmi: &Value,
    migration_uid: &str,
    tag: &str,
    logs: &TempTree,
    stop: Stop,
    before: &GuestState,
) -> (GuestState, Value) {
    let bandwidth = match stop {
        Stop::FailsOnItsOwn => "0",
        _ => "1Mi",
    };
    let flight = take_off(
        source,
        kind,
        from,
        to,
        vmi,
        migration_uid,
        tag,
        logs,
        bandwidth,
    );
    let step = format!("{} {stop:?}", flight.step);
    let mut target = flight.target;
    if !matches!(stop, Stop::FailsOnItsOwn) {
        mid_flight(source, &target, to, migration_uid, &step);
    }
    match stop {
        Stop::FailsOnItsOwn => {}
        Stop::CancelOnSource => {
            assert_eq!(
                source.ok(&["cancel-migration", "--vmi", &flight.source_vmi]),
                Value::Null,
                "{step}"
            );
        }
        Stop::TargetPodCleanup => {
            assert_eq!(
                target.ok(&["signal-target-pod-cleanup", "--vmi", &target.vmi]),
                Value::Null,
                "{step}"
            );
        }
        Stop::TargetDies => {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", target.launcher.child.id())])
                .status();
            for pid in qemu_in(to.netns, &target.domain) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
    let ended = migration_end(source, migration_uid, BOOT);
    assert_eq!(ended["Failed"], true, "{step}: {ended}");
    if matches!(stop, Stop::CancelOnSource) {
        assert_eq!(ended["AbortStatus"], "Succeeded", "{step}: {ended}");
    }
    // virt-handler ends the target pod of a failed migration (a dead one
    // is gone already).
    if !matches!(stop, Stop::TargetDies) && target.launcher.kv(&["ping"]).0 == 0 {
        let _ = target
            .launcher
            .kv(&["signal-target-pod-cleanup", "--vmi", &target.vmi]);
    }
    // (Its exit status is the launcher's own: KubeVirt's panics, 2, when
    // no domain ever arrived; ours says why in man/virt-launcher.8.)
    let code = target.launcher.wait_exit(BOOT);
    eprintln!("{step}: the target pod exited with {code}");
    let deadline = Instant::now() + STEP;
    while !qemu_in(to.netns, &target.domain).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{step}: the target's QEMU remains"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The source runs the guest, as it was.
    assert_eq!(source.domain()["Status"]["Status"], "Running", "{step}");
    assert_eq!(qemu_pids(&source.domain).len(), 1, "{step}: QEMU processes");
    (same_guest(source, before, &step), ended)
}

/// Waits until the migration is really under way: the incoming domain
/// exists on the target and its QEMU runs, and the source has not seen it
/// end a second later (the bandwidth limit keeps it going).
fn mid_flight(source: &mut Pod, target: &Pod, to: Node, migration_uid: &str, step: &str) {
    let deadline = Instant::now() + STEP;
    while target.domain().is_null() || qemu_in(to.netns, &target.domain).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{step}: no incoming domain on the target"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    while source.notify.next(Duration::from_millis(100)).is_some() {}
    let ended = source.notify.seen.iter().any(|e| {
        let m = &e["domain"]["Spec"]["Metadata"]["KubeVirt"]["Migration"];
        m["EndTimestamp"].is_string() && m["UID"] == migration_uid
    });
    assert!(!ended, "{step}: the migration ended before it was stopped");
}

/// KubeVirt's launcher to this one and back, three times each way, on the
/// same guest.
#[test]
fn a_guest_moves_between_kubevirts_launcher_and_this_one_both_ways() {
    use Launcher::{Go, Ours};
    if !require(&[REAL_GUEST, &[Need::Kvhandler, Need::GoLauncher]].concat()) {
        return;
    }
    let nodes = Nodes::new();
    let a = nodes.source_node();
    let b = nodes.target_node();
    let logs = TempTree::new("kvm-mix-proxy");
    let vmi = mixed_vmi("kvmixed", false);
    let (pod, _, _) = mixed_fleet(
        "kvm-mix",
        "kvmixed",
        &vmi,
        &[Go, Ours, Go, Ours, Go, Ours, Go],
        (a, b),
        &logs,
    );
    end_guest(pod);
}

/// Local disks (an emptyDisk and a cloud-init disk) are copied from this
/// launcher's pod into KubeVirt's launcher's, whose domain then uses them
/// at the same paths. With a libvirt older than 10.9 in its pod (the
/// host's 9.0) KubeVirt's launcher cannot copy them back: it asks for
/// `migrate_disks_detect_zeroes`; that migration fails with libvirt's
/// error and the guest runs on where it was (with a newer one,
/// `local_disks_move_from_kubevirts_launcher_into_this_one` copies them).
#[test]
fn local_disks_move_from_this_launcher_into_kubevirts() {
    use Launcher::{Go, Ours};
    if !require(&[REAL_GUEST, &[Need::Kvhandler, Need::GoLauncher]].concat()) {
        return;
    }
    let nodes = Nodes::new();
    let a = nodes.source_node();
    let b = nodes.target_node();
    let logs = TempTree::new("kvm-mixdisk-proxy");
    let vmi = mixed_vmi("kvmixdisk", true);
    let (mut pod, state, here) =
        mixed_fleet("kvm-mixdisk", "kvmixdisk", &vmi, &[Ours, Go], (a, b), &logs);
    let (version, dotted) = go_pods_libvirt();
    if version >= DETECT_ZEROES {
        end_guest(pod);
        return;
    }
    let (_, ended) = stopped_mid_flight(
        &mut pod,
        Ours,
        here.0,
        here.1,
        &vmi,
        "migration-back",
        "kvm-mixdisk-back",
        &logs,
        Stop::FailsOnItsOwn,
        &state,
    );
    refused_for_detect_zeroes(&ended, &dotted);
    end_guest(pod);
}

/// The libvirt of KubeVirt's launcher's pods (what run-go-launcher.sh's
/// `virtqemud` stand-in runs: this machine's, or the newer stack's inside
/// scripts/newer-stack.sh), as libvirt encodes it and as it says it.
fn go_pods_libvirt() -> (u32, String) {
    let out = Command::new("/usr/sbin/libvirtd")
        .arg("--version")
        .output()
        .expect("libvirtd --version");
    let said = String::from_utf8_lossy(&out.stdout);
    let dotted = said.split_whitespace().last().unwrap_or_default();
    let version = virt_launcher::hypervisor::state::parse_libvirt_version(dotted)
        .unwrap_or_else(|| panic!("libvirtd's version {said:?} does not read"));
    (version, dotted.to_string())
}

/// The reason of a migration of KubeVirt's launcher's guest with local
/// disks (`ended`, its migration metadata), which must be libvirt's refusal
/// of `migrate_disks_detect_zeroes` (a libvirt older than 10.9, `libvirt`
/// as it says it).
fn refused_for_detect_zeroes(ended: &Value, libvirt: &str) -> String {
    let reason = ended["FailureReason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("migrate_disks_detect_zeroes"),
        "libvirt {libvirt}: KubeVirt's launcher copying disks failed otherwise: {ended}"
    );
    reason.to_string()
}

/// libvirt's `migrate_disks_detect_zeroes` migration parameter, which
/// KubeVirt's source asks for whenever it copies disks.
const DETECT_ZEROES: u32 = 10_009_000;

/// The cloud-init disk as the guest sees it: its size in sectors and the
/// checksum of its contents.
const READ_CIDATA: &str = "dev=$(grep -l cidata1 /sys/block/vd*/serial | cut -d/ -f4); \
     cat /sys/block/$dev/size; sha256sum /dev/$dev | cut -d' ' -f1";

/// Local disks (an emptyDisk and a cloud-init disk) copied from KubeVirt's
/// launcher's pod into this launcher's. KubeVirt's source asks libvirt
/// for `migrate_disks_detect_zeroes` (libvirt 10.9): with an older daemon
/// in its pod (the host's 9.0) the migration fails at once with libvirt's
/// error and the guest runs on where it was; with a newer one (the newer
/// stack's 11.3) the disks arrive, the cloud-init disk as the guest saw
/// it on the source (its size is the source's, which this launcher's
/// target takes from the VMI's volume status).
#[test]
fn local_disks_move_from_kubevirts_launcher_into_this_one() {
    use Launcher::{Go, Ours};
    if !require(&[REAL_GUEST, &[Need::Kvhandler, Need::GoLauncher]].concat()) {
        return;
    }
    let (version, dotted) = go_pods_libvirt();
    let nodes = Nodes::new();
    let a = nodes.source_node();
    let b = nodes.target_node();
    let logs = TempTree::new("kvm-godisk-proxy");
    let mut vmi = mixed_vmi("kvgodisk", true);
    for disk in vmi["spec"]["domain"]["devices"]["disks"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if disk["name"] == "cloudinit" {
            disk["serial"] = json!("cidata1");
        }
    }
    let (mut pod, state) = boot(Go, a, "kvm-godisk", "kvgodisk", &vmi);
    let (code, cidata) = pod.guest_sh(READ_CIDATA);
    assert_eq!(code, 0, "{cidata}");
    eprintln!("the cloud-init disk (sectors, checksum): {cidata:?}");
    if version < DETECT_ZEROES {
        let t = Instant::now();
        let (_, ended) = stopped_mid_flight(
            &mut pod,
            Ours,
            a,
            b,
            &vmi,
            "migration-1",
            "kvm-godisk-1",
            &logs,
            Stop::FailsOnItsOwn,
            &state,
        );
        let reason = refused_for_detect_zeroes(&ended, &dotted);
        eprintln!(
            "libvirt {dotted}: a target pod started and the migration failed in {:?}: {reason}",
            t.elapsed()
        );
        end_guest(pod);
        return;
    }
    let (target, took) = hop(pod, Ours, a, b, &vmi, "migration-1", "kvm-godisk-1", &logs);
    eprintln!("libvirt {dotted}: Go -> Ours with local disks took {took:?}");
    same_guest(&target, &state, "migration-1");
    let (code, now) = target.guest_sh(READ_CIDATA);
    assert_eq!(
        (code, now.as_str()),
        (0, cidata.as_str()),
        "the cloud-init disk"
    );
    end_guest(target);
}

/// A migration stopped mid-flight from either side, or whose target pod
/// dies, leaves the source (of `source` kind) running the same guest and
/// the target clean; targets of both kinds.
fn stopped_migrations(tag: &str, name: &str, source: Launcher) {
    use Launcher::{Go, Ours};
    if !require(&[REAL_GUEST, &[Need::Kvhandler, Need::GoLauncher]].concat()) {
        return;
    }
    let nodes = Nodes::new();
    let a = nodes.source_node();
    let b = nodes.target_node();
    let logs = TempTree::new(&format!("{tag}-proxy"));
    let vmi = mixed_vmi(name, false);
    let (mut pod, mut state) = boot(source, a, tag, name, &vmi);
    let mut i = 0;
    for stop in [
        Stop::CancelOnSource,
        Stop::TargetPodCleanup,
        Stop::TargetDies,
    ] {
        for target in [Go, Ours] {
            // KubeVirt's launcher does not stop an incoming migration on
            // SignalTargetPodCleanup (it only stops waiting for a domain):
            // whether the migration still completes into the pod told to
            // end is a race (docs/kubevirt-differences.md).
            if matches!((stop, target), (Stop::TargetPodCleanup, Go)) {
                continue;
            }
            i += 1;
            let (now, ended) = stopped_mid_flight(
                &mut pod,
                target,
                a,
                b,
                &vmi,
                &format!("migration-{i}"),
                &format!("{tag}-{i}"),
                &logs,
                stop,
                &state,
            );
            eprintln!("{stop:?} -> {target:?}: {ended}");
            state = now;
        }
    }
    end_guest(pod);
}

#[test]
fn migrations_from_this_launcher_stopped_mid_flight_leave_it_running() {
    stopped_migrations("kvm-stop", "kvstop", Launcher::Ours);
}

#[test]
fn migrations_from_kubevirts_launcher_stopped_mid_flight_leave_it_running() {
    stopped_migrations("kvm-gostop", "kvgostop", Launcher::Go);
}

/// The files of a pod's running domain: each disk's source file.
fn disk_files(pod: &Pod) -> Vec<String> {
    pod.domain()["Spec"]["Devices"]["Disks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["Source"]["File"].as_str().map(str::to_string))
        .collect()
}

/// KubeVirt's target-side pre-migration hook (VEP-141): the source pod
/// keeps its local disks under another ephemeral disk directory than the
/// target pod (a launcher laid out differently), so the domain XML it
/// sends names files the target pod does not have; KubeVirt's source
/// sends it as it is. The target's `qemu` hook (this launcher, installed
/// in its pod) gives the incoming domain the target pod's files: the
/// migration succeeds, the disk's data arrives, and the target's domain
/// runs on its own pod's files. (Without the hook libvirt cannot find
/// the source's files on the target and the migration fails.)
#[test]
fn the_targets_migration_hook_fits_a_differently_laid_out_sources_domain() {
    if !require(&[REAL_GUEST, &[Need::Kvhandler]].concat()) {
        return;
    }
    const OLD_LAYOUT: &str = "/var/run/kubevirt-ephemeral-disks-old";
    let nodes = Nodes::new();
    let a = nodes.source_node();
    let b = nodes.target_node();
    let logs = TempTree::new("kvm-hook-proxy");
    let vmi = mixed_vmi("kvhook", true);
    let (pod, state) = boot_with(
        Launcher::Ours,
        a,
        "kvm-hook",
        "kvhook",
        &vmi,
        &["--ephemeral-disk-dir", OLD_LAYOUT],
    );
    let before = disk_files(&pod);
    for file in ["empty-disks/scratch.qcow2", "noCloud.iso"] {
        assert!(
            before
                .iter()
                .any(|f| f.starts_with(OLD_LAYOUT) && f.ends_with(file)),
            "the source's {file}: {before:?}"
        );
    }
    let (target, _) = hop(
        pod,
        Launcher::Ours,
        a,
        b,
        &vmi,
        "migration-1",
        "kvm-hook-1",
        &logs,
    );
    let state = same_guest(&target, &state, "migration-1");
    let after = disk_files(&target);
    assert!(
        after.contains(&"/var/run/libvirt/empty-disks/scratch.qcow2".to_string()),
        "{after:?}"
    );
    assert!(
        after.contains(&format!(
            "/var/run/kubevirt-ephemeral-disks/cloud-init-data/{}/kvhook/noCloud.iso",
            common::kubevirt::NAMESPACE
        )),
        "{after:?}"
    );
    assert!(
        !after.iter().any(|f| f.starts_with(OLD_LAYOUT)),
        "{after:?}"
    );
    // The hook socket served its one connection and is gone.
    assert!(
        !target
            .launcher
            .share_dir()
            .join("migration-hook-socket")
            .exists()
    );
    // The guest writes on to its disk in the target pod.
    let (code, out) = target.guest_sh(&format!(
        "dev=$(grep -l scratch1 /sys/block/vd*/serial | cut -d/ -f4); \
         dd if=/dev/urandom of=/dev/$dev bs=1M count=1 conv=fsync 2>/dev/null && {READ_SCRATCH}"
    ));
    assert_eq!(code, 0, "{out}");
    assert_ne!(Some(out.trim()), state.disk_sum.as_deref());
    end_guest(target);
}

/// The host CPUs the guest's vCPU threads may run on, in the node `netns`.
fn vcpu_affinity(netns: &str, domain: &str) -> Vec<String> {
    let pids = qemu_in(netns, domain);
    assert_eq!(pids.len(), 1, "QEMU processes of {domain}: {pids:?}");
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", pids[0]))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("CPU ") {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        if let Some(cpus) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            found.push(cpus.trim().to_string());
        }
    }
    found
}

/// The dedicated CPU half of the target's migration hook: the guest's vCPU
/// is pinned to host CPU 0 in the source pod (its cpuset) and the target
/// pod has CPU 1; the domain the source sends pins it to 0. The target's
/// hook gives the incoming domain the target pod's pinning, so the guest's
/// vCPU runs on CPU 1 there. (Without the hook it would stay on the
/// source's CPU 0, outside the target pod's.)
#[test]
fn the_targets_migration_hook_pins_dedicated_cpus_to_the_target_pods() {
    if !require(&[REAL_GUEST, &[Need::Kvhandler]].concat()) {
        return;
    }
    let nodes = Nodes::new();
    let a = nodes.source_node();
    let b = nodes.target_node();
    let logs = TempTree::new("kvm-hookcpu-proxy");
    let cpusets: Vec<String> = ["0", "1"]
        .iter()
        .map(|cpus| {
            let file = logs.path(&format!("cpuset-{cpus}"));
            std::fs::write(&file, format!("{cpus}\n")).unwrap();
            file.display().to_string()
        })
        .collect();
    let mut vmi = mixed_vmi("kvhookcpu", false);
    vmi["spec"]["domain"]["cpu"] = json!({"cores": 1, "dedicatedCpuPlacement": true});
    let (pod, state) = boot_with(
        Launcher::Ours,
        a,
        "kvm-hookcpu",
        "kvhookcpu",
        &vmi,
        &["--cpuset-file", &cpusets[0]],
    );
    assert_eq!(vcpu_affinity(a.netns, &pod.domain), ["0"], "the source");
    let (target, _) = hop_with(
        pod,
        Launcher::Ours,
        a,
        b,
        &vmi,
        "migration-1",
        "kvm-hookcpu-1",
        &logs,
        &["--cpuset-file", &cpusets[1]],
    );
    same_guest(&target, &state, "migration-1");
    assert_eq!(vcpu_affinity(b.netns, &target.domain), ["1"], "the target");
    let pins = &target.domain()["Spec"]["CPUTune"]["VCPUPin"];
    assert_eq!(pins[0]["CPUSet"], "1", "{pins}");
    end_guest(target);
}
