//! Dedicated CPUs: vCPU, emulator-thread and I/O-thread pinning, guest NUMA
//! cells that mirror the host's, and real-time vCPUs (KubeVirt:
//! converter/vcpu/vcpu.go `AdjustDomainForTopologyAndCPUSet`, and the
//! webhook's `validateCpuPinning`, `validateNUMA`, `validateRealtime`).
//!
//! The CPUs come from the launcher's cpuset ([`ConvertContext::cpuset`],
//! which KubeVirt's kubelet CPU manager makes exclusive to the pod); the
//! host's NUMA cells and hyper-thread siblings decide which CPUs make a
//! core. The fitting follows KubeVirt: whole cores first, then cores
//! assembled within one NUMA cell, then (unless NUMA passthrough asks for
//! strict cells) threads from anywhere.

use std::collections::{BTreeMap, BTreeSet};

use super::probe::parse_cpu_list;
use super::{ConvertContext, ConvertError, HostCell, HostTopology, Refused};
use crate::domxml::{
    CpuTune, Domain, EmulatorPin, Flag, HugePage, IoThreadPin, KvmFeatures, MemNode,
    MemoryAllocation, Numa, NumaCell, NumaDistances, NumaSibling, NumaTune, NumaTuneMemory, State,
    VcpuPin, VcpuSched,
};
use crate::vmi::{Cpu, VirtualMachineInstance};

const CPU: &str = "spec.domain.cpu";
/// KubeVirt's annotation asking for a second emulator CPU when the vCPU
/// count is even (so that whole cores stay whole).
const EVEN_PARITY_ANNOTATION: &str = "kubevirt.io/emulator-thread-complete-to-even-parity";
/// The FIFO priority of real-time vCPUs (what KubeVirt's handler sets).
const REALTIME_PRIORITY: u32 = 1;

pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let Some(cpu) = vmi.spec.domain.cpu.as_ref() else {
        return Ok(());
    };
    let numa = cpu
        .numa
        .as_ref()
        .is_some_and(|n| n.guest_mapping_passthrough.is_some());
    validate(vmi, cpu, numa)?;
    if !cpu.dedicated_cpu_placement {
        return Ok(());
    }
    let cpuset = ctx.cpuset.as_ref().map_err(|why| {
        ConvertError::new(
            format!("{CPU}.dedicatedCpuPlacement"),
            format!(
                "dedicated CPUs come from the launcher's cpuset, which is not known: {why} (see --cpuset-file)"
            ),
        )
    })?;
    let (cores, threads_per_core) = requested_cores(domain);
    let total = cores * threads_per_core;
    let cells = cells_of(cpuset, ctx.host_topology.as_ref());
    let mut pool = CpuPool::new(threads_per_core, cells, !numa);
    let pinned = pool.fit_cores(cores).map_err(|why| {
        ConvertError::new(
            format!("{CPU}.dedicatedCpuPlacement"),
            format!(
                "{total} vCPUs do not fit the launcher's cpuset {}: {why}",
                cpu_list(cpuset)
            ),
        )
    })?;
    let mut tune = CpuTune {
        vcpupin: pinned
            .iter()
            .zip(0u32..)
            .map(|(host, vcpu)| VcpuPin {
                vcpu,
                cpuset: host.to_string(),
            })
            .collect(),
        ..CpuTune::default()
    };
    // Tell the guest its vCPUs never share a host CPU.
    let features = domain.features.get_or_insert_with(Default::default);
    features
        .kvm
        .get_or_insert_with(KvmFeatures::default)
        .hint_dedicated = Some(State::on_off(true));
    let emulator = if cpu.isolate_emulator_thread {
        let mut threads = vec![pool.fit_thread(&format!("{CPU}.isolateEmulatorThread"))?];
        if vmi
            .metadata
            .annotations
            .contains_key(EVEN_PARITY_ANNOTATION)
            && total % 2 == 0
        {
            threads.push(pool.fit_thread(&format!("{CPU}.isolateEmulatorThread"))?);
        }
        let set = cpu_list(&threads);
        tune.emulatorpin = Some(EmulatorPin {
            cpuset: set.clone(),
        });
        Some(set)
    } else {
        None
    };
    if let Some(count) = domain.iothreads {
        tune.iothreadpin = iothread_pins(count, total, cpuset, emulator.as_deref());
    }
    if let Some(realtime) = &cpu.realtime {
        let vcpus = realtime_vcpus(realtime.mask.as_deref(), total)?;
        tune.vcpusched.push(VcpuSched {
            vcpus,
            scheduler: "fifo".to_string(),
            priority: Some(REALTIME_PRIORITY),
        });
        // KubeVirt turns the PMU off for real-time guests.
        domain.features.get_or_insert_with(Default::default).pmu = Some(State::on_off(false));
    }
    if numa {
        let topology = ctx.host_topology.as_ref().ok_or_else(|| {
            ConvertError::new(
                format!("{CPU}.numa.guestMappingPassthrough"),
                "the host's NUMA topology could not be read (/sys/devices/system/node)",
            )
        })?;
        numa_mapping(topology, &pinned, cpu.realtime.is_some(), domain)?;
    }
    domain.cputune = Some(tune);
    Ok(())
}

/// The webhook's rules for these fields.
fn validate(vmi: &VirtualMachineInstance, cpu: &Cpu, numa: bool) -> Result<(), ConvertError> {
    let dedicated = cpu.dedicated_cpu_placement;
    if cpu.isolate_emulator_thread && !dedicated {
        return Err(ConvertError::new(
            format!("{CPU}.isolateEmulatorThread"),
            "isolateEmulatorThread needs dedicatedCpuPlacement: true",
        ));
    }
    if cpu.realtime.is_some() {
        if !dedicated {
            return Err(ConvertError::new(
                format!("{CPU}.dedicatedCpuPlacement"),
                format!("{CPU}.dedicatedCpuPlacement must be true when {CPU}.realtime is used"),
            ));
        }
        if !numa {
            return Err(ConvertError::new(
                format!("{CPU}.numa.guestMappingPassthrough"),
                format!(
                    "{CPU}.numa.guestMappingPassthrough must be set when {CPU}.realtime is used"
                ),
            ));
        }
    }
    if numa {
        if !dedicated {
            return Err(ConvertError::new(
                format!("{CPU}.numa.guestMappingPassthrough"),
                format!(
                    "{CPU}.dedicatedCpuPlacement must be true when {CPU}.numa.guestMappingPassthrough is set"
                ),
            ));
        }
        if vmi.hugepages().is_none() {
            return Err(ConvertError::new(
                format!("{CPU}.numa.guestMappingPassthrough"),
                "spec.domain.memory.hugepages must be requested when the guest's NUMA cells mirror the host's",
            ));
        }
    }
    Ok(())
}

/// Cores to pin (sockets × cores, without sockets that are only there for
/// CPU hotplug) and threads per core, from the converted topology.
fn requested_cores(domain: &Domain) -> (u32, u32) {
    let topology = domain
        .cpu
        .as_ref()
        .and_then(|c| c.topology.clone())
        .unwrap_or_default();
    let per_socket = topology.cores.max(1) * topology.threads.max(1);
    let disabled = domain
        .vcpus
        .as_ref()
        .map(|list| list.vcpu.iter().filter(|v| v.enabled != "yes").count())
        .unwrap_or(0);
    let disabled_sockets = u32::try_from(disabled).unwrap_or(u32::MAX) / per_socket;
    let sockets = topology.sockets.max(1).saturating_sub(disabled_sockets);
    (sockets * topology.cores.max(1), topology.threads.max(1))
}

/// The cpuset grouped into NUMA cells and cores, as KubeVirt's
/// `cpuChunksToCells`: each core is the CPU's siblings that are in the
/// cpuset. Without a host topology every CPU is a core of one cell.
fn cells_of(cpuset: &[u32], topology: Option<&HostTopology>) -> Vec<Vec<Vec<u32>>> {
    let available: BTreeSet<u32> = cpuset.iter().copied().collect();
    let Some(topology) = topology else {
        return vec![cpuset.iter().map(|cpu| vec![*cpu]).collect()];
    };
    let mut visited = BTreeSet::new();
    let mut cells: Vec<Vec<Vec<u32>>> = topology
        .cells
        .iter()
        .map(|HostCell { cpus, .. }| {
            let mut cores = Vec::new();
            for (cpu, siblings) in cpus {
                if visited.contains(cpu) {
                    continue;
                }
                let members: Vec<u32> = if siblings.is_empty() {
                    vec![*cpu]
                } else {
                    siblings.clone()
                };
                visited.extend(members.iter().copied());
                cores.push(
                    members
                        .into_iter()
                        .filter(|m| available.contains(m))
                        .collect(),
                );
            }
            cores
        })
        .collect();
    // CPUs of the cpuset the topology does not know (a cpuset file given
    // for tests, a hot-added CPU) are cores of a cell of their own.
    let unknown: Vec<Vec<u32>> = cpuset
        .iter()
        .filter(|cpu| !visited.contains(*cpu))
        .map(|cpu| vec![*cpu])
        .collect();
    if !unknown.is_empty() {
        cells.push(unknown);
    }
    cells
}

/// One NUMA cell's free CPUs: whole cores (at least `threads_per_core`
/// siblings) and loose threads.
#[derive(Debug)]
struct CellPool {
    full: Vec<Vec<u32>>,
    fragmented: Vec<u32>,
}

/// KubeVirt's `cpuPool`.
#[derive(Debug)]
struct CpuPool {
    cells: Vec<CellPool>,
    threads_per_core: usize,
    allow_cell_crossing: bool,
    available: usize,
}

impl CpuPool {
    fn new(threads_per_core: u32, cells: Vec<Vec<Vec<u32>>>, allow_cell_crossing: bool) -> CpuPool {
        let threads_per_core = threads_per_core.max(1) as usize;
        let available = cells.iter().flatten().map(Vec::len).sum();
        let cells = cells
            .into_iter()
            .map(|cores| {
                let mut cell = CellPool {
                    full: Vec::new(),
                    fragmented: Vec::new(),
                };
                for core in cores {
                    if core.len() >= threads_per_core {
                        cell.full.push(core);
                    } else {
                        cell.fragmented.extend(core);
                    }
                }
                cell
            })
            .collect();
        CpuPool {
            cells,
            threads_per_core,
            allow_cell_crossing,
            available,
        }
    }

    /// Host CPUs for `cores` cores of `threads_per_core` threads, in vCPU
    /// order.
    fn fit_cores(&mut self, cores: u32) -> Result<Vec<u32>, String> {
        let tpc = self.threads_per_core;
        let mut threads = Vec::new();
        let mut remaining = cores as usize;
        // Whole cores, then cores assembled from loose threads of one cell.
        for whole in [true, false] {
            for cell in &mut self.cells {
                while remaining > 0 {
                    let chunk = if whole {
                        cell.take_whole_core(tpc)
                    } else {
                        cell.take_fragmented_core(tpc)
                    };
                    let Some(chunk) = chunk else { break };
                    threads.extend(chunk);
                    remaining -= 1;
                }
            }
        }
        if remaining > 0 && self.allow_cell_crossing {
            let mut wanted = remaining * tpc;
            for cell in &mut self.cells {
                let take = wanted.min(cell.fragmented.len());
                threads.extend(cell.fragmented.drain(..take));
                wanted -= take;
            }
            remaining = wanted.div_ceil(tpc);
        }
        if remaining == 0 {
            Ok(threads)
        } else if self.allow_cell_crossing || self.available < cores as usize * tpc {
            Err(format!(
                "not enough exclusive CPUs, {remaining} core(s) of {tpc} thread(s) left over"
            ))
        } else {
            Err(format!(
                "{remaining} core(s) do not fit without crossing host NUMA cells"
            ))
        }
    }

    /// One more host CPU (the emulator thread), from the first cell with any.
    fn fit_thread(&mut self, path: &str) -> Result<u32, ConvertError> {
        let tpc = self.threads_per_core;
        self.cells
            .iter_mut()
            .find_map(|cell| cell.take_thread(tpc))
            .ok_or_else(|| {
                ConvertError::new(
                    path,
                    "the launcher's cpuset has no CPU left for the emulator thread after the vCPUs (it needs one more)",
                )
            })
    }
}

impl CellPool {
    fn take_whole_core(&mut self, tpc: usize) -> Option<Vec<u32>> {
        let first = self.full.first_mut()?;
        let selected: Vec<u32> = first.drain(..tpc).collect();
        if first.len() < tpc {
            let rest = self.full.remove(0);
            self.fragmented.extend(rest);
        }
        Some(selected)
    }

    fn take_fragmented_core(&mut self, tpc: usize) -> Option<Vec<u32>> {
        (self.fragmented.len() >= tpc).then(|| self.fragmented.drain(..tpc).collect())
    }

    fn take_thread(&mut self, tpc: usize) -> Option<u32> {
        if !self.fragmented.is_empty() {
            return Some(self.fragmented.remove(0));
        }
        let first = self.full.first_mut()?;
        let thread = first.remove(0);
        if first.len() < tpc {
            let rest = self.full.remove(0);
            self.fragmented.extend(rest);
        }
        Some(thread)
    }
}

/// KubeVirt's `FormatDomainIOThreadPin`: with an isolated emulator thread
/// the first I/O thread shares its CPU; otherwise the I/O threads spread
/// over the cpuset.
fn iothread_pins(
    count: u32,
    vcpus: u32,
    cpuset: &[u32],
    emulator: Option<&str>,
) -> Vec<IoThreadPin> {
    if let Some(emulator) = emulator {
        return vec![IoThreadPin {
            iothread: 1,
            cpuset: emulator.to_string(),
        }];
    }
    let vcpus = (vcpus as usize).min(cpuset.len()).max(1);
    let count_usize = count as usize;
    if count_usize >= vcpus {
        return (1..=count)
            .map(|thread| IoThreadPin {
                iothread: thread,
                cpuset: cpuset[thread as usize % vcpus].to_string(),
            })
            .collect();
    }
    let extra = vcpus % count_usize;
    let mut start = 0;
    (1..=count)
        .map(|thread| {
            let len = vcpus / count_usize + usize::from((thread as usize) <= extra);
            let end = (start + len).min(cpuset.len());
            let pin = IoThreadPin {
                iothread: thread,
                cpuset: cpu_list(&cpuset[start..end]),
            };
            start = end;
            pin
        })
        .collect()
}

/// The vCPUs of `realtime.mask` (all when absent), as a libvirt vCPU list.
fn realtime_vcpus(mask: Option<&str>, vcpus: u32) -> Result<String, ConvertError> {
    let path = format!("{CPU}.realtime.mask");
    let Some(mask) = mask.filter(|m| !m.trim().is_empty()) else {
        return Ok(format!("0-{}", vcpus.saturating_sub(1)));
    };
    let selected = parse_cpu_list(mask).map_err(|why| ConvertError::new(&path, why))?;
    if selected.is_empty() {
        return Err(ConvertError::new(
            &path,
            format!("{mask:?} selects no vCPU"),
        ));
    }
    if let Some(beyond) = selected.iter().find(|v| **v >= vcpus) {
        return Err(ConvertError::new(
            &path,
            format!("vCPU {beyond} does not exist (the VMI has {vcpus})"),
        ));
    }
    Ok(cpu_list(&selected))
}

/// KubeVirt's `numaMapping`: one guest cell per host cell the vCPUs are
/// pinned to, memory split evenly in whole hugepages and bound strictly to
/// that host cell.
fn numa_mapping(
    topology: &HostTopology,
    pinned: &[u32],
    realtime: bool,
    domain: &mut Domain,
) -> Result<(), ConvertError> {
    let path = format!("{CPU}.numa.guestMappingPassthrough");
    if domain.max_memory.is_some() {
        return Err(ConvertError::unsupported(
            Refused::NumaPassthroughWithMemoryHotplug,
            &path,
            "NUMA passthrough together with memory hotplug (maxGuest)",
        ));
    }
    let cell_of: BTreeMap<u32, u32> = topology
        .cells
        .iter()
        .flat_map(|cell| cell.cpus.iter().map(|(cpu, _)| (*cpu, cell.id)))
        .collect();
    let mut vcpus_by_cell: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (host, vcpu) in pinned.iter().zip(0u32..) {
        let cell = cell_of.get(host).ok_or_else(|| {
            ConvertError::new(
                &path,
                format!("host CPU {host} of the cpuset is in no NUMA cell of the host"),
            )
        })?;
        vcpus_by_cell.entry(*cell).or_default().push(vcpu);
    }
    // Guest cell ids follow the host's cell order.
    let involved: Vec<&HostCell> = topology
        .cells
        .iter()
        .filter(|c| vcpus_by_cell.contains_key(&c.id))
        .collect();
    let guest_id: BTreeMap<u32, u32> = involved
        .iter()
        .zip(0u32..)
        .map(|(c, g)| (c.id, g))
        .collect();
    let page = domain
        .memory_backing
        .as_ref()
        .and_then(|b| b.hugepages.as_ref())
        .and_then(|h| h.page.first())
        .map(|p| p.size * 1024)
        .ok_or_else(|| ConvertError::new(&path, "NUMA passthrough needs hugepages"))?;
    let memory = domain.memory.to_bytes().unwrap_or(0);
    let cells = involved.len() as u64;
    if memory < cells * page {
        return Err(ConvertError::new(
            &path,
            format!(
                "{memory} bytes of guest memory is less than one {page}-byte hugepage for each of the {cells} host NUMA cells the vCPUs are on"
            ),
        ));
    }
    // Whole pages per cell; the first cells take the pages left over.
    let pages = memory / page;
    let (per_cell, extra) = (pages / cells, pages % cells);
    let backing = domain.memory_backing.get_or_insert_with(Default::default);
    backing.allocation = Some(MemoryAllocation {
        mode: "immediate".to_string(),
    });
    if realtime {
        backing.nosharepages = Some(Flag {});
    }
    let mut guest_cells = Vec::new();
    let mut memnodes = Vec::new();
    for (host, guest) in involved.iter().zip(0u32..) {
        let cell_pages = per_cell + u64::from(u64::from(guest) < extra);
        let siblings: Vec<NumaSibling> = host
            .distances
            .iter()
            .filter_map(|(other, value)| {
                Some(NumaSibling {
                    id: *guest_id.get(other)?,
                    value: *value,
                })
            })
            .collect();
        guest_cells.push(NumaCell {
            id: Some(guest),
            cpus: Some(cpu_list(&vcpus_by_cell[&host.id])),
            memory: cell_pages * page / 1024,
            unit: Some("KiB".to_string()),
            distances: (!siblings.is_empty()).then_some(NumaDistances { sibling: siblings }),
            ..NumaCell::default()
        });
        memnodes.push(MemNode {
            cellid: guest,
            mode: "strict".to_string(),
            nodeset: host.id.to_string(),
        });
        if let Some(hugepages) = backing.hugepages.as_mut() {
            hugepages.page.push(HugePage {
                size: page / 1024,
                unit: Some("KiB".to_string()),
                nodeset: Some(guest.to_string()),
            });
        }
    }
    // The pages of the cells replace the one unbound page size.
    if let Some(hugepages) = backing.hugepages.as_mut() {
        hugepages.page.retain(|p| p.nodeset.is_some());
    }
    domain.cpu.get_or_insert_with(Default::default).numa = Some(Numa { cell: guest_cells });
    domain.numatune = Some(NumaTune {
        memory: Some(NumaTuneMemory {
            mode: "strict".to_string(),
            nodeset: cpu_list(&involved.iter().map(|c| c.id).collect::<Vec<_>>()),
        }),
        memnode: memnodes,
    });
    Ok(())
}

/// A CPU list as libvirt writes it back ("0-2,4"): sorted, runs as ranges.
fn cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{context, convert_with};
    use super::super::{ConvertContext, HostCell, HostTopology};
    use crate::domxml::Domain;

    fn ctx_with(cpuset: &[u32], topology: Option<HostTopology>) -> ConvertContext {
        let mut ctx = context();
        ctx.cpuset = Ok(cpuset.to_vec());
        ctx.host_topology = topology;
        ctx
    }

    /// Two cells of two cores with two threads each: 0-3 and 4-7.
    fn two_cells() -> HostTopology {
        let cell = |id: u32, first: u32| HostCell {
            id,
            cpus: (first..first + 4)
                .map(|cpu| {
                    let core = first + (cpu - first) / 2 * 2;
                    (cpu, vec![core, core + 1])
                })
                .collect(),
            distances: vec![
                (0, if id == 0 { 10 } else { 20 }),
                (1, if id == 1 { 10 } else { 20 }),
            ],
        };
        HostTopology {
            cells: vec![cell(0, 0), cell(1, 4)],
        }
    }

    fn domain(spec: serde_json::Value, ctx: &ConvertContext) -> Result<Domain, String> {
        convert_with(spec, ctx)
            .map(|c| c.domain)
            .map_err(|e| e.to_string())
    }

    fn pins(domain: &Domain) -> Vec<(u32, String)> {
        domain
            .cputune
            .as_ref()
            .map(|t| {
                t.vcpupin
                    .iter()
                    .map(|p| (p.vcpu, p.cpuset.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn vcpus_are_pinned_to_the_cpuset() {
        let spec = json!({"domain": {"cpu": {"cores": 2, "dedicatedCpuPlacement": true}}});
        let d = domain(spec, &ctx_with(&[2, 3], None)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pins(&d), [(0, "2".to_string()), (1, "3".to_string())]);
        let hint = d
            .features
            .and_then(|f| f.kvm)
            .and_then(|k| k.hint_dedicated)
            .map(|s| s.state);
        assert_eq!(hint.as_deref(), Some("on"));
    }

    #[test]
    fn whole_cores_come_first_and_threads_stay_siblings() {
        // CPUs 1 and 4-7: core 0-1 is broken, cores 4-5 and 6-7 are whole.
        let spec =
            json!({"domain": {"cpu": {"cores": 2, "threads": 2, "dedicatedCpuPlacement": true}}});
        let d = domain(spec, &ctx_with(&[1, 4, 5, 6, 7], Some(two_cells())))
            .unwrap_or_else(|e| panic!("{e}"));
        let hosts: Vec<String> = pins(&d).into_iter().map(|(_, c)| c).collect();
        assert_eq!(hosts, ["4", "5", "6", "7"]);
    }

    #[test]
    fn too_few_cpus_and_no_cpuset_are_errors_naming_the_field() {
        let spec = json!({"domain": {"cpu": {"cores": 3, "dedicatedCpuPlacement": true}}});
        let err = domain(spec.clone(), &ctx_with(&[0, 1], None))
            .err()
            .unwrap_or_default();
        assert!(
            err.starts_with("spec.domain.cpu.dedicatedCpuPlacement: 3 vCPUs do not fit the launcher's cpuset 0-1: not enough exclusive CPUs"),
            "{err}"
        );
        let unknown = domain(spec, &context()).err().unwrap_or_default();
        assert!(
            unknown.starts_with("spec.domain.cpu.dedicatedCpuPlacement: dedicated CPUs come from the launcher's cpuset, which is not known"),
            "{unknown}"
        );
    }

    #[test]
    fn the_emulator_thread_gets_a_cpu_of_its_own() {
        let spec = json!({"domain": {"cpu": {"cores": 2, "dedicatedCpuPlacement": true,
            "isolateEmulatorThread": true}, "ioThreadsPolicy": "shared"}});
        let d = domain(spec.clone(), &ctx_with(&[0, 1, 2], None)).unwrap_or_else(|e| panic!("{e}"));
        let tune = d.cputune.unwrap_or_default();
        assert_eq!(tune.emulatorpin.map(|e| e.cpuset).as_deref(), Some("2"));
        let full = domain(spec, &ctx_with(&[0, 1], None))
            .err()
            .unwrap_or_default();
        assert!(
            full.starts_with(
                "spec.domain.cpu.isolateEmulatorThread: the launcher's cpuset has no CPU left"
            ),
            "{full}"
        );
        let alone = domain(
            json!({"domain": {"cpu": {"isolateEmulatorThread": true}}}),
            &ctx_with(&[0, 1], None),
        )
        .err()
        .unwrap_or_default();
        assert_eq!(
            alone,
            "spec.domain.cpu.isolateEmulatorThread: isolateEmulatorThread needs dedicatedCpuPlacement: true"
        );
    }

    #[test]
    fn io_threads_spread_over_the_cpuset() {
        let spec = json!({"domain": {"cpu": {"cores": 4, "dedicatedCpuPlacement": true},
            "ioThreadsPolicy": "auto", "resources": {"requests": {"cpu": "1"}},
            "devices": {"disks": [{"name": "a", "disk": {"bus": "virtio"}}, {"name": "b", "disk": {"bus": "virtio"}}]}},
            "volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}}, {"name": "b", "emptyDisk": {"capacity": "1Gi"}}]});
        let d = domain(spec, &ctx_with(&[4, 5, 6, 7], None)).unwrap_or_else(|e| panic!("{e}"));
        let pins: Vec<(u32, String)> = d
            .cputune
            .unwrap_or_default()
            .iothreadpin
            .into_iter()
            .map(|p| (p.iothread, p.cpuset))
            .collect();
        assert_eq!(pins, [(1, "4-5".to_string()), (2, "6-7".to_string())]);
    }

    fn numa_spec(extra: serde_json::Value) -> serde_json::Value {
        let mut spec = json!({"domain": {"cpu": {"cores": 4, "dedicatedCpuPlacement": true,
            "numa": {"guestMappingPassthrough": {}}},
            "memory": {"guest": "6Mi", "hugepages": {"pageSize": "2Mi"}}}});
        if let (Some(cpu), Some(extra)) = (spec["domain"]["cpu"].as_object_mut(), extra.as_object())
        {
            for (k, v) in extra {
                cpu.insert(k.clone(), v.clone());
            }
        }
        spec
    }

    #[test]
    fn guest_numa_cells_mirror_the_host_cells_of_the_vcpus() {
        let d = domain(
            numa_spec(json!({})),
            &ctx_with(&[0, 1, 4, 5], Some(two_cells())),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let cells = d.cpu.clone().and_then(|c| c.numa).unwrap_or_default().cell;
        let summary: Vec<(Option<u32>, Option<String>, u64)> = cells
            .iter()
            .map(|c| (c.id, c.cpus.clone(), c.memory))
            .collect();
        // 3 pages of 2Mi over 2 cells: the first cell takes the odd page.
        assert_eq!(
            summary,
            [
                (Some(0), Some("0-1".to_string()), 4 << 10),
                (Some(1), Some("2-3".to_string()), 2 << 10)
            ]
        );
        assert_eq!(
            cells[0].distances.as_ref().map(|d| d
                .sibling
                .iter()
                .map(|s| (s.id, s.value))
                .collect::<Vec<_>>()),
            Some(vec![(0, 10), (1, 20)])
        );
        let tune = d.numatune.unwrap_or_default();
        assert_eq!(
            tune.memory.map(|m| (m.mode, m.nodeset)),
            Some(("strict".into(), "0-1".into()))
        );
        assert_eq!(tune.memnode.len(), 2);
        let backing = d.memory_backing.unwrap_or_default();
        assert_eq!(
            backing.allocation.map(|a| a.mode).as_deref(),
            Some("immediate")
        );
        let nodesets: Vec<Option<String>> = backing
            .hugepages
            .unwrap_or_default()
            .page
            .into_iter()
            .map(|p| p.nodeset)
            .collect();
        assert_eq!(nodesets, [Some("0".to_string()), Some("1".to_string())]);
    }

    #[test]
    fn numa_passthrough_and_realtime_rules() {
        let no_hugepages = domain(
            json!({"domain": {"cpu": {"dedicatedCpuPlacement": true, "numa": {"guestMappingPassthrough": {}}}}}),
            &ctx_with(&[0, 1], Some(two_cells())),
        )
        .err()
        .unwrap_or_default();
        assert!(
            no_hugepages.starts_with("spec.domain.cpu.numa.guestMappingPassthrough: spec.domain.memory.hugepages must be requested"),
            "{no_hugepages}"
        );
        let realtime_alone = domain(
            json!({"domain": {"cpu": {"dedicatedCpuPlacement": true, "realtime": {}}}}),
            &ctx_with(&[0, 1], None),
        )
        .err()
        .unwrap_or_default();
        assert_eq!(
            realtime_alone,
            "spec.domain.cpu.numa.guestMappingPassthrough: spec.domain.cpu.numa.guestMappingPassthrough must be set when spec.domain.cpu.realtime is used"
        );
        let no_topology = domain(numa_spec(json!({})), &ctx_with(&[0, 1, 2, 3], None))
            .err()
            .unwrap_or_default();
        assert!(
            no_topology.starts_with("spec.domain.cpu.numa.guestMappingPassthrough: the host's NUMA topology could not be read"),
            "{no_topology}"
        );
    }

    #[test]
    fn realtime_vcpus_run_fifo() {
        let d = domain(
            numa_spec(json!({"realtime": {"mask": "0-3,^1"}})),
            &ctx_with(&[0, 1, 2, 3], Some(two_cells())),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let sched = d.cputune.clone().unwrap_or_default().vcpusched;
        assert_eq!(
            sched
                .iter()
                .map(|s| (s.vcpus.as_str(), s.scheduler.as_str(), s.priority))
                .collect::<Vec<_>>(),
            [("0,2-3", "fifo", Some(1))]
        );
        assert_eq!(
            d.features.and_then(|f| f.pmu).map(|p| p.state).as_deref(),
            Some("off")
        );
        assert!(d.memory_backing.and_then(|b| b.nosharepages).is_some());
        let bad_mask = domain(
            numa_spec(json!({"realtime": {"mask": "7"}})),
            &ctx_with(&[0, 1, 2, 3], Some(two_cells())),
        )
        .err()
        .unwrap_or_default();
        assert_eq!(
            bad_mask,
            "spec.domain.cpu.realtime.mask: vCPU 7 does not exist (the VMI has 4)"
        );
    }
}
