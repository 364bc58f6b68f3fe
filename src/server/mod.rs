//! The command server thread: an acceptor plus one thread per client, at
//! most `--max-clients`. Clients talk to the domain manager only through
//! `ManagerRequest`s; events reach them through the `EventHub`.

pub mod client;
pub mod socket;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::command::{ManagerRequest, command_names};
use crate::events::EventHub;
use crate::logging::RateLimit;
use crate::protocol::{Hello, PROTOCOL_VERSION};
use crate::sink::Sink;
use crate::threads::{self, FatalSender};

/// Requests read but not yet answered, so the exit can wait for their
/// replies ("exactly one reply per request line" holds to the end).
#[derive(Default)]
pub struct InFlight {
    state: Mutex<InFlightState>,
    idle: Condvar,
}

#[derive(Default)]
struct InFlightState {
    requests: usize,
    /// Threads in `wait_idle`: a notify is a system call even with nobody
    /// waiting, so it is made only when someone is.
    waiters: usize,
}

impl InFlight {
    fn state(&self) -> std::sync::MutexGuard<'_, InFlightState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn start(&self) {
        self.state().requests += 1;
    }

    pub fn done(&self) {
        let mut state = self.state();
        state.requests = state.requests.saturating_sub(1);
        if state.requests == 0 && state.waiters > 0 {
            self.idle.notify_all();
        }
    }

    /// Waits until no request is in flight; false on timeout.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let mut state = self.state();
        state.waiters += 1;
        let (mut state, idle) = match self
            .idle
            .wait_timeout_while(state, timeout, |s| s.requests > 0)
        {
            Ok((state, result)) => (state, !result.timed_out()),
            Err(poisoned) => (poisoned.into_inner().0, false),
        };
        state.waiters -= 1;
        idle
    }
}

/// What every client thread shares.
pub struct ServerShared {
    pub vmi: String,
    pub max_line_bytes: usize,
    pub max_clients: usize,
    /// A client that does not read its events for this long is dropped.
    pub write_timeout: Duration,
    /// `--client-idle-timeout`: how long an unsubscribed connection may
    /// send nothing; `None`: forever.
    pub idle_timeout: Option<Duration>,
    pub ready: AtomicBool,
    /// Where requests go: the domain manager's inbox.
    pub manager: Sink<ManagerRequest>,
    pub hub: Arc<EventHub>,
    pub fatal: FatalSender,
    pub active_clients: AtomicUsize,
    pub in_flight: InFlight,
    next_client_id: AtomicU64,
}

impl ServerShared {
    pub fn new(
        vmi: String,
        max_line_bytes: usize,
        max_clients: usize,
        manager: Sink<ManagerRequest>,
        hub: Arc<EventHub>,
        fatal: FatalSender,
    ) -> ServerShared {
        ServerShared {
            vmi,
            max_line_bytes,
            max_clients,
            write_timeout: Duration::from_secs(10),
            idle_timeout: None,
            ready: AtomicBool::new(false),
            manager,
            hub,
            fatal,
            active_clients: AtomicUsize::new(0),
            in_flight: InFlight::default(),
            next_client_id: AtomicU64::new(1),
        }
    }

    pub fn hello(&self) -> Hello {
        Hello {
            protocol: PROTOCOL_VERSION,
            server: "virt-launcher",
            version: env!("CARGO_PKG_VERSION"),
            backend: crate::hypervisor::backend::NAME,
            pid: std::process::id(),
            vmi: self.vmi.clone(),
            ready: self.ready.load(Ordering::Acquire),
            commands: command_names(),
            max_line_bytes: self.max_line_bytes,
        }
    }
}

/// Refused connections (a flood past --max-clients) and accept failures:
/// each logged at most 5 times a minute, the rest counted.
pub static REFUSED_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(60), 5);
pub static ACCEPT_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(60), 5);

/// Logs how many rate-limited server warnings were left out (at exit).
pub fn flush_warnings() {
    let refused = REFUSED_WARNINGS.flush();
    if refused > 0 {
        log::warn!("server: {refused} more refused connections were not logged");
    }
    let accept = ACCEPT_WARNINGS.flush();
    if accept > 0 {
        log::warn!("server: {accept} more failed accepts were not logged");
    }
    let stalled = client::flush_warnings();
    if stalled > 0 {
        log::warn!("server: {stalled} more clients closed for an unfinished line were not logged");
    }
}

/// Starts the acceptor thread on `listener`.
pub fn spawn_acceptor(listener: UnixListener, shared: Arc<ServerShared>) -> std::io::Result<()> {
    let fatal = shared.fatal.clone();
    threads::spawn_named("server-accept", &fatal, move || {
        accept_loop(listener, shared)
    })?;
    Ok(())
}

fn accept_loop(listener: UnixListener, shared: Arc<ServerShared>) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: log and keep serving the others.
                crate::warn_limited!(ACCEPT_WARNINGS, "server: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let active = shared.active_clients.fetch_add(1, Ordering::AcqRel);
        if active >= shared.max_clients {
            shared.active_clients.fetch_sub(1, Ordering::AcqRel);
            crate::warn_limited!(
                REFUSED_WARNINGS,
                "server: refusing a client: {active} already connected (--max-clients)"
            );
            client::reject_busy(stream, shared.max_clients);
            continue;
        }
        let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
        let slot = client::ClientSlot(shared.clone());
        let for_client = shared.clone();
        let spawned = threads::spawn_named(&format!("client-{id}"), &shared.fatal, move || {
            let _slot = slot;
            client::serve(stream, for_client, id);
        });
        if let Err(e) = spawned {
            // The slot moved into the failed closure was dropped with it.
            log::warn!("server: cannot start a client thread: {e}");
        }
    }
}

/// Connects to `path`, reads the greeting and sends a ping: proof that the
/// socket, a client thread and the domain manager all work.
pub fn self_ping(path: &Path, timeout: Duration) -> Result<(), String> {
    let stream = UnixStream::connect(path)
        .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("cannot set socket timeouts: {e}"))?;
    let mut writer = stream
        .try_clone()
        .map_err(|e| format!("cannot clone socket: {e}"))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("no greeting: {e}"))?;
    let hello: Value = serde_json::from_str(&line).map_err(|e| format!("bad greeting: {e}"))?;
    if hello.get("hello").is_none() {
        return Err(format!("unexpected greeting: {}", line.trim_end()));
    }
    writer
        .write_all(b"{\"execute\":\"ping\",\"id\":\"self-ping\"}\n")
        .map_err(|e| format!("cannot send ping: {e}"))?;
    line.clear();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("no ping reply: {e}"))?;
    let reply: Value = serde_json::from_str(&line).map_err(|e| format!("bad ping reply: {e}"))?;
    if reply.get("return").is_some() && reply["id"] == "self-ping" {
        Ok(())
    } else {
        Err(format!("unexpected ping reply: {}", line.trim_end()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn waiting_for_idle_ends_when_the_last_request_is_answered() {
        let in_flight = Arc::new(InFlight::default());
        assert!(in_flight.wait_idle(Duration::ZERO), "nothing in flight");
        in_flight.start();
        in_flight.start();
        assert!(!in_flight.wait_idle(Duration::from_millis(20)));
        let waiter = {
            let in_flight = in_flight.clone();
            std::thread::spawn(move || in_flight.wait_idle(Duration::from_secs(30)))
        };
        // The answers come once the waiter is registered.
        while in_flight.state().waiters == 0 && !waiter.is_finished() {
            std::thread::yield_now();
        }
        in_flight.done();
        in_flight.done();
        // Not woken, it would time out after 30 s and return false.
        assert!(waiter.join().unwrap());
        assert_eq!(in_flight.state().waiters, 0);
    }
}
