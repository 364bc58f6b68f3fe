//! The signal-watcher thread: turns SIGTERM and SIGINT into messages for
//! the domain manager. Nothing else happens in signal context.

use crossbeam_channel::Sender;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::threads::{self, FatalSender};

/// Installs the handlers and starts the watcher. Handlers are installed
/// before this returns, so no signal after it is lost.
pub fn spawn(to_manager: Sender<i32>, fatal: &FatalSender) -> Result<(), String> {
    let mut signals = Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    threads::spawn_named("signals", fatal, move || {
        for signal in signals.forever() {
            log::info!("signals: received {}", crate::manager::signal_name(signal));
            if to_manager.send(signal).is_err() {
                break;
            }
        }
    })
    .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}
