//! Fields of KubeVirt's VMI that this launcher accepts but that do not
//! change the domain (scheduling, pod resources, image pulls, probes...).
//! The converter logs each one present at debug level, so a user who
//! wonders what became of a field can see that it was read and why it had
//! no effect.

use super::{IoThreadsPolicy, VirtualMachineInstance};

/// The JSON paths of the present fields that do not change the domain.
pub fn fields_without_effect(vmi: &VirtualMachineInstance) -> Vec<String> {
    let spec = &vmi.spec;
    let mut found: Vec<String> = [
        ("spec.priorityClassName", spec.priority_class_name.is_some()),
        ("spec.nodeSelector", spec.node_selector.is_some()),
        ("spec.affinity", spec.affinity.is_some()),
        ("spec.schedulerName", spec.scheduler_name.is_some()),
        ("spec.tolerations", spec.tolerations.is_some()),
        (
            "spec.topologySpreadConstraints",
            spec.topology_spread_constraints.is_some(),
        ),
        ("spec.evictionStrategy", spec.eviction_strategy.is_some()),
        ("spec.livenessProbe", spec.liveness_probe.is_some()),
        ("spec.readinessProbe", spec.readiness_probe.is_some()),
        ("spec.subdomain", spec.subdomain.is_some()),
        ("spec.dnsPolicy", spec.dns_policy.is_some()),
        ("spec.dnsConfig", spec.dns_config.is_some()),
        ("spec.accessCredentials", spec.access_credentials.is_some()),
        (
            "spec.serviceAccountName",
            spec.service_account_name.is_some(),
        ),
        (
            "spec.domain.resources.overcommitGuestOverhead",
            spec.domain.resources.overcommit_guest_overhead,
        ),
        (
            "spec.domain.memory.reservedOverhead",
            spec.domain
                .memory
                .as_ref()
                .is_some_and(|m| m.reserved_overhead.is_some()),
        ),
        // The launcher adds no spare PCIe ports for hotplug in any case.
        (
            "spec.domain.devices.disableHotplug",
            spec.domain.devices.disable_hotplug,
        ),
        // Only the supplementalPool policy, which is refused, uses it.
        (
            "spec.domain.ioThreads",
            spec.domain.io_threads.is_some()
                && spec.domain.io_threads_policy != Some(IoThreadsPolicy::SupplementalPool),
        ),
    ]
    .into_iter()
    .filter(|(_, present)| *present)
    .map(|(path, _)| path.to_string())
    .collect();
    for (i, volume) in spec.volumes.iter().enumerate() {
        let pulled = volume
            .container_disk
            .as_ref()
            .is_some_and(|c| c.image_pull_policy.is_some() || c.image_pull_secret.is_some());
        if pulled {
            found.push(format!(
                "spec.volumes[{i}].containerDisk.imagePullPolicy/imagePullSecret"
            ));
        }
    }
    let kernel_boot_pull = spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.kernel_boot.as_ref())
        .and_then(|k| k.container.as_ref())
        .is_some_and(|c| c.image_pull_policy.is_some() || c.image_pull_secret.is_some());
    if kernel_boot_pull {
        found.push(
            "spec.domain.firmware.kernelBoot.container.imagePullPolicy/imagePullSecret".to_string(),
        );
    }
    found
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
                       "devices": {"disableHotplug": true}},
            "volumes": [{"name": "r", "containerDisk": {"image": "x", "imagePullPolicy": "Always"}}]}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fields_without_effect(&vmi),
            [
                "spec.nodeSelector",
                "spec.serviceAccountName",
                "spec.domain.memory.reservedOverhead",
                "spec.domain.devices.disableHotplug",
                "spec.volumes[0].containerDisk.imagePullPolicy/imagePullSecret"
            ]
        );
        let bare = parse_vmi(&json!({"spec": {"domain": {}}})).unwrap_or_else(|e| panic!("{e}"));
        assert!(fields_without_effect(&bare).is_empty());
    }
}
