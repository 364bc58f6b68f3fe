//! What the manager reports stays true: however events and job results
//! interleave, after a reconnect or adoption, after a start that libvirt
//! lost, and validation before state.

use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::{Value, json};

use super::{Built, DOMAIN, Harness, Setup, WAIT, build, class, files_under, vmi};
use crate::exit::ExitCode;
use crate::hypervisor::state::{ResumedDetail, StartedDetail, SuspendedDetail};
use crate::hypervisor::{
    DomainState, DomainStatus, DriverKind, HypervisorErrorKind, LifecycleEvent, StateReason,
};
use crate::manager::jobs::{JobOutput, Observation, Operation};
use crate::manager::reply::JobValue;
use crate::manager::{DomainManager, ManagerInput};
use crate::protocol::ErrorClass;

fn running() -> DomainStatus {
    DomainStatus::new(DomainState::Running, StateReason::Unpaused)
}

fn paused_by_user() -> DomainStatus {
    DomainStatus::new(DomainState::Paused, StateReason::User)
}

/// Starts a job that "reads" `observed` at once; its completion waits in
/// the channel until `complete_job`.
fn start_job(m: &mut DomainManager, operation: Operation, observed: Option<DomainStatus>) {
    m.jobs
        .spawn(operation, None, Duration::from_secs(5), move |_| {
            JobOutput {
                result: Ok(JobValue::Empty),
                observed: Observation::Status(observed),
            }
        });
}

/// Handles the next job completion.
fn complete_job(m: &mut DomainManager, inbox: &Receiver<ManagerInput>) {
    let done = loop {
        match inbox.recv_timeout(WAIT).expect("a job completes") {
            ManagerInput::JobDone(done) => break *done,
            _ => continue,
        }
    };
    let finished = m.jobs.finish(done).unwrap();
    m.handle_job_done(finished);
}

fn shown(m: &DomainManager) -> (String, String, bool) {
    let domain = m.query_status().domain;
    (
        domain.state.to_string(),
        domain.reason.to_string(),
        domain.paused_by_user,
    )
}

#[test]
fn paused_by_user_agrees_with_the_state_however_replies_and_events_interleave() {
    let Built {
        mut manager,
        inbox_rx,
        ..
    } = build(Setup::default());
    let m = &mut manager;
    m.on_lifecycle(LifecycleEvent::Started(StartedDetail::Booted));
    // unpause: libvirt resumes (its Resumed event is still in flight) and
    // the job reads Running; its completion is handled first.
    start_job(m, Operation::Unpause, Some(running()));
    complete_job(m, &inbox_rx);
    // pause, admitted next: libvirt suspends, the job reads Paused/User.
    start_job(m, Operation::Pause, Some(paused_by_user()));
    complete_job(m, &inbox_rx);
    // Only now do the two events arrive, in libvirt's order.
    m.on_lifecycle(LifecycleEvent::Resumed(ResumedDetail::Unpaused));
    m.on_lifecycle(LifecycleEvent::Suspended(SuspendedDetail::Paused));
    assert_eq!(shown(m), ("Paused".into(), "User".into(), true));
    // And the other way round.
    start_job(m, Operation::Unpause, Some(running()));
    complete_job(m, &inbox_rx);
    m.on_lifecycle(LifecycleEvent::Resumed(ResumedDetail::Unpaused));
    assert_eq!(shown(m), ("Running".into(), "Unpaused".into(), false));
}

#[test]
fn a_state_read_before_a_newer_event_does_not_overwrite_it() {
    let Built {
        mut manager,
        inbox_rx,
        ..
    } = build(Setup::default());
    let m = &mut manager;
    m.on_lifecycle(LifecycleEvent::Started(StartedDetail::Booted));
    // query-domain reads Running; meanwhile the domain is paused and the
    // event is handled before the query's result.
    start_job(m, Operation::QueryDomain, Some(running()));
    m.on_lifecycle(LifecycleEvent::Suspended(SuspendedDetail::Paused));
    complete_job(m, &inbox_rx);
    assert_eq!(shown(m), ("Paused".into(), "User".into(), true));
    // A read with no event in between still counts (a stop libvirt never
    // reported, for example).
    start_job(m, Operation::QueryDomain, Some(running()));
    complete_job(m, &inbox_rx);
    assert_eq!(shown(m).0, "Running");
}

#[test]
fn a_paused_domain_sync_does_not_resume_is_paused_by_user() {
    // libvirt's test driver cannot start a domain paused (the converter
    // refuses startStrategy Paused there): a QEMU connection, no pod network.
    let h = Harness::with(
        Setup::default()
            .driver(DriverKind::Qemu)
            .flags(&["--force-emulation"]),
    );
    let mut vmi = vmi();
    vmi["spec"]["domain"]["devices"]["autoattachPodInterface"] = json!(false);
    let vmi = || vmi.clone();
    let mut paused_vmi = vmi();
    paused_vmi["spec"]["startStrategy"] = json!("Paused");
    let synced = h.ok("sync", json!({ "vmi": paused_vmi }));
    assert_eq!(synced["started_paused"], true);
    assert_eq!(synced["state"], "Paused");
    h.lifecycle("Suspended", "Paused");
    assert_eq!(h.status()["domain"]["paused_by_user"], true);
    // sync leaves it paused.
    assert_eq!(h.ok("sync", json!({ "vmi": vmi() }))["action"], "none");
    assert_eq!(h.ok("unpause", Value::Null)["state"], "Running");
    h.lifecycle("Resumed", "Unpaused");
    assert_eq!(h.status()["domain"]["paused_by_user"], false);
}

#[test]
fn a_second_delete_is_refused_without_asking_libvirt() {
    let h = Harness::start();
    h.sync();
    h.ok("delete", Value::Null);
    // At once, before libvirt's Undefined event is handled or not.
    let err = h.err("delete", Value::Null);
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
    assert!(err.desc.contains("is not defined"), "{}", err.desc);
    assert_eq!(h.fake.calls("undefine"), 1);
    h.lifecycle("Undefined", "Removed");
    std::thread::sleep(Duration::from_millis(100));
    let later = h.pending_events();
    assert!(
        !later.iter().any(|e| e["data"]["event"] == "Undefined"),
        "{later:?}"
    );
    // The transient domain still runs, and stopping it still ends the
    // launcher.
    assert_eq!(h.status()["domain"]["state"], "Running");
    h.ok("kill", Value::Null);
    assert_eq!(h.exit_code(), ExitCode::Ok);
}

#[test]
fn an_agent_that_connected_while_libvirt_was_away_is_seen_after_the_reconnect() {
    let h = Harness::start();
    h.sync();
    // libvirt stays away until the agent has connected.
    h.fake.fail_reconnects(u32::MAX);
    h.fake.lose_connection();
    h.named("LIBVIRT_DISCONNECTED");
    // The agent connects now: libvirt's event goes nowhere.
    h.fake.agent_connects_unheard();
    h.fake.fail_reconnects(0);
    h.named("LIBVIRT_RECONNECTED");
    let connected = h.named("AGENT_CONNECTED");
    assert_eq!(
        connected["data"]["reason"],
        "channel state read from the domain"
    );
    assert_eq!(h.status()["agent"]["connected"], true);
    assert!(h.ok("guest-ping", Value::Null).is_empty());
}

#[test]
fn an_adopted_running_domain_with_its_agent_connected_takes_guest_commands() {
    let h = Harness::with(Setup::default().before_start(|fake| {
        fake.preexisting(
            DOMAIN,
            DomainStatus::new(DomainState::Running, StateReason::Booted),
            true,
        );
    }));
    h.named("AGENT_CONNECTED");
    let status = h.status();
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["domain"]["state"], "Running");
    assert_eq!(status["agent"]["connected"], true);
    assert!(h.ok("guest-ping", Value::Null).is_empty());
}

#[test]
fn a_start_that_libvirt_lost_says_so_and_the_next_sync_cleans_up() {
    let h = Harness::start();
    h.fake
        .fail_next("start", HypervisorErrorKind::ConnectionLost);
    let err = h.err("sync", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::Unavailable, "{err}");
    assert!(
        err.desc.contains("whether it started is not known"),
        "{}",
        err.desc
    );
    let said = err.causes.join(" | ");
    assert!(!said.contains("undefined again"), "{said}");
    assert!(said.contains("stays defined"), "{said}");
    // That is what is true: defined, not running, files kept.
    assert!(h.fake.is_defined());
    assert_eq!(h.fake.status().map(|s| s.state), Some(DomainState::Shutoff));
    assert!(
        files_under(&h.path("ephemeral"))
            .iter()
            .any(|f| f.ends_with("noCloud.iso"))
    );
    h.named("LIBVIRT_DISCONNECTED");
    h.named("LIBVIRT_RECONNECTED");
    h.wait_status("reconnected", |s| s["libvirt"]["connected"] == true);
    let again = h.ok("sync", json!({ "vmi": vmi() }));
    assert_eq!(again["action"], "redefined-and-started");
    assert_eq!(again["state"], "Running");
}

#[test]
fn a_failed_start_whose_undo_fails_says_the_domain_stays_defined() {
    let h = Harness::start();
    h.fake.fail_next("start", HypervisorErrorKind::Other);
    h.fake.fail_next("undefine", HypervisorErrorKind::Other);
    let err = h.err("sync", json!({ "vmi": vmi() }));
    let said = err.causes.join(" | ");
    assert!(!said.contains("undefined again"), "{said}");
    assert!(said.contains("the domain stays defined"), "{said}");
    assert!(h.fake.is_defined());
    assert_eq!(
        h.ok("sync", json!({ "vmi": vmi() }))["action"],
        "redefined-and-started"
    );
}

#[test]
fn an_exiting_launcher_answers_an_invalid_sync_with_the_validation_error() {
    let h = Harness::start();
    h.sync();
    h.ok("kill", Value::Null);
    h.exit();
    assert_eq!(h.status()["phase"], "Exiting");
    let mut bad = vmi();
    bad["spec"]["domain"]["cpu"] = json!([1]);
    let err = h.err("sync", json!({ "vmi": bad }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument, "{err}");
    let err = h.err("sync", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::InvalidState);
    assert_eq!(err.desc, "sync: the launcher is exiting");
}

#[test]
fn migrate_on_a_driver_that_cannot_migrate_is_unavailable_up_front() {
    let h = Harness::start();
    h.sync();
    let err = h.err(
        "migrate",
        json!({"target": {"libvirt_uri": "qemu+tcp://elsewhere/system"}}),
    );
    assert_eq!(class(&err), ErrorClass::Unavailable, "{err}");
    assert!(
        err.desc.contains("test driver cannot migrate"),
        "{}",
        err.desc
    );
    assert!(h.status()["migration"].is_null());
    let err = h.err("prepare-migration-target", json!({ "vmi": vmi() }));
    assert_eq!(class(&err), ErrorClass::Unavailable);
}

#[test]
fn migration_commands_check_their_input_before_the_launchers_state() {
    let h = Harness::with(
        Setup::default()
            .driver(DriverKind::Qemu)
            .flags(&["--force-emulation"]),
    );
    // No pod network on this host: the VMI asks for none.
    let mut unnetworked = vmi();
    unnetworked["spec"]["domain"]["devices"]["autoattachPodInterface"] = json!(false);
    // No domain runs, but the address is wrong: that is the answer.
    let err = h.err(
        "migrate",
        json!({"target": {"libvirt_uri": "qemu+unix:///system?socket=/nonexistent/sock"}}),
    );
    assert_eq!(class(&err), ErrorClass::InvalidArgument, "{err}");
    let err = h.err(
        "migrate",
        json!({"target": {"libvirt_uri": "qemu+tcp://elsewhere/system"}}),
    );
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
    let synced = h.ok("sync", json!({ "vmi": unnetworked }));
    assert_eq!(synced["state"], "Running", "{synced:?}");
    let mut bad = unnetworked.clone();
    bad["metadata"]["uid"] = json!("someone-else");
    let err = h.err("prepare-migration-target", json!({ "vmi": bad }));
    assert_eq!(class(&err), ErrorClass::InvalidArgument, "{err}");
    // As docs/protocol.md shows it for a QEMU launcher that runs a domain.
    let err = h.err("prepare-migration-target", json!({ "vmi": unnetworked }));
    assert_eq!(class(&err), ErrorClass::InvalidState, "{err}");
    assert_eq!(
        err.desc,
        "prepare-migration-target: this launcher already runs a domain (phase Running, domain Running); a target must be a fresh launcher"
    );
}

#[test]
fn a_paused_domain_that_libvirt_gives_up_during_the_resume_is_started_again() {
    // A daemon restarted while QEMU was starting: it reports the domain
    // paused, then gives it up; sync's resume finds it gone.
    let h = Harness::with(Setup::default().before_start(|fake| {
        fake.preexisting(
            DOMAIN,
            DomainStatus::new(DomainState::Paused, StateReason::StartingUp),
            false,
        );
    }));
    h.wait_status("the paused domain adopted", |s| {
        s["domain"]["state"] == "Paused"
    });
    let gate = h.fake.hold("resume");
    let syncing = {
        let arguments = match json!({ "vmi": vmi() }) {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        match crate::command::Command::parse("sync", arguments) {
            Ok(crate::command::Command::Manager(command)) => h.send(command),
            other => panic!("sync is not a manager command: {other:?}"),
        }
    };
    let deadline = std::time::Instant::now() + WAIT;
    while h.fake.calls("resume") == 0 {
        assert!(std::time::Instant::now() < deadline, "sync never resumed");
        std::thread::sleep(Duration::from_millis(5));
    }
    h.fake
        .stops_unheard(crate::hypervisor::state::StoppedDetail::Failed);
    gate.release();
    let reply = syncing
        .recv_timeout(WAIT)
        .expect("a reply to sync")
        .map(crate::protocol::Return::into_object)
        .unwrap_or_else(|e| panic!("sync failed: {e}"));
    assert_eq!(reply["action"], "redefined-and-started", "{reply:?}");
    assert_eq!(reply["state"], "Running", "{reply:?}");
    assert_eq!(h.fake.status().map(|s| s.state), Some(DomainState::Running));
}
