//! vCPUs, topology and CPU model (KubeVirt: converter/compute/cpu.go,
//! converter/vcpu/vcpu.go).

use super::{Checked, ConvertError, DomainType};
use crate::domxml::{self, CpuTopology, Domain, Vcpu, VcpuEntry, VcpuList};
use crate::vmi::{Cpu, Quantity, VirtualMachineInstance};

/// vCPU counts: `enabled` at boot, `total` including hot-pluggable sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vcpus {
    pub enabled: u32,
    pub total: u32,
}

const HOST_MODEL: &str = "host-model";
/// No x86_64 QEMU machine type takes more vCPUs (q35 of QEMU 9; QEMU 7.2's
/// q35 takes 288 and says so when it starts).
const MAX_VCPUS: u32 = 4096;
const HOST_PASSTHROUGH: &str = "host-passthrough";

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    domain_type: DomainType,
    domain: &mut Domain,
) -> Result<Vcpus, ConvertError> {
    let spec_cpu = vmi.spec.domain.cpu.as_ref();
    if let Some(cpu) = spec_cpu {
        reject_passthrough_under_emulation(cpu, domain_type)?;
    }
    let topology = topology(vmi)?;
    let enabled = vcpu_count(&topology)?;
    let mut cpu = domxml::Cpu::default();
    let vcpus = match count(spec_cpu.and_then(|c| c.max_sockets), "maxSockets")? {
        Some(max_sockets) => {
            let hotplug = hotplug_topology(&topology, max_sockets)?;
            let total = vcpu_count(&hotplug)?;
            domain.vcpus = Some(hotplug_vcpu_list(&topology, enabled, total));
            cpu.topology = Some(hotplug);
            Vcpus { enabled, total }
        }
        None => {
            cpu.topology = Some(topology);
            Vcpus {
                enabled,
                total: enabled,
            }
        }
    };
    domain.vcpu = Some(Vcpu {
        placement: Some("static".to_string()),
        current: None,
        count: vcpus.total,
    });
    configure_model(spec_cpu, &mut cpu);
    domain.cpu = Some(cpu);
    Ok(vcpus)
}

/// QEMU can only pass the host CPU through with KVM; under TCG the domain
/// would be defined but never start.
fn reject_passthrough_under_emulation(
    cpu: &Cpu,
    domain_type: DomainType,
) -> Result<(), ConvertError> {
    if domain_type == DomainType::Qemu && cpu.model.as_deref() == Some(HOST_PASSTHROUGH) {
        return Err(ConvertError::checked(
            Checked::EmulatedHostPassthrough,
            "spec.domain.cpu.model",
            "host-passthrough needs KVM, but this launcher emulates the VM (domain type qemu); use host-model or a named model",
        ));
    }
    Ok(())
}

/// sockets × cores × threads, each defaulting to 1. Without any of them,
/// KubeVirt takes the socket count from `resources.limits.cpu` or
/// `resources.requests.cpu`, rounded up ("500m" → 1). A CPU limit or
/// request is checked either way.
pub(crate) fn topology(vmi: &VirtualMachineInstance) -> Result<CpuTopology, ConvertError> {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let cores = count(cpu.and_then(|c| c.cores), "cores")?;
    let sockets = count(cpu.and_then(|c| c.sockets), "sockets")?;
    let threads = count(cpu.and_then(|c| c.threads), "threads")?;
    let resources = &vmi.spec.domain.resources;
    let limit = cpu_resource(resources.limits.get("cpu"), "limits")?;
    let request = cpu_resource(resources.requests.get("cpu"), "requests")?;
    let sockets = match (cores, sockets, threads) {
        (None, None, None) => limit.or(request).unwrap_or(1),
        _ => sockets.unwrap_or(1),
    };
    Ok(CpuTopology {
        sockets,
        dies: None,
        cores: cores.unwrap_or(1),
        threads: threads.unwrap_or(1),
    })
}

/// A topology count as given: absent, or 1 to [`MAX_VCPUS`]. KubeVirt
/// omits zero counts, so an explicit 0 is a mistake, not "unset".
fn count(value: Option<u32>, field: &str) -> Result<Option<u32>, ConvertError> {
    match value {
        None => Ok(None),
        Some(0) => Err(ConvertError::new(
            format!("spec.domain.cpu.{field}"),
            format!("{field} must be at least 1 (leave it out for the default of 1)"),
        )),
        Some(n) if n > MAX_VCPUS => Err(ConvertError::new(
            format!("spec.domain.cpu.{field}"),
            format!(
                "{n} {field} is more vCPUs than QEMU's x86_64 machines take (at most {MAX_VCPUS})"
            ),
        )),
        Some(n) => Ok(Some(n)),
    }
}

/// `resources.<kind>.cpu` as a CPU count, rounded up: absent, or 1 to
/// [`MAX_VCPUS`].
fn cpu_resource(quantity: Option<&Quantity>, kind: &str) -> Result<Option<u32>, ConvertError> {
    let Some(quantity) = quantity else {
        return Ok(None);
    };
    let path = format!("spec.domain.resources.{kind}.cpu");
    let count = quantity
        .ceil()
        .map_err(|err| ConvertError::new(&path, err.message))?;
    match u32::try_from(count) {
        Ok(n) if n > MAX_VCPUS => Err(ConvertError::new(
            path,
            format!(
                "{quantity} CPUs is more than QEMU's x86_64 machines take (at most {MAX_VCPUS})"
            ),
        )),
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(ConvertError::new(
            path,
            format!("{quantity} is not a usable CPU count (at least 1, at most {MAX_VCPUS})"),
        )),
    }
}

fn vcpu_count(topology: &CpuTopology) -> Result<u32, ConvertError> {
    let total =
        u64::from(topology.sockets) * u64::from(topology.cores) * u64::from(topology.threads);
    u32::try_from(total)
        .ok()
        .filter(|total| *total <= MAX_VCPUS)
        .ok_or_else(|| {
            ConvertError::new(
                "spec.domain.cpu",
                format!(
                    "sockets × cores × threads = {total} vCPUs, more than QEMU's x86_64 machines take (at most {MAX_VCPUS})"
                ),
            )
        })
}

fn hotplug_topology(topology: &CpuTopology, max_sockets: u32) -> Result<CpuTopology, ConvertError> {
    if max_sockets < topology.sockets {
        return Err(ConvertError::new(
            "spec.domain.cpu.maxSockets",
            format!(
                "maxSockets {max_sockets} is below sockets {}",
                topology.sockets
            ),
        ));
    }
    Ok(CpuTopology {
        sockets: max_sockets,
        ..topology.clone()
    })
}

/// KubeVirt's layout for CPU hotplug: the first `enabled` vCPUs are on, the
/// first socket can never be unplugged.
fn hotplug_vcpu_list(topology: &CpuTopology, enabled: u32, total: u32) -> VcpuList {
    let first_socket = topology.cores * topology.threads;
    let yes_no = |flag: bool| if flag { "yes" } else { "no" }.to_string();
    VcpuList {
        vcpu: (0..total)
            .map(|id| VcpuEntry {
                id,
                enabled: yes_no(id < enabled),
                hotpluggable: Some(yes_no(id >= first_socket)),
                order: None,
            })
            .collect(),
    }
}

/// `host-model` by default; host modes are copied; any other name is a
/// custom model, with `mpx` disabled as KubeVirt does (libvirt issue 304).
fn configure_model(spec_cpu: Option<&Cpu>, cpu: &mut domxml::Cpu) {
    let model = spec_cpu
        .and_then(|c| c.model.as_deref())
        .filter(|m| !m.is_empty());
    match model {
        None | Some(HOST_MODEL) => cpu.mode = Some(HOST_MODEL.to_string()),
        Some(HOST_PASSTHROUGH) => cpu.mode = Some(HOST_PASSTHROUGH.to_string()),
        Some(name) => {
            cpu.mode = Some("custom".to_string());
            cpu.model = Some(domxml::CpuModel {
                fallback: None,
                name: name.to_string(),
            });
        }
    }
    let features = spec_cpu.map(|c| c.features.as_slice()).unwrap_or_default();
    cpu.feature = features
        .iter()
        .map(|feature| domxml::CpuFeature {
            policy: Some(feature.policy.map_or("require", |p| p.as_str()).to_string()),
            name: feature.name.clone(),
        })
        .collect();
    let custom = cpu.mode.as_deref() == Some("custom");
    if custom && !features.iter().any(|f| f.name == "mpx") {
        cpu.feature.push(domxml::CpuFeature {
            policy: Some("disable".to_string()),
            name: "mpx".to_string(),
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::DomainType;
    use super::super::test_support::{context, convert_err, convert_ok, convert_with};

    fn cpu_of(spec: serde_json::Value) -> (u32, String, (u32, u32, u32)) {
        let domain = convert_ok(spec).domain;
        let cpu = domain.cpu.unwrap_or_default();
        let topology = cpu.topology.unwrap_or_default();
        (
            domain.vcpu.map(|v| v.count).unwrap_or_default(),
            cpu.mode.unwrap_or_default(),
            (topology.sockets, topology.cores, topology.threads),
        )
    }

    #[test]
    fn defaults_to_one_host_model_vcpu() {
        assert_eq!(cpu_of(json!({})), (1, "host-model".into(), (1, 1, 1)));
    }

    #[test]
    fn topology_math() {
        let spec = json!({"domain": {"cpu": {"sockets": 2, "cores": 3, "threads": 2}}});
        assert_eq!(cpu_of(spec), (12, "host-model".into(), (2, 3, 2)));
        let cores_only = json!({"domain": {"cpu": {"cores": 4}}});
        assert_eq!(cpu_of(cores_only).2, (1, 4, 1));
    }

    #[test]
    fn zero_and_huge_counts_name_their_field() {
        let zero = convert_err(json!({"domain": {"cpu": {"cores": 0}}}));
        assert_eq!(
            zero,
            "spec.domain.cpu.cores: cores must be at least 1 (leave it out for the default of 1)"
        );
        let threads = convert_err(json!({"domain": {"cpu": {"sockets": 2, "threads": 0}}}));
        assert!(
            threads.starts_with("spec.domain.cpu.threads: "),
            "{threads}"
        );
        let huge = convert_err(json!({"domain": {"cpu": {"cores": 100000}}}));
        assert_eq!(
            huge,
            "spec.domain.cpu.cores: 100000 cores is more vCPUs than QEMU's x86_64 machines take (at most 4096)"
        );
        let product =
            convert_err(json!({"domain": {"cpu": {"sockets": 64, "cores": 64, "threads": 2}}}));
        assert_eq!(
            product,
            "spec.domain.cpu: sockets × cores × threads = 8192 vCPUs, more than QEMU's x86_64 machines take (at most 4096)"
        );
        let limit = convert_err(json!({"domain": {"resources": {"limits": {"cpu": "100000"}}}}));
        assert_eq!(
            limit,
            "spec.domain.resources.limits.cpu: 100000 CPUs is more than QEMU's x86_64 machines take (at most 4096)"
        );
        let max = convert_err(json!({"domain": {"cpu": {"sockets": 1, "maxSockets": 0}}}));
        assert!(max.starts_with("spec.domain.cpu.maxSockets: "), "{max}");
    }

    #[test]
    fn a_cpu_request_or_limit_is_checked_when_the_topology_is_given_too() {
        for (resources, error) in [
            (
                json!({"requests": {"cpu": "5000"}}),
                "spec.domain.resources.requests.cpu: 5000 CPUs is more than QEMU's x86_64 machines take (at most 4096)",
            ),
            (
                json!({"limits": {"cpu": "0"}}),
                "spec.domain.resources.limits.cpu: 0 is not a usable CPU count (at least 1, at most 4096)",
            ),
            (
                json!({"limits": {"cpu": "2"}, "requests": {"cpu": "-1"}}),
                "spec.domain.resources.requests.cpu: -1 is not a usable CPU count (at least 1, at most 4096)",
            ),
        ] {
            for cpu in [json!({"cores": 1}), json!({})] {
                let spec = json!({"domain": {"cpu": cpu, "resources": resources}});
                assert_eq!(convert_err(spec), error, "cpu {cpu}");
            }
        }
        // In range, the topology given wins.
        let spec = json!({"domain": {"cpu": {"cores": 2},
            "resources": {"requests": {"cpu": "4096"}, "limits": {"cpu": "100m"}}}});
        assert_eq!(cpu_of(spec).2, (1, 2, 1));
    }

    #[test]
    fn cpu_resources_become_sockets_rounded_up() {
        let limits = json!({"domain": {"resources": {"limits": {"cpu": "2500m"}}}});
        assert_eq!(cpu_of(limits).2, (3, 1, 1));
        let requests = json!({"domain": {"resources": {"requests": {"cpu": "2"}}}});
        assert_eq!(cpu_of(requests).2, (2, 1, 1));
    }

    #[test]
    fn custom_model_disables_mpx_and_keeps_features() {
        let spec = json!({"domain": {"cpu": {"model": "Skylake-Server",
            "features": [{"name": "pcid"}, {"name": "ss", "policy": "disable"}]}}});
        let cpu = convert_ok(spec).domain.cpu.unwrap_or_default();
        assert_eq!(cpu.mode.as_deref(), Some("custom"));
        assert_eq!(cpu.model.map(|m| m.name).as_deref(), Some("Skylake-Server"));
        let features: Vec<(String, String)> = cpu
            .feature
            .into_iter()
            .map(|f| (f.name, f.policy.unwrap_or_default()))
            .collect();
        assert_eq!(
            features,
            [
                ("pcid".into(), "require".into()),
                ("ss".into(), "disable".into()),
                ("mpx".into(), "disable".into())
            ]
        );
        let mut kvm = context();
        kvm.domain_type = DomainType::Kvm;
        let passthrough = convert_with(
            json!({"domain": {"cpu": {"model": "host-passthrough"}}}),
            &kvm,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            passthrough.domain.cpu.and_then(|c| c.mode).as_deref(),
            Some("host-passthrough")
        );
        let emulated = convert_err(json!({"domain": {"cpu": {"model": "host-passthrough"}}}));
        assert!(
            emulated.starts_with("spec.domain.cpu.model: host-passthrough needs KVM"),
            "{emulated}"
        );
    }

    #[test]
    fn hotplug_sockets() {
        let domain =
            convert_ok(json!({"domain": {"cpu": {"sockets": 1, "cores": 2, "maxSockets": 3}}}))
                .domain;
        assert_eq!(domain.vcpu.map(|v| v.count), Some(6));
        let vcpus = domain.vcpus.unwrap_or_default().vcpu;
        let flags: Vec<(&str, &str)> = vcpus
            .iter()
            .map(|v| {
                (
                    v.enabled.as_str(),
                    v.hotpluggable.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            flags,
            [
                ("yes", "no"),
                ("yes", "no"),
                ("no", "yes"),
                ("no", "yes"),
                ("no", "yes"),
                ("no", "yes")
            ]
        );
        let message = convert_err(json!({"domain": {"cpu": {"sockets": 4, "maxSockets": 2}}}));
        assert_eq!(
            message,
            "spec.domain.cpu.maxSockets: maxSockets 2 is below sockets 4"
        );
    }
}
