//! Messages as Rust structs: the [`Message`] trait, how each field type is
//! read and written ([`FieldValue`]), and `proto_message!`, which declares
//! a struct and its field numbers in one place.
//!
//! The Rust type of a field says its .proto type: `String` string,
//! `Vec<u8>` bytes, `bool`, `u32` uint32, `u64` uint64, `i32` int32, `i64`
//! int64, `Option<M>` a message, `Vec<M>` / `Vec<String>` / `Vec<u32>`
//! repeated, `BTreeMap<String, V>` a map. proto3's rules: a scalar equal to
//! its default is not written; the last value of a scalar wins; a message
//! seen twice is merged; repeated scalars are written packed and read
//! packed or not; a map is repeated entries `{key = 1; value = 2}`, each
//! written with both (as Go does), the last entry for a key wins. Unknown
//! fields are skipped.

use std::collections::BTreeMap;

use super::wire::{DecodeError, DecodeErrorKind, Reader, Value, WireType, Writer, read_varint};

/// How deep messages may nest. KubeVirt's deepest is five levels
/// (VMIRequest, options, topology, numa_cells, cpus); the limit keeps a
/// recursive message, should one be added, from exhausting the stack.
pub const MAX_DEPTH: u32 = 32;

/// A protobuf message. `proto_message!` implements it.
pub trait Message: Default {
    /// The message's name in the .proto, for errors.
    const NAME: &'static str;

    /// Takes one field read from the wire; unknown numbers are ignored.
    fn merge_field(&mut self, number: u32, value: Value<'_>, depth: u32)
    -> Result<(), DecodeError>;

    /// Writes every field that is not at its default.
    fn write_fields(&self, w: &mut Writer);

    /// Reads `bytes` into `self`, a message nested `depth` levels deep.
    fn merge(&mut self, bytes: &[u8], depth: u32) -> Result<(), DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::from(DecodeErrorKind::TooDeep).in_message(Self::NAME));
        }
        for field in Reader::new(bytes) {
            let (number, value) = field.map_err(|e| e.in_message(Self::NAME))?;
            self.merge_field(number, value, depth)?;
        }
        Ok(())
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut message = Self::default();
        message.merge(bytes, 0)?;
        Ok(message)
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.write_fields(&mut w);
        w.into_bytes()
    }

    /// A value with every field set, none to its default (tests).
    #[cfg(test)]
    fn sample(seed: u32) -> Self;

    /// `(number, .proto name, .proto type)` of each field (tests).
    #[cfg(test)]
    fn schema() -> Vec<(u32, &'static str, String)>;
}

/// A field's Rust type: how it takes a value from the wire and writes
/// itself under a field number.
pub trait FieldValue: Default {
    fn merge_value(&mut self, value: Value<'_>, depth: u32) -> Result<(), DecodeError>;
    fn write(&self, number: u32, w: &mut Writer);

    #[cfg(test)]
    fn sample(seed: u32) -> Self;
    #[cfg(test)]
    fn proto_type() -> String;
}

fn wrong_wire_type(expected: WireType, found: Value<'_>) -> DecodeError {
    DecodeError::from(DecodeErrorKind::WrongWireType {
        expected,
        found: found.wire_type(),
    })
}

fn expect_varint(value: Value<'_>) -> Result<u64, DecodeError> {
    match value {
        Value::Varint(v) => Ok(v),
        other => Err(wrong_wire_type(WireType::Varint, other)),
    }
}

fn expect_len(value: Value<'_>) -> Result<&[u8], DecodeError> {
    match value {
        Value::Len(bytes) => Ok(bytes),
        other => Err(wrong_wire_type(WireType::Len, other)),
    }
}

/// protobuf reads a 32-bit field from the varint's low 32 bits (Go's
/// `uint32(v)`, `int32(v)`), and writes an int32 sign-extended to 64 bits;
/// these casts are that rule, not an accident.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]
mod casts {
    pub fn to_u32(v: u64) -> u32 {
        v as u32
    }
    pub fn to_i32(v: u64) -> i32 {
        v as u32 as i32
    }
    pub fn to_i64(v: u64) -> i64 {
        v as i64
    }
    pub fn from_i32(v: i32) -> u64 {
        i64::from(v) as u64
    }
    pub fn from_i64(v: i64) -> u64 {
        v as u64
    }
}

macro_rules! varint_scalar {
    ($ty:ty, $proto:literal, $read:expr, $write:expr, $sample:expr) => {
        impl FieldValue for $ty {
            fn merge_value(&mut self, value: Value<'_>, _depth: u32) -> Result<(), DecodeError> {
                *self = $read(expect_varint(value)?);
                Ok(())
            }

            fn write(&self, number: u32, w: &mut Writer) {
                if *self != <$ty>::default() {
                    w.varint_field(number, $write(*self));
                }
            }

            #[cfg(test)]
            fn sample(seed: u32) -> Self {
                $sample(seed)
            }

            #[cfg(test)]
            fn proto_type() -> String {
                $proto.to_string()
            }
        }
    };
}

// The samples (tests) are never the default, and negative for the signed
// types: an int32 -1 takes ten bytes on the wire.
varint_scalar!(bool, "bool", |v| v != 0, u64::from, |_| true);
varint_scalar!(u32, "uint32", casts::to_u32, u64::from, |s| s + 1);
varint_scalar!(u64, "uint64", |v| v, |v| v, |s| u64::from(s) << 33);
varint_scalar!(
    i32,
    "int32",
    casts::to_i32,
    casts::from_i32,
    |s| -i32::from(s > 0) - 1
);
varint_scalar!(
    i64,
    "int64",
    casts::to_i64,
    casts::from_i64,
    |s| -i64::from(s) << 33
);

fn utf8(bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeErrorKind::InvalidUtf8.into())
}

impl FieldValue for String {
    fn merge_value(&mut self, value: Value<'_>, _depth: u32) -> Result<(), DecodeError> {
        *self = utf8(expect_len(value)?)?;
        Ok(())
    }

    fn write(&self, number: u32, w: &mut Writer) {
        if !self.is_empty() {
            w.len_field(number, self.as_bytes());
        }
    }

    #[cfg(test)]
    fn sample(seed: u32) -> Self {
        format!("s{seed}-é")
    }

    #[cfg(test)]
    fn proto_type() -> String {
        "string".to_string()
    }
}

/// `bytes`.
impl FieldValue for Vec<u8> {
    fn merge_value(&mut self, value: Value<'_>, _depth: u32) -> Result<(), DecodeError> {
        *self = expect_len(value)?.to_vec();
        Ok(())
    }

    fn write(&self, number: u32, w: &mut Writer) {
        if !self.is_empty() {
            w.len_field(number, self);
        }
    }

    #[cfg(test)]
    fn sample(seed: u32) -> Self {
        vec![0, 0xff, seed.to_le_bytes()[0]]
    }

    #[cfg(test)]
    fn proto_type() -> String {
        "bytes".to_string()
    }
}

/// `repeated uint32`: written packed, read packed or one by one.
impl FieldValue for Vec<u32> {
    fn merge_value(&mut self, value: Value<'_>, _depth: u32) -> Result<(), DecodeError> {
        match value {
            Value::Varint(v) => self.push(casts::to_u32(v)),
            Value::Len(packed) => {
                let mut pos = 0;
                while pos < packed.len() {
                    self.push(casts::to_u32(read_varint(packed, &mut pos)?));
                }
            }
            other => return Err(wrong_wire_type(WireType::Varint, other)),
        }
        Ok(())
    }

    fn write(&self, number: u32, w: &mut Writer) {
        if !self.is_empty() {
            let mut packed = Writer::new();
            for &v in self {
                packed.varint(u64::from(v));
            }
            w.len_field(number, &packed.into_bytes());
        }
    }

    #[cfg(test)]
    fn sample(seed: u32) -> Self {
        vec![0, seed, 300, u32::MAX]
    }

    #[cfg(test)]
    fn proto_type() -> String {
        "repeated uint32".to_string()
    }
}

/// `repeated string`: every element is written, empty ones too.
impl FieldValue for Vec<String> {
    fn merge_value(&mut self, value: Value<'_>, _depth: u32) -> Result<(), DecodeError> {
        self.push(utf8(expect_len(value)?)?);
        Ok(())
    }

    fn write(&self, number: u32, w: &mut Writer) {
        for s in self {
            w.len_field(number, s.as_bytes());
        }
    }

    #[cfg(test)]
    fn sample(seed: u32) -> Self {
        vec![String::new(), format!("v{seed}")]
    }

    #[cfg(test)]
    fn proto_type() -> String {
        "repeated string".to_string()
    }
}

/// A singular message field: absent is `None`, present and empty is
/// `Some(default)` (written as a zero-length value).
impl<M: Message> FieldValue for Option<M> {
    fn merge_value(&mut self, value: Value<'_>, depth: u32) -> Result<(), DecodeError> {
        let bytes = expect_len(value)?;
        self.get_or_insert_with(M::default).merge(bytes, depth + 1)
    }

    fn write(&self, number: u32, w: &mut Writer) {
        if let Some(message) = self {
            w.len_field(number, &message.encode());
        }
    }

    #[cfg(test)]
    fn sample(seed: u32) -> Self {
        Some(M::sample(seed))
    }

    #[cfg(test)]
    fn proto_type() -> String {
        M::NAME.to_string()
    }
}

impl<M: Message> FieldValue for Vec<M> {
    fn merge_value(&mut self, value: Value<'_>, depth: u32) -> Result<(), DecodeError> {
        let mut message = M::default();
        message.merge(expect_len(value)?, depth + 1)?;
        self.push(message);
        Ok(())
    }

    fn write(&self, number: u32, w: &mut Writer) {
        for message in self {
            w.len_field(number, &message.encode());
        }
    }

    #[cfg(test)]
    fn sample(seed: u32) -> Self {
        vec![M::sample(seed), M::default()]
    }

    #[cfg(test)]
    fn proto_type() -> String {
        format!("repeated {}", M::NAME)
    }
}

/// A map's value type: written even when at its default, inside an entry.
pub trait MapValue: Default {
    fn merge_map_value(&mut self, value: Value<'_>, depth: u32) -> Result<(), DecodeError>;
    fn write_map_value(&self, number: u32, w: &mut Writer);

    #[cfg(test)]
    fn sample_map_value(seed: u32) -> Self;
    #[cfg(test)]
    fn map_value_type() -> String;
}

impl MapValue for String {
    fn merge_map_value(&mut self, value: Value<'_>, depth: u32) -> Result<(), DecodeError> {
        FieldValue::merge_value(self, value, depth)
    }

    fn write_map_value(&self, number: u32, w: &mut Writer) {
        w.len_field(number, self.as_bytes());
    }

    #[cfg(test)]
    fn sample_map_value(seed: u32) -> Self {
        <String as FieldValue>::sample(seed)
    }

    #[cfg(test)]
    fn map_value_type() -> String {
        "string".to_string()
    }
}

impl<M: Message> MapValue for M {
    fn merge_map_value(&mut self, value: Value<'_>, depth: u32) -> Result<(), DecodeError> {
        self.merge(expect_len(value)?, depth + 1)
    }

    fn write_map_value(&self, number: u32, w: &mut Writer) {
        w.len_field(number, &self.encode());
    }

    #[cfg(test)]
    fn sample_map_value(seed: u32) -> Self {
        M::sample(seed)
    }

    #[cfg(test)]
    fn map_value_type() -> String {
        M::NAME.to_string()
    }
}

/// `map<string, V>`: one entry message `{string key = 1; V value = 2}` per
/// key.
impl<V: MapValue> FieldValue for BTreeMap<String, V> {
    fn merge_value(&mut self, value: Value<'_>, depth: u32) -> Result<(), DecodeError> {
        let entry = expect_len(value)?;
        if depth + 1 > MAX_DEPTH {
            return Err(DecodeErrorKind::TooDeep.into());
        }
        let mut key = String::new();
        let mut map_value = V::default();
        for field in Reader::new(entry) {
            match field? {
                (1, value) => FieldValue::merge_value(&mut key, value, depth + 1)
                    .map_err(|e| e.at_field("key"))?,
                (2, value) => map_value
                    .merge_map_value(value, depth + 1)
                    .map_err(|e| e.at_field("value"))?,
                _ => {}
            }
        }
        self.insert(key, map_value);
        Ok(())
    }

    fn write(&self, number: u32, w: &mut Writer) {
        for (key, value) in self {
            let mut entry = Writer::new();
            entry.len_field(1, key.as_bytes());
            value.write_map_value(2, &mut entry);
            w.len_field(number, &entry.into_bytes());
        }
    }

    #[cfg(test)]
    fn sample(seed: u32) -> Self {
        BTreeMap::from([
            (String::new(), V::default()),
            (format!("k{seed}"), V::sample_map_value(seed)),
        ])
    }

    #[cfg(test)]
    fn proto_type() -> String {
        format!("map<string,{}>", V::map_value_type())
    }
}

/// Declares messages: for each, a struct with public fields (derived
/// `Debug, Clone, Default, PartialEq`), its [`Message`] impl, and inherent
/// `decode(&[u8]) -> Result<Self, DecodeError>` and `encode(&self) ->
/// Vec<u8>`. A field is written as in the .proto, with the Rust name
/// first: `vmi_json: Vec<u8> = 1 "vmiJson",`.
macro_rules! proto_message {
    ($(
        $(#[$meta:meta])*
        $name:ident = $proto:literal {
            $( $(#[$field_meta:meta])* $field:ident: $ty:ty = $number:literal $proto_field:literal, )*
        }
    )*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl $name {
            /// Reads the message from its protobuf bytes.
            pub fn decode(bytes: &[u8]) -> Result<Self, $crate::kubevirt::proto::wire::DecodeError> {
                <Self as $crate::kubevirt::proto::message::Message>::decode(bytes)
            }

            /// The message's protobuf bytes.
            pub fn encode(&self) -> Vec<u8> {
                <Self as $crate::kubevirt::proto::message::Message>::encode(self)
            }
        }

        impl $crate::kubevirt::proto::message::Message for $name {
            const NAME: &'static str = $proto;

            #[allow(unused_variables)]
            fn merge_field(
                &mut self,
                number: u32,
                value: $crate::kubevirt::proto::wire::Value<'_>,
                depth: u32,
            ) -> Result<(), $crate::kubevirt::proto::wire::DecodeError> {
                match number {
                    $( $number => $crate::kubevirt::proto::message::FieldValue::merge_value(
                        &mut self.$field, value, depth,
                    )
                    .map_err(|e| e.at_field($proto_field).in_message($proto)), )*
                    _ => Ok(()),
                }
            }

            #[allow(unused_variables)]
            fn write_fields(&self, w: &mut $crate::kubevirt::proto::wire::Writer) {
                $( $crate::kubevirt::proto::message::FieldValue::write(&self.$field, $number, w); )*
            }

            #[cfg(test)]
            #[allow(unused_variables)]
            fn sample(seed: u32) -> Self {
                Self {
                    $( $field: $crate::kubevirt::proto::message::FieldValue::sample(seed + $number), )*
                }
            }

            #[cfg(test)]
            fn schema() -> Vec<(u32, &'static str, String)> {
                vec![ $( ($number, $proto_field,
                    <$ty as $crate::kubevirt::proto::message::FieldValue>::proto_type()), )* ]
            }
        }
    )*};
}

pub(crate) use proto_message;
