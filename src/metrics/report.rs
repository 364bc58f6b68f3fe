//! The whole metrics page, in KubeVirt's order (pkg/downwardmetrics/
//! scraper `Report`): the host's static facts, QEMU's version, the VM's
//! CPU time, vCPUs and memory from libvirt's statistics, then the host's
//! figures.

use serde_json::{Map, Value as Json};

use super::host::HostSources;
use super::page::{Metric, Value};

/// What the launcher knows of the VM at one moment: libvirt's statistics
/// (as `query-stats` returns them) and QEMU's version
/// (`query-qemu-version`).
#[derive(Debug, Clone, PartialEq)]
pub struct VmFigures {
    pub stats: Map<String, Json>,
    pub qemu_version: String,
}

/// libvirt's `VIR_VCPU_OFFLINE`.
const VCPU_OFFLINE: u64 = 0;

/// The VM's metrics from its statistics: the vCPUs' time summed in
/// seconds, the vCPUs not offline, and the balloon's size (which is the
/// memory limit, since nothing inflates the balloon).
pub fn vm_metrics(stats: &Map<String, Json>) -> Vec<Metric> {
    let number = |key: String| stats.get(&key).and_then(Json::as_u64);
    let count = number("vcpu.current".to_string())
        .or_else(|| number("vcpu.maximum".to_string()))
        .unwrap_or(0);
    let (mut time_ns, mut online) = (0u64, 0i64);
    // libvirt lists each vCPU as vcpu.<n>.*, n up to vcpu.maximum.
    let maximum = number("vcpu.maximum".to_string()).unwrap_or(count);
    for n in 0..maximum {
        time_ns = time_ns.saturating_add(number(format!("vcpu.{n}.time")).unwrap_or(0));
        if number(format!("vcpu.{n}.state")).is_some_and(|s| s != VCPU_OFFLINE) {
            online += 1;
        }
    }
    let balloon = number("balloon.current".to_string()).unwrap_or(0);
    vec![
        Metric::vm(
            "TotalCPUTime",
            Value::Real64(time_ns as f64 / 1e9),
            Some("s"),
        ),
        Metric::vm("ResourceProcessorLimit", Value::Int64(online), None),
        Metric::vm(
            "PhysicalMemoryAllocatedToVirtualSystem",
            Value::UInt64(balloon),
            Some("KiB"),
        ),
        Metric::vm("ResourceMemoryLimit", Value::UInt64(balloon), Some("KiB")),
    ]
}

/// The page for `vm` on the host `host_name`, with the host's figures
/// read now (`now`: Unix seconds).
pub fn report(host_name: &str, vm: &VmFigures, host: &HostSources, now: i64) -> Vec<Metric> {
    let text = |name, value: &str| Metric::host(name, Value::String(value.to_string()), None);
    let mut metrics = vec![
        text("HostName", host_name),
        text("HostSystemInfo", "linux"),
        text("VirtualizationVendor", "kubevirt.io"),
        text("VirtProductInfo", &vm.qemu_version),
    ];
    metrics.extend(vm_metrics(&vm.stats));
    metrics.extend(host.collect(now));
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vm_figures_are_summed_as_kubevirt_sums_them() {
        let stats = json!({
            "state.state": 1,
            "vcpu.current": 2, "vcpu.maximum": 3,
            "vcpu.0.state": 1, "vcpu.0.time": 1_500_000_000u64,
            "vcpu.1.state": 2, "vcpu.1.time": 250_000_000u64,
            "vcpu.2.state": 0,
            "balloon.current": 1_048_576,
        });
        let metrics = vm_metrics(stats.as_object().unwrap());
        let values: Vec<(&str, Value)> =
            metrics.iter().map(|m| (m.name, m.value.clone())).collect();
        assert_eq!(
            values,
            [
                ("TotalCPUTime", Value::Real64(1.75)),
                ("ResourceProcessorLimit", Value::Int64(2)),
                (
                    "PhysicalMemoryAllocatedToVirtualSystem",
                    Value::UInt64(1_048_576)
                ),
                ("ResourceMemoryLimit", Value::UInt64(1_048_576)),
            ]
        );
    }

    #[test]
    fn the_page_has_kubevirts_metrics_in_its_order() {
        let vm = VmFigures {
            stats: json!({"vcpu.maximum": 1, "vcpu.0.state": 1, "vcpu.0.time": 7})
                .as_object()
                .unwrap()
                .clone(),
            qemu_version: "QEMU 7.2.22".into(),
        };
        let host = HostSources {
            proc: "/nonexistent".into(),
            sys: "/nonexistent".into(),
            page_size: 4096,
        };
        let page = report("node-1", &vm, &host, 42);
        let names: Vec<&str> = page.iter().map(|m| m.name).collect();
        assert_eq!(
            names,
            [
                "HostName",
                "HostSystemInfo",
                "VirtualizationVendor",
                "VirtProductInfo",
                "TotalCPUTime",
                "ResourceProcessorLimit",
                "PhysicalMemoryAllocatedToVirtualSystem",
                "ResourceMemoryLimit",
                "Time"
            ]
        );
        assert_eq!(page[0].value, Value::String("node-1".into()));
        assert_eq!(page[3].value, Value::String("QEMU 7.2.22".into()));
    }
}
