//! The `Hypervisor` trait on libvirt's own RPC protocol, spoken directly
//! over the daemon's unix socket: no libvirt library, so the launcher
//! builds as one static binary (cargo feature `wire`, see
//! `hypervisor::backend`).
//!
//! ```text
//!   manager / workers ──call()──▶ client ──CALL frames──▶ daemon socket
//!                     ◀─reply by serial── reader thread ◀── REPLY / MESSAGE
//!   manager ◀── HypervisorEvent ── backend::EventRouter ◀─┘ (events, close)
//! ```
//!
//! | module | owns |
//! |---|---|
//! | `codec` | XDR primitives, the message header and frame, `remote_error`, typed parameters, domain references |
//! | `procedures` | program and procedure numbers, limits, flags, error codes (libvirt 9.0's, stable since) |
//! | `client` | one socket: serials, the reader thread, keepalive, deadlines, streams the daemon sends (a screenshot), closing on bad bytes |
//! | `uri` | which socket a URI reaches and the name opened on it |
//! | `backend` | `WireHypervisor`: the trait's calls, error kinds, events |
//!
//! The protocol, briefly: every message is a 4-byte big-endian length
//! (counting itself), a 24-byte header (program, version, procedure, type,
//! serial, status) and an XDR payload. A CALL's payload is the procedure's
//! `*_args` struct from libvirt's `remote_protocol.x`; its REPLY carries
//! `*_ret` (status OK) or a `remote_error` (status ERROR). Events are
//! MESSAGEs with serial 0 whose payload is a `*_msg` struct. The KEEPALIVE
//! program has only PING and PONG, with empty payloads.
//!
//! # Adding a call
//!
//! A new `Hypervisor` method must be implemented by both backends. For the
//! wire backend:
//!
//! 1. Find the C API's procedure in libvirt's `src/remote/remote_protocol.x`
//!    (`REMOTE_PROC_DOMAIN_ATTACH_DEVICE_FLAGS = 160`, say) and its
//!    `remote_domain_attach_device_flags_args` / `_ret` structs.
//! 2. Add a `Procedure` to `procedures.rs` with that number and the C API's
//!    name (`remote(160, "virDomainAttachDeviceFlags")`), and any flag the
//!    call uses to `procedures::flags` under libvirt's name.
//! 3. In `backend.rs`, encode the `_args` fields after the domain, in
//!    order, and decode the `_ret` fields:
//!    `self.domain_action(name, &proc::DOMAIN_ATTACH_DEVICE_FLAGS, |e| {
//!    e.string(xml).u32(flags); })` for a call with an empty reply, or
//!    `domain_call(.., |dom, d| d.string())` to decode one. Typed
//!    parameters go through `Encoder::typed_params` and
//!    `Decoder::typed_params`, which give the same `Stat` JSON types as the
//!    `virt` backend. A new event: its `REMOTE_PROC_DOMAIN_EVENT_CALLBACK_*`
//!    number in `procedures::events`, its id in `procedures::event_ids`
//!    and registration list in `backend::open`, its decoding in
//!    `backend::decode_event`, built only through `hypervisor::state`.
//! 4. Test it in `backend/tests.rs` against the fake daemon: check the
//!    bytes the call sends and what it makes of the reply; the daemon suite
//!    (`VL_LAUNCHER_BIN=<static binary> VL_TEST_URI=test+unix:///default
//!    cargo test --test daemon`) and the real-guest suites then run it
//!    against a real libvirtd.

pub mod backend;
pub mod client;
pub mod codec;
pub mod procedures;
pub mod uri;

#[cfg(test)]
mod fake;
