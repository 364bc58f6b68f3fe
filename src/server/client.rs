//! One client connection: reads request lines, answers each in order, and
//! (after `subscribe`) runs an event writer beside the reader.

use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::ServerShared;
use crate::command::{COMMANDS, Command, LocalCommand, ManagerCommand, ManagerRequest, ReplySlot};
use crate::events::{Event, EventKind, SubscribeRefusal, SubscriberQueue};
use crate::logging::RateLimit;
use crate::protocol::codec::{Frame, LineReader, LineTimeouts, Stalled};
use crate::protocol::{
    CommandError, CommandResult, ErrorClass, encode_error, encode_hello, encode_return,
    parse_request,
};
use crate::replies::{CommandList, CommandSummary, Subscribed, Unsubscribed};
use crate::sink::Sink;
use crate::threads;

/// How long a client may take to finish a line, from its first byte.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(30);

/// Clients dropped for stalling, logged at most 5 a minute.
static STALLED_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(60), 5);

/// How many stalled-client warnings were left out since the last one logged.
pub(super) fn flush_warnings() -> u64 {
    STALLED_WARNINGS.flush()
}

/// The write half, shared by the reader (replies) and the event writer so
/// that whole lines never interleave.
#[derive(Clone)]
struct Outbox(Arc<Mutex<UnixStream>>);

impl Outbox {
    fn write_line(&self, line: &str) -> io::Result<()> {
        let mut stream = self.0.lock().unwrap_or_else(|p| p.into_inner());
        stream.write_all(line.as_bytes())
    }

    fn close(&self) {
        let stream = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}

struct Connection {
    id: u64,
    shared: Arc<ServerShared>,
    outbox: Outbox,
    subscription: Option<u64>,
    /// Where the manager's answers to this connection's requests arrive.
    replies: ReplySlot,
}

/// Serves one connection until the client closes it.
pub fn serve(stream: UnixStream, shared: Arc<ServerShared>, id: u64) {
    let writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            log::warn!("server: client {id}: cannot clone socket: {e}");
            return;
        }
    };
    if let Err(e) = writer.set_write_timeout(Some(shared.write_timeout)) {
        log::warn!("server: client {id}: cannot set write timeout: {e}");
    }
    let mut conn = Connection {
        id,
        outbox: Outbox(Arc::new(Mutex::new(writer))),
        shared,
        subscription: None,
        replies: ReplySlot::new(),
    };
    if conn
        .outbox
        .write_line(&encode_hello(&conn.shared.hello()))
        .is_err()
    {
        return;
    }
    let mut reader = LineReader::new(stream, conn.shared.max_line_bytes);
    reader.set_timeouts(LineTimeouts {
        line: LINE_TIMEOUT,
        idle: conn.shared.idle_timeout,
    });
    loop {
        let frame = reader.next_frame();
        if matches!(frame, Ok(Some(_))) {
            conn.shared.in_flight.start();
        }
        let reply = match frame {
            Ok(Some(Frame::Line(line))) => {
                log::trace!("server: client {id} -> {}", String::from_utf8_lossy(&line));
                let reply = conn.handle_line(&line);
                // A subscriber waits for events, not requests: no idle limit.
                reader.set_idle_timeout(match conn.subscription {
                    Some(_) => None,
                    None => conn.shared.idle_timeout,
                });
                reply
            }
            Ok(Some(Frame::TooLarge { bytes })) => encode_error(
                &CommandError::new(
                    ErrorClass::RequestTooLarge,
                    format!(
                        "request of {bytes} bytes exceeds the limit of {} bytes (--max-line-bytes); it was discarded",
                        conn.shared.max_line_bytes
                    ),
                ),
                None,
            ),
            Ok(None) => break,
            // A line left unfinished too long, or an idle connection past
            // --client-idle-timeout: closed without a reply.
            Err(e) if Stalled::from_error(&e).is_some() => {
                match Stalled::from_error(&e) {
                    Some(Stalled::Idle(_)) => {
                        log::debug!("server: client {id}: {e}; closing")
                    }
                    _ => {
                        crate::warn_limited!(STALLED_WARNINGS, "server: client {id}: {e}; closing")
                    }
                }
                break;
            }
            Err(e) => {
                log::debug!("server: client {id}: read error: {e}");
                break;
            }
        };
        log::trace!("server: client {id} <- {}", reply.trim_end());
        let written = conn.outbox.write_line(&reply);
        conn.shared.in_flight.done();
        if written.is_err() {
            break;
        }
    }
    if let Some(sub) = conn.subscription.take() {
        conn.shared.hub.unsubscribe(sub);
    }
    conn.outbox.close();
    log::debug!("server: client {id} disconnected");
}

impl Connection {
    /// Turns one request line into exactly one reply line.
    fn handle_line(&mut self, line: &[u8]) -> String {
        let request = match parse_request(line) {
            Ok(r) => r,
            Err(rejected) => return encode_error(&rejected.error, rejected.id.as_ref()),
        };
        let id = request.id;
        let result = match Command::parse(&request.execute, request.arguments) {
            Ok(Command::Local(command)) => self.run_local(command),
            Ok(Command::Manager(command)) => {
                ask_manager(&self.shared.manager, &self.replies, command)
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(ret) => encode_return(&ret, id.as_ref()),
            Err(e) => encode_error(&e, id.as_ref()),
        }
    }

    fn run_local(&mut self, command: LocalCommand) -> CommandResult {
        match command {
            LocalCommand::QueryCommands => {
                let commands = COMMANDS
                    .iter()
                    .map(|c| CommandSummary {
                        name: c.name,
                        summary: c.summary,
                    })
                    .collect();
                Ok(CommandList { commands }.into())
            }
            LocalCommand::Subscribe { events, since } => self.subscribe(events, since),
            LocalCommand::Unsubscribe => {
                let was = self.subscription.take();
                if let Some(id) = was {
                    self.shared.hub.unsubscribe(id);
                }
                Ok(Unsubscribed {
                    subscribed: false,
                    was_subscribed: was.is_some(),
                }
                .into())
            }
        }
    }

    fn subscribe(&mut self, events: Option<Vec<EventKind>>, since: Option<u64>) -> CommandResult {
        let names: Vec<&'static str> = match &events {
            Some(kinds) => kinds.iter().map(|k| k.name()).collect(),
            None => EventKind::ALL.iter().map(|k| k.name()).collect(),
        };
        let mut reply = Subscribed {
            events: names,
            subscribed: true,
            last_seq: self.shared.hub.last_seq(),
        };
        if let Some(id) = self.subscription {
            if since.is_some() {
                return Err(CommandError::invalid_argument(
                    "arguments.since starts a subscription, and this connection has one: \
                     leave since out to change the filter, or unsubscribe first",
                ));
            }
            self.shared.hub.set_filter(id, events);
            return Ok(reply.into());
        }
        let queue = match self.shared.hub.subscribe_since(events, since) {
            Ok(queue) => queue,
            Err(SubscribeRefusal::Closed) => {
                return Err(CommandError::invalid_state(
                    "the launcher is exiting and accepts no new subscribers",
                ));
            }
            Err(SubscribeRefusal::SinceAhead { since, last }) => {
                return Err(CommandError::invalid_argument(format!(
                    "arguments.since {since} is after the last event this launcher published ({last}): \
                     those events came from another launcher (a restart starts again at 1; \
                     an upgrade keeps the numbers); subscribe without since"
                )));
            }
        };
        reply.last_seq = queue.last_seq;
        self.subscription = Some(queue.id);
        let outbox = self.outbox.clone();
        let name = format!("client-{}-events", self.id);
        if let Err(e) = threads::spawn_named(&name, &self.shared.fatal, move || {
            write_events(queue, outbox)
        }) {
            if let Some(id) = self.subscription.take() {
                self.shared.hub.unsubscribe(id);
            }
            return Err(CommandError::internal(format!(
                "cannot start the event writer thread: {e}"
            )));
        }
        Ok(reply.into())
    }
}

/// Writes queued events until the subscription ends or the client stops
/// reading (a write that times out ends the connection).
/// EVENTS_DROPPED's data: how many events this subscriber missed.
#[derive(Debug, serde::Serialize)]
struct EventsDropped {
    count: u64,
}

fn write_events(queue: SubscriberQueue, outbox: Outbox) {
    while let Ok(event) = queue.events.recv() {
        let dropped = queue.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let notice = Event::new(EventKind::EventsDropped, &EventsDropped { count: dropped });
            if outbox.write_line(&notice.line).is_err() {
                outbox.close();
                break;
            }
        }
        if outbox.write_line(&event.line).is_err() {
            outbox.close();
            break;
        }
    }
}

/// Sends `command` to the domain manager with a reply slot on the
/// connection's reply channel and waits for the reply. The manager answers
/// every request exactly once (jobs have their own deadlines), so the wait
/// is bounded by those; should it drop the request unanswered, the client
/// is told so at once.
fn ask_manager(
    manager: &Sink<ManagerRequest>,
    replies: &ReplySlot,
    command: ManagerCommand,
) -> CommandResult {
    let reply = replies.reply_to(command.name());
    if manager.send(ManagerRequest { command, reply }).is_err() {
        // Answered here: the error the unsent request's reply slot left
        // must not reach the next request.
        replies.discard();
        return Err(CommandError::new(
            ErrorClass::Unavailable,
            "the domain manager has stopped; the launcher is exiting",
        ));
    }
    replies.wait()
}

pub(super) fn reject_busy(mut stream: UnixStream, max_clients: usize) {
    let line = encode_error(
        &CommandError::new(
            ErrorClass::Busy,
            format!(
                "too many clients: this launcher serves at most {max_clients} connections at once (--max-clients); try again later"
            ),
        ),
        None,
    );
    let _ = stream.set_write_timeout(Some(std::time::Duration::from_secs(1)));
    let _ = stream.write_all(line.as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Keeps the active-client count right however a client thread ends.
pub(super) struct ClientSlot(pub Arc<ServerShared>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.active_clients.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::DomainCommand;
    use crate::protocol::Return;

    #[test]
    fn a_request_the_manager_drops_fails_instead_of_hanging() {
        let (manager, requests) = crossbeam_channel::unbounded::<ManagerRequest>();
        let manager = Sink::from(manager);
        // A manager that drops the first request and answers the second.
        let fake = std::thread::spawn(move || {
            drop(requests.recv().unwrap());
            let answered = requests.recv().unwrap();
            answered.reply.send(Ok(Return::new()));
        });
        let replies = ReplySlot::new();
        let dropped = ask_manager(
            &manager,
            &replies,
            ManagerCommand::Domain(DomainCommand::Pause),
        );
        let err = dropped.unwrap_err();
        assert_eq!(err.class, ErrorClass::Internal);
        assert!(err.desc.starts_with("pause: "), "{}", err.desc);
        // The next request on the same connection gets its own reply.
        assert_eq!(
            ask_manager(
                &manager,
                &replies,
                ManagerCommand::Domain(DomainCommand::Ping)
            ),
            Ok(Return::new())
        );
        fake.join().unwrap();
        drop(manager);
    }

    #[test]
    fn a_request_after_the_manager_stopped_is_unavailable() {
        let (manager, requests) = crossbeam_channel::unbounded::<ManagerRequest>();
        let manager = Sink::from(manager);
        drop(requests);
        let replies = ReplySlot::new();
        // Twice on one connection: the first refusal leaves nothing behind
        // in the reply channel for the second request to read.
        for _ in 0..2 {
            let err = ask_manager(
                &manager,
                &replies,
                ManagerCommand::Domain(DomainCommand::Ping),
            )
            .unwrap_err();
            assert_eq!(err.class, ErrorClass::Unavailable);
        }
    }
}
