//! A scripted stand-in for a libvirt daemon, for tests: it reads the
//! client's frames and answers with whatever bytes a test wants, good or
//! bad.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::codec::{Encoder, HEADER_BYTES, Header, LENGTH_BYTES, MessageStatus, MessageType};
use super::procedures::{KEEPALIVE, REMOTE};

/// The daemon's end of a connection.
pub struct FakeDaemon {
    pub stream: UnixStream,
}

/// A frame the client sent.
#[derive(Debug, Clone)]
pub struct Received {
    pub header: Header,
    pub payload: Vec<u8>,
}

impl FakeDaemon {
    pub fn new(stream: UnixStream) -> FakeDaemon {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        FakeDaemon { stream }
    }

    /// The next frame from the client, or None on EOF or timeout.
    pub fn read(&mut self) -> Option<Received> {
        let mut len = [0u8; LENGTH_BYTES];
        self.stream.read_exact(&mut len).ok()?;
        let total = u32::from_be_bytes(len) as usize;
        assert!(total >= LENGTH_BYTES + HEADER_BYTES, "client sent {total}");
        let mut body = vec![0u8; total - LENGTH_BYTES];
        self.stream.read_exact(&mut body).ok()?;
        let (header, payload) = Header::parse(&body).expect("client header");
        Some(Received {
            header,
            payload: payload.to_vec(),
        })
    }

    /// The next CALL, answering (and skipping) keepalive messages.
    pub fn read_call(&mut self) -> Option<Received> {
        loop {
            let frame = self.read()?;
            if frame.header.program == KEEPALIVE.number {
                if frame.header.procedure == 1 {
                    self.keepalive(2);
                }
                continue;
            }
            return Some(frame);
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes);
    }

    pub fn reply(&mut self, call: &Header, payload: &[u8]) {
        let frame = Header {
            kind: MessageType::Reply,
            status: MessageStatus::Ok,
            ..*call
        }
        .frame(payload);
        self.send_raw(&frame);
    }

    pub fn reply_error(&mut self, call: &Header, code: i32, message: &str) {
        let frame = Header {
            kind: MessageType::Reply,
            status: MessageStatus::Error,
            ..*call
        }
        .frame(&error_payload(code, message));
        self.send_raw(&frame);
    }

    pub fn event(&mut self, procedure: i32, payload: &[u8]) {
        let frame = Header {
            program: REMOTE.number,
            version: REMOTE.version,
            procedure,
            kind: MessageType::Message,
            serial: 0,
            status: MessageStatus::Ok,
        }
        .frame(payload);
        self.send_raw(&frame);
    }

    pub fn keepalive(&mut self, procedure: i32) {
        let frame = Header {
            program: KEEPALIVE.number,
            version: KEEPALIVE.version,
            procedure,
            kind: MessageType::Message,
            serial: 0,
            status: MessageStatus::Ok,
        }
        .frame(&[]);
        self.send_raw(&frame);
    }
}

/// A `remote_error` payload as libvirtd sends it.
pub fn error_payload(code: i32, message: &str) -> Vec<u8> {
    let mut e = Encoder::new();
    e.i32(code)
        .i32(10)
        .opt_string(Some(message))
        .i32(2)
        .u32(0)
        .opt_string(None)
        .opt_string(None)
        .opt_string(None)
        .i32(0)
        .i32(0)
        .u32(0);
    e.into_bytes()
}
