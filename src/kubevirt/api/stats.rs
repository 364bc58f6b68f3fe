//! What `GetDomainStats` returns: KubeVirt's `stats.DomainStats`
//! (pkg/virt-launcher/virtwrap/stats), untagged Go structs (every field
//! written under its Go name, `...Set` flags beside the values), built
//! from libvirt's bulk statistics as `virsh domstats` names them (the
//! manager's statistics sample), the live domain's device aliases and vCPU
//! pinning, and the guest agent's load averages.
//!
//! KubeVirt's launcher reads the memory figures with
//! `virDomainMemoryStats`; the bulk statistics carry the same figures as
//! `balloon.*` (`actual` is `balloon.current`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::gojson::serialize_float;
use super::spec::DomainSpec;
use crate::agent::model::GuestLoad;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DomainStats {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "UUID")]
    pub uuid: String,
    #[serde(rename = "Cpu")]
    pub cpu: Option<CpuStats>,
    #[serde(rename = "Memory")]
    pub memory: Option<MemoryStats>,
    #[serde(rename = "MigrateDomainJobInfo")]
    pub migrate_domain_job_info: Option<DomainJobInfo>,
    #[serde(rename = "Vcpu")]
    pub vcpu: Vec<VcpuStats>,
    #[serde(rename = "Net")]
    pub net: Vec<NetStats>,
    #[serde(rename = "Block")]
    pub block: Vec<BlockStats>,
    #[serde(rename = "CPUMapSet")]
    pub cpu_map_set: bool,
    #[serde(rename = "CPUMap")]
    pub cpu_map: Option<Vec<Vec<bool>>>,
    #[serde(rename = "DirtyRate")]
    pub dirty_rate: Option<DirtyRateStats>,
    #[serde(rename = "Load")]
    pub load: Option<LoadStats>,
}

/// Declares a stats struct of `(Set flag, value)` pairs, each read from
/// one bulk statistic; the flag says whether libvirt reported it.
macro_rules! stat_pairs {
    ($(#[$meta:meta])* $name:ident { $($set:ident, $value:ident: $ty:ty = $go_set:literal, $go:literal;)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct $name {
            $(
                #[serde(rename = $go_set)]
                pub $set: bool,
                #[serde(rename = $go)]
                pub $value: $ty,
            )+
        }
    };
}

stat_pairs! {
    /// `stats.DomainStatsCPU`, in nanoseconds.
    CpuStats {
        time_set, time: u64 = "TimeSet", "Time";
        user_set, user: u64 = "UserSet", "User";
        system_set, system: u64 = "SystemSet", "System";
    }
}

stat_pairs! {
    /// `stats.DomainStatsMemory`, in KiB (the fault counts are counts).
    MemoryStats {
        unused_set, unused: u64 = "UnusedSet", "Unused";
        cached_set, cached: u64 = "CachedSet", "Cached";
        available_set, available: u64 = "AvailableSet", "Available";
        actual_balloon_set, actual_balloon: u64 = "ActualBalloonSet", "ActualBalloon";
        rss_set, rss: u64 = "RSSSet", "RSS";
        swap_in_set, swap_in: u64 = "SwapInSet", "SwapIn";
        swap_out_set, swap_out: u64 = "SwapOutSet", "SwapOut";
        major_fault_set, major_fault: u64 = "MajorFaultSet", "MajorFault";
        minor_fault_set, minor_fault: u64 = "MinorFaultSet", "MinorFault";
        usable_set, usable: u64 = "UsableSet", "Usable";
        total_set, total: u64 = "TotalSet", "Total";
    }
}

stat_pairs! {
    /// `stats.DomainJobInfo`: a migration's progress, all unset when
    /// none runs.
    DomainJobInfo {
        data_total_set, data_total: u64 = "DataTotalSet", "DataTotal";
        data_processed_set, data_processed: u64 = "DataProcessedSet", "DataProcessed";
        memory_bps_set, memory_bps: u64 = "MemoryBpsSet", "MemoryBps";
        data_remaining_set, data_remaining: u64 = "DataRemainingSet", "DataRemaining";
        mem_dirty_rate_set, mem_dirty_rate: u64 = "MemDirtyRateSet", "MemDirtyRate";
    }
}

stat_pairs! {
    /// `stats.DomainStatsVcpu`; `State` is libvirt's `virVcpuState`.
    VcpuStats {
        state_set, state: i64 = "StateSet", "State";
        time_set, time: u64 = "TimeSet", "Time";
        wait_set, wait: u64 = "WaitSet", "Wait";
        delay_set, delay: u64 = "DelaySet", "Delay";
    }
}

stat_pairs! {
    /// `stats.DomainStatsNet`: `Name` is the host side's device, `Alias`
    /// the domain's alias for the interface on it.
    NetStats {
        name_set, name: String = "NameSet", "Name";
        alias_set, alias: String = "AliasSet", "Alias";
        rx_bytes_set, rx_bytes: u64 = "RxBytesSet", "RxBytes";
        rx_pkts_set, rx_pkts: u64 = "RxPktsSet", "RxPkts";
        rx_errs_set, rx_errs: u64 = "RxErrsSet", "RxErrs";
        rx_drop_set, rx_drop: u64 = "RxDropSet", "RxDrop";
        tx_bytes_set, tx_bytes: u64 = "TxBytesSet", "TxBytes";
        tx_pkts_set, tx_pkts: u64 = "TxPktsSet", "TxPkts";
        tx_errs_set, tx_errs: u64 = "TxErrsSet", "TxErrs";
        tx_drop_set, tx_drop: u64 = "TxDropSet", "TxDrop";
    }
}

stat_pairs! {
    /// `stats.DomainStatsDirtyRate`.
    DirtyRateStats {
        calc_status_set, calc_status: i64 = "CalcStatusSet", "CalcStatus";
        calc_start_time_set, calc_start_time: i64 = "CalcStartTimeSet", "CalcStartTime";
        calc_period_set, calc_period: i64 = "CalcPeriodSet", "CalcPeriod";
        megabytes_per_second_set, megabytes_per_second: i64 = "MegabytesPerSecondSet", "MegabytesPerSecond";
    }
}

/// `stats.DomainStatsBlock`: `Name` is the target (`vda`), `Alias` the
/// disk's alias without KubeVirt's `ua-` (with no flag of its own).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockStats {
    #[serde(rename = "NameSet")]
    pub name_set: bool,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Alias")]
    pub alias: String,
    #[serde(rename = "BackingIndexSet")]
    pub backing_index_set: bool,
    #[serde(rename = "BackingIndex")]
    pub backing_index: u64,
    #[serde(rename = "PathSet")]
    pub path_set: bool,
    #[serde(rename = "Path")]
    pub path: String,
    #[serde(rename = "RdReqsSet")]
    pub rd_reqs_set: bool,
    #[serde(rename = "RdReqs")]
    pub rd_reqs: u64,
    #[serde(rename = "RdBytesSet")]
    pub rd_bytes_set: bool,
    #[serde(rename = "RdBytes")]
    pub rd_bytes: u64,
    #[serde(rename = "RdTimesSet")]
    pub rd_times_set: bool,
    #[serde(rename = "RdTimes")]
    pub rd_times: u64,
    #[serde(rename = "WrReqsSet")]
    pub wr_reqs_set: bool,
    #[serde(rename = "WrReqs")]
    pub wr_reqs: u64,
    #[serde(rename = "WrBytesSet")]
    pub wr_bytes_set: bool,
    #[serde(rename = "WrBytes")]
    pub wr_bytes: u64,
    #[serde(rename = "WrTimesSet")]
    pub wr_times_set: bool,
    #[serde(rename = "WrTimes")]
    pub wr_times: u64,
    #[serde(rename = "FlReqsSet")]
    pub fl_reqs_set: bool,
    #[serde(rename = "FlReqs")]
    pub fl_reqs: u64,
    #[serde(rename = "FlTimesSet")]
    pub fl_times_set: bool,
    #[serde(rename = "FlTimes")]
    pub fl_times: u64,
    #[serde(rename = "ErrorsSet")]
    pub errors_set: bool,
    #[serde(rename = "Errors")]
    pub errors: u64,
    #[serde(rename = "AllocationSet")]
    pub allocation_set: bool,
    #[serde(rename = "Allocation")]
    pub allocation: u64,
    #[serde(rename = "CapacitySet")]
    pub capacity_set: bool,
    #[serde(rename = "Capacity")]
    pub capacity: u64,
    #[serde(rename = "PhysicalSet")]
    pub physical_set: bool,
    #[serde(rename = "Physical")]
    pub physical: u64,
}

/// `stats.DomainStatsLoad`: the guest's load averages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadStats {
    #[serde(rename = "Load1mSet")]
    pub load1m_set: bool,
    #[serde(rename = "Load1m", serialize_with = "serialize_float")]
    pub load1m: f64,
    #[serde(rename = "Load5mSet")]
    pub load5m_set: bool,
    #[serde(rename = "Load5m", serialize_with = "serialize_float")]
    pub load5m: f64,
    #[serde(rename = "Load15mSet")]
    pub load15m_set: bool,
    #[serde(rename = "Load15m", serialize_with = "serialize_float")]
    pub load15m: f64,
}

impl LoadStats {
    /// What the agent reported (all unset before it did, or with an agent
    /// that has no `guest-get-load`).
    pub fn from_agent(load: Option<&GuestLoad>) -> LoadStats {
        match load {
            Some(load) => LoadStats {
                load1m_set: true,
                load1m: load.load1,
                load5m_set: true,
                load5m: load.load5,
                load15m_set: true,
                load15m: load.load15,
            },
            None => LoadStats::default(),
        }
    }
}

/// Everything `GetDomainStats` is built from.
#[derive(Debug, Clone, Copy)]
pub struct StatsSources<'a> {
    /// The domain's name and UUID (the bulk statistics do not carry them).
    pub name: &'a str,
    pub uuid: &'a str,
    /// The bulk statistics: `cpu.time`, `balloon.current`, `block.0.name`...
    pub bulk: &'a Map<String, Value>,
    /// The live domain (device aliases, vCPU pinning), when read.
    pub domain: Option<&'a DomainSpec>,
    /// How many CPUs the host has (the length of each CPU map row); no map
    /// without it.
    pub host_cpus: Option<usize>,
    pub load: Option<&'a GuestLoad>,
    /// The running migration's progress, if one runs.
    pub migration: Option<&'a DomainJobInfo>,
}

/// Reads the bulk statistics under one prefix.
struct Bulk<'a> {
    stats: &'a Map<String, Value>,
    prefix: String,
}

impl Bulk<'_> {
    fn u64(&self, key: &str) -> (bool, u64) {
        match self.value(key).and_then(Value::as_u64) {
            Some(v) => (true, v),
            None => (false, 0),
        }
    }

    fn i64(&self, key: &str) -> (bool, i64) {
        match self.value(key).and_then(Value::as_i64) {
            Some(v) => (true, v),
            None => (false, 0),
        }
    }

    fn string(&self, key: &str) -> (bool, String) {
        match self.value(key).and_then(Value::as_str) {
            Some(v) => (true, v.to_string()),
            None => (false, String::new()),
        }
    }

    fn value(&self, key: &str) -> Option<&Value> {
        self.stats.get(&format!("{}{key}", self.prefix))
    }

    /// How many items a `net.count`-like statistic says there are (bounded:
    /// the number comes from outside).
    fn count(&self, key: &str) -> usize {
        const MAX_ITEMS: u64 = 4096;
        let (_, n) = self.u64(key);
        usize::try_from(n.min(MAX_ITEMS)).unwrap_or(0)
    }
}

impl DomainStats {
    pub fn from_sources(sources: &StatsSources<'_>) -> DomainStats {
        let bulk = |prefix: &str| Bulk {
            stats: sources.bulk,
            prefix: prefix.to_string(),
        };
        let top = bulk("");
        let cpu_map = sources
            .domain
            .zip(sources.host_cpus)
            .map(|(spec, host_cpus)| cpu_map(spec, host_cpus));
        DomainStats {
            name: sources.name.to_string(),
            uuid: sources.uuid.to_string(),
            cpu: Some(cpu_stats(&bulk("cpu."))),
            memory: Some(memory_stats(&bulk("balloon."))),
            migrate_domain_job_info: Some(sources.migration.cloned().unwrap_or_default()),
            vcpu: (0..vcpu_count(&top))
                .map(|i| vcpu_stats(&bulk(&format!("vcpu.{i}."))))
                .collect(),
            net: (0..top.count("net.count"))
                .map(|i| net_stats(&bulk(&format!("net.{i}.")), sources.domain))
                .collect(),
            block: (0..top.count("block.count"))
                .map(|i| block_stats(&bulk(&format!("block.{i}.")), sources.domain))
                .collect(),
            cpu_map_set: cpu_map.is_some(),
            cpu_map,
            dirty_rate: Some(dirty_rate_stats(&bulk("dirtyrate."))),
            load: Some(LoadStats::from_agent(sources.load)),
        }
    }
}

fn cpu_stats(b: &Bulk<'_>) -> CpuStats {
    let (time_set, time) = b.u64("time");
    let (user_set, user) = b.u64("user");
    let (system_set, system) = b.u64("system");
    CpuStats {
        time_set,
        time,
        user_set,
        user,
        system_set,
        system,
    }
}

fn memory_stats(b: &Bulk<'_>) -> MemoryStats {
    let (unused_set, unused) = b.u64("unused");
    let (cached_set, cached) = b.u64("disk_caches");
    let (available_set, available) = b.u64("available");
    let (actual_balloon_set, actual_balloon) = b.u64("current");
    let (rss_set, rss) = b.u64("rss");
    let (swap_in_set, swap_in) = b.u64("swap_in");
    let (swap_out_set, swap_out) = b.u64("swap_out");
    let (major_fault_set, major_fault) = b.u64("major_fault");
    let (minor_fault_set, minor_fault) = b.u64("minor_fault");
    let (usable_set, usable) = b.u64("usable");
    MemoryStats {
        unused_set,
        unused,
        cached_set,
        cached,
        available_set,
        available,
        actual_balloon_set,
        actual_balloon,
        rss_set,
        rss,
        swap_in_set,
        swap_in,
        swap_out_set,
        swap_out,
        major_fault_set,
        major_fault,
        minor_fault_set,
        minor_fault,
        usable_set,
        usable,
        total_set: actual_balloon_set,
        total: actual_balloon,
    }
}

/// libvirt's Go binding reports one entry per possible vCPU.
fn vcpu_count(top: &Bulk<'_>) -> usize {
    match top.count("vcpu.maximum") {
        0 => top.count("vcpu.current"),
        n => n,
    }
}

fn vcpu_stats(b: &Bulk<'_>) -> VcpuStats {
    let (state_set, state) = b.i64("state");
    let (time_set, time) = b.u64("time");
    let (wait_set, wait) = b.u64("wait");
    let (delay_set, delay) = b.u64("delay");
    VcpuStats {
        state_set,
        state,
        time_set,
        time,
        wait_set,
        wait,
        delay_set,
        delay,
    }
}

fn net_stats(b: &Bulk<'_>, domain: Option<&DomainSpec>) -> NetStats {
    let (name_set, name) = b.string("name");
    let alias = name_set
        .then(|| interface_alias(domain, &name))
        .flatten()
        .unwrap_or_default();
    let (rx_bytes_set, rx_bytes) = b.u64("rx.bytes");
    let (rx_pkts_set, rx_pkts) = b.u64("rx.pkts");
    let (rx_errs_set, rx_errs) = b.u64("rx.errs");
    let (rx_drop_set, rx_drop) = b.u64("rx.drop");
    let (tx_bytes_set, tx_bytes) = b.u64("tx.bytes");
    let (tx_pkts_set, tx_pkts) = b.u64("tx.pkts");
    let (tx_errs_set, tx_errs) = b.u64("tx.errs");
    let (tx_drop_set, tx_drop) = b.u64("tx.drop");
    NetStats {
        name_set,
        name,
        alias_set: !alias.is_empty(),
        alias,
        rx_bytes_set,
        rx_bytes,
        rx_pkts_set,
        rx_pkts,
        rx_errs_set,
        rx_errs,
        rx_drop_set,
        rx_drop,
        tx_bytes_set,
        tx_bytes,
        tx_pkts_set,
        tx_pkts,
        tx_errs_set,
        tx_errs,
        tx_drop_set,
        tx_drop,
    }
}

fn block_stats(b: &Bulk<'_>, domain: Option<&DomainSpec>) -> BlockStats {
    let (name_set, name) = b.string("name");
    let alias = name_set
        .then(|| disk_alias(domain, &name))
        .flatten()
        .unwrap_or_default();
    let (backing_index_set, backing_index) = b.u64("backingIndex");
    let (path_set, path) = b.string("path");
    let (rd_reqs_set, rd_reqs) = b.u64("rd.reqs");
    let (rd_bytes_set, rd_bytes) = b.u64("rd.bytes");
    let (rd_times_set, rd_times) = b.u64("rd.times");
    let (wr_reqs_set, wr_reqs) = b.u64("wr.reqs");
    let (wr_bytes_set, wr_bytes) = b.u64("wr.bytes");
    let (wr_times_set, wr_times) = b.u64("wr.times");
    let (fl_reqs_set, fl_reqs) = b.u64("fl.reqs");
    let (fl_times_set, fl_times) = b.u64("fl.times");
    let (errors_set, errors) = b.u64("errors");
    let (allocation_set, allocation) = b.u64("allocation");
    let (capacity_set, capacity) = b.u64("capacity");
    let (physical_set, physical) = b.u64("physical");
    BlockStats {
        name_set,
        name,
        alias,
        backing_index_set,
        backing_index,
        path_set,
        path,
        rd_reqs_set,
        rd_reqs,
        rd_bytes_set,
        rd_bytes,
        rd_times_set,
        rd_times,
        wr_reqs_set,
        wr_reqs,
        wr_bytes_set,
        wr_bytes,
        wr_times_set,
        wr_times,
        fl_reqs_set,
        fl_reqs,
        fl_times_set,
        fl_times,
        errors_set,
        errors,
        allocation_set,
        allocation,
        capacity_set,
        capacity,
        physical_set,
        physical,
    }
}

fn dirty_rate_stats(b: &Bulk<'_>) -> DirtyRateStats {
    let (calc_status_set, calc_status) = b.i64("calc_status");
    let (calc_start_time_set, calc_start_time) = b.i64("calc_start_time");
    let (calc_period_set, calc_period) = b.i64("calc_period");
    let (megabytes_per_second_set, megabytes_per_second) = b.i64("megabytes_per_second");
    DirtyRateStats {
        calc_status_set,
        calc_status,
        calc_start_time_set,
        calc_start_time,
        calc_period_set,
        calc_period,
        megabytes_per_second_set,
        megabytes_per_second,
    }
}

/// The alias of the interface whose host device is `device` (KubeVirt's
/// launcher keeps a map from each target device to its alias).
fn interface_alias(domain: Option<&DomainSpec>, device: &str) -> Option<String> {
    domain?
        .devices
        .interfaces
        .iter()
        .flatten()
        .find(|i| i.target.as_ref().is_some_and(|t| t.device == device))
        .and_then(|i| i.alias.as_ref())
        .map(|a| a.name.clone())
}

/// The alias of the disk on target `device`.
fn disk_alias(domain: Option<&DomainSpec>, device: &str) -> Option<String> {
    domain?
        .devices
        .disks
        .iter()
        .flatten()
        .find(|d| !d.target.device.is_empty() && d.target.device == device)
        .and_then(|d| d.alias.as_ref())
        .map(|a| a.name.clone())
}

/// Each vCPU's host CPUs, as `virDomainGetVcpuPinInfo` reports them: a
/// pinned vCPU's `cpuset`, every host CPU for the others.
pub fn cpu_map(spec: &DomainSpec, host_cpus: usize) -> Vec<Vec<bool>> {
    let vcpus = spec.vcpu.as_ref().map_or(0, |v| v.cpus);
    let pins = spec
        .cpu_tune
        .as_ref()
        .and_then(|t| t.vcpu_pin.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    (0..vcpus)
        .map(|vcpu| {
            pins.iter()
                .find(|p| p.vcpu == vcpu)
                .and_then(|p| cpu_set(&p.cpu_set, host_cpus))
                .unwrap_or_else(|| vec![true; host_cpus])
        })
        .collect()
}

/// libvirt's cpuset syntax (`0-3,^2,6`) as one flag per host CPU; `None`
/// when it does not parse.
pub fn cpu_set(text: &str, host_cpus: usize) -> Option<Vec<bool>> {
    let mut set = vec![false; host_cpus];
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (negate, range) = match part.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, part),
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (a.trim().parse::<usize>().ok()?, b.trim().parse().ok()?),
            None => {
                let n = range.parse::<usize>().ok()?;
                (n, n)
            }
        };
        if first > last {
            return None;
        }
        for cpu in first..=last.min(host_cpus.saturating_sub(1)) {
            if let Some(flag) = set.get_mut(cpu) {
                *flag = !negate;
            }
        }
    }
    Some(set)
}

/// How many CPUs libvirt counts on this host: the highest present CPU's
/// number plus one (`/sys/devices/system/cpu/present`, e.g. `0-1`).
pub fn host_cpu_count() -> Option<usize> {
    let present = std::fs::read_to_string("/sys/devices/system/cpu/present").ok()?;
    let last = present.trim().rsplit([',', '-']).next()?;
    last.parse::<usize>().ok().map(|n| n + 1)
}
