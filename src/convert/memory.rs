//! Guest memory, hugepages and memory hotplug (KubeVirt: converter/compute/
//! memory.go, memory_backing.go, pkg/virt-launcher/virtwrap/converter/memory).

use super::ConvertError;
use super::cpu::Vcpus;
use crate::domxml::{
    Domain, HugePage, HugePages, MaxMemory, MemoryBacking, MemoryDevice, MemorySource,
    MemoryTarget, Numa, NumaCell, ScaledInteger,
};
use crate::vmi::{Quantity, VirtualMachineInstance};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// virtio-mem block size KubeVirt uses (`HotplugBlockAlignmentBytes`), or the
/// page size with 1Gi hugepages.
const HOTPLUG_BLOCK: u64 = 2 * MIB;
/// KubeVirt's webhook refuses less guest memory than 1M (10^6 bytes).
const MIN_GUEST: u64 = 1_000_000;
/// x86-64 addresses at most 2^52 bytes of physical memory (4Pi); QEMU
/// cannot give a guest more.
const MAX_GUEST: u64 = 1 << 52;
/// Annotation that turns the memfd backend off (KubeVirt `MemfdMemoryBackend`).
const MEMFD_ANNOTATION: &str = "kubevirt.io/memfd";

/// Guest memory in bytes and the JSON path it came from.
struct GuestMemory {
    bytes: u64,
    path: &'static str,
}

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    vcpus: Vcpus,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let guest = guest_memory(vmi)?;
    let page_size = hugepage_size(vmi, &guest)?;
    domain.memory = ScaledInteger::bytes(guest.bytes);

    let mut needs_numa = false;
    if let Some(page) = page_size {
        let memfd = vmi
            .metadata
            .annotations
            .get(MEMFD_ANNOTATION)
            .map(String::as_str)
            != Some("false");
        domain.memory_backing = Some(MemoryBacking {
            hugepages: Some(HugePages {
                page: vec![HugePage {
                    size: page / 1024,
                    unit: Some("KiB".to_string()),
                    nodeset: None,
                }],
            }),
            // memfd avoids SELinux trouble with hugetlbfs (kubevirt/kubevirt#3781)
            // and needs a guest NUMA node.
            source: memfd.then(|| MemorySource {
                source_type: "memfd".to_string(),
            }),
            ..MemoryBacking::default()
        });
        needs_numa |= memfd;
    }
    if let Some(hotplug_size) = hotplug_size(vmi, &guest, page_size)? {
        let block = match page_size {
            Some(page) if page >= GIB => page,
            _ => HOTPLUG_BLOCK,
        };
        if !hotplug_size.is_multiple_of(block) {
            return Err(ConvertError::new(
                "spec.domain.memory.maxGuest",
                format!(
                    "maxGuest minus guest memory must be a multiple of {} MiB",
                    block / MIB
                ),
            ));
        }
        let max = guest.bytes + hotplug_size;
        domain.max_memory = Some(MaxMemory {
            // virtio-mem needs no DIMM slot, but libvirt 9.0 refuses
            // maxMemory without at least one ("both maximum memory size and
            // memory slot count must be specified").
            slots: Some(1),
            unit: Some("b".to_string()),
            value: max,
        });
        // libvirt counts hot-pluggable memory devices in the total.
        domain.memory = ScaledInteger::bytes(max);
        domain.devices.memory_devices.push(MemoryDevice {
            model: "virtio-mem".to_string(),
            target: MemoryTarget {
                size: Some(ScaledInteger::bytes(hotplug_size)),
                node: Some(0),
                block: Some(ScaledInteger::bytes(block)),
                requested: Some(ScaledInteger::bytes(0)),
                current: None,
                address: None,
            },
            alias: None,
            address: None,
        });
        needs_numa = true;
    }
    if needs_numa && let Some(cpu) = domain.cpu.as_mut() {
        cpu.numa = Some(Numa {
            cell: vec![NumaCell {
                id: Some(0),
                cpus: Some(format!("0-{}", vcpus.total.saturating_sub(1))),
                memory: guest.bytes / 1024,
                unit: Some("KiB".to_string()),
                ..NumaCell::default()
            }],
        });
    }
    Ok(())
}

/// `memory.guest`, else `resources.requests.memory`, else
/// `resources.limits.memory`, rounded down to whole bytes as KubeVirt does.
fn guest_memory(vmi: &VirtualMachineInstance) -> Result<GuestMemory, ConvertError> {
    let domain = &vmi.spec.domain;
    let resources = &domain.resources;
    let (path, quantity) = match (
        domain.memory.as_ref().and_then(|m| m.guest.as_ref()),
        resources.requests.get("memory"),
        resources.limits.get("memory"),
        hugepage_size_given(vmi),
    ) {
        (Some(guest), _, _, _) => ("spec.domain.memory.guest", guest),
        (None, Some(request), _, _) => ("spec.domain.resources.requests.memory", request),
        (None, None, Some(limit), _) => ("spec.domain.resources.limits.memory", limit),
        // KubeVirt's setGuestMemory: one page of the hugepage size.
        (None, None, None, Some(page)) => ("spec.domain.memory.hugepages.pageSize", page),
        (None, None, None, None) => {
            return Err(ConvertError::new(
                "spec.domain.memory.guest",
                "no guest memory given; set spec.domain.memory.guest or spec.domain.resources.requests.memory",
            ));
        }
    };
    let bytes = positive_bytes(path, quantity)?;
    if bytes < MIN_GUEST {
        return Err(ConvertError::new(
            path,
            format!("{quantity} is less than the minimum of 1M guest memory"),
        ));
    }
    if bytes > MAX_GUEST {
        return Err(ConvertError::new(
            path,
            format!("{quantity} is more than x86-64 can address (at most 4Pi of guest memory)"),
        ));
    }
    Ok(GuestMemory { bytes, path })
}

fn hugepage_size_given(vmi: &VirtualMachineInstance) -> Option<&Quantity> {
    vmi.hugepages()?.page_size.as_ref()
}

fn positive_bytes(path: &str, quantity: &Quantity) -> Result<u64, ConvertError> {
    let bytes = quantity
        .floor()
        .map_err(|err| ConvertError::new(path, err.message))?;
    u64::try_from(bytes)
        .ok()
        .filter(|b| *b > 0)
        .ok_or_else(|| ConvertError::new(path, format!("{quantity} must be greater than zero")))
}

/// Page size in bytes; x86 hugepages are 2Mi or 1Gi and the guest memory must
/// be a whole number of pages.
fn hugepage_size(
    vmi: &VirtualMachineInstance,
    guest: &GuestMemory,
) -> Result<Option<u64>, ConvertError> {
    let Some(hugepages) = vmi
        .spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.hugepages.as_ref())
    else {
        return Ok(None);
    };
    const PATH: &str = "spec.domain.memory.hugepages.pageSize";
    let quantity = hugepages.page_size.as_ref().ok_or_else(|| {
        ConvertError::new(PATH, "pageSize is required with hugepages (2Mi or 1Gi)")
    })?;
    let size = positive_bytes(PATH, quantity)?;
    if size != 2 * MIB && size != GIB {
        return Err(ConvertError::new(
            PATH,
            format!("{quantity} is not an x86_64 hugepage size (use 2Mi or 1Gi)"),
        ));
    }
    if !guest.bytes.is_multiple_of(size) {
        return Err(ConvertError::new(
            guest.path,
            format!("guest memory must be a multiple of the hugepage size {quantity}"),
        ));
    }
    Ok(Some(size))
}

/// Bytes that can be hot-plugged (`maxGuest` − guest), if any.
fn hotplug_size(
    vmi: &VirtualMachineInstance,
    guest: &GuestMemory,
    page_size: Option<u64>,
) -> Result<Option<u64>, ConvertError> {
    const PATH: &str = "spec.domain.memory.maxGuest";
    let Some(max_guest) = vmi
        .spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.max_guest.as_ref())
    else {
        return Ok(None);
    };
    let max = positive_bytes(PATH, max_guest)?;
    if max > MAX_GUEST {
        return Err(ConvertError::new(
            PATH,
            format!("{max_guest} is more than x86-64 can address (at most 4Pi of guest memory)"),
        ));
    }
    if max == guest.bytes {
        return Ok(None);
    }
    if max < guest.bytes {
        return Err(ConvertError::new(
            PATH,
            format!("maxGuest {max_guest} is below the guest memory"),
        ));
    }
    // KubeVirt's webhook also asks for at least 1Gi of guest memory;
    // virtio-mem itself works with less (the test guest boots with 192Mi),
    // so the launcher does not refuse it.
    if page_size.is_none() && !guest.bytes.is_multiple_of(HOTPLUG_BLOCK) {
        return Err(ConvertError::new(
            guest.path,
            "guest memory must be a multiple of 2Mi with memory hotplug",
        ));
    }
    Ok(Some(max - guest.bytes))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::convert;
    use super::super::test_support::{context, convert_err, convert_ok, vmi_with};

    #[test]
    fn guest_memory_sources_in_kubevirt_order() {
        let from_requests = convert_ok(json!({})).domain.memory;
        assert_eq!(
            (from_requests.unit.as_deref(), from_requests.value),
            (Some("b"), 128 << 20)
        );
        let from_guest = convert_ok(json!({"domain": {"memory": {"guest": "1.5Gi"}}}))
            .domain
            .memory;
        assert_eq!(from_guest.value, 1_610_612_736);
        let decimal =
            convert_ok(json!({"domain": {"resources": {"requests": {"memory": "512M"}}}}))
                .domain
                .memory;
        assert_eq!(decimal.value, 512_000_000);
    }

    #[test]
    fn missing_or_zero_memory_is_an_error() {
        let mut vmi = vmi_with(json!({}));
        vmi.spec.domain.resources.requests.clear();
        let message = convert(&vmi, &context())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.starts_with("spec.domain.memory.guest: no guest memory given"),
            "{message}"
        );
        let zero = convert_err(json!({"domain": {"memory": {"guest": "0"}}}));
        assert_eq!(
            zero,
            "spec.domain.memory.guest: 0 must be greater than zero"
        );
    }

    #[test]
    fn too_little_or_too_much_memory_is_refused() {
        let tiny = convert_err(json!({"domain": {"resources": {"requests": {"memory": "1Ki"}}}}));
        assert_eq!(
            tiny,
            "spec.domain.resources.requests.memory: 1Ki is less than the minimum of 1M guest memory"
        );
        let huge = convert_err(json!({"domain": {"memory": {"guest": "1Ei"}}}));
        assert_eq!(
            huge,
            "spec.domain.memory.guest: 1Ei is more than x86-64 can address (at most 4Pi of guest memory)"
        );
        let max = convert_err(json!({"domain": {"memory": {"guest": "1Gi", "maxGuest": "1Ei"}}}));
        assert!(max.starts_with("spec.domain.memory.maxGuest: "), "{max}");
        assert_eq!(
            convert_ok(json!({"domain": {"memory": {"guest": "1M"}}}))
                .domain
                .memory
                .value,
            1_000_000
        );
    }

    #[test]
    fn hugepages_use_memfd_and_a_numa_cell() {
        let domain = convert_ok(json!({"domain": {"cpu": {"cores": 2},
            "memory": {"guest": "1Gi", "hugepages": {"pageSize": "2Mi"}}}}))
        .domain;
        let backing = domain.memory_backing.unwrap_or_default();
        let page = &backing.hugepages.unwrap_or_default().page[0];
        assert_eq!((page.size, page.unit.as_deref()), (2048, Some("KiB")));
        assert_eq!(
            backing.source.map(|s| s.source_type).as_deref(),
            Some("memfd")
        );
        let cell = &domain.cpu.unwrap_or_default().numa.unwrap_or_default().cell[0];
        assert_eq!((cell.cpus.as_deref(), cell.memory), (Some("0-1"), 1 << 20));
    }

    #[test]
    fn hugepage_errors() {
        let odd = convert_err(
            json!({"domain": {"memory": {"guest": "1Gi", "hugepages": {"pageSize": "4Ki"}}}}),
        );
        assert_eq!(
            odd,
            "spec.domain.memory.hugepages.pageSize: 4Ki is not an x86_64 hugepage size (use 2Mi or 1Gi)"
        );
        let misaligned =
            convert_err(json!({"domain": {"memory": {"hugepages": {"pageSize": "1Gi"}}}}));
        assert_eq!(
            misaligned,
            "spec.domain.resources.requests.memory: guest memory must be a multiple of the hugepage size 1Gi"
        );
    }

    #[test]
    fn max_guest_adds_virtio_mem() {
        let domain =
            convert_ok(json!({"domain": {"memory": {"guest": "2Gi", "maxGuest": "4Gi"}}})).domain;
        assert_eq!(domain.max_memory.map(|m| m.value), Some(4 << 30));
        assert_eq!(domain.memory.value, 4 << 30);
        let device = &domain.devices.memory_devices[0];
        assert_eq!(device.model, "virtio-mem");
        assert_eq!(device.target.size.as_ref().map(|s| s.value), Some(2 << 30));
        let cell = &domain.cpu.unwrap_or_default().numa.unwrap_or_default().cell[0];
        assert_eq!(cell.memory, 2 << 20);
        let same =
            convert_ok(json!({"domain": {"memory": {"guest": "2Gi", "maxGuest": "2048Mi"}}}))
                .domain;
        assert!(same.max_memory.is_none());
        let small =
            convert_ok(json!({"domain": {"memory": {"guest": "192Mi", "maxGuest": "512Mi"}}}))
                .domain;
        let device = &small.devices.memory_devices[0];
        assert_eq!(
            device.target.size.as_ref().map(|s| s.value),
            Some(320 << 20)
        );
    }

    #[test]
    fn hugepage_size_is_the_last_resort_for_guest_memory() {
        let mut vmi = vmi_with(json!({"domain": {"memory": {"hugepages": {"pageSize": "2Mi"}}}}));
        vmi.spec.domain.resources.requests.clear();
        let domain = convert(&vmi, &context())
            .unwrap_or_else(|e| panic!("{e}"))
            .domain;
        assert_eq!(domain.memory.value, 2 << 20);
    }
}
