//! A synchronous unary gRPC client on a unix socket, one call at a time
//! on a kept connection. Every step of a call (connect, writes, waiting
//! for window, reading the answer) is bounded by the call's deadline, so
//! a server that stops answering costs a caller its timeout and no more.
//! A connection that failed in any way but a gRPC status is dropped, and
//! the next call dials again.

use std::fmt;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::flow::{MAX_WINDOW, ReceiveWindow, SendWindow};
use super::frame::{self, ErrorCode, Frame, FrameReader, ReadError};
use super::hpack::{self, Decoder, Encoder, Header};
use super::status::{Code, Status, percent_decode};
use super::{RECEIVE_WINDOW, check_body, encode_message};

/// The highest stream id a client may use; past it, a new connection.
const LAST_STREAM_ID: u32 = (1 << 31) - 1;

/// The largest response header list accepted.
const MAX_HEADER_LIST: usize = 64 << 10;

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The socket could not be connected to in time (missing, refused, a
    /// full backlog).
    Connect { path: PathBuf, error: io::Error },
    /// The deadline passed before the answer was complete.
    TimedOut,
    /// The connection broke, or the server broke the protocol.
    Transport(String),
    /// The server answered with a status other than OK.
    Status(Status),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Connect { path, error } => {
                write!(f, "cannot connect to {}: {error}", path.display())
            }
            CallError::TimedOut => write!(f, "the call timed out"),
            CallError::Transport(why) => write!(f, "connection failed: {why}"),
            CallError::Status(status) => write!(f, "{status}"),
        }
    }
}

impl std::error::Error for CallError {}

impl From<ReadError> for CallError {
    fn from(e: ReadError) -> CallError {
        match e {
            ReadError::TimedOut => CallError::TimedOut,
            ReadError::Closed => CallError::Transport("the server closed the connection".into()),
            ReadError::Io(e) => CallError::Transport(e.to_string()),
            ReadError::Protocol(e) => CallError::Transport(e.reason),
        }
    }
}

fn write_error(e: &io::Error) -> CallError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => CallError::TimedOut,
        _ => CallError::Transport(e.to_string()),
    }
}

/// A gRPC client for the server on one unix socket.
pub struct Client {
    path: PathBuf,
    connection: Option<Connection>,
    max_message_bytes: usize,
}

impl Client {
    /// A client for the server at `path`; it connects on its first call.
    pub fn new(path: impl Into<PathBuf>) -> Client {
        Client {
            path: path.into(),
            connection: None,
            max_message_bytes: super::Limits::default().max_message_bytes,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The largest response message accepted (grpc-go's default unless
    /// set).
    pub fn set_max_message_bytes(&mut self, max: usize) {
        self.max_message_bytes = max;
    }

    /// Calls `method` (`/package.Service/Method`) with the protobuf bytes
    /// of `request`, and returns the response's bytes. Connects first if
    /// there is no connection; everything, connecting included, ends
    /// within `timeout`.
    pub fn call(
        &mut self,
        method: &str,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let deadline = Instant::now() + timeout;
        if self.connection.as_ref().is_some_and(|c| !c.usable()) {
            self.connection = None;
        }
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => self
                .connection
                .insert(Connection::open(&self.path, deadline)?),
        };
        let result = connection.call(method, request, deadline, self.max_message_bytes);
        if connection.broken {
            self.connection = None;
        }
        result
    }

    /// Closes the connection, if any; the next call dials again.
    pub fn disconnect(&mut self) {
        self.connection = None;
    }

    pub fn is_connected(&self) -> bool {
        self.connection.is_some()
    }
}

/// What has arrived of the response to the current call.
#[derive(Default)]
struct Answer {
    headers: Option<Vec<Header>>,
    body: Vec<u8>,
    trailers: Option<Vec<Header>>,
    /// Too large or malformed: the rest of the body is not kept.
    refused: Option<Status>,
}

struct Connection {
    frames: FrameReader,
    writer: UnixStream,
    decoder: Decoder,
    encoder: Encoder,
    next_stream: u32,
    /// The server's windows and frame size, as its SETTINGS give them.
    send_window: SendWindow,
    initial_window: u32,
    max_frame: usize,
    receive_window: ReceiveWindow,
    /// The server sent GOAWAY: no new calls on this connection.
    going_away: bool,
    /// A call left it in an unknown state: not to be used again.
    broken: bool,
    buf: Vec<u8>,
}

fn deadline_left(deadline: Instant) -> Result<Duration, CallError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(CallError::TimedOut);
    }
    Ok(left)
}

impl Connection {
    fn open(path: &Path, deadline: Instant) -> Result<Connection, CallError> {
        let connect_error = |error| CallError::Connect {
            path: path.to_path_buf(),
            error,
        };
        let stream =
            crate::os::net::connect_unix(path, deadline_left(deadline)?).map_err(connect_error)?;
        let writer = stream.try_clone().map_err(connect_error)?;
        let mut connection = Connection {
            frames: FrameReader::new(stream, frame::DEFAULT_MAX_FRAME),
            writer,
            decoder: Decoder::new(hpack::DEFAULT_TABLE_SIZE, MAX_HEADER_LIST),
            encoder: Encoder::default(),
            next_stream: 1,
            send_window: SendWindow::new(super::flow::DEFAULT_WINDOW),
            initial_window: super::flow::DEFAULT_WINDOW,
            max_frame: frame::DEFAULT_MAX_FRAME as usize,
            receive_window: ReceiveWindow::new(RECEIVE_WINDOW),
            going_away: false,
            broken: false,
            buf: Vec::new(),
        };
        // The preface and our SETTINGS; the server's come with its first
        // answer (a client need not wait for them).
        connection.buf.extend_from_slice(frame::PREFACE);
        frame::put_settings(
            &mut connection.buf,
            &[
                (frame::SETTINGS_ENABLE_PUSH, 0),
                (frame::SETTINGS_INITIAL_WINDOW_SIZE, RECEIVE_WINDOW),
            ],
        );
        if let Some(increment) = connection.receive_window.initial_increment() {
            frame::put_window_update(&mut connection.buf, 0, increment);
        }
        connection.flush(deadline)?;
        Ok(connection)
    }

    fn usable(&self) -> bool {
        !self.broken && !self.going_away && self.next_stream <= LAST_STREAM_ID
    }

    fn flush(&mut self, deadline: Instant) -> Result<(), CallError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let result = self
            .writer
            .set_write_timeout(Some(deadline_left(deadline)?))
            .and_then(|()| self.writer.write_all(&self.buf));
        self.buf.clear();
        result.map_err(|e| write_error(&e))
    }

    fn call(
        &mut self,
        method: &str,
        request: &[u8],
        deadline: Instant,
        max_message: usize,
    ) -> Result<Vec<u8>, CallError> {
        // Until the call is complete, a failure leaves the stream (and so
        // the connection) in a state the next call cannot trust.
        self.broken = true;
        let mut call = Call {
            id: self.next_stream,
            deadline,
            send_window: SendWindow::new(self.initial_window),
            receive_window: ReceiveWindow::new(RECEIVE_WINDOW),
            max_message,
            answer: Answer::default(),
        };
        self.next_stream += 2;
        let timeout_ms = deadline_left(deadline)?.as_millis().clamp(1, 99_999_999);
        let mut block = Vec::new();
        self.encoder.encode(
            &[
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-timeout", &format!("{timeout_ms}m")),
            ],
            &mut block,
        );
        frame::put_headers(&mut self.buf, call.id, &block, false, self.max_frame);
        let body = encode_message(request);
        let mut sent = 0;
        loop {
            // Send what the windows allow, unless the server has answered
            // already (a refusal need not wait for the whole request).
            while sent < body.len() && call.answer.trailers.is_none() {
                let n = (body.len() - sent)
                    .min(self.max_frame)
                    .min(call.send_window.available())
                    .min(self.send_window.available());
                if n == 0 {
                    break;
                }
                let end = sent + n == body.len();
                frame::put_data(&mut self.buf, call.id, &body[sent..sent + n], end);
                sent += n;
                call.send_window.consume(n);
                self.send_window.consume(n);
            }
            if call.answer.trailers.is_some() {
                break;
            }
            self.flush(deadline)?;
            let frame = self.frames.read(Some(deadline), deadline_left(deadline)?)?;
            self.receive(frame, &mut call)?;
        }
        if sent < body.len() {
            // Answered before the request was all sent: the rest is not.
            frame::put_rst_stream(&mut self.buf, call.id, ErrorCode::CANCEL);
        }
        self.flush(deadline)?;
        self.broken = false;
        call.answer.finish(max_message)
    }

    /// Takes one frame while waiting for the answer to `call`.
    fn receive(&mut self, frame: Frame, call: &mut Call) -> Result<(), CallError> {
        let id = call.id;
        match frame {
            Frame::Settings { ack: false, params } => {
                self.settings(&params, &mut call.send_window)?;
                frame::put_settings_ack(&mut self.buf);
            }
            Frame::Ping { ack: false, data } => frame::put_ping_ack(&mut self.buf, &data),
            Frame::WindowUpdate { stream, increment } => {
                let window = match stream {
                    0 => &mut self.send_window,
                    s if s == id => &mut call.send_window,
                    _ => return Ok(()),
                };
                if increment == 0 || window.grow(increment).is_err() {
                    return Err(CallError::Transport(format!(
                        "bad WINDOW_UPDATE of {increment} on stream {stream}"
                    )));
                }
            }
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                mut block,
            } => {
                if !end_headers {
                    self.read_continuations(stream, &mut block, call.deadline)?;
                }
                // Decoded even for another stream: the table must stay in
                // step with the server's.
                let headers = self
                    .decoder
                    .decode(&block)
                    .map_err(|e| CallError::Transport(e.to_string()))?;
                if stream == id {
                    call.answer.take_headers(headers, end_stream)?;
                }
            }
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => {
                if self.receive_window.receive(flow_len).is_err() {
                    return Err(CallError::Transport(
                        "DATA beyond the connection window".into(),
                    ));
                }
                if let Some(increment) = self.receive_window.release(flow_len) {
                    frame::put_window_update(&mut self.buf, 0, increment);
                }
                if stream != id {
                    return Ok(());
                }
                if call.receive_window.receive(flow_len).is_err() {
                    return Err(CallError::Transport("DATA beyond the stream window".into()));
                }
                call.answer.take_data(&data, call.max_message)?;
                if end_stream {
                    return Err(CallError::Transport("the response has no trailers".into()));
                }
                if let Some(increment) = call.receive_window.release(flow_len) {
                    frame::put_window_update(&mut self.buf, id, increment);
                }
            }
            Frame::RstStream { stream, code } if stream == id => {
                return Err(CallError::Transport(format!(
                    "the server reset the call's stream (HTTP/2 error {})",
                    code.0
                )));
            }
            Frame::GoAway {
                last_stream,
                code,
                debug,
            } => {
                self.going_away = true;
                if last_stream < id {
                    return Err(CallError::Transport(format!(
                        "the server is going away (HTTP/2 error {}: {})",
                        code.0,
                        String::from_utf8_lossy(&debug)
                    )));
                }
            }
            Frame::PushPromise { .. } | Frame::Continuation { .. } => {
                return Err(CallError::Transport(
                    "unexpected frame from the server".into(),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// The server's SETTINGS: what they change in what we send.
    fn settings(
        &mut self,
        params: &[(u16, u32)],
        stream_window: &mut SendWindow,
    ) -> Result<(), CallError> {
        for &(key, value) in params {
            match key {
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    let delta = i64::from(value) - i64::from(self.initial_window);
                    if i64::from(value) > MAX_WINDOW || stream_window.adjust(delta).is_err() {
                        return Err(CallError::Transport(format!(
                            "the server's initial window {value} is above 2^31-1"
                        )));
                    }
                    self.initial_window = value;
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME..=frame::LARGEST_MAX_FRAME).contains(&value) {
                        return Err(CallError::Transport(format!(
                            "the server's max frame size {value} is out of range"
                        )));
                    }
                    self.max_frame = usize::try_from(value).unwrap_or(self.max_frame);
                }
                frame::SETTINGS_HEADER_TABLE_SIZE => self
                    .encoder
                    .set_peer_table_size(usize::try_from(value).unwrap_or(usize::MAX)),
                _ => {}
            }
        }
        Ok(())
    }

    /// The CONTINUATION frames that must follow a HEADERS frame without
    /// END_HEADERS.
    fn read_continuations(
        &mut self,
        stream: u32,
        block: &mut Vec<u8>,
        deadline: Instant,
    ) -> Result<(), CallError> {
        loop {
            let frame = self.frames.read(Some(deadline), deadline_left(deadline)?)?;
            let Frame::Continuation {
                stream: s,
                end_headers,
                block: more,
            } = frame
            else {
                return Err(CallError::Transport("expected a CONTINUATION frame".into()));
            };
            if s != stream {
                return Err(CallError::Transport(
                    "CONTINUATION of another stream".into(),
                ));
            }
            block.extend_from_slice(&more);
            if block.len() > MAX_HEADER_LIST {
                return Err(CallError::Transport(
                    "response header block too large".into(),
                ));
            }
            if end_headers {
                return Ok(());
            }
        }
    }
}

/// One call in progress on a connection.
struct Call {
    id: u32,
    deadline: Instant,
    /// The server's window for this stream.
    send_window: SendWindow,
    /// Ours for this stream.
    receive_window: ReceiveWindow,
    max_message: usize,
    answer: Answer,
}

impl Answer {
    /// The response headers, or the trailers after them (with END_STREAM).
    fn take_headers(&mut self, headers: Vec<Header>, end_stream: bool) -> Result<(), CallError> {
        if self.headers.is_none() {
            if end_stream {
                // Trailers-only: the status comes with the headers.
                self.trailers = Some(headers.clone());
            }
            self.headers = Some(headers);
        } else if end_stream {
            self.trailers = Some(headers);
        } else {
            return Err(CallError::Transport(
                "a header block after the headers that does not end the stream".into(),
            ));
        }
        Ok(())
    }

    fn take_data(&mut self, data: &[u8], max_message: usize) -> Result<(), CallError> {
        if self.headers.is_none() {
            return Err(CallError::Transport(
                "DATA before the response headers".into(),
            ));
        }
        if self.refused.is_none() {
            self.body.extend_from_slice(data);
            if let Err(status) = check_body(&self.body, max_message, false) {
                // The rest of the body is read and dropped; the call fails
                // with this status once the stream ends.
                self.refused = Some(status);
                self.body = Vec::new();
            }
        }
        Ok(())
    }

    /// The call's outcome, from the complete answer.
    fn finish(self, max_message: usize) -> Result<Vec<u8>, CallError> {
        let field = |list: &Option<Vec<Header>>, name: &str| {
            list.as_ref()
                .and_then(|l| l.iter().find(|(n, _)| n == name))
                .map(|(_, v)| v.clone())
        };
        let http = field(&self.headers, ":status");
        if http.as_deref() != Some("200") {
            let http = http.unwrap_or_else(|| "(none)".into());
            return Err(CallError::Status(Status::new(
                http_status_code(&http),
                format!("unexpected HTTP status {http}"),
            )));
        }
        let Some(code) = field(&self.trailers, "grpc-status") else {
            return Err(CallError::Status(Status::new(
                Code::Internal,
                "the response has no grpc-status",
            )));
        };
        let code = code.parse().map_or(Code::Unknown, Code::from_number);
        if code != Code::Ok {
            let message = field(&self.trailers, "grpc-message").unwrap_or_default();
            return Err(CallError::Status(Status::new(
                code,
                percent_decode(&message),
            )));
        }
        if let Some(status) = self.refused {
            return Err(CallError::Status(status));
        }
        match check_body(&self.body, max_message, true) {
            Ok(Some(message)) => Ok(message.to_vec()),
            Ok(None) => Err(CallError::Status(Status::new(Code::Internal, "no message"))),
            Err(status) => Err(CallError::Status(status)),
        }
    }
}

/// gRPC's mapping of an HTTP status that is not 200 (grpc/doc/http-grpc-status-mapping.md).
fn http_status_code(http: &str) -> Code {
    match http {
        "400" => Code::Internal,
        "401" => Code::Unauthenticated,
        "403" => Code::PermissionDenied,
        "404" => Code::Unimplemented,
        "429" | "502" | "503" | "504" => Code::Unavailable,
        _ => Code::Unknown,
    }
}
