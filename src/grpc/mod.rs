//! gRPC over HTTP/2 on unix sockets, synchronous, for KubeVirt's
//! virt-handler: the server it calls (`Cmd`, `CmdInfo`) and the client
//! the launcher calls its notify server with. Unary calls only, which is
//! all that KubeVirt's launcher protocol uses.
//!
//! The layers, bottom up:
//! - [`huffman`] and [`hpack`]: header compression. grpc-go Huffman-codes
//!   its header strings and indexes them in the dynamic table, so the
//!   decoder takes all of RFC 7541; the encoder writes plain literals.
//! - [`frame`]: HTTP/2 frames read from a socket (a frame size limit, and
//!   a deadline once a frame has begun) and written into a buffer.
//! - [`flow`]: the send and receive windows of flow control.
//! - [`status`]: gRPC's status codes and the trailers that carry them.
//! - [`server`]: a connection is a reader thread (frames in, HPACK
//!   decoding, request assembly), a writer thread that alone writes to
//!   the socket and owns the send windows, so a response larger than the
//!   peer's window waits there for WINDOW_UPDATEs while other streams go
//!   on, and worker threads that run the [`Handler`], so a slow call does
//!   not hold up a ping on the same connection. An acceptor starts one
//!   connection thread per client, up to a limit.
//! - [`client`]: one call at a time on a kept connection, every step
//!   bounded by the call's deadline.
//!
//! Only h2c with prior knowledge is spoken (what grpc-go does on a unix
//! socket): no TLS, no HTTP/1.1 upgrade. A gRPC message on the wire is a
//! compressed flag (always 0 here), a 4-byte big-endian length and the
//! protobuf bytes, which this module never looks into.

pub mod client;
pub mod flow;
pub mod frame;
pub mod hpack;
pub mod huffman;
pub mod server;
pub mod status;

use std::time::Duration;

pub use client::{CallError, Client};
pub use server::{Handler, serve_connection, spawn_acceptor};
pub use status::{Code, Status};

/// The bounds one server keeps for every connection.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest request message; a larger one is answered with
    /// RESOURCE_EXHAUSTED on its stream and the connection goes on.
    /// grpc-go's own default.
    pub max_message_bytes: usize,
    /// Streams open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS);
    /// also the most calls that run at once for one connection.
    pub max_concurrent_streams: u32,
    /// The largest header list a client may send
    /// (SETTINGS_MAX_HEADER_LIST_SIZE).
    pub max_header_list_bytes: u32,
    /// How long a write may block, or a response wait for the client's
    /// flow-control window, before the connection is dropped: a client
    /// that stops reading holds nothing but its own connection.
    pub write_timeout: Duration,
    /// How long the preface, and any frame once begun, may take to arrive.
    pub frame_timeout: Duration,
    /// Connections served at once; more are refused with a GOAWAY.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_message_bytes: 4 << 20,
            max_concurrent_streams: 32,
            max_header_list_bytes: 16 << 10,
            write_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(10),
            max_connections: 16,
        }
    }
}

/// The flow-control window this side grants, per stream and for the
/// connection: large enough that a request or response of a few hundred
/// KiB crosses without waiting for updates.
const RECEIVE_WINDOW: u32 = 1 << 20;

/// The length of gRPC's message prefix: the compressed flag and the length.
const MESSAGE_PREFIX: usize = 5;

/// A message with gRPC's prefix, as a request or response body.
pub fn encode_message(message: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(MESSAGE_PREFIX + message.len());
    body.push(0);
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    body.extend_from_slice(&len.to_be_bytes());
    body.extend_from_slice(message);
    body
}

/// Checks a unary call's body (request or response) as it arrives, so a
/// bad or oversized message is refused at its prefix, not after it has
/// all been read. `Ok(Some(message))` once the body is `complete` and
/// holds exactly one message; `Ok(None)` while it may still become one.
fn check_body(body: &[u8], max_message: usize, complete: bool) -> Result<Option<&[u8]>, Status> {
    let Some(prefix) = body.get(..MESSAGE_PREFIX) else {
        return match (complete, body.is_empty()) {
            (false, _) => Ok(None),
            (true, true) => Err(Status::new(Code::Internal, "no message in a unary call")),
            (true, false) => Err(Status::new(Code::Internal, "message prefix truncated")),
        };
    };
    match prefix[0] {
        0 => {}
        1 => {
            return Err(Status::new(
                Code::Unimplemented,
                "compressed messages are not supported",
            ));
        }
        flag => {
            return Err(Status::new(
                Code::Internal,
                format!("bad compressed flag {flag} in message prefix"),
            ));
        }
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > max_message {
        return Err(Status::new(
            Code::ResourceExhausted,
            format!("grpc: received message larger than max ({len} vs. {max_message})"),
        ));
    }
    let message = &body[MESSAGE_PREFIX..];
    if message.len() > len {
        return Err(Status::new(
            Code::Internal,
            "more than one message in a unary call",
        ));
    }
    if !complete {
        return Ok(None);
    }
    if message.len() < len {
        return Err(Status::new(
            Code::Internal,
            format!("message truncated: {} of {len} bytes", message.len()),
        ));
    }
    Ok(Some(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_holds_exactly_one_message() {
        let body = encode_message(b"\x08\x01");
        assert_eq!(body, [0, 0, 0, 0, 2, 8, 1]);
        assert_eq!(check_body(&body, 100, true), Ok(Some(&b"\x08\x01"[..])));
        assert_eq!(check_body(&body[..6], 100, false), Ok(None));
        assert_eq!(check_body(&body[..3], 100, false), Ok(None));
        let code = |body: &[u8], complete| check_body(body, 100, complete).unwrap_err().code;
        assert_eq!(code(&body[..6], true), Code::Internal);
        assert_eq!(code(&body[..3], true), Code::Internal);
        assert_eq!(code(&[], true), Code::Internal);
        let mut two = body.clone();
        two.extend_from_slice(&body);
        assert_eq!(code(&two, false), Code::Internal);
        assert_eq!(code(&[1, 0, 0, 0, 0], false), Code::Unimplemented);
        assert_eq!(code(&[7, 0, 0, 0, 0], false), Code::Internal);
        // The declared length alone refuses an oversized message.
        assert_eq!(code(&[0, 0, 0, 0, 101], false), Code::ResourceExhausted);
        // An empty message is a message (all fields at their defaults).
        assert_eq!(check_body(&[0, 0, 0, 0, 0], 100, true), Ok(Some(&[][..])));
    }
}
