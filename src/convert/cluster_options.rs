//! What virt-handler sends beside the VMI (cmd v1's
//! `VirtualMachineOptions`: the cluster's configuration for this VMI),
//! applied to the converted domain as KubeVirt's launcher applies it in
//! its converter (manager.go's `generateConverterContext`, sysinfo.go,
//! balloon.go, disk.go's `VolumesDiscardIgnore`).
//!
//! Without options (the JSON protocol's `sync` without `options`, a
//! standalone launcher) the domain keeps this launcher's defaults, which
//! are KubeVirt's cluster defaults. With options, what they say counts,
//! as with KubeVirt: no SMBIOS values, no system entries beyond the uuid
//! and serial; a statistics period of 0, no balloon statistics.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{HostCell, HostTopology, set_balloon_stats_period};
use crate::domxml::{Domain, SysInfoEntries, SysInfoEntry};

/// The options this launcher applies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterOptions {
    /// The SMBIOS system values the cluster configures
    /// (`VirtualMachineSMBios`).
    #[serde(default)]
    pub smbios: Option<SmbiosSystem>,
    /// Seconds between the balloon's memory statistics; 0: none.
    #[serde(default)]
    pub mem_balloon_stats_period: u32,
    /// Volumes that are preallocated or thick-provisioned: their disks get
    /// no `discard='unmap'`, which would undo the preallocation.
    #[serde(default)]
    pub preallocated_volumes: BTreeSet<String>,
    /// The cluster turned free page reporting off
    /// (`clusterConfig.freePageReportingDisabled`).
    #[serde(default)]
    pub free_page_reporting_disabled: bool,
    /// EFI guests get the bochs display rather than VGA
    /// (`clusterConfig.bochsDisplayForEFIGuests`); `None`: this launcher's
    /// default, bochs, as KubeVirt's default cluster has it.
    #[serde(default)]
    pub bochs_display_for_efi_guests: Option<bool>,
    /// The serial console is not logged unless the VMI asks
    /// (`clusterConfig.serialConsoleLogDisabled`).
    #[serde(default)]
    pub serial_console_log_disabled: bool,
    /// The node's NUMA cells as virt-handler read them (`topology`): with
    /// it, dedicated CPUs are placed by it, as KubeVirt's launcher places
    /// them, instead of by this host's sysfs.
    #[serde(default)]
    pub topology: Option<NumaTopology>,
    /// Interface name to how its binding attaches it to the domain
    /// (`interfaceDomainAttachment`: `tap`, or `managedTap`, which the
    /// domain treats as `tap`). A network binding plugin's interface with
    /// no entry is left to the plugin's sidecar, as KubeVirt leaves it.
    #[serde(default)]
    pub interface_domain_attachment: Option<BTreeMap<String, String>>,
}

/// KubeVirt's `Topology`: the node's NUMA cells.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaTopology {
    #[serde(default)]
    pub cells: Vec<NumaCell>,
}

/// One NUMA cell: its id, its CPUs with their thread siblings, and its
/// distances to the cells (itself included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaCell {
    pub id: u32,
    #[serde(default)]
    pub cpus: Vec<NumaCpu>,
    #[serde(default)]
    pub distances: Vec<NumaDistance>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaCpu {
    pub id: u32,
    #[serde(default)]
    pub siblings: Vec<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaDistance {
    pub id: u32,
    pub value: u64,
}

impl NumaTopology {
    /// As the converter reads a host's topology; `None` for one without
    /// cells (virt-handler could not read the node's).
    pub fn to_host(&self) -> Option<HostTopology> {
        if self.cells.is_empty() {
            return None;
        }
        let cells = self
            .cells
            .iter()
            .map(|cell| HostCell {
                id: cell.id,
                cpus: cell
                    .cpus
                    .iter()
                    .map(|cpu| {
                        // libvirt's capabilities list a CPU among its own
                        // siblings; sysfs does too.
                        let mut siblings = cpu.siblings.clone();
                        if !siblings.contains(&cpu.id) {
                            siblings.push(cpu.id);
                            siblings.sort_unstable();
                        }
                        (cpu.id, siblings)
                    })
                    .collect(),
                distances: cell
                    .distances
                    .iter()
                    .map(|d| (d.id, u32::try_from(d.value).unwrap_or(u32::MAX)))
                    .collect(),
            })
            .collect();
        Some(HostTopology { cells })
    }
}

/// How a network binding plugin's interface is attached to the domain,
/// from `interfaceDomainAttachment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainAttachment {
    /// A tap device the plugin's CNI made: an `ethernet` interface.
    Tap,
    /// Nothing: the plugin's sidecar adds the interface.
    None,
}

impl ClusterOptions {
    /// Whether an EFI guest without a video type of its own gets bochs.
    pub(super) fn bochs_for_efi(options: Option<&ClusterOptions>) -> bool {
        options
            .and_then(|o| o.bochs_display_for_efi_guests)
            .unwrap_or(true)
    }

    /// Whether the serial console is logged: the VMI's
    /// `logSerialConsole` when it says, else unless the cluster turned
    /// it off (KubeVirt's `isSerialConsoleLogEnabled`).
    /// How a binding plugin's interface `name` is attached (KubeVirt's
    /// `DomainAttachmentByInterfaceName`); `None` without options (a
    /// standalone launcher, which knows the plugins it implements).
    pub(crate) fn domain_attachment(
        options: Option<&ClusterOptions>,
        name: &str,
    ) -> Option<DomainAttachment> {
        let map = options?.interface_domain_attachment.as_ref()?;
        Some(match map.get(name).map(String::as_str) {
            Some("tap" | "managedTap") => DomainAttachment::Tap,
            _ => DomainAttachment::None,
        })
    }

    pub(super) fn serial_console_log(options: Option<&ClusterOptions>, vmi: Option<bool>) -> bool {
        vmi.unwrap_or_else(|| !options.is_some_and(|o| o.serial_console_log_disabled))
    }
}

/// KubeVirt's `SMBios` message: the `<sysinfo>` system entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmbiosSystem {
    #[serde(default)]
    pub manufacturer: String,
    #[serde(default)]
    pub product: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub sku: String,
    #[serde(default)]
    pub family: String,
}

/// The system entries the options replace (this launcher's defaults
/// among them); uuid and serial come from the VMI.
const SMBIOS_FROM_OPTIONS: [&str; 5] = ["manufacturer", "family", "product", "sku", "version"];

/// Applies `options` to a converted domain.
pub(super) fn apply(options: &ClusterOptions, domain: &mut Domain) {
    apply_smbios(options.smbios.as_ref(), domain);
    set_balloon_stats_period(domain, options.mem_balloon_stats_period);
    if options.free_page_reporting_disabled
        && let Some(balloon) = domain.devices.memballoon.as_mut()
        && balloon.model != "none"
    {
        balloon.free_page_reporting = Some("off".to_string());
    }
    for disk in &mut domain.devices.disks {
        let volume = disk.alias.as_ref().and_then(|a| a.name.strip_prefix("ua-"));
        if volume.is_some_and(|v| options.preallocated_volumes.contains(v))
            && let Some(driver) = disk.driver.as_mut()
        {
            driver.discard = None;
        }
    }
}

/// KubeVirt writes the five values in this order; libvirt drops an empty
/// one, so it is left out here.
fn apply_smbios(smbios: Option<&SmbiosSystem>, domain: &mut Domain) {
    let Some(sysinfo) = domain.sysinfo.as_mut() else {
        return;
    };
    let system = sysinfo.system.get_or_insert_with(SysInfoEntries::default);
    system
        .entry
        .retain(|e| !SMBIOS_FROM_OPTIONS.contains(&e.name.as_str()));
    let Some(smbios) = smbios else {
        return;
    };
    let values = [
        ("manufacturer", &smbios.manufacturer),
        ("family", &smbios.family),
        ("product", &smbios.product),
        ("sku", &smbios.sku),
        ("version", &smbios.version),
    ];
    for (name, value) in values {
        if !value.is_empty() {
            system.entry.push(SysInfoEntry {
                name: name.to_string(),
                value: value.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{context, convert_with};
    use super::*;

    fn convert_with_options(vmi: serde_json::Value, options: ClusterOptions) -> Domain {
        let mut ctx = context();
        ctx.options = Some(options);
        convert_with(vmi, &ctx).unwrap().domain
    }

    fn system(domain: &Domain) -> Vec<(String, String)> {
        domain
            .sysinfo
            .as_ref()
            .and_then(|s| s.system.as_ref())
            .map(|s| {
                s.entry
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn smbios_values_replace_the_defaults_and_keep_uuid_and_serial() {
        let options: ClusterOptions = serde_json::from_value(json!({
            "smbios": {"manufacturer": "Acme", "product": "Rocket", "version": "2.1",
                       "sku": "R-1", "family": "Rockets"}
        }))
        .unwrap();
        let domain =
            convert_with_options(json!({"domain": {"firmware": {"serial": "s-1"}}}), options);
        let entries = system(&domain);
        let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "uuid",
                "serial",
                "manufacturer",
                "family",
                "product",
                "sku",
                "version"
            ]
        );
        assert_eq!(
            entries[2..],
            [
                ("manufacturer".into(), "Acme".into()),
                ("family".into(), "Rockets".into()),
                ("product".into(), "Rocket".into()),
                ("sku".into(), "R-1".into()),
                ("version".into(), "2.1".into()),
            ]
        );
        assert_eq!(entries[1], ("serial".into(), "s-1".into()));
    }

    #[test]
    fn options_without_smbios_leave_only_the_vmis_entries() {
        let domain = convert_with_options(json!({}), ClusterOptions::default());
        let names: Vec<String> = system(&domain).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["uuid"]);
        // And a period of 0: no statistics, as KubeVirt's balloon.go.
        let balloon = domain.devices.memballoon.unwrap();
        assert_eq!(balloon.stats, None);
    }

    #[test]
    fn balloon_period_and_free_page_reporting_follow_the_options() {
        let options = ClusterOptions {
            mem_balloon_stats_period: 7,
            free_page_reporting_disabled: true,
            ..ClusterOptions::default()
        };
        let balloon = convert_with_options(json!({}), options)
            .devices
            .memballoon
            .unwrap();
        assert_eq!(balloon.stats.map(|s| s.period), Some(7));
        assert_eq!(balloon.free_page_reporting.as_deref(), Some("off"));
        // Without options: this launcher's defaults.
        let balloon = convert_with(json!({}), &context())
            .unwrap()
            .domain
            .devices
            .memballoon
            .unwrap();
        assert_eq!(balloon.stats.map(|s| s.period), Some(10));
        assert_eq!(balloon.free_page_reporting.as_deref(), Some("on"));
    }

    #[test]
    fn the_efi_display_and_the_serial_log_follow_the_cluster() {
        let efi = json!({"domain": {"firmware": {"bootloader": {"efi": {"secureBoot": false}}}}});
        let video = |domain: &Domain| domain.devices.videos[0].model.model_type.clone();
        let logged = |domain: &Domain| domain.devices.serials[0].log.is_some();
        // Without options: bochs for EFI, the console logged.
        let defaults = convert_with(efi.clone(), &context()).unwrap().domain;
        assert_eq!(
            (video(&defaults), logged(&defaults)),
            ("bochs".into(), true)
        );
        // A cluster without the bochs display and the console log.
        let options = ClusterOptions {
            bochs_display_for_efi_guests: Some(false),
            serial_console_log_disabled: true,
            ..ClusterOptions::default()
        };
        let domain = convert_with_options(efi.clone(), options.clone());
        assert_eq!((video(&domain), logged(&domain)), ("vga".into(), false));
        assert_eq!(domain.devices.videos[0].model.vram, Some(16384));
        // The VMI's own logSerialConsole wins over the cluster.
        let mut asks = efi.clone();
        asks["domain"]["devices"] = json!({"logSerialConsole": true});
        assert!(logged(&convert_with_options(asks, options)));
        let bochs = ClusterOptions {
            bochs_display_for_efi_guests: Some(true),
            ..ClusterOptions::default()
        };
        assert_eq!(video(&convert_with_options(efi, bochs)), "bochs");
    }

    #[test]
    fn preallocated_volumes_lose_discard_unmap() {
        let vmi = json!({
            "domain": {"devices": {"disks": [
                {"name": "thick", "disk": {"bus": "virtio"}},
                {"name": "thin", "disk": {"bus": "virtio"}}
            ]}},
            "volumes": [
                {"name": "thick", "persistentVolumeClaim": {"claimName": "thick"}},
                {"name": "thin", "persistentVolumeClaim": {"claimName": "thin"}}
            ]
        });
        let options = ClusterOptions {
            preallocated_volumes: ["thick".to_string()].into(),
            ..ClusterOptions::default()
        };
        let domain = convert_with_options(vmi, options);
        let discard: Vec<(String, Option<String>)> = domain
            .devices
            .disks
            .iter()
            .map(|d| {
                (
                    d.alias.as_ref().unwrap().name.clone(),
                    d.driver.as_ref().unwrap().discard.clone(),
                )
            })
            .collect();
        assert_eq!(
            discard,
            [
                ("ua-thick".to_string(), None),
                ("ua-thin".to_string(), Some("unmap".to_string()))
            ]
        );
    }

    #[test]
    fn unknown_option_fields_are_refused() {
        let err = serde_json::from_value::<ClusterOptions>(json!({"smbois": {}})).unwrap_err();
        assert!(err.to_string().contains("unknown field `smbois`"), "{err}");
    }
}
