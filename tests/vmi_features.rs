//! What a user sees of issue 14's VMI handling through the socket, on
//! libvirt's test driver: KubeVirt's defaults in the defined domain,
//! dedicated CPUs pinned to the CPUs of `--cpuset-file`, fields without
//! effect logged at debug level, and the refusals that come before libvirt.
//! (tests/examples_qemu.rs boots the new examples on real QEMU.)

mod common;

use std::fs;

use common::*;
use serde_json::{Value, json};

const T: std::time::Duration = std::time::Duration::from_secs(30);

/// The demo VMI with `domain` merged into `spec.domain`.
fn vmi_with(domain: Value) -> Value {
    let mut vmi = demo_vmi();
    if let (Some(target), Some(patch)) = (vmi["spec"]["domain"].as_object_mut(), domain.as_object())
    {
        for (key, value) in patch {
            target.insert(key.clone(), value.clone());
        }
    }
    vmi
}

/// The domain as `query-domain` returns it (libvirt's live XML, parsed).
fn domain_spec(client: &mut Client) -> Value {
    client.ok("query-domain", Value::Null)["spec"].clone()
}

#[test]
fn dedicated_cpus_are_pinned_to_the_cpus_of_the_cpuset_file() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("cpuset");
    let cpuset = tree.path("cpuset.cpus");
    fs::write(&cpuset, "2-3\n").expect("write cpuset");
    let mut launcher = Launcher::start_test(&["--cpuset-file", &cpuset.to_string_lossy()]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let pinned = vmi_with(json!({"cpu": {"cores": 2, "dedicatedCpuPlacement": true}}));
    c.ok("sync", json!({"vmi": pinned}));
    let spec = domain_spec(&mut c);
    let pins: Vec<(u64, String)> = spec["cputune"]["vcpupin"]
        .as_array()
        .map(|pins| {
            pins.iter()
                .map(|p| {
                    (
                        p["@vcpu"].as_u64().unwrap_or(99),
                        p["@cpuset"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(pins, [(0, "2".to_string()), (1, "3".to_string())], "{spec}");
    assert_eq!(spec["features"]["kvm"]["hint-dedicated"]["@state"], "on");
}

#[test]
fn dedicated_cpus_that_do_not_fit_are_refused_naming_the_cpuset() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("cpuset-small");
    let cpuset = tree.path("cpuset.cpus");
    fs::write(&cpuset, "2\n").expect("write cpuset");
    let missing = tree.path("no-such-cpuset");
    let mut small = Launcher::start_test(&["--cpuset-file", &cpuset.to_string_lossy()]);
    small.wait_ready(T);
    let mut c = small.client();
    let pinned = vmi_with(json!({"cpu": {"cores": 2, "dedicatedCpuPlacement": true}}));
    let (class, desc) = c.err_class("sync", json!({"vmi": pinned.clone()}));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with("arguments.vmi.spec.domain.cpu.dedicatedCpuPlacement: 2 vCPUs do not fit the launcher's cpuset 2:"),
        "{desc}"
    );
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );

    let mut unreadable = Launcher::start_test(&["--cpuset-file", &missing.to_string_lossy()]);
    unreadable.wait_ready(T);
    let (class, desc) = unreadable
        .client()
        .err_class("sync", json!({"vmi": pinned}));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.contains("which is not known: cannot read ") && desc.contains("no-such-cpuset"),
        "{desc}"
    );
}

#[test]
fn kubevirt_defaults_show_in_the_defined_domain() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(&[Need::Program("qemu-img")]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let mut vmi = vmi_with(json!({"devices": {
        "autoattachGraphicsDevice": false,
        "disks": [{"name": "data"}, {"name": "media", "cdrom": {}}],
        "watchdog": {"name": "wd"},
        "tpm": {}}}));
    vmi["spec"]["volumes"] = json!([{"name": "data", "emptyDisk": {"capacity": "64Mi"}}]);
    c.ok("sync", json!({"vmi": vmi}));
    let spec = domain_spec(&mut c);
    let disks = spec["devices"]["disk"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let targets: Vec<(String, bool)> = disks
        .iter()
        .map(|d| {
            (
                d["target"]["@bus"].as_str().unwrap_or_default().to_string(),
                d.get("readonly").is_some(),
            )
        })
        .collect();
    // No bus given: sata, as KubeVirt's amd64 defaults; a cdrom read-only.
    assert_eq!(
        targets,
        [("sata".to_string(), false), ("sata".to_string(), true)],
        "{spec}"
    );
    assert_eq!(spec["devices"]["tpm"][0]["@model"], "tpm-crb");
    let watchdog = &spec["devices"]["watchdog"];
    let watchdog = watchdog.get(0).unwrap_or(watchdog);
    assert_eq!(watchdog["@model"], "i6300esb");
    assert_eq!(watchdog["@action"], "reset");
    let system: Vec<(String, String)> = spec["sysinfo"]["system"]["entry"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    (
                        e["@name"].as_str().unwrap_or_default().to_string(),
                        e["$text"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        system.contains(&("manufacturer".to_string(), "KubeVirt".to_string())),
        "{system:?}"
    );
}

#[test]
fn fields_without_effect_are_logged_and_refusals_come_before_libvirt() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    if !require(&[Need::Program("qemu-img")]) {
        return;
    }
    let mut launcher = Launcher::start_test(&[]);
    launcher.wait_ready(T);
    let mut c = launcher.client();

    let mut hooked = demo_vmi();
    hooked["metadata"]["annotations"] =
        json!({"hooks.kubevirt.io/hookSidecars": "[{\"image\": \"registry/hook:v1\"}]"});
    // A launcher started without --hook-sidecars has none to run it
    // through: the sync is refused before anything is defined.
    let (class, desc) = c.err_class("sync", json!({"vmi": hooked}));
    assert_eq!(class, "Unavailable");
    assert!(
        desc.starts_with("sync: metadata.annotations.hooks.kubevirt.io/hookSidecars: the VMI names 1 hook sidecar(s), but 0 answered when the launcher started"),
        "{desc}"
    );
    let mut paused = demo_vmi();
    paused["spec"]["startStrategy"] = json!("Paused");
    let (class, desc) = c.err_class("sync", json!({"vmi": paused}));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with(
            "arguments.vmi.spec.startStrategy: Paused needs a driver that can start a domain paused"
        ),
        "{desc}"
    );
    let mut container_path = demo_vmi();
    container_path["spec"]["volumes"] =
        json!([{"name": "share", "containerPath": {"path": "/data"}}]);
    let (class, desc) = c.err_class("sync", json!({"vmi": container_path}));
    assert_eq!(class, "InvalidArgument");
    // A container's directory is shared through virtiofs only: without a
    // filesystem of its name, the volume is refused.
    assert!(
        desc.starts_with(
            "arguments.vmi.spec.volumes[0]: containerPath volume \"share\" needs a filesystem of the same name"
        ),
        "{desc}"
    );
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );

    let mut accepted = demo_vmi();
    accepted["spec"]["serviceAccountName"] = json!("builder");
    accepted["spec"]["domain"]["memory"]["reservedOverhead"] = json!({"addedOverhead": "64Mi"});
    // A disk's tag without a ConfigDrive has nowhere to go.
    accepted["spec"]["domain"]["devices"]["disks"] = json!([{"name": "scratch", "tag": "data"}]);
    accepted["spec"]["volumes"] = json!([{"name": "scratch", "emptyDisk": {"capacity": "16Mi"}}]);
    // disableHotplug changes the domain (no hotplug SCSI controller).
    accepted["spec"]["domain"]["devices"]["disableHotplug"] = json!(true);
    c.ok("sync", json!({"vmi": accepted}));
    let log = launcher.log_text();
    for path in [
        "spec.serviceAccountName",
        "spec.domain.memory.reservedOverhead",
        "spec.domain.devices.disks[0].tag",
    ] {
        assert!(
            log.contains(&format!(
                "convert: {path} is accepted; it does not change the domain"
            )),
            "{path} not logged:\n{log}"
        );
    }
    assert!(
        !log.contains("disableHotplug is accepted"),
        "disableHotplug logged as without effect:\n{log}"
    );
    let xml = c.ok("query-domain", json!({"fields": ["xml"]}))["xml"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !xml.contains("type='scsi'") && !xml.contains("type=\"scsi\""),
        "{xml}"
    );
}

/// `autoattachVSOCK` needs the host's vhost-vsock device: without it (this
/// machine's kernel has none, so `--vhost-vsock-device` names a path that
/// is not there) the sync is refused before anything is defined, naming the
/// device; with it the domain has the vsock with the CID of the VMI's
/// status, and without that CID the VMI is refused naming the field.
#[test]
fn vsock_needs_the_hosts_device_and_the_cid_of_the_vmis_status() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("vsock");
    let missing = tree.path("no-vhost-vsock");
    let mut launcher = Launcher::start_test(&["--vhost-vsock-device", &missing.to_string_lossy()]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let mut vsock = demo_vmi();
    vsock["spec"]["domain"]["devices"]["autoattachVSOCK"] = json!(true);
    vsock["status"] = json!({"phase": "Scheduled", "VSOCKCID": 1234});
    let (class, desc) = c.err_class("sync", json!({"vmi": vsock.clone()}));
    assert_eq!(class, "Unavailable");
    assert!(
        desc.starts_with(&format!(
            "sync: spec.domain.devices.autoattachVSOCK needs the host's {} (",
            missing.display()
        )) && desc.contains("load the kernel module vhost_vsock"),
        "{desc}"
    );
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );
    drop(c);
    drop(launcher);

    let device = tree.path("vhost-vsock");
    fs::write(&device, "").expect("write the stand-in device");
    let mut launcher = Launcher::start_test(&["--vhost-vsock-device", &device.to_string_lossy()]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let mut no_cid = vsock.clone();
    no_cid["status"] = json!({"phase": "Scheduled"});
    let (class, desc) = c.err_class("sync", json!({"vmi": no_cid}));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with(
            "arguments.vmi.status.VSOCKCID: autoattachVSOCK needs the guest's vsock CID"
        ),
        "{desc}"
    );
    c.ok("sync", json!({"vmi": vsock}));
    let spec = domain_spec(&mut c);
    assert_eq!(
        spec["devices"]["vsock"]["@model"], "virtio-non-transitional",
        "{spec}"
    );
    assert_eq!(spec["devices"]["vsock"]["cid"]["@auto"], "no", "{spec}");
    assert_eq!(spec["devices"]["vsock"]["cid"]["@address"], 1234, "{spec}");
}

/// A persistent TPM with `--backend-storage-dir` and a libvirt that is not
/// the launcher's own (here the test driver; the host's daemon alike):
/// that libvirt would keep the TPM's state in its own swtpm directory, not
/// in the flag's, so the sync is refused naming the field and the flags;
/// the same TPM without `persistent` is fine.
#[test]
fn a_persistent_tpm_with_a_backend_storage_dir_needs_the_launchers_own_daemons() {
    if !require(&[Need::TestDriver]) {
        return;
    }
    let tree = TempTree::new("tpm-backend");
    let backend = tree.path("vm-state");
    let mut launcher = Launcher::start_test(&["--backend-storage-dir", &backend.to_string_lossy()]);
    launcher.wait_ready(T);
    let mut c = launcher.client();
    let mut vmi = demo_vmi();
    vmi["spec"]["domain"]["devices"]["tpm"] = json!({"persistent": true});
    let (class, desc) = c.err_class("sync", json!({"vmi": vmi.clone()}));
    assert_eq!(class, "InvalidArgument");
    assert!(
        desc.starts_with("arguments.vmi.spec.domain.devices.tpm.persistent: ")
            && desc.contains("--backend-storage-dir")
            && desc.contains("--spawn-libvirt")
            && desc.contains("/var/lib/libvirt/swtpm/"),
        "{desc}"
    );
    assert_eq!(
        c.ok("query-status", Value::Null)["domain"]["defined"],
        false
    );
    vmi["spec"]["domain"]["devices"]["tpm"] = json!({});
    c.ok("sync", json!({ "vmi": vmi }));
    let spec = domain_spec(&mut c);
    assert!(spec["devices"]["tpm"].is_array(), "{spec}");
}
