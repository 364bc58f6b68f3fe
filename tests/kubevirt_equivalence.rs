//! What virt-handler reads from this launcher, field by field against what
//! it reads from KubeVirt's own launcher (`virt-launcher-go`) for the same
//! VMI on the same host. Each launcher runs in a pod of its own (a network
//! namespace laid out as virt-handler leaves it for a masquerade interface,
//! a private mount namespace) and is driven only through `kvhandler`
//! (KubeVirt's cmd-client) with `kvhandler notify-server` listening, one
//! launcher after the other, through the same steps: the test guest
//! started, GetDomain, GetDomainStats, GetGuestInfo, GetUsers and
//! GetFilesystems from its real qemu-ga; paused, unpaused, its filesystems
//! frozen and thawed, shut down by ACPI, deleted; then a second boot killed
//! and deleted. Both sides' answers and notify events are normalized in one
//! place ([`normalize`]: what must differ between two runs) and compared;
//! every remaining difference must be a row of the section "What
//! virt-handler reads" of docs/kubevirt-differences.md, and every row there
//! must still match a difference. Run as root under
//! `flock /work/qemu-tests.lock`.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::guest::{BOOT, REAL_GUEST, STEP, ext4_image, images, wait_no_qemu};
use common::kubevirt::{NotifyServer, PodLauncher};
use common::podnet::run;
use common::{Need, TempTree, require};

const DIFFERENCES_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/kubevirt-differences.md");
/// The section of the doc this test reads (tests/kubevirt_golden.rs reads
/// the domain XML sections).
const SECTION: &str = "What virt-handler reads";

const NAME: &str = "kveq";
const UID: &str = "5c0e7a1d-3b2f-4e6a-8d9c-1f2e3d4c5b6a";
/// virt-controller gives every VMI a firmware UUID; both launchers make it
/// the domain's.
const FIRMWARE_UUID: &str = "7a3e9c1b-2d4f-5a6b-8c7d-9e0f1a2b3c4d";
const MAC: &str = "52:54:00:7e:57:02";
const GRACE: u64 = 30;
/// The agent's polling intervals, flags virt-controller can set too:
/// shorter than the defaults, so that both launchers have polled the agent
/// within the waits below.
/// And KubeVirt's VMStatsCollector feature gate, for GetVMStats.
const AGENT_INTERVALS: [&str; 5] = [
    "--qemu-agent-sys-interval",
    "10s",
    "--qemu-agent-file-interval",
    "10s",
    "--vm-stats-collector",
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    /// KubeVirt's launcher.
    Go,
    /// This one.
    Ours,
}

/// The VMI as virt-handler hands it to the launcher, with KubeVirt's
/// webhook defaults that apply to it (scripts/kubevirt-reference.jq: the
/// CPU model, the machine type, the architecture, features, the memory and
/// CPU status): the test guest from a kernelBoot container, a hostDisk data
/// volume (ext4, mounted by the guest: a filesystem for GetFilesystems), an
/// emptyDisk, and a masquerade interface on the pod network with a fixed
/// MAC; the guest gives its NIC a fixed address (no DHCP, whose timing
/// would show in the interface status).
fn vmi() -> Value {
    let images = images();
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": NAME, "namespace": "e2e", "uid": UID},
        "spec": {
            "terminationGracePeriodSeconds": GRACE,
            "domain": {
                "cpu": {"cores": 1, "model": "host-model"},
                "memory": {"guest": "192Mi"},
                "machine": {"type": "q35"},
                "features": {},
                "firmware": {"uuid": FIRMWARE_UUID, "kernelBoot": {
                    "kernelArgs": format!("console=ttyS0 quiet panic=-1 tg.hostname={NAME} \
                        tg.mount=/dev/vda:/mnt/data tg.net=10.0.2.2/24,10.0.2.1"),
                    "container": {"image": "local/test-guest",
                        "kernelPath": images.kernel, "initrdPath": images.initrd}
                }},
                "devices": {
                    "autoattachGraphicsDevice": false,
                    "interfaces": [{"name": "default", "masquerade": {}, "macAddress": MAC}],
                    "disks": [
                        {"name": "data", "disk": {"bus": "virtio"}, "serial": "data1"},
                        {"name": "scratch", "disk": {"bus": "virtio"}}
                    ]
                }
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [
                {"name": "data", "hostDisk": {"path": "/var/lib/kveq/data.img", "type": "Disk"}},
                {"name": "scratch", "emptyDisk": {"capacity": "16Mi"}}
            ],
            "architecture": "amd64"
        },
        "status": {
            "memory": {"guestAtBoot": "192Mi", "guestCurrent": "192Mi", "guestRequested": "192Mi"},
            "currentCPUTopology": {"cores": 1}
        }
    })
}

/// virt-handler's options for the sync (pkg/virt-handler: its SMBIOS
/// defaults, the cluster's balloon statistics period, the masquerade
/// interface attached as a tap).
fn options() -> Value {
    json!({
        "VirtualMachineSMBios": {"manufacturer": "KubeVirt", "family": "KubeVirt", "product": "None"},
        "MemBalloonStatsPeriod": 10,
        "interfaceDomainAttachment": {"default": "tap"},
    })
}

/// A pod's network namespace as virt-handler's first phase leaves it for a
/// masquerade interface: the pod interface (a veth end stands for it), the
/// bridge `k6t-eth0` with the gateway's address, `tap0` on it. Removed on
/// drop.
struct PodNetwork(String);

impl PodNetwork {
    fn new(tag: &str) -> PodNetwork {
        let ns = format!("vleq-{tag}-{}", std::process::id());
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(std::process::Stdio::null())
            .status();
        run(&["ip", "netns", "add", &ns]);
        let ip = |args: &[&str]| {
            let mut all = vec!["ip", "-n", &ns];
            all.extend_from_slice(args);
            run(&all);
        };
        ip(&["link", "set", "lo", "up"]);
        ip(&[
            "link",
            "add",
            "eth0",
            "address",
            "02:42:0a:00:00:01",
            "type",
            "veth",
            "peer",
            "name",
            "eth0-peer",
        ]);
        ip(&["addr", "add", "10.244.0.10/24", "dev", "eth0"]);
        ip(&["link", "add", "k6t-eth0", "type", "bridge"]);
        ip(&["addr", "add", "10.0.2.1/24", "dev", "k6t-eth0"]);
        ip(&["tuntap", "add", "dev", "tap0", "mode", "tap"]);
        ip(&["link", "set", "tap0", "master", "k6t-eth0"]);
        for link in ["eth0", "eth0-peer", "k6t-eth0", "tap0"] {
            ip(&["link", "set", link, "up"]);
        }
        PodNetwork(ns)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

/// KubeVirt's run-go-launcher.sh gives the launcher a /dev without
/// /dev/net/tun, which QEMU needs to open tap0: a copy beside links to
/// its launcher and configuration that adds it (as
/// scripts/kubevirt-capture.sh does).
fn go_script_with_tun(dir: &Path) -> PathBuf {
    let original = common::needs::go_launcher_script();
    let kv = original.parent().unwrap();
    fs::create_dir_all(dir).unwrap();
    for name in ["virt-launcher-go", "etc"] {
        std::os::unix::fs::symlink(kv.join(name), dir.join(name)).unwrap();
    }
    let text = fs::read_to_string(&original).unwrap();
    let line = "    mkdir /dev/pts /dev/shm\n";
    assert!(
        text.contains(line),
        "{} changed: cannot add /dev/net/tun",
        original.display()
    );
    let patched = text.replace(
        line,
        "    mkdir /dev/pts /dev/shm; mkdir /dev/net; : > /dev/net/tun; \
         mount --bind \"$R/hostdev/net/tun\" /dev/net/tun\n",
    );
    let script = dir.join("run-go-launcher.sh");
    fs::write(&script, patched).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A launcher of `side` in its pod with its notify server. The launcher is
/// dropped (ended as virt-handler ends a pod) before the notify server and
/// the pod's network.
struct Pod {
    launcher: PodLauncher,
    notify: NotifyServer,
    vmi: String,
    options: String,
    domain: String,
    _network: PodNetwork,
}

impl Pod {
    fn start(side: Side, tag: &str) -> Pod {
        let network = PodNetwork::new(tag);
        let tree = TempTree::new(&format!("kveq-{tag}"));
        let kernel_boot = tree.path("root/run/kubevirt/container-disks/kernel-boot");
        fs::create_dir_all(&kernel_boot).unwrap();
        for file in [&images().kernel, &images().initrd] {
            fs::copy(file, kernel_boot.join(file.file_name().unwrap())).unwrap();
        }
        // A hostDisk volume is, in the pod, the host directory of its path
        // mounted at /var/run/kubevirt-private/vmi-disks/<volume>/.
        let data = tree.path("root/run/kubevirt-private/vmi-disks/data");
        fs::create_dir_all(&data).unwrap();
        ext4_image(&data.join("data.img"), 64);
        let vmi_file = tree.path("vmi.json");
        fs::write(&vmi_file, vmi().to_string()).unwrap();
        let options_file = tree.path("options.json");
        fs::write(&options_file, options().to_string()).unwrap();
        let notify = NotifyServer::start(&PodLauncher::share_dir_of(&tree), Some(&vmi_file));
        let env = [("POD_NAME", "virt-launcher-kveq")];
        let netns = Some(network.0.as_str());
        let mut launcher = match side {
            Side::Ours => {
                PodLauncher::start_with_args(tree, NAME, UID, GRACE, netns, &env, &AGENT_INTERVALS)
            }
            Side::Go => {
                let script = go_script_with_tun(&tree.path("go-launcher"));
                PodLauncher::start_go_with(
                    tree,
                    NAME,
                    UID,
                    GRACE,
                    netns,
                    &env,
                    &script,
                    &AGENT_INTERVALS,
                )
            }
        };
        launcher.wait_ready(STEP);
        let domain = launcher.domain_name();
        Pod {
            launcher,
            notify,
            vmi: vmi_file.to_string_lossy().into_owned(),
            options: options_file.to_string_lossy().into_owned(),
            domain,
            _network: network,
        }
    }

    /// A call that must succeed: its result.
    fn ok(&self, command: &[&str]) -> Value {
        self.launcher.ok(command)
    }

    /// A call with the VMI (`--vmi`) that must succeed.
    fn ok_vmi(&self, command: &str) -> Value {
        self.ok(&[command, "--vmi", &self.vmi])
    }

    fn get_domain(&self) -> Value {
        let got = self.ok(&["get-domain"]);
        assert_eq!(got["exists"], true, "GetDomain: {got}");
        got["domain"].clone()
    }

    /// Polls GetDomain until `pred` holds of it; returns it.
    fn domain_when(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let domain = self.get_domain();
            if pred(&domain) {
                return domain;
            }
            assert!(
                Instant::now() < deadline,
                "GetDomain did not show {what} within {timeout:?}: {}",
                domain["Status"]
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Polls a call until `pred` holds of its result; returns it.
    fn call_when(&self, command: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        self.call_with_when(&[command], timeout, pred)
    }

    /// As [`Pod::call_when`], with the command's arguments.
    fn call_with_when(
        &self,
        command: &[&str],
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let (code, out) = self.launcher.kv(command);
            if code == 0 && pred(&out["result"]) {
                return out["result"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "{command:?} did not answer as expected within {timeout:?}: {out}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The events of a step: those up to one satisfying `pred`, then any
    /// that follow within a second of quiet.
    fn step_events(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let first = self.notify.seen.len();
        self.notify.wait(timeout, what, pred);
        while self.notify.next(Duration::from_secs(1)).is_some() {}
        self.since(first)
    }

    /// The events from the `first`th on, after a `before` entry with the
    /// domain of the last event before them (the state the step began in),
    /// if there was one.
    fn since(&self, first: usize) -> Vec<Value> {
        let before = self.notify.seen[..first]
            .iter()
            .rev()
            .find(|e| e["event"] == "domain");
        before
            .map(|e| json!({"event": "before", "domain": e["domain"]}))
            .into_iter()
            .chain(self.notify.seen[first..].iter().cloned())
            .collect()
    }
}

fn is_domain(e: &Value, kind: &str, status: &str, reason: Option<&str>) -> bool {
    e["event"] == "domain"
        && e["type"] == kind
        && e["domain"]["Status"]["Status"] == status
        && reason.is_none_or(|r| e["domain"]["Status"]["Reason"] == r)
}

/// Everything virt-handler read from one launcher, by name: GetDomain at
/// each step, the other calls once, and each step's notify events.
fn observe(side: Side) -> BTreeMap<String, Value> {
    let mut seen = BTreeMap::new();
    let mut events = BTreeMap::new();

    // The first boot: the queries, pause, unpause, freeze, thaw, shutdown
    // and delete.
    let mut pod = Pod::start(side, &format!("{side:?}-a").to_lowercase());
    assert_eq!(
        pod.ok(&["sync", "--vmi", &pod.vmi, "--options", &pod.options]),
        Value::Null
    );
    let first = pod.notify.seen.len();
    pod.notify.wait(BOOT, "Running", |e| {
        is_domain(e, "MODIFIED", "Running", None)
    });
    // What the agent gives once both launchers have polled it: the OS, the
    // guest's addresses on its NIC (its fixed IPv4 address and its IPv6
    // link-local one, which the guest's kernel adds a moment later: a poll
    // in between would see only the first), the data disk's filesystem, a
    // user.
    let running = pod.domain_when("the agent's OS and addresses", BOOT, |d| {
        d["Status"]["OSInfo"]["Id"] != ""
            && d["Status"]["OSInfo"]["Id"].is_string()
            && d["Status"]["Interfaces"].as_array().is_some_and(|i| {
                i.iter().any(|i| {
                    (i["IP"] == "10.0.2.2" || i["Ip"] == "10.0.2.2")
                        && i["IPs"].as_array().is_some_and(|ips| {
                            ips.iter()
                                .any(|ip| ip.as_str().is_some_and(|ip| ip.starts_with("fe80:")))
                        })
                })
            })
    });
    let filesystems = pod.call_when("get-filesystems", BOOT, |r| {
        r["items"]
            .as_array()
            .is_some_and(|i| i.iter().any(|f| f["mountPoint"] == "/mnt/data"))
    });
    let users = pod.call_when("get-users", BOOT, |r| {
        r["items"].as_array().is_some_and(|i| !i.is_empty())
    });
    while pod.notify.next(Duration::from_secs(1)).is_some() {}
    events.insert("start", pod.since(first));
    seen.insert("GetDomain running".to_string(), running);
    // Once the guest's balloon driver has reported (its memory figures
    // come every stats period): before that, either launcher reads them
    // unset, depending only on how long its guest has been up.
    let stats = pod.call_when("get-domain-stats", BOOT, |r| {
        r["stats"]["Memory"]["UnusedSet"] == true
    });
    seen.insert("GetDomainStats".to_string(), stats);
    // KubeVirt's VM statistics: the domain's, and the guest agent's
    // answers that do not change while the guest runs.
    let request = Path::new(&pod.vmi).with_file_name("vm-stats-request.json");
    fs::write(
        &request,
        json!({"domainStats": {}, "guestGetHostName": {}, "guestGetTimezone": {},
               "guestGetOsInfo": {}, "guestGetVcpus": {}, "guestGetMemoryBlockInfo": {}})
        .to_string(),
    )
    .unwrap();
    let vm_stats = pod.call_with_when(
        &["vm-stats", "--request", request.to_str().unwrap()],
        BOOT,
        |r| {
            r["GuestGetHostName"]
                .as_str()
                .is_some_and(|h| !h.is_empty())
        },
    );
    seen.insert("GetVMStats".to_string(), vm_stats);
    seen.insert("GetGuestInfo".to_string(), pod.ok(&["get-guest-info"]));
    seen.insert("GetUsers".to_string(), users);
    seen.insert("GetFilesystems".to_string(), filesystems);

    assert_eq!(pod.ok_vmi("pause"), Value::Null);
    events.insert(
        "pause",
        pod.step_events("Paused", STEP, |e| {
            is_domain(e, "MODIFIED", "Paused", Some("User"))
        }),
    );
    seen.insert("GetDomain paused".to_string(), pod.get_domain());
    assert_eq!(pod.ok_vmi("unpause"), Value::Null);
    events.insert(
        "unpause",
        pod.step_events("Running", STEP, |e| {
            is_domain(e, "MODIFIED", "Running", None)
        }),
    );

    // The freeze status reaches virt-handler in the notify events (and
    // GetGuestInfo); GetDomain's stays empty in KubeVirt's launcher.
    let freeze_event = |status: &'static str| {
        move |e: &Value| {
            e["event"] == "domain" && e["domain"]["Status"]["FSFreezeStatus"]["Status"] == status
        }
    };
    assert_eq!(
        pod.ok(&["freeze", "--vmi", &pod.vmi, "--unfreeze-timeout", "120"]),
        Value::Null
    );
    events.insert(
        "freeze",
        pod.step_events("frozen", STEP, freeze_event("frozen")),
    );
    seen.insert(
        "GetGuestInfo frozen".to_string(),
        pod.call_when("get-guest-info", STEP, |r| r["fsFreezeStatus"] == "frozen"),
    );
    seen.insert("GetDomain frozen".to_string(), pod.get_domain());
    assert_eq!(pod.ok_vmi("unfreeze"), Value::Null);
    events.insert(
        "unfreeze",
        pod.step_events("thawed", STEP, freeze_event("thawed")),
    );
    pod.call_when("get-guest-info", STEP, |r| r["fsFreezeStatus"] == "thawed");

    let first = pod.notify.seen.len();
    assert_eq!(pod.ok_vmi("shutdown"), Value::Null);
    pod.notify.wait(BOOT, "Shutoff/Shutdown", |e| {
        is_domain(e, "MODIFIED", "Shutoff", Some("Shutdown"))
    });
    while pod.notify.next(Duration::from_secs(1)).is_some() {}
    events.insert("shutdown", pod.since(first));
    seen.insert("GetDomain shut off".to_string(), pod.get_domain());
    delete(&mut pod, &mut events, "delete after shutdown");
    drop(pod);

    // The second boot: killed, then deleted.
    let mut pod = Pod::start(side, &format!("{side:?}-b").to_lowercase());
    assert_eq!(
        pod.ok(&["sync", "--vmi", &pod.vmi, "--options", &pod.options]),
        Value::Null
    );
    pod.notify.wait(BOOT, "Running", |e| {
        is_domain(e, "MODIFIED", "Running", None)
    });
    while pod.notify.next(Duration::from_secs(1)).is_some() {}
    assert_eq!(pod.ok_vmi("kill"), Value::Null);
    events.insert(
        "kill",
        pod.step_events("Shutoff/Destroyed", STEP, |e| {
            is_domain(e, "MODIFIED", "Shutoff", Some("Destroyed"))
        }),
    );
    seen.insert("GetDomain killed".to_string(), pod.get_domain());
    delete(&mut pod, &mut events, "delete after kill");
    drop(pod);

    for (step, list) in events {
        seen.insert(format!("events {step}"), Value::Array(list));
    }
    seen
}

/// virt-handler's delete of the VMI's domain: its last event (NoState,
/// NonExistent, with a deletion time) and the launcher's exit status.
fn delete(pod: &mut Pod, events: &mut BTreeMap<&'static str, Vec<Value>>, step: &'static str) {
    let first = pod.notify.seen.len();
    // The launcher may exit before it answers: the call's outcome is not
    // compared, the event and the exit are.
    let _ = pod.launcher.kv(&["delete", "--vmi", &pod.vmi]);
    pod.notify.wait(STEP, "NoState/NonExistent", |e| {
        is_domain(e, "MODIFIED", "NoState", Some("NonExistent"))
    });
    let mut list = pod.since(first);
    let status = pod.launcher.wait_exit(STEP);
    list.push(json!({"exit status": status}));
    events.insert(step, list);
    wait_no_qemu(&pod.domain, Duration::from_secs(10));
}

/// The one place where what must differ between two runs is taken out, so
/// that everything else is compared as it is:
/// - GetDomainStats' counters (CPU time, bytes, requests, memory use) come
///   from two different runs of the guest; their presence (the `*Set`
///   flags), their types and the list of vCPUs, disks and NICs are
///   compared, and so are the values that are the VMI's (memory size,
///   balloon, disk capacity, vCPU state);
/// - the users' login times are the two guests' boot times;
/// - the times in a domain (a delete's, the grace period's start, a
///   migration record's) are when each run did it; whether a time is
///   there is compared;
/// - notify events that repeat the state before them (the same status and
///   reason, also the state the step began in) are folded into it: how
///   many such refreshes a launcher sends, and whether one falls into a
///   step, depends on when its agent polls fell, and virt-handler treats
///   each as the whole state again. A step's sequence of states is
///   compared, and the domain of its last event in full;
/// - a `ShuttingDown` state right before `Shutoff`: QEMU reports the
///   guest's power-off, or libvirt's signal when it destroys the domain,
///   before it exits; whether a notifier reads the state in between
///   depends on how fast QEMU exits;
/// - a modified `Paused/StartingUp` right before `Running`: libvirt starts
///   QEMU's CPUs stopped and then resumes them; whether a notifier reads
///   the domain in between depends on how soon it reads (KubeVirt's
///   launcher was seen both sending it and not).
fn normalize(name: &str, value: &Value) -> Value {
    match name {
        "GetDomainStats" => stats_shape(value, ""),
        // The domain statistics as in GetDomainStats; each guest agent
        // answer is the agent's JSON text, compared as the JSON it is
        // (virt-handler decodes it; the order of its members is the
        // agent's in KubeVirt's launcher).
        "GetVMStats" => {
            let mut value = value.clone();
            value["DomainStats"] = stats_shape(&value["DomainStats"], "");
            if let Some(map) = value.as_object_mut() {
                for (key, answer) in map.iter_mut() {
                    let text = answer.as_str().unwrap_or_default();
                    if key.starts_with("Guest") && text.starts_with('{') {
                        *answer = serde_json::from_str(text).unwrap_or(answer.clone());
                    }
                }
            }
            value
        }
        domain if domain.starts_with("GetDomain ") => replace_keys(value, TIMES, "<time>"),
        "GetUsers" | "GetGuestInfo" | "GetGuestInfo frozen" => {
            replace_keys(value, &["loginTime"], "<login time>")
        }
        events if events.starts_with("events ") => {
            let list = value.as_array().cloned().unwrap_or_default();
            let state = |e: &Value| {
                format!(
                    "{}/{}",
                    e["domain"]["Status"]["Status"].as_str().unwrap_or("?"),
                    e["domain"]["Status"]["Reason"].as_str().unwrap_or("?")
                )
            };
            // (line, state) of each event kept; the state the step began
            // in is the first, and is not shown.
            let mut kept: Vec<(String, String)> = Vec::new();
            let mut last_domain = Value::Null;
            for event in &list {
                let (line, now) = match event["event"].as_str() {
                    Some("before") => {
                        kept.push((String::new(), state(event)));
                        continue;
                    }
                    Some("domain") => {
                        last_domain = event["domain"].clone();
                        let now = state(event);
                        let kind = event["type"].as_str().unwrap_or("?");
                        (format!("{kind} {now}"), now)
                    }
                    Some("k8s") => {
                        let line = format!("k8s {}", event["line"].as_str().unwrap_or("?"));
                        (line.clone(), line)
                    }
                    _ => (event.to_string(), event.to_string()),
                };
                if now.starts_with("Shutoff/")
                    && kept
                        .last()
                        .is_some_and(|(_, s)| s.starts_with("ShuttingDown/"))
                {
                    kept.pop();
                }
                if now.starts_with("Running/")
                    && kept.last().is_some_and(|(line, s)| {
                        line.starts_with("MODIFIED ") && s == "Paused/StartingUp"
                    })
                {
                    kept.pop();
                }
                if kept.last().map(|(_, s)| s) != Some(&now) {
                    kept.push((line, now));
                }
            }
            let sequence: Vec<String> = kept
                .into_iter()
                .map(|(line, _)| line)
                .filter(|line| !line.is_empty())
                .collect();
            json!({
                "sequence": sequence.join(", "),
                "last domain": replace_keys(&last_domain, TIMES, "<time>"),
            })
        }
        _ => value.clone(),
    }
}

/// The members of an `api.Domain` that hold a time.
const TIMES: &[&str] = &[
    "deletionTimestamp",
    "DeletionTimestamp",
    "StartTimestamp",
    "EndTimestamp",
];

/// GetDomainStats' values that are the VMI's, not the run's.
const STABLE_STATS: [&str; 5] = [
    "ActualBalloon",
    "Total",
    "State",
    "Capacity",
    "BackingIndex",
];

/// Numbers replaced by their kind (except [`STABLE_STATS`]); the rest kept.
fn stats_shape(value: &Value, key: &str) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), stats_shape(v, k)))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.iter().map(|v| stats_shape(v, key)).collect()),
        Value::Number(n) if !STABLE_STATS.contains(&key) => {
            json!(if n.is_f64() { "<float>" } else { "<integer>" })
        }
        other => other.clone(),
    }
}

/// `value` with every member named one of `keys` replaced by `with`.
fn replace_keys(value: &Value, keys: &[&str], with: &str) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if keys.contains(&k.as_str()) && !v.is_null() {
                        json!(with)
                    } else {
                        replace_keys(v, keys, with)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(list) => {
            Value::Array(list.iter().map(|v| replace_keys(v, keys, with)).collect())
        }
        other => other.clone(),
    }
}

/// Leaves of `value` by path (`/name/Spec/Devices/Disks[0]/Alias/Name`),
/// each as its JSON text; an empty object or list is a leaf.
fn flatten(value: &Value, at: &str, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                flatten(v, &format!("{at}/{k}"), out);
            }
        }
        Value::Array(list) if !list.is_empty() => {
            for (i, v) in list.iter().enumerate() {
                flatten(v, &format!("{at}[{}]", element_key(v, i)), out);
            }
        }
        leaf => {
            out.insert(at.to_string(), leaf.to_string());
        }
    }
}

/// How a list's element is named in a path: by what identifies it where it
/// has such a thing (a device's alias, a name, a controller's type and
/// index), so that the same element is compared whatever its position;
/// else by its position.
fn element_key(element: &Value, position: usize) -> String {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    if let Some(alias) = text(&element["Alias"]["Name"]).filter(|a| !a.is_empty()) {
        return format!("alias={alias}");
    }
    if let Some(name) = text(&element["Name"]).filter(|n| !n.is_empty()) {
        return format!("name={name}");
    }
    if let (Some(kind), Some(index)) = (text(&element["Type"]), text(&element["Index"])) {
        return format!("type={kind},index={index}");
    }
    position.to_string()
}

/// One path where the two launchers' answers differ: its value on each
/// side, `None` where that side has no such path.
#[derive(Debug, Clone, PartialEq)]
struct Difference {
    path: String,
    go: Option<String>,
    ours: Option<String>,
}

impl Difference {
    /// As a row of the doc's table, to paste and give a reason.
    fn row(&self) -> String {
        let cell = |v: &Option<String>| match v {
            Some(v) => format!("`{v}`"),
            None => "absent".to_string(),
        };
        format!(
            "| `{}` | {} | {} | ... |",
            self.path,
            cell(&self.go),
            cell(&self.ours)
        )
    }
}

fn flat(observed: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, value) in observed {
        flatten(&normalize(name, value), &format!("/{name}"), &mut out);
    }
    out
}

fn differences(go: &BTreeMap<String, String>, ours: &BTreeMap<String, String>) -> Vec<Difference> {
    let mut paths: Vec<&String> = go.keys().chain(ours.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| go.get(*p) != ours.get(*p))
        .map(|p| Difference {
            path: p.clone(),
            go: go.get(p).cloned(),
            ours: ours.get(p).cloned(),
        })
        .collect()
}

/// `pattern` with `*` standing for any run of characters matches all of
/// `text`.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// What a row says one side has at its path.
#[derive(Debug, PartialEq)]
enum Cell {
    /// No such path.
    Absent,
    /// Any value.
    Any,
    /// A value whose JSON text matches this pattern (`*`: any run).
    Value(String),
}

impl Cell {
    fn parse(text: &str) -> Option<Cell> {
        match text.trim() {
            "absent" => Some(Cell::Absent),
            "any" => Some(Cell::Any),
            other => other
                .strip_prefix('`')
                .and_then(|v| v.strip_suffix('`'))
                .map(|v| Cell::Value(v.to_string())),
        }
    }

    fn matches(&self, value: &Option<String>) -> bool {
        match (self, value) {
            (Cell::Absent, None) => true,
            (Cell::Any, Some(_)) => true,
            (Cell::Value(pattern), Some(v)) => glob(pattern, v),
            _ => false,
        }
    }
}

/// One row of the doc's section: `` | `path` | KubeVirt's | ours | why | ``.
#[derive(Debug)]
struct Row {
    line: usize,
    path: String,
    go: Cell,
    ours: Cell,
}

impl Row {
    fn allows(&self, d: &Difference) -> bool {
        glob(&self.path, &d.path) && self.go.matches(&d.go) && self.ours.matches(&d.ours)
    }
}

fn documented_rows() -> Vec<Row> {
    let text =
        fs::read_to_string(DIFFERENCES_DOC).unwrap_or_else(|e| panic!("{DIFFERENCES_DOC}: {e}"));
    let mut rows = Vec::new();
    let mut in_section = false;
    let mut found = false;
    for (index, line) in text.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("## ") {
            in_section = heading.trim() == SECTION;
            found |= in_section;
            continue;
        }
        let Some(row) = line.strip_prefix("| `").filter(|_| in_section) else {
            continue;
        };
        let line = index + 1;
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(
            cells.len() >= 4,
            "{DIFFERENCES_DOC}:{line}: a row needs path, KubeVirt's launcher, this launcher and why"
        );
        let path = cells[0]
            .strip_suffix('`')
            .unwrap_or_else(|| panic!("{DIFFERENCES_DOC}:{line}: the path ends with `"));
        let cell = |text: &str| {
            Cell::parse(text).unwrap_or_else(|| {
                panic!("{DIFFERENCES_DOC}:{line}: a side is `value`, absent or any, not {text:?}")
            })
        };
        let why = cells[3..].join(" | ");
        assert!(
            !why.trim().trim_end_matches('|').trim().is_empty(),
            "{DIFFERENCES_DOC}:{line}: every difference needs its reason"
        );
        rows.push(Row {
            line,
            path: path.to_string(),
            go: cell(cells[1]),
            ours: cell(cells[2]),
        });
    }
    assert!(found, "{DIFFERENCES_DOC} has no section \"## {SECTION}\"");
    rows
}

/// Every difference is a row of the doc, and every row is a difference.
fn check_documented(found: &[Difference], rows: &[Row]) -> Result<(), String> {
    let unlisted: Vec<String> = found
        .iter()
        .filter(|d| !rows.iter().any(|r| r.allows(d)))
        .map(Difference::row)
        .collect();
    let stale: Vec<String> = rows
        .iter()
        .filter(|r| !found.iter().any(|d| r.allows(d)))
        .map(|r| format!("{DIFFERENCES_DOC}:{}: `{}`", r.line, r.path))
        .collect();
    if unlisted.is_empty() && stale.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} difference(s) from KubeVirt's launcher not in \"## {SECTION}\" of {DIFFERENCES_DOC} \
         (fix ours, or add a row with the reason):\n{}\n{} row(s) there that no longer match \
         a difference (remove them):\n{}",
        unlisted.len(),
        unlisted.join("\n"),
        stale.len(),
        stale.join("\n")
    ))
}

#[test]
fn virt_handler_reads_the_same_from_this_launcher_as_from_kubevirts() {
    if !require(&[REAL_GUEST, &[Need::Kvhandler, Need::GoLauncher]].concat()) {
        return;
    }
    let rows = documented_rows();
    let go = observe(Side::Go);
    let ours = observe(Side::Ours);
    // Both sides' answers, for a look when this fails.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubevirt-equivalence");
    fs::create_dir_all(&dir).unwrap();
    for (side, observed) in [("kubevirt", &go), ("ours", &ours)] {
        let text = serde_json::to_string_pretty(observed).unwrap();
        fs::write(dir.join(format!("{side}.json")), text).unwrap();
    }
    let (go, ours) = (flat(&go), flat(&ours));
    // Sanity: both answered the same kind of thing at all.
    for name in ["/GetDomain running/Spec/Name", "/GetDomainStats/stats/Name"] {
        assert_eq!(go.get(name), Some(&format!("\"e2e_{NAME}\"")), "{name}");
    }
    let found = differences(&go, &ours);
    if let Err(e) = check_documented(&found, &rows) {
        panic!("{e}\n(both sides' answers: {})", dir.display());
    }
}

/// The doc's rows parse, and the matching allows exactly what a row says.
#[test]
fn the_docs_rows_parse_and_allow_only_what_they_say() {
    let rows = documented_rows();
    for row in &rows {
        assert_ne!(
            (&row.go, &row.ours),
            (&Cell::Absent, &Cell::Absent),
            "{DIFFERENCES_DOC}:{}: a difference is present on one side at least",
            row.line
        );
    }
    let row = Row {
        line: 0,
        path: "/GetDomain */Spec/Devices/Disks[*]/Driver/Cache".into(),
        go: Cell::Value("\"none\"".into()),
        ours: Cell::Absent,
    };
    let d = |path: &str, go: Option<&str>, ours: Option<&str>| Difference {
        path: path.into(),
        go: go.map(String::from),
        ours: ours.map(String::from),
    };
    let listed = d(
        "/GetDomain running/Spec/Devices/Disks[1]/Driver/Cache",
        Some("\"none\""),
        None,
    );
    assert!(row.allows(&listed));
    assert!(!row.allows(&d(&listed.path, Some("\"writeback\""), None)));
    assert!(!row.allows(&d(&listed.path, Some("\"none\""), Some("\"none\""))));
    assert!(!row.allows(&d("/GetDomainStats/Block[0]/Name", Some("\"none\""), None)));
    assert!(check_documented(std::slice::from_ref(&listed), std::slice::from_ref(&row)).is_ok());
    // A new difference, and a row that no longer differs, both fail.
    let new = d("/GetUsers/items[0]/userName", Some("\"root\""), None);
    let err = check_documented(&[listed, new], std::slice::from_ref(&row)).unwrap_err();
    assert!(err.contains("/GetUsers/items[0]/userName"), "{err}");
    let err = check_documented(&[], &[row]).unwrap_err();
    assert!(err.contains("no longer match"), "{err}");
    // Normalizing keeps what is the VMI's and folds repeated events.
    let stats = json!({"Memory": {"TotalSet": true, "Total": 196608, "RSS": 240960}});
    assert_eq!(
        normalize("GetDomainStats", &stats),
        json!({"Memory": {"TotalSet": true, "Total": 196608, "RSS": "<integer>"}})
    );
    let event = |status: &str| {
        json!({"event": "domain", "type": "MODIFIED",
               "domain": {"ObjectMeta": {}, "Status": {"Status": status, "Reason": "Unknown"}}})
    };
    let before = json!({"event": "before", "domain": event("Running")["domain"]});
    let folded = normalize(
        "events pause",
        &json!([before, event("Running"), event("Paused"), event("Paused")]),
    );
    assert_eq!(folded["sequence"], "MODIFIED Paused/Unknown");
    let folded = normalize(
        "events kill",
        &json!([event("Running"), event("ShuttingDown"), event("Shutoff")]),
    );
    assert_eq!(
        folded["sequence"],
        "MODIFIED Running/Unknown, MODIFIED Shutoff/Unknown"
    );
    let state = |kind: &str, status: &str, reason: &str| {
        json!({"event": "domain", "type": kind,
               "domain": {"ObjectMeta": {}, "Status": {"Status": status, "Reason": reason}}})
    };
    let with_starting = normalize(
        "events start",
        &json!([
            state("ADDED", "Shutoff", "Unknown"),
            state("MODIFIED", "Paused", "StartingUp"),
            state("MODIFIED", "Running", "Unknown")
        ]),
    );
    let without = normalize(
        "events start",
        &json!([
            state("ADDED", "Shutoff", "Unknown"),
            state("MODIFIED", "Running", "Unknown")
        ]),
    );
    assert_eq!(with_starting["sequence"], without["sequence"]);
    assert_eq!(
        without["sequence"],
        "ADDED Shutoff/Unknown, MODIFIED Running/Unknown"
    );
    // A first event that is the paused start stays: it is the ADDED.
    let added_starting = normalize(
        "events start",
        &json!([
            state("ADDED", "Paused", "StartingUp"),
            state("MODIFIED", "Running", "Unknown")
        ]),
    );
    assert_eq!(
        added_starting["sequence"],
        "ADDED Paused/StartingUp, MODIFIED Running/Unknown"
    );
}
