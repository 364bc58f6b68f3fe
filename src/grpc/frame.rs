//! HTTP/2 frames (RFC 9113 section 6): read from a socket with a frame
//! size limit and a deadline, and written into a buffer that the caller
//! sends in one write.

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The client's connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Every peer must accept frames of this size; our SETTINGS keep it.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE a peer may announce.
pub const LARGEST_MAX_FRAME: u32 = (1 << 24) - 1;

const HEADER_LEN: usize = 9;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const FLAG_END_STREAM: u8 = 0x1;
pub const FLAG_ACK: u8 = 0x1;
pub const FLAG_END_HEADERS: u8 = 0x4;
pub const FLAG_PADDED: u8 = 0x8;
pub const FLAG_PRIORITY: u8 = 0x20;

pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// HTTP/2 error codes (RFC 9113 section 7), for RST_STREAM and GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
}

/// A connection error: what the GOAWAY carries, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnError {
    pub code: ErrorCode,
    pub reason: String,
}

impl ConnError {
    pub fn protocol(reason: impl Into<String>) -> ConnError {
        ConnError::new(ErrorCode::PROTOCOL_ERROR, reason)
    }

    pub fn new(code: ErrorCode, reason: impl Into<String>) -> ConnError {
        ConnError {
            code,
            reason: reason.into(),
        }
    }
}

/// One frame, its payload parsed as far as its type says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        end_stream: bool,
        data: Vec<u8>,
        /// The whole payload's length, padding included: what flow
        /// control counts.
        flow_len: u32,
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        block: Vec<u8>,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        block: Vec<u8>,
    },
    Settings {
        ack: bool,
        params: Vec<(u16, u32)>,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    RstStream {
        stream: u32,
        code: ErrorCode,
    },
    GoAway {
        last_stream: u32,
        code: ErrorCode,
        debug: Vec<u8>,
    },
    PushPromise {
        stream: u32,
    },
    /// PRIORITY and frame types this side does not know: ignored, as RFC
    /// 9113 asks.
    Ignored {
        kind: u8,
        stream: u32,
    },
}

/// Why no frame was read.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection between frames.
    Closed,
    /// The deadline passed (with no frame, or in the middle of one).
    TimedOut,
    Io(io::Error),
    /// A frame the protocol does not allow: the peer's fault.
    Protocol(ConnError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => write!(f, "connection closed"),
            ReadError::TimedOut => write!(f, "timed out"),
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Protocol(e) => write!(f, "{}", e.reason),
        }
    }
}

/// Reads frames from a socket through a buffer: a frame that arrived
/// whole costs no system call beyond the read that brought it.
pub struct FrameReader {
    stream: UnixStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frame: u32,
    /// The read timeout the socket has now, so it is set only on change.
    timeout: Option<Duration>,
}

impl FrameReader {
    /// Reads frames of at most `max_frame` payload octets (the
    /// SETTINGS_MAX_FRAME_SIZE we announce).
    pub fn new(stream: UnixStream, max_frame: u32) -> FrameReader {
        FrameReader {
            stream,
            buf: vec![0; HEADER_LEN + 4096],
            start: 0,
            end: 0,
            max_frame,
            timeout: None,
        }
    }

    /// Reads the client's preface; false when the bytes are something
    /// else (an HTTP/1 request, garbage).
    pub fn read_preface(&mut self, deadline: Instant) -> Result<bool, ReadError> {
        while self.end - self.start < PREFACE.len() {
            let have = &self.buf[self.start..self.end];
            if !PREFACE.starts_with(have) {
                return Ok(false);
            }
            let inside = self.end > self.start;
            self.fill(Some(deadline), inside)?;
        }
        let matches = &self.buf[self.start..self.start + PREFACE.len()] == PREFACE;
        self.start += PREFACE.len();
        Ok(matches)
    }

    /// The next frame. `idle` bounds the wait for its first byte (`None`:
    /// no bound); once a frame has begun, it must be complete within
    /// `frame_time`, so a peer that stops half-way through cannot hold
    /// the reader.
    pub fn read(
        &mut self,
        idle: Option<Instant>,
        frame_time: Duration,
    ) -> Result<Frame, ReadError> {
        let mut frame_deadline = None;
        loop {
            let have = self.end - self.start;
            if have >= HEADER_LEN {
                let header = &self.buf[self.start..self.start + HEADER_LEN];
                let len = u32::from_be_bytes([0, header[0], header[1], header[2]]);
                if len > self.max_frame {
                    return Err(ReadError::Protocol(ConnError::new(
                        ErrorCode::FRAME_SIZE_ERROR,
                        format!(
                            "frame of {len} bytes exceeds the limit of {}",
                            self.max_frame
                        ),
                    )));
                }
                let total = HEADER_LEN + len as usize;
                if have >= total {
                    let kind = header[3];
                    let flags = header[4];
                    let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]])
                        & !(1 << 31);
                    let payload = self.buf[self.start + HEADER_LEN..self.start + total].to_vec();
                    self.start += total;
                    return parse(kind, flags, stream, payload).map_err(ReadError::Protocol);
                }
                if self.buf.len() < total {
                    self.buf.resize(total, 0);
                }
            }
            let deadline = if have == 0 {
                idle
            } else {
                let deadline = *frame_deadline.get_or_insert_with(|| Instant::now() + frame_time);
                Some(idle.map_or(deadline, |i| i.max(deadline)))
            };
            self.fill(deadline, have > 0)?;
        }
    }

    /// Reads more bytes, by `deadline`. End of file is `Closed` between
    /// frames, an error inside one.
    fn fill(&mut self, deadline: Option<Instant>, inside: bool) -> Result<(), ReadError> {
        if self.start > 0 && (self.start == self.end || self.end == self.buf.len()) {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let grown = self.buf.len() * 2;
            self.buf.resize(grown, 0);
        }
        loop {
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ReadError::TimedOut);
                    }
                    Some(left)
                }
            };
            if timeout != self.timeout {
                self.stream
                    .set_read_timeout(timeout)
                    .map_err(ReadError::Io)?;
                self.timeout = timeout;
            }
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) if inside => {
                    return Err(ReadError::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a frame",
                    )));
                }
                Ok(0) => return Err(ReadError::Closed),
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }
}

/// A frame's payload without its padding (PADDED flag: a length byte
/// first, that many octets last).
fn strip_padding(flags: u8, mut payload: Vec<u8>) -> Result<Vec<u8>, ConnError> {
    if flags & FLAG_PADDED == 0 {
        return Ok(payload);
    }
    let Some((&pad, _)) = payload.split_first() else {
        return Err(ConnError::new(
            ErrorCode::FRAME_SIZE_ERROR,
            "padded frame without a pad length",
        ));
    };
    let pad = usize::from(pad);
    if pad >= payload.len() {
        return Err(ConnError::protocol("padding longer than the frame"));
    }
    payload.truncate(payload.len() - pad);
    payload.remove(0);
    Ok(payload)
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn parse(kind: u8, flags: u8, stream: u32, payload: Vec<u8>) -> Result<Frame, ConnError> {
    let len = payload.len();
    let size_error = |what: &str| {
        ConnError::new(
            ErrorCode::FRAME_SIZE_ERROR,
            format!("{what} frame of {len} bytes"),
        )
    };
    let needs_stream = |what: &str| {
        if stream == 0 {
            Err(ConnError::protocol(format!("{what} frame on stream 0")))
        } else {
            Ok(())
        }
    };
    let needs_connection = |what: &str| {
        if stream != 0 {
            Err(ConnError::protocol(format!(
                "{what} frame on stream {stream}"
            )))
        } else {
            Ok(())
        }
    };
    Ok(match kind {
        DATA => {
            needs_stream("DATA")?;
            Frame::Data {
                stream,
                end_stream: flags & FLAG_END_STREAM != 0,
                flow_len: u32::try_from(len).unwrap_or(u32::MAX),
                data: strip_padding(flags, payload)?,
            }
        }
        HEADERS => {
            needs_stream("HEADERS")?;
            let mut block = strip_padding(flags, payload)?;
            if flags & FLAG_PRIORITY != 0 {
                // Stream dependency and weight: read past, not used.
                if block.len() < 5 {
                    return Err(size_error("HEADERS"));
                }
                block.drain(..5);
            }
            Frame::Headers {
                stream,
                end_stream: flags & FLAG_END_STREAM != 0,
                end_headers: flags & FLAG_END_HEADERS != 0,
                block,
            }
        }
        CONTINUATION => {
            needs_stream("CONTINUATION")?;
            Frame::Continuation {
                stream,
                end_headers: flags & FLAG_END_HEADERS != 0,
                block: payload,
            }
        }
        SETTINGS => {
            needs_connection("SETTINGS")?;
            let ack = flags & FLAG_ACK != 0;
            if !len.is_multiple_of(6) || (ack && len != 0) {
                return Err(size_error("SETTINGS"));
            }
            let params = payload
                .chunks_exact(6)
                .map(|p| (u16::from_be_bytes([p[0], p[1]]), be32(&p[2..])))
                .collect();
            Frame::Settings { ack, params }
        }
        WINDOW_UPDATE => {
            if len != 4 {
                return Err(size_error("WINDOW_UPDATE"));
            }
            Frame::WindowUpdate {
                stream,
                increment: be32(&payload) & !(1 << 31),
            }
        }
        PING => {
            needs_connection("PING")?;
            let data: [u8; 8] = payload.try_into().map_err(|_| size_error("PING"))?;
            Frame::Ping {
                ack: flags & FLAG_ACK != 0,
                data,
            }
        }
        RST_STREAM => {
            needs_stream("RST_STREAM")?;
            if len != 4 {
                return Err(size_error("RST_STREAM"));
            }
            Frame::RstStream {
                stream,
                code: ErrorCode(be32(&payload)),
            }
        }
        GOAWAY => {
            needs_connection("GOAWAY")?;
            if len < 8 {
                return Err(size_error("GOAWAY"));
            }
            Frame::GoAway {
                last_stream: be32(&payload) & !(1 << 31),
                code: ErrorCode(be32(&payload[4..])),
                debug: payload[8..].to_vec(),
            }
        }
        PUSH_PROMISE => Frame::PushPromise { stream },
        _ => Frame::Ignored { kind, stream },
    })
}

/// Appends a frame header.
pub fn put_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = u32::try_from(len).unwrap_or(LARGEST_MAX_FRAME);
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

pub fn put_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    put_header(out, params.len() * 6, SETTINGS, 0, 0);
    for (id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_header(out, 0, SETTINGS, FLAG_ACK, 0);
}

pub fn put_ping_ack(out: &mut Vec<u8>, data: &[u8; 8]) {
    put_header(out, 8, PING, FLAG_ACK, 0);
    out.extend_from_slice(data);
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_header(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub fn put_rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    put_header(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &str) {
    put_header(out, 8 + debug.len(), GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
    out.extend_from_slice(debug.as_bytes());
}

pub fn put_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let flags = if end_stream { FLAG_END_STREAM } else { 0 };
    put_header(out, data.len(), DATA, flags, stream);
    out.extend_from_slice(data);
}

/// A header block as HEADERS and as many CONTINUATIONs as `max_frame`
/// (the peer's SETTINGS_MAX_FRAME_SIZE) needs.
pub fn put_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let max_frame = max_frame.max(1);
    let mut chunks = block.chunks(max_frame).peekable();
    let mut kind = HEADERS;
    let mut flags = if end_stream { FLAG_END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        put_header(out, 0, HEADERS, flags | FLAG_END_HEADERS, stream);
        return;
    }
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= FLAG_END_HEADERS;
        }
        put_header(out, chunk.len(), kind, flags, stream);
        out.extend_from_slice(chunk);
        kind = CONTINUATION;
        flags = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_header(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    /// Reads one frame from `bytes` written to the other end of a pair.
    fn read_one(bytes: &[u8], max_frame: u32) -> Result<Frame, ReadError> {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(bytes).unwrap();
        drop(theirs);
        let mut reader = FrameReader::new(ours, max_frame);
        reader.read(None, Duration::from_secs(5))
    }

    fn protocol_error(result: Result<Frame, ReadError>) -> ErrorCode {
        match result {
            Err(ReadError::Protocol(e)) => e.code,
            other => panic!("expected a protocol error, got {other:?}"),
        }
    }

    #[test]
    fn written_frames_read_back() {
        let mut out = Vec::new();
        put_settings(&mut out, &[(SETTINGS_MAX_CONCURRENT_STREAMS, 8)]);
        put_settings_ack(&mut out);
        put_ping_ack(&mut out, b"12345678");
        put_window_update(&mut out, 3, 1000);
        put_rst_stream(&mut out, 5, ErrorCode::CANCEL);
        put_goaway(&mut out, 7, ErrorCode::PROTOCOL_ERROR, "bye");
        put_data(&mut out, 1, b"hello", true);
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(&out).unwrap();
        drop(theirs);
        let mut reader = FrameReader::new(ours, DEFAULT_MAX_FRAME);
        let mut frames = Vec::new();
        loop {
            match reader.read(None, Duration::from_secs(5)) {
                Ok(frame) => frames.push(frame),
                Err(ReadError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(
            frames,
            [
                Frame::Settings {
                    ack: false,
                    params: vec![(SETTINGS_MAX_CONCURRENT_STREAMS, 8)]
                },
                Frame::Settings {
                    ack: true,
                    params: vec![]
                },
                Frame::Ping {
                    ack: true,
                    data: *b"12345678"
                },
                Frame::WindowUpdate {
                    stream: 3,
                    increment: 1000
                },
                Frame::RstStream {
                    stream: 5,
                    code: ErrorCode::CANCEL
                },
                Frame::GoAway {
                    last_stream: 7,
                    code: ErrorCode::PROTOCOL_ERROR,
                    debug: b"bye".to_vec()
                },
                Frame::Data {
                    stream: 1,
                    end_stream: true,
                    data: b"hello".to_vec(),
                    flow_len: 5
                },
            ]
        );
    }

    #[test]
    fn padding_and_priority_are_stripped() {
        // DATA: pad length 3, "abc", 3 octets of padding.
        let padded = frame_bytes(DATA, FLAG_PADDED, 1, b"\x03abc\0\0\0");
        assert_eq!(
            read_one(&padded, DEFAULT_MAX_FRAME).unwrap(),
            Frame::Data {
                stream: 1,
                end_stream: false,
                data: b"abc".to_vec(),
                flow_len: 7
            }
        );
        // HEADERS with both: pad length 1, priority (5 octets), block, pad.
        let payload = b"\x01\x00\x00\x00\x00\x10\x82\x84\x00";
        let headers = frame_bytes(
            HEADERS,
            FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS,
            3,
            payload,
        );
        assert_eq!(
            read_one(&headers, DEFAULT_MAX_FRAME).unwrap(),
            Frame::Headers {
                stream: 3,
                end_stream: false,
                end_headers: true,
                block: vec![0x82, 0x84]
            }
        );
    }

    #[test]
    fn bad_frames_are_connection_errors() {
        let max = DEFAULT_MAX_FRAME;
        // Padding as long as the frame.
        let bad_pad = frame_bytes(DATA, FLAG_PADDED, 1, b"\x03ab");
        assert_eq!(
            protocol_error(read_one(&bad_pad, max)),
            ErrorCode::PROTOCOL_ERROR
        );
        // A padded frame with no room for the pad length.
        let empty_pad = frame_bytes(DATA, FLAG_PADDED, 1, b"");
        assert_eq!(
            protocol_error(read_one(&empty_pad, max)),
            ErrorCode::FRAME_SIZE_ERROR
        );
        // Frames on the wrong kind of stream.
        let data0 = frame_bytes(DATA, 0, 0, b"x");
        assert_eq!(
            protocol_error(read_one(&data0, max)),
            ErrorCode::PROTOCOL_ERROR
        );
        let settings1 = frame_bytes(SETTINGS, 0, 1, b"");
        assert_eq!(
            protocol_error(read_one(&settings1, max)),
            ErrorCode::PROTOCOL_ERROR
        );
        // Wrong sizes.
        let settings5 = frame_bytes(SETTINGS, 0, 0, b"12345");
        assert_eq!(
            protocol_error(read_one(&settings5, max)),
            ErrorCode::FRAME_SIZE_ERROR
        );
        let ack_with_payload = frame_bytes(SETTINGS, FLAG_ACK, 0, b"123456");
        assert_eq!(
            protocol_error(read_one(&ack_with_payload, max)),
            ErrorCode::FRAME_SIZE_ERROR
        );
        let ping7 = frame_bytes(PING, 0, 0, b"1234567");
        assert_eq!(
            protocol_error(read_one(&ping7, max)),
            ErrorCode::FRAME_SIZE_ERROR
        );
        let window3 = frame_bytes(WINDOW_UPDATE, 0, 0, b"123");
        assert_eq!(
            protocol_error(read_one(&window3, max)),
            ErrorCode::FRAME_SIZE_ERROR
        );
        let goaway7 = frame_bytes(GOAWAY, 0, 0, b"1234567");
        assert_eq!(
            protocol_error(read_one(&goaway7, max)),
            ErrorCode::FRAME_SIZE_ERROR
        );
        let priority_short = frame_bytes(HEADERS, FLAG_PRIORITY, 1, b"1234");
        assert_eq!(
            protocol_error(read_one(&priority_short, max)),
            ErrorCode::FRAME_SIZE_ERROR
        );
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_before_it_is_read() {
        let mut header = Vec::new();
        put_header(&mut header, 100_000, DATA, 0, 1);
        // Only the header is sent: the reader must not wait for the rest.
        let code = protocol_error(read_one(&header, DEFAULT_MAX_FRAME));
        assert_eq!(code, ErrorCode::FRAME_SIZE_ERROR);
        // Up to the limit it is read, growing the buffer as needed.
        let big = frame_bytes(DATA, 0, 1, &vec![7; DEFAULT_MAX_FRAME as usize]);
        match read_one(&big, DEFAULT_MAX_FRAME).unwrap() {
            Frame::Data { data, .. } => assert_eq!(data.len(), DEFAULT_MAX_FRAME as usize),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_truncated_frame_is_an_error_and_a_stalled_one_times_out() {
        let whole = frame_bytes(PING, 0, 0, b"12345678");
        match read_one(&whole[..12], DEFAULT_MAX_FRAME) {
            Err(ReadError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("{other:?}"),
        }
        // Half a frame and then silence, the connection kept open.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(&whole[..12]).unwrap();
        let mut reader = FrameReader::new(ours, DEFAULT_MAX_FRAME);
        let started = Instant::now();
        assert!(matches!(
            reader.read(None, Duration::from_millis(200)),
            Err(ReadError::TimedOut)
        ));
        assert!(started.elapsed() >= Duration::from_millis(200));
        // An idle deadline with nothing sent.
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let mut reader = FrameReader::new(ours, DEFAULT_MAX_FRAME);
        let idle = Instant::now() + Duration::from_millis(50);
        assert!(matches!(
            reader.read(Some(idle), Duration::from_secs(5)),
            Err(ReadError::TimedOut)
        ));
    }

    #[test]
    fn unknown_frames_are_ignored_and_the_preface_is_checked() {
        let unknown = frame_bytes(0x42, 0, 1, b"whatever");
        assert_eq!(
            read_one(&unknown, DEFAULT_MAX_FRAME).unwrap(),
            Frame::Ignored {
                kind: 0x42,
                stream: 1
            }
        );
        let preface = |bytes: &[u8]| {
            let (ours, mut theirs) = UnixStream::pair().unwrap();
            theirs.write_all(bytes).unwrap();
            drop(theirs);
            FrameReader::new(ours, DEFAULT_MAX_FRAME)
                .read_preface(Instant::now() + Duration::from_secs(5))
        };
        assert!(preface(PREFACE).unwrap());
        // An HTTP/1 request is refused at its first byte, not after 24.
        assert!(!preface(b"GET / HTTP/1.1\r\n").unwrap());
        assert!(matches!(preface(&PREFACE[..10]), Err(ReadError::Io(_))));
    }

    #[test]
    fn a_large_header_block_is_split_into_continuations() {
        let block: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        put_headers(&mut out, 1, &block, true, 100);
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(&out).unwrap();
        drop(theirs);
        let mut reader = FrameReader::new(ours, DEFAULT_MAX_FRAME);
        let mut frames = Vec::new();
        while let Ok(frame) = reader.read(None, Duration::from_secs(5)) {
            frames.push(frame);
        }
        assert_eq!(
            frames,
            [
                Frame::Headers {
                    stream: 1,
                    end_stream: true,
                    end_headers: false,
                    block: block[..100].to_vec()
                },
                Frame::Continuation {
                    stream: 1,
                    end_headers: false,
                    block: block[100..200].to_vec()
                },
                Frame::Continuation {
                    stream: 1,
                    end_headers: true,
                    block: block[200..].to_vec()
                },
            ]
        );
    }
}
