//! A synchronous client of libvirt's RPC protocol on one unix socket.
//!
//! Callers on any thread send a CALL with the next serial number and wait
//! (with a deadline) on a channel of their own. One reader thread owns the
//! socket's read side: it routes each REPLY to the caller waiting for its
//! serial, hands event MESSAGEs to a `Listener`, answers the daemon's
//! keepalive PINGs and sends its own, as libvirt's client does: after
//! `interval` without any message from the daemon a PING goes out, and
//! after `count` unanswered ones the connection is declared dead.
//!
//! A call of one of libvirt's `@readstream` procedures (the screenshot)
//! opens a stream: the daemon answers the call, sends the data as STREAM
//! messages with the call's serial (status CONTINUE, and an empty one at
//! the end), and this side finishes it with an empty OK, which the daemon
//! confirms with another (`call_reading_stream`).
//!
//! Anything wrong with the byte stream (a length outside the protocol, a
//! header that does not parse, a program or version this client does not
//! speak, a reply nobody asked for, EOF, an I/O error) closes the
//! connection: every waiting caller gets `ConnectionLost` naming the cause
//! and the listener hears `closed` once. A reply whose payload the caller
//! cannot decode fails only that call.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};

use super::codec::{
    self, DecodeError, Decoder, Header, LENGTH_BYTES, MessageStatus, MessageType, RemoteError,
};
use super::procedures::{self, KEEPALIVE, KEEPALIVE_PING, KEEPALIVE_PONG, Procedure, limits};

/// Keepalive and socket settings. `Default` is what the `virt` backend
/// asks of libvirt (`hypervisor::libvirt`): a probe after 30 s of silence,
/// the connection dead after 3 unanswered ones.
#[derive(Debug, Clone, Copy)]
pub struct ClientOptions {
    /// Silence from the daemon after which a PING is sent.
    pub keepalive_interval: Duration,
    /// Unanswered PINGs after which the connection is dead.
    pub keepalive_count: u32,
    /// How long a send may block on a daemon that does not read.
    pub write_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            keepalive_interval: Duration::from_secs(30),
            keepalive_count: 3,
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Why the connection closed, in the terms of libvirt's close callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// A read or write failed, or the daemon broke the protocol.
    Error,
    /// The daemon closed the socket.
    Eof,
    /// The daemon stopped answering keepalive probes.
    Keepalive,
    /// This side closed it.
    Client,
}

impl CloseReason {
    /// `virConnectCloseReason`.
    pub fn libvirt_code(self) -> i32 {
        match self {
            CloseReason::Error => 0,
            CloseReason::Eof => 1,
            CloseReason::Keepalive => 2,
            CloseReason::Client => 3,
        }
    }
}

/// What the reader thread hands to its owner.
pub trait Listener: Send + 'static {
    /// An asynchronous MESSAGE of the REMOTE program (an event). Runs on
    /// the reader thread: copy what is needed and return at once.
    fn event(&mut self, procedure: i32, payload: &[u8]);
    /// The connection closed for a reason other than `Client::close`;
    /// called once.
    fn closed(&mut self, reason: CloseReason, detail: &str);
}

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcError {
    /// The daemon carried out the call and reports an error.
    Remote(RemoteError),
    /// The connection is closed (or closed while waiting): why.
    ConnectionLost(String),
    /// No reply within the deadline; the connection may still be fine.
    Timeout(Duration),
    /// The exchange made no sense: a reply that does not decode, to the
    /// wrong procedure, or a request too large to send.
    Protocol(String),
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::Remote(e) => write!(f, "{}", e.message),
            RpcError::ConnectionLost(why) => write!(f, "connection to the daemon lost: {why}"),
            RpcError::Timeout(waited) => {
                write!(f, "no reply from the daemon within {} s", waited.as_secs())
            }
            RpcError::Protocol(what) => write!(f, "protocol error: {what}"),
        }
    }
}

type ReplyResult = Result<Vec<u8>, RpcError>;

/// Why the reader closes the connection while handling what the daemon
/// sent: the daemon broke the protocol, or answering it failed. Its message
/// (which includes its cause's) becomes the close reason every waiting
/// caller gets in [`RpcError::ConnectionLost`].
#[derive(Debug)]
enum ReaderError {
    /// A frame's length word is outside the protocol.
    BadLength(DecodeError),
    /// A message header that does not parse.
    BadHeader(DecodeError),
    UnknownProgram {
        program: u32,
        procedure: i32,
    },
    WrongVersion {
        program: &'static str,
        version: u32,
        speaks: u32,
    },
    /// A message type a client never receives (a CALL, ...).
    UnexpectedKind {
        kind: MessageType,
        procedure: i32,
    },
    /// A keepalive that is not a one-way message.
    KeepaliveKind(MessageType),
    /// Answering the daemon's keepalive PING failed.
    KeepaliveAnswer(io::Error),
    /// A stream's end (status OK) that carries data.
    StreamEndWithData {
        bytes: usize,
        serial: u32,
    },
    /// A stream's error (status ERROR) that does not decode.
    UndecodableStreamError(DecodeError),
    /// An error reply to this side's end of a stream that does not decode.
    UndecodableStreamEndError(DecodeError),
    /// A stream message for a serial no stream is open for.
    UnknownStream {
        serial: u32,
        procedure: i32,
    },
    /// A reply to a serial no call is waiting for.
    UnknownReply {
        serial: u32,
        procedure: i32,
    },
}

impl fmt::Display for ReaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReaderError::BadLength(e) => write!(f, "bad message from the daemon: {}", e.what),
            ReaderError::BadHeader(e) => write!(f, "bad message header from the daemon: {e}"),
            ReaderError::UnknownProgram { program, procedure } => write!(
                f,
                "message for unknown program {program:#x} (procedure {procedure})"
            ),
            ReaderError::WrongVersion {
                program,
                version,
                speaks,
            } => write!(
                f,
                "message for {program} program version {version}; this client speaks version {speaks}"
            ),
            ReaderError::UnexpectedKind { kind, procedure } => write!(
                f,
                "the daemon sent a {kind:?} message (procedure {procedure}), which a client never receives"
            ),
            ReaderError::KeepaliveKind(kind) => write!(
                f,
                "keepalive {kind:?} message; keepalives are one-way messages"
            ),
            ReaderError::KeepaliveAnswer(e) => {
                write!(f, "answering the daemon's keepalive probe failed: {e}")
            }
            ReaderError::StreamEndWithData { bytes, serial } => write!(
                f,
                "stream message with status OK and {bytes} bytes (serial {serial}); the end of a stream carries none"
            ),
            ReaderError::UndecodableStreamError(e) => {
                write!(f, "undecodable stream error from the daemon: {e}")
            }
            ReaderError::UndecodableStreamEndError(e) => {
                write!(f, "undecodable error reply to a stream's end: {e}")
            }
            ReaderError::UnknownStream { serial, procedure } => write!(
                f,
                "stream message with serial {serial} (procedure {procedure}) that no stream is open for"
            ),
            ReaderError::UnknownReply { serial, procedure } => write!(
                f,
                "reply with serial {serial} (procedure {procedure}) that no call is waiting for"
            ),
        }
    }
}

impl std::error::Error for ReaderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReaderError::BadLength(e)
            | ReaderError::BadHeader(e)
            | ReaderError::UndecodableStreamError(e)
            | ReaderError::UndecodableStreamEndError(e) => Some(e),
            ReaderError::KeepaliveAnswer(e) => Some(e),
            ReaderError::UnknownProgram { .. }
            | ReaderError::WrongVersion { .. }
            | ReaderError::UnexpectedKind { .. }
            | ReaderError::KeepaliveKind(_)
            | ReaderError::StreamEndWithData { .. }
            | ReaderError::UnknownStream { .. }
            | ReaderError::UnknownReply { .. } => None,
        }
    }
}

/// One packet of a stream the daemon sends (`VIR_NET_STREAM` messages
/// with the serial of the call that opened the stream).
#[derive(Debug)]
enum StreamPacket {
    /// Status CONTINUE: the next bytes.
    Data(Vec<u8>),
    /// No data: the end of the stream (status CONTINUE), or the daemon's
    /// confirmation of this side's finish or abort (status OK).
    End,
    /// Status ERROR (or an error REPLY to this side's finish): the
    /// stream failed.
    Error(RemoteError),
}

/// A call whose reply is followed by a stream of data (libvirt's
/// `@readstream` procedures, such as the screenshot): the reply's payload
/// and the stream's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedReply {
    pub reply: Vec<u8>,
    pub data: Vec<u8>,
}

struct Waiting {
    procedure: Procedure,
    reply: Sender<ReplyResult>,
}

/// Calls in flight, and whether the connection is still usable. One lock,
/// so no call can start waiting after the connection closed.
struct Calls {
    waiting: HashMap<u32, Waiting>,
    /// Streams being read, by the serial of the call that opened them.
    streams: HashMap<u32, Sender<StreamPacket>>,
    next_serial: u32,
    /// Serials of calls that gave up waiting; their late replies are
    /// dropped quietly.
    abandoned: VecDeque<u32>,
    closed: Option<(CloseReason, String)>,
}

const ABANDONED_REMEMBERED: usize = 256;

struct Shared {
    writer: Mutex<UnixStream>,
    calls: Mutex<Calls>,
    keepalive: AtomicBool,
    options: ClientOptions,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every holder leaves these structures consistent between statements;
    // a panic elsewhere must not stop the connection from closing.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// Marks the connection closed, fails every waiting call and shuts the
    /// socket (which wakes the reader). The first close wins.
    fn close(&self, reason: CloseReason, why: &str) {
        let waiting = {
            let mut calls = lock(&self.calls);
            if calls.closed.is_some() {
                return;
            }
            calls.closed = Some((reason, why.to_string()));
            // Dropping the senders tells stream readers the connection
            // is gone.
            calls.streams.clear();
            std::mem::take(&mut calls.waiting)
        };
        for (_, w) in waiting {
            let _ = w
                .reply
                .try_send(Err(RpcError::ConnectionLost(why.to_string())));
        }
        let _ = lock(&self.writer).shutdown(Shutdown::Both);
    }

    fn closed(&self) -> Option<(CloseReason, String)> {
        lock(&self.calls).closed.clone()
    }

    fn is_closed(&self) -> bool {
        lock(&self.calls).closed.is_some()
    }

    fn send(&self, frame: &[u8]) -> io::Result<()> {
        lock(&self.writer).write_all(frame)
    }

    fn send_keepalive(&self, procedure: i32) -> io::Result<()> {
        let frame = Header {
            program: KEEPALIVE.number,
            version: KEEPALIVE.version,
            procedure,
            kind: MessageType::Message,
            serial: 0,
            status: MessageStatus::Ok,
        }
        .frame(&[]);
        self.send(&frame)
    }
}

/// A call sent and not yet answered (`Client::send_call`).
#[must_use = "a sent call's reply must be waited for"]
pub struct PendingCall {
    serial: u32,
    reply: Receiver<ReplyResult>,
}

/// One connection to a libvirt daemon.
pub struct Client {
    shared: Arc<Shared>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl Client {
    /// Connects to the daemon's socket and starts the reader thread.
    pub fn connect(
        path: &Path,
        options: ClientOptions,
        listener: Box<dyn Listener>,
    ) -> io::Result<Client> {
        let stream = UnixStream::connect(path)?;
        Client::from_stream(stream, options, listener)
    }

    /// Runs the protocol on an already connected socket.
    pub fn from_stream(
        stream: UnixStream,
        options: ClientOptions,
        listener: Box<dyn Listener>,
    ) -> io::Result<Client> {
        stream.set_write_timeout(Some(options.write_timeout))?;
        let reader_stream = stream.try_clone()?;
        let shared = Arc::new(Shared {
            writer: Mutex::new(stream),
            calls: Mutex::new(Calls {
                waiting: HashMap::new(),
                streams: HashMap::new(),
                next_serial: 0,
                abandoned: VecDeque::new(),
                closed: None,
            }),
            keepalive: AtomicBool::new(false),
            options,
        });
        let reader_shared = shared.clone();
        let reader = thread::Builder::new()
            .name("libvirt-rpc".into())
            .spawn(move || run_reader(reader_stream, reader_shared, listener))?;
        Ok(Client {
            shared,
            reader: Mutex::new(Some(reader)),
        })
    }

    /// Starts keepalive probing (once the daemon said it supports it).
    pub fn enable_keepalive(&self) {
        self.shared.keepalive.store(true, Ordering::Release);
    }

    pub fn is_open(&self) -> bool {
        !self.shared.is_closed()
    }

    /// Calls `procedure` with an encoded argument payload and returns the
    /// reply's payload. Waits at most `deadline`.
    pub fn call(&self, procedure: &Procedure, args: &[u8], deadline: Duration) -> ReplyResult {
        let pending = self.send_call(procedure, args)?;
        self.wait_reply(pending, deadline)
    }

    /// Sends a call without waiting for its reply, so that several calls
    /// can be in flight at once (the daemon runs them on its workers in
    /// parallel). Every `PendingCall` must be given to `wait_reply`.
    pub fn send_call(&self, procedure: &Procedure, args: &[u8]) -> Result<PendingCall, RpcError> {
        self.send_call_with(procedure, args, None)
    }

    /// `send_call`, with the packets of the stream the call opens (if
    /// `stream` is given) sent there; registered before the call goes
    /// out, because the daemon may send data before its reply.
    fn send_call_with(
        &self,
        procedure: &Procedure,
        args: &[u8],
        stream: Option<Sender<StreamPacket>>,
    ) -> Result<PendingCall, RpcError> {
        let (tx, rx) = bounded(1);
        let serial = {
            let mut calls = lock(&self.shared.calls);
            if let Some((_, why)) = &calls.closed {
                return Err(RpcError::ConnectionLost(why.clone()));
            }
            let serial = calls.next_serial;
            calls.next_serial = serial.wrapping_add(1);
            calls.waiting.insert(
                serial,
                Waiting {
                    procedure: *procedure,
                    reply: tx,
                },
            );
            if let Some(stream) = stream {
                calls.streams.insert(serial, stream);
            }
            serial
        };
        let frame = Header {
            program: procedure.program.number,
            version: procedure.program.version,
            procedure: procedure.number,
            kind: MessageType::Call,
            serial,
            status: MessageStatus::Ok,
        }
        .frame(args);
        if frame.len() > limits::MESSAGE_MAX + LENGTH_BYTES {
            let mut calls = lock(&self.shared.calls);
            calls.waiting.remove(&serial);
            calls.streams.remove(&serial);
            drop(calls);
            return Err(RpcError::Protocol(format!(
                "the call's arguments make a message of {} bytes; the protocol allows {}",
                frame.len(),
                limits::MESSAGE_MAX + LENGTH_BYTES
            )));
        }
        if let Err(e) = self.shared.send(&frame) {
            let why = format!("sending {} failed: {e}", procedure.api);
            self.shared.close(CloseReason::Error, &why);
            return Err(RpcError::ConnectionLost(why));
        }
        Ok(PendingCall { serial, reply: rx })
    }

    /// Waits at most `deadline` for the reply to a call `send_call` sent.
    pub fn wait_reply(&self, pending: PendingCall, deadline: Duration) -> ReplyResult {
        self.wait(pending.serial, &pending.reply, deadline)
    }

    fn wait(&self, serial: u32, rx: &Receiver<ReplyResult>, deadline: Duration) -> ReplyResult {
        match rx.recv_timeout(deadline) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                let mut calls = lock(&self.shared.calls);
                if calls.waiting.remove(&serial).is_some() {
                    calls.abandoned.push_back(serial);
                    if calls.abandoned.len() > ABANDONED_REMEMBERED {
                        calls.abandoned.pop_front();
                    }
                    return Err(RpcError::Timeout(deadline));
                }
                drop(calls);
                // The reply (or the close) raced the deadline: take it.
                rx.try_recv().unwrap_or_else(|_| {
                    Err(RpcError::ConnectionLost("the connection closed".into()))
                })
            }
            Err(RecvTimeoutError::Disconnected) => {
                let why = self
                    .shared
                    .closed()
                    .map_or_else(|| "the connection closed".into(), |(_, why)| why);
                Err(RpcError::ConnectionLost(why))
            }
        }
    }

    /// Calls a procedure that answers with a reply and then streams data
    /// to this side (libvirt's `@readstream` procedures), reads the
    /// stream to its end (an empty CONTINUE) and finishes it as libvirt's
    /// client does: an empty STREAM message with status OK, which the
    /// daemon confirms with the same. All of it within `deadline`; a stream longer than
    /// `max_bytes` is aborted.
    pub fn call_reading_stream(
        &self,
        procedure: &Procedure,
        args: &[u8],
        deadline: Duration,
        max_bytes: usize,
    ) -> Result<StreamedReply, RpcError> {
        let started = Instant::now();
        let (tx, packets) = crossbeam_channel::unbounded();
        let pending = self.send_call_with(procedure, args, Some(tx))?;
        let serial = pending.serial;
        let result = self.read_stream(procedure, pending, &packets, started, deadline, max_bytes);
        let mut calls = lock(&self.shared.calls);
        calls.streams.remove(&serial);
        if result.is_err() {
            // Whatever the daemon still sends for this stream (the
            // confirmation of an abort, an error reply) is dropped.
            calls.abandoned.push_back(serial);
            if calls.abandoned.len() > ABANDONED_REMEMBERED {
                calls.abandoned.pop_front();
            }
        }
        result
    }

    fn read_stream(
        &self,
        procedure: &Procedure,
        pending: PendingCall,
        packets: &Receiver<StreamPacket>,
        started: Instant,
        deadline: Duration,
        max_bytes: usize,
    ) -> Result<StreamedReply, RpcError> {
        let serial = pending.serial;
        let reply = self.wait_reply(pending, deadline)?;
        let next = || {
            let left = deadline.saturating_sub(started.elapsed());
            match packets.recv_timeout(left) {
                Ok(packet) => Ok(packet),
                Err(RecvTimeoutError::Timeout) => Err(RpcError::Timeout(deadline)),
                Err(RecvTimeoutError::Disconnected) => Err(RpcError::ConnectionLost(
                    self.shared
                        .closed()
                        .map_or_else(|| "the connection closed".into(), |(_, why)| why),
                )),
            }
        };
        let mut data = Vec::new();
        loop {
            match next() {
                Ok(StreamPacket::Data(chunk)) => {
                    data.extend_from_slice(&chunk);
                    if data.len() > max_bytes {
                        self.send_stream_end(procedure, serial, MessageStatus::Error)?;
                        return Err(RpcError::Protocol(format!(
                            "{}: the stream went on past {max_bytes} bytes; aborted it",
                            procedure.api
                        )));
                    }
                }
                Ok(StreamPacket::End) => break,
                Ok(StreamPacket::Error(e)) => return Err(RpcError::Remote(e)),
                Err(e) => {
                    if matches!(e, RpcError::Timeout(_)) {
                        self.send_stream_end(procedure, serial, MessageStatus::Error)?;
                    }
                    return Err(e);
                }
            }
        }
        self.send_stream_end(procedure, serial, MessageStatus::Ok)?;
        match next()? {
            StreamPacket::End => Ok(StreamedReply { reply, data }),
            StreamPacket::Error(e) => Err(RpcError::Remote(e)),
            StreamPacket::Data(_) => Err(RpcError::Protocol(format!(
                "{}: the daemon sent stream data after the stream's end",
                procedure.api
            ))),
        }
    }

    /// This side's end of a stream: status OK finishes it, ERROR aborts
    /// it (libvirt's `virStreamFinish` and `virStreamAbort`).
    fn send_stream_end(
        &self,
        procedure: &Procedure,
        serial: u32,
        status: MessageStatus,
    ) -> Result<(), RpcError> {
        let frame = Header {
            program: procedure.program.number,
            version: procedure.program.version,
            procedure: procedure.number,
            kind: MessageType::Stream,
            serial,
            status,
        }
        .frame(&[]);
        self.shared.send(&frame).map_err(|e| {
            let why = format!("ending the stream of {} failed: {e}", procedure.api);
            self.shared.close(CloseReason::Error, &why);
            RpcError::ConnectionLost(why)
        })
    }

    /// Closes the connection without notifying the listener. Calls still
    /// waiting fail with `ConnectionLost`.
    pub fn close(&self) {
        self.shared.close(
            CloseReason::Client,
            "the connection was closed by the launcher",
        );
        if let Some(reader) = lock(&self.reader).take() {
            // The shutdown ends the reader's blocking read at once; do not
            // join from the reader thread itself.
            if reader.thread().id() != thread::current().id() {
                let _ = reader.join();
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}

/// The shortest read timeout the reader sets: a keepalive due in less
/// is handled now.
const MIN_WAIT: Duration = Duration::from_millis(10);

/// How far the socket's read timeout may be from the keepalive timer's
/// next due time before it is set again.
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

/// The reader thread. It notifies the listener of every close this side
/// did not ask for, including one a failed send caused on a caller's
/// thread; a panic in it (a bug) closes the connection like any failure,
/// so the launcher reconnects instead of hanging.
fn run_reader(stream: UnixStream, shared: Arc<Shared>, listener: Box<dyn Listener>) {
    let mut reader = Reader {
        stream,
        shared: shared.clone(),
        listener,
        buf: Vec::new(),
        last_received: Instant::now(),
        last_ping: None,
        unanswered: 0,
        read_timeout: None,
    };
    match panic::catch_unwind(AssertUnwindSafe(|| reader.run())) {
        Ok((reason, why)) => shared.close(reason, &why),
        Err(payload) => {
            let why = format!(
                "internal error in the RPC reader: {}",
                crate::threads::panic_message(&payload)
            );
            log::error!("libvirt connection: {why}");
            shared.close(CloseReason::Error, &why);
        }
    }
    if let Some((reason, why)) = shared.closed()
        && reason != CloseReason::Client
    {
        log::warn!("libvirt connection closed: {why}");
        reader.listener.closed(reason, &why);
    }
}

struct Reader {
    stream: UnixStream,
    shared: Arc<Shared>,
    listener: Box<dyn Listener>,
    /// Bytes read but not yet a whole frame.
    buf: Vec<u8>,
    last_received: Instant,
    last_ping: Option<Instant>,
    unanswered: u32,
    /// The read timeout set on the socket (`None`: none yet).
    read_timeout: Option<Duration>,
}

/// Reads above this are kept only while needed: a one-off large reply
/// does not pin its buffer for the connection's lifetime.
const KEEP_BUFFER: usize = 256 * 1024;

impl Reader {
    /// Runs until the connection closes; returns why.
    fn run(&mut self) -> (CloseReason, String) {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if let Some(closed) = self.shared.closed() {
                return closed;
            }
            // Wake for the keepalive timer only: an idle connection costs
            // one wake-up per keepalive interval, not one per tick.
            let wait = self.until_keepalive_due();
            // Nearly every read follows a message, after which the wait is
            // the interval less a few microseconds: keep the timeout set
            // rather than make a system call per message.
            if self
                .read_timeout
                .is_none_or(|set| set.abs_diff(wait) > TIMEOUT_SLACK)
            {
                if let Err(e) = self.stream.set_read_timeout(Some(wait)) {
                    return (
                        CloseReason::Error,
                        format!("cannot set the socket's read timeout: {e}"),
                    );
                }
                self.read_timeout = Some(wait);
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    if let Some(closed) = self.shared.closed() {
                        return closed;
                    }
                    let detail = if self.buf.is_empty() {
                        "the daemon closed the connection (end of file)".to_string()
                    } else {
                        format!(
                            "the daemon closed the connection in the middle of a message ({} bytes of it received)",
                            self.buf.len()
                        )
                    };
                    return (CloseReason::Eof, detail);
                }
                Ok(n) => {
                    self.last_received = Instant::now();
                    self.unanswered = 0;
                    self.last_ping = None;
                    self.buf.extend_from_slice(&chunk[..n]);
                    if let Err(e) = self.dispatch_frames() {
                        return (CloseReason::Error, e.to_string());
                    }
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if let Some(closed) = self.shared.closed() {
                        return closed;
                    }
                    return (
                        CloseReason::Error,
                        format!("reading from the daemon failed: {e}"),
                    );
                }
            }
            if let Err(closed) = self.keepalive_tick() {
                return closed;
            }
        }
    }

    /// How long until the keepalive timer has something to do: `interval`
    /// after the last message heard or the last PING sent (whichever is
    /// later). Before keepalive is enabled the same interval applies, so
    /// that enabling it takes effect within one.
    fn until_keepalive_due(&self) -> Duration {
        let interval = self.shared.options.keepalive_interval;
        let since = self
            .last_ping
            .map_or(self.last_received, |ping| ping.max(self.last_received));
        (since + interval)
            .saturating_duration_since(Instant::now())
            .max(MIN_WAIT)
    }

    /// libvirt's keepalive timer: after `interval` of silence send a PING;
    /// `count` PINGs without anything heard back means the daemon is gone.
    fn keepalive_tick(&mut self) -> Result<(), (CloseReason, String)> {
        if !self.shared.keepalive.load(Ordering::Acquire) {
            return Ok(());
        }
        let options = self.shared.options;
        let now = Instant::now();
        let since_heard = now.duration_since(self.last_received);
        let since_ping = self.last_ping.map(|t| now.duration_since(t));
        if since_heard < options.keepalive_interval
            || since_ping.is_some_and(|d| d < options.keepalive_interval)
        {
            return Ok(());
        }
        if self.unanswered >= options.keepalive_count {
            return Err((
                CloseReason::Keepalive,
                format!(
                    "the daemon did not answer {} keepalive probes ({:.0} s without a message)",
                    self.unanswered,
                    since_heard.as_secs_f64()
                ),
            ));
        }
        if let Err(e) = self.shared.send_keepalive(KEEPALIVE_PING) {
            return Err((
                CloseReason::Error,
                format!("sending a keepalive probe failed: {e}"),
            ));
        }
        self.unanswered += 1;
        self.last_ping = Some(now);
        Ok(())
    }

    /// Handles every whole frame in the buffer.
    fn dispatch_frames(&mut self) -> Result<(), ReaderError> {
        let mut start = 0;
        let result = loop {
            let rest = &self.buf[start..];
            if rest.len() < LENGTH_BYTES {
                break Ok(());
            }
            let body_len = match codec::body_length([rest[0], rest[1], rest[2], rest[3]]) {
                Ok(n) => n,
                Err(e) => break Err(ReaderError::BadLength(e)),
            };
            if rest.len() < LENGTH_BYTES + body_len {
                break Ok(());
            }
            let body = rest[LENGTH_BYTES..LENGTH_BYTES + body_len].to_vec();
            start += LENGTH_BYTES + body_len;
            if let Err(e) = self.handle(&body) {
                break Err(e);
            }
        };
        self.buf.drain(..start);
        if self.buf.capacity() > KEEP_BUFFER && self.buf.len() < KEEP_BUFFER {
            self.buf.shrink_to(KEEP_BUFFER);
        }
        result
    }

    /// One message (header and payload, without the length word).
    fn handle(&mut self, body: &[u8]) -> Result<(), ReaderError> {
        let (header, payload) = Header::parse(body).map_err(ReaderError::BadHeader)?;
        let program = [procedures::REMOTE, procedures::QEMU, KEEPALIVE]
            .into_iter()
            .find(|p| p.number == header.program)
            .ok_or(ReaderError::UnknownProgram {
                program: header.program,
                procedure: header.procedure,
            })?;
        if header.version != program.version {
            return Err(ReaderError::WrongVersion {
                program: program.name,
                version: header.version,
                speaks: program.version,
            });
        }
        if program == KEEPALIVE {
            return self.handle_keepalive(&header);
        }
        log::trace!(
            "libvirt connection: {:?} {:?} procedure {} serial {}, {} bytes",
            header.kind,
            header.status,
            header.procedure,
            header.serial,
            payload.len()
        );
        match header.kind {
            MessageType::Reply => self.handle_reply(&header, payload),
            MessageType::Stream => self.handle_stream(&header, payload),
            MessageType::Message if program == procedures::REMOTE => {
                self.listener.event(header.procedure, payload);
                Ok(())
            }
            MessageType::Message => {
                // No QEMU-program events are registered; a daemon sending
                // one is odd but harmless.
                log::warn!(
                    "libvirt connection: ignoring unrequested {} event {}",
                    program.name,
                    header.procedure
                );
                Ok(())
            }
            kind => Err(ReaderError::UnexpectedKind {
                kind,
                procedure: header.procedure,
            }),
        }
    }

    fn handle_keepalive(&mut self, header: &Header) -> Result<(), ReaderError> {
        if header.kind != MessageType::Message {
            return Err(ReaderError::KeepaliveKind(header.kind));
        }
        match header.procedure {
            KEEPALIVE_PING => self
                .shared
                .send_keepalive(KEEPALIVE_PONG)
                .map_err(ReaderError::KeepaliveAnswer),
            KEEPALIVE_PONG => Ok(()),
            other => {
                log::warn!("libvirt connection: ignoring unknown keepalive procedure {other}");
                Ok(())
            }
        }
    }

    /// A packet of a stream the daemon sends: to its reader, or dropped if
    /// nobody reads that stream any more (it was aborted or gave up).
    fn handle_stream(&mut self, header: &Header, payload: &[u8]) -> Result<(), ReaderError> {
        // libvirtd's virNetServerProgramSendStreamData: data is CONTINUE,
        // the end of the data an empty CONTINUE, the confirmation of this
        // side's finish (or abort) an empty OK.
        let packet = match header.status {
            MessageStatus::Continue if payload.is_empty() => StreamPacket::End,
            MessageStatus::Continue => StreamPacket::Data(payload.to_vec()),
            MessageStatus::Ok if payload.is_empty() => StreamPacket::End,
            MessageStatus::Ok => {
                return Err(ReaderError::StreamEndWithData {
                    bytes: payload.len(),
                    serial: header.serial,
                });
            }
            MessageStatus::Error => {
                let mut d = Decoder::new(payload);
                let error = RemoteError::decode(&mut d)
                    .and_then(|e| d.finish().map(|()| e))
                    .map_err(ReaderError::UndecodableStreamError)?;
                StreamPacket::Error(error)
            }
        };
        let calls = lock(&self.shared.calls);
        match calls.streams.get(&header.serial) {
            Some(stream) => {
                let _ = stream.send(packet);
                Ok(())
            }
            None if calls.abandoned.contains(&header.serial) => Ok(()),
            None => Err(ReaderError::UnknownStream {
                serial: header.serial,
                procedure: header.procedure,
            }),
        }
    }

    fn handle_reply(&mut self, header: &Header, payload: &[u8]) -> Result<(), ReaderError> {
        let waiting = {
            let mut calls = lock(&self.shared.calls);
            match calls.waiting.remove(&header.serial) {
                Some(w) => w,
                // An error answer to this side's finish of a stream.
                None if calls.streams.contains_key(&header.serial) => {
                    let packet = match header.status {
                        MessageStatus::Error => {
                            let mut d = Decoder::new(payload);
                            match RemoteError::decode(&mut d) {
                                Ok(e) => StreamPacket::Error(e),
                                Err(e) => return Err(ReaderError::UndecodableStreamEndError(e)),
                            }
                        }
                        _ => StreamPacket::End,
                    };
                    if let Some(stream) = calls.streams.get(&header.serial) {
                        let _ = stream.send(packet);
                    }
                    return Ok(());
                }
                None if calls.abandoned.contains(&header.serial) => {
                    log::debug!(
                        "libvirt connection: late reply to serial {} (its caller gave up)",
                        header.serial
                    );
                    return Ok(());
                }
                None => {
                    return Err(ReaderError::UnknownReply {
                        serial: header.serial,
                        procedure: header.procedure,
                    });
                }
            }
        };
        let result = if waiting.procedure.number != header.procedure
            || waiting.procedure.program.number != header.program
        {
            Err(RpcError::Protocol(format!(
                "the daemon answered {} (procedure {}) with a reply to procedure {}",
                waiting.procedure.api, waiting.procedure.number, header.procedure
            )))
        } else {
            match header.status {
                MessageStatus::Ok => Ok(payload.to_vec()),
                MessageStatus::Error => {
                    let mut d = Decoder::new(payload);
                    match RemoteError::decode(&mut d).and_then(|e| d.finish().map(|()| e)) {
                        Ok(e) => Err(RpcError::Remote(e)),
                        Err(e) => Err(RpcError::Protocol(format!(
                            "undecodable error reply to {}: {e}",
                            waiting.procedure.api
                        ))),
                    }
                }
                MessageStatus::Continue => Err(RpcError::Protocol(format!(
                    "reply to {} with status CONTINUE, which only streams use",
                    waiting.procedure.api
                ))),
            }
        };
        let _ = waiting.reply.try_send(result);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
