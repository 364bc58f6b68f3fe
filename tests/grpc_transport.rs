//! The gRPC transport (`virt_launcher::grpc`) against KubeVirt's own code:
//! a server run in this process answers `kvhandler` (virt-handler's
//! cmd-client, grpc-go), and our client calls `kvhandler notify-server`
//! (virt-handler's notify server). Raw HTTP/2 bytes cover what grpc-go
//! never sends: garbage, truncated frames, a client that stops reading,
//! a client whose window is small.
//!
//! `kvhandler` is found at `../shared/kubevirt/kvhandler` beside the
//! repository, or at `VL_KVHANDLER`; the tests that run it are skipped
//! without it unless `VL_TESTS=all` asks for them (tests/common/needs.rs).

mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;

use common::kubevirt::{NotifyServer, kv_call};
use common::{Need, TempTree, require};
use virt_launcher::grpc::frame::{self, ErrorCode, Frame, FrameReader, ReadError};
use virt_launcher::grpc::hpack::{self, Decoder, Encoder};
use virt_launcher::grpc::{self, CallError, Client, Code, Handler, Limits, Status};
use virt_launcher::threads::Fatal;

const INFO: &str = "/kubevirt.cmd.info.CmdInfo/Info";
const PING: &str = "/kubevirt.cmd.v1.Cmd/Ping";
const SYNC: &str = "/kubevirt.cmd.v1.Cmd/SyncVirtualMachine";
const GET_DOMAIN: &str = "/kubevirt.cmd.v1.Cmd/GetDomain";
/// Test-only methods of the handler below.
const SLEEP: &str = "/test.Test/Sleep";
const ECHO: &str = "/test.Test/Echo";
const BIG: &str = "/test.Test/Big";

/// `Response{success: true}`.
const SUCCESS: &[u8] = &[0x08, 0x01];
/// The size of `BIG`'s answer and of the domain JSON `GET_DOMAIN` returns:
/// well past grpc-go's and HTTP/2's initial 64 KiB windows.
const BIG_BYTES: usize = 200 << 10;

/// Answers a few of KubeVirt's methods the way a launcher would, and a
/// few of its own for the tests; remembers the requests.
#[derive(Default)]
struct TestHandler {
    requests: Mutex<Vec<(String, Vec<u8>)>>,
    sleeping: AtomicUsize,
}

impl Handler for TestHandler {
    fn call(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, Status> {
        if let Ok(mut requests) = self.requests.lock() {
            requests.push((method.to_string(), request.to_vec()));
        }
        match method {
            // CmdInfoResponse{supportedCmdVersions: [1]}.
            INFO => Ok(vec![0x0a, 0x01, 0x01]),
            PING | SYNC => Ok(SUCCESS.to_vec()),
            GET_DOMAIN => Ok(domain_response(&big_domain_json())),
            SLEEP => {
                self.sleeping.fetch_add(1, Ordering::SeqCst);
                let millis = request.first().copied().unwrap_or(0);
                std::thread::sleep(Duration::from_millis(u64::from(millis) * 10));
                self.sleeping.fetch_sub(1, Ordering::SeqCst);
                Ok(vec![millis])
            }
            ECHO => Ok(request.to_vec()),
            BIG => Ok(vec![b'x'; BIG_BYTES]),
            _ => Err(Status::unimplemented(method)),
        }
    }
}

/// A protobuf length-delimited field.
fn bytes_field(field: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![(field << 3) | 2];
    let mut len = value.len();
    while len >= 0x80 {
        out.push(u8::try_from(len & 0x7f).unwrap() | 0x80);
        len >>= 7;
    }
    out.push(u8::try_from(len).unwrap());
    out.extend_from_slice(value);
    out
}

/// `DomainResponse{response: {success: true}, domain: json}`.
fn domain_response(json: &str) -> Vec<u8> {
    let mut out = bytes_field(1, SUCCESS);
    out.extend(bytes_field(2, json.as_bytes()));
    out
}

/// An `api.Domain` whose JSON is past `BIG_BYTES` (its Go fields have no
/// JSON tags but `ObjectMeta`'s).
fn big_domain_json() -> String {
    serde_json::json!({
        "kind": "Domain",
        "apiVersion": "kubevirt.io/v1",
        "ObjectMeta": {
            "name": "big-domain",
            "namespace": "default",
            "annotations": {"padding": "p".repeat(BIG_BYTES)}
        },
        "Spec": {},
        "Status": {}
    })
    .to_string()
}

/// A server on a socket of its own, in this process.
struct Served {
    _tree: TempTree,
    socket: PathBuf,
    handler: Arc<TestHandler>,
    fatal: Receiver<Fatal>,
}

impl Served {
    fn start(limits: Limits) -> Served {
        let tree = TempTree::new("grpc");
        let socket = tree.path("launcher-sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let handler = Arc::new(TestHandler::default());
        let (fatal_tx, fatal) = crossbeam_channel::unbounded();
        grpc::spawn_acceptor(listener, handler.clone(), limits, fatal_tx).unwrap();
        Served {
            _tree: tree,
            socket,
            handler,
            fatal,
        }
    }

    fn requests(&self, method: &str) -> Vec<Vec<u8>> {
        let requests = self.handler.requests.lock().unwrap();
        requests
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // No server thread may have panicked, whatever the test did.
        if !std::thread::panicking() {
            assert_eq!(self.fatal.try_recv().ok(), None);
        }
    }
}

fn test_limits() -> Limits {
    Limits {
        max_message_bytes: 1 << 20,
        write_timeout: Duration::from_millis(500),
        frame_timeout: Duration::from_millis(500),
        ..Limits::default()
    }
}

fn kv(socket: &Path, command: &[&str]) -> (i32, Value) {
    kv_call(socket, command)
}

#[test]
fn kvhandler_pings_after_negotiating_the_version() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(test_limits());
    let (code, out) = kv(&served.socket, &["ping"]);
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(code, 0);
    // The client asked for the versions first, then pinged.
    assert_eq!(served.requests(INFO), [Vec::<u8>::new()]);
    assert_eq!(served.requests(PING), [Vec::<u8>::new()]);
}

#[test]
fn an_unknown_method_is_unimplemented() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(test_limits());
    let (code, out) = kv(&served.socket, &["qemu-version"]);
    assert_eq!(code, 1, "{out}");
    let error = out["error"].as_str().unwrap();
    assert!(error.contains("Unimplemented"), "{error}");
    assert!(
        error.contains("unknown method /kubevirt.cmd.v1.Cmd/GetQemuVersion"),
        "{error}"
    );
    // Our client reads the same trailers.
    let mut client = Client::new(&served.socket);
    match client.call("/no.Such/Method", &[], Duration::from_secs(5)) {
        Err(CallError::Status(status)) => {
            assert_eq!(status.code, Code::Unimplemented);
            assert_eq!(status.message, "unknown method /no.Such/Method");
        }
        other => panic!("{other:?}"),
    }
    // A status leaves the connection in use.
    assert!(client.is_connected());
    assert_eq!(
        client.call(PING, &[], Duration::from_secs(5)).unwrap(),
        SUCCESS
    );
}

#[test]
fn large_messages_cross_both_ways_with_grpc_go() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(test_limits());
    // A response past grpc-go's 64 KiB window: the server waits for its
    // WINDOW_UPDATEs.
    let (code, out) = kv(&served.socket, &["get-domain"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["result"]["exists"], true);
    let padding = out["result"]["domain"]["ObjectMeta"]["annotations"]["padding"]
        .as_str()
        .unwrap();
    assert_eq!(padding.len(), BIG_BYTES);
    // A request as large, in many DATA frames.
    let tree = TempTree::new("grpc-vmi");
    let vmi = tree.path("vmi.json");
    let vmi_json = serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "big-vmi", "namespace": "default",
                     "annotations": {"padding": "q".repeat(BIG_BYTES)}},
        "spec": {"domain": {"devices": {}}}
    });
    std::fs::write(&vmi, vmi_json.to_string()).unwrap();
    let (code, out) = kv(&served.socket, &["sync", "--vmi", vmi.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let syncs = served.requests(SYNC);
    assert_eq!(syncs.len(), 1);
    assert!(syncs[0].len() > BIG_BYTES, "{} bytes", syncs[0].len());
    let text = String::from_utf8_lossy(&syncs[0]);
    assert!(text.contains("\"big-vmi\""));
    assert!(text.contains(&"q".repeat(BIG_BYTES)));
}

#[test]
fn an_oversized_request_is_refused_and_the_connection_goes_on() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(Limits {
        max_message_bytes: 64 << 10,
        ..test_limits()
    });
    let mut client = Client::new(&served.socket);
    let request = vec![7u8; 100 << 10];
    match client.call(ECHO, &request, Duration::from_secs(5)) {
        Err(CallError::Status(status)) => {
            assert_eq!(status.code, Code::ResourceExhausted);
            assert!(
                status
                    .message
                    .contains("larger than max (102400 vs. 65536)"),
                "{}",
                status.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(served.requests(ECHO).is_empty(), "the handler saw it");
    // Same connection: a call under the limit goes through.
    assert!(client.is_connected());
    let small = vec![9u8; 60 << 10];
    assert_eq!(
        client.call(ECHO, &small, Duration::from_secs(5)).unwrap(),
        small
    );
    // grpc-go sees the status too.
    let tree = TempTree::new("grpc-vmi");
    let vmi = tree.path("vmi.json");
    let padding = "q".repeat(100 << 10);
    std::fs::write(
        &vmi,
        format!(r#"{{"metadata":{{"name":"v","annotations":{{"p":"{padding}"}}}}}}"#),
    )
    .unwrap();
    let (code, out) = kv(&served.socket, &["sync", "--vmi", vmi.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let error = out["error"].as_str().unwrap();
    assert!(error.contains("ResourceExhausted"), "{error}");
}

/// A raw HTTP/2 client: what grpc-go never sends.
struct Raw {
    stream: UnixStream,
    frames: FrameReader,
    decoder: Decoder,
    encoder: Encoder,
}

impl Raw {
    /// Connects and sends the preface and `settings`.
    fn connect(socket: &Path, settings: &[(u16, u32)]) -> Raw {
        let mut raw = Raw::open(socket);
        let mut out = frame::PREFACE.to_vec();
        frame::put_settings(&mut out, settings);
        raw.send(&out);
        raw
    }

    /// Connects to a server expected to refuse the connection: it may
    /// answer and close before the preface is written, so a failed write
    /// is no error here; what the server said is still there to read.
    fn connect_refused(socket: &Path) -> Raw {
        let mut raw = Raw::open(socket);
        let mut out = frame::PREFACE.to_vec();
        frame::put_settings(&mut out, &[]);
        let _ = raw.stream.write_all(&out);
        raw
    }

    fn open(socket: &Path) -> Raw {
        let stream = UnixStream::connect(socket).unwrap();
        Raw {
            frames: FrameReader::new(stream.try_clone().unwrap(), frame::LARGEST_MAX_FRAME),
            stream,
            decoder: Decoder::new(hpack::DEFAULT_TABLE_SIZE, 1 << 20),
            encoder: Encoder::default(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// HEADERS of a gRPC request on `stream`, then its message.
    fn request(&mut self, stream: u32, method: &str, message: &[u8]) {
        self.request_raw(
            stream,
            method,
            "application/grpc",
            &grpc::encode_message(message),
        );
    }

    /// A request with any content type and any body.
    fn request_raw(&mut self, stream: u32, method: &str, content_type: &str, body: &[u8]) {
        let mut block = Vec::new();
        self.encoder.encode(
            &[
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", "localhost"),
                ("content-type", content_type),
                ("te", "trailers"),
            ],
            &mut block,
        );
        let mut out = Vec::new();
        frame::put_headers(&mut out, stream, &block, body.is_empty(), 16_384);
        if !body.is_empty() {
            frame::put_data(&mut out, stream, body, true);
        }
        self.send(&out);
    }

    /// The next frame of `stream` (others skipped).
    fn next_of(&mut self, stream: u32, timeout: Duration) -> Frame {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = self.next(left).unwrap();
            let of = match frame {
                Frame::Data { stream, .. }
                | Frame::Headers { stream, .. }
                | Frame::RstStream { stream, .. } => stream,
                _ => 0,
            };
            if of == stream {
                return frame;
            }
        }
    }

    /// The trailers-only answer on `stream`: grpc-status and grpc-message.
    fn refusal(&mut self, stream: u32) -> (String, String) {
        let Frame::Headers {
            block, end_stream, ..
        } = self.next_of(stream, Duration::from_secs(5))
        else {
            panic!("no headers on stream {stream}");
        };
        assert!(end_stream, "not a trailers-only answer");
        let headers = self.decoder.decode(&block).unwrap();
        let field = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        (field("grpc-status"), field("grpc-message"))
    }

    /// Frames until `stream`'s trailers: the body (the message with its
    /// prefix) and the grpc-status; other streams' frames are skipped.
    fn body(&mut self, stream: u32, timeout: Duration) -> (Vec<u8>, String) {
        let deadline = Instant::now() + timeout;
        let mut body = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).unwrap() {
                Frame::Data {
                    stream: s, data, ..
                } if s == stream => body.extend(data),
                Frame::Headers {
                    stream: s,
                    end_stream,
                    block,
                    ..
                } => {
                    let headers = self.decoder.decode(&block).unwrap();
                    if s == stream && end_stream {
                        let status = headers
                            .iter()
                            .find(|(n, _)| n == "grpc-status")
                            .map(|(_, v)| v.clone())
                            .unwrap();
                        return (body, status);
                    }
                }
                _ => {}
            }
        }
    }

    /// The response message (the body without its prefix) and status.
    fn response(&mut self, stream: u32, timeout: Duration) -> (Vec<u8>, String) {
        let (body, status) = self.body(stream, timeout);
        (body.get(5..).unwrap_or_default().to_vec(), status)
    }

    fn next(&mut self, timeout: Duration) -> Result<Frame, ReadError> {
        self.frames.read(Some(Instant::now() + timeout), timeout)
    }

    /// Reads until the server closes the connection; the GOAWAY's error
    /// code if one came.
    fn until_closed(&mut self, timeout: Duration) -> Option<ErrorCode> {
        let deadline = Instant::now() + timeout;
        let mut goaway = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the server did not close the connection");
            match self.next(left) {
                Ok(Frame::GoAway { code, .. }) => goaway = Some(code),
                Ok(_) => {}
                Err(ReadError::Closed | ReadError::Io(_)) => return goaway,
                Err(e) => panic!("{e}"),
            }
        }
    }
}

fn assert_still_serving(served: &Served) {
    let (code, out) = kv(&served.socket, &["ping"]);
    assert_eq!((code, &out["ok"]), (0, &Value::Bool(true)), "{out}");
}

#[test]
fn a_slow_call_does_not_hold_up_a_ping_on_the_same_connection() {
    let served = Served::start(test_limits());
    let mut raw = Raw::connect(&served.socket, &[]);
    // Stream 1 sleeps 2 s; stream 3 pings right after it.
    raw.request(1, SLEEP, &[200]);
    raw.request(3, PING, &[]);
    let started = Instant::now();
    let (message, status) = raw.response(3, Duration::from_secs(5));
    assert_eq!((message.as_slice(), status.as_str()), (SUCCESS, "0"));
    assert!(
        served.handler.sleeping.load(Ordering::SeqCst) == 1,
        "the ping was answered after the slow call ended ({:?})",
        started.elapsed()
    );
    let (message, status) = raw.response(1, Duration::from_secs(10));
    assert_eq!((message.as_slice(), status.as_str()), (&[200u8][..], "0"));
}

#[test]
fn garbage_and_a_bad_preface_get_a_goaway_and_a_close() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(test_limits());
    let mut raw = Raw::connect(&served.socket, &[]);
    raw.send(b"\x00\x00\x05\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff\xff");
    // A HEADERS block that is not HPACK: a compression error.
    assert_eq!(
        raw.until_closed(Duration::from_secs(5)),
        Some(ErrorCode::COMPRESSION_ERROR)
    );
    // An HTTP/1 request instead of the preface.
    let mut http1 = UnixStream::connect(&served.socket).unwrap();
    http1
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut raw = Raw {
        frames: FrameReader::new(http1.try_clone().unwrap(), frame::LARGEST_MAX_FRAME),
        stream: http1,
        decoder: Decoder::new(4096, 1 << 16),
        encoder: Encoder::default(),
    };
    assert_eq!(
        raw.until_closed(Duration::from_secs(5)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    // Random bytes after a good preface.
    let mut raw = Raw::connect(&served.socket, &[]);
    let noise: Vec<u8> = (0u32..4096)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0])
        .collect();
    raw.send(&noise);
    assert!(raw.until_closed(Duration::from_secs(5)).is_some());
    // DATA on a stream never opened, and a frame over the size limit.
    let mut raw = Raw::connect(&served.socket, &[]);
    let mut out = Vec::new();
    frame::put_data(&mut out, 9, b"x", false);
    raw.send(&out);
    assert_eq!(
        raw.until_closed(Duration::from_secs(5)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    let mut raw = Raw::connect(&served.socket, &[]);
    let mut out = Vec::new();
    frame::put_header(&mut out, 1 << 20, frame::DATA, 0, 1);
    raw.send(&out);
    assert_eq!(
        raw.until_closed(Duration::from_secs(5)),
        Some(ErrorCode::FRAME_SIZE_ERROR)
    );
    assert_still_serving(&served);
}

#[test]
fn a_truncated_frame_is_given_up_on_after_the_frame_timeout() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(test_limits());
    let mut raw = Raw::connect(&served.socket, &[]);
    // Half of a PING, then silence with the connection open.
    raw.send(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00\x01\x02");
    let started = Instant::now();
    assert_eq!(
        raw.until_closed(Duration::from_secs(5)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Half a frame, then the client hangs up.
    let mut raw = Raw::connect(&served.socket, &[]);
    raw.send(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00\x01\x02");
    drop(raw);
    // Half a preface, then silence.
    let mut half = UnixStream::connect(&served.socket).unwrap();
    half.write_all(&frame::PREFACE[..10]).unwrap();
    let mut raw = Raw {
        frames: FrameReader::new(half.try_clone().unwrap(), frame::LARGEST_MAX_FRAME),
        stream: half,
        decoder: Decoder::new(4096, 1 << 16),
        encoder: Encoder::default(),
    };
    assert_eq!(
        raw.until_closed(Duration::from_secs(5)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert_still_serving(&served);
}

#[test]
fn a_response_waits_for_the_clients_window() {
    let served = Served::start(Limits {
        write_timeout: Duration::from_secs(5),
        ..test_limits()
    });
    // HTTP/2's default windows: 65535 octets until the client grants more.
    let mut raw = Raw::connect(&served.socket, &[]);
    raw.request(1, BIG, &[]);
    let mut body = Vec::new();
    loop {
        match raw.next(Duration::from_millis(300)) {
            Ok(Frame::Data { data, .. }) => body.extend(data),
            Ok(_) => {}
            Err(ReadError::TimedOut) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(body.len(), 65_535, "not the window's worth");
    // Granted the rest, on the stream and the connection, it all comes.
    let mut out = Vec::new();
    let rest = u32::try_from(BIG_BYTES + 5 - 65_535).unwrap();
    frame::put_window_update(&mut out, 1, rest);
    frame::put_window_update(&mut out, 0, rest);
    raw.send(&out);
    let (more, status) = raw.body(1, Duration::from_secs(5));
    assert_eq!(status, "0");
    body.extend(more);
    assert_eq!(body.len(), BIG_BYTES + 5);
    assert!(body[5..].iter().all(|&b| b == b'x'));
}

#[test]
fn a_client_that_grants_no_window_is_dropped() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(test_limits());
    let mut raw = Raw::connect(&served.socket, &[]);
    raw.request(1, BIG, &[]);
    let started = Instant::now();
    // No GOAWAY: the connection is simply closed after the write timeout.
    assert_eq!(raw.until_closed(Duration::from_secs(5)), None);
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_still_serving(&served);
}

#[test]
fn a_client_that_stops_reading_is_dropped_and_others_are_served() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    let served = Served::start(test_limits());
    let raw = Raw::connect(&served.socket, &[]);
    // PINGs whose acknowledgements are never read: the server's writes
    // block once the socket's buffer is full.
    let mut writer = raw.stream.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let flood = std::thread::spawn(move || {
        let mut pings = Vec::new();
        for _ in 0..1000 {
            frame::put_header(&mut pings, 8, frame::PING, 0, 0);
            pings.extend_from_slice(&[0; 8]);
        }
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if writer.write_all(&pings).is_err() {
                // The server closed the connection.
                return true;
            }
        }
        false
    });
    // Meanwhile another client is answered.
    assert_still_serving(&served);
    assert!(flood.join().unwrap(), "the server never dropped the client");
    drop(raw);
    assert_still_serving(&served);
}

#[test]
fn the_client_times_out_on_a_server_that_does_not_answer() {
    let tree = TempTree::new("grpc-mute");
    let socket = tree.path("mute.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // Accepts and reads everything, answers nothing.
    let mute = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
        sink
    });
    let mut client = Client::new(&socket);
    let started = Instant::now();
    let result = client.call(PING, &[], Duration::from_millis(300));
    assert!(matches!(result, Err(CallError::TimedOut)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!client.is_connected());
    drop(client);
    // What the server got: the preface, SETTINGS, and the call.
    let sent = mute.join().unwrap();
    assert!(sent.starts_with(frame::PREFACE));
    // No socket at all.
    let mut client = Client::new(tree.path("missing.sock"));
    let result = client.call(PING, &[], Duration::from_secs(1));
    assert!(
        matches!(result, Err(CallError::Connect { .. })),
        "{result:?}"
    );
}

/// `DomainEventRequest{domainJSON, eventType}`.
fn domain_event(domain_json: &str, event_type: &str) -> Vec<u8> {
    let mut out = bytes_field(1, domain_json.as_bytes());
    out.extend(bytes_field(3, event_type.as_bytes()));
    out
}

#[test]
fn the_client_sends_domain_events_to_kubevirts_notify_server() {
    if !require(&[Need::Kvhandler]) {
        return;
    }
    const HANDLE_DOMAIN_EVENT: &str = "/kubevirt.notify.v1.Notify/HandleDomainEvent";
    let tree = TempTree::new("grpc-notify");
    let share = tree.path("share");
    let mut server = NotifyServer::start(&share, None);
    let mut next_event = || -> Value {
        server
            .next(Duration::from_secs(10))
            .expect("the notify server printed no event")
    };
    let mut client = Client::new(share.join("domain-notify-pipe.sock"));
    let small = serde_json::json!({
        "kind": "Domain",
        "apiVersion": "kubevirt.io/v1",
        "ObjectMeta": {"name": "notify-vmi", "namespace": "default"},
        "Spec": {},
        "Status": {"Status": "Running"}
    })
    .to_string();
    // The server starts listening a moment after it starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        match client.call(
            HANDLE_DOMAIN_EVENT,
            &domain_event(&small, "ADDED"),
            Duration::from_secs(5),
        ) {
            Err(CallError::Connect { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(answer, SUCCESS);
    let event = next_event();
    assert_eq!(event["event"], "domain");
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["domain"]["ObjectMeta"]["name"], "notify-vmi");
    assert_eq!(event["domain"]["Status"]["Status"], "Running");
    // A large event on the same connection: past grpc-go's 64 KiB
    // window, so the client waits for its WINDOW_UPDATEs.
    let answer = client
        .call(
            HANDLE_DOMAIN_EVENT,
            &domain_event(&big_domain_json(), "MODIFIED"),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(answer, SUCCESS);
    let event = next_event();
    assert_eq!(event["type"], "MODIFIED");
    assert_eq!(event["domain"]["ObjectMeta"]["name"], "big-domain");
    let padding = event["domain"]["ObjectMeta"]["annotations"]["padding"]
        .as_str()
        .unwrap();
    assert_eq!(padding.len(), BIG_BYTES);
    assert!(client.is_connected());
    // A domain the server cannot read is its answer, not a call error:
    // Response{success: false, message}.
    let answer = client
        .call(
            HANDLE_DOMAIN_EVENT,
            &domain_event("{not json", "MODIFIED"),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(answer.first(), Some(&0x12), "{answer:?}");
}

#[test]
fn malformed_requests_get_a_status_or_a_reset_and_the_connection_goes_on() {
    let served = Served::start(test_limits());
    let mut raw = Raw::connect(&served.socket, &[]);
    // A compressed message: no compression is supported.
    raw.request_raw(1, ECHO, "application/grpc", &[1, 0, 0, 0, 2, 8, 1]);
    let (status, message) = raw.refusal(1);
    assert_eq!(status, "12");
    assert!(message.contains("compressed"), "{message}");
    // No message at all, two messages, a message cut short.
    raw.request_raw(3, ECHO, "application/grpc", &[]);
    assert_eq!(raw.refusal(3).0, "13");
    raw.request_raw(
        5,
        ECHO,
        "application/grpc",
        &[0, 0, 0, 0, 1, 7, 0, 0, 0, 0, 1, 7],
    );
    assert_eq!(raw.refusal(5).0, "13");
    raw.request_raw(7, ECHO, "application/grpc", &[0, 0, 0, 0, 9, 7]);
    assert_eq!(raw.refusal(7).0, "13");
    // Not gRPC: the stream is reset.
    raw.request_raw(9, ECHO, "application/json", &grpc::encode_message(b"{}"));
    assert_eq!(
        raw.next_of(9, Duration::from_secs(5)),
        Frame::RstStream {
            stream: 9,
            code: ErrorCode::PROTOCOL_ERROR
        }
    );
    assert!(served.requests(ECHO).is_empty(), "the handler saw one");
    // The connection still serves.
    raw.request(11, PING, &[]);
    assert_eq!(
        raw.response(11, Duration::from_secs(5)),
        (SUCCESS.to_vec(), "0".into())
    );
}

#[test]
fn streams_and_connections_past_the_limits_are_refused() {
    let served = Served::start(Limits {
        max_concurrent_streams: 2,
        max_connections: 2,
        ..test_limits()
    });
    let mut raw = Raw::connect(&served.socket, &[]);
    // The limit is announced in the server's SETTINGS.
    let Frame::Settings { params, .. } = raw.next(Duration::from_secs(5)).unwrap() else {
        panic!("the server did not start with SETTINGS");
    };
    assert!(
        params.contains(&(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 2)),
        "{params:?}"
    );
    // Two calls that take a while (stream 1 answered first), and a third.
    raw.request(1, SLEEP, &[30]);
    raw.request(3, SLEEP, &[60]);
    raw.request(5, PING, &[]);
    assert_eq!(
        raw.next_of(5, Duration::from_secs(5)),
        Frame::RstStream {
            stream: 5,
            code: ErrorCode::REFUSED_STREAM
        }
    );
    assert_eq!(raw.response(1, Duration::from_secs(5)).1, "0");
    assert_eq!(raw.response(3, Duration::from_secs(5)).1, "0");
    // Answered streams make room again.
    raw.request(7, PING, &[]);
    assert_eq!(raw.response(7, Duration::from_secs(5)).1, "0");
    // A second connection is served, a third refused.
    let _second = Raw::connect(&served.socket, &[]);
    let mut third = Raw::connect_refused(&served.socket);
    assert_eq!(
        third.until_closed(Duration::from_secs(5)),
        Some(ErrorCode::REFUSED_STREAM)
    );
    // Once one closes, a new one is served.
    drop(raw);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut client = Client::new(&served.socket);
    loop {
        match client.call(PING, &[], Duration::from_secs(5)) {
            Ok(answer) => break assert_eq!(answer, SUCCESS),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn the_client_waits_for_the_servers_window() {
    let tree = TempTree::new("grpc-window");
    let socket = tree.path("server.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // A server that grants HTTP/2's default windows only, counts what
    // arrives before it grants more, then answers.
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut frames = FrameReader::new(stream.try_clone().unwrap(), frame::LARGEST_MAX_FRAME);
        assert!(
            frames
                .read_preface(Instant::now() + Duration::from_secs(5))
                .unwrap()
        );
        let mut out = Vec::new();
        frame::put_settings(&mut out, &[]);
        stream.write_all(&out).unwrap();
        let read = |frames: &mut FrameReader, timeout| {
            frames.read(Some(Instant::now() + timeout), Duration::from_secs(5))
        };
        let mut received = 0;
        let mut ended = false;
        let mut granted = None;
        while !ended {
            // Quiet for 300 ms: the client is waiting; grant it more.
            let timeout = Duration::from_millis(if granted.is_none() { 300 } else { 5000 });
            match read(&mut frames, timeout) {
                Ok(Frame::Data {
                    data, end_stream, ..
                }) => {
                    received += data.len();
                    ended = end_stream;
                }
                Ok(_) => {}
                Err(ReadError::TimedOut) if granted.is_none() => {
                    granted = Some(received);
                    let mut out = Vec::new();
                    frame::put_window_update(&mut out, 1, 1 << 20);
                    frame::put_window_update(&mut out, 0, 1 << 20);
                    stream.write_all(&out).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
        let before_update = granted.unwrap_or(received);
        let mut encoder = Encoder::default();
        let mut out = Vec::new();
        let mut block = Vec::new();
        encoder.encode(
            &[(":status", "200"), ("content-type", "application/grpc")],
            &mut block,
        );
        frame::put_headers(&mut out, 1, &block, false, 16_384);
        frame::put_data(&mut out, 1, &grpc::encode_message(SUCCESS), false);
        let mut block = Vec::new();
        encoder.encode(&[("grpc-status", "0")], &mut block);
        frame::put_headers(&mut out, 1, &block, true, 16_384);
        stream.write_all(&out).unwrap();
        (before_update, received)
    });
    let mut client = Client::new(&socket);
    let answer = client.call(ECHO, &vec![1; BIG_BYTES], Duration::from_secs(10));
    assert_eq!(answer.unwrap(), SUCCESS);
    let (before_update, received) = server.join().unwrap();
    assert_eq!(before_update, 65_535, "sent past the window");
    assert_eq!(received, BIG_BYTES + 5);
}
