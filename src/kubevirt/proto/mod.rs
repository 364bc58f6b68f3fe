//! KubeVirt's launcher protocol in protobuf, written here rather than
//! generated: the wire format (`wire`), messages as structs (`message`),
//! the messages of `cmd.proto`, `info.proto` and `notify.proto` (`cmd`,
//! `info`, `notify`), of the hook sidecars' protocol (`hooks`) and the
//! gRPC method table (`methods`).
//!
//! `schema/` holds the .proto files as KubeVirt has them at commit
//! d923fdb815cd2016ddaebdaaa51db04133576d72 (`pkg/handler-launcher-com/`,
//! `pkg/hooks/`; Apache-2.0); the tests check every message and method here against
//! them, field by field.

pub mod cmd;
pub mod hooks;
pub mod info;
pub mod message;
pub mod methods;
pub mod notify;
pub mod wire;

#[cfg(test)]
mod tests;

pub use message::Message;
pub use methods::{CmdMethod, CmdRequest, LauncherMethod};
pub use wire::{DecodeError, DecodeErrorKind};
