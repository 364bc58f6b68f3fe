//! A success reply's `return` object, with members that may be carried
//! already encoded.
//!
//! The caches behind `query-domain` and `query-stats` keep big parts of
//! their replies that do not change between reads: the domain's JSON form
//! and XML, the statistics. Kept as JSON trees, each cached reply would
//! clone the tree (hundreds of allocations) and encode it again; kept
//! encoded ([`Encoded`]), a reply copies bytes. The reply line is the same
//! either way: members are written in key order, encoded or not.

use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A JSON value encoded once, shared by every reply that carries it.
#[derive(Debug, Clone)]
pub struct Encoded(Arc<RawValue>);

impl Encoded {
    /// Encodes `value` (compact JSON).
    pub fn new<T: Serialize + ?Sized>(value: &T) -> Encoded {
        let raw = serde_json::value::to_raw_value(value).unwrap_or_else(|_| null());
        Encoded(Arc::from(raw))
    }

    /// The encoded text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The value decoded again (for tests and logs; replies write the text).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.get()).unwrap_or(Value::Null)
    }
}

fn null() -> Box<RawValue> {
    RawValue::from_string("null".to_string()).unwrap_or_default()
}

impl PartialEq for Encoded {
    fn eq(&self, other: &Encoded) -> bool {
        // A cache hands out clones of one encoding: the same text without
        // comparing it.
        Arc::ptr_eq(&self.0, &other.0) || self.get() == other.get()
    }
}

impl Serialize for Encoded {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// The object a successful command returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Return {
    members: Map<String, Value>,
    /// Sorted by key; no key is also in `members`.
    encoded: Vec<(String, Encoded)>,
}

impl Return {
    pub fn new() -> Return {
        Return::default()
    }

    /// Sets a member to a value, replacing an encoded one of that key.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        self.encoded.retain(|(k, _)| *k != key);
        self.members.insert(key, value);
    }

    /// Sets a member to an encoded value, replacing one of that key.
    pub fn insert_encoded(&mut self, key: impl Into<String>, value: Encoded) {
        let key = key.into();
        self.members.remove(&key);
        match self.encoded.binary_search_by(|(k, _)| k.as_str().cmp(&key)) {
            Ok(at) => self.encoded[at].1 = value,
            Err(at) => self.encoded.insert(at, (key, value)),
        }
    }

    /// A member carried encoded, as it is (not decoded).
    pub fn encoded(&self, key: &str) -> Option<&Encoded> {
        self.encoded
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|at| &self.encoded[at].1)
    }

    /// A member carried as a value.
    pub fn member(&self, key: &str) -> Option<&Value> {
        self.members.get(key)
    }

    /// The bytes the encoded members take in a reply, keys included.
    pub fn encoded_bytes(&self) -> usize {
        self.encoded
            .iter()
            .map(|(key, value)| key.len() + value.get().len() + 4)
            .sum()
    }

    /// The whole object as JSON values (decoding the encoded members): for
    /// tests and logs, not for replies.
    pub fn into_object(self) -> Map<String, Value> {
        let mut object = self.members;
        for (key, encoded) in self.encoded {
            object.insert(key, encoded.to_value());
        }
        object
    }
}

impl From<Map<String, Value>> for Return {
    fn from(members: Map<String, Value>) -> Return {
        Return {
            members,
            encoded: Vec::new(),
        }
    }
}

impl Serialize for Return {
    /// Both lists in one key order, as a `Map` alone would be written.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.members.len() + self.encoded.len()))?;
        let mut members = self.members.iter().peekable();
        let mut encoded = self.encoded.iter().peekable();
        loop {
            let member_first = match (members.peek(), encoded.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((mk, _)), Some((ek, _))) => mk.as_str() < ek.as_str(),
            };
            if member_first {
                if let Some((key, value)) = members.next() {
                    map.serialize_entry(key, value)?;
                }
            } else if let Some((key, value)) = encoded.next() {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn encoded_members_are_written_in_key_order_like_the_others() {
        let mut ret = Return::from(object(json!({"age_ms": 3, "name": "vm", "uuid": "u"})));
        ret.insert_encoded("spec", Encoded::new(&json!({"b": [1, 2], "a": "x\"y"})));
        ret.insert_encoded("xml", Encoded::new("<domain>\n</domain>"));
        ret.insert_encoded("devices", Encoded::new(&json!(null)));
        let line = serde_json::to_string(&ret).unwrap();
        assert_eq!(
            line,
            r#"{"age_ms":3,"devices":null,"name":"vm","spec":{"a":"x\"y","b":[1,2]},"uuid":"u","xml":"<domain>\n</domain>"}"#
        );
        // The same line a Map of the same members gives.
        let plain = ret.clone().into_object();
        assert_eq!(serde_json::to_string(&plain).unwrap(), line);
    }

    #[test]
    fn a_key_is_either_a_value_or_encoded_never_both() {
        let mut ret = Return::new();
        ret.insert("spec", json!(1));
        ret.insert_encoded("spec", Encoded::new(&json!(2)));
        assert_eq!(serde_json::to_string(&ret).unwrap(), r#"{"spec":2}"#);
        assert_eq!(ret.clone().into_object().get("spec"), Some(&json!(2)));
        ret.insert("spec", json!(3));
        assert_eq!(serde_json::to_string(&ret).unwrap(), r#"{"spec":3}"#);
        assert_eq!(ret.into_object().get("missing"), None);
    }
}
