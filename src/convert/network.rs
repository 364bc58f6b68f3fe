//! Network interfaces (KubeVirt: converter/network and
//! pkg/network/domainspec). `masquerade` and `bridge` interfaces are taps
//! in the pod's network namespace with KubeVirt's names (`tap0`, or
//! `tap<hash>` for a secondary multus network): `<interface
//! type='ethernet'>` with `<target dev='tap0' managed='no'/>`, which
//! `crate::network` creates or finds before the domain starts, and whose
//! MAC and MTU it fills in. The `passt` binding is libvirt's `<backend
//! type='passt'/>` from libvirt 9.2 on; with an older libvirt (Debian 12
//! has 9.0, whose parser refuses that backend) the launcher runs passt
//! itself (`crate::network::passt`) and QEMU joins its socket through
//! `<qemu:commandline>` (`-netdev stream` and the NIC's `-device`).
//! `slirp` (QEMU user networking) only when asked for.

use std::collections::BTreeSet;

use super::boot_order::{BootOrders, claim_boot_order};
use super::cluster_options::{ClusterOptions, DomainAttachment};
use super::cpu::Vcpus;
use super::pci::parse_pci_address;
use super::virtio::virtio_model;
use super::{ConvertContext, ConvertError, Refused, UserNetBackend, paths};
use crate::domxml::{
    self, AcpiIndex, Alias, BootOrder, Domain, InterfaceBackend, InterfaceDriver, InterfaceIp,
    InterfaceTarget, LinkState, MacAddress, ModelType, PortForward, PortRange, Rom,
};
use crate::network::names;
use crate::network::plan::{self, Binding, binding_of};
use crate::vmi::{
    Interface, InterfaceState, Network, PodNetwork, PortProtocol, VirtualMachineInstance,
};

/// Interface models KubeVirt accepts.
const MODELS: [&str; 7] = [
    "e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio",
];

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    vcpus: Vcpus,
    boot_orders: &BootOrders,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let (interfaces, networks) = interfaces_and_networks(vmi);
    check_networks(&interfaces, &networks)?;
    let mut boot_orders = boot_orders.clone();
    let mut names = BTreeSet::new();
    let mut used_slots = root_bus_slots(domain);
    for (i, interface) in interfaces.iter().enumerate() {
        let path = format!("spec.domain.devices.interfaces[{i}]");
        if !names.insert(interface.name.as_str()) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("interface {:?} is listed twice", interface.name),
            ));
        }
        if interface.state == Some(InterfaceState::Absent) {
            continue;
        }
        let network = networks
            .iter()
            .enumerate()
            .find(|(_, n)| n.name == interface.name)
            .ok_or_else(|| {
                ConvertError::new(
                    format!("{path}.name"),
                    format!("no network named {:?} in spec.networks", interface.name),
                )
            })?;
        if let Some(order) = interface.boot_order {
            claim_boot_order(
                &mut boot_orders,
                order,
                &format!("{path}.bootOrder"),
                &interface.name,
                "interface",
            )?;
        }
        // An SR-IOV interface is a host device (convert/hostdev.rs).
        if interface.sriov.is_some() {
            continue;
        }
        let Some(nic) = interface_xml(vmi, ctx, vcpus, interface, network, &path)? else {
            continue;
        };
        if is_passt(&nic) && !passt_by_libvirt(ctx.libvirt_version) {
            let args = passt_qemu_args(ctx, domain, &nic, interface, &mut used_slots, &path)?;
            domain.add_qemu_args(args);
            continue;
        }
        domain.devices.interfaces.push(nic);
    }
    Ok(())
}

/// The VMI's interfaces, or KubeVirt's default: a masquerade interface on the
/// pod network, unless `autoattachPodInterface` is false.
pub(crate) fn interfaces_and_networks(
    vmi: &VirtualMachineInstance,
) -> (Vec<Interface>, Vec<Network>) {
    let devices = &vmi.spec.domain.devices;
    if devices.interfaces.is_empty()
        && vmi.spec.networks.is_empty()
        && devices.autoattach_pod_interface != Some(false)
    {
        let interface = Interface {
            name: "default".to_string(),
            masquerade: Some(crate::vmi::Empty {}),
            ..Interface::default()
        };
        let network = Network {
            name: "default".to_string(),
            pod: Some(PodNetwork::default()),
            ..Network::default()
        };
        return (vec![interface], vec![network]);
    }
    (devices.interfaces.clone(), vmi.spec.networks.clone())
}

/// QEMU's largest `acpi-index` (systemd's limit for on-board names).
const MAX_ACPI_INDEX: u32 = 16_383;

/// `acpiIndex`: 0 is KubeVirt's "none" (its API omits a zero); 1 to
/// [`MAX_ACPI_INDEX`] otherwise, which QEMU would refuse only at start.
fn acpi_index(interface: &Interface, path: &str) -> Result<Option<u32>, ConvertError> {
    match interface.acpi_index {
        None | Some(0) => Ok(None),
        Some(index) if index <= MAX_ACPI_INDEX => Ok(Some(index)),
        Some(index) => Err(ConvertError::new(
            format!("{path}.acpiIndex"),
            format!("{index} is out of range (1 to {MAX_ACPI_INDEX}, QEMU's limit; 0: none)"),
        )),
    }
}

fn check_networks(interfaces: &[Interface], networks: &[Network]) -> Result<(), ConvertError> {
    let mut names = BTreeSet::new();
    for (i, network) in networks.iter().enumerate() {
        let path = format!("spec.networks[{i}]");
        if !paths::is_dns_label(&network.name) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid network name (lowercase letters, digits and '-')",
                    network.name
                ),
            ));
        }
        if !names.insert(network.name.as_str()) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("network {:?} is defined twice", network.name),
            ));
        }
        if network.pod.is_some() && network.multus.is_some() {
            return Err(ConvertError::new(
                path,
                "set either pod or multus, not both",
            ));
        }
        if !interfaces.iter().any(|iface| iface.name == network.name) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "network {:?} has no interface in spec.domain.devices.interfaces",
                    network.name
                ),
            ));
        }
    }
    Ok(())
}

fn interface_xml(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    vcpus: Vcpus,
    interface: &Interface,
    (network_index, network): (usize, &Network),
    path: &str,
) -> Result<Option<domxml::Interface>, ConvertError> {
    let binding = binding_of(interface, path).map_err(|e| ConvertError::new(e.path, e.message))?;
    if binding == Binding::Plugin {
        let plugin = interface.binding.as_ref().map_or("", |b| b.name.as_str());
        match ClusterOptions::domain_attachment(ctx.options.as_ref(), &interface.name) {
            // The plugin's sidecar adds the interface, as with KubeVirt.
            Some(DomainAttachment::None) => return Ok(None),
            Some(DomainAttachment::Tap) => {}
            None => {
                return Err(ConvertError::new(
                    format!("{path}.binding.name"),
                    format!(
                        "network binding plugin {plugin:?} is not known to this launcher (passt and slirp are); a plugin's interface is attached as virt-handler's options say (interfaceDomainAttachment)"
                    ),
                ));
            }
        }
    }
    plan::check_ports_and_dhcp_options(interface, path)
        .map_err(|e| ConvertError::new(e.path, e.message))?;
    if !matches!(binding, Binding::Bridge | Binding::Plugin) && network.pod.is_none() {
        return Err(ConvertError::new(
            path,
            format!(
                "{} binding needs a pod network; network {:?} is a multus network (use bridge)",
                binding.as_str(),
                network.name
            ),
        ));
    }
    let model = interface.model.as_deref().unwrap_or("virtio");
    if !MODELS.contains(&model) {
        return Err(ConvertError::new(
            format!("{path}.model"),
            format!(
                "unknown interface model {model:?} (use {})",
                MODELS.join(", ")
            ),
        ));
    }
    if model == "virtio"
        && vmi.spec.domain.devices.network_interface_multiqueue == Some(true)
        && matches!(binding, Binding::Passt | Binding::Slirp)
    {
        // KubeVirt gives every virtio NIC the queues, and libvirt refuses
        // them on a user-mode interface ("Multiqueue network is not
        // supported for: user") when the domain starts: say it here, never
        // drop the setting.
        return Err(ConvertError::unsupported(
            Refused::MultiqueueWithoutTap,
            "spec.domain.devices.networkInterfaceMultiqueue",
            &format!(
                "multiqueue with the {} binding of interface {:?} (it has no tap for the queues; use masquerade or bridge, or remove networkInterfaceMultiqueue)",
                binding.as_str(),
                interface.name
            ),
        ));
    }
    let mut nic = domxml::Interface {
        model: Some(ModelType {
            model_type: if model == "virtio" {
                virtio_model(vmi)
            } else {
                model
            }
            .to_string(),
        }),
        alias: Some(Alias::user(&interface.name)),
        boot: interface.boot_order.map(|order| BootOrder { order }),
        acpi: acpi_index(interface, path)?.map(|index| AcpiIndex { index }),
        link: (interface.state == Some(InterfaceState::Down)).then(|| LinkState {
            state: "down".to_string(),
        }),
        ..domxml::Interface::default()
    };
    if let Some(mac) = interface.mac_address.as_deref() {
        nic.mac = Some(MacAddress {
            address: normalize_mac(mac, &format!("{path}.macAddress"))?,
        });
    }
    if let Some(pci) = interface.pci_address.as_deref() {
        nic.address = Some(parse_pci_address(pci, &format!("{path}.pciAddress"))?);
    }
    match binding {
        // A plugin's `tap` attachment: the tap its CNI made under
        // KubeVirt's name, as for bridge (KubeVirt's tap spec generator).
        Binding::Masquerade | Binding::Bridge | Binding::Plugin => {
            let pod_interface = if plan::is_secondary(network) {
                names::hashed_pod_interface(&network.name)
            } else {
                names::PRIMARY_POD_INTERFACE.to_string()
            };
            // A tap made for the launcher: libvirt must neither create nor
            // delete it.
            nic.interface_type = "ethernet".to_string();
            nic.target = Some(InterfaceTarget {
                dev: names::tap_name(&pod_interface, plan::is_secondary(network)),
                managed: Some("no".to_string()),
            });
            if interface.boot_order.is_none() {
                // KubeVirt skips the iPXE option ROM of NICs that do not boot.
                nic.rom = Some(Rom {
                    enabled: Some("no".to_string()),
                });
            }
            if model == "virtio"
                && vmi.spec.domain.devices.network_interface_multiqueue == Some(true)
                && vcpus.enabled > 1
            {
                nic.driver = Some(InterfaceDriver {
                    name: Some("vhost".to_string()),
                    queues: Some(vcpus.enabled),
                });
            }
        }
        Binding::Passt => {
            if ctx.user_net_backend != UserNetBackend::Passt {
                return Err(ConvertError::new(
                    path,
                    "the passt binding needs passt, which is not installed on this host (Debian: apt-get install passt)",
                ));
            }
            nic.interface_type = "user".to_string();
            nic.backend = Some(InterfaceBackend {
                backend_type: Some("passt".to_string()),
                log_file: None,
            });
            nic.port_forward = port_forwards(interface);
        }
        Binding::Slirp => {
            nic.interface_type = "user".to_string();
            // slirp can place the guest network where the VMI asked.
            if let Some(pod) = &network.pod {
                nic.ip = pod_network_ips(pod, network_index)?;
            }
        }
    }
    Ok(Some(nic))
}

/// libvirt reads `<backend type='passt'/>` from 9.2.0 on.
pub(crate) const PASST_BACKEND_SINCE: (u32, u32, u32) = (9, 2, 0);

/// libvirt writes `<backend type='passt'/>` from 9.2 on; older versions
/// (and an unknown one) refuse it, and the launcher runs passt itself.
pub fn passt_by_libvirt(libvirt_version: Option<u32>) -> bool {
    let (major, minor, micro) = PASST_BACKEND_SINCE;
    libvirt_version.is_some_and(|v| v >= super::libvirt_version(major, minor, micro))
}

/// Where the launcher's own passt for interface `name` listens.
pub fn passt_socket(private_dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    private_dir.join("passt").join(format!("{name}.sock"))
}

/// A Unix socket path has at most 107 bytes.
const MAX_SOCKET_PATH: usize = 107;
/// The root bus slot the first launcher-run passt NIC takes when the VMI
/// names none; further ones count down. libvirt fills the root bus from
/// slot 1 upwards, and q35 keeps slot 0x1f for its LPC, SATA and SMBus
/// functions.
const FIRST_PASST_SLOT: u32 = 0x1e;

fn is_passt(nic: &domxml::Interface) -> bool {
    nic.interface_type == "user"
        && nic
            .backend
            .as_ref()
            .is_some_and(|b| b.backend_type.as_deref() == Some("passt"))
}

fn parse_hex(text: Option<&str>) -> Option<u32> {
    let text = text?;
    let digits = text.strip_prefix("0x").unwrap_or(text);
    u32::from_str_radix(digits, 16).ok()
}

/// Slots on bus 0 that devices already placed there take.
fn root_bus_slots(domain: &Domain) -> BTreeSet<u32> {
    let addresses = domain
        .devices
        .disks
        .iter()
        .filter_map(|d| d.address.as_ref())
        .chain(
            domain
                .devices
                .interfaces
                .iter()
                .filter_map(|i| i.address.as_ref()),
        );
    addresses
        .filter(|a| a.address_type == "pci" && parse_hex(a.bus.as_deref()) == Some(0))
        .filter_map(|a| parse_hex(a.slot.as_deref()))
        .collect()
}

/// QEMU's arguments for a passt interface the launcher's own passt serves
/// (libvirt < 9.2): a `stream` netdev on passt's socket and the NIC, with
/// the MAC, PCI address, boot index and ROM libvirt would have given it.
fn passt_qemu_args(
    ctx: &ConvertContext,
    domain: &Domain,
    nic: &domxml::Interface,
    interface: &Interface,
    used_slots: &mut BTreeSet<u32>,
    path: &str,
) -> Result<Vec<String>, ConvertError> {
    let socket = passt_socket(&ctx.private_dir, &interface.name);
    let socket_text = socket.to_string_lossy().into_owned();
    if socket_text.len() > MAX_SOCKET_PATH || socket_text.contains(',') {
        return Err(ConvertError::new(
            format!("{path}.name"),
            format!(
                "passt's socket {socket_text:?} is longer than a Unix socket path may be ({MAX_SOCKET_PATH} bytes) or has a comma; use a shorter private directory or interface name"
            ),
        ));
    }
    let id = format!("hostua-{}", interface.name);
    let model = nic
        .model
        .as_ref()
        .map(|m| m.model_type.as_str())
        .unwrap_or("virtio-non-transitional");
    let device = match model {
        "virtio" => "virtio-net-pci",
        "virtio-transitional" => "virtio-net-pci-transitional",
        "virtio-non-transitional" => "virtio-net-pci-non-transitional",
        other => other,
    };
    let mac = match &nic.mac {
        Some(mac) => mac.address.clone(),
        None => {
            let seed = format!("{}_{}/{}", ctx.namespace, ctx.name, ctx.uid);
            let bytes = crate::network::setup::derived_mac(&seed, &interface.name);
            bytes
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        }
    };
    let q35 = domain.is_q35();
    let root = if q35 { "pcie.0" } else { "pci.0" };
    let (bus, slot, function) = match &nic.address {
        Some(address) => {
            let bus = parse_hex(address.bus.as_deref()).unwrap_or(0);
            let slot = parse_hex(address.slot.as_deref()).unwrap_or(0);
            let function = parse_hex(address.function.as_deref()).unwrap_or(0);
            let bus = if bus == 0 {
                root.to_string()
            } else {
                format!("pci.{bus}")
            };
            (bus, slot, function)
        }
        None => {
            let slot = (1..=FIRST_PASST_SLOT)
                .rev()
                .find(|s| !used_slots.contains(s))
                .ok_or_else(|| {
                    ConvertError::new(path, "no free slot on the root PCI bus for the passt NIC")
                })?;
            (root.to_string(), slot, 0)
        }
    };
    if bus == root {
        used_slots.insert(slot);
    }
    let mut device_arg = format!(
        "{device},netdev={id},id=ua-{},mac={mac},bus={bus},addr=0x{slot:x}.0x{function:x}",
        interface.name
    );
    if let Some(acpi) = &nic.acpi {
        device_arg.push_str(&format!(",acpi-index={}", acpi.index));
    }
    match &nic.boot {
        Some(boot) => device_arg.push_str(&format!(",bootindex={}", boot.order)),
        // KubeVirt skips the iPXE option ROM of NICs that do not boot.
        None => device_arg.push_str(",romfile="),
    }
    Ok(vec![
        "-netdev".to_string(),
        format!("stream,id={id},server=off,addr.type=unix,addr.path={socket_text}"),
        "-device".to_string(),
        device_arg,
    ])
}

/// passt forwards only the ports the VMI lists: this launcher shares the
/// host's network namespace, so "forward everything" would claim every port.
fn port_forwards(interface: &Interface) -> Vec<PortForward> {
    let mut forwards = Vec::new();
    for (proto, protocol) in [("tcp", PortProtocol::Tcp), ("udp", PortProtocol::Udp)] {
        let range: Vec<PortRange> = interface
            .ports
            .iter()
            .filter(|port| port.protocol.unwrap_or(PortProtocol::Tcp) == protocol)
            .map(|port| PortRange {
                start: port.port,
                end: None,
            })
            .chain(
                interface
                    .port_ranges
                    .iter()
                    .filter(|r| r.protocol == protocol)
                    .map(|r| PortRange {
                        start: r.start,
                        end: Some(r.end),
                    }),
            )
            .collect();
        if !range.is_empty() {
            forwards.push(PortForward {
                proto: proto.to_string(),
                range,
            });
        }
    }
    forwards
}

fn pod_network_ips(
    pod: &PodNetwork,
    network_index: usize,
) -> Result<Vec<InterfaceIp>, ConvertError> {
    let index_path = |field: &str| format!("spec.networks[{network_index}].pod.{field}");
    let mut ips = Vec::new();
    if let Some(cidr) = pod.vm_network_cidr.as_deref().filter(|c| !c.is_empty()) {
        let (address, prefix) = parse_cidr(cidr, false, &index_path("vmNetworkCIDR"))?;
        ips.push(InterfaceIp {
            family: Some("ipv4".to_string()),
            address,
            prefix: Some(prefix),
        });
    }
    if let Some(cidr) = pod
        .vm_ipv6_network_cidr
        .as_deref()
        .filter(|c| !c.is_empty())
    {
        let (address, prefix) = parse_cidr(cidr, true, &index_path("vmIPv6NetworkCIDR"))?;
        ips.push(InterfaceIp {
            family: Some("ipv6".to_string()),
            address,
            prefix: Some(prefix),
        });
    }
    Ok(ips)
}

fn parse_cidr(cidr: &str, ipv6: bool, path: &str) -> Result<(String, u32), ConvertError> {
    let invalid = || ConvertError::new(path, format!("{cidr:?} is not a CIDR such as 10.0.2.0/24"));
    let (address, prefix) = cidr.split_once('/').ok_or_else(invalid)?;
    let prefix: u32 = prefix.parse().map_err(|_| invalid())?;
    let valid = if ipv6 {
        address.parse::<std::net::Ipv6Addr>().is_ok() && prefix <= 128
    } else {
        address.parse::<std::net::Ipv4Addr>().is_ok() && prefix <= 32
    };
    if valid {
        Ok((address.to_string(), prefix))
    } else {
        Err(invalid())
    }
}

/// "DE-AD-00-00-BE-AF" or "de:ad:00:00:be:af" → "de:ad:00:00:be:af".
fn normalize_mac(mac: &str, path: &str) -> Result<String, ConvertError> {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    let valid = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if !valid {
        return Err(ConvertError::new(
            path,
            format!("{mac:?} is not a MAC address such as 02:00:00:00:00:01"),
        ));
    }
    let multicast = u8::from_str_radix(parts[0], 16).is_ok_and(|first| first & 1 == 1);
    if multicast {
        return Err(ConvertError::new(
            path,
            format!("{mac:?} is a multicast address"),
        ));
    }
    Ok(parts.join(":").to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::UserNetBackend;
    use super::super::test_support::{context, convert_err, convert_ok, convert_with};

    #[test]
    fn default_pod_interface_is_masquerade_on_tap0() {
        let nic = convert_ok(json!({})).domain.devices.interfaces.remove(0);
        assert_eq!(nic.interface_type, "ethernet");
        assert_eq!(nic.alias.map(|a| a.name).as_deref(), Some("ua-default"));
        assert_eq!(
            nic.target.map(|t| (t.dev, t.managed)),
            Some(("tap0".to_string(), Some("no".to_string())))
        );
        assert_eq!(
            nic.model.map(|m| m.model_type).as_deref(),
            Some("virtio-non-transitional")
        );
        assert_eq!(nic.rom.and_then(|r| r.enabled).as_deref(), Some("no"));
        assert!(nic.backend.is_none());
        let none = convert_ok(json!({"domain": {"devices": {"autoattachPodInterface": false}}}));
        assert!(none.domain.devices.interfaces.is_empty());
    }

    #[test]
    fn acpi_index_is_1_to_16383_and_0_is_none() {
        let with = |index: u32| {
            json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}, "acpiIndex": index}]}},
                "networks": [{"name": "default", "pod": {}}]})
        };
        for (index, written) in [(0, None), (1, Some(1)), (16_383, Some(16_383))] {
            let nic = convert_ok(with(index)).domain.devices.interfaces.remove(0);
            assert_eq!(nic.acpi.map(|a| a.index), written, "{index}");
        }
        // Ports and DHCP options are checked on every driver and binding.
        let bridged = |extra: serde_json::Value| {
            let mut spec = json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "bridge": {}}]}},
                "networks": [{"name": "default", "pod": {}}]});
            if let (Some(nic), serde_json::Value::Object(extra)) = (
                spec["domain"]["devices"]["interfaces"][0].as_object_mut(),
                extra,
            ) {
                nic.extend(extra);
            }
            spec
        };
        assert_eq!(
            convert_err(bridged(json!({"ports": [{"port": 0}]}))),
            "spec.domain.devices.interfaces[0].ports[0].port: 0 is not a port (1-65535)"
        );
        assert!(
            convert_err(bridged(json!({"dhcpOptions": {"privateOptions": [{"option": 9223372036854775807i64, "value": "x"}]}})))
                .contains("is not a private DHCP option (224-254)")
        );
        convert_ok(bridged(
            json!({"ports": [{"port": 65535}], "dhcpOptions": {"privateOptions": [{"option": 254, "value": "x"}]}}),
        ));
        for index in [16_384, u32::MAX] {
            assert_eq!(
                convert_err(with(index)),
                format!(
                    "spec.domain.devices.interfaces[0].acpiIndex: {index} is out of range (1 to 16383, QEMU's limit; 0: none)"
                )
            );
        }
    }

    #[test]
    fn passt_under_libvirt_before_9_2_joins_the_launchers_passt_on_qemus_command_line() {
        let mut ctx = context();
        ctx.user_net_backend = UserNetBackend::Passt;
        ctx.libvirt_version = Some(crate::convert::libvirt_version(9, 0, 0));
        let spec = json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "binding": {"name": "passt"}, "macAddress": "52:54:00:00:00:01"},
                {"name": "b", "binding": {"name": "passt"}, "bootOrder": 2, "pciAddress": "0000:00:05.0"}]}},
            "networks": [{"name": "default", "pod": {}}, {"name": "b", "pod": {}}]});
        let domain = convert_with(spec, &ctx)
            .unwrap_or_else(|e| panic!("{e}"))
            .domain;
        assert!(domain.devices.interfaces.is_empty());
        assert_eq!(
            domain.xmlns_qemu.as_deref(),
            Some(crate::domxml::QEMU_NAMESPACE)
        );
        let args: Vec<String> = domain
            .qemu_commandline
            .map(|c| c.args.into_iter().map(|a| a.value).collect())
            .unwrap_or_default();
        let private = ctx.private_dir.display();
        assert_eq!(
            args,
            [
                "-netdev".to_string(),
                format!("stream,id=hostua-default,server=off,addr.type=unix,addr.path={private}/passt/default.sock"),
                "-device".to_string(),
                "virtio-net-pci-non-transitional,netdev=hostua-default,id=ua-default,mac=52:54:00:00:00:01,bus=pcie.0,addr=0x1e.0x0,romfile=".to_string(),
                "-netdev".to_string(),
                format!("stream,id=hostua-b,server=off,addr.type=unix,addr.path={private}/passt/b.sock"),
                "-device".to_string(),
                format!(
                    "virtio-net-pci-non-transitional,netdev=hostua-b,id=ua-b,mac={},bus=pcie.0,addr=0x5.0x0,bootindex=2",
                    args[7].split("mac=").nth(1).and_then(|m| m.split(',').next()).unwrap_or("")
                ),
            ]
        );
        // The derived MAC is stable and locally administered.
        assert!(args[7].contains("mac=02:"), "{}", args[7]);
        assert!(!super::passt_by_libvirt(None));
        assert!(super::passt_by_libvirt(Some(
            crate::convert::libvirt_version(9, 2, 0)
        )));
    }

    #[test]
    fn passt_binding_forwards_listed_ports() {
        let mut ctx = context();
        ctx.user_net_backend = UserNetBackend::Passt;
        ctx.libvirt_version = Some(crate::convert::libvirt_version(9, 2, 0));
        for binding in [
            json!({"passtBinding": {}}),
            json!({"binding": {"name": "passt"}}),
        ] {
            let mut iface = json!({"name": "default",
                "ports": [{"port": 22}, {"port": 53, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}],
                "portRanges": [{"protocol": "TCP", "start": 8000, "end": 8010}]});
            for (k, v) in binding.as_object().into_iter().flatten() {
                iface[k] = v.clone();
            }
            let spec = json!({"domain": {"devices": {"interfaces": [iface]}},
                "networks": [{"name": "default", "pod": {}}]});
            let nic = convert_with(spec, &ctx)
                .unwrap_or_else(|e| panic!("{e}"))
                .domain
                .devices
                .interfaces
                .remove(0);
            assert_eq!(nic.interface_type, "user");
            assert_eq!(
                nic.backend.and_then(|b| b.backend_type).as_deref(),
                Some("passt")
            );
            type Ranges = Vec<(u16, Option<u16>)>;
            let forwards: Vec<(String, Ranges)> = nic
                .port_forward
                .into_iter()
                .map(|f| {
                    (
                        f.proto,
                        f.range.into_iter().map(|r| (r.start, r.end)).collect(),
                    )
                })
                .collect();
            assert_eq!(
                forwards,
                [
                    (
                        "tcp".to_string(),
                        vec![(22, None), (80, None), (8000, Some(8010))]
                    ),
                    ("udp".to_string(), vec![(53, None)])
                ]
            );
        }
    }

    #[test]
    fn a_binding_plugins_interface_is_attached_as_virt_handlers_options_say() {
        let spec = json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "binding": {"name": "cni-tap"}},
                {"name": "side", "binding": {"name": "sidecar-only"}}]}},
            "networks": [{"name": "default", "pod": {}}, {"name": "side", "multus": {"networkName": "ns/side"}}]});
        // A standalone launcher knows only the plugins it implements.
        assert_eq!(
            convert_err(spec.clone()),
            "spec.domain.devices.interfaces[0].binding.name: network binding plugin \"cni-tap\" is not known to this launcher (passt and slirp are); a plugin's interface is attached as virt-handler's options say (interfaceDomainAttachment)"
        );
        // virt-handler says: `tap` (or `managedTap`) for the first; the
        // second has no attachment, so its sidecar adds it.
        let mut ctx = context();
        ctx.options = Some(crate::convert::ClusterOptions {
            interface_domain_attachment: Some(
                [("default".to_string(), "managedTap".to_string())].into(),
            ),
            ..Default::default()
        });
        let nics = convert_with(spec, &ctx).unwrap().domain.devices.interfaces;
        assert_eq!(nics.len(), 1, "{nics:?}");
        assert_eq!(nics[0].interface_type, "ethernet");
        assert_eq!(
            nics[0].alias.as_ref().map(|a| a.name.as_str()),
            Some("ua-default")
        );
        assert_eq!(
            nics[0]
                .target
                .as_ref()
                .map(|t| (t.dev.as_str(), t.managed.as_deref())),
            Some(("tap0", Some("no")))
        );
        // An unnamed plugin is still an error.
        assert!(
            convert_err(json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "binding": {"name": ""}}]}},
                "networks": [{"name": "default", "pod": {}}]}))
            .contains("binding.name: a network binding plugin needs a name")
        );
    }

    #[test]
    fn bridge_binding_is_ethernet_with_kubevirt_names() {
        let spec = json!({"domain": {"cpu": {"cores": 4}, "devices": {"networkInterfaceMultiqueue": true,
            "interfaces": [{"name": "default", "bridge": {}, "macAddress": "DE-AD-00-00-BE-AF", "pciAddress": "0000:02:01.0"},
                           {"name": "blue", "bridge": {}, "bootOrder": 2}]}},
            "networks": [{"name": "default", "pod": {}}, {"name": "blue", "multus": {"networkName": "ns/blue"}}]});
        let mut nics = convert_ok(spec).domain.devices.interfaces;
        let blue = nics.remove(1);
        let nic = nics.remove(0);
        assert_eq!(nic.interface_type, "ethernet");
        assert_eq!(
            nic.target
                .as_ref()
                .map(|t| (t.dev.as_str(), t.managed.as_deref())),
            Some(("tap0", Some("no")))
        );
        assert_eq!(
            nic.mac.map(|m| m.address).as_deref(),
            Some("de:ad:00:00:be:af")
        );
        assert_eq!(nic.rom.and_then(|r| r.enabled).as_deref(), Some("no"));
        assert_eq!(nic.driver.and_then(|d| d.queues), Some(4));
        let address = nic.address.unwrap_or_default();
        assert_eq!(
            (address.bus.as_deref(), address.slot.as_deref()),
            (Some("0x02"), Some("0x01"))
        );
        // A secondary multus network: the tap its plugin made, hashed name.
        let hashed = crate::network::names::hashed_pod_interface("blue");
        assert_eq!(
            blue.target.map(|t| t.dev),
            Some(format!("tap{}", &hashed[3..]))
        );
        assert!(blue.rom.is_none(), "a boot NIC keeps its option ROM");
    }

    #[test]
    fn interface_errors_name_their_path() {
        let missing = convert_err(
            json!({"domain": {"devices": {"interfaces": [{"name": "a", "masquerade": {}}]}}}),
        );
        assert_eq!(
            missing,
            "spec.domain.devices.interfaces[0].name: no network named \"a\" in spec.networks"
        );
        let model = convert_err(
            json!({"domain": {"devices": {"interfaces": [{"name": "a", "model": "vmxnet3"}]}},
            "networks": [{"name": "a", "pod": {}}]}),
        );
        assert!(
            model.starts_with(
                "spec.domain.devices.interfaces[0].model: unknown interface model \"vmxnet3\""
            ),
            "{model}"
        );
        let mac = convert_err(
            json!({"domain": {"devices": {"interfaces": [{"name": "a", "macAddress": "zz"}]}},
            "networks": [{"name": "a", "pod": {}}]}),
        );
        assert!(
            mac.starts_with("spec.domain.devices.interfaces[0].macAddress: \"zz\" is not a MAC"),
            "{mac}"
        );
        let passt = convert_err(
            json!({"domain": {"devices": {"interfaces": [{"name": "a", "passtBinding": {}}]}},
            "networks": [{"name": "a", "pod": {}}]}),
        );
        assert!(
            passt.starts_with(
                "spec.domain.devices.interfaces[0]: the passt binding needs passt, which is not installed"
            ),
            "{passt}"
        );
        let multus_nat = convert_err(
            json!({"domain": {"devices": {"interfaces": [{"name": "a", "masquerade": {}}]}},
            "networks": [{"name": "a", "multus": {"networkName": "x"}}]}),
        );
        assert!(
            multus_nat.contains("masquerade binding needs a pod network"),
            "{multus_nat}"
        );
        let orphan = convert_err(
            json!({"domain": {"devices": {"interfaces": [{"name": "a"}]}},
            "networks": [{"name": "a", "pod": {}}, {"name": "b", "pod": {}}]}),
        );
        assert_eq!(
            orphan,
            "spec.networks[1].name: network \"b\" has no interface in spec.domain.devices.interfaces"
        );
    }

    #[test]
    fn boot_order_is_unique_across_disks_and_interfaces() {
        let spec = json!({"domain": {"devices": {"disks": [{"name": "root", "bootOrder": 1}],
            "interfaces": [{"name": "a", "bootOrder": 1}]}},
            "networks": [{"name": "a", "pod": {}}],
            "volumes": [{"name": "root", "emptyDisk": {"capacity": "1Gi"}}]});
        assert_eq!(
            convert_err(spec),
            "spec.domain.devices.interfaces[0].bootOrder: boot order 1 is already used by disk \"root\""
        );
    }

    #[test]
    fn multiqueue_without_a_tap_is_refused_not_dropped() {
        let mut ctx = context();
        ctx.user_net_backend = UserNetBackend::Passt;
        for binding in [
            json!({"passtBinding": {}}),
            json!({"binding": {"name": "slirp"}}),
        ] {
            let mut iface = json!({"name": "default"});
            for (k, v) in binding.as_object().into_iter().flatten() {
                iface[k] = v.clone();
            }
            // One vCPU too: KubeVirt still asks for a queue, which libvirt
            // refuses on a user-mode interface.
            let spec = json!({"domain": {"devices": {"networkInterfaceMultiqueue": true, "interfaces": [iface]}},
                "networks": [{"name": "default", "pod": {}}]});
            let err = convert_with(spec, &ctx)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.starts_with("spec.domain.devices.networkInterfaceMultiqueue: multiqueue with the ")
                    && err.ends_with("binding of interface \"default\" (it has no tap for the queues; use masquerade or bridge, or remove networkInterfaceMultiqueue) is not supported by this launcher"),
                "{err}"
            );
        }
        // A model other than virtio has no queues to give.
        let spec = json!({"domain": {"devices": {"networkInterfaceMultiqueue": true,
            "interfaces": [{"name": "default", "model": "e1000", "binding": {"name": "slirp"}}]}},
            "networks": [{"name": "default", "pod": {}}]});
        assert!(
            convert_ok(spec).domain.devices.interfaces[0]
                .driver
                .is_none()
        );
    }

    #[test]
    fn slirp_takes_the_pod_cidr_and_absent_interfaces_are_skipped() {
        let spec = json!({"domain": {"devices": {"interfaces": [{"name": "a", "binding": {"name": "slirp"}},
            {"name": "b", "state": "absent"}, {"name": "c", "bridge": {}, "state": "down"}]}},
            "networks": [{"name": "a", "pod": {"vmNetworkCIDR": "10.11.12.0/24"}},
                         {"name": "b", "multus": {"networkName": "x"}}, {"name": "c", "multus": {"networkName": "y"}}]});
        let interfaces = convert_ok(spec).domain.devices.interfaces;
        assert_eq!(interfaces.len(), 2);
        assert_eq!(interfaces[0].ip[0].address, "10.11.12.0");
        assert_eq!(interfaces[0].ip[0].prefix, Some(24));
        assert_eq!(
            interfaces[1].link.as_ref().map(|l| l.state.as_str()),
            Some("down")
        );
    }
}
