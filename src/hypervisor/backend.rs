//! Which `Hypervisor` implementation this build runs, chosen by cargo
//! features: `virt` (the default) links libvirt's C library; `wire` (or a
//! build without `virt`) speaks libvirt's RPC protocol itself and needs no
//! C library, which is what makes the static musl binary possible.

use std::sync::Arc;

use crossbeam_channel::Receiver;

use super::{HvResult, Hypervisor, HypervisorEvent};
use crate::sink::Sink;
use crate::threads::FatalSender;

#[cfg(any(feature = "wire", not(feature = "virt")))]
mod chosen {
    use super::*;
    use crate::hypervisor::wire::backend::WireHypervisor;

    pub const NAME: &str = "wire";

    pub fn prepare() -> Result<(), String> {
        Ok(())
    }

    pub fn connect(
        uri: &str,
        domain_name: &str,
        events: Sink<HypervisorEvent>,
    ) -> HvResult<Arc<dyn Hypervisor>> {
        Ok(Arc::new(WireHypervisor::connect(uri, domain_name, events)?))
    }

    pub fn start_events(_fatal: &FatalSender) -> Result<Receiver<()>, String> {
        // Each connection's RPC reader thread delivers its events; there is
        // no loop to start.
        let (tx, rx) = crossbeam_channel::bounded(1);
        let _ = tx.send(());
        Ok(rx)
    }
}

#[cfg(all(feature = "virt", not(feature = "wire")))]
mod chosen {
    use super::*;
    use crate::hypervisor::event_loop;
    use crate::hypervisor::libvirt::LibvirtHypervisor;

    pub const NAME: &str = "virt";

    pub fn prepare() -> Result<(), String> {
        // libvirt prints every error to stderr by default; the launcher
        // reports them itself, with context.
        virt::error::clear_error_callback();
        event_loop::register()
    }

    pub fn connect(
        uri: &str,
        domain_name: &str,
        events: Sink<HypervisorEvent>,
    ) -> HvResult<Arc<dyn Hypervisor>> {
        Ok(Arc::new(LibvirtHypervisor::connect(
            uri,
            domain_name,
            events,
        )?))
    }

    pub fn start_events(fatal: &FatalSender) -> Result<Receiver<()>, String> {
        event_loop::spawn(fatal)
    }
}

/// "virt" or "wire": shown in the greeting and `query-version`.
pub const NAME: &str = chosen::NAME;

/// Process-wide set-up, before any connection opens.
pub fn prepare() -> Result<(), String> {
    chosen::prepare()
}

/// Opens the connection once (the caller retries) with event callbacks
/// for `domain_name`.
pub fn connect(
    uri: &str,
    domain_name: &str,
    events: Sink<HypervisorEvent>,
) -> HvResult<Arc<dyn Hypervisor>> {
    chosen::connect(uri, domain_name, events)
}

/// Starts whatever delivers events; the receiver gets `()` once it runs.
pub fn start_events(fatal: &FatalSender) -> Result<Receiver<()>, String> {
    chosen::start_events(fatal)
}
