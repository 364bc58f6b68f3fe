//! Devices appearing in and leaving the domain (libvirt's device-added and
//! device-removed events), published with what kind of device they are.

use serde::Serialize;

use super::DomainManager;
use crate::events::EventKind;

/// DEVICE_ADDED's and DEVICE_REMOVED's data.
#[derive(Debug, Serialize)]
struct DeviceEvent<'a> {
    alias: &'a str,
    domain: &'a str,
    kind: &'static str,
}

impl DomainManager {
    pub(super) fn on_device_added(&mut self, alias: String) {
        let kind = self.device_kind(&alias);
        self.publish(
            EventKind::DeviceAdded,
            DeviceEvent {
                alias: &alias,
                domain: &self.config.domain_name,
                kind,
            },
        );
    }

    pub(super) fn on_device_removed(&mut self, alias: String) {
        let kind = self.device_kind(&alias);
        self.publish(
            EventKind::DeviceRemoved,
            DeviceEvent {
                alias: &alias,
                domain: &self.config.domain_name,
                kind,
            },
        );
        self.hotplug_device_removed(&alias);
    }

    /// What kind of device `alias` names: what the launcher applied knows
    /// the VMI's devices; libvirt's own names say the rest.
    fn device_kind(&self, alias: &str) -> &'static str {
        self.applied_device_kind(alias)
            .unwrap_or_else(|| kind_from_alias(alias))
    }
}

/// The kind of a device from its alias: KubeVirt's user aliases for host
/// devices, and the aliases libvirt gives the devices it names itself
/// ("virtio-disk2", "net1", "hostdev0", "virtiomem0", "vcpu1", ...).
pub(super) fn kind_from_alias(alias: &str) -> &'static str {
    const PREFIXES: [(&str, &str); 14] = [
        ("ua-hostdevice-", "hostdev"),
        ("ua-gpu-", "hostdev"),
        ("ua-sriov-", "hostdev"),
        ("virtio-disk", "disk"),
        ("scsi", "disk"),
        ("sata", "disk"),
        ("ide", "disk"),
        ("usb-disk", "disk"),
        ("net", "interface"),
        ("hostdev", "hostdev"),
        ("virtiomem", "memory"),
        ("dimm", "memory"),
        ("vcpu", "vcpu"),
        ("ua-", "device"),
    ];
    PREFIXES
        .iter()
        .find(|(prefix, _)| alias.starts_with(prefix))
        .map_or("device", |(_, kind)| kind)
}

#[cfg(test)]
mod tests {
    use super::kind_from_alias;

    #[test]
    fn kinds_from_libvirt_and_kubevirt_aliases() {
        for (alias, kind) in [
            ("virtio-disk3", "disk"),
            ("scsi0-0-0-1", "disk"),
            ("net1", "interface"),
            ("hostdev0", "hostdev"),
            ("ua-sriov-sriov1", "hostdev"),
            ("ua-gpu-gpu1", "hostdev"),
            ("virtiomem0", "memory"),
            ("vcpu1", "vcpu"),
            ("ua-data", "device"),
            ("", "device"),
        ] {
            assert_eq!(kind_from_alias(alias), kind, "{alias}");
        }
    }
}
