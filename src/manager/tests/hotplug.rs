//! sync on a running domain: hotplugged volumes come and go with their
//! events and statuses, an unchanged VMI touches nothing, a second sync is
//! Busy, a guest that keeps a disk gives Timeout, a failure midway keeps
//! what was done, and what needs a restart is refused before anything.

use std::time::Duration;

use serde_json::{Value, json};

use super::{DOMAIN, Harness, Setup, WAIT, class, vmi};
use crate::hypervisor::HypervisorErrorKind;
use crate::hypervisor::fake::DetachGuest;
use crate::hypervisor::{DomainState, DomainStatus, StateReason};
use crate::protocol::ErrorClass;

/// The test VMI with hotpluggable PVCs `names` on the scsi bus.
fn with_volumes(names: &[&str]) -> Value {
    let mut v = vmi();
    for name in names {
        v["spec"]["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "disk": {"bus": "scsi"}}));
        v["spec"]["volumes"].as_array_mut().unwrap().push(json!({
            "name": name,
            "persistentVolumeClaim": {"claimName": format!("claim-{name}"), "hotpluggable": true}
        }));
    }
    v
}

/// Mounts an image for `name` where virt-handler would.
fn mount(h: &Harness, name: &str) {
    let dir = h.path("hotplug-disks");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.img")), vec![0u8; 64 * 1024]).unwrap();
}

fn changes(reply: &serde_json::Map<String, Value>) -> Vec<String> {
    reply["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["change"].as_str().unwrap(),
                c["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn volume_events(h: &Harness) -> Vec<String> {
    h.pending_events()
        .iter()
        .filter(|e| e["event"] == "VOLUME_STATUS_CHANGED")
        .map(|e| format!("{} {}", e["data"]["name"], e["data"]["phase"]).replace('"', ""))
        .collect()
}

fn volumes(h: &Harness) -> Vec<Value> {
    h.ok("query-domain", Value::Null)["volumes"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn an_unchanged_vmi_is_answered_without_calling_libvirt() {
    let h = Harness::start();
    // After the start-up refresh: one that a loaded machine runs late is
    // overtaken by the sync's events and reads the domain again.
    super::caches::sync_after_start_up(&h);
    let before = (h.fake.calls("domain_status"), h.fake.calls("domain_xml"));
    for _ in 0..3 {
        let again = h.ok("sync", json!({ "vmi": vmi() }));
        assert_eq!(again["action"], "none");
        assert_eq!(again["changes"], json!([]));
        assert_eq!(again["state"], "Running");
    }
    assert_eq!(
        (h.fake.calls("domain_status"), h.fake.calls("domain_xml")),
        before
    );
    assert_eq!(h.fake.calls("attach_device"), 0);
}

#[test]
fn a_hotplugged_volume_is_attached_and_detached_with_its_events() {
    let h = Harness::start();
    h.sync();
    mount(&h, "hp1");
    let _ = h.pending_events();
    let added = h.ok("sync", json!({ "vmi": with_volumes(&["hp1"]) }));
    assert_eq!(added["action"], "updated");
    assert_eq!(
        added["changes"],
        json!([{"change": "attach-disk", "name": "hp1", "alias": "ua-hp1", "target": "sda", "bus": "scsi"}])
    );
    let event = h.named("DEVICE_ADDED");
    assert_eq!(event["data"]["alias"], "ua-hp1");
    assert_eq!(event["data"]["kind"], "disk");
    let listed = volumes(&h);
    let hp1 = listed.iter().find(|v| v["name"] == "hp1").unwrap();
    assert_eq!(hp1["phase"], "ready");
    assert_eq!(hp1["target"], "sda");
    assert_eq!(hp1["hotpluggable"], true);
    let root = listed.iter().find(|v| v["name"] == "cloudinit").unwrap();
    assert_eq!(root["hotpluggable"], false);
    // The same VMI again: nothing to do, not even a look at libvirt.
    let xml_reads = h.fake.calls("domain_xml");
    assert_eq!(
        h.ok("sync", json!({ "vmi": with_volumes(&["hp1"]) }))["action"],
        "none"
    );
    assert_eq!(h.fake.calls("domain_xml"), xml_reads);

    let removed = h.ok("sync", json!({ "vmi": vmi() }));
    assert_eq!(changes(&removed), ["detach-disk hp1"]);
    let event = h.named("DEVICE_REMOVED");
    assert_eq!(event["data"]["kind"], "disk");
    assert!(!h.fake.xml().contains("ua-hp1"));
    assert!(volumes(&h).iter().all(|v| v["name"] != "hp1"));
}

#[test]
fn volume_phases_are_published_in_order() {
    let h = Harness::start();
    h.sync();
    mount(&h, "hp1");
    h.ok("sync", json!({ "vmi": with_volumes(&["hp1"]) }));
    h.ok("sync", json!({ "vmi": vmi() }));
    // What the job reported may be published just after its reply.
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while seen.len() < 4 && std::time::Instant::now() < deadline {
        seen.extend(volume_events(&h));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        seen,
        [
            "hp1 attaching",
            "hp1 ready",
            "hp1 detaching",
            "hp1 detached"
        ]
    );
}

#[test]
fn a_second_sync_while_a_hotplug_runs_is_busy() {
    let h = Harness::start();
    h.sync();
    mount(&h, "hp1");
    let gate = h.fake.hold("attach_device");
    let command = match crate::command::Command::parse(
        "sync",
        json!({"vmi": with_volumes(&["hp1"])})
            .as_object()
            .unwrap()
            .clone(),
    ) {
        Ok(crate::command::Command::Manager(c)) => c,
        other => panic!("{other:?}"),
    };
    let first = h.send(command);
    h.wait_status("sync running", |s| s["job"] == "sync");
    let err = h.err("sync", json!({ "vmi": with_volumes(&["hp1"]) }));
    assert_eq!(class(&err), ErrorClass::Busy, "{err}");
    assert_eq!(
        err.desc,
        "sync: sync is still in progress; retry when it completes"
    );
    // The volume is attaching meanwhile.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let listed = volumes(&h);
        if let Some(hp1) = listed.iter().find(|v| v["name"] == "hp1") {
            assert_eq!(hp1["phase"], "attaching");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hp1 never listed: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    gate.release();
    let reply = first.recv_timeout(WAIT).unwrap().unwrap().into_object();
    assert_eq!(reply["action"], "updated");
}

#[test]
fn a_guest_that_keeps_a_disk_gets_timeout_and_the_disk_stays_attached() {
    let h = Harness::start();
    h.sync();
    mount(&h, "hp1");
    h.ok("sync", json!({ "vmi": with_volumes(&["hp1"]) }));
    h.fake.set_detach(DetachGuest::Keeps);
    let err = h.err("sync", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::Timeout, "{err}");
    assert!(
        err.desc.starts_with("sync: detach-disk hp1 (change 1 of 1) failed: the guest has not released it after 0 s; it stays attached until the guest lets it go"),
        "{}",
        err.desc
    );
    // Reported as still there, detaching.
    let hp1 = volumes(&h)
        .into_iter()
        .find(|v| v["name"] == "hp1")
        .unwrap();
    assert_eq!(hp1["phase"], "detaching");
    assert!(
        hp1["reason"]
            .as_str()
            .unwrap()
            .contains("has not released it"),
        "{hp1}"
    );
    assert_eq!(h.status()["job"], Value::Null);
    // The guest lets go later: the volume is gone, and said so.
    let _ = h.pending_events();
    h.fake.release_device("ua-hp1");
    let event = h.event("VOLUME_STATUS_CHANGED detached", |e| {
        e["event"] == "VOLUME_STATUS_CHANGED" && e["data"]["phase"] == "detached"
    });
    assert_eq!(event["data"]["name"], "hp1");
    assert!(volumes(&h).iter().all(|v| v["name"] != "hp1"));
    // The next sync of that VMI looks at the domain again, finds nothing
    // to do.
    let reply = h.ok("sync", json!({ "vmi": vmi() }));
    assert_eq!(reply["action"], "none");
    assert_eq!(reply["changes"], json!([]));
}

#[test]
fn a_disk_released_after_a_timeout_whose_event_is_lost_is_gone_in_query_domain() {
    let h = Harness::start();
    h.sync();
    mount(&h, "hp1");
    h.ok("sync", json!({ "vmi": with_volumes(&["hp1"]) }));
    h.fake.set_detach(DetachGuest::Keeps);
    let err = h.err("sync", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::Timeout, "{err}");
    let _ = h.pending_events();
    // The guest lets go, libvirt's event never arrives: query-domain reads
    // the live domain, no longer lists the volume and says it is detached.
    h.fake.release_device_without_event("ua-hp1");
    assert!(volumes(&h).iter().all(|v| v["name"] != "hp1"));
    let event = h.event("VOLUME_STATUS_CHANGED detached", |e| {
        e["event"] == "VOLUME_STATUS_CHANGED" && e["data"]["phase"] == "detached"
    });
    assert_eq!(event["data"]["name"], "hp1");
    assert_eq!(event["data"]["reason"], "no longer in the domain");
}

#[test]
fn a_sync_that_fails_midway_keeps_what_was_done_and_says_so() {
    let h = Harness::start();
    h.sync();
    mount(&h, "hp1");
    mount(&h, "hp2");
    h.ok("sync", json!({ "vmi": with_volumes(&["hp1"]) }));
    h.fake
        .fail_next("attach_device", HypervisorErrorKind::Other);
    let err = h.err("sync", json!({ "vmi": with_volumes(&["hp2"]) }));
    assert_eq!(class(&err), ErrorClass::Internal, "{err}");
    assert!(
        err.desc
            .starts_with("sync: attach-disk hp2 (change 2 of 2) failed: "),
        "{}",
        err.desc
    );
    assert!(
        err.desc
            .ends_with("; done before it, and kept: detach-disk hp1"),
        "{}",
        err.desc
    );
    let xml = h.fake.xml();
    assert!(!xml.contains("ua-hp1") && !xml.contains("ua-hp2"), "{xml}");
    // Again: only what is left is done.
    let reply = h.ok("sync", json!({ "vmi": with_volumes(&["hp2"]) }));
    assert_eq!(changes(&reply), ["attach-disk hp2"]);
}

#[test]
fn what_needs_a_restart_is_refused_before_anything_is_touched() {
    let h = Harness::start();
    h.sync();
    let reads = h.fake.calls("domain_xml");
    let mut changed = vmi();
    changed["spec"]["domain"]["machine"] = json!({"type": "pc-q35-7.2"});
    let err = h.err("sync", json!({ "vmi": changed }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument);
    assert!(
        err.desc.starts_with(
            "arguments.vmi.spec.domain.machine.type: changed from (not set) to \"pc-q35-7.2\""
        ),
        "{}",
        err.desc
    );
    assert!(
        err.desc.ends_with("it needs a restart of the VMI"),
        "{}",
        err.desc
    );
    // A volume that is not hotpluggable cannot be added either.
    let mut pvc = vmi();
    pvc["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}));
    let err = h.err("sync", json!({ "vmi": pvc }));
    assert!(
        err.desc
            .starts_with("arguments.vmi.spec.volumes[1]: volume \"data\" was added, but only"),
        "{}",
        err.desc
    );
    // A missing image is refused naming its path.
    let err = h.err("sync", json!({ "vmi": with_volumes(&["absent"]) }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument);
    assert!(
        err.desc.contains("hotplug-disks/absent.img"),
        "{}",
        err.desc
    );
    assert_eq!(h.fake.calls("attach_device"), 0);
    assert_eq!(
        h.fake.calls("domain_xml"),
        reads + 1,
        "only the missing image's sync read the domain"
    );
}

#[test]
fn vcpus_follow_sockets_up_to_max_sockets() {
    let h = Harness::start();
    let mut v = vmi();
    v["spec"]["domain"]["cpu"] = json!({"sockets": 1, "cores": 1, "maxSockets": 2});
    let reply = h.ok("sync", json!({ "vmi": v }));
    assert_eq!(reply["action"], "defined-and-started");
    v["spec"]["domain"]["cpu"]["sockets"] = json!(2);
    let reply = h.ok("sync", json!({ "vmi": v }));
    assert_eq!(
        reply["changes"],
        json!([{"change": "set-vcpus", "from": 1, "to": 2}])
    );
    assert_eq!(h.fake.calls("set_vcpus"), 1);
    v["spec"]["domain"]["cpu"]["sockets"] = json!(3);
    let err = h.err("sync", json!({ "vmi": v }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument);
    assert_eq!(
        err.desc,
        "arguments.vmi.spec.domain.cpu.sockets: 3 sockets is above spec.domain.cpu.maxSockets (2); a running VMI cannot grow past the maximum it started with"
    );
}

#[test]
fn guest_memory_follows_memory_guest_up_to_max_guest() {
    let h = Harness::start();
    let mut v = vmi();
    v["spec"]["domain"]["memory"] = json!({"guest": "192Mi", "maxGuest": "512Mi"});
    h.ok("sync", json!({ "vmi": v }));
    v["spec"]["domain"]["memory"]["guest"] = json!("320Mi");
    let reply = h.ok("sync", json!({ "vmi": v }));
    assert_eq!(
        reply["changes"],
        json!([{"change": "resize-memory", "from": 192u64 << 20, "to": 320u64 << 20}])
    );
    assert_eq!(h.fake.calls("update_device"), 1);
    v["spec"]["domain"]["memory"]["guest"] = json!("1Gi");
    let err = h.err("sync", json!({ "vmi": v }));
    assert!(
        err.desc.starts_with("arguments.vmi.spec.domain.memory.guest: 1Gi is above spec.domain.memory.maxGuest (512Mi)"),
        "{}",
        err.desc
    );
    v["spec"]["domain"]["memory"]["guest"] = json!("321Mi");
    let err = h.err("sync", json!({ "vmi": v }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument);
    // The converter already knows the block size.
    assert_eq!(
        err.desc,
        "arguments.vmi.spec.domain.memory.guest: guest memory must be a multiple of 2Mi with memory hotplug"
    );
    assert_eq!(h.fake.calls("update_device"), 1);
}

#[test]
fn a_restarted_launcher_refuses_what_needs_a_restart_from_the_recorded_vmi() {
    // The first launcher records what it applied in its private directory.
    let first = Harness::start();
    std::fs::create_dir_all(first.path("private")).unwrap();
    first.sync();
    let recorded = std::fs::read_to_string(first.path("private/applied-vmi.json")).unwrap();
    let recorded: Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(recorded, vmi());
    let mode = std::fs::metadata(first.path("private/applied-vmi.json"))
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );

    // The next one adopts the running domain and finds the record.
    let second = Harness::with(Setup::default().before_start(|fake| {
        fake.preexisting(
            DOMAIN,
            DomainStatus::new(DomainState::Running, StateReason::Booted),
            false,
        );
    }));
    second.wait_status("the adopted domain runs", |s| {
        s["domain"]["state"] == "Running"
    });
    let mut changed = vmi();
    changed["spec"]["domain"]["machine"] = json!({"type": "pc-q35-7.2"});
    std::fs::create_dir_all(second.path("private")).unwrap();
    std::fs::write(
        second.path("private/applied-vmi.json"),
        serde_json::to_vec(&recorded).unwrap(),
    )
    .unwrap();
    let err = second.err("sync", json!({ "vmi": changed }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument);
    assert!(
        err.desc.starts_with(
            "arguments.vmi.spec.domain.machine.type: changed from (not set) to \"pc-q35-7.2\""
        ),
        "{}",
        err.desc
    );
    assert_eq!(second.fake.calls("attach_device"), 0);
}

#[test]
fn a_hotplugged_disk_gets_its_cache_mode_from_its_image() {
    let h = Harness::with(
        Setup::default()
            .driver(crate::hypervisor::DriverKind::Qemu)
            .flags(&["--force-emulation"]),
    );
    let mut base = vmi();
    base["spec"]["domain"]["devices"]["autoattachPodInterface"] = json!(false);
    h.ok("sync", json!({ "vmi": base.clone() }));
    // Written whole: preallocated.
    mount(&h, "hp1");
    let mut vmi = with_volumes(&["hp1"]);
    vmi["spec"]["domain"]["devices"]["autoattachPodInterface"] = json!(false);
    let added = h.ok("sync", json!({ "vmi": vmi }));
    assert_eq!(changes(&added), ["attach-disk hp1"]);
    let domain = crate::domxml::Domain::from_xml(&h.fake.xml()).unwrap();
    let disk = domain
        .devices
        .disks
        .iter()
        .find(|d| d.alias.as_ref().is_some_and(|a| a.name == "ua-hp1"))
        .unwrap();
    let driver = disk.driver.clone().unwrap_or_default();
    let image = h.path("hotplug-disks/hp1.img");
    let expected = if crate::os::supports_direct_io(&image, false).unwrap() {
        (Some("none"), Some("native"))
    } else {
        (Some("writethrough"), None)
    };
    assert_eq!((driver.cache.as_deref(), driver.io.as_deref()), expected);
}
