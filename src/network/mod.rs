//! Pod networking as KubeVirt does it (pkg/network): the guest's NICs are
//! taps in the pod's network namespace, joined to a bridge, and the
//! launcher's own DHCP server (and, for IPv6 masquerade, DHCPv6 server and
//! router advertiser) tells the guest its address.
//!
//! | module | owns |
//! |---|---|
//! | `dhcp` | DHCPv4 wire format (RFC 2131/2132) and the one-client answerer |
//! | `dhcpv6`, `ra` | DHCPv6 (RFC 8415) answers and router advertisements |
//! | `resolv` | the pod's DNS servers and search domains |
//! | `names` | KubeVirt's names for pod interfaces, bridges and taps |
//! | `server` | the threads that answer the guest |

pub mod dhcp;
pub mod dhcpv6;
pub mod error;
pub mod names;
pub mod netlink;
pub mod nft;
pub mod passt;
pub mod plan;
pub mod ra;
pub mod resolv;
pub mod server;
pub mod setup;

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::cli::PodNetworkMode;
pub use setup::{ActiveNetwork, Mode, NetworkError, SetupOptions};

/// The running VMI's pod networking, shared by the sync job that sets it
/// up, the queries that report it and the main thread that removes it on
/// exit.
pub type NetworkSlot = Arc<Mutex<Option<ActiveNetwork>>>;

/// What [`report`] returns when nothing was set up.
pub fn report(slot: &NetworkSlot) -> Value {
    slot.lock()
        .ok()
        .and_then(|s| s.as_ref().map(ActiveNetwork::report))
        .unwrap_or(Value::Array(Vec::new()))
}

/// Stops the servers and removes everything set up (every exit path).
pub fn teardown(slot: &NetworkSlot) {
    let taken = match slot.lock() {
        Ok(mut s) => s.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    if let Some(mut active) = taken {
        active.teardown();
    }
}

/// The pod-network work of one sync: the plan, how to carry it out, and
/// where to keep the result.
pub struct NetworkJob {
    pub plan: plan::NetworkPlan,
    pub options: SetupOptions,
    pub slot: NetworkSlot,
}

impl NetworkJob {
    /// Replaces whatever an earlier start set up with a fresh set-up.
    pub fn run(&self) -> Result<ActiveNetwork, NetworkError> {
        teardown(&self.slot);
        let mut active = setup::setup(&self.plan, &self.options)?;
        for plan in &self.plan.passt {
            let started = if plan.by_libvirt {
                Ok(passt::ActivePasst::by_libvirt(plan))
            } else {
                passt::start(plan, self.options.passt_spawner.as_ref())
            };
            match started {
                Ok(one) => active.passt.push(one),
                Err(e) => {
                    active.teardown();
                    return Err(e);
                }
            }
        }
        Ok(active)
    }

    /// Sets up only the interface `name` of the plan (one plugged into the
    /// running guest), leaving what runs alone; `None` when the plan has no
    /// tap for it (slirp, passt).
    pub fn run_one(&self, name: &str) -> Option<Result<ActiveNetwork, NetworkError>> {
        let tap = self.plan.taps.iter().find(|t| t.name == name)?;
        let one = plan::NetworkPlan {
            taps: vec![tap.clone()],
            slirp: Vec::new(),
            passt: Vec::new(),
            hostname: self.plan.hostname.clone(),
        };
        Some(setup::setup(&one, &self.options))
    }

    /// Adds what `run_one` set up to the running VMI's networking.
    pub fn add(&self, active: ActiveNetwork) {
        match self.slot.lock() {
            Ok(mut slot) => match slot.as_mut() {
                Some(running) => running.absorb(active),
                None => *slot = Some(active),
            },
            Err(poisoned) => {
                let mut slot = poisoned.into_inner();
                match slot.as_mut() {
                    Some(running) => running.absorb(active),
                    None => *slot = Some(active),
                }
            }
        }
    }

    /// Releases what was set up for interface `name`, unplugged from the
    /// running guest (its bridge, tap and DHCP server); false when it had
    /// nothing (slirp, passt).
    pub fn release(&self, name: &str) -> bool {
        match self.slot.lock() {
            Ok(mut slot) => slot.as_mut().is_some_and(|a| a.release(name)),
            Err(poisoned) => poisoned
                .into_inner()
                .as_mut()
                .is_some_and(|a| a.release(name)),
        }
    }

    pub fn keep(&self, active: ActiveNetwork) {
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some(active);
        }
    }
}

/// Which [`Mode`] `--pod-network` means here, and why (for the log).
pub fn decide_mode(preference: PodNetworkMode, spawn_libvirt: bool) -> (Mode, &'static str) {
    match preference {
        PodNetworkMode::Setup => (Mode::Create, "--pod-network=setup"),
        PodNetworkMode::Existing => (Mode::Existing, "--pod-network=existing"),
        PodNetworkMode::Auto => {
            if !crate::os::net::has_cap_net_admin() {
                (Mode::Existing, "no CAP_NET_ADMIN")
            } else if !spawn_libvirt {
                (
                    Mode::Existing,
                    "QEMU runs under another libvirt daemon (no --spawn-libvirt)",
                )
            } else if !matches!(
                (crate::os::net::netns_id("self"), crate::os::net::netns_id("1")),
                (Ok(own), Ok(init)) if own != init
            ) {
                // Also when PID 1's namespace cannot be read: never risk
                // taking over a host's own network.
                (
                    Mode::Existing,
                    "the launcher is not known to have a network namespace other than PID 1's",
                )
            } else {
                (
                    Mode::Create,
                    "CAP_NET_ADMIN in a network namespace of its own",
                )
            }
        }
    }
}
