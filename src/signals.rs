//! The signal-watcher thread. Nothing happens in signal context: the
//! handlers (signal-hook's) only queue the signal, and this thread decides.
//!
//! | signal | effect |
//! |---|---|
//! | SIGTERM, SIGINT, SIGHUP, SIGQUIT | graceful stop: sent to the domain manager |
//! | SIGUSR1 | the launcher's state (`query-status`) is logged at info level |
//! | SIGUSR2 | `upgrade` to the launcher's own path, read again from disk (the outcome is logged) |
//! | SIGPIPE | ignored (a client that went away shows as a failed write) |
//!
//! SIGHUP and SIGQUIT stop gracefully like SIGTERM rather than take their
//! default actions (exit at once, or a core dump): either would leave the
//! socket and, with --spawn-libvirt, a QEMU that nothing supervises.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGPIPE, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::command::{DomainCommand, ManagerCommand, ManagerRequest, ReplyTo};
use crate::sink::Sink;
use crate::threads::{self, FatalSender};

/// A signal the launcher handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Term,
    Int,
    Hup,
    Quit,
    Usr1,
    Usr2,
    Pipe,
}

/// What a signal makes the launcher do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalAction {
    /// The graceful stop of the domain, then exit.
    Stop,
    /// Log the launcher's state.
    ReportState,
    /// Hand over to the launcher's binary as it is on disk now.
    Upgrade,
    /// Nothing.
    Ignore,
}

impl Signal {
    pub const ALL: [Signal; 7] = [
        Signal::Term,
        Signal::Int,
        Signal::Hup,
        Signal::Quit,
        Signal::Usr1,
        Signal::Usr2,
        Signal::Pipe,
    ];

    pub fn raw(self) -> i32 {
        match self {
            Signal::Term => SIGTERM,
            Signal::Int => SIGINT,
            Signal::Hup => SIGHUP,
            Signal::Quit => SIGQUIT,
            Signal::Usr1 => SIGUSR1,
            Signal::Usr2 => SIGUSR2,
            Signal::Pipe => SIGPIPE,
        }
    }

    pub fn from_raw(raw: i32) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.raw() == raw)
    }

    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Int => "SIGINT",
            Signal::Hup => "SIGHUP",
            Signal::Quit => "SIGQUIT",
            Signal::Usr1 => "SIGUSR1",
            Signal::Usr2 => "SIGUSR2",
            Signal::Pipe => "SIGPIPE",
        }
    }

    pub fn action(self) -> SignalAction {
        match self {
            Signal::Term | Signal::Int | Signal::Hup | Signal::Quit => SignalAction::Stop,
            Signal::Usr1 => SignalAction::ReportState,
            Signal::Usr2 => SignalAction::Upgrade,
            Signal::Pipe => SignalAction::Ignore,
        }
    }
}

/// The name of a raw signal number, for logs ("signal" when unknown).
pub fn name_of(raw: i32) -> &'static str {
    Signal::from_raw(raw).map_or("signal", Signal::name)
}

/// Where SIGUSR1/SIGUSR2 ask for the launcher's state: set once the domain
/// manager runs. Before that, the signal is logged without a state.
#[derive(Clone, Default)]
pub struct StateReporter(Arc<OnceLock<Sink<ManagerRequest>>>);

impl StateReporter {
    /// Connects the reporter to the domain manager's inbox.
    pub fn connect(&self, manager: Sink<ManagerRequest>) {
        let _ = self.0.set(manager);
    }

    /// Asks the manager for `query-status` and logs the answer.
    fn report(&self, signal: Signal) {
        let Some(manager) = self.0.get() else {
            log::info!(
                "signals: {}: the domain manager is not running yet; no state to report",
                signal.name()
            );
            return;
        };
        let (reply, answer) = ReplyTo::channel();
        let request = ManagerRequest {
            command: ManagerCommand::Domain(DomainCommand::QueryStatus),
            reply,
        };
        if manager.send(request).is_err() {
            log::info!("signals: {}: the domain manager has stopped", signal.name());
            return;
        }
        // query-status is answered from the manager's own view at once.
        match answer.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(status)) => log::info!(
                "signals: {}: state {}",
                signal.name(),
                serde_json::Value::Object(status.into_object())
            ),
            Ok(Err(e)) => log::info!("signals: {}: query-status failed: {e}", signal.name()),
            Err(_) => log::warn!(
                "signals: {}: the domain manager did not answer query-status within 5 s",
                signal.name()
            ),
        }
    }
}

impl StateReporter {
    /// SIGUSR2: asks the manager for `upgrade` to the launcher's own path;
    /// the outcome is logged by the manager and the main thread (this
    /// thread does not wait: a stop signal must not queue behind it).
    fn upgrade(&self) {
        let Some(manager) = self.0.get() else {
            log::info!("signals: SIGUSR2: the launcher is still starting; no upgrade");
            return;
        };
        log::info!("signals: SIGUSR2: upgrading to the launcher's binary as it is on disk now");
        let (reply, _answer) = ReplyTo::channel();
        let request = ManagerRequest {
            command: ManagerCommand::Domain(DomainCommand::Upgrade { binary: None }),
            reply,
        };
        if manager.send(request).is_err() {
            log::info!("signals: SIGUSR2: the domain manager has stopped");
        }
    }
}

/// Installs the handlers and starts the watcher. Handlers are installed
/// before this returns, so no signal after it is lost. Stop signals go to
/// `to_manager` as raw numbers.
pub fn spawn(
    to_manager: Sink<Signal>,
    reporter: StateReporter,
    fatal: &FatalSender,
) -> Result<(), String> {
    let raw: Vec<i32> = Signal::ALL.iter().map(|s| s.raw()).collect();
    let mut signals =
        Signals::new(raw).map_err(|e| format!("cannot install signal handlers: {e}"))?;
    // A stop signal during an upgrade's hand-over is noted at once, by the
    // handler, so that one just before the exec still reaches the new
    // launcher (`crate::upgrade::exec_now`).
    for signal in Signal::ALL {
        if signal.action() != SignalAction::Stop {
            continue;
        }
        let raw = signal.raw();
        // SAFETY: the action only loads and stores atomics, which is
        // async-signal-safe.
        unsafe { signal_hook::low_level::register(raw, move || crate::upgrade::note_signal(raw)) }
            .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    }
    threads::spawn_named("signals", fatal, move || {
        for raw in signals.forever() {
            let Some(signal) = Signal::from_raw(raw) else {
                continue;
            };
            match signal.action() {
                SignalAction::Stop => {
                    log::info!("signals: received {}", signal.name());
                    if to_manager.send(signal).is_err() {
                        break;
                    }
                }
                SignalAction::ReportState => reporter.report(signal),
                SignalAction::Upgrade => reporter.upgrade(),
                SignalAction::Ignore => log::debug!("signals: {} ignored", signal.name()),
            }
        }
    })
    .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_actions() {
        for signal in Signal::ALL {
            assert_eq!(Signal::from_raw(signal.raw()), Some(signal));
            assert_eq!(name_of(signal.raw()), signal.name());
        }
        assert_eq!(name_of(libc::SIGKILL), "signal");
        assert_eq!(Signal::Hup.action(), SignalAction::Stop);
        assert_eq!(Signal::Quit.action(), SignalAction::Stop);
        assert_eq!(Signal::Usr1.action(), SignalAction::ReportState);
        assert_eq!(Signal::Usr2.action(), SignalAction::Upgrade);
        assert_eq!(Signal::Pipe.action(), SignalAction::Ignore);
    }
}
