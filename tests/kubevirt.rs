//! KubeVirt mode end to end: the launcher started as virt-controller starts
//! it in a KubeVirt pod (called `virt-launcher-monitor`, the pod's command
//! line, inside scripts/run-in-pod.sh) and driven only by KubeVirt's own
//! virt-handler client, `kvhandler`, with KubeVirt's notify server
//! listening, on the real test guest (real libvirt daemons of the pod's
//! own, QEMU under TCG, the guest's agent). What is asserted is what
//! virt-handler sees: each RPC's answer, the guest's own view through
//! Exec, and the domain events.
//!
//! The binary under test is `VL_LAUNCHER_BIN` when set (the static wire
//! build in scripts/test.sh), else cargo's. `kvhandler` is found at
//! `../shared/kubevirt/kvhandler` or `VL_KVHANDLER`: without it the tests
//! fail. Run as root (run-in-pod.sh makes a mount namespace):
//! `cargo test --test kubevirt -- --test-threads=2`.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::guest::{BOOT, GuestOptions, REAL_GUEST, STEP, ext4_image, wait_no_qemu};
use common::kubevirt::{NotifyServer, POD_SHARE_DIR, PodLauncher, pod_vmi, summary};
use common::unprivileged::{TestUser, process_uid};
use common::{Need, TempTree, expected_backend, require};
use virt_launcher::grpc::frame;
use virt_launcher::grpc::{CallError, Client, Code};

/// The VMI's termination grace period, in the VMI and on the pod's
/// command line (--grace-period-seconds), as virt-controller renders it.
const GRACE: u64 = 30;

/// A launcher in its pod, its VMI and virt-handler's notify server.
struct Pod {
    launcher: PodLauncher,
    notify: NotifyServer,
    /// `--vmi FILE` for the calls that carry the VMI.
    vmi: String,
    domain: String,
}

impl Pod {
    /// Starts the notify server, then the launcher for `vmi` (made with
    /// `pod_vmi`), and waits for the launcher to be ready.
    fn start(tag: &str, name: &str, uid: &str, vmi: &Value) -> Pod {
        Pod::start_in(TempTree::new(tag), name, uid, vmi)
    }

    fn start_in(tree: TempTree, name: &str, uid: &str, vmi: &Value) -> Pod {
        Pod::start_in_as(None, tree, name, uid, vmi)
    }

    /// As [`Pod::start_in`]; with `user`, a non-root pod run as that user
    /// (run-in-pod.sh's `POD_USER`) with virt-controller's
    /// `--run-as-nonroot`.
    fn start_in_as(
        user: Option<&TestUser>,
        tree: TempTree,
        name: &str,
        uid: &str,
        vmi: &Value,
    ) -> Pod {
        // virt-handler's store holds the VMI: it records Kubernetes events
        // only on a VMI it knows.
        let vmi_file = tree.path("vmi.json");
        fs::write(&vmi_file, vmi.to_string()).unwrap();
        let share = PodLauncher::share_dir_of(&tree);
        fs::create_dir_all(&share).unwrap();
        let notify = NotifyServer::start(&share, Some(&vmi_file));
        let mut launcher = match user {
            None => PodLauncher::start(tree, name, uid, GRACE),
            Some(user) => {
                open_to_the_pod_user(&tree, &share);
                let pod_user = format!("{}:{}", user.uid, user.gid);
                PodLauncher::start_with_args(
                    tree,
                    name,
                    uid,
                    GRACE,
                    None,
                    &[("POD_USER", pod_user.as_str())],
                    &["--run-as-nonroot"],
                )
            }
        };
        launcher.wait_ready(STEP);
        let vmi = vmi_file.to_string_lossy().into_owned();
        let domain = launcher.domain_name();
        Pod {
            launcher,
            notify,
            vmi,
            domain,
        }
    }

    fn ok(&self, command: &[&str]) -> Value {
        self.launcher.ok(command)
    }

    /// `COMMAND --vmi <the VMI>`, which must succeed.
    fn ok_vmi(&self, command: &str) -> Value {
        self.ok(&[command, "--vmi", &self.vmi])
    }

    /// GetDomain's api.Domain, which must exist.
    fn domain(&self) -> Value {
        let got = self.ok(&["get-domain"]);
        assert_eq!(got["exists"], true, "{got}");
        got["domain"].clone()
    }

    /// GetDomain's `Status.Status` and `Status.Reason`.
    fn state(&self) -> (String, String) {
        let status = &self.domain()["Status"];
        (
            status["Status"].as_str().unwrap_or_default().to_string(),
            status["Reason"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// Runs `script` with the guest's shell through Exec: (exit code,
    /// stdout).
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

    /// Waits until GuestPing answers: the guest booted and its agent is
    /// connected.
    fn wait_agent(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let (code, out) =
                self.launcher
                    .kv(&["guest-ping", "--domain", &self.domain, "--timeout", "5"]);
            if code == 0 {
                assert_eq!(out["ok"], true, "{out}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the guest agent did not answer within {timeout:?}: {out}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// The guest kernel's boot id, through Exec: a new one at every boot.
    fn boot_id(&self) -> String {
        let (code, out) = self.guest_sh("cat /proc/sys/kernel/random/boot_id");
        assert_eq!(code, 0, "{out}");
        let id = out.trim().to_string();
        assert_eq!(id.len(), 36, "not a boot id: {id:?}");
        id
    }

    /// Waits for the guest to have booted again: its agent back and a boot
    /// id other than `before`.
    fn wait_rebooted(&self, before: &str, what: &str) -> String {
        let deadline = Instant::now() + BOOT;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            self.wait_agent(remaining);
            let (code, out) = self.launcher.kv(&[
                "exec",
                "--domain",
                &self.domain,
                "--timeout",
                "10",
                "--",
                "/bin/cat",
                "/proc/sys/kernel/random/boot_id",
            ]);
            // The old agent may still answer for a moment.
            if code == 0 {
                let id = out["result"]["stdout"].as_str().unwrap().trim().to_string();
                if id != before {
                    return id;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the guest did not boot again (boot id {before}): {out}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Polls GetGuestInfo until `pred` holds (the launcher polls the agent
    /// every few seconds).
    fn guest_info_until(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + STEP;
        loop {
            let info = self.ok(&["get-guest-info"]);
            if pred(&info) {
                return info;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: GetGuestInfo says {info}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Polls a guest shell command until its output satisfies `pred`.
    fn guest_until(&self, script: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + STEP;
        loop {
            let (_, out) = self.guest_sh(script);
            if pred(&out) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: the guest still says {out:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Syncs the VMI and waits for the notify server's ADDED, then a
    /// MODIFIED Running.
    fn sync_to_running(&mut self, uid: &str) {
        self.sync_to_running_with(uid, &[]);
    }

    /// As `sync_to_running`, with more arguments to `sync` (`--options`).
    fn sync_to_running_with(&mut self, uid: &str, more: &[&str]) {
        let mut sync = vec!["sync", "--vmi", &self.vmi];
        sync.extend_from_slice(more);
        assert_eq!(self.ok(&sync), Value::Null);
        let added = self.notify.wait(STEP, "ADDED", |e| {
            e["event"] == "domain" && e["type"] == "ADDED"
        });
        let meta = &added["domain"]["ObjectMeta"];
        assert_eq!(
            (&meta["name"], &meta["namespace"], &meta["uid"]),
            (&json!(self.launcher.name), &json!("e2e"), &json!(uid)),
            "{added}"
        );
        self.notify.wait_domain(STEP, "MODIFIED", "Running", None);
    }

    /// Delete, as virt-handler sends it once the domain stopped: the final
    /// MODIFIED of a domain that no longer exists, then the launcher's
    /// exit, status 0.
    fn delete_and_exit(&mut self) {
        self.delete_and_exit_with(0);
    }

    /// As `delete_and_exit`, for a launcher whose exit status is `status`.
    fn delete_and_exit_with(&mut self, status: i32) {
        assert_eq!(self.ok_vmi("delete"), Value::Null);
        let last = self
            .notify
            .wait_domain(STEP, "MODIFIED", "NoState", Some("NonExistent"));
        let deleted = &last["domain"]["ObjectMeta"]["deletionTimestamp"];
        assert!(deleted.is_string(), "no deletion time: {last}");
        assert_eq!(
            last["domain"]["ObjectMeta"]["name"],
            json!(self.launcher.name)
        );
        assert_eq!(self.launcher.wait_exit(STEP), status);
        // Nothing came after the deletion.
        assert!(
            self.notify.next(Duration::from_millis(500)).is_none(),
            "events after the deletion: {}",
            summary(&self.notify.seen)
        );
        wait_no_qemu(&self.domain, Duration::from_secs(10));
        let log = self.launcher.log_text();
        assert!(!log.contains("panicked"), "{log}");
        // The build under test spoke to libvirt with the backend the run
        // asked for (`VL_LAUNCHER_BACKEND=wire` with the static binary).
        if let Some(backend) = expected_backend() {
            assert!(
                log.contains(&format!("; {backend} backend)")),
                "not the {backend} backend: {log}"
            );
        }
    }
}

/// `vmi` with the hotpluggable volume `name` (a PVC, as KubeVirt mounts
/// it in the pod's hotplug-disks directory) as a disk on `bus`.
fn with_hotplug_volume(vmi: &Value, name: &str, bus: &str) -> Value {
    let mut v = vmi.clone();
    v["spec"]["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": name, "disk": {"bus": bus}}));
    v["spec"]["volumes"].as_array_mut().unwrap().push(json!({
        "name": name,
        "persistentVolumeClaim": {"claimName": name, "hotpluggable": true}
    }));
    v
}

/// The guest's block devices of `blocks` KiB, from /proc/partitions.
fn devices_of_size(partitions: &str, blocks: &str) -> Vec<String> {
    partitions
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[2] == blocks).then(|| f[3].to_string())
        })
        .collect()
}

/// The calls this launcher does not support yet, as kvhandler's commands,
/// the RPC each answers for, and the extra arguments each needs.
const NOT_SUPPORTED: [(&str, &str, &[&str]); 3] = [
    ("sev-info", "GetSEVInfo", &[]),
    ("launch-measurement", "GetLaunchMeasurement", &[]),
    (
        "inject-launch-secret",
        "InjectLaunchSecret",
        &["--options", "EMPTY"],
    ),
];

/// A pod with a real guest, driven by virt-handler's own client.
const KUBEVIRT_POD: &[Need] = &[REAL_GUEST[0], REAL_GUEST[1], REAL_GUEST[2], Need::Kvhandler];

#[test]
fn virt_handler_drives_a_guests_whole_life_through_the_pods_launcher() {
    if !require(KUBEVIRT_POD) {
        return;
    }
    const UID: &str = "6f1c2a8e-1d4b-4c55-9b7e-000000000001";
    let name = "kvlife";
    let tree = TempTree::new("kv-life");
    // A data disk: the agent's freeze has a filesystem to freeze, and
    // GetFilesystems one to list.
    let data = tree.path("data.img");
    ext4_image(&data, 32);
    let mut opts = GuestOptions::new(name);
    opts.data_disk = Some(data);
    opts.grace_seconds = Some(GRACE);
    let vmi = pod_vmi(&opts, UID);
    let mut pod = Pod::start_in(tree, name, UID, &vmi);

    // The client negotiated cmd v1 through CmdInfo, then pinged.
    assert_eq!(pod.ok(&["ping"]), Value::Null);
    let version = pod.ok(&["qemu-version"]);
    assert!(
        version.as_str().unwrap_or_default().starts_with("QEMU "),
        "{version}"
    );
    // No domain yet: GetDomain says so, and so does GetDomainStats.
    assert_eq!(pod.ok(&["get-domain"])["exists"], false);
    assert_eq!(pod.ok(&["get-domain-stats"])["exists"], false);

    // Sync: the domain is defined and started.
    pod.sync_to_running(UID);
    let domain = pod.domain();
    assert_eq!(domain["Status"]["Status"], "Running", "{domain}");
    assert_eq!(domain["Spec"]["Name"], "e2e_kvlife");
    assert_eq!(domain["Spec"]["Metadata"]["KubeVirt"]["UID"], UID);
    assert_eq!(
        (
            &domain["ObjectMeta"]["name"],
            &domain["ObjectMeta"]["namespace"]
        ),
        (&json!(name), &json!("e2e"))
    );
    pod.wait_agent(BOOT);

    // An unchanged VMI synced again changes nothing.
    assert_eq!(pod.ok_vmi("sync"), Value::Null);
    assert_eq!(pod.state().0, "Running");

    let stats = pod.ok(&["get-domain-stats"]);
    assert_eq!(stats["exists"], true, "{stats}");
    assert_eq!(stats["stats"]["Name"], "e2e_kvlife");
    assert!(
        stats["stats"]["Cpu"]["Time"].as_u64().unwrap_or(0) > 0,
        "{stats}"
    );

    // What the guest agent reports.
    let info = pod.guest_info_until("the agent's report", |i| {
        i["guestAgentVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
            && i["hostname"] == name
    });
    assert_eq!(info["fsFreezeStatus"], "thawed", "{info}");
    let users = pod.ok(&["get-users"]);
    assert!(
        users["items"]
            .as_array()
            .is_some_and(|items| items.iter().any(|u| u["userName"] == "root")),
        "root is not logged in: {users}"
    );
    let filesystems = pod.ok(&["get-filesystems"]);
    let items = filesystems["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {filesystems}"));
    assert!(
        items
            .iter()
            .any(|f| f["mountPoint"] == "/mnt/data" && f["fileSystemType"] == "ext4"),
        "the data disk is not listed: {filesystems}"
    );
    let uname = pod.ok(&[
        "exec",
        "--domain",
        &pod.domain,
        "--timeout",
        "10",
        "--",
        "/bin/uname",
        "-a",
    ]);
    assert_eq!(uname["exitCode"], 0, "{uname}");
    let stdout = uname["stdout"].as_str().unwrap();
    assert!(stdout.starts_with(&format!("Linux {name} ")), "{stdout:?}");
    assert_eq!(pod.guest_sh("echo out; exit 3"), (3, "out\n".to_string()));
    assert_eq!(
        pod.ok(&["guest-ping", "--domain", &pod.domain, "--timeout", "5"]),
        Value::Null
    );

    // Pause and unpause: seen in GetDomain and by the notify server.
    assert_eq!(pod.ok_vmi("pause"), Value::Null);
    pod.notify
        .wait_domain(STEP, "MODIFIED", "Paused", Some("User"));
    assert_eq!(pod.state(), ("Paused".to_string(), "User".to_string()));
    assert_eq!(pod.ok_vmi("unpause"), Value::Null);
    pod.notify.wait_domain(STEP, "MODIFIED", "Running", None);
    assert_eq!(pod.state().0, "Running");

    // Freeze: the agent freezes the guest's filesystems (the launcher
    // polls its status), and refuses most commands meanwhile.
    assert_eq!(
        pod.ok(&["freeze", "--vmi", &pod.vmi, "--unfreeze-timeout", "120"]),
        Value::Null
    );
    pod.guest_info_until("frozen", |i| i["fsFreezeStatus"] == "frozen");
    pod.notify.wait(STEP, "a frozen domain", |e| {
        e["type"] == "MODIFIED" && e["domain"]["Status"]["FSFreezeStatus"]["Status"] == "frozen"
    });
    let refused = pod
        .launcher
        .refused(&["exec", "--domain", &pod.domain, "--", "/bin/true"]);
    assert!(refused.contains("frozen"), "{refused}");
    assert_eq!(pod.ok_vmi("unfreeze"), Value::Null);
    pod.guest_info_until("thawed", |i| i["fsFreezeStatus"] == "thawed");
    pod.notify.wait(STEP, "a thawed domain", |e| {
        e["type"] == "MODIFIED" && e["domain"]["Status"]["FSFreezeStatus"]["Status"] == "thawed"
    });
    assert_eq!(
        pod.guest_sh("echo x > /mnt/data/after && sync && cat /mnt/data/after"),
        (0, "x\n".to_string())
    );

    // The syncs of a part of the VMI, and host devices: each a sync of
    // the same VMI here (nothing changed).
    for call in ["sync-cpus", "sync-memory", "hotplug-host-devices"] {
        assert_eq!(pod.ok_vmi(call), Value::Null, "{call}");
    }
    assert_eq!(pod.state().0, "Running");

    // A volume hotplugged through Sync: KubeVirt mounts the volume's image
    // in the pod's hotplug-disks directory, and the VMI names it.
    let hotplug_dir = pod.launcher.share_dir().join("hotplug-disks");
    fs::create_dir_all(&hotplug_dir).unwrap();
    fs::File::create(hotplug_dir.join("hp1.img"))
        .and_then(|f| f.set_len(64 << 20))
        .unwrap();
    let before = pod.guest_sh("cat /proc/partitions").1;
    let plugged = with_hotplug_volume(&vmi, "hp1", "scsi");
    let plugged_file = pod.launcher.write_vmi("vmi-hotplug.json", &plugged);
    assert_eq!(pod.ok(&["sync", "--vmi", &plugged_file]), Value::Null);
    let partitions = pod.guest_until("cat /proc/partitions", "the hotplugged disk", |out| {
        devices_of_size(out, "65536")
            .iter()
            .any(|d| !devices_of_size(&before, "65536").contains(d))
    });
    let disks = pod.domain()["Spec"]["Devices"]["Disks"].clone();
    assert!(
        disks.as_array().unwrap().iter().any(|d| d["Source"]["File"]
            == format!("{POD_SHARE_DIR}/hotplug-disks/hp1.img")
            && d["Target"]["Bus"] == "scsi"),
        "{disks}"
    );
    // Unplugged by the next sync without it.
    let device = devices_of_size(&partitions, "65536")
        .into_iter()
        .find(|d| !devices_of_size(&before, "65536").contains(d))
        .unwrap();
    assert_eq!(pod.ok_vmi("sync"), Value::Null);
    pod.guest_until("cat /proc/partitions", "the unplugged disk", |out| {
        !out.split_whitespace().any(|w| w == device)
    });

    // What is not supported yet says so, naming the call.
    let empty = pod.launcher.write_vmi("empty.json", &json!({}));
    for (command, rpc, extra) in NOT_SUPPORTED {
        let mut args = vec![command, "--vmi", &pod.vmi];
        args.extend(
            extra
                .iter()
                .map(|a| if *a == "EMPTY" { empty.as_str() } else { *a }),
        );
        let error = pod.launcher.refused(&args);
        assert!(
            error.contains(rpc) && error.contains("not supported"),
            "{command}: {error}"
        );
    }
    // GetVMStats without KubeVirt's VMStatsCollector feature gate
    // (--vm-stats-collector, which this pod was not given): a gRPC error,
    // as KubeVirt's launcher answers (tests/kubevirt_equivalence.rs
    // compares its answers with the gate on).
    let error = pod.launcher.refused(&["vm-stats"]);
    assert!(
        error.contains("VMStatsCollector feature gate is not enabled"),
        "{error}"
    );
    // The migration calls on a launcher that runs its guest and takes
    // part in no migration: each says why it cannot.
    let error = pod.launcher.refused(&["migrate", "--vmi", &pod.vmi]);
    assert!(
        error.contains("cannot migrate VMI until migrationState is ready"),
        "{error}"
    );
    let error = pod
        .launcher
        .refused(&["sync-migration-target", "--vmi", &pod.vmi]);
    assert!(
        error.contains("a target must be a fresh launcher"),
        "{error}"
    );
    let error = pod
        .launcher
        .refused(&["finalize-migration", "--vmi", &pod.vmi]);
    assert!(
        error.contains("only a target whose incoming migration completed"),
        "{error}"
    );
    // The day-2 calls: the dirty rate of the running guest, a screenshot
    // refused for a VMI without a display, and a memory dump into the pod.
    let rate = pod.ok(&["dirty-rate"]);
    assert!(rate.as_i64().is_some_and(|r| r >= 0), "dirty rate: {rate}");
    let error = pod.launcher.refused(&["screenshot", "--vmi", &pod.vmi]);
    assert!(
        error.contains("GetScreenshot") && error.contains("no graphics device"),
        "{error}"
    );
    let dump = pod.launcher.share_dir().join("guest.memory.dump");
    assert_eq!(
        pod.ok(&[
            "memory-dump",
            "--vmi",
            &pod.vmi,
            "--path",
            "/var/run/kubevirt/guest.memory.dump",
        ]),
        Value::Null
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let done = pod.launcher.log_text().contains("MEMORY_DUMP_COMPLETED");
        if done || Instant::now() > deadline {
            assert!(done, "no MEMORY_DUMP_COMPLETED within 180 s");
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut magic = [0u8; 4];
    fs::File::open(&dump)
        .and_then(|mut f| f.read_exact(&mut magic))
        .expect("read the memory dump");
    assert_eq!(&magic, b"\x7fELF", "not an ELF core file");
    let size = fs::metadata(&dump).expect("stat the memory dump").len();
    assert!(
        size >= 192 << 20,
        "a dump of {size} bytes for a guest of 192 MiB"
    );
    let _ = fs::remove_file(&dump);
    // libvirt paused the guest while QEMU wrote its memory.
    let deadline = Instant::now() + Duration::from_secs(30);
    while pod.state().0 != "Running" {
        assert!(
            Instant::now() < deadline,
            "not Running again after the dump"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // With no migration, cancelling one and the target pod's clean-up are
    // done at once.
    assert_eq!(pod.ok_vmi("cancel-migration"), Value::Null);
    assert_eq!(pod.ok_vmi("signal-target-pod-cleanup"), Value::Null);
    assert_eq!(pod.state().0, "Running");

    // Reset: a hard reset, the guest boots again.
    let first_boot = pod.boot_id();
    assert_eq!(pod.ok_vmi("reset"), Value::Null);
    let after_reset = pod.wait_rebooted(&first_boot, "reset");
    // Soft reboot: the guest reboots itself.
    assert_eq!(pod.ok_vmi("soft-reboot"), Value::Null);
    pod.wait_rebooted(&after_reset, "soft-reboot");
    assert_eq!(pod.state().0, "Running");

    // Shutdown: the ACPI power button; the test guest powers off.
    assert_eq!(pod.ok_vmi("shutdown"), Value::Null);
    pod.notify
        .wait_domain(BOOT, "MODIFIED", "Shutoff", Some("Shutdown"));
    assert_eq!(pod.state(), ("Shutoff".to_string(), "Shutdown".to_string()));
    // Kill on a domain already off has nothing to do, as KubeVirt's.
    assert_eq!(pod.ok_vmi("kill"), Value::Null);
    pod.delete_and_exit();
    // The guest was never destroyed: every stop was its own.
    assert!(
        !pod.notify
            .seen
            .iter()
            .any(|e| e["domain"]["Status"]["Reason"] == "Destroyed"),
        "{}",
        summary(&pod.notify.seen)
    );
}

#[test]
fn sigterm_powers_the_guest_off_by_acpi_and_the_pod_ends_as_kubevirts() {
    if !require(KUBEVIRT_POD) {
        return;
    }
    const UID: &str = "6f1c2a8e-1d4b-4c55-9b7e-000000000002";
    let name = "kvterm";
    let mut opts = GuestOptions::new(name);
    opts.grace_seconds = Some(GRACE);
    let mut pod = Pod::start("kv-term", name, UID, &pod_vmi(&opts, UID));
    pod.sync_to_running(UID);
    // The guest is up (its ACPI handler with it).
    pod.wait_agent(BOOT);

    // The pod is deleted: the kubelet's SIGTERM, which run-in-pod.sh
    // passes on to the launcher.
    pod.launcher.signal("TERM");
    pod.notify
        .wait_domain(BOOT, "MODIFIED", "Shutoff", Some("Shutdown"));
    assert!(
        !pod.notify
            .seen
            .iter()
            .any(|e| e["domain"]["Status"]["Reason"] == "Destroyed"),
        "the guest was destroyed, not shut down: {}",
        summary(&pod.notify.seen)
    );
    // The launcher waits for virt-handler's Delete before its exit.
    pod.delete_and_exit();
}

/// Reads from `stream` until the peer closes it; false if it is still
/// open after `timeout`.
fn closed_within(stream: &mut UnixStream, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn bad_bytes_on_the_grpc_socket_lose_nothing_and_kill_stops_the_domain() {
    if !require(KUBEVIRT_POD) {
        return;
    }
    const UID: &str = "6f1c2a8e-1d4b-4c55-9b7e-000000000003";
    let name = "kvbad";
    let mut pod = Pod::start("kv-bad", name, UID, &pod_vmi(&GuestOptions::new(name), UID));
    pod.sync_to_running(UID);
    let uuid = pod.domain()["Spec"]["UUID"].clone();
    let socket = pod.launcher.socket();

    // Garbage after the preface: the connection is closed.
    let mut garbage = UnixStream::connect(&socket).unwrap();
    let mut out = frame::PREFACE.to_vec();
    frame::put_settings(&mut out, &[]);
    out.extend((0u32..4096).map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0]));
    garbage.write_all(&out).unwrap();
    assert!(
        closed_within(&mut garbage, Duration::from_secs(15)),
        "the garbage's connection is still open"
    );
    // Half a frame, then a client that hangs up; and half a frame on a
    // connection left open while others are served.
    for hang_up in [true, false] {
        let mut truncated = UnixStream::connect(&socket).unwrap();
        let mut out = frame::PREFACE.to_vec();
        frame::put_settings(&mut out, &[]);
        out.extend_from_slice(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00\x01\x02");
        truncated.write_all(&out).unwrap();
        if !hang_up {
            assert_eq!(pod.ok(&["ping"]), Value::Null);
            assert_eq!(pod.state().0, "Running");
        }
    }
    // A method no service has, and a request that is not the call's
    // message: gRPC errors.
    let mut client = Client::new(&socket);
    match client.call("/kubevirt.cmd.v1.Cmd/NoSuchCall", &[], STEP) {
        Err(CallError::Status(status)) => assert_eq!(status.code, Code::Unimplemented),
        other => panic!("{other:?}"),
    }
    match client.call(
        "/kubevirt.cmd.v1.Cmd/SyncVirtualMachine",
        b"\x0a\xff\xff\xff",
        STEP,
    ) {
        Err(CallError::Status(status)) => {
            assert_eq!(status.code, Code::InvalidArgument, "{}", status.message)
        }
        other => panic!("{other:?}"),
    }
    // A VMI past the message limit, from virt-handler's own client.
    let mut huge = pod_vmi(&GuestOptions::new(name), UID);
    huge["metadata"]["annotations"] = json!({"padding": "p".repeat(5 << 20)});
    let huge = pod.launcher.write_vmi("huge.json", &huge);
    let error = pod.launcher.refused(&["sync", "--vmi", &huge]);
    assert!(error.contains("ResourceExhausted"), "{error}");

    // The launcher still serves, and its domain is still there.
    assert_eq!(pod.ok(&["ping"]), Value::Null);
    let domain = pod.domain();
    assert_eq!(domain["Status"]["Status"], "Running", "{domain}");
    assert_eq!(domain["Spec"]["UUID"], uuid);

    // Kill: destroyed at once.
    assert_eq!(pod.ok_vmi("kill"), Value::Null);
    pod.notify
        .wait_domain(STEP, "MODIFIED", "Shutoff", Some("Destroyed"));
    assert_eq!(
        pod.state(),
        ("Shutoff".to_string(), "Destroyed".to_string())
    );
    // Kill and shutdown of a domain already off have nothing to do, as
    // KubeVirt's.
    assert_eq!(pod.ok_vmi("kill"), Value::Null);
    assert_eq!(pod.ok_vmi("shutdown"), Value::Null);
    pod.delete_and_exit();
}

/// A static x86-64 Linux program that tells QEMU's ISA pvpanic device
/// (I/O port 0x505) the guest panicked, as the kernel's pvpanic driver
/// does: ioperm(0x505, 1, 1); outb(1, 0x505); exit(0).
fn pvpanic_program() -> Vec<u8> {
    #[rustfmt::skip]
    let code: &[u8] = &[
        0xb8, 0xad, 0x00, 0x00, 0x00, // mov eax, 173 (ioperm)
        0xbf, 0x05, 0x05, 0x00, 0x00, // mov edi, 0x505
        0xbe, 0x01, 0x00, 0x00, 0x00, // mov esi, 1
        0xba, 0x01, 0x00, 0x00, 0x00, // mov edx, 1
        0x0f, 0x05,                   // syscall
        0x66, 0xba, 0x05, 0x05,       // mov dx, 0x505
        0xb0, 0x01,                   // mov al, 1 (PVPANIC_PANICKED)
        0xee,                         // out dx, al
        0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60 (exit)
        0x31, 0xff,                   // xor edi, edi
        0x0f, 0x05,                   // syscall
    ];
    const BASE: u64 = 0x40_0000;
    const HEADERS: u64 = 64 + 56;
    let size = HEADERS + code.len() as u64;
    let mut elf = Vec::new();
    // ELF header: 64-bit, little-endian, executable, x86-64.
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\x00");
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes());
    elf.extend_from_slice(&0x3eu16.to_le_bytes());
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&(BASE + HEADERS).to_le_bytes());
    elf.extend_from_slice(&64u64.to_le_bytes());
    elf.extend_from_slice(&0u64.to_le_bytes());
    elf.extend_from_slice(&0u32.to_le_bytes());
    for half in [64u16, 56, 1, 64, 0, 0] {
        elf.extend_from_slice(&half.to_le_bytes());
    }
    // One loadable, readable and executable segment: the whole file.
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&5u32.to_le_bytes());
    for word in [0, BASE, BASE, size, size, 0x1000] {
        elf.extend_from_slice(&word.to_le_bytes());
    }
    elf.extend_from_slice(code);
    elf
}

/// `bytes` as the argument of a shell `printf` that writes them:
/// every byte an octal escape.
fn printf_escaped(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

/// The Kubernetes events virt-handler records on the VMI, as its notify
/// server prints them (`TYPE REASON MESSAGE`).
fn k8s_events(seen: &[Value]) -> Vec<String> {
    seen.iter()
        .filter(|e| e["event"] == "k8s")
        .filter_map(|e| e["line"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn cluster_options_reach_the_guest_and_its_panic_reaches_virt_handler_as_a_k8s_event() {
    if !require(KUBEVIRT_POD) {
        return;
    }
    const UID: &str = "6f1c2a8e-1d4b-4c55-9b7e-000000000004";
    let name = "kvpanic";
    let mut vmi = pod_vmi(&GuestOptions::new(name), UID);
    // The ISA pvpanic device, through which a guest reports its panic.
    vmi["spec"]["domain"]["devices"]["panicDevices"] = json!([{"model": "isa"}]);
    let mut pod = Pod::start("kv-panic", name, UID, &vmi);
    // virt-handler's VirtualMachineOptions, as its options.go fills them
    // from the cluster's configuration.
    let options = pod.launcher.write_vmi(
        "options.json",
        &json!({
            "VirtualMachineSMBios": {"manufacturer": "Acme", "product": "Rocket",
                "version": "2.1", "sku": "R-1", "family": "Rockets"},
            "MemBalloonStatsPeriod": 3,
            "clusterConfig": {"FreePageReportingDisabled": true, "SerialConsoleLogDisabled": true}
        }),
    );
    pod.sync_to_running_with(UID, &["--options", &options]);
    // The domain has them, and so does the guest's firmware.
    let spec = pod.domain()["Spec"].clone();
    let system: Vec<(String, String)> = spec["SysInfo"]["System"]
        .as_array()
        .unwrap_or_else(|| panic!("no SMBIOS system entries: {spec}"))
        .iter()
        .map(|e| {
            (
                e["Name"].as_str().unwrap().to_string(),
                e["Value"].as_str().unwrap().to_string(),
            )
        })
        .filter(|(n, _)| n != "uuid")
        .collect();
    for entry in [
        ("manufacturer", "Acme"),
        ("product", "Rocket"),
        ("version", "2.1"),
        ("sku", "R-1"),
        ("family", "Rockets"),
    ] {
        assert!(
            system.contains(&(entry.0.to_string(), entry.1.to_string())),
            "{entry:?} not in {system:?}"
        );
    }
    let balloon = &spec["Devices"]["Ballooning"];
    assert_eq!(balloon["Stats"]["Period"], 3, "{balloon}");
    assert_eq!(balloon["FreePageReporting"], "off", "{balloon}");
    // The cluster logs no serial console (the VMI does not ask).
    let serial = &spec["Devices"]["Serials"][0];
    assert!(serial.is_object() && serial["Log"].is_null(), "{serial}");
    pod.wait_agent(BOOT);
    let (_, dmi) = pod.guest_sh(
        "cd /sys/class/dmi/id && cat sys_vendor product_name product_version product_sku product_family",
    );
    assert_eq!(dmi, "Acme\nRocket\n2.1\nR-1\nRockets\n");

    // The guest reports a panic as its kernel's pvpanic driver does: the
    // byte 1 written to the device's I/O port. The test guest's kernel has
    // neither the pvpanic driver nor /dev/port, so a tiny program does it.
    // The guest stops at once and Exec may get no answer: what it says is
    // only printed.
    let program = pvpanic_program();
    let script = format!(
        "printf '{}' > /tmp/pvpanic && chmod +x /tmp/pvpanic && /tmp/pvpanic; echo status=$?",
        printf_escaped(&program)
    );
    let (code, out) = pod.launcher.kv(&[
        "exec",
        "--domain",
        &pod.domain,
        "--timeout",
        "10",
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]);
    eprintln!("the panic's Exec: {code} {out}");
    // (The GuestPings that waited for the agent while the guest booted
    // failed, each reported as GuestAgentPingFailed: passed over here.)
    let panicked_from = pod.notify.seen.len();
    let event = pod.notify.wait(STEP, "a Kubernetes event", |e| {
        e["event"] == "k8s"
            && !e["line"]
                .as_str()
                .is_some_and(|l| l.contains("GuestAgentPingFailed"))
    });
    // What KubeVirt's launcher reports for a panic device that gives no
    // details (only Hyper-V's and s390's panics leave them in QEMU's log).
    assert_eq!(
        event["line"], "Warning GuestPanicked GuestPanicked (details unavailable)",
        "{event}"
    );
    // libvirt's default for a panic: the domain is destroyed. The domain
    // notification and the Kubernetes event go out in either order.
    let crashed = |e: &Value| {
        e["event"] == "domain"
            && e["type"] == "MODIFIED"
            && e["domain"]["Status"]["Status"] == "Shutoff"
            && e["domain"]["Status"]["Reason"] == "Crashed"
    };
    if !pod.notify.seen[panicked_from..].iter().any(crashed) {
        pod.notify
            .wait_domain(STEP, "MODIFIED", "Shutoff", Some("Crashed"));
    }

    // A GuestPing of the stopped guest fails, and virt-handler is told.
    let (code, out) = pod
        .launcher
        .kv(&["guest-ping", "--domain", &pod.domain, "--timeout", "5"]);
    assert_ne!(code, 0, "{out}");
    let event = pod
        .notify
        .wait(STEP, "a Kubernetes event", |e| e["event"] == "k8s");
    assert_eq!(
        event["line"],
        format!("Warning GuestAgentPingFailed GuestAgentPing probe failed for VMI {name}"),
        "{event}"
    );
    // The launcher's status for a guest that crashed (man virt-launcher).
    pod.delete_and_exit_with(6);
    // The panic was reported once.
    let panics = k8s_events(&pod.notify.seen)
        .into_iter()
        .filter(|l| l.contains("GuestPanicked"))
        .count();
    assert_eq!(panics, 1, "{}", summary(&pod.notify.seen));
}

/// Waits until the pod's launcher has logged `count` events `event`.
fn wait_logged(pod: &Pod, event: &str, count: usize) {
    let needle = format!("\"event\":\"{event}\"");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let seen = pod.launcher.log_text().matches(&needle).count();
        if seen >= count {
            return;
        }
        assert!(Instant::now() < deadline, "no {count} {event} within 180 s");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `qemu-img ARGS`, which must succeed.
fn qemu_img(args: &[&str]) {
    let out = std::process::Command::new("qemu-img")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "qemu-img {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn virt_handlers_backup_and_redefine_checkpoint_calls_back_up_the_tracked_disk() {
    if !require(KUBEVIRT_POD) {
        return;
    }
    const UID: &str = "6f1c2a8e-1d4b-4c55-9b7e-0000000000b4";
    let name = "kvbackup";
    let tree = TempTree::new("kv-backup");
    let raw = tree.path("data.img");
    fs::File::create(&raw).unwrap().set_len(64 << 20).unwrap();
    let target = tree.path("backups");
    fs::create_dir_all(&target).unwrap();
    let mut opts = GuestOptions::new(name);
    opts.extra_volumes.push((
        json!({"name": "data", "disk": {"bus": "virtio"}, "changedBlockTracking": true}),
        json!({"name": "data", "hostDisk": {"path": raw, "type": "Disk"}}),
    ));
    let vmi = pod_vmi(&opts, UID);
    let options_file = tree.path("options.json");
    let mut pod = Pod::start_in(tree, name, UID, &vmi);
    pod.sync_to_running(UID);
    pod.wait_agent(BOOT);
    let call = |options: Value| -> (i32, Value) {
        fs::write(&options_file, options.to_string()).unwrap();
        let file = options_file.to_str().unwrap();
        pod.launcher
            .kv(&["backup", "--vmi", &pod.vmi, "--options", file])
    };

    // A full push backup, named and placed as KubeVirt's launcher does.
    pod.guest_sh("dd if=/dev/urandom of=/dev/vda bs=1M count=8 oflag=direct conv=fsync");
    let full = json!({"backupName": "kvb", "cmd": "Start", "mode": "Push",
        "backupStartTime": "2026-12-02T05:00:00Z", "targetPath": target});
    let (code, out) = call(full.clone());
    assert_eq!((code, &out["ok"]), (0, &json!(true)), "{out}");
    wait_logged(&pod, "BACKUP_COMPLETED", 1);
    let checkpoint = "kvb-2026-12-02_05-00-00";
    let full_file = target
        .join(name)
        .join(checkpoint)
        .join(format!("{checkpoint}-data.qcow2"));
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    // The guest is idle: the backup is its disk.
    qemu_img(&[
        "compare",
        "-f",
        "raw",
        "-F",
        "qcow2",
        &s(&raw),
        &s(&full_file),
    ]);
    // The same backup again is refused: it ran.
    let (code, out) = call(full);
    assert_eq!(code, 1, "{out}");
    assert!(
        out["error"].as_str().unwrap().contains("already executed"),
        "{out}"
    );

    // An incremental since it: over the full one, the disk now.
    pod.guest_sh("dd if=/dev/urandom of=/dev/vda bs=1M seek=32 count=1 oflag=direct conv=fsync");
    let (code, out) = call(json!({"backupName": "kvi", "cmd": "Start", "mode": "Push",
        "backupStartTime": "2026-12-02T05:10:00Z", "targetPath": target,
        "incremental": checkpoint, "skipQuiesce": true}));
    assert_eq!((code, &out["ok"]), (0, &json!(true)), "{out}");
    wait_logged(&pod, "BACKUP_COMPLETED", 2);
    let inc_file = target
        .join(name)
        .join("kvi-2026-12-02_05-10-00")
        .join("kvi-2026-12-02_05-10-00-data.qcow2");
    assert!(fs::metadata(&inc_file).unwrap().len() < fs::metadata(&full_file).unwrap().len() / 2);
    qemu_img(&[
        "rebase",
        "-u",
        "-F",
        "qcow2",
        "-b",
        &s(&full_file),
        &s(&inc_file),
    ]);
    qemu_img(&[
        "compare",
        "-f",
        "raw",
        "-F",
        "qcow2",
        &s(&raw),
        &s(&inc_file),
    ]);

    // Abort of a backup that ended, and of an unknown one.
    let (code, out) = call(json!({"backupName": "kvi", "cmd": "Abort",
        "backupStartTime": "2026-12-02T05:10:00Z"}));
    assert_eq!(code, 1, "{out}");
    assert!(
        out["error"].as_str().unwrap().contains("already completed"),
        "{out}"
    );
    // The TLS export of a pull backup is not offered.
    let (code, out) = call(json!({"backupName": "kvi", "cmd": "Export", "mode": "Pull"}));
    assert_eq!(code, 1, "{out}");
    assert!(
        out["error"].as_str().unwrap().contains("not supported"),
        "{out}"
    );

    // RedefineCheckpoint: a checkpoint whose bitmap the image has is
    // redefined; one no image has is invalid.
    let checkpoint_file = tree_path(&options_file, "checkpoint.json");
    let redefine = |body: Value| -> (i32, Value) {
        fs::write(&checkpoint_file, body.to_string()).unwrap();
        let file = checkpoint_file.to_str().unwrap();
        pod.launcher.kv(&[
            "redefine-checkpoint",
            "--vmi",
            &pod.vmi,
            "--checkpoint",
            file,
        ])
    };
    let (code, out) = redefine(json!({"name": "kvi-2026-12-02_05-10-00",
        "creationTime": "2026-12-02T05:10:00Z"}));
    assert_eq!((code, &out["ok"]), (0, &json!(true)), "{out}");
    let (code, out) = redefine(json!({"name": "ghost"}));
    assert_eq!(code, 1, "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("failed to redefine checkpoint ghost"),
        "{out}"
    );
    assert_eq!(pod.state().0, "Running");
}

/// `file` beside `beside`.
fn tree_path(beside: &std::path::Path, file: &str) -> std::path::PathBuf {
    beside.with_file_name(file)
}

/// A small tmpfs, unmounted when dropped.
struct SmallTmpfs(std::path::PathBuf);

impl SmallTmpfs {
    fn mount(tag: &str, size: &str) -> SmallTmpfs {
        let dir = std::env::temp_dir().join(format!("vl-{tag}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs on {}", dir.display());
        SmallTmpfs(dir)
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_full_volume_pauses_the_guest_and_virt_handler_hears_which_as_an_io_error() {
    if !require(KUBEVIRT_POD) {
        return;
    }
    const UID: &str = "6f1c2a8e-1d4b-4c55-9b7e-0000000000e0";
    let name = "kvioerror";
    // A 64 MiB sparse disk on 4 MiB of storage: the guest fills it.
    let small = SmallTmpfs::mount("kv-ioerror-storage", "4m");
    let raw = small.0.join("data.img");
    fs::File::create(&raw).unwrap().set_len(64 << 20).unwrap();
    let mut opts = GuestOptions::new(name);
    opts.extra_volumes.push((
        // tmpfs has no O_DIRECT, which cache none needs.
        json!({"name": "data", "disk": {"bus": "virtio"}, "cache": "writethrough"}),
        json!({"name": "data", "hostDisk": {"path": raw, "type": "Disk"}}),
    ));
    let vmi = pod_vmi(&opts, UID);
    let mut pod = Pod::start("kv-ioerror", name, UID, &vmi);
    pod.sync_to_running(UID);
    pod.wait_agent(BOOT);
    let (_, partitions) = pod.guest_sh("cat /proc/partitions");
    let devices = devices_of_size(&partitions, "65536");
    assert_eq!(devices.len(), 1, "the 64 MiB disk: {partitions}");

    // Writing past what the storage holds: QEMU stops the guest
    // (error_policy stop, KubeVirt's default) and libvirt names the disk.
    let (code, out) = pod.guest_sh(&format!(
        "(dd if=/dev/urandom of=/dev/{} bs=1M count=16 oflag=direct >/dev/null 2>&1 &); echo started",
        devices[0]
    ));
    assert_eq!((code, out.trim()), (0, "started"));
    let event = pod.notify.wait(STEP, "the IOerror event", |e| {
        e["event"] == "k8s" && e["line"].as_str().is_some_and(|l| l.contains("IOerror"))
    });
    // What KubeVirt's launcher reports, naming the VMI's volume.
    assert_eq!(
        event["line"], "Warning IOerror VM Paused due to not enough space on volume: data",
        "{event}"
    );
    let paused = |e: &Value| {
        e["event"] == "domain"
            && e["domain"]["Status"]["Status"] == "Paused"
            && e["domain"]["Status"]["Reason"] == "IOError"
    };
    if !pod.notify.seen.iter().any(paused) {
        pod.notify
            .wait_domain(STEP, "MODIFIED", "Paused", Some("IOError"));
    }
    assert_eq!(pod.state(), ("Paused".to_string(), "IOError".to_string()));
    // Once for the pause, not again on the next domain reads.
    std::thread::sleep(Duration::from_secs(2));
    pod.domain();
    let io_errors = k8s_events(&pod.notify.seen)
        .into_iter()
        .filter(|l| l.contains("IOerror"))
        .count();
    assert_eq!(io_errors, 1, "{}", summary(&pod.notify.seen));

    assert_eq!(pod.ok_vmi("kill"), Value::Null);
    pod.notify
        .wait_domain(STEP, "MODIFIED", "Shutoff", Some("Destroyed"));
    pod.delete_and_exit();
}

/// KubeVirt's default pod: not root. The launcher, run as an unprivileged
/// user with virt-controller's `--run-as-nonroot`, starts its libvirt
/// daemons itself in libvirt's session mode, as KubeVirt's non-root
/// launcher does, and virt-handler's client drives the guest through them.
#[test]
fn a_non_root_pod_starts_session_daemons_and_runs_its_guest_as_its_user() {
    if !require(KUBEVIRT_POD) {
        return;
    }
    const UID: &str = "6f1c2a8e-1d4b-4c55-9b7e-000000000009";
    let name = "kvnonroot";
    let user = TestUser::create("kvnr");
    let mut opts = GuestOptions::new(name);
    opts.grace_seconds = Some(GRACE);
    let tree = TempTree::new("kv-nonroot");
    let mut pod = Pod::start_in_as(Some(&user), tree, name, UID, &pod_vmi(&opts, UID));
    pod.sync_to_running(UID);
    pod.wait_agent(BOOT);
    assert_eq!(pod.state().0, "Running");
    // QEMU and the daemons run as the pod's user.
    let qemu = common::guest::qemu_pids(&pod.domain);
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    assert_eq!(process_uid(qemu[0]), Some(user.uid), "QEMU {}", qemu[0]);
    // Its session daemon answers virt-handler's calls on the guest.
    let (code, out) = pod.launcher.kv(&[
        "exec",
        "--domain",
        &pod.domain,
        "--timeout",
        "10",
        "--",
        "/bin/cat",
        "/proc/uptime",
    ]);
    assert_eq!((code, &out["result"]["exitCode"]), (0, &json!(0)), "{out}");
    assert_eq!(pod.ok_vmi("kill"), Value::Null);
    pod.notify
        .wait_domain(STEP, "MODIFIED", "Shutoff", Some("Destroyed"));
    pod.delete_and_exit();
    wait_no_qemu(&pod.domain, STEP);
}

/// What a non-root pod's user must reach, as a cluster gives it: the pod's
/// tree (run-in-pod.sh gives it the pod's root) and virt-handler's notify
/// socket (the handler makes it the pod's).
fn open_to_the_pod_user(tree: &TempTree, share: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&tree.root, fs::Permissions::from_mode(0o755)).unwrap();
    let pipe = share.join("domain-notify-pipe.sock");
    let deadline = Instant::now() + STEP;
    let real = loop {
        match fs::canonicalize(&pipe) {
            Ok(real) => break real,
            Err(e) => assert!(Instant::now() < deadline, "{}: {e}", pipe.display()),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let opened = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(real.parent().unwrap())
        .status()
        .unwrap();
    assert!(opened.success());
}
