//! Protocol Buffers' wire format, the part KubeVirt's launcher protocol
//! uses (<https://protobuf.dev/programming-guides/encoding/>).
//!
//! A message is a sequence of fields, each a tag (a varint: the field
//! number shifted left by three, or'ed with the wire type) and a value:
//! a varint (0), eight little-endian bytes (1), a varint length and that
//! many bytes (2: strings, bytes, nested messages, packed scalars), or
//! four little-endian bytes (5). Groups (3 and 4) are proto2 only; no
//! proto3 peer sends them, so they are an error here.
//!
//! Reading never panics and never allocates from a declared length: each
//! length is checked against the bytes that are actually there.

use std::fmt;

/// A varint is at most ten bytes: 64 bits, seven per byte.
pub const MAX_VARINT_LEN: usize = 10;
/// The largest field number protobuf allows (2^29 - 1).
pub const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

/// How a field's value is laid out: the low three bits of its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireType {
    Varint = 0,
    Fixed64 = 1,
    /// Length-delimited.
    Len = 2,
    Fixed32 = 5,
}

impl WireType {
    fn name(self) -> &'static str {
        match self {
            WireType::Varint => "varint",
            WireType::Fixed64 => "fixed64",
            WireType::Len => "length-delimited",
            WireType::Fixed32 => "fixed32",
        }
    }
}

/// One field's value as it is on the wire; bytes borrow from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
}

impl Value<'_> {
    pub fn wire_type(&self) -> WireType {
        match self {
            Value::Varint(_) => WireType::Varint,
            Value::Fixed64(_) => WireType::Fixed64,
            Value::Len(_) => WireType::Len,
            Value::Fixed32(_) => WireType::Fixed32,
        }
    }
}

/// What is wrong with the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// The input ends inside a tag, a varint or a fixed-width value.
    Truncated,
    /// A varint longer than ten bytes, or one that does not fit 64 bits.
    VarintOverflow,
    /// A length-delimited value declares more bytes than are left.
    LengthPastEnd { length: u64, left: usize },
    /// Field number 0, or one above protobuf's maximum.
    InvalidFieldNumber(u64),
    /// Wire type 3 or 4 (proto2 groups), 6 or 7 (undefined).
    UnsupportedWireType(u8),
    /// A known field arrived with another wire type than its .proto type has.
    WrongWireType { expected: WireType, found: WireType },
    /// A `string` field that is not UTF-8 (proto3 requires it).
    InvalidUtf8,
    /// Messages nested deeper than the limit (`message::MAX_DEPTH`).
    TooDeep,
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeErrorKind::Truncated => write!(f, "truncated input"),
            DecodeErrorKind::VarintOverflow => write!(f, "varint longer than 64 bits"),
            DecodeErrorKind::LengthPastEnd { length, left } => {
                write!(f, "length {length} past the end ({left} left)")
            }
            DecodeErrorKind::InvalidFieldNumber(n) => write!(f, "invalid field number {n}"),
            DecodeErrorKind::UnsupportedWireType(t) => write!(f, "unsupported wire type {t}"),
            DecodeErrorKind::WrongWireType { expected, found } => write!(
                f,
                "wire type {} where the .proto says {}",
                found.name(),
                expected.name()
            ),
            DecodeErrorKind::InvalidUtf8 => write!(f, "string is not valid UTF-8"),
            DecodeErrorKind::TooDeep => write!(f, "messages nested too deeply"),
        }
    }
}

/// Bytes that are not a valid message: what is wrong, and where, as the
/// outermost message's name and the path of .proto field names down to
/// the bad value (`VMIRequest.options.DisksInfo.value.actualSize`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub kind: DecodeErrorKind,
    message: &'static str,
    fields: Vec<&'static str>,
}

impl DecodeError {
    /// The outermost message the error was seen in ("" if none yet).
    pub fn message(&self) -> &'static str {
        self.message
    }

    /// The .proto field names from the outermost message to the bad value.
    pub fn fields(&self) -> &[&'static str] {
        &self.fields
    }

    /// The error as seen from message `name` (an enclosing message calls
    /// this again with its own name).
    pub fn in_message(mut self, name: &'static str) -> Self {
        self.message = name;
        self
    }

    /// The error as seen from the field `name` that holds the bad value.
    pub fn at_field(mut self, name: &'static str) -> Self {
        self.fields.insert(0, name);
        self
    }
}

impl From<DecodeErrorKind> for DecodeError {
    fn from(kind: DecodeErrorKind) -> Self {
        DecodeError {
            kind,
            message: "",
            fields: Vec::new(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "protobuf")?;
        if !self.message.is_empty() {
            write!(f, " {}", self.message)?;
        }
        for field in &self.fields {
            write!(f, ".{field}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl std::error::Error for DecodeError {}

/// Reads the varint at `*pos`, moving `pos` past it. As Go's protowire,
/// accepts non-minimal encodings and rejects a tenth byte above 1.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, DecodeErrorKind> {
    let rest = buf.get(*pos..).unwrap_or_default();
    let mut value = 0u64;
    for (i, &byte) in rest.iter().take(MAX_VARINT_LEN).enumerate() {
        if i == MAX_VARINT_LEN - 1 && byte > 1 {
            return Err(DecodeErrorKind::VarintOverflow);
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *pos += i + 1;
            return Ok(value);
        }
    }
    // Ten bytes that all say "more" ended above at the tenth.
    Err(DecodeErrorKind::Truncated)
}

/// The fields of one message's bytes, in order: `(field number, value)`.
/// After an error it yields nothing more.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeErrorKind> {
        let end = self
            .pos
            .checked_add(len)
            .ok_or(DecodeErrorKind::Truncated)?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or(DecodeErrorKind::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn read_field(&mut self) -> Result<(u32, Value<'a>), DecodeErrorKind> {
        let tag = read_varint(self.buf, &mut self.pos)?;
        let number = tag >> 3;
        if number == 0 || number > MAX_FIELD_NUMBER {
            return Err(DecodeErrorKind::InvalidFieldNumber(number));
        }
        let number =
            u32::try_from(number).map_err(|_| DecodeErrorKind::InvalidFieldNumber(number))?;
        let value = match tag & 7 {
            0 => Value::Varint(read_varint(self.buf, &mut self.pos)?),
            1 => {
                let bytes: [u8; 8] = self
                    .take(8)?
                    .try_into()
                    .map_err(|_| DecodeErrorKind::Truncated)?;
                Value::Fixed64(u64::from_le_bytes(bytes))
            }
            2 => {
                let length = read_varint(self.buf, &mut self.pos)?;
                let left = self.buf.len().saturating_sub(self.pos);
                match usize::try_from(length) {
                    Ok(len) if len <= left => Value::Len(self.take(len)?),
                    _ => return Err(DecodeErrorKind::LengthPastEnd { length, left }),
                }
            }
            5 => {
                let bytes: [u8; 4] = self
                    .take(4)?
                    .try_into()
                    .map_err(|_| DecodeErrorKind::Truncated)?;
                Value::Fixed32(u32::from_le_bytes(bytes))
            }
            other => {
                let other = u8::try_from(other).unwrap_or(u8::MAX);
                return Err(DecodeErrorKind::UnsupportedWireType(other));
            }
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<(u32, Value<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let field = self.read_field();
        if field.is_err() {
            self.pos = self.buf.len();
        }
        Some(field.map_err(DecodeError::from))
    }
}

/// Builds a message's bytes. Writes what it is told; leaving out proto3's
/// default values is the caller's (`message::FieldValue`) part.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.buf.push(value.to_le_bytes()[0] | 0x80);
            value >>= 7;
        }
        self.buf.push(value.to_le_bytes()[0]);
    }

    pub fn tag(&mut self, number: u32, wire_type: WireType) {
        self.varint(u64::from(number) << 3 | wire_type as u64);
    }

    /// A varint field, written even when zero.
    pub fn varint_field(&mut self, number: u32, value: u64) {
        self.tag(number, WireType::Varint);
        self.varint(value);
    }

    /// A length-delimited field, written even when empty.
    pub fn len_field(&mut self, number: u32, bytes: &[u8]) {
        self.tag(number, WireType::Len);
        self.varint(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(bytes: &[u8]) -> Result<u64, DecodeErrorKind> {
        let mut pos = 0;
        let value = read_varint(bytes, &mut pos)?;
        assert_eq!(pos, bytes.len(), "{bytes:02x?} read only {pos} bytes");
        Ok(value)
    }

    fn written(value: u64) -> Vec<u8> {
        let mut w = Writer::new();
        w.varint(value);
        w.into_bytes()
    }

    fn fields(bytes: &[u8]) -> Result<Vec<(u32, Value<'_>)>, DecodeError> {
        Reader::new(bytes).collect()
    }

    #[test]
    fn varints_round_trip_at_every_length() {
        // The spec's example: 150 is 96 01.
        assert_eq!(written(150), [0x96, 0x01]);
        assert_eq!(written(0), [0]);
        assert_eq!(written(u64::MAX).len(), MAX_VARINT_LEN);
        for shift in 0..64 {
            for value in [1u64 << shift, (1u64 << shift) - 1, (1u64 << shift) + 1] {
                assert_eq!(varint(&written(value)), Ok(value), "{value}");
            }
        }
        // Non-minimal encodings are accepted, as Go's reader does.
        assert_eq!(varint(&[0x80, 0x00]), Ok(0));
    }

    #[test]
    fn bad_varints_are_errors() {
        assert_eq!(varint(&[]), Err(DecodeErrorKind::Truncated));
        assert_eq!(varint(&[0x80]), Err(DecodeErrorKind::Truncated));
        assert_eq!(varint(&[0xff; 9]), Err(DecodeErrorKind::Truncated));
        // Ten bytes whose last carries more than bit 63.
        let mut too_big = [0xff; 10];
        too_big[9] = 0x02;
        assert_eq!(varint(&too_big), Err(DecodeErrorKind::VarintOverflow));
        // Eleven bytes: the tenth still says "more".
        let mut eleven = [0x80; 11];
        eleven[10] = 0;
        assert_eq!(varint(&eleven), Err(DecodeErrorKind::VarintOverflow));
        let mut max = [0xff; 10];
        max[9] = 0x01;
        assert_eq!(varint(&max), Ok(u64::MAX));
    }

    #[test]
    fn the_reader_yields_each_wire_type() {
        let bytes = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x11, 1, 0, 0, 0, 0, 0, 0, 0x80, // 2: fixed64
            0x1a, 0x02, b'h', b'i', // 3: "hi"
            0x25, 0x78, 0x56, 0x34, 0x12, // 4: fixed32
            0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00, // 536870911 (the maximum): varint 0
        ];
        assert_eq!(
            fields(&bytes).unwrap(),
            [
                (1, Value::Varint(150)),
                (2, Value::Fixed64(0x8000_0000_0000_0001)),
                (3, Value::Len(b"hi")),
                (4, Value::Fixed32(0x1234_5678)),
                (536_870_911, Value::Varint(0)),
            ]
        );
        assert_eq!(fields(&[]).unwrap(), []);
    }

    #[test]
    fn malformed_fields_are_errors_and_stop_the_reader() {
        let kind = |bytes: &[u8]| fields(bytes).unwrap_err().kind;
        assert_eq!(kind(&[0x08]), DecodeErrorKind::Truncated);
        assert_eq!(kind(&[0x11, 1, 2, 3]), DecodeErrorKind::Truncated);
        assert_eq!(kind(&[0x25, 1]), DecodeErrorKind::Truncated);
        assert_eq!(
            kind(&[0x0a, 0x05, b'a']),
            DecodeErrorKind::LengthPastEnd { length: 5, left: 1 }
        );
        // A declared length near 2^64 is an error, not an allocation.
        let mut huge = vec![0x0a];
        huge.extend([0xff; 9]);
        huge.push(0x01);
        assert_eq!(
            kind(&huge),
            DecodeErrorKind::LengthPastEnd {
                length: u64::MAX,
                left: 0
            }
        );
        assert_eq!(kind(&[0x00, 0x00]), DecodeErrorKind::InvalidFieldNumber(0));
        assert_eq!(
            kind(&[0x80, 0x80, 0x80, 0x80, 0x10, 0x00]),
            DecodeErrorKind::InvalidFieldNumber(1 << 29)
        );
        assert_eq!(kind(&[0x0b]), DecodeErrorKind::UnsupportedWireType(3));
        assert_eq!(kind(&[0x0c]), DecodeErrorKind::UnsupportedWireType(4));
        assert_eq!(kind(&[0x0e]), DecodeErrorKind::UnsupportedWireType(6));
        assert_eq!(kind(&[0x0f]), DecodeErrorKind::UnsupportedWireType(7));
        // A good field, then a bad one: the error, then nothing.
        let mut reader = Reader::new(&[0x08, 0x01, 0x0f, 0x08, 0x02]);
        assert_eq!(reader.next(), Some(Ok((1, Value::Varint(1)))));
        assert!(matches!(reader.next(), Some(Err(_))));
        assert_eq!(reader.next(), None);
    }

    #[test]
    fn the_writer_writes_tags_and_lengths() {
        let mut w = Writer::new();
        w.varint_field(1, 0);
        w.len_field(2, b"");
        w.len_field(16, b"ab");
        // Field 16 needs a two-byte tag: (16 << 3) | 2 = 130 = 82 01.
        assert_eq!(
            w.into_bytes(),
            [0x08, 0x00, 0x12, 0x00, 0x82, 0x01, 0x02, b'a', b'b']
        );
    }

    #[test]
    fn errors_name_the_message_and_the_field_path() {
        let error = DecodeError::from(DecodeErrorKind::InvalidUtf8)
            .at_field("manufacturer")
            .in_message("SMBios")
            .at_field("VirtualMachineSMBios")
            .in_message("VirtualMachineOptions")
            .at_field("options")
            .in_message("VMIRequest");
        assert_eq!(
            error.to_string(),
            "protobuf VMIRequest.options.VirtualMachineSMBios.manufacturer: \
             string is not valid UTF-8"
        );
        assert_eq!(error.message(), "VMIRequest");
        let bare = DecodeError::from(DecodeErrorKind::Truncated);
        assert_eq!(bare.to_string(), "protobuf: truncated input");
    }
}
