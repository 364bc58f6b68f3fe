//! Carrying out a [`NetworkPlan`] in the launcher's network namespace, as
//! KubeVirt's virt-handler (phase 1) and launcher (phase 2) do together:
//!
//! - **masquerade:** bridge `k6t-eth0` (MAC 02:00:00:00:00:00) with the
//!   gateway 10.0.2.1/24 (and fd10:0:2::1/120 when the pod has IPv6),
//!   tap `tap0` in it, forwarding on, nftables masquerade and DNAT; a
//!   DHCP server on the bridge (DHCPv6 and router advertisements too).
//! - **bridge:** the pod interface is renamed `eth0-nic` and becomes a
//!   port of `k6t-eth0` with the tap; a dummy `eth0` keeps the pod's
//!   addresses for the CNI; the DHCP server hands the pod address,
//!   gateway, routes and MTU to the guest.
//!
//! Everything created is recorded as an `Undo` step; [`ActiveNetwork`]
//! undoes them in reverse order on [`ActiveNetwork::teardown`] or drop,
//! and a failed set-up undoes what it had done before returning.
//! With [`Mode::Existing`] nothing is created: the taps must exist.

use std::fmt;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::dhcp::wire::ClasslessRoute;
use super::dhcp::{Answerer, ClientMac, LeaseConfig, format_mac, parse_mac};
use super::dhcpv6::V6Lease;
use super::error::StepError;
use super::netlink::{self, Address, LinkChange, Netlink, Route};
use super::nft;
use super::plan::{Binding, NetworkPlan, TapInterface};
use super::ra::Advertisement;
use super::resolv::{self, PodDns};
use super::server::{self, LeaseStatus, ReplyRoute, ServerThread};
use crate::os::net as os_net;

/// KubeVirt's masquerade bridge MAC (link.StaticMasqueradeBridgeMAC).
pub const MASQUERADE_BRIDGE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Create bridges, taps, addresses and rules (needs CAP_NET_ADMIN).
    Create,
    /// Use taps that already exist with KubeVirt's names.
    Existing,
}

#[derive(Debug, Clone)]
pub struct SetupOptions {
    pub mode: Mode,
    pub resolv_conf: PathBuf,
    /// Owner (uid, gid) of created taps, so an unprivileged QEMU can use them.
    pub tap_owner: Option<(u32, u32)>,
    /// Seed for a MAC when neither the VMI nor a pod interface has one.
    pub mac_seed: String,
    /// Where the launcher starts passt (`super::passt`); `None`: as its
    /// own child.
    pub passt_spawner: Option<super::passt::Spawner>,
}

/// The pod network could not be set up for `interface` (the VMI's name for
/// it; empty when no single interface is at fault).
#[derive(Debug)]
pub struct NetworkError {
    pub interface: String,
    pub cause: StepError,
}

impl fmt::Display for NetworkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "interface {:?}: {}", self.interface, self.cause)
    }
}

impl std::error::Error for NetworkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// The clean-up found no netlink socket (opening one failed, and was
/// logged): the links cannot be removed.
fn no_netlink() -> StepError {
    StepError::Refused("no netlink socket".into())
}

/// One undo step, in the order the work was done.
#[derive(Debug)]
enum Undo {
    DeleteLink(String),
    DeleteNftTable(&'static str),
    Sysctl {
        path: PathBuf,
        value: String,
    },
    /// Bridge binding: give the pod interface back its name, MAC,
    /// addresses and routes.
    RestorePodInterface {
        current: String,
        original: String,
        mac: Option<[u8; 6]>,
        addresses: Vec<Address>,
        routes: Vec<Route>,
    },
}

/// What the launcher did for one interface, for queries and the XML.
#[derive(Debug, Clone)]
pub struct ActiveInterface {
    pub name: String,
    pub binding: Binding,
    pub pod_interface: String,
    pub bridge: String,
    pub tap: String,
    pub mac: [u8; 6],
    pub mtu: u32,
    pub created: bool,
    /// What the DHCP server offers, if one runs.
    pub offered_v4: Option<(Ipv4Addr, u8)>,
    pub offered_v6: Option<Ipv6Addr>,
    pub status: Arc<LeaseStatus>,
    /// The MAC the DHCPv4 server answers, when one runs.
    pub client: Option<Arc<ClientMac>>,
}

impl ActiveInterface {
    pub fn report(&self) -> Value {
        json!({
            "name": self.name,
            "binding": self.binding.as_str(),
            "podInterface": self.pod_interface,
            "bridge": self.bridge,
            "tap": self.tap,
            "mac": format_mac(&self.mac),
            "mtu": self.mtu,
            "created": self.created,
            "dhcp": {
                "offered": self.offered_v4.map(|(ip, p)| format!("{ip}/{p}")),
                "leased": self.status.v4().map(|ip| ip.to_string()),
                "offeredIPv6": self.offered_v6.map(|ip| ip.to_string()),
                "leasedIPv6": self.status.v6().map(|ip| ip.to_string()),
                "offers": self.status.offers.load(std::sync::atomic::Ordering::Relaxed),
                "acks": self.status.acks.load(std::sync::atomic::Ordering::Relaxed),
                "dropped": self.status.dropped.load(std::sync::atomic::Ordering::Relaxed),
            },
        })
    }
}

/// The pod networking of a running VMI; undone on teardown or drop.
/// Each interface is set up as a part of its own (its links, rules and
/// servers), so that an interface unplugged from the running guest can be
/// released alone.
#[derive(Debug, Default)]
pub struct ActiveNetwork {
    pub interfaces: Vec<ActiveInterface>,
    undo: Vec<Undo>,
    servers: Vec<ServerThreadHandle>,
    parts: Vec<ActiveNetwork>,
    /// passt interfaces (`super::passt`).
    pub passt: Vec<super::passt::ActivePasst>,
}

/// A `ServerThread` that is Debug.
struct ServerThreadHandle(ServerThread);

impl fmt::Debug for ServerThreadHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerThread({})", self.0.name())
    }
}

impl ActiveNetwork {
    /// Stops the servers and removes everything created, newest first.
    /// Failures are logged, and the rest is still removed.
    pub fn teardown(&mut self) {
        for mut passt in self.passt.drain(..) {
            passt.stop();
        }
        while let Some(mut part) = self.parts.pop() {
            part.teardown();
        }
        for mut server in self.servers.drain(..) {
            server.0.stop();
        }
        if self.undo.is_empty() {
            return;
        }
        let mut nl = match Netlink::open() {
            Ok(nl) => Some(nl),
            Err(e) => {
                log::error!("network: cannot open netlink to clean up: {e}");
                None
            }
        };
        while let Some(step) = self.undo.pop() {
            if let Err(e) = undo(&mut nl, &step) {
                log::warn!("network: clean-up step {step:?} failed: {e}");
            }
        }
        log::info!("network: removed the launcher's bridges, taps and rules");
    }

    pub fn report(&self) -> Value {
        Value::Array(
            self.all_interfaces()
                .map(ActiveInterface::report)
                .chain(self.passt.iter().map(super::passt::ActivePasst::report))
                .collect(),
        )
    }

    pub fn interface(&self, name: &str) -> Option<&ActiveInterface> {
        self.all_interfaces().find(|i| i.name == name)
    }

    fn all_interfaces(&self) -> Box<dyn Iterator<Item = &ActiveInterface> + '_> {
        Box::new(
            self.interfaces
                .iter()
                .chain(self.parts.iter().flat_map(|p| p.all_interfaces())),
        )
    }

    /// A migration target: the guest that arrived keeps the MAC the source
    /// gave it (from the source's pod interface when the VMI names none),
    /// so each interface takes the MAC of the domain's NIC on its tap, and
    /// its DHCP server answers that MAC. Returns (interface, old, new) for
    /// each interface that changed.
    pub fn adopt_guest_macs(
        &mut self,
        domain: &crate::domxml::Domain,
    ) -> Vec<(String, [u8; 6], [u8; 6])> {
        let mut changed = Vec::new();
        self.adopt_into(domain, &mut changed);
        changed
    }

    fn adopt_into(
        &mut self,
        domain: &crate::domxml::Domain,
        changed: &mut Vec<(String, [u8; 6], [u8; 6])>,
    ) {
        for iface in &mut self.interfaces {
            let arrived = domain.devices.interfaces.iter().find_map(|nic| {
                let on_tap = nic.target.as_ref().is_some_and(|t| t.dev == iface.tap);
                on_tap
                    .then(|| nic.mac.as_ref().and_then(|m| parse_mac(&m.address)))
                    .flatten()
            });
            let Some(mac) = arrived.filter(|mac| *mac != iface.mac) else {
                continue;
            };
            if let Some(client) = &iface.client {
                client.set(mac);
            }
            changed.push((iface.name.clone(), iface.mac, mac));
            iface.mac = mac;
        }
        for part in &mut self.parts {
            part.adopt_into(domain, changed);
        }
    }

    /// True when no interface was set up.
    pub fn is_empty(&self) -> bool {
        self.all_interfaces().next().is_none()
    }

    /// Takes over what `other` set up (an interface plugged into the
    /// running guest): removed with the rest, or alone by [`release`].
    ///
    /// [`release`]: ActiveNetwork::release
    pub fn absorb(&mut self, other: ActiveNetwork) {
        self.parts.push(other);
    }

    /// Stops the servers and removes the links and rules of interface
    /// `name` (unplugged from the guest); false when nothing was set up
    /// for it.
    pub fn release(&mut self, name: &str) -> bool {
        let Some(index) = self
            .parts
            .iter()
            .position(|p| p.all_interfaces().any(|i| i.name == name))
        else {
            return false;
        };
        let mut part = self.parts.remove(index);
        part.teardown();
        log::info!("network: released the bridge, tap and servers of interface {name:?}");
        true
    }
}

impl Drop for ActiveNetwork {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn undo(nl: &mut Option<Netlink>, step: &Undo) -> Result<(), StepError> {
    match step {
        Undo::DeleteNftTable(family) => Ok(nft::delete_table(family)?),
        Undo::Sysctl { path, value } => fs::write(path, value)
            .map_err(|e| StepError::os(format!("cannot set {} to {value}", path.display()), e)),
        Undo::DeleteLink(name) => {
            let nl = nl.as_mut().ok_or_else(no_netlink)?;
            match nl.link(name).map_err(io_err("cannot read links"))? {
                Some(link) => nl
                    .delete_link(link.index)
                    .map_err(|e| StepError::os(format!("cannot delete {name}"), e)),
                None => Ok(()),
            }
        }
        Undo::RestorePodInterface {
            current,
            original,
            mac,
            addresses,
            routes,
        } => {
            let nl = nl.as_mut().ok_or_else(no_netlink)?;
            let link = nl
                .link(current)
                .map_err(io_err("cannot read links"))?
                .ok_or_else(|| StepError::Refused(format!("{current} is gone")))?;
            nl.change_link(
                link.index,
                &LinkChange {
                    up: Some(false),
                    master: Some(0),
                    ..LinkChange::default()
                },
            )
            .map_err(|e| StepError::os(format!("cannot take {current} down"), e))?;
            nl.change_link(
                link.index,
                &LinkChange {
                    name: Some(original.clone()),
                    mac: *mac,
                    ..LinkChange::default()
                },
            )
            .map_err(|e| StepError::os(format!("cannot rename {current} back to {original}"), e))?;
            nl.change_link(
                link.index,
                &LinkChange {
                    up: Some(true),
                    ..LinkChange::default()
                },
            )
            .map_err(|e| StepError::os(format!("cannot bring {original} up"), e))?;
            for address in addresses {
                if let Err(e) = nl.add_address(link.index, address, netlink::IFA_F_NODAD) {
                    log::warn!(
                        "network: cannot give {} back to {original}: {e}",
                        address.ip
                    );
                }
            }
            // Routes through a gateway need the on-link ones first.
            let mut ordered: Vec<&Route> = routes.iter().filter(|r| r.gateway.is_none()).collect();
            ordered.extend(routes.iter().filter(|r| r.gateway.is_some()));
            for route in ordered {
                if let Err(e) = nl.add_route(link.index, route)
                    && e.kind() != std::io::ErrorKind::AlreadyExists
                {
                    log::warn!("network: cannot restore route {route:?} on {original}: {e}");
                }
            }
            Ok(())
        }
    }
}

/// Reads the pod's resolv.conf; missing or unreadable gives KubeVirt's
/// defaults, with a warning.
pub fn pod_dns(path: &Path) -> PodDns {
    match fs::read_to_string(path) {
        Ok(text) => {
            let dns = resolv::parse(&text);
            if !dns.rejected.is_empty() {
                log::warn!(
                    "network: ignoring invalid search domains in {}: {:?}",
                    path.display(),
                    dns.rejected
                );
            }
            dns
        }
        Err(e) => {
            log::warn!(
                "network: cannot read {} ({e}); the guest gets DNS server {} and search domain {}",
                path.display(),
                resolv::DEFAULT_DNS,
                resolv::DEFAULT_SEARCH_DOMAIN
            );
            resolv::parse("")
        }
    }
}

/// A locally administered unicast MAC derived from `seed` (the VMI's
/// identity), for an interface with no MAC from the VMI or the pod.
pub fn derived_mac(seed: &str, interface: &str) -> [u8; 6] {
    let digest = super::names::sha256(format!("{seed}/{interface}").as_bytes());
    [0x02, digest[0], digest[1], digest[2], digest[3], digest[4]]
}

/// Sets up every interface of `plan`; on failure undoes what was done.
pub fn setup(plan: &NetworkPlan, options: &SetupOptions) -> Result<ActiveNetwork, NetworkError> {
    let started = std::time::Instant::now();
    let mut active = ActiveNetwork::default();
    if plan.taps.is_empty() {
        return Ok(active);
    }
    let general = |cause: StepError| NetworkError {
        interface: String::new(),
        cause,
    };
    if options.mode == Mode::Create && !os_net::has_cap_net_admin() {
        // Without the capability every step would fail half-way with
        // EPERM; say so before touching anything.
        let uid = crate::os::effective_ids().0;
        return Err(general(StepError::Refused(format!(
            "the launcher (uid {uid}) lacks CAP_NET_ADMIN, so it cannot create bridges, taps \
             and rules (--pod-network=setup); run it with that capability, or use \
             --pod-network=existing with taps created for it ({})",
            plan.taps
                .iter()
                .map(|t| t.tap.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))));
    }
    let mut nl = Netlink::open().map_err(|e| general(StepError::os("cannot open netlink", e)))?;
    let dns = pod_dns(&options.resolv_conf);
    for tap in &plan.taps {
        let mut part = ActiveNetwork::default();
        let result = match options.mode {
            Mode::Create => create_interface(&mut nl, &mut part, tap, plan, &dns, options),
            Mode::Existing => adopt_interface(&mut nl, &mut part, tap, plan, &dns, options),
        };
        if let Err(cause) = result {
            // `part` and `active` drop here: servers stop, links and rules
            // go, this interface's first.
            return Err(NetworkError {
                interface: tap.name.clone(),
                cause,
            });
        }
        active.absorb(part);
    }
    // The figure `scripts/bench.sh network` reports for a real start.
    log::info!(
        "network: set up {} interface(s) in {:.1} ms",
        plan.taps.len(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(active)
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> StepError + '_ {
    move |e| StepError::os(what, e)
}

fn set_sysctl(active: &mut ActiveNetwork, path: &str, value: &str) -> Result<(), StepError> {
    let path = PathBuf::from(path);
    let old = fs::read_to_string(&path)
        .map_err(|e| StepError::os(format!("cannot read {}", path.display()), e))?;
    if old.trim() == value {
        return Ok(());
    }
    fs::write(&path, value)
        .map_err(|e| StepError::os(format!("cannot set {} to {value}", path.display()), e))?;
    active.undo.push(Undo::Sysctl {
        path,
        value: old.trim().to_string(),
    });
    Ok(())
}

/// Creates bridge `name` (recorded for removal) and returns its index.
fn create_bridge(
    nl: &mut Netlink,
    active: &mut ActiveNetwork,
    name: &str,
    mtu: u32,
    mac: Option<[u8; 6]>,
) -> Result<u32, StepError> {
    nl.create_link(name, "bridge", Some(mtu), mac).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            StepError::Refused(format!("bridge {name} already exists in this network namespace (another launcher's, or left behind?)"))
        } else {
            StepError::os(format!("cannot create bridge {name}"), e)
        }
    })?;
    active.undo.push(Undo::DeleteLink(name.to_string()));
    let link = nl
        .link(name)
        .map_err(io_err("cannot read links"))?
        .ok_or_else(|| StepError::Refused(format!("bridge {name} vanished")))?;
    Ok(link.index)
}

/// Creates the tap, in `bridge`, up.
fn create_tap(
    nl: &mut Netlink,
    active: &mut ActiveNetwork,
    tap: &TapInterface,
    bridge_index: u32,
    mtu: u32,
    owner: Option<(u32, u32)>,
) -> Result<(), StepError> {
    if nl
        .link(&tap.tap)
        .map_err(io_err("cannot read links"))?
        .is_some()
    {
        return Err(StepError::Refused(format!(
            "tap {} already exists in this network namespace (another launcher's, or left behind?)",
            tap.tap
        )));
    }
    os_net::create_tap(&tap.tap, tap.queues > 1, owner)
        .map_err(|e| StepError::os(format!("cannot create tap {} on /dev/net/tun", tap.tap), e))?;
    active.undo.push(Undo::DeleteLink(tap.tap.clone()));
    let link = nl
        .link(&tap.tap)
        .map_err(io_err("cannot read links"))?
        .ok_or_else(|| StepError::Refused(format!("tap {} vanished", tap.tap)))?;
    nl.change_link(
        link.index,
        &LinkChange {
            up: Some(true),
            mtu: Some(mtu),
            master: Some(bridge_index),
            ..LinkChange::default()
        },
    )
    .map_err(io_err("cannot attach the tap to its bridge"))
}

fn create_interface(
    nl: &mut Netlink,
    active: &mut ActiveNetwork,
    tap: &TapInterface,
    plan: &NetworkPlan,
    dns: &PodDns,
    options: &SetupOptions,
) -> Result<(), StepError> {
    let pod = nl
        .link(&tap.pod_interface)
        .map_err(io_err("cannot read links"))?
        .ok_or_else(|| {
            StepError::Refused(format!(
                "pod interface {} does not exist in the launcher's network namespace",
                tap.pod_interface
            ))
        })?;
    let addresses: Vec<Address> = nl
        .addresses(pod.index)
        .map_err(io_err("cannot read addresses"))?
        .into_iter()
        .filter(Address::is_global)
        .collect();
    let has_v4 = addresses.iter().any(|a| a.ip.is_ipv4());
    let has_v6 = addresses.iter().any(|a| a.ip.is_ipv6());
    let mtu = pod.mtu;
    let mac = tap
        .mac
        .or(pod.mac)
        .unwrap_or_else(|| derived_mac(&options.mac_seed, &tap.name));
    let status = Arc::new(LeaseStatus::default());
    let mut offered_v4 = None;
    let mut offered_v6 = None;
    let mut client = None;
    match tap.binding {
        Binding::Masquerade => {
            if !has_v4 && !has_v6 {
                return Err(StepError::Refused(format!(
                    "pod interface {} has no global address to masquerade behind",
                    tap.pod_interface
                )));
            }
            let bridge = create_bridge(nl, active, &tap.bridge, mtu, Some(MASQUERADE_BRIDGE_MAC))?;
            let (gw4, guest4) = tap.masquerade_v4();
            let (gw6, guest6) = tap.masquerade_v6();
            if has_v4 {
                let address = Address {
                    ip: IpAddr::V4(gw4),
                    prefix: tap.v4_cidr.1,
                    scope: 0,
                };
                nl.add_address(bridge, &address, 0)
                    .map_err(io_err("cannot give the bridge its gateway address"))?;
                set_sysctl(active, "/proc/sys/net/ipv4/ip_forward", "1")?;
                set_sysctl(
                    active,
                    &format!("/proc/sys/net/ipv4/conf/{}/route_localnet", tap.bridge),
                    "1",
                )?;
            }
            if has_v6 {
                let address = Address {
                    ip: IpAddr::V6(gw6),
                    prefix: tap.v6_cidr.1,
                    scope: 0,
                };
                nl.add_address(bridge, &address, netlink::IFA_F_NODAD)
                    .map_err(io_err("cannot give the bridge its IPv6 gateway address"))?;
                set_sysctl(active, "/proc/sys/net/ipv6/conf/all/forwarding", "1")?;
            }
            create_tap(nl, active, tap, bridge, mtu, options.tap_owner)?;
            nl.change_link(
                bridge,
                &LinkChange {
                    up: Some(true),
                    ..LinkChange::default()
                },
            )
            .map_err(io_err("cannot bring the bridge up"))?;
            for (enabled, guest, gateway, family) in [
                (has_v4, IpAddr::V4(guest4), IpAddr::V4(gw4), "ip"),
                (has_v6, IpAddr::V6(guest6), IpAddr::V6(gw6), "ip6"),
            ] {
                if !enabled {
                    continue;
                }
                let rules = nft::MasqueradeRules {
                    pod_interface: tap.pod_interface.clone(),
                    bridge: tap.bridge.clone(),
                    guest,
                    gateway,
                    forwards: tap.forwards.clone(),
                };
                nft::apply(&nft::script(&rules))?;
                active.undo.push(Undo::DeleteNftTable(family));
            }
            if has_v4 {
                let lease = LeaseConfig {
                    client_mac: mac,
                    address: guest4,
                    prefix: tap.v4_cidr.1,
                    server: gw4,
                    router: Some(gw4),
                    routes: Vec::new(),
                    dns_servers: dns.ipv4.clone(),
                    search_domains: dns.search.clone(),
                    hostname: plan.hostname.clone(),
                    mtu: u16::try_from(mtu).unwrap_or(u16::MAX),
                    extra: tap.dhcp.clone(),
                };
                client = Some(start_dhcp4(active, &tap.bridge, lease, status.clone())?);
                offered_v4 = Some((guest4, tap.v4_cidr.1));
            }
            if has_v6 {
                offered_v6 = Some(start_v6(active, tap, dns, mtu, &status)?);
            }
        }
        Binding::Bridge => {
            let routes = nl.routes(pod.index).map_err(io_err("cannot read routes"))?;
            let v4 = addresses.iter().find(|a| a.ip.is_ipv4()).copied();
            let bridge = create_bridge(nl, active, &tap.bridge, mtu, None)?;
            let bridge_mac = nl
                .link(&tap.bridge)
                .map_err(io_err("cannot read links"))?
                .and_then(|l| l.mac);
            // The pod interface becomes a bridge port: down, renamed,
            // addresses gone, the bridge's MAC (the guest takes the pod's).
            let renamed = super::names::bridged_pod_interface(&tap.pod_interface);
            nl.change_link(
                pod.index,
                &LinkChange {
                    up: Some(false),
                    ..LinkChange::default()
                },
            )
            .map_err(io_err("cannot take the pod interface down"))?;
            active.undo.push(Undo::RestorePodInterface {
                current: renamed.clone(),
                original: tap.pod_interface.clone(),
                mac: pod.mac,
                addresses: addresses.clone(),
                routes: routes.clone(),
            });
            for address in &addresses {
                // Taking the link down already dropped its IPv6 addresses.
                match nl.delete_address(pod.index, address) {
                    Err(e) if e.raw_os_error() != Some(libc::EADDRNOTAVAIL) => {
                        return Err(StepError::os(
                            format!("cannot move the pod address {}", address.ip),
                            e,
                        ));
                    }
                    _ => {}
                }
            }
            nl.change_link(
                pod.index,
                &LinkChange {
                    name: Some(renamed.clone()),
                    mac: bridge_mac,
                    ..LinkChange::default()
                },
            )
            .map_err(io_err("cannot rename the pod interface"))?;
            nl.change_link(
                pod.index,
                &LinkChange {
                    up: Some(true),
                    master: Some(bridge),
                    ..LinkChange::default()
                },
            )
            .map_err(io_err("cannot attach the pod interface to the bridge"))?;
            // The CNI still sees its interface and addresses, on a dummy
            // (not on kernels without the dummy driver).
            match nl.create_link(&tap.pod_interface, "dummy", Some(mtu), pod.mac) {
                Ok(()) => {
                    active
                        .undo
                        .push(Undo::DeleteLink(tap.pod_interface.clone()));
                    let dummy = nl
                        .link(&tap.pod_interface)
                        .map_err(io_err("cannot read links"))?
                        .ok_or_else(|| StepError::Refused("the dummy vanished".into()))?;
                    for address in &addresses {
                        nl.add_address(dummy.index, address, netlink::IFA_F_NODAD)
                            .map_err(io_err("cannot give the dummy the pod address"))?;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    log::warn!(
                        "network {}: this kernel has no dummy interfaces; {} keeps no address in the pod",
                        tap.name,
                        tap.pod_interface
                    );
                }
                Err(e) => return Err(StepError::os("cannot create the pod interface's dummy", e)),
            }
            if v4.is_some() {
                set_sysctl(active, "/proc/sys/net/ipv4/conf/all/arp_ignore", "1")?;
            }
            create_tap(nl, active, tap, bridge, mtu, options.tap_owner)?;
            // The DHCP server's own address (KubeVirt's fake bridge IP).
            let server_ip = Ipv4Addr::new(
                169,
                254,
                75,
                10u8.saturating_add(u8::try_from(tap.position).unwrap_or(u8::MAX)),
            );
            nl.add_address(
                bridge,
                &Address {
                    ip: IpAddr::V4(server_ip),
                    prefix: 32,
                    scope: 0,
                },
                0,
            )
            .map_err(io_err("cannot give the bridge the DHCP server's address"))?;
            nl.change_link(
                bridge,
                &LinkChange {
                    up: Some(true),
                    ..LinkChange::default()
                },
            )
            .map_err(io_err("cannot bring the bridge up"))?;
            if let Some(Address {
                ip: IpAddr::V4(address),
                prefix,
                ..
            }) = v4
            {
                let lease = bridge_lease(
                    mac, address, prefix, server_ip, &routes, dns, plan, mtu, tap,
                );
                client = Some(start_dhcp4(active, &tap.bridge, lease, status.clone())?);
                offered_v4 = Some((address, prefix));
            } else {
                log::info!(
                    "network {}: the pod interface has no IPv4 address; no DHCP server (IPAM disabled)",
                    tap.name
                );
            }
        }
        Binding::Passt | Binding::Slirp | Binding::Plugin => return Ok(()),
    }
    log::info!(
        "network {}: {} binding on {} (bridge {}, tap {}, MAC {}, MTU {mtu})",
        tap.name,
        tap.binding.as_str(),
        tap.pod_interface,
        tap.bridge,
        tap.tap,
        format_mac(&mac)
    );
    active.interfaces.push(ActiveInterface {
        name: tap.name.clone(),
        binding: tap.binding,
        pod_interface: tap.pod_interface.clone(),
        bridge: tap.bridge.clone(),
        tap: tap.tap.clone(),
        mac,
        mtu,
        created: true,
        offered_v4,
        offered_v6,
        status,
        client,
    });
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn bridge_lease(
    mac: [u8; 6],
    address: Ipv4Addr,
    prefix: u8,
    server_ip: Ipv4Addr,
    routes: &[Route],
    dns: &PodDns,
    plan: &NetworkPlan,
    mtu: u32,
    tap: &TapInterface,
) -> LeaseConfig {
    let v4_routes: Vec<&Route> = routes
        .iter()
        .filter(|r| {
            matches!(r.gateway, Some(IpAddr::V4(_)))
                || matches!(r.destination, Some((IpAddr::V4(_), _)))
        })
        .collect();
    let router = v4_routes
        .iter()
        .find_map(|r| match (r.destination, r.gateway) {
            (None, Some(IpAddr::V4(gw))) => Some(gw),
            (Some((_, 0)), Some(IpAddr::V4(gw))) => Some(gw),
            _ => None,
        });
    // Other routes through a gateway: not the local subnet, not default.
    let extra = v4_routes
        .iter()
        .filter_map(|r| match (r.destination, r.gateway) {
            (Some((IpAddr::V4(dst), len)), Some(IpAddr::V4(gw))) if len > 0 => {
                Some(ClasslessRoute {
                    destination: dst,
                    prefix: len,
                    gateway: gw,
                })
            }
            _ => None,
        })
        .collect();
    LeaseConfig {
        client_mac: mac,
        address,
        prefix,
        server: server_ip,
        router,
        routes: extra,
        dns_servers: dns.ipv4.clone(),
        search_domains: dns.search.clone(),
        hostname: plan.hostname.clone(),
        mtu: u16::try_from(mtu).unwrap_or(u16::MAX),
        extra: tap.dhcp.clone(),
    }
}

/// Starts the DHCPv4 server; returns the MAC it answers, to change later.
fn start_dhcp4(
    active: &mut ActiveNetwork,
    device: &str,
    lease: LeaseConfig,
    status: Arc<LeaseStatus>,
) -> Result<Arc<ClientMac>, StepError> {
    let socket = os_net::udp_on_device(false, server::DHCP_SERVER_PORT, device)
        .map_err(io_err("cannot open the DHCP server's socket (port 67)"))?;
    let answerer = Answerer::new(lease);
    let client = answerer.client();
    let thread = server::spawn_dhcp4(device, socket, answerer, ReplyRoute::Standard, status)
        .map_err(io_err("cannot start the DHCP server"))?;
    active.servers.push(ServerThreadHandle(thread));
    Ok(client)
}

/// Starts the DHCPv6 server and the router advertiser of a masquerade
/// bridge that holds the IPv6 gateway.
fn start_v6(
    active: &mut ActiveNetwork,
    tap: &TapInterface,
    dns: &PodDns,
    mtu: u32,
    status: &Arc<LeaseStatus>,
) -> Result<Ipv6Addr, StepError> {
    let (_, guest6) = tap.masquerade_v6();
    let lease = V6Lease {
        address: guest6,
        server_mac: MASQUERADE_BRIDGE_MAC,
        dns_servers: dns.ipv6.clone(),
        search_domains: dns.search.clone(),
    };
    let server = server::spawn_dhcp6(&tap.bridge, lease, status.clone())
        .map_err(io_err("cannot start the DHCPv6 server"))?;
    active.servers.push(ServerThreadHandle(server));
    let advertisement = Advertisement {
        router_mac: MASQUERADE_BRIDGE_MAC,
        mtu,
        prefix: tap.v6_cidr.0,
        prefix_len: tap.v6_cidr.1,
    };
    let ra = server::spawn_router_advertiser(&tap.bridge, advertisement, status.clone())
        .map_err(io_err("cannot start the router advertiser"))?;
    active.servers.push(ServerThreadHandle(ra));
    Ok(guest6)
}

/// Without CAP_NET_ADMIN: the tap must exist (created for the launcher,
/// as KubeVirt's virt-handler does). A masquerade bridge that exists gets
/// the DHCP server, as KubeVirt's launcher runs it.
fn adopt_interface(
    nl: &mut Netlink,
    active: &mut ActiveNetwork,
    tap: &TapInterface,
    plan: &NetworkPlan,
    dns: &PodDns,
    options: &SetupOptions,
) -> Result<(), StepError> {
    let existing = nl.link(&tap.tap).map_err(io_err("cannot read links"))?;
    let Some(tap_link) = existing else {
        return Err(StepError::Refused(format!(
            "{} binding needs tap {}, which does not exist, and the launcher does not create it here \
             (it creates taps with CAP_NET_ADMIN in a pod's network namespace; see --pod-network). \
             Create it, or ask for user-mode networking with binding: {{name: slirp}}",
            tap.binding.as_str(),
            tap.tap
        )));
    };
    let pod = nl
        .link(&tap.pod_interface)
        .map_err(io_err("cannot read links"))?;
    let mac = tap
        .mac
        .or(pod.as_ref().and_then(|p| p.mac))
        .unwrap_or_else(|| derived_mac(&options.mac_seed, &tap.name));
    let mtu = pod.as_ref().map(|p| p.mtu).unwrap_or(tap_link.mtu);
    let status = Arc::new(LeaseStatus::default());
    let mut offered_v4 = None;
    let mut offered_v6 = None;
    let mut client = None;
    if tap.binding == Binding::Masquerade
        && let Some(bridge) = nl.link(&tap.bridge).map_err(io_err("cannot read links"))?
    {
        let (gw4, guest4) = tap.masquerade_v4();
        let (gw6, _) = tap.masquerade_v6();
        let bridge_addresses = nl
            .addresses(bridge.index)
            .map_err(io_err("cannot read addresses"))?;
        let has_gateway = bridge_addresses.iter().any(|a| a.ip == IpAddr::V4(gw4));
        // KubeVirt's handler gives the bridge fd10:0:2::1 when the pod has
        // IPv6; the launcher then answers DHCPv6 and router solicitations.
        let has_gateway6 = bridge_addresses.iter().any(|a| a.ip == IpAddr::V6(gw6));
        if has_gateway6 {
            offered_v6 = Some(start_v6(active, tap, dns, mtu, &status)?);
        }
        if has_gateway {
            let lease = LeaseConfig {
                client_mac: mac,
                address: guest4,
                prefix: tap.v4_cidr.1,
                server: gw4,
                router: Some(gw4),
                routes: Vec::new(),
                dns_servers: dns.ipv4.clone(),
                search_domains: dns.search.clone(),
                hostname: plan.hostname.clone(),
                mtu: u16::try_from(mtu).unwrap_or(u16::MAX),
                extra: tap.dhcp.clone(),
            };
            client = Some(start_dhcp4(active, &tap.bridge, lease, status.clone())?);
            offered_v4 = Some((guest4, tap.v4_cidr.1));
        }
    }
    log::info!(
        "network {}: using the existing tap {} (MAC {}, MTU {mtu}){}",
        tap.name,
        tap.tap,
        format_mac(&mac),
        match (offered_v4.is_some(), offered_v6.is_some()) {
            (true, true) => ", DHCP, DHCPv6 and router advertisements on the bridge",
            (true, false) => ", DHCP server on the bridge",
            (false, true) => ", DHCPv6 and router advertisements on the bridge",
            (false, false) => "",
        }
    );
    active.interfaces.push(ActiveInterface {
        name: tap.name.clone(),
        binding: tap.binding,
        pod_interface: tap.pod_interface.clone(),
        bridge: tap.bridge.clone(),
        tap: tap.tap.clone(),
        mac,
        mtu,
        created: false,
        offered_v4,
        offered_v6,
        status,
        client,
    });
    Ok(())
}

/// Puts what set-up decided into the domain: each tap interface's MAC and
/// MTU (KubeVirt's TapLibvirtSpecGenerator).
pub fn patch_domain(domain: &mut crate::domxml::Domain, active: &ActiveNetwork) {
    for nic in &mut domain.devices.interfaces {
        let Some(alias) = nic.alias.as_ref().map(|a| a.name.clone()) else {
            continue;
        };
        let Some(name) = alias.strip_prefix("ua-") else {
            continue;
        };
        if let Some(iface) = active.interface(name) {
            nic.mac = Some(crate::domxml::MacAddress {
                address: format_mac(&iface.mac),
            });
            nic.mtu = Some(crate::domxml::Mtu { size: iface.mtu });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::dhcp::tests_support::lease;

    fn interface(
        name: &str,
        tap: &str,
        mac: [u8; 6],
        client: Option<Arc<ClientMac>>,
    ) -> ActiveInterface {
        ActiveInterface {
            name: name.into(),
            binding: Binding::Masquerade,
            pod_interface: "eth0".into(),
            bridge: "k6t-eth0".into(),
            tap: tap.into(),
            mac,
            mtu: 1500,
            created: true,
            offered_v4: Some((Ipv4Addr::new(10, 0, 2, 2), 24)),
            offered_v6: None,
            status: Arc::new(LeaseStatus::default()),
            client,
        }
    }

    /// A migration target set up from its own pod interface's MAC; the
    /// domain that arrives carries the source's: the target adopts it,
    /// and its DHCP server answers the guest's renewals.
    #[test]
    fn a_migration_target_answers_the_mac_the_guest_arrived_with() {
        let target_pod_mac = [0x0a, 0x58, 0x0a, 0xf4, 0, 9];
        let source_mac = [0x0a, 0x58, 0x0a, 0xf4, 0, 7];
        let answerer = Answerer::new(LeaseConfig {
            client_mac: target_pod_mac,
            ..lease()
        });
        // Each interface is a part of its own, as set-up makes them.
        let mut active = ActiveNetwork::default();
        let mut part = ActiveNetwork::default();
        part.interfaces.push(interface(
            "default",
            "tap0",
            target_pod_mac,
            Some(answerer.client()),
        ));
        active.absorb(part);
        let mut part = ActiveNetwork::default();
        part.interfaces.push(interface(
            "blue",
            "tap7c2f1d0a0b1",
            [2, 0, 0, 0, 0, 0x0b],
            None,
        ));
        active.absorb(part);
        let domain = crate::domxml::Domain::from_xml(
            "<domain type='kvm'><name>e2e_vm</name><devices>\
             <interface type='ethernet'><mac address='0a:58:0a:f4:00:07'/>\
             <target dev='tap0' managed='no'/><alias name='ua-default'/></interface>\
             <interface type='ethernet'><mac address='02:00:00:00:00:0b'/>\
             <target dev='tap7c2f1d0a0b1' managed='no'/></interface>\
             <interface type='user'><mac address='52:54:00:00:00:01'/></interface>\
             </devices></domain>",
        )
        .unwrap();
        let changed = active.adopt_guest_macs(&domain);
        assert_eq!(
            changed,
            vec![("default".to_string(), target_pod_mac, source_mac)]
        );
        assert_eq!(active.interface("default").map(|i| i.mac), Some(source_mac));
        assert_eq!(active.report()[0]["mac"], "0a:58:0a:f4:00:07");
        let renew = crate::network::dhcp::wire::client_message(
            crate::network::dhcp::wire::MessageType::Discover,
            source_mac,
            1,
            &[],
        );
        assert!(matches!(
            answerer.answer(&renew),
            crate::network::dhcp::Outcome::Reply { .. }
        ));
        // Nothing changes a second time.
        assert!(active.adopt_guest_macs(&domain).is_empty());
    }
}
