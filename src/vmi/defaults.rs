//! KubeVirt's defaults for a VMI that has not been through KubeVirt's
//! mutating webhook: `pkg/defaults` (`SetDefaultVirtualMachineInstance`,
//! `SetAmd64Defaults`, `hyperv.go`) and the API's own defaulters
//! (`api/core/v1/defaults.go`).
//!
//! [`apply`] fills only what is absent: a VMI that carries a value keeps
//! it, so a VMI that did go through the webhook converts the same. The
//! defaults that derive a number from another field (guest memory and CPU
//! topology from `resources`, the firmware UUID from the name) are applied
//! by the converter steps that use them, so that their errors name the
//! field the value came from. docs/vmi.md lists every default in one table.

use super::{
    CdromTarget, CpuFeature, CpuFeaturePolicy, Disk, DiskBus, DiskTarget, FeatureHyperv,
    FeatureState, I6300esbWatchdog, InputBus, InputType, Tray, VirtualMachineInstance, VmiError,
    WatchdogAction,
};

/// The bus of a disk, cdrom or LUN without one (amd64: KubeVirt supports
/// only q35, where IDE does not exist and SATA works in every guest).
pub const DEFAULT_DISK_BUS: DiskBus = DiskBus::Sata;

/// libvirt's (and KubeVirt's) Hyper-V spinlock retry count.
pub const DEFAULT_SPINLOCK_RETRIES: u32 = 4096;

/// The disk KubeVirt adds for a volume that no disk names
/// (`util.SetDefaultVolumeDisk`, then the disk defaults below).
pub fn disk_for_volume(name: &str) -> Disk {
    let mut disk = Disk {
        name: name.to_string(),
        ..Disk::default()
    };
    default_disk(&mut disk);
    disk
}

/// Fills in KubeVirt's defaults. Fails only where KubeVirt's webhook would
/// refuse the VMI after defaulting: a Hyper-V feature whose dependency was
/// explicitly disabled.
pub fn apply(vmi: &mut VirtualMachineInstance) -> Result<(), VmiError> {
    let devices = &mut vmi.spec.domain.devices;
    devices.disks.iter_mut().for_each(default_disk);
    if let Some(watchdog) = devices.watchdog.as_mut() {
        // SetAmd64Watchdog: an i6300esb that resets the guest.
        let i6300esb = watchdog
            .i6300esb
            .get_or_insert_with(I6300esbWatchdog::default);
        i6300esb.action.get_or_insert(WatchdogAction::Reset);
    }
    for input in &mut devices.inputs {
        input.bus.get_or_insert(InputBus::Usb);
        input.input_type.get_or_insert(InputType::Tablet);
    }
    let evmcs = match vmi
        .spec
        .domain
        .features
        .as_mut()
        .and_then(|f| f.hyperv.as_mut())
    {
        Some(hyperv) => {
            default_spinlocks(hyperv);
            hyperv_dependencies(hyperv)?;
            enabled(&hyperv.evmcs)
        }
        None => false,
    };
    if evmcs {
        // eVMCS is nested VMX: the guest needs the vmx CPU feature.
        let cpu = vmi.spec.domain.cpu.get_or_insert_with(Default::default);
        match cpu.features.iter_mut().find(|f| f.name == "vmx") {
            Some(vmx) => vmx.policy = Some(CpuFeaturePolicy::Require),
            None => cpu.features.push(CpuFeature {
                name: "vmx".to_string(),
                policy: Some(CpuFeaturePolicy::Require),
            }),
        }
    }
    Ok(())
}

/// `SetDefaults_DiskDevice`, `SetDefaults_CDRomTarget`, `setDefaultAmd64DisksBus`.
fn default_disk(disk: &mut Disk) {
    if disk.disk.is_none() && disk.lun.is_none() && disk.cdrom.is_none() {
        disk.disk = Some(DiskTarget::default());
    }
    if let Some(target) = disk.disk.as_mut() {
        target.bus.get_or_insert(DEFAULT_DISK_BUS);
    }
    if let Some(target) = disk.lun.as_mut() {
        target.bus.get_or_insert(DEFAULT_DISK_BUS);
    }
    if let Some(CdromTarget {
        bus,
        readonly,
        tray,
    }) = disk.cdrom.as_mut()
    {
        bus.get_or_insert(DEFAULT_DISK_BUS);
        readonly.get_or_insert(true);
        tray.get_or_insert(Tray::Closed);
    }
}

/// `SetDefaults_FeatureSpinlocks`: enabled spinlocks retry 4096 times.
fn default_spinlocks(hyperv: &mut FeatureHyperv) {
    if let Some(spinlocks) = hyperv.spinlocks.as_mut()
        && spinlocks.enabled != Some(false)
    {
        spinlocks.spinlocks.get_or_insert(DEFAULT_SPINLOCK_RETRIES);
    }
}

/// A feature given without `enabled: false` is on (`SetDefaults_FeatureState`).
fn enabled(state: &Option<FeatureState>) -> bool {
    state.as_ref().is_some_and(FeatureState::is_enabled)
}

/// `hyperv.go`: a feature that needs another one turns it on when the VMI
/// leaves it out, and is refused when the VMI turned it off.
fn hyperv_dependencies(hyperv: &mut FeatureHyperv) -> Result<(), VmiError> {
    const PATH: &str = "spec.domain.features.hyperv";
    // Leaves first, as KubeVirt walks them: turning on synic for synictimer
    // must then turn on vpindex for synic.
    let synictimer = hyperv
        .synictimer
        .as_ref()
        .is_some_and(|t| t.enabled != Some(false));
    let tlbflush = hyperv
        .tlbflush
        .as_ref()
        .is_some_and(|t| t.enabled != Some(false));
    let needs = [
        ("evmcs", enabled(&hyperv.evmcs), "vapic"),
        ("ipi", enabled(&hyperv.ipi), "vpindex"),
        ("tlbflush", tlbflush, "vpindex"),
        ("synictimer", synictimer, "synic"),
    ];
    for (feature, on, requirement) in needs {
        if on {
            require(hyperv, PATH, feature, requirement)?;
        }
    }
    if enabled(&hyperv.synic) {
        require(hyperv, PATH, "synic", "vpindex")?;
    }
    Ok(())
}

fn require(
    hyperv: &mut FeatureHyperv,
    path: &str,
    feature: &str,
    requirement: &str,
) -> Result<(), VmiError> {
    let state = match requirement {
        "vapic" => &mut hyperv.vapic,
        "vpindex" => &mut hyperv.vpindex,
        _ => &mut hyperv.synic,
    };
    match state {
        None => {
            *state = Some(FeatureState {
                enabled: Some(true),
            });
            Ok(())
        }
        Some(state) if state.is_enabled() => Ok(()),
        Some(_) => Err(VmiError {
            path: format!("{path}.{feature}"),
            message: format!(
                "{path}.{feature} requires {path}.{requirement}, which is disabled; enable it or disable {feature}"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::vmi::{LunTarget, parse_vmi};

    fn defaulted(domain: Value) -> Result<VirtualMachineInstance, VmiError> {
        let mut vmi = parse_vmi(&json!({"spec": {"domain": domain}}))?;
        apply(&mut vmi)?;
        Ok(vmi)
    }

    fn ok(domain: Value) -> VirtualMachineInstance {
        defaulted(domain).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn disks_cdroms_and_luns_without_a_bus_get_sata() {
        let vmi = ok(json!({"devices": {"disks": [
            {"name": "a"}, {"name": "b", "disk": {}}, {"name": "c", "cdrom": {}},
            {"name": "d", "lun": {}}, {"name": "e", "disk": {"bus": "virtio"}},
            {"name": "f", "cdrom": {"bus": "scsi", "readonly": false, "tray": "open"}}]}}));
        let disks = &vmi.spec.domain.devices.disks;
        assert_eq!(
            disks[0].disk.as_ref().and_then(|d| d.bus),
            Some(DiskBus::Sata)
        );
        assert_eq!(
            disks[1].disk.as_ref().and_then(|d| d.bus),
            Some(DiskBus::Sata)
        );
        assert_eq!(
            disks[2].cdrom,
            Some(CdromTarget {
                bus: Some(DiskBus::Sata),
                readonly: Some(true),
                tray: Some(Tray::Closed)
            })
        );
        assert_eq!(
            disks[3].lun,
            Some(LunTarget {
                bus: Some(DiskBus::Sata),
                ..LunTarget::default()
            })
        );
        // Values the VMI carries are kept.
        assert_eq!(
            disks[4].disk.as_ref().and_then(|d| d.bus),
            Some(DiskBus::Virtio)
        );
        assert_eq!(
            disks[5].cdrom,
            Some(CdromTarget {
                bus: Some(DiskBus::Scsi),
                readonly: Some(false),
                tray: Some(Tray::Open)
            })
        );
        assert_eq!(
            disk_for_volume("data").disk.and_then(|d| d.bus),
            Some(DiskBus::Sata)
        );
    }

    #[test]
    fn a_watchdog_resets_by_default_and_inputs_are_usb_tablets() {
        let vmi = ok(json!({"devices": {"watchdog": {"name": "w"},
            "inputs": [{"name": "t"}, {"name": "k", "type": "keyboard", "bus": "virtio"}]}}));
        let devices = &vmi.spec.domain.devices;
        assert_eq!(
            devices
                .watchdog
                .as_ref()
                .and_then(|w| w.i6300esb.as_ref())
                .and_then(|i| i.action),
            Some(WatchdogAction::Reset)
        );
        assert_eq!(
            (devices.inputs[0].bus, devices.inputs[0].input_type),
            (Some(InputBus::Usb), Some(InputType::Tablet))
        );
        assert_eq!(
            (devices.inputs[1].bus, devices.inputs[1].input_type),
            (Some(InputBus::Virtio), Some(InputType::Keyboard))
        );
        let poweroff =
            ok(json!({"devices": {"watchdog": {"name": "w", "i6300esb": {"action": "poweroff"}}}}));
        assert_eq!(
            poweroff
                .spec
                .domain
                .devices
                .watchdog
                .and_then(|w| w.i6300esb)
                .and_then(|i| i.action),
            Some(WatchdogAction::Poweroff)
        );
    }

    #[test]
    fn hyperv_dependencies_are_enabled_or_refused() {
        let vmi = ok(
            json!({"features": {"hyperv": {"synictimer": {}, "ipi": {}, "evmcs": {},
            "spinlocks": {}}}}),
        );
        let hyperv = vmi
            .spec
            .domain
            .features
            .and_then(|f| f.hyperv)
            .unwrap_or_default();
        assert!(enabled(&hyperv.synic) && enabled(&hyperv.vpindex) && enabled(&hyperv.vapic));
        assert_eq!(
            hyperv.spinlocks.and_then(|s| s.spinlocks),
            Some(DEFAULT_SPINLOCK_RETRIES)
        );
        let features = vmi.spec.domain.cpu.unwrap_or_default().features;
        assert_eq!(
            features,
            [CpuFeature {
                name: "vmx".into(),
                policy: Some(CpuFeaturePolicy::Require)
            }]
        );
        let refused = defaulted(json!({"features": {"hyperv": {"synic": {},
            "vpindex": {"enabled": false}}}}))
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            refused.as_deref(),
            Some(
                "spec.domain.features.hyperv.synic: spec.domain.features.hyperv.synic requires spec.domain.features.hyperv.vpindex, which is disabled; enable it or disable synic"
            )
        );
        // A disabled feature needs nothing.
        let off = ok(json!({"features": {"hyperv": {"synic": {"enabled": false}}}}));
        assert!(
            off.spec
                .domain
                .features
                .and_then(|f| f.hyperv)
                .unwrap_or_default()
                .vpindex
                .is_none()
        );
    }

    #[test]
    fn nothing_is_added_to_a_vmi_without_those_devices() {
        let vmi = ok(json!({}));
        assert!(vmi.spec.domain.devices.watchdog.is_none());
        assert!(vmi.spec.domain.features.is_none());
        assert!(vmi.spec.domain.cpu.is_none());
    }
}
