//! Members of a reply carried already encoded.
//!
//! The caches behind `query-domain` and `query-stats` keep big parts of
//! their replies that do not change between reads: the domain's JSON form
//! and XML, the statistics. Kept as JSON trees, each cached reply would
//! clone the tree (hundreds of allocations) and encode it again; kept
//! encoded ([`Encoded`]), a reply copies bytes.

use std::sync::Arc;

use serde::ser::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

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
        self.get() == other.get()
    }
}

impl Serialize for Encoded {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}
