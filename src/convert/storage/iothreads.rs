//! I/O threads for virtio disks (KubeVirt converter.go
//! `getIOThreadsCountType`, `setIOThreads`).

use std::collections::BTreeMap;

use super::super::{ConvertError, Refused};
use super::DiskEntry;
use super::disks::device_and_bus;
use crate::vmi::{DiskBus, IoThreadsPolicy, VirtualMachineInstance};

/// I/O thread assignment (KubeVirt converter.go `getIOThreadsCountType`,
/// `setIOThreads`): a shared pool plus one thread per dedicated disk.
pub(super) struct IoThreadPlan {
    threads: BTreeMap<String, u32>,
    count: Option<u32>,
    pub(super) scsi_thread: Option<u32>,
}

impl IoThreadPlan {
    pub(super) fn new(
        vmi: &VirtualMachineInstance,
        disks: &[DiskEntry],
    ) -> Result<IoThreadPlan, ConvertError> {
        let policy = vmi.spec.domain.io_threads_policy;
        let dedicated = |entry: &DiskEntry| entry.disk.dedicated_io_thread == Some(true);
        let none = IoThreadPlan {
            threads: BTreeMap::new(),
            count: None,
            scsi_thread: None,
        };
        if policy.is_none() && !disks.iter().any(dedicated) {
            return Ok(none);
        }
        let pool_limit = match policy {
            Some(IoThreadsPolicy::SupplementalPool) => {
                return Err(ConvertError::unsupported(
                    Refused::SupplementalPoolIoThreads,
                    "spec.domain.ioThreadsPolicy",
                    "ioThreadsPolicy supplementalPool",
                ));
            }
            Some(IoThreadsPolicy::Auto) => auto_pool_limit(vmi)?,
            Some(IoThreadsPolicy::Shared) | None => 1,
        };
        let dedicated_count =
            u32::try_from(disks.iter().filter(|e| dedicated(e)).count()).unwrap_or(u32::MAX);
        let mut auto_count = u32::try_from(disks.len()).unwrap_or(u32::MAX) - dedicated_count;
        if auto_count + dedicated_count > pool_limit {
            // At least one shared thread remains.
            auto_count = pool_limit.saturating_sub(dedicated_count).max(1);
        }
        let mut threads = BTreeMap::new();
        let mut next_auto = 1;
        let mut next_dedicated = auto_count + 1;
        let mut scsi_dedicated = false;
        for entry in disks {
            let bus = device_and_bus(entry)
                .map(|(_, bus)| bus)
                .unwrap_or(DiskBus::Virtio);
            if bus == DiskBus::Scsi && dedicated(entry) {
                scsi_dedicated = true;
            }
            if bus != DiskBus::Virtio {
                continue;
            }
            let thread = if dedicated(entry) {
                next_dedicated += 1;
                next_dedicated - 1
            } else {
                let thread = next_auto;
                // Thread ids start at 1 and wrap around the shared pool.
                next_auto = next_auto % auto_count.max(1) + 1;
                thread
            };
            threads.insert(entry.disk.name.clone(), thread);
        }
        Ok(IoThreadPlan {
            threads,
            count: Some(auto_count + dedicated_count).filter(|count| *count > 0),
            scsi_thread: scsi_dedicated.then_some(next_auto),
        })
    }

    pub(super) fn thread_for(&self, entry: &DiskEntry) -> Option<u32> {
        self.threads.get(&entry.disk.name).copied()
    }

    pub(super) fn count(&self) -> Option<u32> {
        self.count
    }
}

/// "auto": twice the requested (else limited) CPUs, at least 2.
pub(super) fn auto_pool_limit(vmi: &VirtualMachineInstance) -> Result<u32, ConvertError> {
    let resources = &vmi.spec.domain.resources;
    let cpus = match (resources.requests.get("cpu"), resources.limits.get("cpu")) {
        (Some(cpu), _) => cpu
            .ceil()
            .map_err(|e| ConvertError::new("spec.domain.resources.requests.cpu", e.message))?,
        (None, Some(cpu)) => cpu
            .ceil()
            .map_err(|e| ConvertError::new("spec.domain.resources.limits.cpu", e.message))?,
        (None, None) => 1,
    };
    Ok(u32::try_from(cpus.max(1))
        .unwrap_or(u32::MAX / 2)
        .saturating_mul(2))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::super::test_support::convert_ok;

    #[test]
    fn io_threads_shared_and_dedicated() {
        let spec = json!({"domain": {"ioThreadsPolicy": "shared", "devices": {"disks": [
            {"name": "a", "disk": {"bus": "virtio"}}, {"name": "b", "disk": {"bus": "virtio"}, "dedicatedIOThread": true},
            {"name": "c", "disk": {"bus": "virtio"}}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}, {"name": "b", "emptyDisk": {"capacity": "1Gi"}},
                        {"name": "c", "emptyDisk": {"capacity": "1Gi"}}]});
        let domain = convert_ok(spec).domain;
        assert_eq!(domain.iothreads, Some(2));
        let threads: Vec<Option<u32>> = domain
            .devices
            .disks
            .iter()
            .map(|d| d.driver.as_ref().and_then(|dr| dr.iothread))
            .collect();
        assert_eq!(threads, [Some(1), Some(2), Some(1)]);
        assert!(convert_ok(json!({})).domain.iothreads.is_none());
    }
}
