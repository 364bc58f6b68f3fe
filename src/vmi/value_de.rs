//! The VMI's deserializer: reads a `&serde_json::Value`, accepts a struct
//! only from a JSON object, and puts the JSON path of the offending field in
//! every error.
//!
//! - **Objects only.** serde's derived structs also accept a JSON array of
//!   their fields in order, so `"cpu": [3]` would read as `{"cores": 3}` and
//!   `"metadata": ["demo", "default"]` as a name and a namespace. A VMI is
//!   KubeVirt's JSON: where the API has an object, only an object is
//!   accepted (`invalid type: sequence, expected an object`).
//! - **Paths.** An error starts with an empty path where it is raised (by
//!   this deserializer or by a visitor: `invalid type`, `unknown field`,
//!   `missing field`, the messages of `Quantity` and the strict types) and
//!   gains one segment at each map key, map value, array element and enum
//!   variant it leaves on its way up. [`Error::path`] prints them as
//!   `spec.domain.devices.disks[1].disk.bus`; the document itself is "".
//!   A successful parse builds no path at all.
//! - **Values** are read as serde_json's own `&Value` deserializer reads
//!   them: numbers are handed to the visitor as the u64, i64 or f64 they
//!   hold (the visitor converts, and reports overflows), `null` is `None`
//!   for an `Option`, enums come from a string (unit variant) or an object
//!   with one key. Map keys are read as strings only (serde_json would also
//!   parse a number or a bool out of a key; no VMI type has such keys).
//! - `#[serde(flatten)]` and `untagged` (unused by the VMI types) buffer a
//!   value before reading it: an error in the buffered part would get the
//!   path of the enclosing field, as it did with serde_path_to_error.
//!
//! It replaces serde_path_to_error wrapped around an adapter of our own
//! over serde_json's deserializer: the two generic layers, monomorphised
//! for every VMI type, were a large part of the static binary. Here the
//! generic methods only dispatch to the visitor and the rest is plain
//! functions, which made the binary smaller and `parse_vmi` faster
//! (docs/figures.md).

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, Expected, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};
use serde_json::{Map, Number, Value};

/// Deserializes `T` from `value`; see the module documentation.
pub(crate) fn from_value<'de, T: de::Deserialize<'de>>(value: &'de Value) -> Result<T, Error> {
    T::deserialize(ValueDe(value))
}

/// A deserialization error and where it happened.
#[derive(Debug)]
pub(crate) struct Error(Box<ErrorInner>);

#[derive(Debug)]
struct ErrorInner {
    message: String,
    /// Innermost segment first: pushed as the error leaves each level.
    segments: Vec<Segment>,
}

#[derive(Debug)]
enum Segment {
    /// A map key, a struct field or an enum variant: `.name`.
    Key(String),
    /// An array element: `[index]`.
    Index(usize),
}

impl Error {
    /// What is wrong, without the path.
    pub(crate) fn message(&self) -> &str {
        &self.0.message
    }

    /// The JSON path, "" for the document itself: `a.b[1].c`, as
    /// serde_path_to_error printed it (keys as they are, not quoted).
    pub(crate) fn path(&self) -> String {
        let mut path = String::new();
        for (i, segment) in self.0.segments.iter().rev().enumerate() {
            match segment {
                Segment::Key(key) => {
                    if i > 0 {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Segment::Index(index) => {
                    path.push('[');
                    path.push_str(&index.to_string());
                    path.push(']');
                }
            }
        }
        path
    }

    #[cold]
    fn at_key(mut self, key: &str) -> Error {
        self.0.segments.push(Segment::Key(key.to_owned()));
        self
    }

    #[cold]
    fn at_index(mut self, index: usize) -> Error {
        self.0.segments.push(Segment::Index(index));
        self
    }

    #[cold]
    fn new(message: String) -> Error {
        Error(Box::new(ErrorInner {
            message,
            segments: Vec::new(),
        }))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path();
        if path.is_empty() {
            f.write_str(&self.0.message)
        } else {
            write!(f, "{path}: {}", self.0.message)
        }
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    #[cold]
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error::new(msg.to_string())
    }

    #[cold]
    fn invalid_type(unexp: Unexpected, exp: &dyn Expected) -> Error {
        Error::new(format!(
            "invalid type: {}, expected {exp}",
            JsonUnexpected(unexp)
        ))
    }

    #[cold]
    fn invalid_value(unexp: Unexpected, exp: &dyn Expected) -> Error {
        Error::new(format!(
            "invalid value: {}, expected {exp}",
            JsonUnexpected(unexp)
        ))
    }
}

/// serde's `Unexpected` as serde_json words it: `null` for the unit, and
/// floats as JSON prints them.
struct JsonUnexpected<'a>(Unexpected<'a>);

impl fmt::Display for JsonUnexpected<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Unexpected::Unit => f.write_str("null"),
            Unexpected::Float(value) => match Number::from_f64(value) {
                Some(number) => write!(f, "floating point `{number}`"),
                None => fmt::Display::fmt(&self.0, f),
            },
            other => fmt::Display::fmt(&other, f),
        }
    }
}

/// What serde's messages call a JSON value: `invalid type: sequence, ...`.
fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match number(n) {
            Num::U(u) => Unexpected::Unsigned(u),
            Num::I(i) => Unexpected::Signed(i),
            Num::F(f) => Unexpected::Float(f),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

#[cold]
fn invalid_type(value: &Value, expected: &dyn Expected) -> Error {
    de::Error::invalid_type(unexpected(value), expected)
}

/// The number as serde_json hands it to a visitor.
enum Num {
    U(u64),
    I(i64),
    F(f64),
}

fn number(n: &Number) -> Num {
    if let Some(u) = n.as_u64() {
        Num::U(u)
    } else if let Some(i) = n.as_i64() {
        Num::I(i)
    } else {
        // Without serde_json's arbitrary_precision feature every other
        // number is an f64; NaN is unreachable (JSON has none).
        Num::F(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn visit_number<'de, V: Visitor<'de>>(n: &Number, visitor: V) -> Result<V::Value, Error> {
    match number(n) {
        Num::U(u) => visitor.visit_u64(u),
        Num::I(i) => visitor.visit_i64(i),
        Num::F(f) => visitor.visit_f64(f),
    }
}

fn visit_array<'de, V: Visitor<'de>>(values: &'de [Value], visitor: V) -> Result<V::Value, Error> {
    let mut seq = SeqDe { values, next: 0 };
    let out = visitor.visit_seq(&mut seq)?;
    seq.end()?;
    Ok(out)
}

/// Not inlined: with LTO, nesting every struct's visitor into its parent's
/// made the static binary larger and parsing no faster (docs/figures.md).
#[inline(never)]
fn visit_object<'de, V: Visitor<'de>>(
    map: &'de Map<String, Value>,
    visitor: V,
) -> Result<V::Value, Error> {
    let mut access = MapDe {
        iter: map.iter(),
        entry: None,
    };
    let out = visitor.visit_map(&mut access)?;
    access.end(map.len())?;
    Ok(out)
}

/// A JSON value being read.
struct ValueDe<'de>(&'de Value);

impl<'de> Deserializer<'de> for ValueDe<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => visit_number(n, visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(values) => visit_array(values, visitor),
            Value::Object(map) => visit_object(map, visitor),
        }
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_i128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_u128<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_number(visitor)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Bool(b) => visitor.visit_bool(*b),
            other => Err(invalid_type(other, &visitor)),
        }
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_borrowed_str(s),
            other => Err(invalid_type(other, &visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(values) => visit_array(values, visitor),
            other => Err(invalid_type(other, &visitor)),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            other => Err(invalid_type(other, &visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(values) => visit_array(values, visitor),
            other => Err(invalid_type(other, &visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visit_object(map, visitor),
            other => Err(invalid_type(other, &visitor)),
        }
    }

    /// Only from an object: never from an array of the fields in order.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visit_object(map, visitor),
            other => Err(invalid_type(other, &"an object")),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(EnumDe::new(self.0)?)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

impl<'de> ValueDe<'de> {
    fn deserialize_number<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Number(n) => visit_number(n, visitor),
            other => Err(invalid_type(other, &visitor)),
        }
    }
}

/// The elements of an array; `next` is the index of the next one.
struct SeqDe<'de> {
    values: &'de [Value],
    next: usize,
}

impl SeqDe<'_> {
    /// The visitor must read every element, as with serde_json.
    fn end(&self) -> Result<(), Error> {
        if self.next < self.values.len() {
            Err(de::Error::invalid_length(
                self.values.len(),
                &"fewer elements in array",
            ))
        } else {
            Ok(())
        }
    }
}

impl<'de> SeqAccess<'de> for SeqDe<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let index = self.next;
        match self.values.get(index) {
            Some(value) => {
                self.next += 1;
                match seed.deserialize(ValueDe(value)) {
                    Ok(out) => Ok(Some(out)),
                    Err(err) => Err(err.at_index(index)),
                }
            }
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.values.len().saturating_sub(self.next))
    }
}

/// The entries of an object; `entry` is the one whose key was just read.
struct MapDe<'de> {
    iter: serde_json::map::Iter<'de>,
    entry: Option<(&'de String, &'de Value)>,
}

impl MapDe<'_> {
    /// The visitor must read every entry, as with serde_json.
    fn end(&self, len: usize) -> Result<(), Error> {
        if self.iter.len() == 0 {
            Ok(())
        } else {
            Err(de::Error::invalid_length(len, &"fewer elements in map"))
        }
    }
}

impl<'de> MapAccess<'de> for MapDe<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.iter.next() {
            Some(entry) => {
                self.entry = Some(entry);
                match seed.deserialize(KeyDe(entry.0)) {
                    Ok(out) => Ok(Some(out)),
                    // `unknown field` gets the field's own path.
                    Err(err) => Err(err.at_key(entry.0)),
                }
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        match self.entry.take() {
            Some((key, value)) => seed
                .deserialize(ValueDe(value))
                .map_err(|err| err.at_key(key)),
            None => Err(de::Error::custom("value is missing")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// A map key, or an enum's variant name: a string.
struct KeyDe<'de>(&'de str);

impl<'de> Deserializer<'de> for KeyDe<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.0)
    }

    /// Map keys cannot be null.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(EnumDe {
            variant: self.0,
            value: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// An enum: a string (unit variant) or an object with one key, the
/// variant, whose value is the variant's content.
struct EnumDe<'de> {
    variant: &'de str,
    value: Option<&'de Value>,
}

impl<'de> EnumDe<'de> {
    fn new(value: &'de Value) -> Result<EnumDe<'de>, Error> {
        match value {
            Value::String(variant) => Ok(EnumDe {
                variant,
                value: None,
            }),
            Value::Object(map) => {
                let mut entries = map.iter();
                match (entries.next(), entries.next()) {
                    (Some((variant, value)), None) => Ok(EnumDe {
                        variant,
                        value: Some(value),
                    }),
                    _ => Err(de::Error::invalid_value(
                        Unexpected::Map,
                        &"map with a single key",
                    )),
                }
            }
            other => Err(invalid_type(other, &"string or map")),
        }
    }
}

impl<'de> EnumAccess<'de> for EnumDe<'de> {
    type Error = Error;
    type Variant = VariantDe<'de>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, VariantDe<'de>), Error> {
        let variant = seed.deserialize(KeyDe(self.variant))?;
        Ok((
            variant,
            VariantDe {
                variant: self.variant,
                value: self.value,
            },
        ))
    }
}

/// A variant's content; errors in it get the variant's name in their path.
struct VariantDe<'de> {
    variant: &'de str,
    value: Option<&'de Value>,
}

impl VariantDe<'_> {
    #[cold]
    fn wrong_shape(&self, expected: &str) -> Error {
        let unexpected = match self.value {
            Some(value) => unexpected(value),
            None => Unexpected::UnitVariant,
        };
        let err: Error = de::Error::invalid_type(unexpected, &expected);
        err.at_key(self.variant)
    }
}

impl<'de> VariantAccess<'de> for VariantDe<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            None | Some(Value::Null) => Ok(()),
            Some(other) => Err(invalid_type(other, &"unit").at_key(self.variant)),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.value {
            Some(value) => seed
                .deserialize(ValueDe(value))
                .map_err(|err| err.at_key(self.variant)),
            None => Err(self.wrong_shape("newtype variant")),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        let out = match self.value {
            Some(Value::Array(values)) if values.is_empty() => visitor.visit_unit(),
            Some(Value::Array(values)) => visit_array(values, visitor),
            _ => return Err(self.wrong_shape("tuple variant")),
        };
        out.map_err(|err| err.at_key(self.variant))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let out = match self.value {
            Some(Value::Object(map)) => visit_object(map, visitor),
            _ => return Err(self.wrong_shape("struct variant")),
        };
        out.map_err(|err| err.at_key(self.variant))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::from_value;
    use crate::vmi::{DiskBus, Quantity};

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        a: u32,
        #[serde(default)]
        b: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
    }

    fn parse(value: Value) -> Result<Outer, String> {
        from_value(&value).map_err(|e| e.to_string())
    }

    #[test]
    fn objects_are_read_as_before() {
        let outer = parse(json!({"inner": {"a": 1, "b": "x"}, "list": [{"a": 2}]}));
        assert_eq!(
            outer,
            Ok(Outer {
                inner: Some(Inner {
                    a: 1,
                    b: Some("x".into())
                }),
                list: vec![Inner { a: 2, b: None }],
            })
        );
    }

    #[test]
    fn arrays_for_structs_are_refused_at_every_depth() {
        assert_eq!(
            parse(json!({"inner": [1, "x"]})),
            Err("inner: invalid type: sequence, expected an object".to_string())
        );
        assert_eq!(
            parse(json!({"list": [{"a": 1}, [2]]})),
            Err("list[1]: invalid type: sequence, expected an object".to_string())
        );
        assert_eq!(
            parse(json!([{"a": 1}])),
            Err("invalid type: sequence, expected an object".to_string())
        );
        assert_eq!(
            parse(json!({"inner": "a"})),
            Err("inner: invalid type: string \"a\", expected an object".to_string())
        );
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Device {
        name: String,
        #[serde(default)]
        bus: Option<DiskBus>,
        #[serde(default)]
        size: Option<Quantity>,
        #[serde(default)]
        boot_order: Option<u16>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Machine {
        #[serde(default)]
        devices: Vec<Device>,
        #[serde(default)]
        groups: Vec<Vec<Device>>,
        #[serde(default)]
        labels: BTreeMap<String, Quantity>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        extra: Option<Value>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    enum Mode {
        Off,
        Level(u8),
        Pair(u8, String),
        Custom { device: Device },
    }

    fn machine(value: Value) -> Result<Machine, (String, String)> {
        from_value(&value).map_err(|e| (e.path(), e.message().to_string()))
    }

    fn path_of(value: Value) -> String {
        match machine(value) {
            Ok(m) => panic!("expected an error, got {m:?}"),
            Err((path, _)) => path,
        }
    }

    #[test]
    fn paths_go_through_objects_arrays_and_options() {
        let ok = machine(json!({
            "devices": [{"name": "a", "bus": "sata", "size": "1Gi", "bootOrder": 2}],
            "groups": [[], [{"name": "b"}]],
            "labels": {"x.y/z": 3},
            "extra": {"anything": [1, "two", null]}
        }))
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(ok.devices[0].bus, Some(DiskBus::Sata));
        assert_eq!(ok.groups[1][0].name, "b");
        assert_eq!(ok.extra, Some(json!({"anything": [1, "two", null]})));
        assert_eq!(
            machine(json!({"devices": [{"name": "a"}, {"name": "b", "bus": "ide"}]})),
            Err((
                "devices[1].bus".to_string(),
                "unknown bus \"ide\" (use virtio, sata, scsi or usb)".to_string()
            ))
        );
        assert_eq!(
            path_of(json!({"groups": [[], [{"name": "a"}, {"name": 1}]]})),
            "groups[1][1].name"
        );
        // A map key is printed as it is, dots included.
        assert_eq!(
            machine(json!({"labels": {"ok": 1, "a.b": "10GB"}})).map_err(|e| e.0),
            Err("labels.a.b".to_string())
        );
    }

    #[test]
    fn visitor_errors_get_the_path_of_the_field_being_read() {
        // A custom error from a nested type.
        let (path, message) = machine(json!({"devices": [{"name": "a", "size": "1 Gi"}]}))
            .err()
            .unwrap_or_default();
        assert_eq!(path, "devices[0].size");
        assert!(
            message.starts_with("invalid quantity \"1 Gi\""),
            "{message}"
        );
        // deny_unknown_fields: the unknown key's own path.
        let (path, message) = machine(json!({"devices": [{"name": "a", "bootorder": 1}]}))
            .err()
            .unwrap_or_default();
        assert_eq!(path, "devices[0].bootorder");
        assert!(
            message.starts_with("unknown field `bootorder`, expected one of"),
            "{message}"
        );
        // A missing field is the object's.
        assert_eq!(
            machine(json!({"devices": [{"bus": "sata"}]})),
            Err(("devices[0]".to_string(), "missing field `name`".to_string()))
        );
        // Invalid types and numbers out of range.
        assert_eq!(
            machine(json!({"devices": [{"name": "a", "bootOrder": 70000}]})),
            Err((
                "devices[0].bootOrder".to_string(),
                "invalid value: integer `70000`, expected u16".to_string()
            ))
        );
        assert_eq!(
            machine(json!({"devices": {"name": "a"}})),
            Err((
                "devices".to_string(),
                "invalid type: map, expected a sequence".to_string()
            ))
        );
    }

    #[test]
    fn errors_at_the_root_have_an_empty_path() {
        assert_eq!(
            machine(json!({"devices": [], "unknown": 1})).map_err(|e| e.0),
            Err("unknown".to_string())
        );
        let err = from_value::<Machine>(&json!(3)).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("invalid type: integer `3`, expected an object")
        );
        let err = from_value::<Inner>(&json!({})).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("missing field `a`")
        );
    }

    #[test]
    fn enums_are_read_as_serde_json_reads_them_with_the_variant_in_the_path() {
        let mode = |value: Value| machine(json!({ "mode": value })).map(|m| m.mode);
        assert_eq!(mode(json!("off")), Ok(Some(Mode::Off)));
        assert_eq!(mode(json!({"off": null})), Ok(Some(Mode::Off)));
        assert_eq!(mode(json!(null)), Ok(None));
        assert_eq!(mode(json!({"level": 3})), Ok(Some(Mode::Level(3))));
        assert_eq!(
            mode(json!({"pair": [1, "x"]})),
            Ok(Some(Mode::Pair(1, "x".to_string())))
        );
        assert_eq!(
            mode(json!({"custom": {"device": {"name": "d"}}})),
            Ok(Some(Mode::Custom {
                device: Device {
                    name: "d".to_string(),
                    bus: None,
                    size: None,
                    boot_order: None
                }
            }))
        );
        assert_eq!(
            mode(json!({"level": 300})),
            Err((
                "mode.level".to_string(),
                "invalid value: integer `300`, expected u8".to_string()
            ))
        );
        assert_eq!(
            mode(json!({"custom": {"device": {"name": "d", "bus": "x"}}})).map_err(|e| e.0),
            Err("mode.custom.device.bus".to_string())
        );
        assert_eq!(
            mode(json!("level")).map_err(|e| e.0),
            Err("mode.level".to_string())
        );
        let (path, message) = mode(json!("fast")).err().unwrap_or_default();
        assert_eq!(path, "mode");
        assert!(message.starts_with("unknown variant `fast`"), "{message}");
        assert_eq!(
            mode(json!({"off": null, "level": 1})),
            Err((
                "mode".to_string(),
                "invalid value: map, expected map with a single key".to_string()
            ))
        );
        assert_eq!(
            mode(json!(1)),
            Err((
                "mode".to_string(),
                "invalid type: integer `1`, expected string or map".to_string()
            ))
        );
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Numbers {
        a: u8,
        b: i32,
        c: u64,
        d: f64,
        e: i64,
        f: f32,
        g: bool,
        h: char,
        s: String,
        o: Option<u16>,
        u: (),
        v: Vec<u8>,
        t: (u8, String),
    }

    /// Accepts and refuses what serde_json's own `&Value` deserializer does,
    /// with the same messages.
    #[test]
    fn values_are_read_as_serde_json_reads_them() {
        let good = json!({"a": 255, "b": -5, "c": u64::MAX, "d": 1, "e": -1, "f": 1.5,
                          "g": true, "h": "x", "s": "text", "o": null, "u": null,
                          "v": [1, 2], "t": [1, "a"]});
        let ours = from_value::<Numbers>(&good).map_err(|e| e.to_string());
        let theirs = Numbers::deserialize(&good).map_err(|e| e.to_string());
        assert_eq!(ours, theirs);
        assert!(ours.is_ok());
        for (field, bad) in [
            ("a", json!(256)),
            ("a", json!(-1)),
            ("a", json!(1.5)),
            ("a", json!(1e300)),
            ("a", json!(null)),
            ("a", json!("1")),
            ("b", json!(3_000_000_000u64)),
            ("c", json!(-1)),
            ("d", json!("1.0")),
            ("e", json!(u64::MAX)),
            ("g", json!(1)),
            ("h", json!("xy")),
            ("s", json!(null)),
            ("s", json!({})),
            ("o", json!(-2)),
            ("u", json!(false)),
            ("v", json!("ab")),
            ("v", json!([1, 300])),
            ("t", json!([1])),
            ("t", json!([1, "a", 2])),
        ] {
            let mut value = good.clone();
            value[field] = bad.clone();
            let ours = from_value::<Numbers>(&value)
                .err()
                .map(|e| e.message().to_string());
            let theirs = Numbers::deserialize(&value).err().map(|e| e.to_string());
            assert!(ours.is_some(), "{field}: {bad} accepted");
            assert_eq!(ours, theirs, "{field}: {bad}");
        }
    }

    /// Every example VMI reads as serde_json's deserializer reads it.
    #[test]
    fn examples_read_as_with_serde_json() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
            let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
            let ours = from_value::<crate::vmi::VirtualMachineInstance>(&value)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let theirs = crate::vmi::VirtualMachineInstance::deserialize(&value)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(ours, theirs, "{}", path.display());
            seen += 1;
        }
        assert!(seen > 0, "no example in {dir}");
    }
}
