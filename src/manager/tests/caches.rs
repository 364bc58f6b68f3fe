//! The caches behind `query-stats` and `query-domain`: answered from
//! memory, refreshed in the background only while clients ask, and never
//! older than an event that changed the domain.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{DOMAIN, Harness, Setup, WAIT, class};
use crate::hypervisor::Hypervisor;
use crate::protocol::ErrorClass;

/// A second and a half: long past the tests' idle stop (500 ms) and any
/// refresh still under way on a loaded machine.
const SETTLE: Duration = Duration::from_millis(1500);

fn wait_until(what: &str, pred: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !pred() {
        assert!(
            Instant::now() < deadline,
            "{what} not reached within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Syncs once the launcher's start-up refresh has read the domain's state
/// (no domain then, so it reads no XML): the reads the tests count are the
/// queries' alone, however late a loaded machine runs that refresh.
pub(super) fn sync_after_start_up(h: &Harness) {
    wait_until("the start-up state refresh", || {
        h.fake.calls("domain_status") >= 1
    });
    h.sync();
}

#[test]
fn queries_before_a_sync_are_not_found_and_start_no_refresh() {
    let h = Harness::start();
    for command in ["query-stats", "query-domain"] {
        let err = h.err(command, Value::Null);
        assert_eq!(class(&err), ErrorClass::NotFound, "{command}: {err}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(h.fake.calls("stats"), 0);
}

#[test]
fn stats_are_answered_from_the_sample_while_a_refresh_hangs() {
    let h = Harness::start();
    sync_after_start_up(&h);
    let first = h.ok("query-stats", Value::Null);
    assert_eq!(first["domain"], DOMAIN);
    assert_eq!(first["stats"]["state.state"], 1);
    assert!(first["age_ms"].as_u64().is_some(), "{first:?}");
    // The refresher's next sample hangs in libvirt.
    let gate = h.fake.hold("stats");
    let before = h.fake.calls("stats");
    wait_until("the refresh to start", || h.fake.calls("stats") > before);
    for _ in 0..50 {
        let reply = h.ok("query-stats", Value::Null);
        assert_eq!(reply["stats"]["state.state"], 1);
        assert!(reply["age_ms"].as_u64().is_some());
    }
    assert_eq!(
        h.fake.calls("stats"),
        before + 1,
        "the cached sample was not used"
    );
    // max_age_ms 0 asks for a sample of its own, beside the hung refresh.
    let fresh = h.ok("query-stats", json!({"max_age_ms": 0}));
    assert_eq!(fresh["stats"]["state.state"], 1);
    assert!(fresh["age_ms"].as_u64().unwrap() < 1000, "{fresh:?}");
    assert_eq!(h.fake.calls("stats"), before + 2);
    gate.release();
}

#[test]
fn an_event_drops_the_sample() {
    // No refresh during the test: only events may renew the sample.
    let h = Harness::with(Setup::default().timing(|t| t.stats_refresh = Duration::from_secs(60)));
    sync_after_start_up(&h);
    assert_eq!(h.ok("query-stats", Value::Null)["stats"]["state.state"], 1);
    assert_eq!(h.ok("query-stats", Value::Null)["stats"]["state.state"], 1);
    let sampled = h.fake.calls("stats");
    assert_eq!(h.ok("pause", Value::Null)["state"], "Paused");
    // Paused (libvirt's state 3) at once, not the running sample.
    assert_eq!(h.ok("query-stats", Value::Null)["stats"]["state.state"], 3);
    assert_eq!(h.fake.calls("stats"), sampled + 1);
}

#[test]
fn the_refresh_runs_while_clients_ask_and_stops_when_nobody_does() {
    let h = Harness::start();
    sync_after_start_up(&h);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        h.fake.calls("stats"),
        0,
        "statistics were sampled before anyone asked"
    );
    h.ok("query-stats", Value::Null);
    // Refreshed every 100 ms in the tests.
    wait_until("three refreshes", || h.fake.calls("stats") >= 4);
    // Nobody asks any more: after the idle stop (500 ms) no sample.
    std::thread::sleep(SETTLE);
    let stopped = h.fake.calls("stats");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(h.fake.calls("stats"), stopped, "the refresh did not stop");
    // Asking again answers from the kept sample (at most 5 s old) and
    // starts the refresh again.
    let reply = h.ok("query-stats", Value::Null);
    assert!(reply["age_ms"].as_u64().unwrap() >= 2000, "{reply:?}");
    wait_until("the refresh to restart", || {
        h.fake.calls("stats") >= stopped + 3
    });
}

#[test]
fn query_domain_is_read_once_then_answered_from_the_cache() {
    let h = Harness::start();
    sync_after_start_up(&h);
    let first = h.ok("query-domain", Value::Null);
    let reads = h.fake.calls("domain_xml");
    for _ in 0..20 {
        let again = h.ok("query-domain", Value::Null);
        assert_eq!(again["xml"], first["xml"]);
        assert_eq!(again["spec"], first["spec"]);
        assert_eq!(again["uuid"], first["uuid"]);
        assert_eq!(again["state"], "Running");
        assert!(again["age_ms"].as_u64().is_some());
    }
    assert_eq!(h.fake.calls("domain_xml"), reads, "the cache was not used");
    // A client that wants a fresh read says so.
    let fresh = h.ok("query-domain", json!({"max_age_ms": 0}));
    assert_eq!(fresh["xml"], first["xml"]);
    assert_eq!(h.fake.calls("domain_xml"), reads + 1);
    // The state comes from the launcher's view, current even when cached.
    assert_eq!(h.ok("pause", Value::Null)["state"], "Paused");
    let paused = h.ok("query-domain", Value::Null);
    assert_eq!(
        (paused["state"].as_str(), paused["reason"].as_str()),
        (Some("Paused"), Some("User"))
    );
}

#[test]
fn query_domain_is_never_older_than_a_device_event() {
    let h = Harness::start();
    sync_after_start_up(&h);
    let before = h.ok("query-domain", Value::Null);
    assert!(!before["xml"].as_str().unwrap().contains("ua-hotplugged"));
    h.fake.device_appears(
        "ua-hotplugged",
        "<disk type='file' device='disk'><source file='/tmp/x.img'/><target dev='vdz' bus='virtio'/><alias name='ua-hotplugged'/></disk>",
    );
    // Once a subscriber could know of the device, a query shows it.
    h.named("DEVICE_ADDED");
    let after = h.ok("query-domain", Value::Null);
    assert!(
        after["xml"].as_str().unwrap().contains("ua-hotplugged"),
        "{after:?}"
    );
    let disks = after["spec"]["devices"]["disk"].as_array().unwrap();
    assert!(
        disks.iter().any(|d| d["target"]["@dev"] == "vdz"),
        "{disks:?}"
    );
}

#[test]
fn query_domain_is_never_older_than_a_redefinition_or_the_agent_channel() {
    let h = Harness::start();
    sync_after_start_up(&h);
    let before = h.ok("query-domain", Value::Null);
    let xml = before["xml"].as_str().unwrap();
    assert!(
        xml.contains("state='disconnected'") || xml.contains("state=\"disconnected\""),
        "{xml}"
    );
    // Someone redefines the domain (virsh define).
    let redefined = xml
        .replace(" state='disconnected'", "")
        .replace(" state=\"disconnected\"", "")
        .replacen(
            &format!("<name>{DOMAIN}</name>"),
            &format!("<name>{DOMAIN}</name><description>redefined</description>"),
            1,
        );
    h.fake.define(&redefined).unwrap();
    h.lifecycle("Defined", "Updated");
    let after = h.ok("query-domain", Value::Null);
    assert!(
        after["xml"]
            .as_str()
            .unwrap()
            .contains("<description>redefined</description>"),
        "{after:?}"
    );
    // The agent's channel opens: the live XML says so.
    h.fake.agent_channel(true);
    h.named("AGENT_CONNECTED");
    let connected = h.ok("query-domain", Value::Null);
    let xml = connected["xml"].as_str().unwrap();
    assert!(
        xml.contains("state='connected'") || xml.contains("state=\"connected\""),
        "{xml}"
    );
}

#[test]
fn query_domain_fields_pick_parts_and_state_only_needs_no_read() {
    let h = Harness::start();
    sync_after_start_up(&h);
    let reads = h.fake.calls("domain_xml");
    let state = h.ok("query-domain", json!({"fields": ["state"]}));
    assert_eq!(
        Value::Object(state),
        json!({"name": DOMAIN, "state": "Running", "reason": "Booted"})
    );
    assert_eq!(
        h.fake.calls("domain_xml"),
        reads,
        "state alone read libvirt"
    );
    let xml = h.ok("query-domain", json!({"fields": ["xml"]}));
    let mut keys: Vec<&str> = xml.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["age_ms", "name", "xml"]);
}

#[test]
fn a_cached_read_expires_after_its_maximum_age() {
    let h =
        Harness::with(Setup::default().timing(|t| t.domain_max_age = Duration::from_millis(200)));
    sync_after_start_up(&h);
    h.ok("query-domain", Value::Null);
    h.ok("query-domain", Value::Null);
    let reads = h.fake.calls("domain_xml");
    std::thread::sleep(Duration::from_millis(300));
    let reply = h.ok("query-domain", Value::Null);
    assert_eq!(h.fake.calls("domain_xml"), reads + 1);
    assert!(reply["age_ms"].as_u64().unwrap() < 200, "{reply:?}");
}

#[test]
fn query_domain_names_the_disks_whose_io_errors_paused_the_guest() {
    use crate::hypervisor::{DiskError, DiskErrorKind};
    let h = Harness::start();
    sync_after_start_up(&h);
    let running = h.ok("query-domain", Value::Null);
    assert!(running.get("disk_errors").is_none(), "{running:?}");
    let volume = &running["volumes"][0];
    let target = volume["target"].as_str().unwrap().to_string();
    h.fake.pause_on_disk_errors(vec![
        DiskError {
            target: target.clone(),
            kind: DiskErrorKind::NoSpace,
        },
        // A disk the VMI does not name.
        DiskError {
            target: "sdz".to_string(),
            kind: DiskErrorKind::Unspecified,
        },
    ]);
    h.lifecycle("Suspended", "IOError");
    let paused = h.ok("query-domain", Value::Null);
    assert_eq!(
        (paused["state"].as_str(), paused["reason"].as_str()),
        (Some("Paused"), Some("IOError"))
    );
    assert_eq!(
        paused["disk_errors"],
        json!([
            {"error": "no-space", "target": target, "volume": volume["name"]},
            {"error": "io-error", "target": "sdz", "volume": ""},
        ]),
        "{paused:?}"
    );
    // Asked only for the state, the launcher reads nothing and says
    // nothing of disks.
    let state = h.ok("query-domain", json!({"fields": ["state"]}));
    assert!(state.get("disk_errors").is_none(), "{state:?}");
    // Running again, the errors are history.
    h.ok("unpause", Value::Null);
    let resumed = h.ok("query-domain", json!({"max_age_ms": 0}));
    assert_eq!(resumed["state"], "Running", "{resumed:?}");
    assert!(resumed.get("disk_errors").is_none(), "{resumed:?}");
}
