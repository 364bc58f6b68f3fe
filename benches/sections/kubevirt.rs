//! KubeVirt mode beside KubeVirt's own launcher (issue 27): each pod is
//! started with the command line virt-controller renders, this launcher
//! as `virt-launcher-monitor` in scripts/run-in-pod.sh, KubeVirt's
//! `virt-launcher-go` in ../shared/kubevirt/run-go-launcher.sh, and driven
//! only through `kvhandler` (virt-handler's cmd-client; one process per
//! call) with `kvhandler notify-server` receiving the domain events. The
//! same VMI for every pod: the test guest booted from a kernel-boot
//! container, no network, plain emulation. The static build (wire
//! backend) is a third column when `VL_STATIC_BIN` names it (bench.sh
//! builds it).
//!
//! Figures:
//! - `kvhandler`'s own cost: its exec alone (usage, exit 2), and a `ping`
//!   to a gRPC server in this process that answers at once, in the Ping
//!   row's rotation: every kvhandler round trip's floor (exec, dial,
//!   version negotiation, the call);
//! - round trips of Ping, GetDomain, GetDomainStats and a
//!   SyncVirtualMachine of the unchanged VMI on the running guests,
//!   through kvhandler, alternating the pods one call at a time; and the
//!   same four on one kept connection per launcher (virt-handler keeps
//!   its client), with this crate's gRPC client, where the launchers' own
//!   work is not buried under kvhandler's exec;
//! - per pod start (ROUNDS each, alternating): exec -> Ping answers, ->
//!   its libvirt daemon answers, Sync -> the first domain event showing
//!   Running at the notify server (sent once the daemon answers), exec ->
//!   Running end to end, and Kill + Delete -> the launcher process's
//!   exit;
//! - the pod's memory with the guest running: PSS and private dirty of
//!   every process in the pod's mount namespace but QEMU (found by its
//!   pid file), QEMU apart, beside KubeVirt's overhead constants.
//!
//! The pods' daemon is Debian's monolithic libvirtd for both launchers
//! (run-go-launcher.sh puts it under virtqemud's name). KubeVirt's
//! `virt-launcher-monitor` is not run (its exit path SIGTERMs the first
//! process on the machine running qemu-system, ../shared/kubevirt/README.md),
//! so the Go pod has no monitor process to measure.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{Value, json};

use super::common::guest::{STEP, images};
use super::common::{BIN, TempTree};
use virt_launcher::grpc::{self, Handler, Limits, Status};
use virt_launcher::kubevirt::proto::wire::Writer;

/// Pod starts per launcher (Sync -> Running, Kill -> exit).
const ROUNDS: usize = 5;
/// Calls per launcher of each round-tripped RPC.
const CALLS: usize = 30;
const UID: &str = "11111111-2222-3333-4444-555555555555";
const DOMAIN: &str = "e2e_kvt";
/// KubeVirt's per-process memory overhead constants
/// (pkg/virt-controller/services/renderresources.go), MiB.
const KV_LAUNCHER: u64 = 100;
const KV_MONITOR: u64 = 25;
const KV_VIRTQEMUD: u64 = 40;
const KV_VIRTLOGD: u64 = 25;

/// One launcher build in the comparison.
struct Kind {
    label: &'static str,
    /// For its scratch directory's name.
    tag: &'static str,
    /// `None`: KubeVirt's launcher, through run-go-launcher.sh.
    bin: Option<PathBuf>,
}

/// Where KubeVirt's built code is: `KUBEVIRT_DIR`, else ../shared/kubevirt.
fn kubevirt_dir() -> PathBuf {
    std::env::var_os("KUBEVIRT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/kubevirt"))
}

fn kvhandler() -> PathBuf {
    kubevirt_dir().join("kvhandler")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

/// "p50 X ms (min A, max B)" of millisecond samples.
fn describe(samples: &[f64], decimals: usize) -> String {
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "{:.decimals$} ({:.decimals$}-{:.decimals$})",
        median(samples.to_vec()),
        min,
        max
    )
}

fn row(what: &str, cells: &[String], note: &str) {
    let cells: Vec<String> = cells.iter().map(|c| format!("{c:>22}")).collect();
    println!("  {what:<44} {}   {note}", cells.join(" "));
}

/// The pod's command line, as virt-controller renders it for
/// virt-launcher-monitor (without its own `--` and the launcher's path).
fn pod_args() -> Vec<String> {
    [
        "--qemu-timeout",
        "287s",
        "--name",
        "kvt",
        "--uid",
        UID,
        "--namespace",
        "e2e",
        "--kubevirt-share-dir",
        "/var/run/kubevirt",
        "--ephemeral-disk-dir",
        "/var/run/kubevirt-ephemeral-disks",
        "--container-disk-dir",
        "/var/run/kubevirt/container-disks",
        "--hotplug-disk-dir",
        "/var/run/kubevirt/hotplug-disks",
        "--grace-period-seconds",
        "35",
        "--hook-sidecars",
        "0",
        "--ovmf-path",
        "/usr/share/OVMF",
        "--disk-memory-limit",
        "2097152000",
        "--hypervisor",
        "kvm",
        "--allow-emulation",
    ]
    .map(String::from)
    .to_vec()
}

/// The test guest from its kernel-boot container (KubeVirt's layout:
/// `<container-disk-dir>/kernel-boot/<base name>`), with the firmware UUID
/// virt-controller sets, so that a re-sync defines nothing new.
fn vmi() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "kvt", "namespace": "e2e", "uid": UID},
        "spec": {
            "terminationGracePeriodSeconds": 20,
            "domain": {
                "cpu": {"cores": 1},
                "memory": {"guest": "192Mi"},
                "firmware": {
                    "uuid": "3d5c2a8e-1f4b-5e6a-9c7d-0b1a2c3d4e5f",
                    "kernelBoot": {
                        "kernelArgs": "console=ttyS0 quiet panic=-1 tg.hostname=kvt tg.net=none",
                        "container": {
                            "image": "local/test-guest",
                            "kernelPath": "/boot/vmlinuz",
                            "initrdPath": "/boot/initrd.img"
                        }
                    }
                },
                "devices": {
                    "autoattachGraphicsDevice": false,
                    "autoattachPodInterface": false,
                    "disks": [],
                    "interfaces": []
                }
            },
            "networks": [],
            "volumes": []
        }
    })
}

/// One `kvhandler` call: how long the process took, and its result.
/// Panics when the call fails (`ok: false`), unless `may_fail`.
fn call(socket: &Path, args: &[&str], may_fail: bool) -> (Duration, Value) {
    let t = Instant::now();
    let out = Command::new(kvhandler())
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run kvhandler: {e}"));
    let took = t.elapsed();
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        may_fail || reply["ok"] == true,
        "kvhandler {args:?}: {reply} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (took, reply)
}

// ---- one pod ----

/// The state and parent of a process (/proc/PID/stat), or `None` once it
/// is gone.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some((
        fields.first()?.chars().next()?,
        fields.get(1)?.parse().ok()?,
    ))
}

fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

fn first_arg(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            String::from_utf8_lossy(c.split(|b| *b == 0).next().unwrap_or_default()).into_owned()
        })
        .unwrap_or_default()
}

fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// A launcher pod: its scratch tree (the container's /run is
/// `root/run` in it), the wrapper script that made its mount namespace,
/// the launcher process in it and a notify server of its own.
struct Pod {
    tree: TempTree,
    wrapper: Child,
    notify: Child,
    events: Receiver<(Instant, Value)>,
    launcher: u32,
    mount_ns: String,
    started: Instant,
    /// exec -> Ping answers; exec -> the pod's libvirt daemon answers.
    ready: Duration,
    settled: Duration,
}

impl Pod {
    fn start(kind: &Kind) -> Pod {
        let tree = TempTree::new(&format!("kv-{}", kind.tag));
        let run = tree.path("root/run");
        let boot = run.join("kubevirt/container-disks/kernel-boot");
        for dir in [
            boot.clone(),
            run.join("kubevirt-ephemeral-disks"),
            run.join("kubevirt/hotplug-disks"),
        ] {
            fs::create_dir_all(&dir).unwrap();
        }
        let images = images();
        fs::copy(&images.kernel, boot.join("vmlinuz")).unwrap();
        fs::copy(&images.initrd, boot.join("initrd.img")).unwrap();
        fs::write(tree.path("vmi.json"), vmi().to_string()).unwrap();

        // The notify server first, as virt-handler's is up before the pod.
        let mut notify = Command::new(kvhandler())
            .arg("notify-server")
            .arg("--share-dir")
            .arg(run.join("kubevirt"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(tree.path("notify.err")).unwrap())
            .spawn()
            .expect("start kvhandler notify-server");
        let lines = notify.stdout.take().unwrap();
        let (tx, events) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(lines).lines() {
                let Ok(line) = line else { break };
                let at = Instant::now();
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && tx.send((at, event)).is_err()
                {
                    break;
                }
            }
        });
        let link = run.join("kubevirt/domain-notify-pipe.sock");
        let t = Instant::now();
        while fs::symlink_metadata(&link).is_err() {
            assert!(t.elapsed() < STEP, "the notify server did not start");
            std::thread::sleep(Duration::from_millis(5));
        }

        let log = fs::File::create(tree.path("launcher.log")).unwrap();
        let mut command = match &kind.bin {
            Some(bin) => {
                // The name puts the launcher in KubeVirt mode, as
                // virt-controller's pod command line does.
                let monitor = tree.path("virt-launcher-monitor");
                std::os::unix::fs::symlink(bin, &monitor).unwrap();
                let mut c = Command::new(
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/run-in-pod.sh"),
                );
                c.arg(&tree.root).arg("--").arg(monitor);
                c
            }
            None => {
                let mut c = Command::new(kubevirt_dir().join("run-go-launcher.sh"));
                c.arg(&tree.root).arg("--");
                c
            }
        };
        command
            .args(pod_args())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let started = Instant::now();
        let wrapper = command.spawn().expect("start the pod");
        let socket = run.join("kubevirt/sockets/launcher-sock");
        let mut pod = Pod {
            tree,
            wrapper,
            notify,
            events,
            launcher: 0,
            mount_ns: String::new(),
            started,
            ready: Duration::ZERO,
            settled: Duration::ZERO,
        };
        // The wrapper's child becomes the launcher (unshare, the script
        // again inside, then exec).
        let wrapper_pid = pod.wrapper.id();
        while pod.launcher == 0 {
            pod.check_running();
            pod.launcher = all_pids()
                .into_iter()
                .filter(|&p| stat(p).is_some_and(|(_, ppid)| ppid == wrapper_pid))
                .find(|&p| {
                    let arg = first_arg(p);
                    arg.ends_with("/virt-launcher-monitor") || arg.ends_with("/virt-launcher-go")
                })
                .unwrap_or(0);
            std::thread::sleep(Duration::from_millis(2));
        }
        pod.mount_ns = fs::read_link(format!("/proc/{}/ns/mnt", pod.launcher))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        loop {
            pod.check_running();
            if socket.exists() && call(&socket, &["ping"], true).1["ok"] == true {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        pod.ready = pod.started.elapsed();
        pod.wait_daemon();
        pod.settled = pod.started.elapsed();
        pod
    }

    fn socket(&self) -> PathBuf {
        self.tree.path("root/run/kubevirt/sockets/launcher-sock")
    }

    fn vmi_file(&self) -> PathBuf {
        self.tree.path("vmi.json")
    }

    /// A call that takes the VMI.
    fn call_vmi(&self, command: &str, may_fail: bool) -> (Duration, Value) {
        let vmi = self.vmi_file();
        let vmi = vmi.to_string_lossy();
        call(&self.socket(), &[command, "--vmi", &vmi], may_fail)
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.tree.path("launcher.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn check_running(&mut self) {
        if let Ok(Some(status)) = self.wrapper.try_wait() {
            panic!("the pod ended ({status}); its log:\n{}", self.log_tail());
        }
        assert!(
            self.started.elapsed() < STEP,
            "the pod is not ready; its log:\n{}",
            self.log_tail()
        );
    }

    /// Waits until the pod's libvirt daemon answers: a connection opens
    /// once its drivers are up (KubeVirt's launcher answers Ping before
    /// then; ours is ready only after its own connection).
    fn wait_daemon(&mut self) {
        let dir = self.tree.path("root/run/libvirt");
        loop {
            self.check_running();
            let socket = ["virtqemud-sock", "libvirt-sock"]
                .iter()
                .map(|s| dir.join(s))
                .find(|s| s.exists());
            if let Some(socket) = socket {
                let uri = format!("qemu+unix:///system?socket={}", socket.display());
                if let Ok(conn) = virt::connect::Connect::open(Some(&uri))
                    && conn.lib_version().is_ok()
                {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sync of the VMI: the reply's time, the time to the first domain
    /// event at the notify server showing the domain Running (ms), and
    /// when that event arrived.
    fn sync_to_running(&self) -> (f64, f64, Instant) {
        while self.events.try_recv().is_ok() {}
        let t = Instant::now();
        let (reply, _) = self.call_vmi("sync", false);
        loop {
            let left = STEP.saturating_sub(t.elapsed());
            let (at, event) = self
                .events
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no Running event; log:\n{}", self.log_tail()));
            if event["domain"]["Status"]["Status"] == "Running" {
                return (ms(reply), ms(at - t), at);
            }
        }
    }

    /// Kill, then Delete (as virt-handler does once the VMI is gone), to
    /// the launcher process's exit: (kill reply, delete reply, exit), ms,
    /// and how many of the pod's other processes were still alive then.
    fn kill_to_exit(&mut self) -> (f64, f64, f64, usize) {
        let t = Instant::now();
        self.call_vmi("kill", false);
        let killed = t.elapsed();
        // The launcher may exit before it answers the Delete.
        self.call_vmi("delete", true);
        let deleted = t.elapsed();
        while alive(self.launcher) {
            assert!(t.elapsed() < STEP, "no exit; log:\n{}", self.log_tail());
            std::thread::sleep(Duration::from_micros(500));
        }
        let exited = t.elapsed();
        let left = self.members().len();
        (ms(killed), ms(deleted), ms(exited), left)
    }

    /// Every live process in the pod's mount namespace.
    fn members(&self) -> Vec<u32> {
        all_pids()
            .into_iter()
            .filter(|&p| {
                alive(p)
                    && fs::read_link(format!("/proc/{p}/ns/mnt"))
                        .is_ok_and(|ns| ns.to_string_lossy() == self.mount_ns)
            })
            .collect()
    }

    /// The domain's QEMU, from the pod's libvirt pid file.
    fn qemu(&self) -> Option<u32> {
        let file = self
            .tree
            .path(&format!("root/run/libvirt/qemu/{DOMAIN}.pid"));
        fs::read_to_string(file).ok()?.trim().parse().ok()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        // Whatever is left (a bench that failed midway, or daemons the
        // launcher left): the pod's processes, by their ids.
        let mut pids = self.members();
        pids.extend(self.qemu().filter(|&q| alive(q)));
        if alive(self.launcher) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.wrapper.id().to_string()])
                .status();
            let t = Instant::now();
            while alive(self.launcher) && t.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for pid in pids.into_iter().filter(|&p| alive(p)) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.wrapper.kill();
        let _ = self.wrapper.wait();
        let _ = self.notify.kill();
        let _ = self.notify.wait();
    }
}

// ---- memory ----

/// (PSS, private dirty) of a process, KiB.
fn smaps(pid: u32) -> (u64, u64) {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("Pss:"), field("Private_Dirty:"))
}

/// The pod's memory by role: launcher, libvirt daemon, virtlogd, other
/// (helpers the daemon runs), QEMU; each (PSS, private dirty) KiB.
fn pod_memory(pod: &Pod) -> HashMap<&'static str, (u64, u64)> {
    let qemu = pod.qemu();
    let mut out: HashMap<&'static str, (u64, u64)> = HashMap::new();
    let mut add = |role: &'static str, pid: u32| {
        let (pss, dirty) = smaps(pid);
        let entry = out.entry(role).or_default();
        entry.0 += pss;
        entry.1 += dirty;
    };
    for pid in pod.members() {
        if Some(pid) == qemu {
            continue;
        }
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let role = if pid == pod.launcher {
            "launcher"
        } else if comm.trim() == "virtlogd" {
            "virtlogd"
        } else if comm.trim() == "libvirtd" || comm.trim() == "virtqemud" {
            "daemon"
        } else {
            "other"
        };
        add(role, pid);
    }
    // QEMU may run in a mount namespace of its own (libvirt's default).
    if let Some(q) = qemu.filter(|&q| alive(q)) {
        add("qemu", q);
    }
    out
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

// ---- kvhandler's own cost ----

/// Answers CmdInfo and Ping at once: the floor of a `kvhandler` call.
struct FastServer;

impl Handler for FastServer {
    fn call(&self, method: &str, _request: &[u8]) -> Result<Vec<u8>, Status> {
        match method {
            // CmdInfoResponse{supportedCmdVersions: [1]}.
            "/kubevirt.cmd.info.CmdInfo/Info" => Ok(vec![0x0a, 0x01, 0x01]),
            // Response{success: true}.
            "/kubevirt.cmd.v1.Cmd/Ping" => Ok(vec![0x08, 0x01]),
            _ => Err(Status::unimplemented(method)),
        }
    }
}

/// The fast server on a socket of its own, for as long as it is kept.
struct FloorServer {
    tree: TempTree,
}

impl FloorServer {
    fn start() -> FloorServer {
        let tree = TempTree::new("kv-floor");
        let listener = UnixListener::bind(tree.path("launcher-sock")).unwrap();
        let (fatal_tx, _fatal) = crossbeam_channel::unbounded();
        grpc::spawn_acceptor(listener, Arc::new(FastServer), Limits::default(), fatal_tx).unwrap();
        FloorServer { tree }
    }

    fn socket(&self) -> PathBuf {
        self.tree.path("launcher-sock")
    }
}

/// `kvhandler` with no arguments: its exec and exit alone.
fn kvhandler_exec() {
    let exec: Vec<f64> = (0..CALLS)
        .map(|_| {
            let t = Instant::now();
            let _ = Command::new(kvhandler())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            ms(t.elapsed())
        })
        .collect();
    row(
        &format!("kvhandler exec alone (usage, {CALLS})"),
        &[format!("{} ms", describe(&exec, 1))],
        "[in every kvhandler row]",
    );
}

/// `kvhandler` calls on each socket in turn, one call at a time, the
/// order reversed every round so that drift in the host's load falls on
/// every launcher alike: ms samples per socket.
fn alternate_kvhandler(sockets: &[PathBuf], args: &[&str], vmis: &[String]) -> Vec<Vec<f64>> {
    let mut samples = vec![Vec::with_capacity(CALLS); sockets.len()];
    for round in 0..CALLS {
        for k in 0..sockets.len() {
            let i = if round % 2 == 0 {
                k
            } else {
                sockets.len() - 1 - k
            };
            let mut args = args.to_vec();
            if args.last() == Some(&"--vmi") {
                args.push(&vmis[i]);
            }
            samples[i].push(ms(call(&sockets[i], &args, false).0));
        }
    }
    samples
}

// ---- a kept connection ----

/// `VMIRequest{vmi: VMI{vmiJson}}`, without options, as kvhandler sends
/// it without --options.
fn vmi_request() -> Vec<u8> {
    let mut vmi_message = Writer::new();
    vmi_message.len_field(1, vmi().to_string().as_bytes());
    let mut request = Writer::new();
    request.len_field(1, &vmi_message.into_bytes());
    request.into_bytes()
}

/// Whether a response says success: `Response{success: true, ...}`, or a
/// message whose field 1 is that Response (DomainResponse,
/// DomainStatsResponse).
fn succeeded(response: &[u8], nested: bool) -> bool {
    if nested {
        response.first() == Some(&0x0a) && response.get(2..4) == Some(&[0x08, 0x01][..])
    } else {
        response.starts_with(&[0x08, 0x01])
    }
}

/// The four RPCs on one kept connection per launcher, as virt-handler
/// keeps its client: this process's gRPC client (not grpc-go, the same
/// for every launcher), `n` calls each, alternating the launchers.
fn kept_connection(pods: &[Pod], n: usize) {
    let mut clients: Vec<grpc::Client> =
        pods.iter().map(|p| grpc::Client::new(p.socket())).collect();
    let sync = vmi_request();
    let rpcs: [(&str, &str, &[u8], bool); 4] = [
        ("Ping", "/kubevirt.cmd.v1.Cmd/Ping", &[], false),
        ("GetDomain", "/kubevirt.cmd.v1.Cmd/GetDomain", &[], true),
        (
            "GetDomainStats",
            "/kubevirt.cmd.v1.Cmd/GetDomainStats",
            &[],
            true,
        ),
        (
            "SyncVirtualMachine, unchanged VMI",
            "/kubevirt.cmd.v1.Cmd/SyncVirtualMachine",
            &sync,
            false,
        ),
    ];
    println!("  on a kept connection (this process's gRPC client), {n} calls each, p50 (p99):");
    for (name, method, request, nested) in rpcs {
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); pods.len()];
        for round in 0..n + 10 {
            for k in 0..pods.len() {
                let i = if round % 2 == 0 {
                    k
                } else {
                    pods.len() - 1 - k
                };
                let t = Instant::now();
                let response = clients[i]
                    .call(method, request, STEP)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let took = t.elapsed();
                assert!(succeeded(&response, nested), "{name}: {response:?}");
                // The first rounds warm up (the connection's first call
                // dials it).
                if round >= 10 {
                    samples[i].push(took);
                }
            }
        }
        let cells: Vec<String> = samples
            .into_iter()
            .map(|s| {
                let (p50, p99, _) = super::percentiles(s);
                format!("{p50:.0} ({p99:.0}) us")
            })
            .collect();
        row(&format!("  {name}"), &cells, "");
    }
}

// ---- the section ----

pub fn kubevirt() {
    let kv = kubevirt_dir();
    if !kv.join("kvhandler").exists() {
        println!(
            "kubevirt: no kvhandler in {} (KUBEVIRT_DIR); skipped",
            kv.display()
        );
        return;
    }
    images();
    let mut kinds = vec![Kind {
        label: "this (release)",
        tag: "release",
        bin: Some(PathBuf::from(BIN)),
    }];
    // bench.sh names it relative to the checkout: the pod's link to it
    // lives elsewhere.
    if let Some(bin) = std::env::var_os("VL_STATIC_BIN").and_then(|b| fs::canonicalize(b).ok()) {
        kinds.push(Kind {
            label: "this (static, wire)",
            tag: "static",
            bin: Some(bin),
        });
    }
    let go = kv.join("virt-launcher-go").exists();
    if go {
        kinds.push(Kind {
            label: "virt-launcher-go",
            tag: "go",
            bin: None,
        });
    }
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "KubeVirt mode through kvhandler (virt-handler's cmd-client, a process per call); the test guest, plain emulation; load average at the start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if !go {
        println!("  (no virt-launcher-go in {}: no Go column)", kv.display());
    }
    if std::env::var_os("VL_STATIC_BIN").is_none() {
        println!("  (VL_STATIC_BIN is not set: no static-build column)");
    }
    kvhandler_exec();
    let labels: Vec<String> = kinds.iter().map(|k| k.label.to_string()).collect();
    row("", &labels, "");

    // The running guests, all pods at once: round trips and memory.
    let pods: Vec<Pod> = kinds.iter().map(Pod::start).collect();
    for pod in &pods {
        pod.sync_to_running();
    }
    // The guests boot and the launchers' first agent polls pass.
    std::thread::sleep(Duration::from_secs(15));
    let floor = FloorServer::start();
    let mut sockets: Vec<PathBuf> = pods.iter().map(Pod::socket).collect();
    let vmis: Vec<String> = pods
        .iter()
        .map(|p| p.vmi_file().to_string_lossy().into_owned())
        .collect();
    let rpcs: [(&str, &[&str]); 4] = [
        ("Ping", &["ping"]),
        ("GetDomain", &["get-domain"]),
        ("GetDomainStats", &["get-domain-stats"]),
        ("SyncVirtualMachine, unchanged VMI", &["sync", "--vmi"]),
    ];
    println!(
        "  through kvhandler, a process per call ({CALLS} calls each), p50 (min-max), kvhandler's own cost included:"
    );
    for (name, args) in rpcs {
        // Ping goes to the in-process server too, in the same rotation.
        let with_floor = name == "Ping";
        if with_floor {
            sockets.push(floor.socket());
        }
        let mut samples = alternate_kvhandler(&sockets, args, &vmis);
        let floor_samples = with_floor.then(|| {
            sockets.pop();
            samples.pop().unwrap_or_default()
        });
        let cells: Vec<String> = samples
            .iter()
            .map(|s| format!("{} ms", describe(s, 1)))
            .collect();
        row(&format!("  {name}"), &cells, "");
        if let Some(floor) = floor_samples {
            row(
                "    the floor: a server in this process",
                &[format!("{} ms", describe(&floor, 1))],
                "[answers Ping at once: kvhandler's exec, dial, negotiation, call]",
            );
        }
    }
    kept_connection(&pods, 200);
    let memory: Vec<HashMap<&str, (u64, u64)>> = pods.iter().map(pod_memory).collect();
    let get = |i: usize, role: &str| memory[i].get(role).copied().unwrap_or_default();
    let pair = |(pss, dirty): (u64, u64)| format!("{} / {}", mib(pss), mib(dirty));
    println!("  pod memory with the guest running, PSS / private dirty, MiB:");
    row(
        "  launcher process",
        &(0..pods.len())
            .map(|i| pair(get(i, "launcher")))
            .collect::<Vec<_>>(),
        &format!(
            "[KubeVirt: launcher {KV_LAUNCHER} + monitor {KV_MONITOR} MiB; ours is both in one process; Go's monitor is not run]"
        ),
    );
    row(
        "  libvirt daemon (Debian's libvirtd)",
        &(0..pods.len())
            .map(|i| pair(get(i, "daemon")))
            .collect::<Vec<_>>(),
        &format!("[KubeVirt: virtqemud {KV_VIRTQEMUD} MiB]"),
    );
    row(
        "  virtlogd",
        &(0..pods.len())
            .map(|i| pair(get(i, "virtlogd")))
            .collect::<Vec<_>>(),
        &format!("[KubeVirt: virtlogd {KV_VIRTLOGD} MiB]"),
    );
    if memory.iter().any(|m| m.contains_key("other")) {
        row(
            "  other processes (not QEMU)",
            &(0..pods.len())
                .map(|i| pair(get(i, "other")))
                .collect::<Vec<_>>(),
            "",
        );
    }
    let totals: Vec<(u64, u64)> = (0..pods.len())
        .map(|i| {
            ["launcher", "daemon", "virtlogd", "other"]
                .iter()
                .map(|r| get(i, r))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
        .collect();
    row(
        "  the pod but QEMU",
        &totals.iter().map(|t| pair(*t)).collect::<Vec<_>>(),
        &format!(
            "[KubeVirt: {} MiB for these processes]",
            KV_LAUNCHER + KV_MONITOR + KV_VIRTQEMUD + KV_VIRTLOGD
        ),
    );
    row(
        "  QEMU (192 MiB guest)",
        &(0..pods.len())
            .map(|i| pair(get(i, "qemu")))
            .collect::<Vec<_>>(),
        "[KubeVirt: guest memory + QemuOverhead 50 MiB + per-vCPU/IOThread]",
    );
    for mut pod in pods {
        pod.kill_to_exit();
    }

    // Pod starts, one pod at a time, alternating the order each round.
    let mut ready = vec![Vec::new(); kinds.len()];
    let mut settled = vec![Vec::new(); kinds.len()];
    let mut replies = vec![Vec::new(); kinds.len()];
    let mut running = vec![Vec::new(); kinds.len()];
    let mut exec_running = vec![Vec::new(); kinds.len()];
    let mut kills = vec![Vec::new(); kinds.len()];
    for round in 0..ROUNDS {
        for k in 0..kinds.len() {
            let i = if round % 2 == 0 {
                k
            } else {
                kinds.len() - 1 - k
            };
            let mut pod = Pod::start(&kinds[i]);
            ready[i].push(ms(pod.ready));
            settled[i].push(ms(pod.settled));
            let (reply, run, at) = pod.sync_to_running();
            replies[i].push(reply);
            running[i].push(run);
            exec_running[i].push(ms(at - pod.started));
            kills[i].push(pod.kill_to_exit());
        }
    }
    println!("  pod starts ({ROUNDS} each), p50 (min-max):");
    let cells = |samples: &[Vec<f64>]| -> Vec<String> {
        samples
            .iter()
            .map(|s| format!("{} ms", describe(s, 0)))
            .collect()
    };
    row("  exec -> Ping answers", &cells(&ready), "");
    row(
        "  exec -> the pod's libvirt daemon answers",
        &cells(&settled),
        "[cold: a fresh pod has no capabilities cache]",
    );
    row(
        "  Sync -> Running (notify event)",
        &cells(&running),
        "[once the daemon answers]",
    );
    row("    Sync's reply", &cells(&replies), "");
    row(
        "  exec -> Running",
        &cells(&exec_running),
        "[the rows above end to end: a pod's start as virt-handler sees it]",
    );
    let column = |f: fn(&(f64, f64, f64, usize)) -> f64| -> Vec<Vec<f64>> {
        kills.iter().map(|k| k.iter().map(f).collect()).collect()
    };
    row(
        "  Kill + Delete -> launcher exit",
        &cells(&column(|k| k.2)),
        "",
    );
    row("    Kill's reply", &cells(&column(|k| k.0)), "");
    row(
        "    + Delete's reply",
        &cells(&column(|k| k.1)),
        "[the Delete may fail once the launcher is gone]",
    );
    row(
        "    pod processes alive at the exit (max)",
        &kills
            .iter()
            .map(|k| k.iter().map(|s| s.3).max().unwrap_or(0).to_string())
            .collect::<Vec<_>>(),
        "",
    );
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "  load average at the end: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}
