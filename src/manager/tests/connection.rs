//! Losing libvirt and getting it back.

use std::time::Duration;

use serde_json::Value;

use super::{Harness, class};
use crate::exit::ExitCode;
use crate::hypervisor::ConnectionId;
use crate::hypervisor::state::StoppedDetail;
use crate::protocol::ErrorClass;

#[test]
fn a_lost_connection_is_reconnected_and_the_state_read_again() {
    let h = Harness::start();
    h.sync();
    // The daemon stays away for a few attempts.
    h.fake.fail_reconnects(3);
    h.fake.lose_connection();
    let lost = h.named("LIBVIRT_DISCONNECTED");
    assert_eq!(lost["data"]["reason"], "end of file (daemon gone)");
    // Queries answer from the launcher's view meanwhile.
    let status = h.status();
    assert_eq!(status["domain"]["state"], "Running");
    h.named("LIBVIRT_RECONNECTED");
    h.wait_status("reconnected", |s| s["libvirt"]["connected"] == true);
    assert_eq!(h.fake.calls("reconnect"), 4);
    // Commands reach libvirt again.
    assert_eq!(h.ok("pause", Value::Null)["state"], "Paused");
    h.lifecycle("Suspended", "Paused");
}

#[test]
fn commands_while_libvirt_is_away_are_unavailable() {
    let h = Harness::start();
    h.sync();
    h.fake.fail_reconnects(1000);
    h.fake.lose_connection();
    h.named("LIBVIRT_DISCONNECTED");
    let status = h.status();
    assert_eq!(status["libvirt"]["connected"], false);
    let err = h.err("pause", Value::Null);
    assert_eq!(class(&err), ErrorClass::Unavailable);
    assert!(err.desc.contains("reconnecting"), "{}", err.desc);
}

#[test]
fn news_of_an_old_connection_is_ignored() {
    let h = Harness::start();
    h.sync();
    h.fake.lose_connection();
    h.named("LIBVIRT_DISCONNECTED");
    h.named("LIBVIRT_RECONNECTED");
    // The first connection's close, reported late (a second noticer).
    h.fake.stale_close(ConnectionId::FIRST);
    h.wait_status("still connected", |s| s["libvirt"]["connected"] == true);
    std::thread::sleep(Duration::from_millis(100));
    let late: Vec<Value> = h.pending_events();
    assert!(
        late.iter().all(|e| e["event"] != "LIBVIRT_DISCONNECTED"),
        "{late:?}"
    );
    assert_eq!(h.fake.calls("reconnect"), 1);
}

#[test]
fn a_domain_that_died_while_libvirt_was_away_ends_the_launcher() {
    let h = Harness::start();
    h.sync();
    // libvirt stays away until QEMU has died.
    h.fake.fail_reconnects(u32::MAX);
    h.fake.lose_connection();
    h.named("LIBVIRT_DISCONNECTED");
    // QEMU dies while nobody listens; no Stopped event will ever come.
    h.fake.stops_unheard(StoppedDetail::Crashed);
    h.fake.fail_reconnects(0);
    h.named("LIBVIRT_RECONNECTED");
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::DomainCrashed);
    assert!(exit.reason.contains("Crashed"), "{}", exit.reason);
}

#[test]
fn a_call_that_finds_the_connection_dead_starts_the_reconnect() {
    let h = Harness::start();
    h.sync();
    // The backend noticed on a call before any close notice: it reports
    // the loss itself (once, as backends must).
    h.fake.fail_next(
        "suspend",
        crate::hypervisor::HypervisorErrorKind::ConnectionLost,
    );
    let err = h.err("pause", Value::Null);
    assert_eq!(class(&err), ErrorClass::Unavailable);
    let lost = h.named("LIBVIRT_DISCONNECTED");
    assert_eq!(lost["data"]["reason"], "a libvirt call failed");
    h.named("LIBVIRT_RECONNECTED");
    assert_eq!(h.ok("pause", Value::Null)["state"], "Paused");
}
