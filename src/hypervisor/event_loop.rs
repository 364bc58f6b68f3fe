//! The libvirt event-loop thread. libvirt dispatches domain events,
//! keepalives and connection-close notices only while someone runs its
//! event loop; this thread does nothing else.

use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, bounded};

use super::ffi;
use crate::threads::{self, FatalSender};

/// Registers libvirt's default event implementation. Call once, before
/// opening any connection.
pub fn register() -> Result<(), String> {
    ffi::register_default_event_impl()
        .map_err(|e| format!("could not register libvirt's event loop implementation: {e}"))
}

/// Starts the event-loop thread. The returned channel receives `()` once
/// the loop has dispatched its first callback, i.e. it really runs.
pub fn spawn(fatal: &FatalSender) -> Result<Receiver<()>, String> {
    let (running_tx, running_rx) = bounded(1);
    ffi::notify_when_loop_runs(running_tx)
        .map_err(|e| format!("could not arm the event loop start-up timer: {e}"))?;
    threads::spawn_named("libvirt-events", fatal, || {
        loop {
            if let Err(e) = ffi::run_default_event_loop_once() {
                // A failing iteration is usually transient (a poll error);
                // pause briefly so a persistent failure does not spin.
                log::error!("events: libvirt event loop iteration failed: {e}");
                thread::sleep(Duration::from_secs(1));
            }
        }
    })
    .map_err(|e| format!("could not start the libvirt event loop thread: {e}"))?;
    Ok(running_rx)
}
