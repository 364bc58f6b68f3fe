//! KubeVirt's side of the launcher, for the tests: `kvhandler` (KubeVirt's
//! own virt-handler client and notify server, built from KubeVirt's code:
//! ../shared/kubevirt/README.md) and a launcher started the way
//! virt-controller starts it in a KubeVirt pod, inside
//! scripts/run-in-pod.sh.
//!
//! `kvhandler` is found at `../shared/kubevirt/kvhandler` beside the
//! repository, or at `VL_KVHANDLER`; a test that needs it fails without
//! it (it is the real client: nothing stands in for it).

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{Value, json};

use super::guest::{GuestOptions, guest_vmi, qemu_pids};
use super::{TempTree, launcher_bin};

/// KubeVirt's virt-handler client as a program.
pub fn kvhandler() -> PathBuf {
    let path = super::needs::kvhandler_path();
    assert!(
        path.is_file(),
        "kvhandler is not at {} (set VL_KVHANDLER): these tests need KubeVirt's client",
        path.display()
    );
    path
}

/// Runs `kvhandler ARGS`, killed after `timeout`; its exit code and the
/// JSON it printed.
pub fn run_kvhandler(args: &[&str], timeout: Duration) -> (i32, Value) {
    let mut child = Command::new(kvhandler())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read while it runs: a large answer does not fit in the pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kvhandler {args:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let json = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("kvhandler {args:?}: {e}: stdout {stdout:?}, stderr {stderr:?}")
    });
    (status.code().unwrap_or(-1), json)
}

/// One call of `kvhandler` on the launcher socket `socket`.
pub fn kv_call(socket: &Path, command: &[&str]) -> (i32, Value) {
    let mut args = vec!["--socket", socket.to_str().unwrap()];
    args.extend_from_slice(command);
    run_kvhandler(&args, Duration::from_secs(30))
}

/// `kvhandler notify-server`: virt-handler's notify server for one share
/// directory, and what it printed (one JSON line per event).
pub struct NotifyServer {
    child: Child,
    lines: Receiver<String>,
    /// Every event taken so far, matched or passed over, in order.
    pub seen: Vec<Value>,
}

impl NotifyServer {
    /// Starts it for a launcher whose share directory is `share_dir`
    /// (created if missing): it links `domain-notify-pipe.sock` there.
    /// `vmi` is the VMI file its store holds, as virt-handler's informer
    /// does: Kubernetes events are recorded only for that VMI.
    pub fn start(share_dir: &Path, vmi: Option<&Path>) -> NotifyServer {
        let mut command = Command::new(kvhandler());
        command.args(["notify-server", "--share-dir", share_dir.to_str().unwrap()]);
        if let Some(vmi) = vmi {
            command.arg("--vmi").arg(vmi);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        NotifyServer {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next event the server printed, or `None` after `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        let event: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the notify server printed {line:?}: {e}"));
        self.seen.push(event.clone());
        Some(event)
    }

    /// Takes events until one satisfies `pred` and returns it; the ones
    /// before it are passed over (and stay in `seen`).
    pub fn wait(&mut self, timeout: Duration, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        let first = self.seen.len();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Some(event) if pred(&event) => return event,
                Some(_) => {}
                None => panic!(
                    "the notify server saw no {what} within {timeout:?}; since the last match: {}",
                    summary(&self.seen[first..])
                ),
            }
        }
    }

    /// Waits for a domain event of `kind` (ADDED, MODIFIED, DELETED)
    /// whose `Status.Status` is `status` and, when given,
    /// `Status.Reason` is `reason`.
    pub fn wait_domain(
        &mut self,
        timeout: Duration,
        kind: &str,
        status: &str,
        reason: Option<&str>,
    ) -> Value {
        let what = format!("{kind} {status}/{}", reason.unwrap_or("*"));
        self.wait(timeout, &what, |e| {
            e["event"] == "domain"
                && e["type"] == kind
                && e["domain"]["Status"]["Status"] == status
                && reason.is_none_or(|r| e["domain"]["Status"]["Reason"] == r)
        })
    }
}

impl Drop for NotifyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Domain events in short: `TYPE Status/Reason`, one per event.
pub fn summary(events: &[Value]) -> String {
    let lines: Vec<String> = events
        .iter()
        .map(|e| match e["event"].as_str() {
            Some("domain") => format!(
                "{} {}/{}{}",
                e["type"].as_str().unwrap_or("?"),
                e["domain"]["Status"]["Status"].as_str().unwrap_or("?"),
                e["domain"]["Status"]["Reason"].as_str().unwrap_or("?"),
                if e["domain"]["ObjectMeta"]["deletionTimestamp"].is_string() {
                    " (deleted)"
                } else {
                    ""
                }
            ),
            _ => e.to_string(),
        })
        .collect();
    format!("[{}]", lines.join(", "))
}

/// The VMI's namespace in these tests.
pub const NAMESPACE: &str = "e2e";

/// The pod's paths as virt-controller renders them (template.go).
pub const POD_SHARE_DIR: &str = "/var/run/kubevirt";
pub const POD_EPHEMERAL_DISK_DIR: &str = "/var/run/kubevirt-ephemeral-disks";
pub const POD_CONTAINER_DISK_DIR: &str = "/var/run/kubevirt/container-disks";

/// The test guest's VMI as virt-handler sends it for the pod: the
/// guest of `opts` with the VMI's uid and no network (a pod without
/// KubeVirt's network set-up: no pod interface).
pub fn pod_vmi(opts: &GuestOptions, uid: &str) -> Value {
    let mut opts = opts.clone();
    opts.extra_cmdline = format!("{} tg.net=none", opts.extra_cmdline)
        .trim()
        .to_string();
    let mut vmi = guest_vmi(&opts);
    vmi["metadata"]["uid"] = json!(uid);
    let devices = &mut vmi["spec"]["domain"]["devices"];
    devices["interfaces"] = json!([]);
    devices["autoattachPodInterface"] = json!(false);
    vmi["spec"]["networks"] = json!([]);
    vmi
}

/// A launcher started as virt-controller starts KubeVirt's in its pod:
/// the binary under test ([`launcher_bin`]) called
/// `virt-launcher-monitor`, with the pod's command line, inside
/// scripts/run-in-pod.sh (a private mount namespace whose /var/run is
/// `TREE/root/run`), driven through `kvhandler` only.
pub struct PodLauncher {
    /// run-in-pod.sh, which passes SIGTERM on and exits with the
    /// launcher's status.
    pub child: Child,
    pub tree: TempTree,
    pub log: PathBuf,
    pub status: Option<i32>,
    pub name: String,
    pub uid: String,
    /// A VMI file naming this launcher's VMI, for the calls that carry
    /// one.
    pub vmi_file: PathBuf,
}

impl PodLauncher {
    /// The share directory, seen from outside the pod, of a launcher whose
    /// tree is `tree`: start the notify server there first.
    pub fn share_dir_of(tree: &TempTree) -> PathBuf {
        tree.path("root/run/kubevirt")
    }

    /// Starts the launcher for VMI e2e/`name` with uid `uid` and
    /// `grace` seconds of termination grace period.
    pub fn start(tree: TempTree, name: &str, uid: &str, grace: u64) -> PodLauncher {
        Self::start_with(tree, name, uid, grace, None, &[])
    }

    /// As [`PodLauncher::start`], in the network namespace `netns` (a
    /// node of its own) when given, with `env` added (`POD_NAME`, ...).
    pub fn start_with(
        tree: TempTree,
        name: &str,
        uid: &str,
        grace: u64,
        netns: Option<&str>,
        env: &[(&str, &str)],
    ) -> PodLauncher {
        Self::start_with_args(tree, name, uid, grace, netns, env, &[])
    }

    /// As [`PodLauncher::start_with`], with `extra` added to the pod's
    /// command line (flags virt-controller may add, such as the agent's
    /// polling intervals).
    pub fn start_with_args(
        tree: TempTree,
        name: &str,
        uid: &str,
        grace: u64,
        netns: Option<&str>,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> PodLauncher {
        let bin = fs::canonicalize(launcher_bin()).expect("the launcher binary");
        // virt-controller's command is /usr/bin/virt-launcher-monitor.
        let monitor = tree.path("virt-launcher-monitor");
        std::os::unix::fs::symlink(&bin, &monitor).unwrap();
        fs::create_dir_all(Self::share_dir_of(&tree)).unwrap();
        let grace = grace.to_string();
        // pkg/virt-controller/services/template.go: the compute
        // container's command and arguments for a root pod on a cluster
        // that allows emulation.
        let pod_args = [
            "--qemu-timeout",
            "287s",
            "--name",
            name,
            "--uid",
            uid,
            "--namespace",
            NAMESPACE,
            "--kubevirt-share-dir",
            POD_SHARE_DIR,
            "--ephemeral-disk-dir",
            POD_EPHEMERAL_DISK_DIR,
            "--container-disk-dir",
            POD_CONTAINER_DISK_DIR,
            "--grace-period-seconds",
            &grace,
            "--hook-sidecars",
            "0",
            "--ovmf-path",
            "/usr/share/OVMF",
            "--disk-memory-limit",
            "2097152000",
            "--hypervisor",
            "kvm",
            "--allow-emulation",
        ];
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/run-in-pod.sh");
        // `ip netns exec` execs the script: the child is still the script.
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(script);
                c
            }
            None => Command::new(script),
        };
        command
            .envs(env.iter().copied())
            .arg(&tree.root)
            .arg("--")
            .arg(&monitor)
            .args(pod_args)
            .args(extra)
            // As virt-controller sets it for a VMI with a log verbosity
            // label: debug logs.
            .env("VIRT_LAUNCHER_LOG_VERBOSITY", "4")
            .env_remove("RUST_LOG");
        Self::spawn(command, tree, name, uid)
    }

    /// KubeVirt's own launcher (`virt-launcher-go`) in its pod, through
    /// its `run-go-launcher.sh` (a private mount namespace whose /var/run
    /// is `TREE/root/run`, as for [`PodLauncher::start_with`]): the other
    /// side of a mixed fleet. In the network namespace `netns` when given
    /// (entered with nsenter: `ip netns exec` remounts /sys, where the
    /// launcher reads its pod's cpuset).
    pub fn start_go(
        tree: TempTree,
        name: &str,
        uid: &str,
        grace: u64,
        netns: Option<&str>,
        env: &[(&str, &str)],
    ) -> PodLauncher {
        let script = super::needs::go_launcher_script();
        Self::start_go_with(tree, name, uid, grace, netns, env, &script, &[])
    }

    /// As [`PodLauncher::start_go`], through `script` (run-go-launcher.sh
    /// or a copy of it), with `extra` added to the launcher's flags.
    #[allow(clippy::too_many_arguments)]
    pub fn start_go_with(
        tree: TempTree,
        name: &str,
        uid: &str,
        grace: u64,
        netns: Option<&str>,
        env: &[(&str, &str)],
        script: &Path,
        extra: &[&str],
    ) -> PodLauncher {
        fs::create_dir_all(Self::share_dir_of(&tree)).unwrap();
        let grace = grace.to_string();
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/var/run/netns/{ns}")).arg(script);
                c
            }
            None => Command::new(script),
        };
        command
            .envs(env.iter().copied())
            .arg(&tree.root)
            .arg("--")
            .args([
                "--qemu-timeout",
                "287s",
                "--name",
                name,
                "--uid",
                uid,
                "--namespace",
                NAMESPACE,
                "--kubevirt-share-dir",
                POD_SHARE_DIR,
                "--ephemeral-disk-dir",
                POD_EPHEMERAL_DISK_DIR,
                "--container-disk-dir",
                POD_CONTAINER_DISK_DIR,
                "--hotplug-disk-dir",
                "/var/run/kubevirt/hotplug-disks",
                "--grace-period-seconds",
                &grace,
                "--hook-sidecars",
                "0",
                "--allow-emulation",
            ])
            .args(extra);
        Self::spawn(command, tree, name, uid)
    }

    fn spawn(mut command: Command, tree: TempTree, name: &str, uid: &str) -> PodLauncher {
        let log = tree.path("launcher.log");
        let log_file = fs::File::create(&log).expect("create log");
        let child = command
            // Its own process group: a failed test can end the whole pod.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("start the pod's launcher");
        let vmi_file = tree.path("vmi-ref.json");
        let reference = json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
        });
        fs::write(&vmi_file, reference.to_string()).unwrap();
        PodLauncher {
            child,
            tree,
            log,
            status: None,
            name: name.to_string(),
            uid: uid.to_string(),
            vmi_file,
        }
    }

    /// `namespace_name`, the libvirt domain's name.
    pub fn domain_name(&self) -> String {
        format!("{NAMESPACE}_{}", self.name)
    }

    pub fn share_dir(&self) -> PathBuf {
        Self::share_dir_of(&self.tree)
    }

    /// virt-handler's socket: `<share>/sockets/launcher-sock`.
    pub fn socket(&self) -> PathBuf {
        self.share_dir().join("sockets/launcher-sock")
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Writes `vmi` where `--vmi` can name it; returns the path.
    pub fn write_vmi(&self, file: &str, vmi: &Value) -> String {
        let path = self.tree.path(file);
        fs::write(&path, vmi.to_string()).unwrap();
        path.to_string_lossy().into_owned()
    }

    /// Waits until `launcher-sock` exists (KubeVirt's readiness: the
    /// rename after a negotiation and a Ping through it).
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.socket().exists() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the launcher exited ({status}) before it was ready; log:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the launcher was not ready within {timeout:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One `kvhandler` call on this launcher: exit code and output.
    pub fn kv(&self, command: &[&str]) -> (i32, Value) {
        self.kv_within(command, Duration::from_secs(90))
    }

    pub fn kv_within(&self, command: &[&str], timeout: Duration) -> (i32, Value) {
        let socket = self.socket();
        let mut args = vec!["--socket", socket.to_str().unwrap()];
        args.extend_from_slice(command);
        run_kvhandler(&args, timeout)
    }

    /// A call that must succeed: its `result`.
    pub fn ok(&self, command: &[&str]) -> Value {
        let (code, out) = self.kv(command);
        assert!(
            code == 0 && out["ok"] == true,
            "kvhandler {command:?} failed ({code}): {out}"
        );
        out["result"].clone()
    }

    /// A call that must fail: its error.
    pub fn refused(&self, command: &[&str]) -> String {
        let (code, out) = self.kv(command);
        assert!(
            code == 1 && out["ok"] == false,
            "kvhandler {command:?} should have failed ({code}): {out}"
        );
        out["error"].as_str().unwrap_or_default().to_string()
    }

    /// A call carrying this launcher's VMI reference (`--vmi`).
    pub fn ok_vmi(&self, command: &str) -> Value {
        let vmi = self.vmi_file.to_string_lossy().into_owned();
        self.ok(&[command, "--vmi", &vmi])
    }

    /// Sends `signal` (`TERM`, `KILL`) to run-in-pod.sh's process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits for the pod's command to exit: the launcher's exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> i32 {
        if let Some(code) = self.status {
            return code;
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let code = status.code().unwrap_or(-1);
                self.status = Some(code);
                return code;
            }
            assert!(
                Instant::now() < deadline,
                "the launcher did not exit within {timeout:?}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PodLauncher {
    fn drop(&mut self) {
        if self.status.is_none() && matches!(self.child.try_wait(), Ok(None)) {
            // As virt-handler ends a pod: kill the domain, delete it
            // (the launcher then exits), else the pod's SIGTERM and at last
            // SIGKILL to its whole process group.
            let vmi = self.vmi_file.to_string_lossy().into_owned();
            let socket = self.socket();
            let socket = socket.to_string_lossy();
            for call in ["kill", "delete"] {
                let _ = std::panic::catch_unwind(|| {
                    run_kvhandler(
                        &["--socket", &socket, call, "--vmi", &vmi],
                        Duration::from_secs(20),
                    )
                });
            }
            let mut ended = false;
            for signal in ["-TERM", "-KILL"] {
                let target = if signal == "-KILL" {
                    // The whole pod: run-in-pod.sh, the launcher, its
                    // daemons.
                    format!("-{}", self.child.id())
                } else {
                    self.child.id().to_string()
                };
                let _ = Command::new("kill")
                    .args([signal, "--", &target])
                    .stderr(Stdio::null())
                    .status();
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = self.child.try_wait() {
                        ended = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if ended {
                    break;
                }
            }
            // QEMU left behind (libvirt starts it in a session of its own).
            for pid in qemu_pids(&self.domain_name()) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        // Daemons of the pod that left its process group (KubeVirt's
        // launcher's virtlogd daemonizes): whatever still runs in the
        // pod's mount namespace, which names the tree.
        for pid in pod_processes(&self.tree.root) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- launcher log ({}) ----\n{}",
                self.log.display(),
                self.log_text()
            );
        }
    }
}

/// The processes whose mounts name `root` (those of a pod's private mount
/// namespace under it).
fn pod_processes(root: &Path) -> Vec<u32> {
    let needle = format!("{}/root/", root.display());
    let me = std::process::id();
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/mountinfo")).is_ok_and(|m| m.contains(&needle))
        })
        .collect()
}
