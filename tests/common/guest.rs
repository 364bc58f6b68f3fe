//! The test guest (scripts/build-test-guest.sh) and launchers that boot it
//! under real libvirt and QEMU, with their own libvirt daemons.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::unprivileged::TestUser;
use super::{Client, Launcher, TempTree, lifecycle, named};

/// Generous deadlines: the guest runs under plain emulation on 2 cores,
/// often beside another test's guest.
pub const BOOT: Duration = Duration::from_secs(120);
pub const STEP: Duration = Duration::from_secs(60);

pub struct GuestImages {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// Builds the test guest once per test binary (the script caches).
/// `VL_TEST_GUEST_BUILT=1`: it was built outside, and is used as it is
/// (scripts/newer-stack.sh runs tests in a root filesystem where the
/// build script's inputs, the host's packages, are not).
pub fn images() -> &'static GuestImages {
    static IMAGES: OnceLock<GuestImages> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = root.join("target/test-guest");
        if std::env::var("VL_TEST_GUEST_BUILT").as_deref() == Ok("1") {
            let images = GuestImages {
                kernel: out.join("vmlinuz"),
                initrd: out.join("initrd.img"),
            };
            assert!(
                images.kernel.is_file() && images.initrd.is_file(),
                "VL_TEST_GUEST_BUILT=1, but {} has no vmlinuz and initrd.img \
                 (scripts/build-test-guest.sh {})",
                out.display(),
                out.display()
            );
            return images;
        }
        let status = Command::new(root.join("scripts/build-test-guest.sh"))
            .arg(&out)
            .status()
            .expect("run scripts/build-test-guest.sh");
        assert!(status.success(), "building the test guest failed");
        GuestImages {
            kernel: out.join("vmlinuz"),
            initrd: out.join("initrd.img"),
        }
    })
}

/// What the test VMI looks like.
#[derive(Clone)]
pub struct GuestOptions {
    pub name: String,
    /// The guest ignores the ACPI power button.
    pub ignore_acpi: bool,
    /// An ext4 image attached as the first virtio disk, mounted at
    /// /mnt/data.
    pub data_disk: Option<PathBuf>,
    pub mac: String,
    pub grace_seconds: Option<u64>,
    pub extra_cmdline: String,
    /// More (disk, volume) pairs, after the data disk.
    pub extra_volumes: Vec<(Value, Value)>,
    /// The NIC's binding and network: QEMU user networking (slirp) unless
    /// a test runs the launcher in a pod network namespace
    /// (tests/network.rs).
    pub interface: Value,
    pub network: Value,
}

impl GuestOptions {
    pub fn new(name: &str) -> GuestOptions {
        GuestOptions {
            name: name.to_string(),
            ignore_acpi: false,
            data_disk: None,
            mac: "52:54:00:7e:57:01".into(),
            grace_seconds: None,
            extra_cmdline: String::new(),
            extra_volumes: Vec::new(),
            interface: json!({"name": "default", "binding": {"name": "slirp"}}),
            network: json!({"name": "default", "pod": {}}),
        }
    }
}

pub fn guest_vmi(opts: &GuestOptions) -> Value {
    let images = images();
    let mut cmdline = format!("console=ttyS0 quiet panic=-1 tg.hostname={}", opts.name);
    if opts.ignore_acpi {
        cmdline.push_str(" tg.acpi=ignore");
    }
    let mut disks = Vec::new();
    let mut volumes = Vec::new();
    if let Some(data) = &opts.data_disk {
        cmdline.push_str(" tg.mount=/dev/vda:/mnt/data");
        disks.push(json!({"name": "data", "disk": {"bus": "virtio"}, "serial": "data1"}));
        volumes.push(json!({"name": "data", "hostDisk": {"path": data, "type": "Disk"}}));
    }
    for (disk, volume) in &opts.extra_volumes {
        disks.push(disk.clone());
        volumes.push(volume.clone());
    }
    if !opts.extra_cmdline.is_empty() {
        cmdline.push(' ');
        cmdline.push_str(&opts.extra_cmdline);
    }
    let mut interface = opts.interface.clone();
    // An empty `mac`: the VMI names none (the launcher picks one).
    if !opts.mac.is_empty() {
        interface["macAddress"] = json!(opts.mac);
    }
    let mut vmi = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": opts.name, "namespace": "e2e"},
        "spec": {
            "domain": {
                "cpu": {"cores": 1},
                "memory": {"guest": "192Mi"},
                "firmware": {"kernelBoot": {
                    "kernelArgs": cmdline,
                    "container": {
                        "image": "local/test-guest",
                        "kernelPath": images.kernel,
                        "initrdPath": images.initrd,
                    }
                }},
                "devices": {
                    "autoattachGraphicsDevice": false,
                    "disks": disks,
                    "interfaces": [interface],
                }
            },
            "networks": [opts.network],
            "volumes": volumes,
        }
    });
    if let Some(grace) = opts.grace_seconds {
        vmi["spec"]["terminationGracePeriodSeconds"] = json!(grace);
    }
    vmi
}

/// A fresh ext4 image of `mib` MiB.
pub fn ext4_image(path: &Path, mib: u64) {
    let file = fs::File::create(path).expect("create image");
    file.set_len(mib << 20).expect("size image");
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(path)
        .status()
        .expect("run mkfs.ext4")
        .success();
    assert!(ok, "mkfs.ext4 failed");
}

/// Starts a launcher with its own libvirt daemons, forced emulation, for
/// VMI e2e/<name>.
pub fn start_qemu_launcher(tree: TempTree, name: &str, extra: &[&str]) -> Launcher {
    start_qemu_launcher_as(None, tree, name, extra)
}

/// The same, run as `user` (non-root mode) when given.
pub fn start_qemu_launcher_as(
    user: Option<&TestUser>,
    tree: TempTree,
    name: &str,
    extra: &[&str],
) -> Launcher {
    start_qemu_launcher_with(user, tree, name, extra, &[])
}

/// As `start_qemu_launcher`, with `env` (`NAME=VALUE`) added to the
/// launcher's environment.
pub fn start_qemu_launcher_env(
    tree: TempTree,
    name: &str,
    extra: &[&str],
    env: &[&str],
) -> Launcher {
    start_qemu_launcher_with(None, tree, name, extra, env)
}

/// As `start_qemu_launcher`, the launcher run by `wrapper` (a command that
/// runs its arguments, e.g. scripts/newer-stack.sh: the other runtime
/// stack's daemons and QEMU).
pub fn start_qemu_launcher_wrapped(
    tree: TempTree,
    name: &str,
    extra: &[&str],
    wrapper: &[String],
) -> Launcher {
    images();
    let mut args: Vec<String> = ["--spawn-libvirt", "--force-emulation", "--name", name]
        .iter()
        .chain(&["--namespace", "e2e"])
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let rust_log = std::env::var("VL_TEST_LOG").unwrap_or_else(|_| "debug".into());
    let mut launcher = Launcher::start_wrapped(tree, wrapper, &args, Some(&rust_log));
    launcher.wait_ready(STEP);
    launcher
}

fn start_qemu_launcher_with(
    user: Option<&TestUser>,
    tree: TempTree,
    name: &str,
    extra: &[&str],
    env: &[&str],
) -> Launcher {
    let images = images();
    if let Some(user) = user {
        user.assert_can_read(&images.kernel);
        user.assert_can_read(&images.initrd);
    }
    let mut args: Vec<String> = [
        "--spawn-libvirt",
        "--force-emulation",
        "--name",
        name,
        "--namespace",
        "e2e",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut launcher = match user {
        Some(user) => Launcher::start_as(user, tree, &args),
        None if env.is_empty() => Launcher::start_in(tree, &args),
        None => {
            // `env` execs the launcher: the same process.
            let wrapper: Vec<String> = std::iter::once("env")
                .chain(env.iter().copied())
                .map(str::to_string)
                .collect();
            let rust_log = std::env::var("VL_TEST_LOG").unwrap_or_else(|_| "debug".into());
            Launcher::start_wrapped(tree, &wrapper, &args, Some(&rust_log))
        }
    };
    launcher.wait_ready(STEP);
    launcher
}

/// A booted guest: launcher, a command client and a subscribed watcher
/// that has seen the domain start and the agent connect.
pub struct Booted {
    pub launcher: Launcher,
    pub client: Client,
    pub watcher: Client,
    pub booted_at: Instant,
}

pub fn boot(tree: TempTree, opts: &GuestOptions, extra: &[&str]) -> Booted {
    boot_as(None, tree, opts, extra)
}

/// `boot`, the launcher run as `user` (non-root mode) when given.
pub fn boot_as(
    user: Option<&TestUser>,
    tree: TempTree,
    opts: &GuestOptions,
    extra: &[&str],
) -> Booted {
    let launcher = start_qemu_launcher_as(user, tree, &opts.name, extra);
    boot_launcher(launcher, guest_vmi(opts))
}

/// As `boot`, with a VMI the test has changed (made with `guest_vmi`).
pub fn boot_vmi(tree: TempTree, name: &str, vmi: Value, extra: &[&str]) -> Booted {
    boot_vmi_env(tree, name, vmi, extra, &[])
}

/// As `boot_vmi`, the launcher run with `env` (`NAME=VALUE`) added to its
/// environment.
pub fn boot_vmi_env(
    tree: TempTree,
    name: &str,
    vmi: Value,
    extra: &[&str],
    env: &[&str],
) -> Booted {
    boot_launcher(start_qemu_launcher_env(tree, name, extra, env), vmi)
}

/// Syncs `vmi` on `launcher` and waits for the guest to boot.
pub fn boot_launcher(launcher: Launcher, vmi: Value) -> Booted {
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({ "vmi": vmi }), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    let booted_at = Instant::now();
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    watcher.wait_event(BOOT, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    Booted {
        launcher,
        client,
        watcher,
        booted_at,
    }
}

/// Runs a shell command in the guest; returns (exit code, stdout).
pub fn guest_sh(client: &mut Client, script: &str) -> (i64, String) {
    let ret = client.ok(
        "guest-exec",
        json!({"command": "/bin/sh", "args": ["-c", script], "timeout_seconds": 30}),
    );
    (
        ret["exit_code"].as_i64().unwrap_or(-1),
        ret["stdout"].as_str().unwrap_or("").to_string(),
    )
}

/// The QEMU processes running domain `domain` (found by their -name).
pub fn qemu_pids(domain: &str) -> Vec<u32> {
    let needle = format!("guest={domain},");
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline);
            if text.contains("qemu-system") && text.contains(&needle) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Waits until no QEMU runs `domain`.
pub fn wait_no_qemu(domain: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !qemu_pids(domain).is_empty() {
        assert!(Instant::now() < deadline, "QEMU for {domain} still running");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls `query-status` until `pred` holds.
pub fn wait_status(
    client: &mut Client,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let status = client.ok("query-status", Value::Null);
        if pred(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{what} not reached: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A prepared target launcher for `opts`, its watcher, and the address
/// prepare-migration-target returned.
pub fn prepared_target(tree: TempTree, opts: &GuestOptions) -> (Launcher, Client, Client, Value) {
    prepared_target_with(tree, opts, &[])
}

pub fn prepared_target_with(
    tree: TempTree,
    opts: &GuestOptions,
    extra: &[&str],
) -> (Launcher, Client, Client, Value) {
    prepared_target_as(None, tree, opts, extra)
}

/// `prepared_target_with`, the launcher run as `user` when given.
pub fn prepared_target_as(
    user: Option<&TestUser>,
    tree: TempTree,
    opts: &GuestOptions,
    extra: &[&str],
) -> (Launcher, Client, Client, Value) {
    let launcher = start_qemu_launcher_as(user, tree, &opts.name, extra);
    prepare_target(launcher, guest_vmi(opts))
}

/// `prepare-migration-target` with `vmi` on a fresh `launcher`: the
/// launcher, a client, a subscribed watcher and the address it returned.
pub fn prepare_target(launcher: Launcher, vmi: Value) -> (Launcher, Client, Client, Value) {
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let ret = client.request_timeout("prepare-migration-target", json!({"vmi": vmi}), STEP);
    let target = ret["return"]["target"].clone();
    assert!(target.is_object(), "prepare-migration-target failed: {ret}");
    assert_eq!(
        client.ok("query-status", Value::Null)["phase"],
        "MigrationTarget"
    );
    (launcher, client, watcher, target)
}

/// What booting the test guest needs: root (the launcher's own libvirt
/// daemons in system mode), QEMU and the guest itself ([`images`]).
pub const REAL_GUEST: &[super::Need] =
    &[super::Need::Root, super::Need::Qemu, super::Need::TestGuest];
