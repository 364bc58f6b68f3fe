//! XDR (RFC 4506) as libvirt's RPC uses it: the primitives, the message
//! header and frame, the error record and typed parameters.
//!
//! Everything here is pure: bytes in, values out. The decoder never trusts
//! a length it reads: every count is checked against the protocol's limit
//! and against the bytes actually left before anything is allocated, so a
//! bad message gives a `DecodeError` naming what was wrong, never a panic
//! or a huge allocation.

use std::fmt;

use serde_json::Value;

use super::procedures::limits;
use crate::hypervisor::Stat;

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What was being read, e.g. "string length".
    pub what: String,
    /// Byte offset inside the payload (or frame) where it failed.
    pub offset: usize,
}

impl DecodeError {
    fn new(what: impl Into<String>, offset: usize) -> DecodeError {
        DecodeError {
            what: what.into(),
            offset,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.what, self.offset)
    }
}

impl std::error::Error for DecodeError {}

pub type DecodeResult<T> = Result<T, DecodeError>;

/// Bytes padded to a multiple of four, as XDR aligns every item.
fn padded(len: usize) -> usize {
    len.div_ceil(4) * 4
}

/// Builds an XDR payload. Encoding cannot fail; the client checks the
/// whole message against the protocol's size limit before sending.
#[derive(Debug, Default, Clone)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder::default()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn u32(&mut self, v: u32) -> &mut Encoder {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i32(&mut self, v: i32) -> &mut Encoder {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// XDR `unsigned hyper`.
    pub fn u64(&mut self, v: u64) -> &mut Encoder {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// XDR `hyper`.
    pub fn i64(&mut self, v: i64) -> &mut Encoder {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn f64(&mut self, v: f64) -> &mut Encoder {
        self.buf.extend_from_slice(&v.to_bits().to_be_bytes());
        self
    }

    /// XDR `bool` (an int, 0 or 1).
    pub fn bool(&mut self, v: bool) -> &mut Encoder {
        self.u32(u32::from(v))
    }

    /// Variable-length opaque data: length, bytes, padding.
    pub fn opaque(&mut self, bytes: &[u8]) -> &mut Encoder {
        // Lengths above 4 GiB cannot occur: messages are at most 16 MiB
        // and the client refuses larger ones before sending.
        self.u32(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
        self.fixed_opaque(bytes)
    }

    /// Fixed-length opaque data (e.g. a UUID): bytes and padding only.
    pub fn fixed_opaque(&mut self, bytes: &[u8]) -> &mut Encoder {
        self.buf.extend_from_slice(bytes);
        self.buf
            .resize(self.buf.len() + padded(bytes.len()) - bytes.len(), 0);
        self
    }

    /// `remote_nonnull_string`.
    pub fn string(&mut self, s: &str) -> &mut Encoder {
        self.opaque(s.as_bytes())
    }

    /// `remote_string`: an optional string (XDR pointer: 0, or 1 and the
    /// string).
    pub fn opt_string(&mut self, s: Option<&str>) -> &mut Encoder {
        match s {
            Some(s) => self.u32(1).string(s),
            None => self.u32(0),
        }
    }

    /// `remote_typed_param<>`: a counted list of typed parameters.
    pub fn typed_params(&mut self, params: &[TypedParam]) -> &mut Encoder {
        self.u32(u32::try_from(params.len()).unwrap_or(u32::MAX));
        for p in params {
            self.string(&p.name);
            match &p.value {
                TypedValue::Int(v) => self.u32(TYPE_INT).i32(*v),
                TypedValue::UInt(v) => self.u32(TYPE_UINT).u32(*v),
                TypedValue::LLong(v) => self.u32(TYPE_LLONG).i64(*v),
                TypedValue::ULLong(v) => self.u32(TYPE_ULLONG).u64(*v),
                TypedValue::Double(v) => self.u32(TYPE_DOUBLE).f64(*v),
                TypedValue::Boolean(v) => self.u32(TYPE_BOOLEAN).bool(*v),
                TypedValue::String(v) => self.u32(TYPE_STRING).string(v),
            };
        }
        self
    }
}

/// Reads an XDR payload front to back.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Ends decoding: bytes left over mean the message was not what the
    /// caller expected.
    pub fn finish(&self) -> DecodeResult<()> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(DecodeError::new(
                format!("{} unexpected bytes after the end", self.remaining()),
                self.pos,
            ))
        }
    }

    fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(DecodeError::new(
                format!(
                    "truncated: {what} needs {n} bytes, only {} left",
                    self.remaining()
                ),
                self.pos,
            ));
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn word<const N: usize>(&mut self, what: &str) -> DecodeResult<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub fn u32(&mut self) -> DecodeResult<u32> {
        Ok(u32::from_be_bytes(self.word("an unsigned int")?))
    }

    pub fn i32(&mut self) -> DecodeResult<i32> {
        Ok(i32::from_be_bytes(self.word("an int")?))
    }

    pub fn u64(&mut self) -> DecodeResult<u64> {
        Ok(u64::from_be_bytes(self.word("an unsigned hyper")?))
    }

    pub fn i64(&mut self) -> DecodeResult<i64> {
        Ok(i64::from_be_bytes(self.word("a hyper")?))
    }

    pub fn f64(&mut self) -> DecodeResult<f64> {
        Ok(f64::from_bits(u64::from_be_bytes(self.word("a double")?)))
    }

    /// XDR `bool`: only 0 and 1 are valid.
    pub fn bool(&mut self) -> DecodeResult<bool> {
        let at = self.pos;
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::new(
                format!("a boolean must be 0 or 1, not {other}"),
                at,
            )),
        }
    }

    /// A count (array length, string length) checked against `max` and
    /// against what is left: each item takes at least `min_item` bytes.
    fn count(&mut self, max: usize, min_item: usize, what: &str) -> DecodeResult<usize> {
        let at = self.pos;
        let n = self.u32()? as usize;
        if n > max {
            return Err(DecodeError::new(
                format!("{what} of {n} exceeds the protocol's limit of {max}"),
                at,
            ));
        }
        if n.saturating_mul(min_item) > self.remaining() {
            return Err(DecodeError::new(
                format!(
                    "truncated: {what} of {n} does not fit in the {} bytes left",
                    self.remaining()
                ),
                at,
            ));
        }
        Ok(n)
    }

    /// Variable-length opaque data of at most `max` bytes.
    pub fn opaque(&mut self, max: usize) -> DecodeResult<&'a [u8]> {
        let n = self.count(max, 1, "opaque data length")?;
        self.fixed_opaque(n)
    }

    /// Fixed-length opaque data and its padding.
    pub fn fixed_opaque(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        let bytes = self.take(n, "opaque data")?;
        let at = self.pos;
        let pad = self.take(padded(n) - n, "padding")?;
        if pad.iter().any(|b| *b != 0) {
            return Err(DecodeError::new("non-zero padding", at));
        }
        Ok(bytes)
    }

    /// `remote_nonnull_string`. libvirt's strings are UTF-8; anything else
    /// is kept, with replacement characters, as the C client would show it.
    pub fn string(&mut self) -> DecodeResult<String> {
        let n = self.count(limits::STRING_MAX, 1, "string length")?;
        let bytes = self.fixed_opaque(n)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// `remote_string`: an optional string.
    pub fn opt_string(&mut self) -> DecodeResult<Option<String>> {
        if self.pointer()? {
            Ok(Some(self.string()?))
        } else {
            Ok(None)
        }
    }

    /// An XDR optional-data marker ("pointer"): 0 absent, 1 present.
    pub fn pointer(&mut self) -> DecodeResult<bool> {
        let at = self.pos;
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::new(
                format!("an optional-value marker must be 0 or 1, not {other}"),
                at,
            )),
        }
    }

    /// An array length of at most `max` items of at least `min_item` bytes.
    pub fn array_len(&mut self, max: usize, min_item: usize) -> DecodeResult<usize> {
        self.count(max, min_item, "array length")
    }

    /// `remote_typed_param<max>`, as (name, JSON value) pairs with the same
    /// JSON types the libvirt C library's typed parameters give.
    pub fn typed_params(&mut self, max: usize) -> DecodeResult<Vec<Stat>> {
        // A parameter is at least a name length, a type and a 4-byte value.
        let n = self.array_len(max, 12)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.string()?;
            let at = self.pos;
            let value = match self.u32()? {
                TYPE_INT => Value::from(self.i32()?),
                TYPE_UINT => Value::from(self.u32()?),
                TYPE_LLONG => Value::from(self.i64()?),
                TYPE_ULLONG => Value::from(self.u64()?),
                // Non-finite doubles become null, as serde_json does for
                // the C backend's values.
                TYPE_DOUBLE => Value::from(self.f64()?),
                TYPE_BOOLEAN => Value::from(self.i32()? != 0),
                TYPE_STRING => Value::from(self.string()?),
                other => {
                    return Err(DecodeError::new(
                        format!("typed parameter {name:?} has unknown type {other}"),
                        at,
                    ));
                }
            };
            out.push((name, value));
        }
        Ok(out)
    }
}

// virTypedParameterType
const TYPE_INT: u32 = 1;
const TYPE_UINT: u32 = 2;
const TYPE_LLONG: u32 = 3;
const TYPE_ULLONG: u32 = 4;
const TYPE_DOUBLE: u32 = 5;
const TYPE_BOOLEAN: u32 = 6;
const TYPE_STRING: u32 = 7;

/// A typed parameter to send (e.g. a migration parameter).
#[derive(Debug, Clone, PartialEq)]
pub struct TypedParam {
    pub name: String,
    pub value: TypedValue,
}

impl TypedParam {
    pub fn string(name: &str, value: &str) -> TypedParam {
        TypedParam {
            name: name.to_string(),
            value: TypedValue::String(value.to_string()),
        }
    }

    pub fn ullong(name: &str, value: u64) -> TypedParam {
        TypedParam {
            name: name.to_string(),
            value: TypedValue::ULLong(value),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum TypedValue {
    Int(i32),
    UInt(u32),
    LLong(i64),
    ULLong(u64),
    Double(f64),
    Boolean(bool),
    String(String),
}

/// `virNetMessageType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    Call,
    Reply,
    /// An asynchronous message: an event, or a keepalive.
    Message,
    Stream,
    CallWithFds,
    ReplyWithFds,
}

impl MessageType {
    fn code(self) -> u32 {
        match self {
            MessageType::Call => 0,
            MessageType::Reply => 1,
            MessageType::Message => 2,
            MessageType::Stream => 3,
            MessageType::CallWithFds => 4,
            MessageType::ReplyWithFds => 5,
        }
    }

    fn from_code(code: u32) -> Option<MessageType> {
        Some(match code {
            0 => MessageType::Call,
            1 => MessageType::Reply,
            2 => MessageType::Message,
            3 => MessageType::Stream,
            4 => MessageType::CallWithFds,
            5 => MessageType::ReplyWithFds,
            _ => return None,
        })
    }
}

/// `virNetMessageStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageStatus {
    Ok,
    Error,
    Continue,
}

impl MessageStatus {
    fn code(self) -> u32 {
        match self {
            MessageStatus::Ok => 0,
            MessageStatus::Error => 1,
            MessageStatus::Continue => 2,
        }
    }

    fn from_code(code: u32) -> Option<MessageStatus> {
        Some(match code {
            0 => MessageStatus::Ok,
            1 => MessageStatus::Error,
            2 => MessageStatus::Continue,
            _ => return None,
        })
    }
}

/// `virNetMessageHeader`: six words ahead of every payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub program: u32,
    pub version: u32,
    pub procedure: i32,
    pub kind: MessageType,
    pub serial: u32,
    pub status: MessageStatus,
}

/// Bytes of the length word that starts every frame.
pub const LENGTH_BYTES: usize = 4;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 24;

impl Header {
    /// The whole frame: length word, header, payload.
    pub fn frame(&self, payload: &[u8]) -> Vec<u8> {
        let total = LENGTH_BYTES + HEADER_BYTES + payload.len();
        let mut e = Encoder {
            buf: Vec::with_capacity(total),
        };
        e.u32(u32::try_from(total).unwrap_or(u32::MAX))
            .u32(self.program)
            .u32(self.version)
            .i32(self.procedure)
            .u32(self.kind.code())
            .u32(self.serial)
            .u32(self.status.code());
        let mut buf = e.into_bytes();
        buf.extend_from_slice(payload);
        buf
    }

    /// Decodes the header at the start of a frame body (the bytes after
    /// the length word); returns it and the payload.
    pub fn parse(body: &[u8]) -> DecodeResult<(Header, &[u8])> {
        let mut d = Decoder::new(body);
        let program = d.u32()?;
        let version = d.u32()?;
        let procedure = d.i32()?;
        let kind_code = d.u32()?;
        let kind = MessageType::from_code(kind_code)
            .ok_or_else(|| DecodeError::new(format!("unknown message type {kind_code}"), 12))?;
        let serial = d.u32()?;
        let status_code = d.u32()?;
        let status = MessageStatus::from_code(status_code)
            .ok_or_else(|| DecodeError::new(format!("unknown message status {status_code}"), 20))?;
        Ok((
            Header {
                program,
                version,
                procedure,
                kind,
                serial,
                status,
            },
            &body[HEADER_BYTES..],
        ))
    }
}

/// Checks a frame's length word: at least a header, at most the
/// protocol's maximum message. Returns the body length to read.
pub fn body_length(length_word: [u8; LENGTH_BYTES]) -> DecodeResult<usize> {
    let total = u32::from_be_bytes(length_word) as usize;
    if total < LENGTH_BYTES + HEADER_BYTES {
        return Err(DecodeError::new(
            format!(
                "message length {total} is shorter than a message header ({} bytes)",
                LENGTH_BYTES + HEADER_BYTES
            ),
            0,
        ));
    }
    if total > limits::MESSAGE_MAX + LENGTH_BYTES {
        return Err(DecodeError::new(
            format!(
                "message length {total} exceeds the protocol's maximum of {} bytes",
                limits::MESSAGE_MAX + LENGTH_BYTES
            ),
            0,
        ));
    }
    Ok(total - LENGTH_BYTES)
}

/// `remote_error` / `virNetMessageError`: what the daemon says went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// `virErrorNumber`.
    pub code: i32,
    /// `virErrorDomain`: which part of libvirt raised it.
    pub domain: i32,
    pub message: String,
}

impl RemoteError {
    pub fn decode(d: &mut Decoder) -> DecodeResult<RemoteError> {
        let code = d.i32()?;
        let domain = d.i32()?;
        let message = d.opt_string()?;
        let _level = d.i32()?;
        if d.pointer()? {
            decode_domain(d)?;
        }
        for _ in 0..3 {
            d.opt_string()?;
        }
        let _int1 = d.i32()?;
        let _int2 = d.i32()?;
        if d.pointer()? {
            // remote_nonnull_network: name and UUID.
            d.string()?;
            d.fixed_opaque(UUID_BYTES)?;
        }
        Ok(RemoteError {
            code,
            domain,
            message: message.unwrap_or_else(|| format!("libvirt error {code} without a message")),
        })
    }
}

pub const UUID_BYTES: usize = 16;

/// `remote_nonnull_domain`: how the protocol names a domain in calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainRef {
    pub name: String,
    pub uuid: [u8; UUID_BYTES],
    /// The running domain's id, -1 when inactive.
    pub id: i32,
}

impl DomainRef {
    pub fn encode(&self, e: &mut Encoder) {
        e.string(&self.name).fixed_opaque(&self.uuid).i32(self.id);
    }

    /// The UUID in its usual text form.
    pub fn uuid_string(&self) -> String {
        let hex: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }
}

pub fn decode_domain(d: &mut Decoder) -> DecodeResult<DomainRef> {
    let name = d.string()?;
    let mut uuid = [0u8; UUID_BYTES];
    uuid.copy_from_slice(d.fixed_opaque(UUID_BYTES)?);
    let id = d.i32()?;
    Ok(DomainRef { name, uuid, id })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn primitives_round_trip_big_endian() {
        let mut e = Encoder::new();
        e.u32(0x0102_0304)
            .i32(-2)
            .u64(0x0102_0304_0506_0708)
            .i64(-3)
            .f64(1.5)
            .bool(true);
        let bytes = e.into_bytes();
        assert_eq!(&bytes[0..4], &[1, 2, 3, 4]);
        assert_eq!(&bytes[4..8], &[0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(&bytes[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut d = Decoder::new(&bytes);
        assert_eq!(d.u32().unwrap(), 0x0102_0304);
        assert_eq!(d.i32().unwrap(), -2);
        assert_eq!(d.u64().unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(d.i64().unwrap(), -3);
        assert_eq!(d.f64().unwrap(), 1.5);
        assert!(d.bool().unwrap());
        d.finish().unwrap();
    }

    #[test]
    fn strings_are_length_prefixed_and_padded() {
        let mut e = Encoder::new();
        e.string("test:///default")
            .opt_string(None)
            .opt_string(Some("ab"));
        let bytes = e.into_bytes();
        // 4 + 15 + 1 pad, then a null pointer, then pointer + 4 + 2 + 2 pad.
        assert_eq!(bytes.len(), 20 + 4 + 12);
        assert_eq!(&bytes[0..4], &[0, 0, 0, 15]);
        assert_eq!(bytes[19], 0);
        let mut d = Decoder::new(&bytes);
        assert_eq!(d.string().unwrap(), "test:///default");
        assert_eq!(d.opt_string().unwrap(), None);
        assert_eq!(d.opt_string().unwrap().as_deref(), Some("ab"));
        d.finish().unwrap();
    }

    #[test]
    fn the_bytes_virsh_sends_to_open_a_connection() {
        // REMOTE_PROC_CONNECT_OPEN, serial 2, name "test:///default",
        // flags 0: captured from virsh talking to libvirtd.
        let mut payload = Encoder::new();
        payload.opt_string(Some("test:///default")).u32(0);
        let frame = Header {
            program: 0x2000_8086,
            version: 1,
            procedure: 1,
            kind: MessageType::Call,
            serial: 2,
            status: MessageStatus::Ok,
        }
        .frame(&payload.into_bytes());
        let captured: Vec<u8> = [
            "00000038 20008086 00000001 00000001 00000000 00000002 00000000",
            "00000001 0000000f 74657374 3a2f2f2f 64656661 756c7400 00000000",
        ]
        .join(" ")
        .split_whitespace()
        .flat_map(|w| (0..4).map(move |i| u8::from_str_radix(&w[i * 2..i * 2 + 2], 16).unwrap()))
        .collect();
        assert_eq!(frame, captured);
        let body = body_length([frame[0], frame[1], frame[2], frame[3]]).unwrap();
        assert_eq!(body, frame.len() - 4);
        let (header, rest) = Header::parse(&frame[4..]).unwrap();
        assert_eq!(header.procedure, 1);
        assert_eq!(header.serial, 2);
        assert_eq!(header.kind, MessageType::Call);
        assert_eq!(rest.len(), 28);
    }

    #[test]
    fn lengths_outside_the_protocol_are_refused() {
        let err = body_length(27u32.to_be_bytes()).unwrap_err();
        assert!(err.what.contains("shorter than a message header"), "{err}");
        let err = body_length(u32::MAX.to_be_bytes()).unwrap_err();
        assert!(err.what.contains("exceeds the protocol's maximum"), "{err}");
        assert_eq!(body_length(28u32.to_be_bytes()).unwrap(), 24);
    }

    #[test]
    fn bad_headers_name_the_bad_field() {
        let mut e = Encoder::new();
        e.u32(0x2000_8086).u32(1).i32(1).u32(9).u32(0).u32(0);
        let err = Header::parse(&e.into_bytes()).unwrap_err();
        assert!(err.what.contains("unknown message type 9"), "{err}");
        let mut e = Encoder::new();
        e.u32(0x2000_8086).u32(1).i32(1).u32(1).u32(0).u32(7);
        let err = Header::parse(&e.into_bytes()).unwrap_err();
        assert!(err.what.contains("unknown message status 7"), "{err}");
        let err = Header::parse(&[0, 0, 0]).unwrap_err();
        assert!(err.what.contains("truncated"), "{err}");
    }

    #[test]
    fn truncated_and_oversized_items_are_errors_not_panics() {
        // A string claiming 4 GiB with 4 bytes behind it.
        let mut e = Encoder::new();
        e.u32(u32::MAX).u32(0);
        let bytes = e.into_bytes();
        let err = Decoder::new(&bytes).string().unwrap_err();
        assert!(err.what.contains("exceeds the protocol's limit"), "{err}");
        // A string claiming more bytes than are left.
        let mut e = Encoder::new();
        e.u32(100).u32(0);
        let bytes = e.into_bytes();
        let err = Decoder::new(&bytes).string().unwrap_err();
        assert!(err.what.contains("truncated"), "{err}");
        // An array claiming a million parameters in 8 bytes: refused
        // before anything is allocated.
        let mut e = Encoder::new();
        e.u32(1_000_000).u32(0);
        let bytes = e.into_bytes();
        assert!(Decoder::new(&bytes).typed_params(1 << 30).is_err());
        // Every prefix of a valid payload fails cleanly.
        let mut e = Encoder::new();
        e.typed_params(&[
            TypedParam::string("migrate_uri", "tcp://127.0.0.1"),
            TypedParam::ullong("bandwidth", 64),
        ]);
        let full = e.into_bytes();
        for cut in 0..full.len() {
            assert!(
                Decoder::new(&full[..cut]).typed_params(64).is_err(),
                "{cut}"
            );
        }
        assert_eq!(Decoder::new(&full).typed_params(64).unwrap().len(), 2);
        // Garbage: never a panic.
        let mut seed = 0x1234_5678u32;
        for len in 0..200 {
            let garbage: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 16).to_le_bytes()[0]
                })
                .collect();
            let _ = Decoder::new(&garbage).typed_params(64);
            let _ = RemoteError::decode(&mut Decoder::new(&garbage));
            let _ = Header::parse(&garbage);
        }
    }

    #[test]
    fn padding_and_markers_must_be_canonical() {
        let mut e = Encoder::new();
        e.u32(1).u32(0x6100_0001);
        let bytes = e.into_bytes();
        let err = Decoder::new(&bytes).string().unwrap_err();
        assert!(err.what.contains("padding"), "{err}");
        let mut e = Encoder::new();
        e.u32(2);
        let bytes = e.into_bytes();
        assert!(Decoder::new(&bytes).opt_string().is_err());
        assert!(Decoder::new(&bytes).bool().is_err());
        let mut d = Decoder::new(&[0, 0, 0, 1, 9]);
        d.u32().unwrap();
        assert!(d.finish().unwrap_err().what.contains("1 unexpected bytes"));
    }

    #[test]
    fn typed_params_give_the_json_types_of_the_c_library() {
        let mut e = Encoder::new();
        e.typed_params(&[
            TypedParam {
                name: "state.state".into(),
                value: TypedValue::Int(1),
            },
            TypedParam {
                name: "vcpu.current".into(),
                value: TypedValue::UInt(2),
            },
            TypedParam {
                name: "l".into(),
                value: TypedValue::LLong(-5),
            },
            TypedParam::ullong("cpu.time", 123_456_789_012),
            TypedParam {
                name: "d".into(),
                value: TypedValue::Double(0.25),
            },
            TypedParam {
                name: "nan".into(),
                value: TypedValue::Double(f64::NAN),
            },
            TypedParam {
                name: "b".into(),
                value: TypedValue::Boolean(true),
            },
            TypedParam::string("os.id", "debian"),
        ]);
        let bytes = e.into_bytes();
        let mut d = Decoder::new(&bytes);
        let stats = d.typed_params(64).unwrap();
        d.finish().unwrap();
        let as_json: Vec<(String, Value)> = stats;
        assert_eq!(
            as_json,
            vec![
                ("state.state".to_string(), json!(1)),
                ("vcpu.current".to_string(), json!(2u32)),
                ("l".to_string(), json!(-5i64)),
                ("cpu.time".to_string(), json!(123_456_789_012u64)),
                ("d".to_string(), json!(0.25)),
                ("nan".to_string(), Value::Null),
                ("b".to_string(), json!(true)),
                ("os.id".to_string(), json!("debian")),
            ]
        );
        // A type this client does not know is an error naming it.
        let mut e = Encoder::new();
        e.u32(1).string("x").u32(42).u32(0);
        let bytes = e.into_bytes();
        let err = Decoder::new(&bytes).typed_params(64).unwrap_err();
        assert!(err.what.contains("\"x\" has unknown type 42"), "{err}");
    }

    #[test]
    fn remote_errors_decode_with_every_optional_part() {
        let mut e = Encoder::new();
        e.i32(42)
            .i32(10)
            .opt_string(Some("Domain not found: no domain with matching name 'x'"));
        e.i32(2).u32(1);
        DomainRef {
            name: "x".into(),
            uuid: [7; 16],
            id: -1,
        }
        .encode(&mut e);
        e.opt_string(Some("a"))
            .opt_string(None)
            .opt_string(None)
            .i32(0)
            .i32(0)
            .u32(1)
            .string("net")
            .fixed_opaque(&[0; 16]);
        let bytes = e.into_bytes();
        let mut d = Decoder::new(&bytes);
        let err = RemoteError::decode(&mut d).unwrap();
        d.finish().unwrap();
        assert_eq!(err.code, 42);
        assert_eq!(err.domain, 10);
        assert!(err.message.starts_with("Domain not found"));
    }

    #[test]
    fn uuids_print_like_libvirt() {
        let dom = DomainRef {
            name: "test".into(),
            uuid: [
                0x66, 0x95, 0xeb, 0x01, 0xf6, 0xa4, 0x83, 0x04, 0x79, 0xaa, 0x97, 0xf2, 0x50, 0x2e,
                0x19, 0x3f,
            ],
            id: 1,
        };
        assert_eq!(dom.uuid_string(), "6695eb01-f6a4-8304-79aa-97f2502e193f");
        let mut e = Encoder::new();
        dom.encode(&mut e);
        let bytes = e.into_bytes();
        assert_eq!(bytes.len(), 4 + 4 + 16 + 4);
        assert_eq!(decode_domain(&mut Decoder::new(&bytes)).unwrap(), dom);
    }
}
