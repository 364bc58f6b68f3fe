//! The RPC client against a fake daemon on a socket pair: routing,
//! deadlines, keepalive, and every kind of bad byte stream.

use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, unbounded};

use super::*;
use crate::hypervisor::wire::codec::Encoder;
use crate::hypervisor::wire::fake::FakeDaemon;
use crate::hypervisor::wire::procedures::{
    CONNECT_GET_LIB_VERSION, CONNECT_GET_TYPE, DOMAIN_SUSPEND, REMOTE,
};

#[derive(Debug, Clone, PartialEq)]
enum Heard {
    Event(i32, Vec<u8>),
    Closed(CloseReason, String),
}

struct ChannelListener(Sender<Heard>);

impl Listener for ChannelListener {
    fn event(&mut self, procedure: i32, payload: &[u8]) {
        let _ = self.0.send(Heard::Event(procedure, payload.to_vec()));
    }
    fn closed(&mut self, reason: CloseReason, detail: &str) {
        let _ = self.0.send(Heard::Closed(reason, detail.to_string()));
    }
}

fn quick() -> ClientOptions {
    ClientOptions {
        keepalive_interval: Duration::from_millis(100),
        keepalive_count: 3,
        write_timeout: Duration::from_secs(5),
    }
}

fn pair(options: ClientOptions) -> (Arc<Client>, FakeDaemon, Receiver<Heard>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let (tx, rx) = unbounded();
    let client = Client::from_stream(ours, options, Box::new(ChannelListener(tx))).unwrap();
    (Arc::new(client), FakeDaemon::new(theirs), rx)
}

const LONG: Duration = Duration::from_secs(10);

fn closed_event(rx: &Receiver<Heard>) -> (CloseReason, String) {
    match rx.recv_timeout(LONG) {
        Ok(Heard::Closed(reason, detail)) => (reason, detail),
        other => panic!("expected a close, got {other:?}"),
    }
}

#[test]
fn replies_reach_their_callers_by_serial_even_out_of_order() {
    let (client, mut daemon, _rx) = pair(ClientOptions::default());
    let c1 = client.clone();
    let first = std::thread::spawn(move || c1.call(&CONNECT_GET_TYPE, &[], LONG));
    let a = daemon.read_call().unwrap();
    let c2 = client.clone();
    let second = std::thread::spawn(move || c2.call(&CONNECT_GET_LIB_VERSION, &[], LONG));
    let b = daemon.read_call().unwrap();
    assert_ne!(a.header.serial, b.header.serial);
    assert_eq!(a.header.procedure, 3);
    assert_eq!(b.header.procedure, 157);
    // Answer the second first.
    let mut e = Encoder::new();
    e.u64(9_000_000);
    daemon.reply(&b.header, &e.into_bytes());
    let mut e = Encoder::new();
    e.string("QEMU");
    daemon.reply(&a.header, &e.into_bytes());
    let second = second.join().unwrap().unwrap();
    let first = first.join().unwrap().unwrap();
    assert_eq!(second, 9_000_000u64.to_be_bytes());
    assert_eq!(&first[4..8], b"QEMU");
}

#[test]
fn daemon_errors_come_back_with_code_and_message() {
    let (client, mut daemon, _rx) = pair(ClientOptions::default());
    let c = client.clone();
    let call = std::thread::spawn(move || c.call(&DOMAIN_SUSPEND, &[1, 2, 3, 4], LONG));
    let got = daemon.read_call().unwrap();
    assert_eq!(got.payload, [1, 2, 3, 4]);
    daemon.reply_error(
        &got.header,
        55,
        "Requested operation is not valid: domain is not running",
    );
    match call.join().unwrap() {
        Err(RpcError::Remote(e)) => {
            assert_eq!(e.code, 55);
            assert!(e.message.contains("not running"));
        }
        other => panic!("{other:?}"),
    }
    assert!(client.is_open());
}

#[test]
fn a_call_without_reply_times_out_and_the_late_reply_is_dropped() {
    let (client, mut daemon, rx) = pair(ClientOptions::default());
    let c = client.clone();
    let call =
        std::thread::spawn(move || c.call(&CONNECT_GET_TYPE, &[], Duration::from_millis(200)));
    let got = daemon.read_call().unwrap();
    assert_eq!(
        call.join().unwrap(),
        Err(RpcError::Timeout(Duration::from_millis(200)))
    );
    // The late reply is not an error, and the connection still works.
    let mut e = Encoder::new();
    e.string("QEMU");
    daemon.reply(&got.header, &e.into_bytes());
    let c = client.clone();
    let next = std::thread::spawn(move || c.call(&CONNECT_GET_TYPE, &[], LONG));
    let got = daemon.read_call().unwrap();
    daemon.reply(&got.header, &e_string("TEST"));
    assert!(next.join().unwrap().is_ok());
    assert!(client.is_open());
    assert!(rx.try_recv().is_err(), "nothing closed");
}

fn e_string(s: &str) -> Vec<u8> {
    let mut e = Encoder::new();
    e.string(s);
    e.into_bytes()
}

#[test]
fn events_go_to_the_listener() {
    let (_client, mut daemon, rx) = pair(ClientOptions::default());
    daemon.event(318, &[0, 0, 0, 7]);
    assert_eq!(
        rx.recv_timeout(LONG).unwrap(),
        Heard::Event(318, vec![0, 0, 0, 7])
    );
}

#[test]
fn the_daemons_pings_are_answered() {
    let (client, mut daemon, _rx) = pair(ClientOptions::default());
    daemon.keepalive(1);
    let pong = daemon.read().unwrap();
    assert_eq!(pong.header.program, KEEPALIVE.number);
    assert_eq!(pong.header.procedure, 2);
    assert_eq!(pong.header.kind, MessageType::Message);
    assert!(client.is_open());
}

#[test]
fn a_silent_daemon_is_found_dead_by_keepalive_with_no_call_in_flight() {
    let (client, mut daemon, rx) = pair(quick());
    client.enable_keepalive();
    let began = Instant::now();
    // Read the probes but never answer.
    let mut pings = 0;
    while let Some(frame) = daemon.read() {
        assert_eq!(frame.header.program, KEEPALIVE.number);
        assert_eq!(frame.header.procedure, 1);
        pings += 1;
        if pings == 3 {
            break;
        }
    }
    let (reason, detail) = closed_event(&rx);
    assert_eq!(reason, CloseReason::Keepalive);
    assert!(
        detail.contains("did not answer 3 keepalive probes"),
        "{detail}"
    );
    assert!(began.elapsed() >= Duration::from_millis(300));
    assert!(!client.is_open());
    assert!(matches!(
        client.call(&CONNECT_GET_TYPE, &[], LONG),
        Err(RpcError::ConnectionLost(why)) if why.contains("keepalive")
    ));
}

#[test]
fn an_answering_daemon_keeps_the_connection() {
    let (client, mut daemon, rx) = pair(quick());
    client.enable_keepalive();
    let until = Instant::now() + Duration::from_millis(800);
    let mut pings = 0;
    while Instant::now() < until {
        let frame = daemon.read().unwrap();
        assert_eq!(frame.header.procedure, 1);
        daemon.keepalive(2);
        pings += 1;
    }
    assert!(pings >= 2, "{pings}");
    assert!(client.is_open());
    assert!(rx.try_recv().is_err());
}

/// Sends `bytes` while a call waits; returns what the caller and the
/// listener saw.
fn serve_bad_bytes(bytes: &[u8]) -> (RpcError, CloseReason, String) {
    let (client, mut daemon, rx) = pair(ClientOptions::default());
    let c = client.clone();
    let call = std::thread::spawn(move || c.call(&CONNECT_GET_TYPE, &[], LONG));
    daemon.read_call().unwrap();
    daemon.send_raw(bytes);
    let err = call.join().unwrap().unwrap_err();
    let (reason, detail) = closed_event(&rx);
    assert!(!client.is_open());
    // Later calls fail at once, naming the cause.
    let t = Instant::now();
    let later = client.call(&CONNECT_GET_TYPE, &[], LONG).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(later, RpcError::ConnectionLost(detail.clone()));
    drop(daemon);
    (err, reason, detail)
}

fn header_bytes(program: u32, version: u32, procedure: i32, kind: u32, serial: u32) -> Vec<u8> {
    let mut e = Encoder::new();
    e.u32(28)
        .u32(program)
        .u32(version)
        .i32(procedure)
        .u32(kind)
        .u32(serial)
        .u32(0);
    e.into_bytes()
}

#[test]
fn an_oversized_length_closes_the_connection_naming_it() {
    let (err, reason, detail) = serve_bad_bytes(&[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(reason, CloseReason::Error);
    assert!(
        detail.contains("exceeds the protocol's maximum"),
        "{detail}"
    );
    assert!(
        matches!(err, RpcError::ConnectionLost(ref why) if why == &detail),
        "{err:?}"
    );
}

#[test]
fn a_length_shorter_than_a_header_closes_the_connection() {
    let (_, reason, detail) = serve_bad_bytes(&[0, 0, 0, 5]);
    assert_eq!(reason, CloseReason::Error);
    assert!(detail.contains("shorter than a message header"), "{detail}");
}

#[test]
fn a_wrong_program_or_version_closes_the_connection() {
    let (_, _, detail) = serve_bad_bytes(&header_bytes(0x1234, 1, 3, 1, 0));
    assert!(detail.contains("unknown program 0x1234"), "{detail}");
    let (_, _, detail) = serve_bad_bytes(&header_bytes(REMOTE.number, 2, 3, 1, 0));
    assert!(detail.contains("REMOTE program version 2"), "{detail}");
}

#[test]
fn an_unknown_message_type_or_a_stray_reply_closes_the_connection() {
    let (_, _, detail) = serve_bad_bytes(&header_bytes(REMOTE.number, 1, 3, 77, 0));
    assert!(detail.contains("unknown message type 77"), "{detail}");
    let (_, _, detail) = serve_bad_bytes(&header_bytes(REMOTE.number, 1, 3, 1, 999));
    assert!(
        detail.contains("serial 999") && detail.contains("no call is waiting"),
        "{detail}"
    );
    let (_, _, detail) = serve_bad_bytes(&header_bytes(REMOTE.number, 1, 3, 0, 0));
    assert!(detail.contains("Call message"), "{detail}");
}

#[test]
fn a_truncated_message_then_eof_is_end_of_file_mid_message() {
    let mut bytes = header_bytes(REMOTE.number, 1, 3, 1, 0);
    bytes[3] = 200; // claims 200 bytes, sends 28
    let (client, mut daemon, rx) = pair(ClientOptions::default());
    let c = client.clone();
    let call = std::thread::spawn(move || c.call(&CONNECT_GET_TYPE, &[], LONG));
    daemon.read_call().unwrap();
    daemon.send_raw(&bytes);
    drop(daemon);
    let err = call.join().unwrap().unwrap_err();
    let (reason, detail) = closed_event(&rx);
    assert_eq!(reason, CloseReason::Eof);
    assert!(
        detail.contains("in the middle of a message (28 bytes"),
        "{detail}"
    );
    assert!(matches!(err, RpcError::ConnectionLost(_)));
}

#[test]
fn garbage_never_panics_or_hangs() {
    let mut seed = 0x9e37_79b9u32;
    for round in 0..40 {
        let garbage: Vec<u8> = (0..(round * 37 % 300 + 4))
            .map(|_| {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (seed >> 24) as u8
            })
            .collect();
        let (client, mut daemon, rx) = pair(ClientOptions::default());
        let c = client.clone();
        let call =
            std::thread::spawn(move || c.call(&CONNECT_GET_TYPE, &[], Duration::from_secs(2)));
        daemon.read_call().unwrap();
        daemon.send_raw(&garbage);
        drop(daemon);
        // Whatever the garbage, the call ends and the close is reported.
        assert!(call.join().unwrap().is_err());
        let (reason, _) = closed_event(&rx);
        assert!(matches!(reason, CloseReason::Error | CloseReason::Eof));
    }
}

#[test]
fn a_reply_to_the_wrong_procedure_fails_that_call_only() {
    let (client, mut daemon, rx) = pair(ClientOptions::default());
    let c = client.clone();
    let call = std::thread::spawn(move || c.call(&CONNECT_GET_TYPE, &[], LONG));
    let got = daemon.read_call().unwrap();
    let mut wrong = got.header;
    wrong.procedure = 4;
    daemon.reply(&wrong, &e_string("QEMU"));
    match call.join().unwrap() {
        Err(RpcError::Protocol(what)) => {
            assert!(what.contains("virConnectGetType (procedure 3)"), "{what}");
            assert!(what.contains("reply to procedure 4"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    assert!(client.is_open());
    assert!(rx.try_recv().is_err());
}

#[test]
fn an_undecodable_error_reply_fails_that_call_only() {
    let (client, mut daemon, _rx) = pair(ClientOptions::default());
    let c = client.clone();
    let call = std::thread::spawn(move || c.call(&CONNECT_GET_TYPE, &[], LONG));
    let got = daemon.read_call().unwrap();
    let frame = Header {
        kind: MessageType::Reply,
        status: MessageStatus::Error,
        ..got.header
    }
    .frame(&[0, 0, 0, 1]);
    daemon.send_raw(&frame);
    match call.join().unwrap() {
        Err(RpcError::Protocol(what)) => {
            assert!(what.contains("undecodable error reply"), "{what}")
        }
        other => panic!("{other:?}"),
    }
    assert!(client.is_open());
}

#[test]
fn eof_is_reported_as_end_of_file_and_close_by_us_is_silent() {
    let (client, daemon, rx) = pair(ClientOptions::default());
    drop(daemon);
    let (reason, detail) = closed_event(&rx);
    assert_eq!(reason, CloseReason::Eof);
    assert!(detail.contains("end of file"), "{detail}");
    assert!(!client.is_open());

    let (client, _daemon, rx) = pair(ClientOptions::default());
    client.close();
    assert!(!client.is_open());
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
}

#[test]
fn a_request_beyond_the_protocols_size_is_refused_before_sending() {
    let (client, _daemon, _rx) = pair(ClientOptions::default());
    let huge = vec![0u8; limits::MESSAGE_MAX];
    match client.call(&CONNECT_GET_TYPE, &huge, LONG) {
        Err(RpcError::Protocol(what)) => assert!(what.contains("the protocol allows"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(client.is_open());
}
