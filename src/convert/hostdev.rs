//! Host devices: `hostDevices`, `gpus` and SR-IOV interfaces (KubeVirt:
//! virtwrap/device/hostdevice/{generic,gpu,sriov}, addresspool.go).
//!
//! KubeVirt's device plugins pass the devices they assigned to the pod in
//! its environment, one variable per resource, the addresses comma
//! separated: `PCI_RESOURCE_<RESOURCE>` for PCI devices and
//! `MDEV_PCI_RESOURCE_<RESOURCE>` for mediated devices (UUIDs), where
//! `<RESOURCE>` is the resource name upper-cased with `/` and `.` made `_`
//! (`nvidia.com/GP102GL` → `PCI_RESOURCE_NVIDIA_COM_GP102GL`). KubeVirt's
//! USB device plugin passes `USB_RESOURCE_<RESOURCE>` for `hostDevices`,
//! each device as `<bus>:<device number>` (decimal, as in /dev/bus/usb);
//! they become `<hostdev type='usb'>` aliased `ua-usb-host-<name>`. An SR-IOV
//! interface's resource is named by `KUBEVIRT_RESOURCE_NAME_<network>`, as
//! KubeVirt's SR-IOV network set-up passes it. Each device takes the next
//! address of its resource; an address is used once.
//!
//! The devices become `<hostdev>` elements with KubeVirt's aliases
//! (`ua-hostdevice-<name>`, `ua-gpu-<name>`, `ua-sriov-<interface>`),
//! `managed='no'` since the device plugin bound them to vfio already. A
//! device whose resource has no address in the environment is an error
//! naming the variables to set (KubeVirt skips it silently).

use std::collections::{BTreeMap, BTreeSet};

use super::dra::{DraDevice, claim_of};
use super::pci::parse_pci_address;
use super::{ConvertContext, ConvertError};
use crate::domxml::{Alias, BootOrder, Domain, HostAddress, HostDev, HostDevSource};
use crate::vmi::{InterfaceState, VirtualMachineInstance};

pub const PCI_PREFIX: &str = "PCI_RESOURCE";
pub const MDEV_PREFIX: &str = "MDEV_PCI_RESOURCE";
pub const USB_PREFIX: &str = "USB_RESOURCE";
/// `KUBEVIRT_RESOURCE_NAME_<network>`: the SR-IOV resource of a network.
pub const SRIOV_RESOURCE_PREFIX: &str = "KUBEVIRT_RESOURCE_NAME_";

/// KubeVirt's `ResourceNameToEnvVar`.
pub fn resource_env_var(prefix: &str, resource: &str) -> String {
    format!(
        "{prefix}_{}",
        resource.to_uppercase().replace(['/', '.'], "_")
    )
}

/// Whether an environment variable is one the host-device conversion reads.
pub fn is_device_variable(name: &str) -> bool {
    name.starts_with(PCI_PREFIX)
        || name.starts_with(MDEV_PREFIX)
        || name.starts_with(USB_PREFIX)
        || name.starts_with(SRIOV_RESOURCE_PREFIX)
}

/// Addresses by environment variable, each handed out once.
struct Pools<'a> {
    env: &'a BTreeMap<String, String>,
    used: BTreeSet<String>,
}

impl Pools<'_> {
    /// The next unused address of `variable`, if it is set.
    fn pop(&mut self, variable: &str) -> Option<Result<String, ()>> {
        let value = self.env.get(variable)?;
        let next = value
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .find(|a| !self.used.contains(*a))
            .map(str::to_string);
        Some(match next {
            Some(address) => {
                self.used.insert(address.clone());
                Ok(address)
            }
            None => Err(()),
        })
    }
}

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let mut pools = Pools {
        env: &ctx.device_env,
        used: BTreeSet::new(),
    };
    let devices = &vmi.spec.domain.devices;
    for (i, dev) in devices.host_devices.iter().enumerate() {
        let path = format!("spec.domain.devices.hostDevices[{i}]");
        if dev.device_name.is_empty() {
            let claim = claim_of(&dev.claim_name, &dev.request_name);
            let hostdev = claimed(ctx, &path, &format!("dra-hostdevice-{}", dev.name), claim)?;
            domain.devices.hostdevs.push(hostdev);
            continue;
        }
        domain.devices.hostdevs.push(assigned(
            &mut pools,
            &path,
            &format!("hostdevice-{}", dev.name),
            &dev.device_name,
            Pools::ANY.with_usb(&format!("usb-host-{}", dev.name)),
        )?);
    }
    // KubeVirt turns the display of the first claimed vGPU on when no GPU
    // says anything about displays.
    let mut default_display = !devices.gpus.iter().any(|g| {
        g.virtual_gpu_options
            .as_ref()
            .is_some_and(|o| o.display.is_some())
    });
    for (i, gpu) in devices.gpus.iter().enumerate() {
        let path = format!("spec.domain.devices.gpus[{i}]");
        if gpu.device_name.is_empty() {
            let claim = claim_of(&gpu.claim_name, &gpu.request_name);
            let mut hostdev = claimed(ctx, &path, &format!("dra-gpu-{}", gpu.name), claim)?;
            if hostdev.hostdev_type == "mdev" {
                let display = gpu
                    .virtual_gpu_options
                    .as_ref()
                    .and_then(|o| o.display.as_ref());
                let (on, ramfb) = match display {
                    Some(d) => (
                        d.enabled != Some(false),
                        d.ram_fb.as_ref().is_none_or(|r| r.is_enabled()),
                    ),
                    None => (default_display, default_display),
                };
                if on {
                    hostdev.display = Some("on".to_string());
                    default_display = false;
                }
                if on && ramfb {
                    hostdev.ramfb = Some("on".to_string());
                }
            }
            domain.devices.hostdevs.push(hostdev);
            continue;
        }
        let mut hostdev = assigned(
            &mut pools,
            &path,
            &format!("gpu-{}", gpu.name),
            &gpu.device_name,
            Pools::ANY,
        )?;
        if let Some(display) = gpu
            .virtual_gpu_options
            .as_ref()
            .and_then(|o| o.display.as_ref())
        {
            // A display is on when asked for (a mediated device: unless
            // turned off); ramfb goes with it unless turned off.
            let on = match hostdev.hostdev_type.as_str() {
                "mdev" => display.enabled != Some(false),
                _ => display.enabled == Some(true),
            };
            if on {
                hostdev.display = Some("on".to_string());
                if display.ram_fb.as_ref().is_none_or(|r| r.is_enabled()) {
                    hostdev.ramfb = Some("on".to_string());
                }
            }
        }
        domain.devices.hostdevs.push(hostdev);
    }
    for (i, interface) in devices.interfaces.iter().enumerate() {
        if interface.sriov.is_none() || interface.state == Some(InterfaceState::Absent) {
            continue;
        }
        let path = format!("spec.domain.devices.interfaces[{i}]");
        let network = vmi.spec.networks.iter().find(|n| n.name == interface.name);
        if network.is_none_or(|n| n.multus.is_none()) {
            return Err(ConvertError::new(
                format!("{path}.sriov"),
                format!(
                    "an SR-IOV interface needs a multus network named {:?} in spec.networks",
                    interface.name
                ),
            ));
        }
        let variable = format!("{SRIOV_RESOURCE_PREFIX}{}", interface.name);
        let resource = ctx.device_env.get(&variable).ok_or_else(|| {
            ConvertError::new(
                format!("{path}.sriov"),
                format!(
                    "the SR-IOV resource of network {:?} is not known: {variable} is not set in the launcher's environment",
                    interface.name
                ),
            )
        })?;
        let mut hostdev = assigned(
            &mut pools,
            &path,
            &format!("sriov-{}", interface.name),
            resource,
            Pools::PCI_ONLY,
        )?;
        if let Some(pci) = interface.pci_address.as_deref() {
            hostdev.address = Some(parse_pci_address(pci, &format!("{path}.pciAddress"))?);
        }
        hostdev.boot = interface.boot_order.map(|order| BootOrder { order });
        domain.devices.hostdevs.push(hostdev);
    }
    Ok(())
}

/// The `<hostdev>` of a device of a resource claim, from the DRA metadata
/// the caller read ([`super::detect_dra_devices`]).
fn claimed(
    ctx: &ConvertContext,
    path: &str,
    name: &str,
    claim: Option<(&str, &str)>,
) -> Result<HostDev, ConvertError> {
    let Some((claim, request)) = claim else {
        return Err(ConvertError::new(
            path,
            "needs a deviceName (a device plugin's resource), or a claimName and a requestName (a resource claim)",
        ));
    };
    let device = ctx
        .dra_devices
        .get(&(claim.to_string(), request.to_string()))
        .cloned()
        .unwrap_or_else(|| Err("its metadata was not read".to_string()))
        .map_err(|why| {
            ConvertError::new(
                path,
                format!(
                    "no device of claim {claim:?} request {request:?} was allocated to the launcher: {why}"
                ),
            )
        })?;
    let alias = Some(Alias::user(name));
    Ok(match device {
        DraDevice::Pci(address) => {
            let parsed = parse_pci_address(&address, path).map_err(|_| {
                ConvertError::new(
                    path,
                    format!(
                        "the DRA driver gave claim {claim:?} request {request:?} the PCI address {address:?}, which is not one such as 0000:81:01.0"
                    ),
                )
            })?;
            HostDev {
                mode: "subsystem".to_string(),
                hostdev_type: "pci".to_string(),
                managed: Some("no".to_string()),
                source: HostDevSource {
                    address: Some(HostAddress {
                        domain: parsed.domain,
                        bus: parsed.bus,
                        slot: parsed.slot,
                        function: parsed.function,
                        ..HostAddress::default()
                    }),
                },
                alias,
                ..HostDev::default()
            }
        }
        DraDevice::Mdev(uuid) => HostDev {
            mode: "subsystem".to_string(),
            hostdev_type: "mdev".to_string(),
            model: Some("vfio-pci".to_string()),
            source: HostDevSource {
                address: Some(HostAddress {
                    uuid: Some(uuid),
                    ..HostAddress::default()
                }),
            },
            alias,
            ..HostDev::default()
        },
    })
}

/// Which of a resource's variables a device may come from.
#[derive(Clone, Copy)]
struct Kinds<'a> {
    mdev: bool,
    /// The alias of a USB device (`hostDevices` only), when one may be.
    usb: Option<&'a str>,
}

impl Pools<'_> {
    /// PCI or mediated (GPUs).
    const ANY: Kinds<'static> = Kinds {
        mdev: true,
        usb: None,
    };
    /// SR-IOV virtual functions.
    const PCI_ONLY: Kinds<'static> = Kinds {
        mdev: false,
        usb: None,
    };
}

impl Kinds<'_> {
    fn with_usb(self, alias: &str) -> Kinds<'_> {
        Kinds {
            usb: Some(alias),
            ..self
        }
    }
}

/// The `<hostdev>` for a device of `resource`: a PCI device when its PCI
/// variable is set, else a mediated device, else a USB device, as
/// `kinds` allows (KubeVirt's order of address pools).
fn assigned(
    pools: &mut Pools,
    path: &str,
    name: &str,
    resource: &str,
    kinds: Kinds,
) -> Result<HostDev, ConvertError> {
    let pci_var = resource_env_var(PCI_PREFIX, resource);
    let mdev_var = resource_env_var(MDEV_PREFIX, resource);
    let usb_var = resource_env_var(USB_PREFIX, resource);
    let exhausted = |variable: &str| {
        ConvertError::new(
            path,
            format!(
                "every address in {variable} is taken by another device; the pod has fewer {resource:?} devices than the VMI asks for"
            ),
        )
    };
    let alias = Some(Alias::user(name));
    if let Some(address) = pools.pop(&pci_var) {
        let address = address.map_err(|()| exhausted(&pci_var))?;
        let parsed = parse_pci_address(&address, path).map_err(|_| {
            ConvertError::new(
                path,
                format!(
                    "{pci_var} holds {address:?}, which is not a PCI address such as 0000:81:01.0"
                ),
            )
        })?;
        return Ok(HostDev {
            mode: "subsystem".to_string(),
            hostdev_type: "pci".to_string(),
            managed: Some("no".to_string()),
            source: HostDevSource {
                address: Some(HostAddress {
                    domain: parsed.domain,
                    bus: parsed.bus,
                    slot: parsed.slot,
                    function: parsed.function,
                    ..HostAddress::default()
                }),
            },
            alias,
            ..HostDev::default()
        });
    }
    if kinds.mdev
        && let Some(uuid) = pools.pop(&mdev_var)
    {
        let uuid = uuid.map_err(|()| exhausted(&mdev_var))?;
        return Ok(HostDev {
            mode: "subsystem".to_string(),
            hostdev_type: "mdev".to_string(),
            model: Some("vfio-pci".to_string()),
            source: HostDevSource {
                address: Some(HostAddress {
                    uuid: Some(uuid),
                    ..HostAddress::default()
                }),
            },
            alias,
            ..HostDev::default()
        });
    }
    if let Some(usb_alias) = kinds.usb
        && let Some(address) = pools.pop(&usb_var)
    {
        let address = address.map_err(|()| exhausted(&usb_var))?;
        let (bus, device) = parse_usb_address(&address).ok_or_else(|| {
            ConvertError::new(
                path,
                format!(
                    "{usb_var} holds {address:?}, which is not a USB bus and device number such as 1:5"
                ),
            )
        })?;
        return Ok(HostDev {
            mode: "subsystem".to_string(),
            hostdev_type: "usb".to_string(),
            source: HostDevSource {
                address: Some(HostAddress {
                    bus: Some(bus.to_string()),
                    device: Some(device.to_string()),
                    ..HostAddress::default()
                }),
            },
            alias: Some(Alias::user(usb_alias)),
            ..HostDev::default()
        });
    }
    let variables = match (kinds.mdev, kinds.usb) {
        (false, _) => pci_var,
        (true, None) => format!("{pci_var} or {mdev_var}"),
        (true, Some(_)) => format!("{pci_var}, {mdev_var} or {usb_var}"),
    };
    Err(ConvertError::new(
        path,
        format!(
            "no device of resource {resource:?} was assigned to the launcher: {variables} is not set in its environment (the device plugin sets it)"
        ),
    ))
}

/// KubeVirt's USB device plugin's `<bus>:<device number>`, both decimal
/// (as libvirt's `<address bus= device=>` takes them); USB has at most 127
/// devices on a bus, and bus numbers fit a byte on Linux.
fn parse_usb_address(address: &str) -> Option<(u8, u8)> {
    let (bus, device) = address.split_once(':')?;
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u8>().ok())
            .flatten()
    };
    let (bus, device) = (number(bus)?, number(device)?);
    (bus > 0 && (1..=127).contains(&device)).then_some((bus, device))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{context, vmi_with};
    use super::super::{ConvertContext, convert};
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> ConvertContext {
        ConvertContext {
            device_env: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..context()
        }
    }

    fn hostdevs(spec: serde_json::Value, ctx: &ConvertContext) -> Result<Vec<HostDev>, String> {
        convert(&vmi_with(spec), ctx)
            .map(|c| c.domain.devices.hostdevs)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn resource_names_become_kubevirts_variables() {
        assert_eq!(
            resource_env_var(PCI_PREFIX, "nvidia.com/GP102GL"),
            "PCI_RESOURCE_NVIDIA_COM_GP102GL"
        );
        assert_eq!(
            resource_env_var(MDEV_PREFIX, "nvidia.com/GRID_T4-1Q"),
            "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q"
        );
        assert!(is_device_variable("PCI_RESOURCE_X"));
        assert!(is_device_variable("KUBEVIRT_RESOURCE_NAME_sriov1"));
        assert!(!is_device_variable("PATH"));
    }

    #[test]
    fn host_devices_and_gpus_take_their_addresses_in_turn() {
        let ctx = env(&[
            ("PCI_RESOURCE_INTEL_COM_QAT", "0000:81:00.1,0000:81:00.2,"),
            (
                "MDEV_PCI_RESOURCE_NVIDIA_COM_T4",
                "6fd8a4b0-7b04-4a0b-9a5d-7f3fe2a0a001",
            ),
        ]);
        let devs = hostdevs(
            json!({"domain": {"devices": {
                "hostDevices": [{"name": "qat1", "deviceName": "intel.com/qat"},
                                {"name": "qat2", "deviceName": "intel.com/qat"}],
                "gpus": [{"name": "gpu1", "deviceName": "nvidia.com/T4",
                          "virtualGPUOptions": {"display": {"enabled": true}}}]}}}),
            &ctx,
        )
        .unwrap();
        let summary: Vec<(String, String, String)> = devs
            .iter()
            .map(|d| {
                (
                    d.alias.clone().unwrap_or_default().name,
                    d.hostdev_type.clone(),
                    d.source.address.clone().unwrap_or_default().describe(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "ua-hostdevice-qat1".into(),
                    "pci".into(),
                    "0000:81:00.1".into()
                ),
                (
                    "ua-hostdevice-qat2".into(),
                    "pci".into(),
                    "0000:81:00.2".into()
                ),
                (
                    "ua-gpu-gpu1".into(),
                    "mdev".into(),
                    "6fd8a4b0-7b04-4a0b-9a5d-7f3fe2a0a001".into()
                ),
            ]
        );
        assert_eq!(devs[0].managed.as_deref(), Some("no"));
        assert_eq!(devs[2].model.as_deref(), Some("vfio-pci"));
        assert_eq!(
            (devs[2].display.as_deref(), devs[2].ramfb.as_deref()),
            (Some("on"), Some("on"))
        );
        let xml = Domain::device_xml("hostdev", &devs[0]).unwrap();
        assert_eq!(
            xml,
            "<hostdev mode=\"subsystem\" type=\"pci\" managed=\"no\"><source><address domain=\"0x0000\" bus=\"0x81\" slot=\"0x00\" function=\"0x1\"/></source><alias name=\"ua-hostdevice-qat1\"/></hostdev>"
        );
    }

    #[test]
    fn missing_or_used_up_addresses_are_errors_naming_the_variable() {
        let none = hostdevs(
            json!({"domain": {"devices": {"hostDevices": [{"name": "x", "deviceName": "vendor.com/dev"}]}}}),
            &context(),
        )
        .unwrap_err();
        assert_eq!(
            none,
            "spec.domain.devices.hostDevices[0]: no device of resource \"vendor.com/dev\" was assigned to the launcher: PCI_RESOURCE_VENDOR_COM_DEV, MDEV_PCI_RESOURCE_VENDOR_COM_DEV or USB_RESOURCE_VENDOR_COM_DEV is not set in its environment (the device plugin sets it)"
        );
        let ctx = env(&[("PCI_RESOURCE_VENDOR_COM_DEV", "0000:01:00.0")]);
        let two = hostdevs(
            json!({"domain": {"devices": {"hostDevices": [
                {"name": "a", "deviceName": "vendor.com/dev"}, {"name": "b", "deviceName": "vendor.com/dev"}]}}}),
            &ctx,
        )
        .unwrap_err();
        assert!(
            two.starts_with("spec.domain.devices.hostDevices[1]: every address in PCI_RESOURCE_VENDOR_COM_DEV is taken"),
            "{two}"
        );
        let bad = env(&[("PCI_RESOURCE_VENDOR_COM_DEV", "not-an-address")]);
        let err = hostdevs(
            json!({"domain": {"devices": {"hostDevices": [{"name": "a", "deviceName": "vendor.com/dev"}]}}}),
            &bad,
        )
        .unwrap_err();
        assert!(err.contains("not a PCI address"), "{err}");
    }

    #[test]
    fn usb_devices_of_kubevirts_usb_plugin_become_usb_hostdevs() {
        let ctx = env(&[("USB_RESOURCE_KUBEVIRT_IO_STORAGE", "1:5,3:12")]);
        let spec = |names: &[&str]| {
            let devices: Vec<serde_json::Value> = names
                .iter()
                .map(|n| json!({"name": n, "deviceName": "kubevirt.io/storage"}))
                .collect();
            json!({"domain": {"devices": {"hostDevices": devices}}})
        };
        let conversion = convert(&vmi_with(spec(&["stick", "disk"])), &ctx).unwrap();
        let devices = conversion.domain.devices;
        let xml: Vec<String> = devices
            .hostdevs
            .iter()
            .map(|d| Domain::device_xml("hostdev", d).unwrap())
            .collect();
        // KubeVirt's createUSBHostDevice: no managed attribute, the bus and
        // device numbers as the plugin gave them.
        assert_eq!(
            xml,
            [
                "<hostdev mode=\"subsystem\" type=\"usb\"><source><address bus=\"1\" device=\"5\"/></source><alias name=\"ua-usb-host-stick\"/></hostdev>",
                "<hostdev mode=\"subsystem\" type=\"usb\"><source><address bus=\"3\" device=\"12\"/></source><alias name=\"ua-usb-host-disk\"/></hostdev>",
            ]
        );
        assert_eq!(devices.hostdevs[0].host_address(), "001:005");
        // A USB device needs the USB controller.
        let usb = devices
            .controllers
            .iter()
            .find(|c| c.controller_type == "usb")
            .and_then(|c| c.model.clone());
        assert_eq!(usb.as_deref(), Some("qemu-xhci"));

        let three = convert(&vmi_with(spec(&["a", "b", "c"])), &ctx)
            .unwrap_err()
            .to_string();
        assert!(
            three.starts_with("spec.domain.devices.hostDevices[2]: every address in USB_RESOURCE_KUBEVIRT_IO_STORAGE is taken"),
            "{three}"
        );
        for bad in ["1-5", "0:5", "1:0", "1:128", "256:1", "1:", "x:1", "+1:2"] {
            let ctx = env(&[("USB_RESOURCE_KUBEVIRT_IO_STORAGE", bad)]);
            let err = convert(&vmi_with(spec(&["stick"])), &ctx)
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                format!(
                    "spec.domain.devices.hostDevices[0]: USB_RESOURCE_KUBEVIRT_IO_STORAGE holds {bad:?}, which is not a USB bus and device number such as 1:5"
                )
            );
        }
        // GPUs come from PCI and mediated devices only.
        let gpu = convert(
            &vmi_with(json!({"domain": {"devices": {"gpus": [{"name": "g", "deviceName": "kubevirt.io/storage"}]}}})),
            &ctx,
        )
        .unwrap_err()
        .to_string();
        assert!(gpu.contains("PCI_RESOURCE_KUBEVIRT_IO_STORAGE or MDEV_PCI_RESOURCE_KUBEVIRT_IO_STORAGE is not set"), "{gpu}");
    }

    #[test]
    fn claimed_devices_come_from_the_dra_metadata_with_kubevirts_aliases() {
        use crate::convert::DraDevice;
        let key = |c: &str, r: &str| (c.to_string(), r.to_string());
        let ctx = ConvertContext {
            dra_devices: [
                (
                    key("gpus", "pgpu"),
                    Ok(DraDevice::Pci("0000:81:00.0".into())),
                ),
                (key("gpus", "vgpu"), Ok(DraDevice::Mdev("u-1".into()))),
                (
                    key("nics", "nic"),
                    Ok(DraDevice::Pci("0000:3b:02.4".into())),
                ),
                (
                    key("gone", "x"),
                    Err("claim \"gone\" is not in spec.resourceClaims".into()),
                ),
            ]
            .into_iter()
            .collect(),
            ..context()
        };
        let devs = hostdevs(
            json!({"domain": {"devices": {
                "gpus": [{"name": "p", "claimName": "gpus", "requestName": "pgpu"},
                         {"name": "v", "claimName": "gpus", "requestName": "vgpu"}],
                "hostDevices": [{"name": "n", "claimName": "nics", "requestName": "nic"}]}}}),
            &ctx,
        )
        .unwrap();
        let xml: Vec<String> = devs
            .iter()
            .map(|d| Domain::device_xml("hostdev", d).unwrap())
            .collect();
        assert_eq!(
            xml,
            [
                "<hostdev mode=\"subsystem\" type=\"pci\" managed=\"no\"><source><address domain=\"0x0000\" bus=\"0x3b\" slot=\"0x02\" function=\"0x4\"/></source><alias name=\"ua-dra-hostdevice-n\"/></hostdev>",
                "<hostdev mode=\"subsystem\" type=\"pci\" managed=\"no\"><source><address domain=\"0x0000\" bus=\"0x81\" slot=\"0x00\" function=\"0x0\"/></source><alias name=\"ua-dra-gpu-p\"/></hostdev>",
                // KubeVirt's default: the first claimed vGPU shows a display.
                "<hostdev mode=\"subsystem\" type=\"mdev\" model=\"vfio-pci\" display=\"on\" ramfb=\"on\"><source><address uuid=\"u-1\"/></source><alias name=\"ua-dra-gpu-v\"/></hostdev>",
            ]
        );
        let off = hostdevs(
            json!({"domain": {"devices": {"gpus": [{"name": "v", "claimName": "gpus", "requestName": "vgpu",
                "virtualGPUOptions": {"display": {"enabled": false}}}]}}}),
            &ctx,
        )
        .unwrap();
        assert_eq!((off[0].display.clone(), off[0].ramfb.clone()), (None, None));

        let err = hostdevs(
            json!({"domain": {"devices": {"hostDevices": [{"name": "g", "claimName": "gone", "requestName": "x"}]}}}),
            &ctx,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "spec.domain.devices.hostDevices[0]: no device of claim \"gone\" request \"x\" was allocated to the launcher: claim \"gone\" is not in spec.resourceClaims"
        );
        let neither = hostdevs(
            json!({"domain": {"devices": {"gpus": [{"name": "g", "claimName": "gpus"}]}}}),
            &ctx,
        )
        .unwrap_err();
        assert_eq!(
            neither,
            "spec.domain.devices.gpus[0]: needs a deviceName (a device plugin's resource), or a claimName and a requestName (a resource claim)"
        );
    }

    #[test]
    fn sriov_interfaces_are_host_devices_of_their_networks_resource() {
        let ctx = env(&[
            ("KUBEVIRT_RESOURCE_NAME_sriov1", "intel.com/sriov_net"),
            ("PCI_RESOURCE_INTEL_COM_SRIOV_NET", "0000:3b:02.4"),
        ]);
        let spec = json!({"domain": {"devices": {"interfaces": [
            {"name": "default", "binding": {"name": "slirp"}},
            {"name": "sriov1", "sriov": {}, "pciAddress": "0000:00:0a.0", "bootOrder": 2}]}},
            "networks": [{"name": "default", "pod": {}},
                         {"name": "sriov1", "multus": {"networkName": "sriov-net"}}]});
        let conversion = convert(&vmi_with(spec.clone()), &ctx).unwrap();
        let devices = conversion.domain.devices;
        assert_eq!(
            devices.interfaces.len(),
            1,
            "the SR-IOV NIC is no <interface>"
        );
        let vf = &devices.hostdevs[0];
        assert_eq!(vf.alias.clone().unwrap_or_default().name, "ua-sriov-sriov1");
        assert_eq!(
            vf.source.address.clone().unwrap_or_default().describe(),
            "0000:3b:02.4"
        );
        assert_eq!(
            vf.address.clone().unwrap_or_default().slot.as_deref(),
            Some("0x0a")
        );
        assert_eq!(vf.boot.as_ref().map(|b| b.order), Some(2));
        let err = hostdevs(spec, &context()).unwrap_err();
        assert!(
            err.starts_with("spec.domain.devices.interfaces[1].sriov: the SR-IOV resource of network \"sriov1\" is not known: KUBEVIRT_RESOURCE_NAME_sriov1 is not set"),
            "{err}"
        );
    }
}
