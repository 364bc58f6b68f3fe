//! KubeVirt's launcher protocol in protobuf, written here rather than
//! generated. This far: the wire format (`wire`).

pub mod wire;

pub use wire::{DecodeError, DecodeErrorKind};
