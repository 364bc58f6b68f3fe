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
//! Run as root under `flock /work/qemu-tests.lock`.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::guest::{BOOT, GuestOptions, REAL_GUEST, STEP, qemu_pids, wait_no_qemu};
use common::kubevirt::{NotifyServer, PodLauncher, kvhandler, pod_vmi};
use common::podnet::run;
use common::{Need, TempTree, require};

const GRACE: u64 = 30;
/// The VMI's uid, the same in both pods (the proxy sockets' key).
const UID: &str = "6d1f0a4e-2c3b-4a5d-9e8f-0123456789ab";
/// Ports of the target node's proxies: the libvirt daemon, memory, disks.
const PORTS: [u16; 3] = [22100, 22101, 22102];

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Two network namespaces joined by a veth pair: the source node at
/// 10.231.0.1, the target node at 10.231.0.2. Removed on drop.
struct Nodes {
    source: String,
    target: String,
}

const SOURCE_IP: &str = "10.231.0.1";
const TARGET_IP: &str = "10.231.0.2";

impl Nodes {
    fn new() -> Nodes {
        let tag = format!(
            "{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let nodes = Nodes {
            source: format!("vlnodea-{tag}"),
            target: format!("vlnodeb-{tag}"),
        };
        run(&["ip", "netns", "add", &nodes.source]);
        run(&["ip", "netns", "add", &nodes.target]);
        run(&[
            "ip",
            "-n",
            &nodes.source,
            "link",
            "add",
            "node0",
            "type",
            "veth",
            "peer",
            "name",
            "node0",
            "netns",
            &nodes.target,
        ]);
        for (ns, ip) in [(&nodes.source, SOURCE_IP), (&nodes.target, TARGET_IP)] {
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                "node0",
            ]);
            run(&["ip", "-n", ns, "link", "set", "node0", "up"]);
        }
        nodes
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for ns in [&self.source, &self.target] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// `kvhandler migration-proxy ARGS` in a node's namespace, stopped on
/// drop.
struct Proxy(Child);

impl Proxy {
    /// Runs it as virt-handler's container would: KubeVirt's proxy gives
    /// its sockets to the `qemu` user, which that container has and this
    /// machine may not, so it runs with a passwd file of its own (bind
    /// mounted in a private mount namespace; the host's is untouched).
    /// The node's pod is seen as virt-handler sees it: the pod's `/run`
    /// (`pod_run`) at `/run`, so the sockets have the pod's short paths
    /// (a unix socket's path has at most 108 bytes; the test trees' are
    /// longer).
    fn start(netns: &str, passwd_dir: &TempTree, pod_run: &Path, args: &[String]) -> Proxy {
        let passwd = passwd_dir.path("passwd");
        if !passwd.exists() {
            let mut text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
            if !text.lines().any(|l| l.starts_with("qemu:")) {
                text.push_str("qemu:x:107:107:qemu:/:/usr/sbin/nologin\n");
            }
            std::fs::write(&passwd, text).unwrap();
        }
        let child = Command::new("ip")
            .args(["netns", "exec", netns])
            .args(["unshare", "--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/passwd && mount --bind \"$1\" /run && shift && exec \"$@\"")
            .arg(&passwd)
            .arg(pod_run)
            .arg(kvhandler())
            .arg("migration-proxy")
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(passwd_dir.path(&format!("{netns}.log"))).unwrap())
            .spawn()
            .expect("start kvhandler migration-proxy");
        Proxy(child)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A launcher in its pod on a node, with its notify server.
struct Pod {
    launcher: PodLauncher,
    notify: NotifyServer,
    vmi: String,
    domain: String,
}

impl Pod {
    fn start(tag: &str, name: &str, netns: &str, pod_name: &str) -> Pod {
        let tree = TempTree::new(tag);
        let notify = NotifyServer::start(&PodLauncher::share_dir_of(&tree), None);
        let mut launcher = PodLauncher::start_with(
            tree,
            name,
            UID,
            GRACE,
            Some(netns),
            &[("POD_NAME", pod_name)],
        );
        launcher.wait_ready(STEP);
        let domain = launcher.domain_name();
        Pod {
            launcher,
            notify,
            vmi: String::new(),
            domain,
        }
    }

    fn ok(&self, command: &[&str]) -> Value {
        self.launcher.ok(command)
    }

    fn guest_sh(&self, script: &str) -> (i64, String) {
        let got = self.ok(&[
            "exec",
            "--domain",
            &self.domain,
            "--timeout",
            "30",
            "--",
            "/bin/sh",
            "-c",
            script,
        ]);
        (
            got["exitCode"].as_i64().unwrap_or(-1),
            got["stdout"].as_str().unwrap_or_default().to_string(),
        )
    }

    fn wait_agent(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let (code, out) =
                self.launcher
                    .kv(&["guest-ping", "--domain", &self.domain, "--timeout", "5"]);
            if code == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the guest agent did not answer within {timeout:?}: {out}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn uptime(&self) -> f64 {
        let (code, out) = self.guest_sh("cut -d' ' -f1 /proc/uptime");
        assert_eq!(code, 0, "{out}");
        out.trim().parse().unwrap()
    }

    /// GetDomain's api.Domain (`Value::Null` when there is none).
    fn domain(&self) -> Value {
        let got = self.ok(&["get-domain"]);
        if got["exists"] == true {
            got["domain"].clone()
        } else {
            Value::Null
        }
    }

    /// The pod's libvirt daemon socket, seen from outside the pod.
    fn daemon_socket(&self) -> String {
        let dir = self.launcher.tree.path("root/run/libvirt");
        let deadline = Instant::now() + STEP;
        loop {
            for name in ["virtqemud-sock", "libvirt-sock"] {
                if dir.join(name).exists() {
                    return dir.join(name).display().to_string();
                }
            }
            assert!(
                Instant::now() < deadline,
                "no libvirt daemon socket in {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The VMI as virt-handler sends it once a migration is under way: its
/// `status.migrationState`.
fn migrating_vmi(base: &Value, migration_uid: &str) -> Value {
    let mut vmi = base.clone();
    vmi["status"]["migrationState"] = json!({
        "migrationUid": migration_uid,
        "sourcePod": "virt-launcher-source",
        "targetPod": "virt-launcher-target",
        "targetNode": "node-b",
        "sourceNode": "node-a",
    });
    vmi["status"]["migrationTransport"] = json!("Unix");
    vmi
}

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
    // The source pod's proxy answers (what its libvirt daemon dials).
    let socket = a.launcher.share_dir().join("migrationproxy").join(&keys[0]);
    if let Err(e) = std::os::unix::net::UnixStream::connect(&socket) {
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
