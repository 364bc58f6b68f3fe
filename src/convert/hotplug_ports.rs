//! Free PCIe root ports for hotplug (KubeVirt: virtwrap/manager.go
//! `calculateHotplugPortCountV2`, `allocateHotplugPorts`).
//!
//! On q35 every PCIe device sits on its own `pcie-root-port`, and a device
//! plugged into a running guest needs an empty one. KubeVirt wants
//! `max(8 − devices, 3)` free ports (`max(16 − devices, 6)` above 2 GiB of
//! guest memory), counting devices as its `CountPCIDevices` does. It lets
//! libvirt place the devices first and then adds that many empty ports;
//! libvirt fills the ports a domain lists before it adds its own, so here
//! the converter lists one port per device libvirt will place on a port,
//! plus the free ones, and the free ones stay empty. Nothing is added
//! for other machine types, with KubeVirt's annotation that places PCI
//! devices on the root complex, or when a device names a PCI bus other
//! than 0 in its `pciAddress` (libvirt must then make that bus itself).

use crate::domxml::{Controller, Domain};
use crate::vmi::VirtualMachineInstance;

const LARGE_MEMORY: u64 = 2 << 30;
const DEFAULT_TOTAL: usize = 8;
const DEFAULT_MIN_FREE: usize = 3;
const LARGE_TOTAL: usize = 16;
const LARGE_MIN_FREE: usize = 6;
/// KubeVirt keeps PCI bus numbers at most 31.
const MAX_INDEX: u32 = 31;
const ROOT_COMPLEX_ANNOTATION: &str = "kubevirt.io/placePCIDevicesOnRootComplex";

/// Adds the `pcie-root-port` controllers: one per device that needs a port
/// and the free ones for hotplug. Returns how many are meant to be free.
pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    guest_memory: u64,
    domain: &mut Domain,
) -> usize {
    let q35 = domain.is_q35();
    let on_root_complex = vmi
        .metadata
        .annotations
        .get(ROOT_COMPLEX_ANNOTATION)
        .is_some_and(|v| v == "true");
    // A device placed on a bus of its own choosing (`pciAddress` on a bus
    // other than 0) needs libvirt to make that bus, of a type that fits the
    // address; ports listed here would fill the gap with the wrong type.
    // Such VMIs keep libvirt's own placement and get no spare ports.
    let own_buses = explicit_buses(domain).any(|bus| bus != 0);
    if !q35 || on_root_complex || own_buses {
        return 0;
    }
    let (total, min_free) = if guest_memory > LARGE_MEMORY {
        (LARGE_TOTAL, LARGE_MIN_FREE)
    } else {
        (DEFAULT_TOTAL, DEFAULT_MIN_FREE)
    };
    let free = total
        .saturating_sub(count_pci_devices(domain))
        .max(min_free);
    let first = domain
        .devices
        .controllers
        .iter()
        .filter(|c| c.controller_type == "pci")
        .map(|c| c.index)
        .max()
        .unwrap_or(0)
        + 1;
    let wanted = devices_on_root_ports(domain) + free;
    for index in (first..).take(wanted).take_while(|i| *i <= MAX_INDEX) {
        domain.devices.controllers.push(Controller {
            controller_type: "pci".to_string(),
            index,
            model: Some("pcie-root-port".to_string()),
            ..Controller::default()
        });
    }
    free
}

/// The PCI bus numbers the devices' own addresses (`pciAddress`) name.
fn explicit_buses(domain: &Domain) -> impl Iterator<Item = u32> + '_ {
    let d = &domain.devices;
    d.disks
        .iter()
        .map(|x| &x.address)
        .chain(d.interfaces.iter().map(|x| &x.address))
        .chain(d.hostdevs.iter().map(|x| &x.address))
        .chain(d.controllers.iter().map(|x| &x.address))
        .flatten()
        .filter(|a| a.address_type == "pci")
        .filter_map(|a| a.bus.as_deref())
        .filter_map(|bus| u32::from_str_radix(bus.trim_start_matches("0x"), 16).ok())
}

/// KubeVirt's `CountPCIDevices`: the devices that would have a PCI address
/// (interfaces, PCI host devices, controllers but the root ones, virtio
/// disks and inputs, watchdogs, the RNG and the balloon).
pub(crate) fn count_pci_devices(domain: &Domain) -> usize {
    let d = &domain.devices;
    let pci = |address: &Option<crate::domxml::Address>| {
        address
            .as_ref()
            .is_none_or(|a| a.address_type.is_empty() || a.address_type == "pci")
    };
    d.interfaces.iter().filter(|i| pci(&i.address)).count()
        + d.hostdevs
            .iter()
            .filter(|h| h.hostdev_type == "pci" && pci(&h.address))
            .count()
        + d.controllers
            .iter()
            .filter(|c| {
                !matches!(
                    c.model.as_deref(),
                    Some("pci-root" | "pcie-root" | "pcie-expander-bus")
                )
            })
            .filter(|c| pci(&c.address))
            .count()
        + d.disks
            .iter()
            .filter(|disk| disk.target.bus.as_deref() == Some("virtio") && pci(&disk.address))
            .count()
        + d.inputs
            .iter()
            .filter(|i| i.bus.as_deref() == Some("virtio") && pci(&i.address))
            .count()
        + d.watchdogs.iter().filter(|w| pci(&w.address)).count()
        + d.rngs.iter().filter(|r| pci(&r.address)).count()
        + d.memballoon.iter().filter(|b| pci(&b.address)).count()
}

/// How many root ports libvirt will fill with the domain's devices: every
/// PCIe device without an address of its own (conventional PCI devices
/// share one pcie-to-pci bridge, counted once per device to err on the
/// side of free ports).
fn devices_on_root_ports(domain: &Domain) -> usize {
    let d = &domain.devices;
    let unplaced = |address: &Option<crate::domxml::Address>| address.is_none();
    d.interfaces.iter().filter(|i| unplaced(&i.address)).count()
        + d.hostdevs
            .iter()
            .filter(|h| h.hostdev_type != "usb" && unplaced(&h.address))
            .count()
        + d.controllers
            .iter()
            .filter(|c| match c.controller_type.as_str() {
                "usb" => c.model.as_deref() != Some("none"),
                "scsi" | "virtio-serial" => true,
                _ => false,
            })
            .filter(|c| unplaced(&c.address))
            .count()
        + d.disks
            .iter()
            .filter(|disk| disk.target.bus.as_deref() == Some("virtio") && unplaced(&disk.address))
            .count()
        + d.inputs
            .iter()
            .filter(|i| i.bus.as_deref() == Some("virtio") && unplaced(&i.address))
            .count()
        + d.watchdogs.iter().filter(|w| unplaced(&w.address)).count()
        + d.rngs.iter().filter(|r| unplaced(&r.address)).count()
        + d.memballoon
            .iter()
            .filter(|b| b.model != "none" && unplaced(&b.address))
            .count()
        + d.memory_devices
            .iter()
            .filter(|m| m.model.starts_with("virtio") && unplaced(&m.address))
            .count()
        + d.panics
            .iter()
            .filter(|p| p.model.as_deref() == Some("pvpanic") && unplaced(&p.address))
            .count()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::convert_ok;
    use super::*;

    fn root_ports(domain: &Domain) -> Vec<u32> {
        domain
            .devices
            .controllers
            .iter()
            .filter(|c| c.model.as_deref() == Some("pcie-root-port"))
            .map(|c| c.index)
            .collect()
    }

    #[test]
    fn q35_gets_a_port_per_device_and_kubevirts_free_ports() {
        let domain = convert_ok(json!({"domain": {"devices": {"disks": [{"name": "a"}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}]}))
        .domain;
        let devices = devices_on_root_ports(&domain);
        let counted = count_pci_devices(&domain);
        let free = (8usize.saturating_sub(counted)).max(3);
        assert_eq!(
            root_ports(&domain),
            (1..=u32::try_from(devices + free).unwrap()).collect::<Vec<_>>()
        );
        assert!(free >= 3);
    }

    #[test]
    fn large_guests_want_more_free_ports() {
        let mut domain = convert_ok(json!({})).domain;
        domain
            .devices
            .controllers
            .retain(|c| c.controller_type != "pci");
        let vmi = crate::vmi::parse_vmi(
            &json!({"kind": "VirtualMachineInstance", "spec": {"domain": {}}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let free = configure(&vmi, 4 << 30, &mut domain);
        assert!(free >= 6, "{free}");
        let mut small = convert_ok(json!({})).domain;
        small
            .devices
            .controllers
            .retain(|c| c.controller_type != "pci");
        assert!(configure(&vmi, 1 << 30, &mut small) >= 3);
    }

    #[test]
    fn other_machines_and_the_root_complex_annotation_get_none() {
        let pc = convert_ok(json!({"domain": {"machine": {"type": "pc-i440fx-7.2"}}})).domain;
        assert!(root_ports(&pc).is_empty());
        let mut domain = convert_ok(json!({})).domain;
        domain
            .devices
            .controllers
            .retain(|c| c.controller_type != "pci");
        let vmi = crate::vmi::parse_vmi(&json!({"kind": "VirtualMachineInstance",
            "metadata": {"annotations": {"kubevirt.io/placePCIDevicesOnRootComplex": "true"}},
            "spec": {"domain": {}}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(configure(&vmi, 1 << 30, &mut domain), 0);
        assert!(root_ports(&domain).is_empty());
    }

    #[test]
    fn devices_on_buses_of_their_own_leave_placement_to_libvirt() {
        let domain = convert_ok(json!({"domain": {"devices": {"interfaces": [
            {"name": "default", "binding": {"name": "slirp"}, "pciAddress": "0000:02:01.0"}]}},
            "networks": [{"name": "default", "pod": {}}]}))
        .domain;
        assert!(root_ports(&domain).is_empty());
        let on_root = convert_ok(json!({"domain": {"devices": {"interfaces": [
            {"name": "default", "binding": {"name": "slirp"}, "pciAddress": "0000:00:05.0"}]}},
            "networks": [{"name": "default", "pod": {}}]}))
        .domain;
        assert!(!root_ports(&on_root).is_empty());
    }

    #[test]
    fn indices_stay_at_most_31() {
        let mut domain = convert_ok(json!({})).domain;
        for i in 0..40 {
            domain.devices.disks.push(crate::domxml::Disk {
                target: crate::domxml::DiskTarget {
                    dev: format!("vd{i}"),
                    bus: Some("virtio".into()),
                    tray: None,
                },
                ..crate::domxml::Disk::default()
            });
        }
        domain
            .devices
            .controllers
            .retain(|c| c.controller_type != "pci");
        let vmi = crate::vmi::parse_vmi(
            &json!({"kind": "VirtualMachineInstance", "spec": {"domain": {}}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        configure(&vmi, 1 << 30, &mut domain);
        assert_eq!(root_ports(&domain).last(), Some(&31));
    }
}
