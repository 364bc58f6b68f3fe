//! Which pod-network work a VMI needs, decided from the VMI alone: for
//! each tap-based interface (masquerade, bridge) its KubeVirt names,
//! addresses, forwarded ports and DHCP options. Pure; `super::setup`
//! carries it out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::dhcp::{ExtraOptions, parse_mac};
use super::names;
use super::nft::{Forward, Protocol};
use crate::vmi::{Interface, InterfaceState, Network, PortProtocol, VirtualMachineInstance};

/// KubeVirt's default VM networks (api.DefaultVMCIDR, DefaultVMIpv6CIDR).
pub const DEFAULT_V4_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 0, 2, 0), 24);
pub const DEFAULT_V6_CIDR: (Ipv6Addr, u8) = (Ipv6Addr::new(0xfd10, 0, 2, 0, 0, 0, 0, 0), 120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    Masquerade,
    Bridge,
    /// libvirt's `<backend type='passt'/>`.
    Passt,
    /// QEMU's user-mode networking, only when asked for by name.
    Slirp,
    /// A network binding plugin this launcher does not implement: the
    /// plugin provides the interface, its CNI a tap (`tap` domain
    /// attachment) or its sidecar the whole device (no attachment). Only
    /// virt-handler's options say which (`interfaceDomainAttachment`).
    Plugin,
}

impl Binding {
    pub fn as_str(self) -> &'static str {
        match self {
            Binding::Masquerade => "masquerade",
            Binding::Bridge => "bridge",
            Binding::Passt => "passt",
            Binding::Slirp => "slirp",
            Binding::Plugin => "plugin",
        }
    }

    pub fn uses_tap(self) -> bool {
        matches!(self, Binding::Masquerade | Binding::Bridge)
    }
}

/// Why an interface's binding cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    pub path: String,
    pub message: String,
}

/// The binding an interface asks for; masquerade when none is named (the
/// VMI's defaults, as KubeVirt's mutating webhook sets them).
pub fn binding_of(interface: &Interface, path: &str) -> Result<Binding, PlanError> {
    let err = |message: &str| PlanError {
        path: path.to_string(),
        message: message.to_string(),
    };
    let mut found = Vec::new();
    if interface.masquerade.is_some() {
        found.push(Binding::Masquerade);
    }
    if interface.bridge.is_some() {
        found.push(Binding::Bridge);
    }
    if interface.slirp.is_some() {
        found.push(Binding::Slirp);
    }
    if interface.passt_binding.is_some() {
        found.push(Binding::Passt);
    }
    if let Some(plugin) = &interface.binding {
        match plugin.name.as_str() {
            "passt" => found.push(Binding::Passt),
            "slirp" => found.push(Binding::Slirp),
            "" => {
                return Err(PlanError {
                    path: format!("{path}.binding.name"),
                    message: "a network binding plugin needs a name".to_string(),
                });
            }
            _ => found.push(Binding::Plugin),
        }
    }
    match found.as_slice() {
        [] => Ok(Binding::Masquerade),
        [one] => Ok(*one),
        _ => Err(err(
            "set only one of bridge, masquerade, slirp, passtBinding or binding",
        )),
    }
}

/// A multus network that is not the default one gets a hashed pod
/// interface; everything else is the pod's primary interface.
pub fn is_secondary(network: &Network) -> bool {
    network.multus.as_ref().is_some_and(|m| !m.default)
}

/// One masquerade or bridge interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapInterface {
    /// The VMI interface (and network) name.
    pub name: String,
    /// Position among the VMI's interfaces (KubeVirt's fake bridge IP).
    pub position: usize,
    pub binding: Binding,
    pub secondary: bool,
    pub pod_interface: String,
    pub bridge: String,
    pub tap: String,
    /// The VMI's `macAddress`.
    pub mac: Option<[u8; 6]>,
    /// Queues for a multi-queue tap (0 or 1: single queue).
    pub queues: u32,
    pub v4_cidr: (Ipv4Addr, u8),
    pub v6_cidr: (Ipv6Addr, u8),
    pub forwards: Vec<Forward>,
    pub dhcp: ExtraOptions,
}

impl TapInterface {
    /// masquerade: (gateway, guest) — the second and third addresses of
    /// the VM network, as KubeVirt picks them.
    pub fn masquerade_v4(&self) -> (Ipv4Addr, Ipv4Addr) {
        let base = u32::from(self.v4_cidr.0);
        (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
    }

    pub fn masquerade_v6(&self) -> (Ipv6Addr, Ipv6Addr) {
        let base = u128::from(self.v6_cidr.0);
        (Ipv6Addr::from(base + 1), Ipv6Addr::from(base + 2))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPlan {
    pub taps: Vec<TapInterface>,
    /// Interfaces that use slirp (logged with a warning).
    pub slirp: Vec<String>,
    /// Interfaces with the passt binding (`super::passt`); whether libvirt
    /// or the launcher runs passt, and its socket, are filled in by the
    /// caller, which knows the libvirt version and the private directory.
    pub passt: Vec<super::passt::PasstPlan>,
    /// The guest's host name, sent by DHCP.
    pub hostname: String,
}

/// Plans the VMI's pod networking. `queues` gives the tap queue count for
/// an interface (from the converted domain).
pub fn plan(
    vmi: &VirtualMachineInstance,
    interfaces: &[Interface],
    networks: &[Network],
    queues: impl Fn(&str) -> u32,
) -> Result<NetworkPlan, PlanError> {
    let mut out = NetworkPlan {
        hostname: vmi
            .spec
            .hostname
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| vmi.name().to_string()),
        ..NetworkPlan::default()
    };
    for (position, interface) in interfaces.iter().enumerate() {
        let path = format!("spec.domain.devices.interfaces[{position}]");
        // SR-IOV interfaces are host devices: no pod networking.
        if interface.sriov.is_some() {
            continue;
        }
        if interface.state == Some(InterfaceState::Absent) {
            continue;
        }
        let Some((network_index, network)) = networks
            .iter()
            .enumerate()
            .find(|(_, n)| n.name == interface.name)
        else {
            // The converter reports a missing network.
            continue;
        };
        let binding = binding_of(interface, &path)?;
        let secondary = is_secondary(network);
        let net_path = format!("spec.networks[{network_index}]");
        match binding {
            // The plugin's CNI (or sidecar) did the pod's side.
            Binding::Plugin => continue,
            Binding::Slirp | Binding::Passt | Binding::Masquerade if network.pod.is_none() => {
                return Err(PlanError {
                    path,
                    message: format!(
                        "{} binding needs a pod network; network {:?} is a multus network (use bridge)",
                        binding.as_str(),
                        network.name
                    ),
                });
            }
            Binding::Slirp => {
                out.slirp.push(interface.name.clone());
                continue;
            }
            Binding::Passt => {
                let (tcp, udp) = super::passt::port_specs(interface);
                out.passt.push(super::passt::PasstPlan {
                    name: interface.name.clone(),
                    tcp,
                    udp,
                    by_libvirt: false,
                    socket: std::path::PathBuf::new(),
                });
                continue;
            }
            Binding::Masquerade | Binding::Bridge => {}
        }
        let pod_interface = if secondary {
            names::hashed_pod_interface(&network.name)
        } else {
            names::PRIMARY_POD_INTERFACE.to_string()
        };
        let mac = match interface.mac_address.as_deref() {
            Some(text) => Some(parse_mac(text).ok_or_else(|| PlanError {
                path: format!("{path}.macAddress"),
                message: format!("{text:?} is not a MAC address"),
            })?),
            None => None,
        };
        let pod = network.pod.as_ref();
        let v4_cidr = match pod
            .and_then(|p| p.vm_network_cidr.as_deref())
            .filter(|c| !c.is_empty())
        {
            Some(cidr) => parse_vm_cidr(cidr, false, &format!("{net_path}.pod.vmNetworkCIDR"))?,
            None => (IpAddr::V4(DEFAULT_V4_CIDR.0), DEFAULT_V4_CIDR.1),
        };
        let v6_cidr = match pod
            .and_then(|p| p.vm_ipv6_network_cidr.as_deref())
            .filter(|c| !c.is_empty())
        {
            Some(cidr) => parse_vm_cidr(cidr, true, &format!("{net_path}.pod.vmIPv6NetworkCIDR"))?,
            None => (IpAddr::V6(DEFAULT_V6_CIDR.0), DEFAULT_V6_CIDR.1),
        };
        let (IpAddr::V4(v4), IpAddr::V6(v6)) = (v4_cidr.0, v6_cidr.0) else {
            return Err(PlanError {
                path: net_path,
                message: "VM network CIDR of the wrong family".into(),
            });
        };
        out.taps.push(TapInterface {
            name: interface.name.clone(),
            position,
            binding,
            secondary,
            bridge: names::bridge_name(&pod_interface),
            tap: names::tap_name(&pod_interface, secondary),
            pod_interface,
            mac,
            queues: queues(&interface.name),
            v4_cidr: (v4, v4_cidr.1),
            v6_cidr: (v6, v6_cidr.1),
            forwards: forwards(interface, &path)?,
            dhcp: dhcp_options(interface, &path)?,
        });
    }
    if out
        .taps
        .iter()
        .filter(|t| t.binding == Binding::Masquerade)
        .count()
        > 1
    {
        return Err(PlanError {
            path: "spec.domain.devices.interfaces".into(),
            message: "only one interface can use masquerade (it is the pod network)".into(),
        });
    }
    Ok(out)
}

/// A VM network CIDR, reduced to its network address; at least four
/// addresses (network, gateway, guest, one more), as KubeVirt requires.
fn parse_vm_cidr(cidr: &str, ipv6: bool, path: &str) -> Result<(IpAddr, u8), PlanError> {
    let invalid = |why: &str| PlanError {
        path: path.to_string(),
        message: format!("{cidr:?} {why}"),
    };
    let (address, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| invalid("is not a CIDR such as 10.0.2.0/24"))?;
    let prefix: u8 = prefix
        .parse()
        .map_err(|_| invalid("is not a CIDR such as 10.0.2.0/24"))?;
    let ip: IpAddr = address
        .parse()
        .map_err(|_| invalid("is not a CIDR such as 10.0.2.0/24"))?;
    match (ip, ipv6) {
        (IpAddr::V4(v4), false) if prefix <= 30 => {
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            Ok((IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)), prefix))
        }
        (IpAddr::V6(v6), true) if prefix <= 126 => {
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            Ok((IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)), prefix))
        }
        (_, false) if ip.is_ipv4() => Err(invalid("is too small: at least 4 addresses are needed")),
        (_, true) if ip.is_ipv6() => Err(invalid("is too small: at least 4 addresses are needed")),
        _ => Err(invalid(if ipv6 {
            "is not an IPv6 CIDR"
        } else {
            "is not an IPv4 CIDR"
        })),
    }
}

/// The checks of an interface's ports, port ranges and DHCP options, for
/// the converter: they then hold on every driver and binding, not only
/// where the launcher sets up pod networking.
pub fn check_ports_and_dhcp_options(interface: &Interface, path: &str) -> Result<(), PlanError> {
    forwards(interface, path)?;
    dhcp_options(interface, path)?;
    Ok(())
}

/// The DNAT entries of a masquerade interface: each `ports` entry, then
/// each `portRanges` entry (an empty list forwards every port).
fn forwards(interface: &Interface, path: &str) -> Result<Vec<Forward>, PlanError> {
    let protocol = |p: PortProtocol| match p {
        PortProtocol::Tcp => Protocol::Tcp,
        PortProtocol::Udp => Protocol::Udp,
    };
    let mut out = Vec::new();
    for (i, port) in interface.ports.iter().enumerate() {
        if port.port == 0 {
            return Err(PlanError {
                path: format!("{path}.ports[{i}].port"),
                message: "0 is not a port (1-65535)".into(),
            });
        }
        out.push(Forward {
            protocol: protocol(port.protocol.unwrap_or(PortProtocol::Tcp)),
            start: port.port,
            end: port.port,
        });
    }
    for (i, range) in interface.port_ranges.iter().enumerate() {
        if range.start == 0 || range.start > range.end {
            return Err(PlanError {
                path: format!("{path}.portRanges[{i}]"),
                message: format!(
                    "{}-{} is not a port range (start 1-65535, start <= end)",
                    range.start, range.end
                ),
            });
        }
        out.push(Forward {
            protocol: protocol(range.protocol),
            start: range.start,
            end: range.end,
        });
    }
    Ok(out)
}

fn dhcp_options(interface: &Interface, path: &str) -> Result<ExtraOptions, PlanError> {
    let Some(options) = &interface.dhcp_options else {
        return Ok(ExtraOptions::default());
    };
    let mut ntp_servers = Vec::new();
    for (i, server) in options.ntp_servers.iter().enumerate() {
        ntp_servers.push(server.trim().parse::<Ipv4Addr>().map_err(|_| PlanError {
            path: format!("{path}.dhcpOptions.ntpServers[{i}]"),
            message: format!("{server:?} is not an IPv4 address"),
        })?);
    }
    let mut private = Vec::new();
    for (i, option) in options.private_options.iter().enumerate() {
        let code = u8::try_from(option.option)
            .ok()
            .filter(|c| (224..=254).contains(c))
            .ok_or_else(|| PlanError {
                path: format!("{path}.dhcpOptions.privateOptions[{i}].option"),
                message: format!("{} is not a private DHCP option (224-254)", option.option),
            })?;
        private.push((code, option.value.as_bytes().to_vec()));
    }
    Ok(ExtraOptions {
        boot_file_name: options.boot_file_name.clone(),
        tftp_server_name: options.tftp_server_name.clone(),
        ntp_servers,
        private,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
        crate::vmi::parse_vmi(
            &json!({"metadata": {"name": "vm1", "namespace": "ns"}, "spec": spec}),
        )
        .unwrap_or_else(|e| panic!("{}: {}", e.path, e.message))
    }

    fn plan_of(spec: serde_json::Value) -> Result<NetworkPlan, PlanError> {
        let vmi = vmi(spec);
        plan(
            &vmi,
            &vmi.spec.domain.devices.interfaces,
            &vmi.spec.networks,
            |_| 2,
        )
    }

    #[test]
    fn masquerade_and_secondary_bridge() {
        let plan = plan_of(json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}],
                 "dhcpOptions": {"bootFileName": "boot.ipxe", "ntpServers": ["10.0.0.123"],
                                 "privateOptions": [{"option": 240, "value": "x"}]}},
                {"name": "blue", "bridge": {}, "macAddress": "02:00:00:00:00:0b"}]}},
            "networks": [{"name": "default", "pod": {"vmNetworkCIDR": "10.11.12.0/24"}},
                         {"name": "blue", "multus": {"networkName": "ns/blue"}}]}))
        .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(plan.hostname, "vm1");
        let masq = &plan.taps[0];
        assert_eq!(
            (
                masq.pod_interface.as_str(),
                masq.bridge.as_str(),
                masq.tap.as_str()
            ),
            ("eth0", "k6t-eth0", "tap0")
        );
        assert_eq!(
            masq.masquerade_v4(),
            (Ipv4Addr::new(10, 11, 12, 1), Ipv4Addr::new(10, 11, 12, 2))
        );
        assert_eq!(
            masq.masquerade_v6().1,
            "fd10:0:2::2"
                .parse::<Ipv6Addr>()
                .unwrap_or(Ipv6Addr::UNSPECIFIED)
        );
        assert_eq!(masq.forwards.len(), 2);
        assert_eq!(masq.forwards[1].protocol, Protocol::Udp);
        assert_eq!(masq.dhcp.boot_file_name.as_deref(), Some("boot.ipxe"));
        assert_eq!(masq.dhcp.private, vec![(240, b"x".to_vec())]);
        assert_eq!(masq.queues, 2);
        let blue = &plan.taps[1];
        assert!(blue.secondary);
        assert_eq!(blue.binding, Binding::Bridge);
        assert_eq!(blue.pod_interface, names::hashed_pod_interface("blue"));
        assert_eq!(blue.tap, format!("tap{}", &blue.pod_interface[3..]));
        assert_eq!(blue.mac, Some([2, 0, 0, 0, 0, 0x0b]));
    }

    #[test]
    fn bad_input_names_its_field() {
        let multus_masq = plan_of(
            json!({"domain": {"devices": {"interfaces": [{"name": "blue", "masquerade": {}}]}},
            "networks": [{"name": "blue", "multus": {"networkName": "blue"}}]}),
        )
        .err()
        .map(|e| e.message)
        .unwrap_or_default();
        assert!(multus_masq.contains("needs a pod network"), "{multus_masq}");
        let cidr = plan_of(
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {"vmNetworkCIDR": "10.0.0.0/31"}}]}),
        )
        .err()
        .unwrap_or_else(|| panic!("accepted"));
        assert_eq!(cidr.path, "spec.networks[0].pod.vmNetworkCIDR");
        let ntp = plan_of(
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {},
                "dhcpOptions": {"ntpServers": ["pool.ntp.org"]}}]}},
            "networks": [{"name": "default", "pod": {}}]}),
        )
        .err()
        .unwrap_or_else(|| panic!("accepted"));
        assert_eq!(
            ntp.path,
            "spec.domain.devices.interfaces[0].dhcpOptions.ntpServers[0]"
        );
        let unnamed = plan_of(json!({"domain": {"devices": {"interfaces": [{"name": "default", "binding": {"name": ""}}]}},
            "networks": [{"name": "default", "pod": {}}]}))
        .err()
        .unwrap_or_else(|| panic!("accepted"));
        assert_eq!(
            unnamed.path,
            "spec.domain.devices.interfaces[0].binding.name"
        );
        // A plugin this launcher does not implement does its pod side
        // itself (the converter decides whether the domain gets it).
        let plugin = plan_of(json!({"domain": {"devices": {"interfaces": [{"name": "default", "binding": {"name": "macvtap"}}]}},
            "networks": [{"name": "default", "pod": {}}]}))
        .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(plugin.taps.is_empty() && plugin.passt.is_empty() && plugin.slirp.is_empty());
    }

    #[test]
    fn port_ranges_are_forwarded_and_checked() {
        let plan = plan_of(
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {},
                "ports": [{"port": 22}],
                "portRanges": [{"protocol": "UDP", "start": 5000, "end": 5010}]}]}},
            "networks": [{"name": "default", "pod": {}}]}),
        )
        .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(
            plan.taps[0].forwards,
            vec![
                Forward {
                    protocol: Protocol::Tcp,
                    start: 22,
                    end: 22
                },
                Forward {
                    protocol: Protocol::Udp,
                    start: 5000,
                    end: 5010
                }
            ]
        );
        let backwards = plan_of(
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {},
                "portRanges": [{"protocol": "TCP", "start": 90, "end": 80}]}]}},
            "networks": [{"name": "default", "pod": {}}]}),
        )
        .err()
        .unwrap_or_else(|| panic!("accepted"));
        assert_eq!(
            backwards.path,
            "spec.domain.devices.interfaces[0].portRanges[0]"
        );
        assert!(backwards.message.contains("90-80"), "{}", backwards.message);
    }

    #[test]
    fn slirp_and_passt_need_no_tap() {
        let plan = plan_of(json!({"domain": {"devices": {"interfaces": [{"name": "default", "binding": {"name": "slirp"}}]}},
            "networks": [{"name": "default", "pod": {}}]}))
        .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(plan.taps.is_empty());
        assert_eq!(plan.slirp, vec!["default"]);
        let passt = plan_of(json!({"domain": {"devices": {"interfaces": [{"name": "default", "binding": {"name": "passt"}}]}},
            "networks": [{"name": "default", "pod": {}}]}))
        .unwrap_or_else(|e| panic!("{}", e.message));
        assert!(passt.taps.is_empty() && passt.slirp.is_empty());
    }
}
