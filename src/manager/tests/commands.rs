//! Commands: what they refuse, Busy and Timeout, and what a failed sync
//! leaves behind.

use std::time::Duration;

use serde_json::{Value, json};

use super::{DOMAIN, Harness, Setup, class, files_under, vmi};
use crate::hypervisor::HypervisorErrorKind;
use crate::protocol::ErrorClass;

#[test]
fn domain_commands_before_a_sync_are_not_found() {
    let h = Harness::start();
    for command in [
        "pause", "unpause", "shutdown", "reboot", "reset", "kill", "delete",
    ] {
        let err = h.err(command, Value::Null);
        assert_eq!(class(&err), ErrorClass::NotFound, "{command}: {err}");
        assert_eq!(
            err.desc,
            format!("{command}: there is no domain {DOMAIN} yet; sync a VMI first")
        );
    }
    assert_eq!(h.status()["phase"], "WaitingForDomain");
    assert_eq!(h.ok("ping", Value::Null).len(), 0);
}

#[test]
fn sync_defines_starts_and_then_leaves_a_running_domain_alone() {
    let h = Harness::start();
    let first = h.sync();
    assert_eq!(first["state"], "Running");
    assert_eq!(first["reason"], "Booted");
    assert_eq!(first["started_paused"], false);
    let again = h.ok("sync", json!({ "vmi": vmi() }));
    assert_eq!(again["action"], "none");
    let status = h.status();
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["domain"]["defined"], true);
    assert_eq!(h.fake.calls("start"), 1);
}

#[test]
fn a_second_state_change_while_one_runs_is_busy_but_kill_is_not() {
    let h = Harness::start();
    h.sync();
    let gate = h.fake.hold("suspend");
    let pausing = h.send_named("pause");
    h.wait_status("pause running", |s| s["job"] == "pause");
    for command in ["unpause", "reboot", "reset", "shutdown", "delete"] {
        let err = h.err(command, Value::Null);
        assert_eq!(class(&err), ErrorClass::Busy, "{command}: {err}");
        assert_eq!(
            err.desc,
            format!("{command}: pause is still in progress; retry when it completes")
        );
    }
    let err = h.err("sync", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::Busy);
    // Queries run beside it.
    assert_eq!(h.ok("query-stats", Value::Null)["domain"], DOMAIN);
    gate.release();
    let paused = pausing
        .recv_timeout(super::WAIT)
        .unwrap()
        .unwrap()
        .into_object();
    assert_eq!(paused["state"], "Paused");
    assert_eq!(h.status()["job"], Value::Null);
    // kill is never refused as busy.
    let gate = h.fake.hold("resume");
    let unpausing = h.send_named("unpause");
    h.wait_status("unpause running", |s| s["job"] == "unpause");
    h.ok("kill", Value::Null);
    gate.release();
    let _ = unpausing.recv_timeout(super::WAIT).unwrap();
}

#[test]
fn a_call_past_its_deadline_answers_timeout_and_its_result_still_counts() {
    let h = Harness::with(Setup::default().command_timeout(Duration::from_secs(1)));
    h.sync();
    let gate = h.fake.hold("suspend");
    let started = std::time::Instant::now();
    let err = h.err("pause", Value::Null);
    assert_eq!(class(&err), ErrorClass::Timeout, "{err}");
    assert!(
        err.desc
            .starts_with("pause did not finish within 1 s; it continues in the background"),
        "{}",
        err.desc
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    // Still exclusive after its client gave up.
    assert_eq!(class(&h.err("unpause", Value::Null)), ErrorClass::Busy);
    gate.release();
    h.lifecycle("Suspended", "Paused");
    let status = h.wait_status("pause applied", |s| s["job"].is_null());
    assert_eq!(status["domain"]["state"], "Paused");
}

#[test]
fn a_failed_start_undefines_the_domain_and_removes_the_files_it_made() {
    let h = Harness::start();
    h.fake.fail_next("start", HypervisorErrorKind::Other);
    let err = h.err("sync", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::Internal, "{err}");
    assert_eq!(
        err.causes.last().map(String::as_str),
        Some("the domain was undefined again")
    );
    assert!(h.fake.status().is_none(), "the definition stayed");
    let left = files_under(&h.path("ephemeral"));
    assert!(left.is_empty(), "files left behind: {left:?}");
    // The next sync starts from scratch and works.
    h.sync();
    assert!(
        files_under(&h.path("ephemeral"))
            .iter()
            .any(|f| f.ends_with("noCloud.iso"))
    );
}

#[test]
fn a_rejected_definition_removes_the_files_it_made() {
    let h = Harness::start();
    h.fake
        .fail_next("define", HypervisorErrorKind::InvalidDefinition);
    let err = h.err("sync", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument, "{err}");
    assert!(
        err.desc
            .starts_with("libvirt rejected the domain definition")
    );
    assert!(files_under(&h.path("ephemeral")).is_empty());
    assert_eq!(h.status()["phase"], "WaitingForDomain");
}

#[test]
fn an_invalid_vmi_is_refused_before_anything_happens() {
    let h = Harness::start();
    let mut bad = vmi();
    bad["spec"]["domain"]["memory"] = json!({});
    let err = h.err("sync", json!({ "vmi": bad }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument);
    assert!(
        err.desc.starts_with("arguments.vmi.spec.domain"),
        "{}",
        err.desc
    );
    let mut other = vmi();
    other["metadata"]["name"] = json!("other");
    let err = h.err("sync", json!({ "vmi": other }));
    assert!(err.desc.contains("does not match this launcher's VMI"));
    assert_eq!(h.fake.calls("define"), 0);
    // At most the start-up's adoption check read libvirt.
    assert!(h.fake.calls("domain_status") <= 1);
}

#[test]
fn guest_commands_without_an_agent_are_unavailable_at_once() {
    let h = Harness::start();
    h.sync();
    for command in ["guest-ping", "query-guest-info", "freeze", "unfreeze"] {
        let err = h.err(command, Value::Null);
        assert_eq!(class(&err), ErrorClass::Unavailable, "{command}");
        assert!(
            err.desc
                .starts_with(&format!("{command}: the guest agent is not connected"))
        );
    }
    assert_eq!(h.fake.calls("agent_command"), 0);
}

#[test]
fn guest_commands_reach_the_agent_once_it_connects() {
    let h = Harness::start();
    h.sync();
    h.fake.agent_channel(true);
    let connected = h.named("AGENT_CONNECTED");
    assert_eq!(connected["data"]["reason"], "channel event");
    assert_eq!(h.status()["agent"]["connected"], true);
    assert!(h.ok("guest-ping", Value::Null).is_empty());
    h.fake.queue_agent_reply(r#"{"return":"thawed"}"#);
    h.fake.queue_agent_reply(r#"{"return":2}"#);
    let frozen = h.ok("freeze", json!({"unfreeze_timeout_seconds": 1}));
    assert_eq!(frozen["frozen_filesystems"], 2);
    assert_eq!(frozen["already_frozen"], false);
    // The freeze's safety timeout thaws by itself.
    h.event("thawed", |e| {
        e["event"] == "GUEST_INFO_CHANGED" && e["data"]["fsFreezeStatus"] == "thawed"
    });
    // Reboot goes through the agent while it is connected.
    assert_eq!(h.ok("reboot", Value::Null)["mode"], "guest-agent");
    h.fake.agent_channel(false);
    h.named("AGENT_DISCONNECTED");
    assert_eq!(h.ok("reboot", Value::Null)["mode"], "acpi");
}

#[test]
fn query_domain_keeps_the_agents_last_report_once_the_agent_is_gone() {
    let h = Harness::start();
    h.sync();
    let guest = |h: &Harness| h.ok("query-domain", json!({"fields": ["guest"]}))["guest"].clone();
    assert_eq!(
        guest(&h),
        json!({"fsFreezeStatus": null, "interfaces": [], "os": null})
    );
    h.fake.agent_channel(true);
    h.named("AGENT_CONNECTED");
    h.fake.queue_agent_reply(r#"{"return":"thawed"}"#);
    h.fake.queue_agent_reply(r#"{"return":1}"#);
    h.ok("freeze", json!({"unfreeze_timeout_seconds": 0}));
    assert_eq!(guest(&h)["fsFreezeStatus"], "frozen");
    h.fake.queue_agent_reply(r#"{"return":1}"#);
    h.ok("unfreeze", Value::Null);
    // The agent goes away: its queries are refused, its last report stays
    // (KubeVirt's launcher keeps it in the domain's status).
    h.fake.agent_channel(false);
    h.named("AGENT_DISCONNECTED");
    assert_eq!(
        class(&h.err("query-guest-info", Value::Null)),
        ErrorClass::Unavailable
    );
    assert_eq!(guest(&h)["fsFreezeStatus"], "thawed");
    // Answered from the launcher's own view, without libvirt.
    let reads = h.fake.calls("domain_xml");
    h.ok("query-domain", json!({"fields": ["guest", "state"]}));
    assert_eq!(h.fake.calls("domain_xml"), reads);
}

#[test]
fn the_commands_and_events_of_a_session_on_the_test_driver() {
    let h = Harness::start();
    h.sync();
    let paused = h.ok("pause", Value::Null);
    assert_eq!(
        (&paused["state"], &paused["reason"]),
        (&json!("Paused"), &json!("User"))
    );
    let err = h.err("pause", Value::Null);
    assert_eq!(class(&err), ErrorClass::InvalidState);
    assert_eq!(
        err.desc,
        "pause: the domain must be running, but it is Paused (User)"
    );
    assert_eq!(h.ok("unpause", Value::Null)["state"], "Running");
    let domain = h.ok("query-domain", Value::Null);
    assert_eq!(domain["name"], DOMAIN);
    assert!(domain["spec"].is_object());
    let deleted = h.ok("delete", Value::Null);
    assert_eq!(deleted["undefined"], true);
    assert_eq!(deleted["state"], "Running");
    h.lifecycle("Undefined", "Removed");
    assert_eq!(h.status()["domain"]["defined"], false);
}

#[test]
fn sync_chooses_each_disks_cache_mode_from_its_images_file_system() {
    let h = Harness::with(
        Setup::default()
            .driver(crate::hypervisor::DriverKind::Qemu)
            .flags(&["--force-emulation"]),
    );
    // An image written whole (preallocated) and one the launcher creates
    // sparse, beside the cloud-init ISO it writes.
    let full = h.path("images/full.img");
    std::fs::create_dir_all(h.path("images")).unwrap();
    std::fs::write(&full, vec![0u8; 1 << 20]).unwrap();
    let sparse = h.path("images/sparse.img");
    let mut vmi = vmi();
    vmi["spec"]["domain"]["devices"]["autoattachPodInterface"] = json!(false);
    let spec = &mut vmi["spec"];
    for (name, cache) in [("full", None), ("sparse", None), ("own", Some("writeback"))] {
        let mut disk = json!({"name": name, "disk": {"bus": "virtio"}});
        if let Some(cache) = cache {
            disk["cache"] = json!(cache);
        }
        spec["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(disk);
    }
    let own = h.path("images/own.img");
    for (name, path, kind) in [
        ("full", &full, "Disk"),
        ("sparse", &sparse, "DiskOrCreate"),
        ("own", &own, "DiskOrCreate"),
    ] {
        spec["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name,
            "hostDisk": {"path": path, "type": kind, "capacity": "1Gi"}}));
    }
    h.ok("sync", json!({ "vmi": vmi.clone() }));
    let xml = h.fake.xml();
    let domain = crate::domxml::Domain::from_xml(&xml).unwrap();
    let modes = |alias: &str| {
        let disk = domain
            .devices
            .disks
            .iter()
            .find(|d| d.alias.as_ref().is_some_and(|a| a.name == alias))
            .unwrap_or_else(|| panic!("no disk {alias} in {xml}"));
        let driver = disk.driver.clone().unwrap_or_default();
        (driver.cache, driver.io)
    };
    let some = |s: &str| Some(s.to_string());
    if crate::os::supports_direct_io(&full, false).unwrap() {
        assert_eq!(modes("ua-full"), (some("none"), some("native")));
        assert_eq!(modes("ua-sparse"), (some("none"), None));
        assert_eq!(modes("ua-cloudinit"), (some("none"), None));
    } else {
        for alias in ["ua-full", "ua-sparse", "ua-cloudinit"] {
            assert_eq!(modes(alias), (some("writethrough"), None));
        }
    }
    assert_eq!(modes("ua-own"), (some("writeback"), None));
}
