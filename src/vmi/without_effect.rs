//! Fields of KubeVirt's VMI that this launcher accepts but that do not
//! change the domain (scheduling, pod resources, image pulls, probes...).
//! The converter logs each one present at debug level, so a user who
//! wonders what became of a field can see that it was read and why it had
//! no effect. [`WITHOUT_EFFECT`] is the table docs/vmi.md lists
//! (tests/vmi_doc.rs holds the document to it, and checks that each field
//! leaves the domain as it is).

use super::{IoThreadsPolicy, VirtualMachineInstance};

/// A field accepted without effect.
pub struct WithoutEffect {
    /// Its JSON path; `[]` stands for each index of a list.
    pub field: &'static str,
    present: Present,
}

/// Where a VMI has the field.
enum Present {
    /// The one field, when the function says it is there.
    Once(fn(&VirtualMachineInstance) -> bool),
    /// The indices of the list (`[]` in the path) whose item has it.
    At(fn(&VirtualMachineInstance) -> Vec<usize>),
}

impl WithoutEffect {
    /// The paths where `vmi` has this field, with their indices.
    pub fn present_in(&self, vmi: &VirtualMachineInstance) -> Vec<String> {
        match self.present {
            Present::Once(present) if present(vmi) => vec![self.field.to_string()],
            Present::Once(_) => Vec::new(),
            Present::At(indices) => indices(vmi)
                .into_iter()
                .map(|i| self.field.replacen("[]", &format!("[{i}]"), 1))
                .collect(),
        }
    }
}

const fn once(field: &'static str, present: fn(&VirtualMachineInstance) -> bool) -> WithoutEffect {
    WithoutEffect {
        field,
        present: Present::Once(present),
    }
}

const fn at(
    field: &'static str,
    indices: fn(&VirtualMachineInstance) -> Vec<usize>,
) -> WithoutEffect {
    WithoutEffect {
        field,
        present: Present::At(indices),
    }
}

/// The indices of the items of `list` that `has` says have the field.
fn indices<T>(list: &[T], has: impl Fn(&T) -> bool) -> Vec<usize> {
    list.iter()
        .enumerate()
        .filter(|(_, item)| has(item))
        .map(|(i, _)| i)
        .collect()
}

/// Every field accepted without effect, in docs/vmi.md's order.
pub const WITHOUT_EFFECT: &[WithoutEffect] = &[
    once("spec.priorityClassName", |v| {
        v.spec.priority_class_name.is_some()
    }),
    once("spec.nodeSelector", |v| v.spec.node_selector.is_some()),
    once("spec.affinity", |v| v.spec.affinity.is_some()),
    once("spec.schedulerName", |v| v.spec.scheduler_name.is_some()),
    once("spec.tolerations", |v| v.spec.tolerations.is_some()),
    once("spec.topologySpreadConstraints", |v| {
        v.spec.topology_spread_constraints.is_some()
    }),
    once("spec.evictionStrategy", |v| {
        v.spec.eviction_strategy.is_some()
    }),
    once("spec.livenessProbe", |v| v.spec.liveness_probe.is_some()),
    once("spec.readinessProbe", |v| v.spec.readiness_probe.is_some()),
    once("spec.subdomain", |v| v.spec.subdomain.is_some()),
    once("spec.dnsPolicy", |v| v.spec.dns_policy.is_some()),
    once("spec.dnsConfig", |v| v.spec.dns_config.is_some()),
    once("spec.accessCredentials", |v| {
        v.spec.access_credentials.is_some()
    }),
    once("spec.serviceAccountName", |v| {
        v.spec.service_account_name.is_some()
    }),
    once("spec.domain.resources.overcommitGuestOverhead", |v| {
        v.spec.domain.resources.overcommit_guest_overhead
    }),
    once("spec.domain.memory.reservedOverhead", |v| {
        v.spec
            .domain
            .memory
            .as_ref()
            .is_some_and(|m| m.reserved_overhead.is_some())
    }),
    // Only the supplementalPool policy, which is refused, uses it.
    once("spec.domain.ioThreads", |v| {
        v.spec.domain.io_threads.is_some()
            && v.spec.domain.io_threads_policy != Some(IoThreadsPolicy::SupplementalPool)
    }),
    at("spec.volumes[].containerDisk.imagePullPolicy", |v| {
        indices(&v.spec.volumes, |volume| {
            volume
                .container_disk
                .as_ref()
                .is_some_and(|c| c.image_pull_policy.is_some())
        })
    }),
    at("spec.volumes[].containerDisk.imagePullSecret", |v| {
        indices(&v.spec.volumes, |volume| {
            volume
                .container_disk
                .as_ref()
                .is_some_and(|c| c.image_pull_secret.is_some())
        })
    }),
    once(
        "spec.domain.firmware.kernelBoot.container.imagePullPolicy",
        |v| kernel_boot_container(v).is_some_and(|c| c.image_pull_policy.is_some()),
    ),
    once(
        "spec.domain.firmware.kernelBoot.container.imagePullSecret",
        |v| kernel_boot_container(v).is_some_and(|c| c.image_pull_secret.is_some()),
    ),
    // The tag only reaches the guest in a ConfigDrive's device metadata;
    // with a ConfigDrive it is refused (convert::Refused::ConfigDriveDiskTag).
    at("spec.domain.devices.disks[].tag", |v| {
        let config_drive = v
            .spec
            .volumes
            .iter()
            .any(|volume| volume.cloud_init_config_drive.is_some());
        if config_drive {
            return Vec::new();
        }
        indices(&v.spec.domain.devices.disks, |disk| {
            disk.tag.as_deref().is_some_and(|t| !t.is_empty())
        })
    }),
];

fn kernel_boot_container(vmi: &VirtualMachineInstance) -> Option<&super::KernelBootContainer> {
    vmi.spec
        .domain
        .firmware
        .as_ref()?
        .kernel_boot
        .as_ref()?
        .container
        .as_ref()
}

/// The JSON paths of the present fields that do not change the domain.
pub fn fields_without_effect(vmi: &VirtualMachineInstance) -> Vec<String> {
    WITHOUT_EFFECT
        .iter()
        .flat_map(|field| field.present_in(vmi))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::fields_without_effect;
    use crate::vmi::parse_vmi;

    #[test]
    fn lists_the_present_fields_that_change_nothing() {
        let vmi = parse_vmi(&json!({"spec": {
            "serviceAccountName": "builder",
            "nodeSelector": {"a": "b"},
            "domain": {"memory": {"guest": "1Gi", "reservedOverhead": {"addedOverhead": "100Mi"}},
                       "devices": {"disks": [{"name": "r"}, {"name": "s", "tag": "data"}]}},
            "volumes": [{"name": "r", "containerDisk": {"image": "x", "imagePullPolicy": "Always"}},
                        {"name": "s", "emptyDisk": {"capacity": "1Gi"}}]}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fields_without_effect(&vmi),
            [
                "spec.nodeSelector",
                "spec.serviceAccountName",
                "spec.domain.memory.reservedOverhead",
                "spec.volumes[0].containerDisk.imagePullPolicy",
                "spec.domain.devices.disks[1].tag",
            ]
        );
        let bare = parse_vmi(&json!({"spec": {"domain": {}}})).unwrap_or_else(|e| panic!("{e}"));
        assert!(fields_without_effect(&bare).is_empty());
    }

    #[test]
    fn disable_hotplug_changes_the_domain_and_is_not_listed() {
        let vmi = parse_vmi(&json!({"spec": {"domain": {"devices": {"disableHotplug": true}}}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(fields_without_effect(&vmi).is_empty());
    }

    #[test]
    fn a_disk_tag_with_a_config_drive_is_not_without_effect() {
        let vmi = parse_vmi(&json!({"spec": {
            "domain": {"devices": {"disks": [{"name": "s", "tag": "data"}]}},
            "volumes": [{"name": "s", "emptyDisk": {"capacity": "1Gi"}},
                        {"name": "ci", "cloudInitConfigDrive": {"userData": "#cloud-config"}}]}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(fields_without_effect(&vmi).is_empty());
    }
}
