//! The host's figures of the metrics page, from /proc and /sys as
//! KubeVirt's virt-handler reads them (pkg/downwardmetrics/scraper:
//! hostmetrics.go, vmstat.go). A figure that cannot be read is left out,
//! as KubeVirt leaves it out.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use super::page::{Metric, Value};

/// The kernel's clock ticks per second in /proc/stat (`USER_HZ`, 100 on
/// every Linux architecture this launcher runs on, as procfs assumes).
const USER_HZ: f64 = 100.0;

/// Where the figures are read: `/proc` and `/sys`, or a test's copies.
#[derive(Debug, Clone)]
pub struct HostSources {
    pub proc: std::path::PathBuf,
    pub sys: std::path::PathBuf,
    /// The page size, for /proc/vmstat's page counts.
    pub page_size: u64,
}

impl HostSources {
    pub fn system() -> HostSources {
        HostSources {
            proc: "/proc".into(),
            sys: "/sys".into(),
            page_size: crate::os::page_size(),
        }
    }

    /// The host's metrics in KubeVirt's order, `now` (Unix seconds) last.
    pub fn collect(&self, now: i64) -> Vec<Metric> {
        let mut metrics = Vec::new();
        if let Some(count) = physical_cpus(&self.sys) {
            metrics.push(Metric::host(
                "NumberOfPhysicalCPUs",
                Value::Int64(count),
                None,
            ));
        }
        match fs::read_to_string(self.proc.join("stat")).map(|t| cpu_seconds(&t)) {
            Ok(Some(seconds)) => metrics.push(Metric::host(
                "TotalCPUTime",
                Value::Real64(seconds),
                Some("s"),
            )),
            Ok(None) => log::debug!("metrics: no cpu line in /proc/stat"),
            Err(e) => log::debug!("metrics: cannot read /proc/stat: {e}"),
        }
        match fs::read_to_string(self.proc.join("meminfo")) {
            Ok(text) => metrics.extend(memory_metrics(&text)),
            Err(e) => log::debug!("metrics: cannot read /proc/meminfo: {e}"),
        }
        match fs::read_to_string(self.proc.join("vmstat")).map(|t| swap_pages(&t)) {
            Ok(Some((pages_in, pages_out))) => {
                let kib = |pages: u64| pages.saturating_mul(self.page_size) / 1024;
                metrics.push(Metric::host(
                    "PagedInMemory",
                    Value::UInt64(kib(pages_in)),
                    Some("KiB"),
                ));
                metrics.push(Metric::host(
                    "PagedOutMemory",
                    Value::UInt64(kib(pages_out)),
                    Some("KiB"),
                ));
            }
            Ok(None) => log::debug!("metrics: /proc/vmstat is malformed"),
            Err(e) => log::debug!("metrics: cannot read /proc/vmstat: {e}"),
        }
        metrics.push(Metric::host("Time", Value::Int64(now), Some("s")));
        metrics
    }
}

/// The number of distinct physical packages among the CPUs of
/// `<sys>/devices/system/cpu`; none if one CPU's topology cannot be read.
fn physical_cpus(sys: &Path) -> Option<i64> {
    let dir = sys.join("devices/system/cpu");
    let mut packages = BTreeSet::new();
    for entry in fs::read_dir(&dir).ok()?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_cpu = name
            .strip_prefix("cpu")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_cpu {
            continue;
        }
        let id = fs::read_to_string(entry.path().join("topology/physical_package_id")).ok()?;
        packages.insert(id.trim().to_string());
    }
    i64::try_from(packages.len()).ok()
}

/// user + nice + system of /proc/stat's `cpu` line, in seconds.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let mut fields = line.split_whitespace().skip(1);
    let mut ticks = 0u64;
    for _ in 0..3 {
        ticks = ticks.saturating_add(fields.next()?.parse::<u64>().ok()?);
    }
    Some(ticks as f64 / USER_HZ)
}

/// The memory metrics from /proc/meminfo (kB, as the page's KiB); a field
/// missing counts as 0, as in KubeVirt.
fn memory_metrics(meminfo: &str) -> Vec<Metric> {
    let field = |name: &str| {
        meminfo
            .lines()
            .find_map(|line| {
                let (key, rest) = line.split_once(':')?;
                (key == name).then(|| rest.split_whitespace().next()?.parse::<u64>().ok())?
            })
            .unwrap_or(0)
    };
    let (free, swap_free, total, swap_total) = (
        field("MemFree"),
        field("SwapFree"),
        field("MemTotal"),
        field("SwapTotal"),
    );
    let (buffers, cached, swap_cached) = (field("Buffers"), field("Cached"), field("SwapCached"));
    let kib = |name, value| Metric::host(name, Value::UInt64(value), Some("KiB"));
    vec![
        kib("FreePhysicalMemory", free),
        kib("FreeVirtualMemory", free.saturating_add(swap_free)),
        kib(
            "MemoryAllocatedToVirtualServers",
            total
                .saturating_sub(free)
                .saturating_sub(buffers)
                .saturating_sub(cached),
        ),
        kib(
            "UsedVirtualMemory",
            total
                .saturating_add(swap_total)
                .saturating_sub(free)
                .saturating_sub(cached)
                .saturating_sub(buffers)
                .saturating_sub(swap_cached),
        ),
    ]
}

/// `pswpin` and `pswpout` of /proc/vmstat (0 when absent); none if a line
/// is not a name and a number, as KubeVirt's reader refuses it.
fn swap_pages(vmstat: &str) -> Option<(u64, u64)> {
    let (mut pages_in, mut pages_out) = (0, 0);
    for line in vmstat.lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(value), None) = (fields.next(), fields.next(), fields.next()) else {
            return None;
        };
        match name {
            "pswpin" => pages_in = value.parse().ok()?,
            "pswpout" => pages_out = value.parse().ok()?,
            _ => {}
        }
    }
    Some((pages_in, pages_out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    const STAT: &str = "cpu  301854 612 111922 8979004 3552 0 3270 0 0 0\ncpu0 44490 19 21045 1087069 220 0 3200 0 0 0\nintr 1\n";
    const MEMINFO: &str = "MemTotal:       16042172 kB\nMemFree:          277120 kB\nMemAvailable:    8264840 kB\nBuffers:          614676 kB\nCached:          7186480 kB\nSwapCached:         4892 kB\nSwapTotal:       8388604 kB\nSwapFree:        8318952 kB\n";
    const VMSTAT: &str = "nr_free_pages 69280\npswpin 3916\npswpout 8609\n";

    fn value(metrics: &[Metric], name: &str) -> Value {
        metrics
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name} in {metrics:?}"))
            .value
            .clone()
    }

    #[test]
    fn figures_are_kubevirts() {
        let root = ScratchDir::new("metrics-host");
        let proc = root.join("proc");
        fs::create_dir_all(&proc).unwrap();
        fs::write(proc.join("stat"), STAT).unwrap();
        fs::write(proc.join("meminfo"), MEMINFO).unwrap();
        fs::write(proc.join("vmstat"), VMSTAT).unwrap();
        let sys = root.join("sys");
        for (cpu, package) in [("cpu0", "0"), ("cpu1", "0"), ("cpu2", "1")] {
            let topology = sys.join("devices/system/cpu").join(cpu).join("topology");
            fs::create_dir_all(&topology).unwrap();
            fs::write(topology.join("physical_package_id"), format!("{package}\n")).unwrap();
        }
        fs::create_dir_all(sys.join("devices/system/cpu/cpufreq")).unwrap();
        let sources = HostSources {
            proc,
            sys,
            page_size: 4096,
        };
        let metrics = sources.collect(1_618_492_780);
        let names: Vec<&str> = metrics.iter().map(|m| m.name).collect();
        assert_eq!(
            names,
            [
                "NumberOfPhysicalCPUs",
                "TotalCPUTime",
                "FreePhysicalMemory",
                "FreeVirtualMemory",
                "MemoryAllocatedToVirtualServers",
                "UsedVirtualMemory",
                "PagedInMemory",
                "PagedOutMemory",
                "Time"
            ]
        );
        assert_eq!(value(&metrics, "NumberOfPhysicalCPUs"), Value::Int64(2));
        // (301854 + 612 + 111922) / 100
        assert_eq!(value(&metrics, "TotalCPUTime"), Value::Real64(4143.88));
        assert_eq!(value(&metrics, "FreePhysicalMemory"), Value::UInt64(277120));
        assert_eq!(
            value(&metrics, "FreeVirtualMemory"),
            Value::UInt64(277120 + 8318952)
        );
        assert_eq!(
            value(&metrics, "MemoryAllocatedToVirtualServers"),
            Value::UInt64(16042172 - 277120 - 614676 - 7186480)
        );
        assert_eq!(
            value(&metrics, "UsedVirtualMemory"),
            Value::UInt64(16042172 + 8388604 - 277120 - 7186480 - 614676 - 4892)
        );
        assert_eq!(value(&metrics, "PagedInMemory"), Value::UInt64(3916 * 4));
        assert_eq!(value(&metrics, "PagedOutMemory"), Value::UInt64(8609 * 4));
        assert_eq!(value(&metrics, "Time"), Value::Int64(1_618_492_780));
    }

    #[test]
    fn what_cannot_be_read_is_left_out() {
        let root = ScratchDir::new("metrics-host-missing");
        let sources = HostSources {
            proc: root.join("proc"),
            sys: root.join("sys"),
            page_size: 4096,
        };
        let names: Vec<&str> = sources.collect(5).iter().map(|m| m.name).collect();
        assert_eq!(names, ["Time"]);
        assert_eq!(swap_pages("pswpin 1 2\n"), None);
        assert_eq!(cpu_seconds("cpu  x 1 2\n"), None);
    }

    #[test]
    fn the_real_host_has_every_figure() {
        let metrics = HostSources::system().collect(0);
        for name in ["TotalCPUTime", "FreePhysicalMemory", "Time"] {
            value(&metrics, name);
        }
    }
}
