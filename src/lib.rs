//! virt-launcher: the per-VM runtime of KubeVirt as a small synchronous
//! daemon. See `launcher` for how the threads fit together.

pub mod agent;
pub mod block_cache;
pub mod cli;
pub mod client;
pub mod command;
pub mod config;
pub mod convert;
pub mod daemons;
pub mod dirs;
pub mod disks;
pub mod domxml;
pub mod encoding;
pub mod events;
pub mod exit;
pub mod grpc;
pub mod hotplug;
pub mod hypervisor;
pub mod kubevirt;
pub mod launcher;
pub mod limits;
pub mod lock;
pub mod logging;
pub mod manager;
#[cfg(target_arch = "x86_64")]
pub mod memcpy;
pub mod metrics;
pub mod migration;
pub mod network;
#[cfg(vl_no_unwind_tables)]
pub mod no_unwind;
pub mod os;
pub mod png;
pub mod protocol;
pub mod replies;
pub mod safe_fs;
#[cfg(test)]
pub(crate) mod scratch;
pub mod server;
pub mod signals;
pub mod sink;
pub mod threads;
pub mod unprivileged;
pub mod upgrade;
pub mod vmi;
