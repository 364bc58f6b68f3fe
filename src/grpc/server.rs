//! The gRPC server side: an acceptor, and per connection a reader, a
//! writer and a few workers that run the [`Handler`].
//!
//! The reader owns everything that arrives: the HPACK decoder, the
//! receive windows, the requests being assembled. It never writes: frames
//! it owes the peer (SETTINGS and PING acknowledgements, WINDOW_UPDATEs,
//! resets) go to the writer as `Out` messages, in order. A complete
//! request goes to a worker; the worker's answer goes to the writer.
//!
//! The writer alone writes to the socket and owns what flow control
//! allows: the peer's windows and frame size. A response waits there
//! until the windows let it out, while control frames and other streams'
//! responses go on. A write that blocks past the write timeout, or a
//! response that waits that long for the peer's window, ends the
//! connection: a client that stops reading is dropped, and nothing but
//! its own connection waited for it.
//!
//! The stream count is kept where both see it: the reader counts a stream
//! in when it accepts its HEADERS, the writer counts it out when its
//! response is written or the peer reset it.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::flow::{MAX_WINDOW, ReceiveWindow, SendWindow};
use super::frame::{self, ConnError, ErrorCode, Frame, FrameReader, ReadError};
use super::hpack::{self, Decoder, Encoder};
use super::status::{Code, Status, percent_encode};
use super::{Limits, MESSAGE_PREFIX, RECEIVE_WINDOW, check_body, encode_message};
use crate::logging::RateLimit;
use crate::threads::{self, FatalSender};

/// A gRPC service: answers unary calls.
pub trait Handler: Send + Sync {
    /// Answers one call. `method` is the request's `:path`
    /// (`/kubevirt.cmd.v1.Cmd/Ping`), `request` the protobuf message's
    /// bytes; the answer is the response message's bytes, or a status. A
    /// method the handler does not have is answered with
    /// [`Status::unimplemented`].
    fn call(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, Status>;
}

/// Refused connections and failed accepts, each logged at most 5 times a
/// minute; connections dropped for not reading, likewise.
static REFUSED_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(60), 5);
static ACCEPT_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(60), 5);
static STALLED_WARNINGS: RateLimit = RateLimit::new(Duration::from_secs(60), 5);

/// Logs how many rate-limited warnings were left out (at exit).
pub fn flush_warnings() {
    for (limit, what) in [
        (&REFUSED_WARNINGS, "refused connections"),
        (&ACCEPT_WARNINGS, "failed accepts"),
        (&STALLED_WARNINGS, "connections dropped for not reading"),
    ] {
        let left_out = limit.flush();
        if left_out > 0 {
            log::warn!("grpc: {left_out} more {what} were not logged");
        }
    }
}

/// How many messages the reader and the workers may queue for a writer
/// that is blocked: past that they wait for it (a client flooding PINGs
/// without reading the answers fills this, not memory).
const OUTBOX_CAPACITY: usize = 256;

/// Once this much is buffered the writer writes it out, so a large
/// response is not first copied whole into frames.
const FLUSH_AT: usize = 64 << 10;

/// The longest `grpc-message` sent; a handler's longer text is cut.
const MAX_STATUS_MESSAGE: usize = 4096;

/// Starts the acceptor thread: one connection thread per client, at most
/// `limits.max_connections` at once.
pub fn spawn_acceptor(
    listener: UnixListener,
    handler: Arc<dyn Handler>,
    limits: Limits,
    fatal: FatalSender,
) -> io::Result<()> {
    let for_loop = fatal.clone();
    threads::spawn_named("grpc-accept", &fatal, move || {
        accept_loop(&listener, &handler, &Arc::new(limits), &for_loop);
    })?;
    Ok(())
}

/// Gives a connection's place back when its thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept_loop(
    listener: &UnixListener,
    handler: &Arc<dyn Handler>,
    limits: &Arc<Limits>,
    fatal: &FatalSender,
) {
    let connections = Arc::new(AtomicUsize::new(0));
    let mut next_id = 1u64;
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: log and keep serving the others.
                crate::warn_limited!(ACCEPT_WARNINGS, "grpc: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let open = connections.fetch_add(1, Ordering::AcqRel);
        if open >= limits.max_connections {
            connections.fetch_sub(1, Ordering::AcqRel);
            crate::warn_limited!(
                REFUSED_WARNINGS,
                "grpc: refusing a connection: {open} already open"
            );
            refuse(&stream);
            continue;
        }
        let slot = Slot(connections.clone());
        let (handler, limits, for_thread) = (handler.clone(), limits.clone(), fatal.clone());
        let spawned = threads::spawn_named(&format!("grpc-{next_id}"), fatal, move || {
            let _slot = slot;
            serve_connection(stream, handler, &limits, &for_thread);
        });
        next_id += 1;
        if let Err(e) = spawned {
            // The slot moved into the failed closure was dropped with it.
            log::warn!("grpc: cannot start a connection thread: {e}");
        }
    }
}

/// Tells a connection over the limit why it is closed: the server's
/// SETTINGS, then GOAWAY.
fn refuse(stream: &UnixStream) {
    let mut out = Vec::new();
    frame::put_settings(&mut out, &[]);
    frame::put_goaway(
        &mut out,
        0,
        ErrorCode::REFUSED_STREAM,
        "too many connections",
    );
    let mut writer = stream;
    let _ = writer.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = writer.write_all(&out);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// What the reader and the workers hand the writer, in the order the
/// frames must go out.
enum Out {
    /// Frames ready to send (acknowledgements, WINDOW_UPDATEs, resets).
    Control(Vec<u8>),
    /// A stream was accepted: its response will come.
    Open(u32),
    /// A stream's answer. `reset_after`: the client is still sending the
    /// request the answer refuses, so a RST_STREAM (NO_ERROR) follows it.
    Respond {
        stream: u32,
        result: Result<Vec<u8>, Status>,
        reset_after: bool,
    },
    /// The client reset the stream: its answer is not wanted.
    Cancel(u32),
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    PeerSettings(PeerSettings),
    /// The reader is done; with an error, a GOAWAY says why.
    Close {
        last_stream: u32,
        error: Option<ConnError>,
    },
}

/// The client's SETTINGS that concern what we send.
#[derive(Default)]
struct PeerSettings {
    initial_window: Option<u32>,
    max_frame: Option<u32>,
    header_table: Option<u32>,
}

/// Serves one connection until the client closes it or breaks the
/// protocol. The calling thread reads; a writer thread and up to
/// `max_concurrent_streams` worker threads are started beside it, named
/// after it.
pub fn serve_connection(
    stream: UnixStream,
    handler: Arc<dyn Handler>,
    limits: &Limits,
    fatal: &FatalSender,
) {
    let name = std::thread::current().name().unwrap_or("grpc").to_string();
    let write_half = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            log::warn!("{name}: cannot clone the socket: {e}");
            return;
        }
    };
    if let Err(e) = write_half.set_write_timeout(Some(limits.write_timeout)) {
        log::warn!("{name}: cannot set the write timeout: {e}");
        return;
    }
    let (out, outbox) = crossbeam_channel::bounded(OUTBOX_CAPACITY);
    let active = Arc::new(AtomicUsize::new(0));
    let writer = Writer::new(write_half, active.clone(), limits, name.clone());
    let writer = match threads::spawn_named(&format!("{name}-writer"), fatal, move || {
        writer.run(&outbox);
    }) {
        Ok(handle) => handle,
        Err(e) => {
            log::warn!("{name}: cannot start the writer thread: {e}");
            return;
        }
    };
    let shutdown_half = stream.try_clone();
    let mut reader = Reader {
        frames: FrameReader::new(stream, frame::DEFAULT_MAX_FRAME),
        decoder: Decoder::new(
            hpack::DEFAULT_TABLE_SIZE,
            usize::try_from(limits.max_header_list_bytes).unwrap_or(usize::MAX),
        ),
        workers: Workers {
            jobs: None,
            idle: Arc::new(AtomicUsize::new(0)),
            spawned: 0,
            max: usize::try_from(limits.max_concurrent_streams).unwrap_or(usize::MAX),
            handler,
            out: out.clone(),
            fatal: fatal.clone(),
            name: format!("{name}-call"),
        },
        out,
        limits,
        streams: HashMap::new(),
        last_stream: 0,
        window: ReceiveWindow::new(RECEIVE_WINDOW),
        active,
        continuation: None,
    };
    let end = reader.run();
    let error = match end {
        End::Closed => None,
        End::Failed(why) => {
            log::debug!("{name}: connection ended: {why}");
            None
        }
        End::Protocol(e) => {
            log::debug!("{name}: closing the connection: {}", e.reason);
            Some(e)
        }
    };
    let last_stream = reader.last_stream;
    let _ = reader
        .out
        .send_timeout(Out::Close { last_stream, error }, limits.write_timeout);
    // Idle workers end; busy ones when their call returns.
    drop(reader);
    let _ = writer.join();
    if let Ok(s) = shutdown_half {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

/// Why the reader stopped.
enum End {
    /// The client closed the connection.
    Closed,
    /// The socket failed or the writer is gone: nothing more to say.
    Failed(String),
    /// The client broke the protocol: a GOAWAY says how.
    Protocol(ConnError),
}

impl From<ConnError> for End {
    fn from(e: ConnError) -> End {
        End::Protocol(e)
    }
}

/// A request being received.
struct Incoming {
    method: String,
    body: Vec<u8>,
    window: ReceiveWindow,
}

/// A header block waiting for its CONTINUATION frames.
struct PartialBlock {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
}

struct Reader<'a> {
    frames: FrameReader,
    decoder: Decoder,
    workers: Workers,
    out: Sender<Out>,
    limits: &'a Limits,
    streams: HashMap<u32, Incoming>,
    /// The highest stream the client opened: lower ones are closed.
    last_stream: u32,
    /// The connection's receive window.
    window: ReceiveWindow,
    active: Arc<AtomicUsize>,
    continuation: Option<PartialBlock>,
}

impl Reader<'_> {
    fn run(&mut self) -> End {
        let preface_deadline = Instant::now() + self.limits.frame_timeout;
        match self.frames.read_preface(preface_deadline) {
            Ok(true) => {}
            Ok(false) => return ConnError::protocol("not an HTTP/2 connection preface").into(),
            Err(e) => return self.read_failed(e),
        }
        let mut first = true;
        loop {
            let frame = match self.frames.read(None, self.limits.frame_timeout) {
                Ok(frame) => frame,
                Err(e) => return self.read_failed(e),
            };
            if first && !matches!(frame, Frame::Settings { ack: false, .. }) {
                return ConnError::protocol("the first frame is not SETTINGS").into();
            }
            first = false;
            if let Err(end) = self.handle(frame) {
                return end;
            }
        }
    }

    fn read_failed(&self, e: ReadError) -> End {
        match e {
            ReadError::Closed => End::Closed,
            ReadError::Protocol(e) => End::Protocol(e),
            ReadError::TimedOut => End::Protocol(ConnError::protocol(format!(
                "frame not completed within {:?}",
                self.limits.frame_timeout
            ))),
            ReadError::Io(e) => End::Failed(e.to_string()),
        }
    }

    fn send(&self, out: Out) -> Result<(), End> {
        self.out
            .send(out)
            .map_err(|_| End::Failed("the writer is gone".into()))
    }

    fn control(&self, put: impl FnOnce(&mut Vec<u8>)) -> Result<(), End> {
        let mut bytes = Vec::new();
        put(&mut bytes);
        self.send(Out::Control(bytes))
    }

    fn reset(&mut self, stream: u32, code: ErrorCode) -> Result<(), End> {
        self.streams.remove(&stream);
        self.control(|out| frame::put_rst_stream(out, stream, code))?;
        self.send(Out::Cancel(stream))
    }

    /// A header block may not grow past this, however its fields decode.
    fn block_limit(&self) -> usize {
        usize::try_from(self.limits.max_header_list_bytes)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
    }

    fn handle(&mut self, frame: Frame) -> Result<(), End> {
        let block_limit = self.block_limit();
        if let Some(partial) = &mut self.continuation {
            let Frame::Continuation {
                stream,
                end_headers,
                block,
            } = frame
            else {
                return Err(ConnError::protocol("expected a CONTINUATION frame").into());
            };
            if stream != partial.stream {
                return Err(ConnError::protocol("CONTINUATION of another stream").into());
            }
            partial.block.extend_from_slice(&block);
            if partial.block.len() > block_limit {
                return Err(
                    ConnError::new(ErrorCode::ENHANCE_YOUR_CALM, "header block too large").into(),
                );
            }
            if end_headers && let Some(done) = self.continuation.take() {
                return self.headers(done.stream, &done.block, done.end_stream);
            }
            return Ok(());
        }
        match frame {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.data(stream, end_stream, &data, flow_len),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
            } => {
                if end_headers {
                    return self.headers(stream, &block, end_stream);
                }
                if block.len() > block_limit {
                    return Err(ConnError::new(
                        ErrorCode::ENHANCE_YOUR_CALM,
                        "header block too large",
                    )
                    .into());
                }
                self.continuation = Some(PartialBlock {
                    stream,
                    end_stream,
                    block,
                });
                Ok(())
            }
            Frame::Continuation { .. } => {
                Err(ConnError::protocol("CONTINUATION without HEADERS").into())
            }
            Frame::Settings { ack: true, .. } => Ok(()),
            Frame::Settings { ack: false, params } => self.settings(&params),
            Frame::WindowUpdate { stream, increment } => {
                if stream > self.last_stream {
                    return Err(ConnError::protocol("WINDOW_UPDATE on an idle stream").into());
                }
                match (increment, stream) {
                    (0, 0) => Err(ConnError::protocol("WINDOW_UPDATE of 0").into()),
                    (0, _) => self.reset(stream, ErrorCode::PROTOCOL_ERROR),
                    _ => self.send(Out::WindowUpdate { stream, increment }),
                }
            }
            Frame::Ping { ack: false, data } => self.control(|out| frame::put_ping_ack(out, &data)),
            Frame::Ping { ack: true, .. } => Ok(()),
            Frame::RstStream { stream, .. } => {
                if stream > self.last_stream {
                    return Err(ConnError::protocol("RST_STREAM on an idle stream").into());
                }
                self.streams.remove(&stream);
                self.send(Out::Cancel(stream))
            }
            // The client will open no more streams; those open go on.
            Frame::GoAway { .. } => Ok(()),
            Frame::PushPromise { .. } => {
                Err(ConnError::protocol("PUSH_PROMISE from a client").into())
            }
            Frame::Ignored { .. } => Ok(()),
        }
    }

    fn settings(&mut self, params: &[(u16, u32)]) -> Result<(), End> {
        let mut peer = PeerSettings::default();
        for &(id, value) in params {
            match id {
                frame::SETTINGS_HEADER_TABLE_SIZE => peer.header_table = Some(value),
                frame::SETTINGS_ENABLE_PUSH if value > 1 => {
                    return Err(ConnError::protocol("SETTINGS_ENABLE_PUSH above 1").into());
                }
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(ConnError::new(
                            ErrorCode::FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                        )
                        .into());
                    }
                    peer.initial_window = Some(value);
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME..=frame::LARGEST_MAX_FRAME).contains(&value) {
                        return Err(
                            ConnError::protocol("SETTINGS_MAX_FRAME_SIZE out of range").into()
                        );
                    }
                    peer.max_frame = Some(value);
                }
                _ => {}
            }
        }
        self.send(Out::PeerSettings(peer))?;
        self.control(frame::put_settings_ack)
    }

    fn headers(&mut self, stream: u32, block: &[u8], end_stream: bool) -> Result<(), End> {
        // Decoded whatever becomes of the stream: the table must stay in
        // step with the client's.
        let headers = self
            .decoder
            .decode(block)
            .map_err(|e| ConnError::new(ErrorCode::COMPRESSION_ERROR, e.to_string()))?;
        if stream.is_multiple_of(2) {
            return Err(ConnError::protocol(format!("stream {stream} opened by a client")).into());
        }
        if self.streams.contains_key(&stream) {
            // Trailers of a request: they end it.
            if !end_stream {
                return self.reset(stream, ErrorCode::PROTOCOL_ERROR);
            }
            return self.finish(stream);
        }
        if stream <= self.last_stream {
            // A stream already answered or reset: late frames are dropped.
            return Ok(());
        }
        self.last_stream = stream;
        let max = usize::try_from(self.limits.max_concurrent_streams).unwrap_or(usize::MAX);
        if self.active.load(Ordering::Acquire) >= max {
            return self
                .control(|out| frame::put_rst_stream(out, stream, ErrorCode::REFUSED_STREAM));
        }
        let field = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let is_grpc = field("content-type").is_some_and(|t| t.starts_with("application/grpc"));
        let method = match (field(":method"), field(":path")) {
            (Some("POST"), Some(path)) if is_grpc => path.to_string(),
            _ => {
                // Not a gRPC request: refused as a malformed one.
                return self
                    .control(|out| frame::put_rst_stream(out, stream, ErrorCode::PROTOCOL_ERROR));
            }
        };
        self.active.fetch_add(1, Ordering::AcqRel);
        self.send(Out::Open(stream))?;
        self.streams.insert(
            stream,
            Incoming {
                method,
                body: Vec::new(),
                window: ReceiveWindow::new(RECEIVE_WINDOW),
            },
        );
        if end_stream {
            return self.finish(stream);
        }
        Ok(())
    }

    fn data(
        &mut self,
        stream: u32,
        end_stream: bool,
        data: &[u8],
        flow_len: u32,
    ) -> Result<(), End> {
        if self.window.receive(flow_len).is_err() {
            return Err(ConnError::new(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the connection's window",
            )
            .into());
        }
        if let Some(increment) = self.window.release(flow_len) {
            self.control(|out| frame::put_window_update(out, 0, increment))?;
        }
        let Some(incoming) = self.streams.get_mut(&stream) else {
            if stream > self.last_stream {
                return Err(ConnError::protocol("DATA on an idle stream").into());
            }
            return Ok(());
        };
        if incoming.window.receive(flow_len).is_err() {
            return self.reset(stream, ErrorCode::FLOW_CONTROL_ERROR);
        }
        incoming.body.extend_from_slice(data);
        if let Err(status) = check_body(&incoming.body, self.limits.max_message_bytes, false) {
            self.streams.remove(&stream);
            return self.send(Out::Respond {
                stream,
                result: Err(status),
                reset_after: !end_stream,
            });
        }
        if end_stream {
            return self.finish(stream);
        }
        if let Some(increment) = incoming.window.release(flow_len) {
            self.control(|out| frame::put_window_update(out, stream, increment))?;
        }
        Ok(())
    }

    /// The client's side of the stream is complete: run the call.
    fn finish(&mut self, stream: u32) -> Result<(), End> {
        let Some(incoming) = self.streams.remove(&stream) else {
            return Ok(());
        };
        if let Err(status) = check_body(&incoming.body, self.limits.max_message_bytes, true) {
            return self.send(Out::Respond {
                stream,
                result: Err(status),
                reset_after: false,
            });
        }
        let job = Job {
            stream,
            method: incoming.method,
            body: incoming.body,
        };
        if let Err(job) = self.workers.dispatch(job) {
            return self.send(Out::Respond {
                stream: job.stream,
                result: Err(Status::new(
                    Code::ResourceExhausted,
                    "too many calls in progress on this connection",
                )),
                reset_after: false,
            });
        }
        Ok(())
    }
}

/// One call for a worker: the body still has its message prefix.
struct Job {
    stream: u32,
    method: String,
    body: Vec<u8>,
}

/// The connection's worker threads, started as calls need them: a call
/// that finds every worker busy gets a new one, up to `max`.
struct Workers {
    /// Where jobs go; made with the first worker.
    jobs: Option<(Sender<Job>, Receiver<Job>)>,
    /// Workers waiting for a job that no queued job has claimed.
    idle: Arc<AtomicUsize>,
    spawned: usize,
    max: usize,
    handler: Arc<dyn Handler>,
    out: Sender<Out>,
    fatal: FatalSender,
    name: String,
}

impl Workers {
    /// Queues `job` for a worker that will take it at once: an idle one,
    /// or a new one. Gives the job back when there can be no new one.
    fn dispatch(&mut self, job: Job) -> Result<(), Job> {
        let claimed = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        let (jobs, queue) = self
            .jobs
            .get_or_insert_with(crossbeam_channel::unbounded)
            .clone();
        if !claimed {
            if self.spawned >= self.max {
                return Err(job);
            }
            let (handler, out, idle) = (self.handler.clone(), self.out.clone(), self.idle.clone());
            let spawned = threads::spawn_named(&self.name, &self.fatal, move || {
                work(&queue, handler.as_ref(), &out, &idle);
            });
            if let Err(e) = spawned {
                log::warn!("{}: cannot start a worker thread: {e}", self.name);
                return Err(job);
            }
            self.spawned += 1;
        }
        jobs.send(job).map_err(|e| e.into_inner())
    }
}

fn work(queue: &Receiver<Job>, handler: &dyn Handler, out: &Sender<Out>, idle: &AtomicUsize) {
    for job in queue {
        let request = job.body.get(MESSAGE_PREFIX..).unwrap_or_default();
        let result = handler.call(&job.method, request);
        let answer = Out::Respond {
            stream: job.stream,
            result,
            reset_after: false,
        };
        if out.send(answer).is_err() {
            // The connection is gone; its other jobs are dropped with it.
            return;
        }
        idle.fetch_add(1, Ordering::AcqRel);
    }
}

/// A stream's response as it goes out.
struct Response {
    /// The response headers, until sent; `None` for a trailers-only answer.
    headers: Option<Vec<u8>>,
    /// The framed message, and how much of it has gone out.
    body: Vec<u8>,
    sent: usize,
    /// The trailers block (for a trailers-only answer, the whole header
    /// block).
    trailers: Vec<u8>,
    reset_after: bool,
}

/// A stream the writer knows: its send window, and its response once the
/// worker (or the reader, for a refusal) gave it.
struct Outgoing {
    window: SendWindow,
    response: Option<Response>,
}

struct Writer {
    stream: UnixStream,
    name: String,
    buf: Vec<u8>,
    /// The connection's send window.
    window: SendWindow,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE: every stream starts there.
    initial_window: u32,
    max_frame: usize,
    streams: HashMap<u32, Outgoing>,
    /// Streams with a response to send, oldest first.
    queue: VecDeque<u32>,
    encoder: Encoder,
    active: Arc<AtomicUsize>,
    write_timeout: Duration,
    max_concurrent_streams: u32,
    max_header_list_bytes: u32,
}

impl Writer {
    fn new(stream: UnixStream, active: Arc<AtomicUsize>, limits: &Limits, name: String) -> Writer {
        Writer {
            stream,
            name,
            buf: Vec::new(),
            window: SendWindow::new(super::flow::DEFAULT_WINDOW),
            initial_window: super::flow::DEFAULT_WINDOW,
            max_frame: frame::DEFAULT_MAX_FRAME as usize,
            streams: HashMap::new(),
            queue: VecDeque::new(),
            encoder: Encoder::default(),
            active,
            write_timeout: limits.write_timeout,
            max_concurrent_streams: limits.max_concurrent_streams,
            max_header_list_bytes: limits.max_header_list_bytes,
        }
    }

    fn run(mut self, outbox: &Receiver<Out>) {
        // The server's preface: our SETTINGS, and the connection window
        // raised to what the streams get.
        frame::put_settings(
            &mut self.buf,
            &[
                (
                    frame::SETTINGS_MAX_CONCURRENT_STREAMS,
                    self.max_concurrent_streams,
                ),
                (frame::SETTINGS_INITIAL_WINDOW_SIZE, RECEIVE_WINDOW),
                (
                    frame::SETTINGS_MAX_HEADER_LIST_SIZE,
                    self.max_header_list_bytes,
                ),
            ],
        );
        if let Some(increment) = ReceiveWindow::new(RECEIVE_WINDOW).initial_increment() {
            frame::put_window_update(&mut self.buf, 0, increment);
        }
        if let Err(e) = self.flush() {
            log::debug!("{}: cannot send SETTINGS: {e}", self.name);
            self.close();
            return;
        }
        let mut stalled_since: Option<Instant> = None;
        loop {
            let first = if self.queue.is_empty() {
                stalled_since = None;
                outbox.recv().ok()
            } else {
                // Everything queued waits for the client's windows.
                let since = *stalled_since.get_or_insert_with(Instant::now);
                let left = (since + self.write_timeout).saturating_duration_since(Instant::now());
                match outbox.recv_timeout(left) {
                    Ok(message) => Some(message),
                    Err(RecvTimeoutError::Disconnected) => None,
                    Err(RecvTimeoutError::Timeout) => {
                        crate::warn_limited!(
                            STALLED_WARNINGS,
                            "{}: the client gave no flow-control window for {:?}: closing the connection",
                            self.name,
                            self.write_timeout
                        );
                        break;
                    }
                }
            };
            let Some(first) = first else { break };
            let mut open = self.handle(first);
            while open {
                match outbox.try_recv() {
                    Ok(message) => open = self.handle(message),
                    Err(_) => break,
                }
            }
            // After a GOAWAY nothing more is framed, only flushed.
            let written = if open { self.pump() } else { Ok(false) }.and_then(|progress| {
                self.flush()?;
                Ok(progress)
            });
            match written {
                Ok(true) => stalled_since = None,
                Ok(false) => {}
                Err(e) => {
                    crate::warn_limited!(
                        STALLED_WARNINGS,
                        "{}: cannot write to the client ({e}): closing the connection",
                        self.name
                    );
                    break;
                }
            }
            if !open {
                break;
            }
        }
        self.close();
    }

    fn close(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let result = self.stream.write_all(&self.buf);
            self.buf.clear();
            result?;
        }
        Ok(())
    }

    /// Takes one message; false when the connection is to close.
    fn handle(&mut self, message: Out) -> bool {
        match message {
            Out::Control(bytes) => self.buf.extend_from_slice(&bytes),
            Out::Open(stream) => {
                self.streams.insert(
                    stream,
                    Outgoing {
                        window: SendWindow::new(self.initial_window),
                        response: None,
                    },
                );
            }
            Out::Respond {
                stream,
                result,
                reset_after,
            } => {
                // Encoded only for a stream that wants it: a block encoded
                // and dropped could take a table size update with it.
                let wanted = self
                    .streams
                    .get(&stream)
                    .is_some_and(|s| s.response.is_none());
                if wanted {
                    let response = self.response(result, reset_after);
                    if let Some(outgoing) = self.streams.get_mut(&stream) {
                        outgoing.response = Some(response);
                    }
                    self.queue.push_back(stream);
                }
            }
            Out::Cancel(stream) => self.end_stream(stream),
            Out::WindowUpdate {
                stream: 0,
                increment,
            } => {
                if self.window.grow(increment).is_err() {
                    return self.fail(
                        ErrorCode::FLOW_CONTROL_ERROR,
                        "connection window above 2^31-1",
                    );
                }
            }
            Out::WindowUpdate { stream, increment } => {
                let overflow = self
                    .streams
                    .get_mut(&stream)
                    .is_some_and(|s| s.window.grow(increment).is_err());
                if overflow {
                    frame::put_rst_stream(&mut self.buf, stream, ErrorCode::FLOW_CONTROL_ERROR);
                    self.end_stream(stream);
                }
            }
            Out::PeerSettings(settings) => {
                if let Some(size) = settings.header_table {
                    self.encoder
                        .set_peer_table_size(usize::try_from(size).unwrap_or(usize::MAX));
                }
                if let Some(size) = settings.max_frame {
                    self.max_frame = usize::try_from(size).unwrap_or(self.max_frame);
                }
                if let Some(initial) = settings.initial_window {
                    let delta = i64::from(initial) - i64::from(self.initial_window);
                    self.initial_window = initial;
                    for outgoing in self.streams.values_mut() {
                        if outgoing.window.adjust(delta).is_err() {
                            return self
                                .fail(ErrorCode::FLOW_CONTROL_ERROR, "stream window above 2^31-1");
                        }
                    }
                }
            }
            Out::Close { last_stream, error } => {
                if let Some(e) = error {
                    frame::put_goaway(&mut self.buf, last_stream, e.code, &e.reason);
                }
                return false;
            }
        }
        true
    }

    /// A connection error found on the sending side.
    fn fail(&mut self, code: ErrorCode, reason: &str) -> bool {
        log::debug!("{}: closing the connection: {reason}", self.name);
        let last = self.streams.keys().copied().max().unwrap_or(0);
        frame::put_goaway(&mut self.buf, last, code, reason);
        false
    }

    /// Forgets a stream (answered or reset) and counts it out.
    fn end_stream(&mut self, stream: u32) {
        if self.streams.remove(&stream).is_some() {
            self.active.fetch_sub(1, Ordering::AcqRel);
            self.queue.retain(|&s| s != stream);
        }
    }

    fn response(&mut self, result: Result<Vec<u8>, Status>, reset_after: bool) -> Response {
        match result {
            Ok(message) => {
                let mut headers = Vec::new();
                self.encoder.encode(
                    &[(":status", "200"), ("content-type", "application/grpc")],
                    &mut headers,
                );
                let mut trailers = Vec::new();
                self.encoder.encode(&[("grpc-status", "0")], &mut trailers);
                Response {
                    headers: Some(headers),
                    body: encode_message(&message),
                    sent: 0,
                    trailers,
                    reset_after,
                }
            }
            Err(status) => {
                let mut text = status.message;
                if text.len() > MAX_STATUS_MESSAGE {
                    let mut cut = MAX_STATUS_MESSAGE;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                }
                let code = status.code.number().to_string();
                let mut trailers = Vec::new();
                self.encoder.encode(
                    &[
                        (":status", "200"),
                        ("content-type", "application/grpc"),
                        ("grpc-status", &code),
                        ("grpc-message", &percent_encode(&text)),
                    ],
                    &mut trailers,
                );
                Response {
                    headers: None,
                    body: Vec::new(),
                    sent: 0,
                    trailers,
                    reset_after,
                }
            }
        }
    }

    /// Frames as much of the queued responses as the windows allow;
    /// true when any DATA or a stream's end went out.
    fn pump(&mut self) -> io::Result<bool> {
        let mut progress = false;
        let mut i = 0;
        while let Some(&id) = self.queue.get(i) {
            let Some(outgoing) = self.streams.get_mut(&id) else {
                self.queue.remove(i);
                continue;
            };
            let Some(response) = outgoing.response.as_mut() else {
                self.queue.remove(i);
                continue;
            };
            if let Some(headers) = response.headers.take() {
                frame::put_headers(&mut self.buf, id, &headers, false, self.max_frame);
            }
            while response.sent < response.body.len() {
                let n = (response.body.len() - response.sent)
                    .min(self.max_frame)
                    .min(outgoing.window.available())
                    .min(self.window.available());
                if n == 0 {
                    break;
                }
                let chunk = &response.body[response.sent..response.sent + n];
                frame::put_data(&mut self.buf, id, chunk, false);
                response.sent += n;
                outgoing.window.consume(n);
                self.window.consume(n);
                progress = true;
                if self.buf.len() >= FLUSH_AT {
                    let result = self.stream.write_all(&self.buf);
                    self.buf.clear();
                    result?;
                }
            }
            if response.sent < response.body.len() {
                i += 1;
                continue;
            }
            frame::put_headers(&mut self.buf, id, &response.trailers, true, self.max_frame);
            if response.reset_after {
                frame::put_rst_stream(&mut self.buf, id, ErrorCode::NO_ERROR);
            }
            progress = true;
            self.end_stream(id);
        }
        Ok(progress)
    }
}
