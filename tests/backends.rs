//! Both backends side by side on the same running guest: the `virt`
//! backend (libvirt's C library) and the `wire` backend (libvirt's RPC
//! protocol spoken directly) must give the launcher the same values, so
//! that `query-stats`, `query-migration` and the guest-info commands give
//! the same JSON whichever backend a binary was built with.

mod common;

use std::sync::Once;
use std::time::{Duration, Instant};

use common::guest::*;
use common::*;
use crossbeam_channel::{Receiver, unbounded};
use serde_json::{Value, json};
use virt_launcher::hypervisor::libvirt::LibvirtHypervisor;
use virt_launcher::hypervisor::state::{ResumedDetail, SuspendedDetail};
use virt_launcher::hypervisor::wire::backend::WireHypervisor;
use virt_launcher::hypervisor::{
    DomainState, DomainStatus, GuestInfoKind, Hypervisor, HypervisorErrorKind, HypervisorEvent,
    LifecycleEvent, Stat, StateReason,
};

/// How long libvirt waits for the guest agent in these calls.
const AGENT: Duration = Duration::from_secs(5);

/// libvirt's event loop, once per test process (the virt backend needs it
/// for events and keepalive).
fn start_libvirt_event_loop() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        virt::error::clear_error_callback();
        virt_launcher::hypervisor::event_loop::register().expect("register the event loop");
        let (fatal, _) = unbounded();
        let running = virt_launcher::hypervisor::event_loop::spawn(&fatal).expect("event loop");
        running
            .recv_timeout(Duration::from_secs(10))
            .expect("event loop runs");
    });
}

/// The JSON type of a value, as a client decoding it would see it.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_u64() => "unsigned",
        Value::Number(n) if n.is_i64() => "signed",
        Value::Number(_) => "float",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Same names, in the same order, with the same JSON types; values equal
/// except for `moving` names (counters that advance between two calls).
fn assert_same(what: &str, a: &[Stat], b: &[Stat], moving: impl Fn(&str) -> bool) {
    let names = |s: &[Stat]| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(a), names(b), "{what}: names differ");
    for ((name, va), (_, vb)) in a.iter().zip(b) {
        assert_eq!(
            json_type(va),
            json_type(vb),
            "{what}: {name} is {va} on virt, {vb} on wire"
        );
        if !moving(name) {
            assert_eq!(va, vb, "{what}: {name}");
        }
    }
}

/// The guest info `kinds` from both backends, read while the guest's
/// answer holds still: just after the agent connects, the guest is still
/// adding addresses (IPv6 link-local and SLAAC ones appear a second or two
/// after IPv4), and a read on each side would then compare two different
/// moments. Reads virt, wire, virt again until the two virt reads have
/// the same names, for up to `STEP`; after that the last reads are
/// returned as they are, and `assert_same` names the difference.
fn settled_guest_info(
    virt: &LibvirtHypervisor,
    wire: &WireHypervisor,
    domain: &str,
    kinds: &[GuestInfoKind],
) -> (Vec<Stat>, Vec<Stat>) {
    let names = |s: &[Stat]| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    let deadline = Instant::now() + STEP;
    loop {
        let before = virt.guest_info(domain, kinds).unwrap();
        let b = wire.guest_info(domain, kinds).unwrap();
        let a = virt.guest_info(domain, kinds).unwrap();
        if names(&before) == names(&a) || Instant::now() > deadline {
            return (a, b);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A domain resumed by `unpause`.
fn running_again() -> DomainStatus {
    DomainStatus::new(DomainState::Running, StateReason::Unpaused)
}

fn next_lifecycle(rx: &Receiver<HypervisorEvent>) -> LifecycleEvent {
    loop {
        match rx.recv_timeout(STEP) {
            Ok(HypervisorEvent::Lifecycle(e)) => return e,
            Ok(_) => continue,
            Err(e) => panic!("no lifecycle event: {e}"),
        }
    }
}

#[test]
fn both_backends_give_the_same_values_on_the_same_guest() {
    if !require(REAL_GUEST) {
        return;
    }
    let opts = GuestOptions::new("twins");
    let mut booted = boot(TempTree::new("backends"), &opts, &[]);
    let uri = booted.client.ok("query-status", Value::Null)["libvirt"]["uri"]
        .as_str()
        .unwrap()
        .to_string();
    let domain = "e2e_twins";

    start_libvirt_event_loop();
    let (virt_tx, virt_events) = unbounded();
    let virt = LibvirtHypervisor::connect(&uri, domain, virt_tx.into()).expect("virt backend");
    let (wire_tx, wire_events) = unbounded();
    let wire = WireHypervisor::connect(&uri, domain, wire_tx.into()).expect("wire backend");

    let (vi, wi) = (virt.info(), wire.info());
    assert_eq!((vi.backend, wi.backend), ("virt", "wire"));
    assert_eq!(vi.driver, wi.driver);
    assert_eq!(vi.daemon_version, wi.daemon_version);
    assert_eq!(
        virt.hypervisor_version().expect("virt hypervisor_version"),
        wire.hypervisor_version().expect("wire hypervisor_version")
    );
    assert_eq!(wi.library_version, None);

    // Each call that should succeed does, on both, with the same value
    // (two identical errors would be "the same" too).
    let running = DomainStatus::new(DomainState::Running, StateReason::Booted);
    assert_eq!(virt.domain_status(domain), Ok(Some(running)));
    assert_eq!(wire.domain_status(domain), Ok(Some(running)));
    assert_eq!(virt.domain_status("e2e_nobody"), Ok(None));
    assert_eq!(wire.domain_status("e2e_nobody"), Ok(None));
    let (xml, uuid) = virt.domain_xml(domain).expect("virt: domain_xml");
    assert!(xml.contains("<name>e2e_twins</name>"), "{xml}");
    assert!(
        xml.contains(&format!("<uuid>{uuid}</uuid>")),
        "{uuid}: {xml}"
    );
    assert_eq!(
        wire.domain_xml(domain).expect("wire: domain_xml"),
        (xml, uuid)
    );
    let migratable = virt.migratable_xml(domain).expect("virt: migratable_xml");
    assert!(
        migratable.contains("<name>e2e_twins</name>"),
        "{migratable}"
    );
    assert_eq!(
        wire.migratable_xml(domain).expect("wire: migratable_xml"),
        migratable
    );

    // query-stats: the bulk statistics.
    let moving = |name: &str| {
        name.starts_with("cpu.")
            || name.ends_with(".time")
            || name.contains(".rd.")
            || name.contains(".wr.")
            || name.contains(".fl.")
            || name.contains(".rx.")
            || name.contains(".tx.")
            || name.starts_with("balloon.")
            || name.ends_with(".allocation")
            || name.ends_with(".wait")
            || name.ends_with(".delay")
    };
    let (a, b) = (virt.stats(domain).unwrap(), wire.stats(domain).unwrap());
    assert!(a.len() > 10, "{a:?}");
    assert_same("stats", &a, &b, moving);

    // The guest-info commands: everything the agent reports.
    let all = [
        GuestInfoKind::Users,
        GuestInfoKind::Os,
        GuestInfoKind::Timezone,
        GuestInfoKind::Hostname,
        GuestInfoKind::Filesystems,
        GuestInfoKind::Interfaces,
    ];
    // The domain's agent response timeout, set once (as the poller does).
    assert_eq!(virt.set_agent_timeout(domain, AGENT), Ok(()));
    assert_eq!(wire.set_agent_timeout(domain, AGENT), Ok(()));
    let (a, b) = settled_guest_info(&virt, &wire, domain, &all);
    assert!(
        a.iter().any(|(n, v)| n == "hostname" && v == "twins"),
        "{a:?}"
    );
    assert_same("guest info", &a, &b, |n| n.ends_with("-bytes"));
    for kinds in all.map(|k| [k]) {
        let (a, b) = settled_guest_info(&virt, &wire, domain, &kinds);
        assert_same("guest info", &a, &b, |n| n.ends_with("-bytes"));
    }
    let command = r#"{"execute":"guest-info"}"#;
    let reply = virt
        .agent_command(domain, command, Duration::from_secs(5))
        .expect("virt: guest-info");
    let version =
        &serde_json::from_str::<Value>(&reply).expect("guest-info is JSON")["return"]["version"];
    assert!(version.is_string(), "{reply}");
    assert_eq!(
        wire.agent_command(domain, command, Duration::from_secs(5))
            .expect("wire: guest-info"),
        reply
    );

    // query-migration: job statistics, with and without a job.
    let (a, b) = (
        virt.job_stats(domain, false).unwrap(),
        wire.job_stats(domain, false).unwrap(),
    );
    assert_eq!(a, vec![("type".to_string(), json!(0))]);
    assert_eq!(a, b);
    let (a, b) = (
        virt.job_stats(domain, true).expect("virt: completed job"),
        wire.job_stats(domain, true).expect("wire: completed job"),
    );
    assert_eq!(a, b);

    // The same refusals, with libvirt's own words.
    for (a, b) in [
        (virt.abort_job(domain), wire.abort_job(domain)),
        (
            virt.migrate_start_post_copy(domain),
            wire.migrate_start_post_copy(domain),
        ),
    ] {
        let (a, b) = (a.unwrap_err(), b.unwrap_err());
        assert_eq!(a.kind, HypervisorErrorKind::InvalidOperation, "{a}");
        assert_eq!(
            (a.kind, a.operation, &a.message),
            (b.kind, b.operation, &b.message)
        );
    }

    // Both hear the same events when the launcher pauses and resumes.
    booted.client.ok("pause", Value::Null);
    let suspended = LifecycleEvent::Suspended(SuspendedDetail::Paused);
    assert_eq!(next_lifecycle(&virt_events), suspended);
    assert_eq!(next_lifecycle(&wire_events), suspended);
    let paused = DomainStatus::new(DomainState::Paused, StateReason::User);
    assert_eq!(virt.domain_status(domain), Ok(Some(paused)));
    assert_eq!(wire.domain_status(domain), Ok(Some(paused)));
    booted.client.ok("unpause", Value::Null);
    let resumed = LifecycleEvent::Resumed(ResumedDetail::Unpaused);
    assert_eq!(next_lifecycle(&virt_events), resumed);
    assert_eq!(next_lifecycle(&wire_events), resumed);
    assert_eq!(virt.domain_status(domain), Ok(Some(running_again())));
    assert_eq!(wire.domain_status(domain), Ok(Some(running_again())));
    wire.sync_guest_time(domain, AGENT).unwrap();
    virt.sync_guest_time(domain, AGENT).unwrap();

    booted.client.ok("kill", Value::Null);
    assert_eq!(booted.launcher.wait_exit(STEP), 0);
}
