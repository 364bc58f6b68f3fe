//! Every way a domain stops, and the exit status the manager chooses.

use std::time::Duration;

use serde_json::Value;

use super::{Harness, Setup, WAIT};
use crate::exit::ExitCode;
use crate::hypervisor::fake::AcpiGuest;
use crate::hypervisor::state::StoppedDetail;
use crate::signals::Signal;

const SIGTERM: Signal = Signal::Term;
const SIGINT: Signal = Signal::Int;

#[test]
fn the_shutdown_command_ends_with_status_0_once_the_guest_is_off() {
    let h = Harness::start();
    h.sync();
    let reply = h.ok("shutdown", Value::Null);
    assert_eq!(reply["acpi_power_button"], true);
    h.lifecycle("Stopped", "Shutdown");
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::Ok);
    assert_eq!(exit.reason, "the guest powered off");
    // The stopped domain's definition is removed before the exit.
    assert!(!h.fake.is_defined());
}

#[test]
fn a_guest_that_powers_off_by_itself_ends_with_status_0() {
    let h = Harness::start();
    h.sync();
    h.fake.stops(StoppedDetail::Shutdown);
    assert_eq!(h.exit_code(), ExitCode::Ok);
}

#[test]
fn a_crash_ends_with_status_6() {
    let h = Harness::start();
    h.sync();
    h.fake.stops(StoppedDetail::Crashed);
    let stopped = h.lifecycle("Stopped", "Crashed");
    assert_eq!(stopped["data"]["state"], "Shutoff");
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::DomainCrashed);
    assert!(exit.reason.contains("reason Crashed"), "{}", exit.reason);
}

#[test]
fn a_domain_destroyed_by_someone_else_ends_with_status_6() {
    let h = Harness::start();
    h.sync();
    h.fake.stops(StoppedDetail::Destroyed);
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::DomainCrashed);
    assert_eq!(
        exit.reason,
        "the domain was destroyed by something outside the launcher"
    );
}

#[test]
fn kill_ends_with_status_0() {
    let h = Harness::start();
    h.sync();
    // kill's read of the state after the destroy waits until the Stopped
    // event has been handled (and the exit decided): the exit's clean-up,
    // which removes the definition, must still wait for the reply.
    let reads_before = h.fake.calls("domain_status");
    let precondition = h.fake.hold("domain_status");
    let answer = h.send_named("kill");
    let deadline = std::time::Instant::now() + WAIT;
    while h.fake.calls("domain_status") == reads_before {
        assert!(
            std::time::Instant::now() < deadline,
            "kill never read the state"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let read_after = h.fake.hold("domain_status");
    precondition.release();
    h.lifecycle("Stopped", "Destroyed");
    std::thread::sleep(Duration::from_millis(50));
    assert!(h.fake.is_defined(), "undefined before kill's reply");
    read_after.release();
    let reply = answer
        .recv_timeout(WAIT)
        .expect("kill's reply")
        .unwrap()
        .into_object();
    assert_eq!(
        (reply["state"].as_str(), reply["reason"].as_str()),
        (Some("Shutoff"), Some("Destroyed")),
        "{reply:?}"
    );
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::Ok);
    assert_eq!(exit.reason, "the domain was killed on request");
}

#[test]
fn a_domain_that_migrated_away_ends_with_status_0() {
    let h = Harness::start();
    h.sync();
    h.fake.stops(StoppedDetail::Migrated);
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::Ok);
    assert_eq!(exit.reason, "the domain migrated away");
}

#[test]
fn a_guest_initiated_reboot_is_an_event_not_a_stop() {
    let h = Harness::start();
    h.sync();
    h.fake.guest_reboots();
    h.named("DOMAIN_REBOOT");
    h.no_exit_within(Duration::from_millis(300));
    let status = h.status();
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["domain"]["state"], "Running");
}

#[test]
fn sigterm_powers_a_cooperative_guest_off_with_status_0() {
    let h = Harness::with(Setup::default().flags(&["--grace-period-seconds", "30"]));
    h.sync();
    h.signal(SIGTERM);
    let started = h.named("SHUTDOWN_STARTED");
    assert_eq!(started["data"]["signal"], "SIGTERM");
    assert_eq!(started["data"]["grace_period_seconds"], 30);
    h.lifecycle("Stopped", "Shutdown");
    assert_eq!(h.exit_code(), ExitCode::Ok);
    // The first press did it (a repeat may race the guest's Stopped event
    // on a loaded machine, so only "pressed" is certain).
    assert!(h.fake.calls("shutdown_acpi") >= 1);
    assert_eq!(h.fake.calls("destroy"), 0);
}

#[test]
fn a_guest_that_ignores_acpi_is_asked_again_then_forced_off_with_status_7() {
    let h = Harness::with(Setup::default().flags(&["--grace-period-seconds", "1"]));
    h.sync();
    h.fake.set_acpi(AcpiGuest::Ignores);
    h.signal(SIGINT);
    h.named("SHUTDOWN_STARTED");
    let status = h.status();
    assert_eq!(status["phase"], "ShuttingDown");
    assert!(status["shutdown"]["remaining_seconds"].as_f64().unwrap() <= 1.0);
    // A second signal does not cut the grace period short.
    h.signal(SIGTERM);
    let expired = h.named("SHUTDOWN_GRACE_EXPIRED");
    assert_eq!(expired["data"]["grace_period_seconds"], 1);
    h.lifecycle("Stopped", "Destroyed");
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::GracePeriodExpired);
    assert!(exit.reason.contains("1 s grace period"), "{}", exit.reason);
    // The button was pressed again during the second (every 100 ms here,
    // 5 s in the launcher): a guest still booting misses the first press.
    let presses = h.fake.calls("shutdown_acpi");
    assert!(presses >= 3, "ACPI pressed {presses} times");
    assert!(h.fake.calls("destroy") >= 1);
}

#[test]
fn a_zero_grace_period_forces_the_domain_off_at_once() {
    let h = Harness::with(Setup::default().flags(&["--grace-period-seconds", "0"]));
    h.sync();
    h.signal(SIGTERM);
    h.named("SHUTDOWN_GRACE_EXPIRED");
    assert_eq!(h.exit_code(), ExitCode::GracePeriodExpired);
    assert_eq!(h.fake.calls("shutdown_acpi"), 0);
}

#[test]
fn a_forced_stop_that_fails_is_tried_again() {
    let h = Harness::with(Setup::default().flags(&["--grace-period-seconds", "0"]));
    h.sync();
    h.fake
        .fail_next("destroy", crate::hypervisor::HypervisorErrorKind::Timeout);
    h.signal(SIGTERM);
    assert_eq!(h.exit_code(), ExitCode::GracePeriodExpired);
    // The failed one and at least one retry.
    assert!(h.fake.calls("destroy") >= 2);
}

#[test]
fn sigterm_before_any_domain_exits_0_at_once() {
    let h = Harness::start();
    h.signal(SIGTERM);
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::Ok);
    assert_eq!(exit.reason, "SIGTERM received while no domain was running");
}

#[test]
fn no_domain_within_the_qemu_timeout_exits_5() {
    let h = Harness::with(Setup::default().flags(&["--qemu-timeout", "1s"]));
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::QemuTimeout);
    assert!(exit.reason.contains("--qemu-timeout"), "{}", exit.reason);
}

#[test]
fn a_stop_seen_only_by_a_job_still_ends_the_launcher() {
    // libvirt's Stopped event never comes (lost); a job saw the domain
    // off, and the manager exits after a short wait for the event.
    let h = Harness::start();
    h.sync();
    h.fake.stops_unheard(StoppedDetail::Crashed);
    let reply = h.ok("query-domain", Value::Null);
    assert_eq!(reply["state"], "Shutoff");
    let exit = h.exit();
    assert_eq!(exit.code, ExitCode::DomainCrashed);
}

#[test]
fn the_first_shutdown_command_is_when_the_grace_period_began() {
    let h = Harness::start();
    h.sync();
    h.fake.set_acpi(AcpiGuest::Ignores);
    assert!(h.status().get("shutdown_requested").is_none());
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    h.ok("shutdown", Value::Null);
    let first = h.status()["shutdown_requested"].as_f64().unwrap();
    assert!(first >= before.floor(), "{first} < {before}");
    // virt-handler asks again while the guest ignores it: the start stays.
    std::thread::sleep(Duration::from_millis(20));
    h.ok("shutdown", Value::Null);
    assert_eq!(h.status()["shutdown_requested"].as_f64(), Some(first));
}
