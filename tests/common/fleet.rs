//! Two "nodes" on one machine for migrations in KubeVirt mode: two network
//! namespaces, each with launcher pods (this project's launcher or
//! KubeVirt's own, `virt-launcher-go`) and virt-handler's notify server,
//! joined by virt-handler's own migration proxies (`kvhandler
//! migration-proxy`: `--source` on the source node, `--target` on the
//! target node, plain TCP over a veth pair). Everything is driven through
//! `kvhandler` (KubeVirt's cmd-client), as virt-handler drives a
//! migration: SyncMigrationTarget on the target, MigrateVirtualMachine on
//! the source, FinalizeVirtualMachineMigration on the target. Used by
//! tests/kubevirt_migration.rs and the bench's `mixed` section.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::TempTree;
use super::guest::{BOOT, GuestOptions, STEP, qemu_pids, wait_no_qemu};
use super::kubevirt::{NAMESPACE, NotifyServer, PodLauncher, kvhandler, pod_vmi};
use super::podnet::run;

pub const GRACE: u64 = 30;
/// The VMI's uid, the same in both pods (the proxy sockets' key).
pub const UID: &str = "6d1f0a4e-2c3b-4a5d-9e8f-0123456789ab";
/// Ports of the target node's proxies: the libvirt daemon, memory, disks.
pub const PORTS: [u16; 3] = [22100, 22101, 22102];

pub static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Two network namespaces joined by a veth pair: the source node at
/// 10.231.0.1, the target node at 10.231.0.2. Removed on drop.
pub struct Nodes {
    pub source: String,
    pub target: String,
}

impl Nodes {
    /// The source node: its namespace, [`SOURCE_IP`].
    pub fn source_node(&self) -> Node<'_> {
        Node {
            netns: &self.source,
            ip: SOURCE_IP,
        }
    }

    /// The target node: its namespace, [`TARGET_IP`].
    pub fn target_node(&self) -> Node<'_> {
        Node {
            netns: &self.target,
            ip: TARGET_IP,
        }
    }
}

pub const SOURCE_IP: &str = "10.231.0.1";
pub const TARGET_IP: &str = "10.231.0.2";

impl Nodes {
    pub fn new() -> Nodes {
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
pub struct Proxy(Child);

impl Proxy {
    /// Runs it as virt-handler's container would: KubeVirt's proxy gives
    /// its sockets to the `qemu` user, which that container has and this
    /// machine may not, so it runs with a passwd file of its own (bind
    /// mounted in a private mount namespace; the host's is untouched).
    /// The node's pod is seen as virt-handler sees it: the pod's `/run`
    /// (`pod_run`) at `/run`, so the sockets have the pod's short paths
    /// (a unix socket's path has at most 108 bytes; the test trees' are
    /// longer).
    pub fn start(netns: &str, passwd_dir: &TempTree, pod_run: &Path, args: &[String]) -> Proxy {
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
pub struct Pod {
    pub kind: Launcher,
    pub launcher: PodLauncher,
    pub notify: NotifyServer,
    pub vmi: String,
    pub domain: String,
}

/// Which launcher runs in a pod.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Launcher {
    /// This project's, in KubeVirt mode.
    Ours,
    /// KubeVirt's own (`virt-launcher-go`).
    Go,
}

impl Pod {
    pub fn start(tag: &str, name: &str, netns: &str, pod_name: &str) -> Pod {
        Pod::start_kind(Launcher::Ours, tag, name, netns, pod_name)
    }

    pub fn start_kind(kind: Launcher, tag: &str, name: &str, netns: &str, pod_name: &str) -> Pod {
        Pod::start_kind_with(kind, tag, name, netns, pod_name, &[])
    }

    /// As [`Pod::start_kind`], with `extra` added to the launcher's flags.
    pub fn start_kind_with(
        kind: Launcher,
        tag: &str,
        name: &str,
        netns: &str,
        pod_name: &str,
        extra: &[&str],
    ) -> Pod {
        let tree = TempTree::new(tag);
        let notify = NotifyServer::start(&PodLauncher::share_dir_of(&tree), None);
        // The kernel-boot container's files where virt-handler puts them
        // in the pod (`<container-disk-dir>/kernel-boot/`), so that both
        // launchers boot the guest from the same path.
        let kernel_boot = tree.path("root/run/kubevirt/container-disks/kernel-boot");
        std::fs::create_dir_all(&kernel_boot).unwrap();
        let images = super::guest::images();
        for file in [&images.kernel, &images.initrd] {
            let to = kernel_boot.join(file.file_name().unwrap());
            if std::fs::hard_link(file, &to).is_err() {
                std::fs::copy(file, &to).unwrap();
            }
        }
        let env = [("POD_NAME", pod_name)];
        let mut launcher = match kind {
            Launcher::Ours => {
                PodLauncher::start_with_args(tree, name, UID, GRACE, Some(netns), &env, extra)
            }
            Launcher::Go => PodLauncher::start_go_with(
                tree,
                name,
                UID,
                GRACE,
                Some(netns),
                &env,
                &super::needs::go_launcher_script(),
                extra,
            ),
        };
        launcher.wait_ready(STEP);
        let domain = launcher.domain_name();
        Pod {
            kind,
            launcher,
            notify,
            vmi: String::new(),
            domain,
        }
    }

    pub fn ok(&self, command: &[&str]) -> Value {
        self.launcher.ok(command)
    }

    pub fn guest_sh(&self, script: &str) -> (i64, String) {
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

    pub fn wait_agent(&self, timeout: Duration) {
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

    pub fn uptime(&self) -> f64 {
        let (code, out) = self.guest_sh("cut -d' ' -f1 /proc/uptime");
        assert_eq!(code, 0, "{out}");
        out.trim().parse().unwrap()
    }

    /// GetDomain's api.Domain (`Value::Null` when there is none).
    pub fn domain(&self) -> Value {
        let got = self.ok(&["get-domain"]);
        if got["exists"] == true {
            got["domain"].clone()
        } else {
            Value::Null
        }
    }

    /// The pod's libvirt daemon socket, seen from outside the pod.
    pub fn daemon_socket(&self) -> String {
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
pub fn migrating_vmi(base: &Value, migration_uid: &str) -> Value {
    migrating_vmi_to(base, migration_uid, "virt-launcher-target")
}

/// As [`migrating_vmi`], to the pod `target_pod` (the target's
/// `POD_NAME`, which SignalTargetPodCleanup checks).
pub fn migrating_vmi_to(base: &Value, migration_uid: &str, target_pod: &str) -> Value {
    let mut vmi = base.clone();
    // virt-controller's choice for a VMI with local disks to copy.
    let local = |v: &Value| v.get("emptyDisk").is_some() || v.get("cloudInitNoCloud").is_some();
    if vmi["spec"]["volumes"]
        .as_array()
        .is_some_and(|volumes| volumes.iter().any(local))
    {
        vmi["status"]["migrationMethod"] = json!("BlockMigration");
    }
    vmi["status"]["migrationState"] = json!({
        "migrationUid": migration_uid,
        "sourcePod": "virt-launcher-source",
        "targetPod": target_pod,
        "targetNode": "node-b",
        "sourceNode": "node-a",
    });
    vmi["status"]["migrationTransport"] = json!("Unix");
    vmi
}

/// A node of the two: its namespace and address.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    pub netns: &'a str,
    pub ip: &'a str,
}

/// virt-handler's proxies for one migration from the pod `source` on
/// node `from` to the pod `target` on node `to`: on `to` from TCP to the
/// target pod's libvirt daemon and to the sockets its incoming QEMU
/// listens on; on `from` from the source pod's sockets to `to`. Returns
/// them once the source pod's end answers.
pub fn proxies(
    source: &Pod,
    target: &Pod,
    from: Node,
    to: Node,
    logs: &TempTree,
) -> (Proxy, Proxy) {
    let key = |port: Option<u16>| match port {
        Some(port) => format!("{UID}-{port}-source.sock"),
        None => format!("{UID}-source.sock"),
    };
    let keys = [key(None), key(Some(49152)), key(Some(49153))];
    let daemon = target.daemon_socket();
    let daemon = Path::new(&daemon)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut target_args = Vec::new();
    let mut source_args = Vec::new();
    for (i, port) in PORTS.iter().enumerate() {
        let inside = if i == 0 {
            format!("/var/run/libvirt/{daemon}")
        } else {
            format!("/var/run/kubevirt/migrationproxy/{}", keys[i])
        };
        target_args.push("--target".to_string());
        target_args.push(format!("{}:{port}={inside}", to.ip));
        source_args.push("--source".to_string());
        source_args.push(format!(
            "/var/run/kubevirt/migrationproxy/{}={}:{port}",
            keys[i], to.ip
        ));
    }
    let target_proxy = Proxy::start(
        to.netns,
        logs,
        &target.launcher.tree.path("root/run"),
        &target_args,
    );
    // The target's end listens before the source's is started: a source
    // proxy whose target does not answer yet would pass the check below
    // (it accepts, then drops the connection) and fail the migration.
    let target_log = logs.path(&format!("{}.log", to.netns));
    let deadline = Instant::now() + STEP;
    loop {
        let said = std::fs::read_to_string(&target_log).unwrap_or_default();
        if said.matches("target proxy").count() == PORTS.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the target node's proxies did not start: {said}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let source_proxy = Proxy::start(
        from.netns,
        logs,
        &source.launcher.tree.path("root/run"),
        &source_args,
    );
    let socket = source
        .launcher
        .share_dir()
        .join("migrationproxy")
        .join(&keys[0]);
    // Dialled through the directory's descriptor: the whole path may be
    // longer than a unix socket's path can be.
    let deadline = Instant::now() + STEP;
    let answers = || {
        let Ok(dir) = std::fs::File::open(socket.parent().unwrap()) else {
            return false;
        };
        let short = format!(
            "/proc/self/fd/{}/{}",
            std::os::fd::AsRawFd::as_raw_fd(&dir),
            keys[0]
        );
        std::os::unix::net::UnixStream::connect(short).is_ok()
    };
    while !answers() {
        if Instant::now() > deadline {
            let said: Vec<String> = [from.netns, to.netns]
                .iter()
                .map(|ns| {
                    std::fs::read_to_string(logs.path(&format!("{ns}.log"))).unwrap_or_default()
                })
                .collect();
            panic!(
                "{} does not answer; the proxies said: {said:?}",
                socket.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (target_proxy, source_proxy)
}

/// What the guest holds that a migration must keep: a file in its memory
/// (its root is a RAM filesystem) and its checksum, and its uptime.
pub struct GuestState {
    pub memory_sum: String,
    /// The checksum of what was written on the local disk, if it has one.
    pub disk_sum: Option<String>,
    pub uptime: f64,
}

/// The guest's scratch disk (by its serial), read back: the checksum of
/// its first 4 MiB. (No double quotes: KubeVirt's launcher puts Exec's
/// arguments into the agent's JSON unescaped.)
pub const READ_SCRATCH: &str = "dev=$(grep -l scratch1 /sys/block/vd*/serial | cut -d/ -f4); \
     head -c 4194304 /dev/$dev | sha256sum | cut -d' ' -f1";

/// Checks the running guest in `pod` is the one of `before` (the file's
/// checksum, an uptime that never went back) and returns its state now.
pub fn same_guest(pod: &Pod, before: &GuestState, step: &str) -> GuestState {
    pod.wait_agent(STEP);
    let uptime = pod.uptime();
    assert!(
        uptime > before.uptime,
        "{step}: uptime {uptime} <= {}: the guest restarted",
        before.uptime
    );
    let (code, out) = pod.guest_sh("sha256sum /root/moving | cut -d' ' -f1");
    assert_eq!(
        (code, out.trim()),
        (0, before.memory_sum.as_str()),
        "{step}: the file written before the migrations"
    );
    if let Some(sum) = &before.disk_sum {
        let (code, out) = pod.guest_sh(READ_SCRATCH);
        assert_eq!(
            (code, out.trim()),
            (0, sum.as_str()),
            "{step}: the data on the local disk"
        );
    }
    GuestState {
        memory_sum: before.memory_sum.clone(),
        disk_sum: before.disk_sum.clone(),
        uptime,
    }
}

/// Exactly one running domain, asked of both launchers: the target's runs,
/// the source's does not (or its launcher is gone), and one QEMU runs the
/// guest on the machine.
pub fn exactly_one_running(source: &Pod, target: &Pod, step: &str) {
    let (code, got) = source.launcher.kv(&["get-domain"]);
    if code == 0 && got["result"]["exists"] == true {
        let status = &got["result"]["domain"]["Status"];
        assert_ne!(
            status["Status"], "Running",
            "{step}: the source still runs the guest: {status}"
        );
        assert_ne!(
            status["Status"], "Paused",
            "{step}: the source still holds the guest: {status}"
        );
    }
    assert_eq!(
        target.domain()["Status"]["Status"],
        "Running",
        "{step}: the target"
    );
    assert_eq!(
        qemu_pids(&target.domain).len(),
        1,
        "{step}: QEMU processes of the guest"
    );
}

/// The migration metadata of the last domain event `pod`'s notify server
/// got for migration `uid` that carries an end time.
pub fn migration_end(pod: &mut Pod, uid: &str, timeout: Duration) -> Value {
    let ended = |e: &Value| {
        let m = &e["domain"]["Spec"]["Metadata"]["KubeVirt"]["Migration"];
        e["event"] == "domain" && m["UID"] == uid && m["EndTimestamp"].is_string()
    };
    if let Some(e) = pod.notify.seen.iter().rev().find(|e| ended(e)) {
        return e["domain"]["Spec"]["Metadata"]["KubeVirt"]["Migration"].clone();
    }
    let e = pod
        .notify
        .wait(timeout, &format!("the end of migration {uid}"), ended);
    e["domain"]["Spec"]["Metadata"]["KubeVirt"]["Migration"].clone()
}

/// virt-handler's migration options for these tests.
pub fn handler_options(bandwidth: &str) -> Value {
    json!({"Bandwidth": bandwidth, "ProgressTimeout": 150, "CompletionTimeoutPerGiB": 150,
           "AllowAutoConverge": false, "AllowPostCopy": false})
}

/// A migration under way: the target pod (a fresh one, prepared by
/// SyncMigrationTarget), virt-handler's proxies, and MigrateVirtualMachine
/// called on the source.
pub struct Flight {
    pub target: Pod,
    pub _proxies: (Proxy, Proxy),
    /// The VMI as the source was given it.
    pub source_vmi: String,
    pub step: String,
    pub started: Instant,
}

#[allow(clippy::too_many_arguments)]
pub fn take_off(
    source: &Pod,
    kind: Launcher,
    from: Node,
    to: Node,
    vmi: &Value,
    migration_uid: &str,
    tag: &str,
    logs: &TempTree,
    bandwidth: &str,
) -> Flight {
    take_off_with(
        source,
        kind,
        from,
        to,
        vmi,
        migration_uid,
        tag,
        logs,
        bandwidth,
        &[],
    )
}

/// As [`take_off`], the target's launcher started with `extra` flags.
#[allow(clippy::too_many_arguments)]
pub fn take_off_with(
    source: &Pod,
    kind: Launcher,
    from: Node,
    to: Node,
    vmi: &Value,
    migration_uid: &str,
    tag: &str,
    logs: &TempTree,
    bandwidth: &str,
    extra: &[&str],
) -> Flight {
    let step = format!("{migration_uid} ({:?} -> {kind:?})", source.kind);
    let name = source.launcher.name.clone();
    let pod_name = format!("virt-launcher-{tag}");
    let mut target = Pod::start_kind_with(kind, tag, &name, to.netns, &pod_name, extra);
    let mut migrating = migrating_vmi_to(vmi, migration_uid, &pod_name);
    // virt-handler records the size of the source's cloud-init ISO in the
    // VMI's volume status; KubeVirt's launcher makes the target's of that
    // size (the block migration fills it).
    let iso = source.launcher.tree.path(&format!(
        "root/run/kubevirt-ephemeral-disks/cloud-init-data/{NAMESPACE}/{name}/noCloud.iso"
    ));
    if let Ok(meta) = std::fs::metadata(&iso) {
        migrating["status"]["volumeStatus"] = json!([{"name": "cloudinit", "size": meta.len()}]);
    }
    target.vmi = target.launcher.write_vmi("vmi.json", &migrating);
    assert_eq!(
        target.ok(&["sync-migration-target", "--vmi", &target.vmi]),
        Value::Null,
        "{step}"
    );
    assert!(
        target.launcher.share_dir().join("migrationproxy").is_dir(),
        "{step}"
    );
    let proxies = proxies(source, &target, from, to, logs);
    let source_vmi = source
        .launcher
        .write_vmi(&format!("{migration_uid}.json"), &migrating);
    let options = source
        .launcher
        .write_vmi("options.json", &handler_options(bandwidth));
    let started = Instant::now();
    assert_eq!(
        source.ok(&["migrate", "--vmi", &source_vmi, "--options", &options]),
        Value::Null,
        "{step}"
    );
    Flight {
        target,
        _proxies: proxies,
        source_vmi,
        step,
        started,
    }
}

/// One migration as virt-handler drives it: [`take_off`], the source's
/// end of the migration in its metadata, the target running,
/// FinalizeVirtualMachineMigration; then the source pod's cleanup (its
/// domain deleted, its launcher gone). Returns the target pod and the time
/// from the migrate call to the target running.
#[allow(clippy::too_many_arguments)]
pub fn hop(
    source: Pod,
    kind: Launcher,
    from: Node,
    to: Node,
    vmi: &Value,
    migration_uid: &str,
    tag: &str,
    logs: &TempTree,
) -> (Pod, Duration) {
    hop_with(source, kind, from, to, vmi, migration_uid, tag, logs, &[])
}

/// As [`hop`], the target's launcher started with `extra` flags.
#[allow(clippy::too_many_arguments)]
pub fn hop_with(
    mut source: Pod,
    kind: Launcher,
    from: Node,
    to: Node,
    vmi: &Value,
    migration_uid: &str,
    tag: &str,
    logs: &TempTree,
    extra: &[&str],
) -> (Pod, Duration) {
    let flight = take_off_with(
        &source,
        kind,
        from,
        to,
        vmi,
        migration_uid,
        tag,
        logs,
        "0",
        extra,
    );
    let step = flight.step.clone();
    let ended = migration_end(&mut source, migration_uid, BOOT);
    assert_eq!(ended["Failed"], false, "{step}: {ended}");
    let target = flight.target;
    let deadline = Instant::now() + STEP;
    loop {
        let domain = target.domain();
        if domain["Status"]["Status"] == "Running" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{step}: the target: {}",
            domain["Status"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = flight.started.elapsed();
    assert_eq!(
        target.ok(&["finalize-migration", "--vmi", &target.vmi]),
        Value::Null,
        "{step}"
    );
    exactly_one_running(&source, &target, &step);
    // virt-handler then cleans the source pod up: the domain deleted, after
    // which the launcher exits (ours may have exited already).
    if source.launcher.kv(&["ping"]).0 == 0 {
        let _ = source.launcher.kv(&["delete", "--vmi", &flight.source_vmi]);
    }
    assert_eq!(
        source.launcher.wait_exit(STEP),
        0,
        "{step}: {}",
        source.launcher.log_text()
    );
    (target, took)
}

/// The QEMU of the guest that runs in the network namespace `netns`.
pub fn qemu_in(netns: &str, domain: &str) -> Vec<u32> {
    let out = Command::new("ip")
        .args(["netns", "pids", netns])
        .output()
        .expect("ip netns pids");
    let in_ns: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    qemu_pids(domain)
        .into_iter()
        .filter(|p| in_ns.contains(p))
        .collect()
}

/// A guest booted by a launcher of `kind` on `node`, with a file written
/// into its memory (and, with `disks`, data on its local disk).
pub fn boot(kind: Launcher, node: Node, tag: &str, name: &str, vmi: &Value) -> (Pod, GuestState) {
    boot_with(kind, node, tag, name, vmi, &[])
}

/// As [`boot`], the launcher started with `extra` flags.
pub fn boot_with(
    kind: Launcher,
    node: Node,
    tag: &str,
    name: &str,
    vmi: &Value,
    extra: &[&str],
) -> (Pod, GuestState) {
    let mut pod = Pod::start_kind_with(
        kind,
        &format!("{tag}-0"),
        name,
        node.netns,
        "virt-launcher-0",
        extra,
    );
    pod.vmi = pod.launcher.write_vmi("vmi.json", vmi);
    assert_eq!(pod.ok(&["sync", "--vmi", &pod.vmi]), Value::Null);
    pod.wait_agent(BOOT);
    let (code, out) = pod.guest_sh(
        "head -c 8388608 /dev/urandom > /root/moving && sha256sum /root/moving | cut -d' ' -f1",
    );
    assert_eq!(code, 0, "{out}");
    let memory_sum = out.trim().to_string();
    let has_disk = vmi["spec"]["volumes"]
        .as_array()
        .is_some_and(|v| v.iter().any(|v| v["name"] == "scratch"));
    let disk_sum = has_disk.then(|| {
        let (code, out) = pod.guest_sh(&format!(
            "dev=$(grep -l scratch1 /sys/block/vd*/serial | cut -d/ -f4); \
             head -c 4194304 /dev/urandom > /root/disk && dd if=/root/disk of=/dev/$dev bs=1M conv=fsync 2>/dev/null && {READ_SCRATCH}"
        ));
        assert_eq!(code, 0, "{out}");
        out.trim().to_string()
    });
    let state = GuestState {
        memory_sum,
        disk_sum,
        uptime: pod.uptime(),
    };
    (pod, state)
}

/// The test guest's VMI for the mixed-fleet tests, with a firmware UUID as
/// virt-controller gives every VMI; with `disks`, a local disk (copied on
/// the 49153 proxy) and a cloud-init disk (which each launcher generates
/// in its pod), so that the pods' disk paths must agree.
pub fn mixed_vmi(name: &str, disks: bool) -> Value {
    let mut opts = GuestOptions::new(name);
    if disks {
        opts.extra_volumes.push((
            json!({"name": "scratch", "disk": {"bus": "virtio"}, "serial": "scratch1"}),
            json!({"name": "scratch", "emptyDisk": {"capacity": "32Mi"}}),
        ));
        opts.extra_volumes.push((
            json!({"name": "cloudinit", "disk": {"bus": "virtio"}}),
            json!({"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config\n"}}),
        ));
    }
    let mut vmi = pod_vmi(&opts, UID);
    vmi["spec"]["domain"]["firmware"]["uuid"] = json!("8b6c3f1e-4d2a-5b7c-9e0f-1a2b3c4d5e6f");
    vmi
}

pub fn end_guest(mut pod: Pod) {
    assert_eq!(pod.ok(&["kill", "--vmi", &pod.vmi]), Value::Null);
    let _ = pod.launcher.kv(&["delete", "--vmi", &pod.vmi]);
    assert_eq!(pod.launcher.wait_exit(STEP), 0);
    wait_no_qemu(&pod.domain, Duration::from_secs(10));
}

/// The guest moves between KubeVirt's launcher and this one, node to node,
/// `order` giving each pod's launcher in turn; after each move it is the
/// same guest (its file, its uptime) and runs once. Returns the last pod.
pub fn mixed_fleet<'a>(
    tag: &str,
    name: &str,
    vmi: &Value,
    order: &[Launcher],
    nodes: (Node<'a>, Node<'a>),
    logs: &TempTree,
) -> (Pod, GuestState, (Node<'a>, Node<'a>)) {
    let (mut pod, mut state) = boot(order[0], nodes.0, tag, name, vmi);
    let mut here = nodes;
    for (i, kind) in order.iter().enumerate().skip(1) {
        let migration_uid = format!("migration-{i}");
        let (target, took) = hop(
            pod,
            *kind,
            here.0,
            here.1,
            vmi,
            &migration_uid,
            &format!("{tag}-{i}"),
            logs,
        );
        pod = target;
        state = same_guest(&pod, &state, &migration_uid);
        eprintln!(
            "{migration_uid}: {:?} -> {kind:?} took {took:?}",
            order[i - 1]
        );
        here = (here.1, here.0);
    }
    (pod, state, here)
}
