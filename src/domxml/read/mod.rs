//! The domain XML reader: quick-xml's event reader builds a small element
//! tree (`tree`), and a serde deserializer over that tree (`de`) fills
//! the `#[derive(Deserialize)]` types of `domxml` with quick-xml's mapping
//! (`@attribute`, `$text`, child elements by name, lists gathered from
//! anywhere among their siblings).
//!
//! It replaces quick-xml's own serde deserializer, whose code, instantiated
//! for every type of the domain model, was the biggest single part of the
//! static binary (docs/figures.md); this one adds little per type, and
//! reading a tree first is also faster than quick-xml's buffered look-ahead
//! over interleaved lists.

mod de;
mod tree;

use serde::de::DeserializeOwned;

pub use tree::{Element, MAX_DEPTH, parse as parse_tree};

/// Reads a document whose root element is `T` (a whole `<domain>`, or one
/// device as libvirt's device calls take it). The error says where in the
/// document the problem is (`/domain/devices/disk[2]/target/@dev: …`).
pub fn from_str<T: DeserializeOwned>(xml: &str) -> Result<T, String> {
    let root = tree::parse(xml)?;
    T::deserialize(de::ValueDe::root(&root)).map_err(|err| err.located_in(root.name))
}

#[cfg(test)]
pub(super) mod tests;
