//! The new examples on real QEMU (run under `flock /work/qemu-tests.lock`):
//! each example keeps its devices, features and small volumes, and boots
//! the test guest (direct kernel boot, user networking) instead of the
//! images it names, which are not on this host. Checked from inside the guest and from the
//! host: the TPM is /dev/tpm0 in the guest and its persistent state is
//! under the private dir; dedicated vCPUs run on the host CPUs they are
//! pinned to; default buses, sysprep and two cloud-init volumes are what
//! the domain has. `realtime-numa.json` is not booted: it needs 1Gi
//! hugepages, which these hosts do not have; the Windows example boots
//! without its Hyper-V enlightenments, which need KVM.

mod common;

use std::fs;
use std::path::Path;

use common::examples::*;
use common::guest::*;
use common::*;
use serde_json::{Value, json};

/// Volume sources that name images this host does not have.
const IMAGE_SOURCES: [&str; 5] = [
    "containerDisk",
    "persistentVolumeClaim",
    "dataVolume",
    "ephemeral",
    "hostDisk",
];

/// `examples/<stem>.json`, made bootable here as VMI e2e/<name>.
fn bootable(stem: &str, name: &str) -> Value {
    let mut vmi = example_json(&Path::new(EXAMPLES_DIR).join(format!("{stem}.json")));
    vmi["metadata"] = json!({"name": name, "namespace": "e2e"});
    let images = images();
    let spec = &mut vmi["spec"];
    let domain = &mut spec["domain"];
    let firmware = domain["firmware"].as_object().cloned().unwrap_or_default();
    let mut firmware = Value::Object(firmware);
    // The test kernel is not signed for Secure Boot.
    if firmware["bootloader"]["efi"].is_object() {
        firmware["bootloader"]["efi"]["secureBoot"] = json!(false);
    }
    firmware["kernelBoot"] = json!({
        "kernelArgs": format!("console=ttyS0 quiet panic=-1 tg.hostname={name}"),
        "container": {"image": "local/test-guest", "kernelPath": images.kernel, "initrdPath": images.initrd}
    });
    domain["firmware"] = firmware;
    domain["memory"] = json!({"guest": "192Mi"});
    // Hyper-V enlightenments need KVM; these tests emulate (the converter
    // refuses them under emulation, tested in src/convert/features.rs).
    if let Some(features) = domain["features"].as_object_mut() {
        features.remove("hyperv");
    }
    if let Some(timer) = domain["clock"]["timer"].as_object_mut() {
        timer.remove("hyperv");
    }
    if let Some(resources) = domain["resources"].as_object_mut() {
        for list in ["requests", "limits"] {
            if let Some(list) = resources.get_mut(list).and_then(Value::as_object_mut) {
                list.remove("memory");
            }
        }
    }
    // No pod network namespace here: QEMU user networking, as
    // tests/common/guest.rs uses.
    spec["domain"]["devices"]["interfaces"] =
        json!([{"name": "default", "binding": {"name": "slirp"}}]);
    spec["networks"] = json!([{"name": "default", "pod": {}}]);
    let mut dropped = Vec::new();
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        volumes.retain(|v| {
            let image = IMAGE_SOURCES.iter().any(|s| v.get(s).is_some());
            if image {
                dropped.push(v["name"].as_str().unwrap_or_default().to_string());
            }
            !image
        });
    }
    if let Some(disks) = spec["domain"]["devices"]["disks"].as_array_mut() {
        disks.retain(|d| !dropped.iter().any(|n| d["name"] == n.as_str()));
    }
    vmi
}

/// Boots `vmi` on a launcher of its own; waits for the agent.
fn boot_vmi(tree: TempTree, vmi: &Value, extra: &[&str]) -> Booted {
    let name = vmi["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let launcher = start_qemu_launcher(tree, &name, extra);
    let mut watcher = launcher.client();
    watcher.ok("subscribe", Value::Null);
    let mut client = launcher.client();
    let synced = client.request_timeout("sync", json!({"vmi": vmi}), STEP);
    assert!(synced.get("return").is_some(), "sync failed: {synced}");
    let booted_at = std::time::Instant::now();
    watcher.wait_event(STEP, "Started", lifecycle("Started", "Booted"));
    // OVMF under emulation (SMM, a TPM) takes several times a BIOS boot,
    // and more on a machine busy with other guests.
    let boot = if vmi["spec"]["domain"]["firmware"]["bootloader"]["efi"].is_object() {
        BOOT * 3
    } else {
        BOOT
    };
    watcher.wait_event(boot, "AGENT_CONNECTED", named("AGENT_CONNECTED"));
    Booted {
        launcher,
        client,
        watcher,
        booted_at,
    }
}

fn domain_of(client: &mut Client) -> Value {
    client.ok("query-domain", Value::Null)["spec"].clone()
}

fn stop(mut booted: Booted) {
    booted.client.ok("kill", Value::Null);
    booted.launcher.wait_exit(STEP);
}

#[test]
fn windows11_tpm_example_boots_with_a_tpm_the_guest_sees() {
    if !require(REAL_GUEST) {
        return;
    }
    let vmi = bootable("windows11-tpm", "ex-tpm");
    let tree = TempTree::new("ex-tpm");
    let private = tree.path("private");
    let mut booted = boot_vmi(tree, &vmi, &[]);
    let spec = domain_of(&mut booted.client);
    assert_eq!(spec["devices"]["tpm"][0]["@model"], "tpm-crb", "{spec}");
    assert_eq!(
        spec["devices"]["tpm"][0]["backend"]["@persistent_state"],
        "yes"
    );
    assert_eq!(spec["devices"]["video"][0]["model"]["@type"], "bochs");
    let (code, out) = guest_sh(
        &mut booted.client,
        "ls /dev/tpm0 /dev/tpmrm0 && cat /sys/class/tpm/tpm0/tpm_version_major",
    );
    assert_eq!(code, 0, "the guest has no TPM: {out}");
    assert!(
        out.contains("/dev/tpm0") && out.trim_end().ends_with('2'),
        "{out}"
    );
    // libvirt keeps the persistent state in its swtpm directory, which the
    // launcher's own daemon has under the private dir.
    let uuid = spec["uuid"].as_str().unwrap_or_default().to_string();
    let state = private.join("libvirt/lib/swtpm").join(&uuid);
    assert!(state.is_dir(), "no TPM state at {}", state.display());
    // The domain stops and the launcher exits; the state stays. (Checked
    // before `booted` is dropped, which removes the whole tree.)
    booted.client.ok("kill", Value::Null);
    booted.launcher.wait_exit(STEP);
    assert!(
        state.is_dir(),
        "persistent TPM state removed at {}",
        state.display()
    );
}

/// The host CPUs each vCPU thread of QEMU `pid` may run on.
fn vcpu_affinity(pid: u32) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        if !comm.starts_with("CPU ") {
            continue;
        }
        let status = fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or_default()
            .trim()
            .to_string();
        found.push((comm, allowed));
    }
    found.sort();
    found
}

#[test]
fn dedicated_cpu_example_runs_each_vcpu_on_its_own_host_cpu() {
    if !require(REAL_GUEST) {
        return;
    }
    let vmi = bootable("dedicated-cpu", "ex-pinned");
    let tree = TempTree::new("ex-pinned");
    let cpuset = tree.path("cpuset.cpus");
    fs::write(&cpuset, "0-1\n").expect("write cpuset");
    let cpuset = cpuset.to_string_lossy().into_owned();
    let mut booted = boot_vmi(tree, &vmi, &["--cpuset-file", &cpuset]);
    let spec = domain_of(&mut booted.client);
    let pins = &spec["cputune"]["vcpupin"];
    assert_eq!(pins[0]["@cpuset"], "0", "{spec}");
    assert_eq!(pins[1]["@cpuset"], "1", "{spec}");
    let pids = qemu_pids("e2e_ex-pinned");
    assert_eq!(pids.len(), 1, "{pids:?}");
    let affinity = vcpu_affinity(pids[0]);
    assert_eq!(
        affinity
            .iter()
            .map(|(_, cpus)| cpus.as_str())
            .collect::<Vec<_>>(),
        ["0", "1"],
        "vCPU threads: {affinity:?}"
    );
    let (_, nproc) = guest_sh(&mut booted.client, "grep -c ^processor /proc/cpuinfo");
    assert_eq!(nproc.trim(), "2");
    stop(booted);
}

#[test]
fn examples_with_default_buses_sysprep_and_two_cloud_init_volumes_boot() {
    if !require(REAL_GUEST) {
        return;
    }
    // Default buses: every disk without one is on sata.
    let vmi = bootable("multi-disk-default-buses", "ex-buses");
    let mut booted = boot_vmi(TempTree::new("ex-buses"), &vmi, &[]);
    let spec = domain_of(&mut booted.client);
    let buses: Vec<(String, String)> = spec["devices"]["disk"]
        .as_array()
        .map(|disks| {
            disks
                .iter()
                .map(|d| {
                    (
                        d["alias"]["@name"].as_str().unwrap_or_default().to_string(),
                        d["target"]["@bus"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let bus_of = |alias: &str| {
        buses
            .iter()
            .find(|(a, _)| a == alias)
            .map(|(_, b)| b.clone())
            .unwrap_or_default()
    };
    assert_eq!(bus_of("ua-logs"), "virtio", "{buses:?}");
    for alias in ["ua-empty-drive", "ua-scratch", "ua-cloudinit"] {
        assert_eq!(bus_of(alias), "sata", "{alias}: {buses:?}");
    }
    // The virtio disk is the guest's only disk (the cloud kernel has no AHCI).
    let (code, out) = guest_sh(&mut booted.client, "cat /sys/block/vda/size");
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.trim(), (2u64 << 30 >> 9).to_string());
    stop(booted);

    // Sysprep: the answer file's ISO, labelled as KubeVirt labels it.
    let vmi = bootable("windows-sysprep", "ex-sysprep");
    let tree = TempTree::new("ex-sysprep");
    let answers = tree.path("private/sysprep/sysprep");
    fs::create_dir_all(&answers).expect("sysprep dir");
    fs::write(answers.join("Autounattend.xml"), "<unattend/>\n").expect("answer file");
    let iso = tree.path("private/sysprep-disks/sysprep.iso");
    let booted = boot_vmi(tree, &vmi, &[]);
    let image = fs::read(&iso).unwrap_or_else(|e| panic!("{}: {e}", iso.display()));
    assert_eq!(&image[0x8028..0x8028 + 10], b"unattendCD");
    assert!(image.windows(11).any(|w| w == b"<unattend/>"));
    stop(booted);

    // The newly accepted fields, a TPM and two cloud-init volumes.
    let vmi = bootable("current-api", "ex-api");
    let tree = TempTree::new("ex-api");
    let cloud_init = tree.path("ephemeral/cloud-init-data/e2e/ex-api");
    let mut booted = boot_vmi(tree, &vmi, &[]);
    assert!(cloud_init.join("noCloud.iso").is_file());
    assert!(cloud_init.join("configdrive.iso").is_file());
    let (code, out) = guest_sh(&mut booted.client, "ls /dev/tpm0");
    assert_eq!(code, 0, "{out}");
    stop(booted);
}
