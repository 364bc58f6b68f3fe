//! The day-2 commands on the fake hypervisor: the QEMU version, the dirty
//! rate, a memory dump in the background and a screenshot.

use serde_json::{Value, json};

use super::{Harness, Setup, class, vmi};
use crate::hypervisor::{DomainState, DomainStatus, DriverKind, HypervisorErrorKind, StateReason};
use crate::protocol::ErrorClass;

#[test]
fn the_qemu_version_is_read_from_the_daemon_with_or_without_a_domain() {
    let h = Harness::with(Setup::default().driver(DriverKind::Qemu));
    // query-version waits for the read the launcher starts with.
    assert_eq!(
        h.ok("query-version", Value::Null)["hypervisor"],
        "QEMU 7.2.22"
    );
    assert_eq!(h.fake.calls("hypervisor_version"), 1);
    assert_eq!(
        Value::Object(h.ok("query-qemu-version", Value::Null)),
        json!({"version": "QEMU 7.2.22"})
    );
    assert_eq!(h.fake.calls("hypervisor_version"), 2);
    h.fake
        .fail_next("hypervisor_version", HypervisorErrorKind::ConnectionLost);
    let err = h.err("query-qemu-version", Value::Null);
    assert_eq!(class(&err), ErrorClass::Unavailable, "{err}");
}

#[test]
fn the_launcher_answers_before_the_daemon_tells_the_hypervisors_version() {
    // A fresh daemon answers virConnectGetVersion once it has probed QEMU.
    let (gate_tx, gate_rx) = crossbeam_channel::bounded(1);
    let h = Harness::with(
        Setup::default()
            .driver(DriverKind::Qemu)
            .before_start(move |fake| {
                let _ = gate_tx.send(fake.hold("hypervisor_version"));
            }),
    );
    let gate = gate_rx.recv_timeout(super::WAIT).unwrap();
    h.ok("ping", Value::Null);
    h.status();
    let version = h.send_named("query-version");
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(version.try_recv().is_err(), "query-version answered early");
    gate.release();
    let reply = version.recv_timeout(super::WAIT).unwrap().unwrap();
    assert_eq!(reply.into_object()["hypervisor"], "QEMU 7.2.22");
    // Kept: later ones are answered without asking the daemon again.
    assert_eq!(
        h.ok("query-version", Value::Null)["hypervisor"],
        "QEMU 7.2.22"
    );
    assert_eq!(h.fake.calls("hypervisor_version"), 1);
}

#[test]
fn a_failed_read_of_the_hypervisors_version_is_tried_again_when_asked() {
    let h = Harness::with(
        Setup::default()
            .driver(DriverKind::Qemu)
            .before_start(|fake| fake.fail_next("hypervisor_version", HypervisorErrorKind::Other)),
    );
    // Failed at start (or fails now, if this comes first).
    let first = h.request("query-version", Value::Null);
    let reply = match first {
        Ok(reply) => reply.into_object(),
        Err(e) => {
            assert!(e.desc.starts_with("query-version: "), "{e}");
            h.ok("query-version", Value::Null)
        }
    };
    assert_eq!(reply["hypervisor"], "QEMU 7.2.22");
    assert_eq!(h.fake.calls("hypervisor_version"), 2);
}

#[test]
fn the_dirty_rate_is_measured_once_at_a_time_on_a_running_domain() {
    let h = Harness::start();
    let err = h.err("query-dirty-rate", Value::Null);
    assert_eq!(class(&err), ErrorClass::NotFound, "{err}");
    h.sync();
    h.fake.set_dirty_rate(42);
    let gate = h.fake.hold("start_dirty_rate_calc");
    let first = h.send_named("query-dirty-rate");
    std::thread::sleep(std::time::Duration::from_millis(50));
    let err = h.err("query-dirty-rate", Value::Null);
    assert_eq!(class(&err), ErrorClass::Busy, "{err}");
    gate.release();
    let rate = first
        .recv_timeout(super::WAIT)
        .unwrap()
        .unwrap()
        .into_object();
    assert_eq!(rate["megabytes_per_second"], 42);
    assert_eq!(rate["domain"], super::DOMAIN);
    assert_eq!(rate["mode"], "page-sampling");
    // A paused guest dirties nothing; libvirt refuses to measure it.
    h.ok("pause", Value::Null);
    let err = h.err("query-dirty-rate", Value::Null);
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
}

#[test]
fn a_memory_dump_runs_in_the_background_one_at_a_time_and_is_recorded() {
    let h = Harness::start();
    h.sync();
    let path = h.path("guest.memory.dump");
    let gate = h.fake.hold("dump_memory");
    let started = h.ok("memory-dump", json!({ "path": path }));
    assert_eq!(started["phase"], "InProgress");
    assert_eq!(started["path"], json!(path));
    let status = h.status();
    assert_eq!(status["memory_dump"]["phase"], "InProgress", "{status}");
    // While it runs, libvirt's job statistics say how far it is.
    h.fake.set_job_stats(vec![
        ("type".into(), json!(2)),
        ("memory_total".into(), json!(134_217_728u64)),
        ("memory_processed".into(), json!(33_554_432u64)),
    ]);
    let status = h.wait_status("progress read", |s| !s["memory_dump"]["progress"].is_null());
    assert_eq!(
        status["memory_dump"]["progress"],
        json!({"memory_processed": 33_554_432u64, "memory_total": 134_217_728u64})
    );
    // A second one while it runs.
    let err = h.err("memory-dump", json!({ "path": h.path("other.dump") }));
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
    assert!(err.desc.contains("is in progress"), "{err}");
    gate.release();
    let done = h.named("MEMORY_DUMP_COMPLETED");
    assert_eq!(done["data"]["path"], json!(path));
    // The fake writes an ELF magic of 4 bytes.
    assert_eq!(done["data"]["size_bytes"], 4);
    let status = h.status();
    assert_eq!(status["memory_dump"]["phase"], "Completed", "{status}");
    assert_eq!(status["memory_dump"]["size_bytes"], 4);
    assert!(status["memory_dump"].get("progress").is_none(), "{status}");
    // Kept for a restarted launcher.
    let record: Value = serde_json::from_slice(
        &std::fs::read(h.path("private").join(super::super::memory_dump::RECORD)).unwrap(),
    )
    .unwrap();
    assert_eq!(record["phase"], "Completed");

    // A dump libvirt fails.
    h.fake
        .fail_next("dump_memory", HypervisorErrorKind::InvalidOperation);
    h.ok("memory-dump", json!({ "path": h.path("second.dump") }));
    let failed = h.named("MEMORY_DUMP_FAILED");
    assert!(
        failed["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("scripted"),
        "{failed}"
    );
    assert_eq!(h.status()["memory_dump"]["phase"], "Failed");
}

#[test]
fn a_memory_dump_needs_a_running_domain() {
    let h = Harness::start();
    let err = h.err("memory-dump", json!({ "path": h.path("x.dump") }));
    assert_eq!(class(&err), ErrorClass::NotFound, "{err}");
    // A defined domain that is shut off (adopted so by a launcher that
    // starts).
    let h = Harness::with(Setup::default().before_start(|fake| {
        fake.preexisting(
            super::DOMAIN,
            DomainStatus::new(DomainState::Shutoff, StateReason::Shutdown),
            false,
        )
    }));
    h.wait_status("the domain adopted", |s| s["domain"]["defined"] == true);
    let err = h.err("memory-dump", json!({ "path": h.path("x.dump") }));
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
    assert_eq!(
        err.desc,
        "memory-dump: the domain must be running or paused, but it is Shutoff (Shutdown)"
    );
    assert_eq!(h.fake.calls("dump_memory"), 0);
}

#[test]
fn a_screenshot_is_a_png_and_needs_a_graphics_device() {
    let h = Harness::start();
    h.sync();
    // The test VMI has autoattachGraphicsDevice: false.
    let err = h.err("screenshot", Value::Null);
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
    assert!(err.desc.contains("no graphics device"), "{err}");
    assert_eq!(h.fake.calls("screenshot"), 0);

    let h = Harness::start();
    let mut with_graphics = vmi();
    with_graphics["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = json!(true);
    h.ok("sync", json!({ "vmi": with_graphics }));
    let shot = h.ok("screenshot", Value::Null);
    assert_eq!(shot["mime"], "image/png");
    assert_eq!(
        (shot["width"].clone(), shot["height"].clone()),
        (json!(2), json!(1))
    );
    let png = crate::encoding::base64_decode(shot["data"].as_str().unwrap()).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(shot["size_bytes"], json!(png.len()));
}

#[test]
fn vm_stats_gather_the_parts_each_with_its_age_and_keep_the_agents_answers() {
    let h = Harness::start();
    h.sync();
    // Without the agent: its parts are errors, the statistics are there.
    let stats = h.ok("query-vm-stats", json!({"agent": ["guest-get-time"]}));
    assert_eq!(
        stats["domain_stats"]["stats"]["state.state"], 1,
        "{stats:?}"
    );
    assert!(stats["domain_stats"]["age_ms"].is_u64());
    assert_eq!(
        stats["agent"]["guest-get-time"]["error"],
        "the guest agent is not connected"
    );
    assert_eq!(
        stats["errors"],
        json!(["agent guest-get-time: the guest agent is not connected"])
    );
    assert!(stats.get("dirty_rate").is_none());
    assert_eq!(h.fake.calls("agent_command"), 0);

    h.fake.agent_channel(true);
    h.named("AGENT_CONNECTED");
    h.fake
        .queue_agent_reply(r#"{"return":1796000000123456789}"#);
    h.fake.queue_agent_reply(
        r#"{"error":{"class":"CommandNotFound","desc":"The command guest-get-load has not been found"}}"#,
    );
    h.fake.set_dirty_rate(7);
    let stats = h.ok(
        "query-vm-stats",
        json!({"agent": ["guest-get-time", "guest-get-load"], "dirty_rate": true}),
    );
    assert_eq!(
        stats["agent"]["guest-get-time"]["return"],
        json!(1_796_000_000_123_456_789u64)
    );
    assert!(stats["agent"]["guest-get-time"]["age_ms"].is_u64());
    assert_eq!(
        stats["agent"]["guest-get-load"]["error"],
        "the agent refused: The command guest-get-load has not been found"
    );
    assert_eq!(stats["dirty_rate"]["megabytes_per_second"], 7);
    assert!(stats["dirty_rate"]["age_ms"].is_u64());
    assert_eq!(stats["errors"].as_array().unwrap().len(), 1, "{stats:?}");
    assert_eq!(h.fake.calls("agent_command"), 2);
    assert_eq!(h.fake.calls("start_dirty_rate_calc"), 1);

    // Asked again at once: the time and the dirty rate are kept (KubeVirt
    // keeps them 60 s and 3 s); what failed is asked again.
    h.fake
        .queue_agent_reply(r#"{"return":{"load1":0.5,"load5":0.25,"load15":0.1}}"#);
    let again = h.ok(
        "query-vm-stats",
        json!({"agent": ["guest-get-time", "guest-get-load"], "dirty_rate": true, "domain_stats": false}),
    );
    assert_eq!(h.fake.calls("agent_command"), 3);
    assert_eq!(h.fake.calls("start_dirty_rate_calc"), 1);
    assert_eq!(
        again["agent"]["guest-get-time"]["return"],
        json!(1_796_000_000_123_456_789u64)
    );
    assert_eq!(again["agent"]["guest-get-load"]["return"]["load1"], 0.5);
    assert!(again.get("domain_stats").is_none());
    assert_eq!(again["errors"], json!([]));
}

#[test]
fn a_memory_dump_goes_into_the_vmis_memory_dump_volume_as_kubevirt_names_it() {
    let h = Harness::start();
    let mut with_volume = vmi();
    with_volume["spec"]["volumes"].as_array_mut().unwrap().push(
        json!({"name": "dump", "memoryDump": {"claimName": "dump-pvc", "hotpluggable": true}}),
    );
    h.ok("sync", json!({ "vmi": with_volume }));
    let err = h.err("memory-dump", json!({"volume": "other"}));
    assert_eq!(class(&err), ErrorClass::InvalidArgument, "{err}");
    // virt-handler has not mounted it yet.
    let err = h.err("memory-dump", json!({"volume": "dump"}));
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
    assert!(err.desc.contains("is not mounted"), "{err}");
    let dir = h.path("hotplug-disks").join("dump");
    std::fs::create_dir_all(&dir).unwrap();
    let started = h.ok("memory-dump", json!({"volume": "dump"}));
    let path = std::path::PathBuf::from(started["path"].as_str().unwrap());
    assert_eq!(path.parent(), Some(dir.as_path()));
    // vm-dump-20261201-230102.memory.dump
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    let stamp = name
        .strip_prefix("vm-dump-")
        .and_then(|n| n.strip_suffix(".memory.dump"))
        .unwrap_or_else(|| panic!("{name}"));
    assert_eq!(stamp.len(), 15, "{name}");
    assert!(
        stamp
            .char_indices()
            .all(|(i, c)| if i == 8 { c == '-' } else { c.is_ascii_digit() }),
        "{name}"
    );
    let done = h.named("MEMORY_DUMP_COMPLETED");
    assert_eq!(done["data"]["path"], json!(path));
    assert!(path.exists());
}
