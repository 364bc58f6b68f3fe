//! Host facts for the newer conversion steps, gathered by the caller before
//! [`super::convert`] (which never touches the filesystem): the launcher's
//! cpuset and the host's NUMA topology for dedicated CPUs, and which of the
//! candidate paths of hostDisk and kernelBoot files exist.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::{ConvertContext, HostCell, HostTopology, paths};
use crate::vmi::VirtualMachineInstance;

/// More CPUs than this in a cpuset line is refused (KubeVirt's
/// `MAX_CPU_LIMIT`), so a corrupt file cannot make the launcher allocate
/// without bound.
const MAX_CPUS: usize = 50_000;

/// The launcher's cpuset file, as KubeVirt's launcher reads it
/// (`cgroup.GetGlobalCpuSetPath`): `cpuset.cpus.effective` of the cgroup v2
/// root the launcher sees, else the cgroup v1 cpuset controller's
/// `cpuset.cpus`. In a pod both are the pod's own cgroup.
pub fn default_cpuset_file() -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").is_file() {
        root.join("cpuset.cpus.effective")
    } else {
        root.join("cpuset").join("cpuset.cpus")
    }
}

/// Whether the caller's vsock namespace is in the `local` mode, as
/// KubeVirt's `mode.VsockNsMode` reads `<proc>/sys/net/vsock/ns_mode`: a
/// kernel without vsock namespaces, a file that does not read, or any other
/// value is the `global` mode (`false`).
pub fn read_vsock_local_namespace(proc_dir: &Path) -> bool {
    fs::read_to_string(proc_dir.join("sys/net/vsock/ns_mode"))
        .is_ok_and(|mode| mode.trim() == "local")
}

/// The CPUs listed in a cpuset file ("0-3,8,10-11"), sorted.
pub fn read_cpuset(path: &Path) -> Result<Vec<u32>, String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let line = text.lines().next().unwrap_or_default();
    let cpus = parse_cpu_list(line).map_err(|why| format!("{}: {why}", path.display()))?;
    if cpus.is_empty() {
        return Err(format!("{} lists no CPU", path.display()));
    }
    Ok(cpus)
}

/// Parses the kernel's CPU list format ("0-3,8"), also used by
/// `realtime.mask` with `^N` exclusions ("0-3,^1").
pub(crate) fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut included = BTreeSet::new();
    let mut excluded = BTreeSet::new();
    let invalid = || format!("{text:?} is not a CPU list such as 0-3,8");
    for item in text
        .trim()
        .split(',')
        .filter(|item| !item.trim().is_empty())
    {
        let item = item.trim();
        let (set, item) = match item.strip_prefix('^') {
            Some(rest) => (&mut excluded, rest),
            None => (&mut included, item),
        };
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (a, b),
            None => (item, item),
        };
        let first: u32 = first.trim().parse().map_err(|_| invalid())?;
        let last: u32 = last.trim().parse().map_err(|_| invalid())?;
        if first > last {
            return Err(invalid());
        }
        for cpu in first..=last {
            set.insert(cpu);
            if set.len() > MAX_CPUS {
                return Err(format!("{text:?} lists more than {MAX_CPUS} CPUs"));
            }
        }
    }
    Ok(included.difference(&excluded).copied().collect())
}

/// The host's NUMA cells from sysfs (`<sys>/devices/system/node/node*/cpulist`
/// and `distance`, `<sys>/devices/system/cpu/cpu*/topology/
/// thread_siblings_list`), or `None` when the host shows no NUMA nodes.
pub fn detect_host_topology(sys: &Path) -> Option<HostTopology> {
    let node_dir = sys.join("devices/system/node");
    let mut ids: Vec<u32> = fs::read_dir(&node_dir)
        .ok()?
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    let mut cells = Vec::new();
    for id in &ids {
        let dir = node_dir.join(format!("node{id}"));
        let cpulist = fs::read_to_string(dir.join("cpulist")).ok()?;
        let cpus = parse_cpu_list(&cpulist)
            .ok()?
            .into_iter()
            .map(|cpu| {
                let siblings = fs::read_to_string(sys.join(format!(
                    "devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
                )))
                .ok()
                .and_then(|text| parse_cpu_list(&text).ok())
                .unwrap_or_else(|| vec![cpu]);
                (cpu, siblings)
            })
            .collect();
        // "10 21": the distance to each node, in node order.
        let distances = fs::read_to_string(dir.join("distance"))
            .unwrap_or_default()
            .split_whitespace()
            .zip(&ids)
            .filter_map(|(value, other)| Some((*other, value.parse().ok()?)))
            .collect();
        cells.push(HostCell {
            id: *id,
            cpus,
            distances,
        });
    }
    (!cells.is_empty()).then_some(HostTopology { cells })
}

/// Which candidate paths of the VMI's hostDisk volumes and kernelBoot files
/// exist: KubeVirt's mount of each hostDisk's directory
/// (`<private>/vmi-disks/<volume>/`) and the file in it, the hostDisk path
/// itself, the kernel-boot container's files under
/// `<container-disk-dir>/kernel-boot/`, and the absolute paths the VMI
/// names.
pub fn detect_present_paths(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
) -> BTreeSet<PathBuf> {
    let mut candidates = Vec::new();
    for volume in &vmi.spec.volumes {
        if let Some(host_disk) = &volume.host_disk
            && paths::is_dns_label(&volume.name)
        {
            let mount = paths::host_disk_mount_dir(ctx, &volume.name);
            if let Some(file) = paths::host_disk_in_mount(ctx, &volume.name, &host_disk.path) {
                candidates.push(file);
            }
            candidates.push(mount);
            candidates.push(PathBuf::from(&host_disk.path));
        }
    }
    let container = vmi
        .spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.kernel_boot.as_ref())
        .and_then(|k| k.container.as_ref());
    if let Some(container) = container {
        for file in [&container.kernel_path, &container.initrd_path]
            .into_iter()
            .flatten()
        {
            if let Some(artifact) = paths::kernel_boot_artifact(ctx, file) {
                candidates.push(artifact);
            }
            candidates.push(PathBuf::from(file));
        }
    }
    candidates
        .into_iter()
        .filter(|path| path.is_absolute() && path.exists())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::scratch::ScratchDir;

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new(&format!("probe-{name}"))
    }

    fn write(path: PathBuf, text: &str) {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_vsock_namespace_is_local_only_when_the_kernel_says_so() {
        let dir = scratch("vsock");
        assert!(!read_vsock_local_namespace(&dir.join("missing")));
        write(dir.join("sys/net/vsock/ns_mode"), "global\n");
        assert!(!read_vsock_local_namespace(&dir));
        write(dir.join("sys/net/vsock/ns_mode"), "local\n");
        assert!(read_vsock_local_namespace(&dir));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Ok(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("0-3,^1"), Ok(vec![0, 2, 3]));
        assert_eq!(parse_cpu_list(""), Ok(vec![]));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("0-4294967295").is_err());
        let dir = scratch("cpuset");
        write(dir.join("cpuset.cpus"), "2-3\n");
        assert_eq!(read_cpuset(&dir.join("cpuset.cpus")), Ok(vec![2, 3]));
        write(dir.join("empty"), "\n");
        assert!(read_cpuset(&dir.join("empty")).is_err());
        let missing = read_cpuset(&dir.join("missing")).err().unwrap_or_default();
        assert!(missing.starts_with("cannot read "), "{missing}");
    }

    #[test]
    fn host_topology_from_a_fake_sysfs() {
        let sys = scratch("sys");
        write(sys.join("devices/system/node/node0/cpulist"), "0-1\n");
        write(sys.join("devices/system/node/node0/distance"), "10 21\n");
        write(sys.join("devices/system/node/node1/cpulist"), "2-3\n");
        write(sys.join("devices/system/node/node1/distance"), "21 10\n");
        write(sys.join("devices/system/node/online"), "0-1\n");
        for (cpu, siblings) in [(0, "0-1"), (1, "0-1"), (2, "2"), (3, "3")] {
            write(
                sys.join(format!(
                    "devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
                )),
                siblings,
            );
        }
        let topology = detect_host_topology(&sys).unwrap_or_default();
        assert_eq!(
            topology,
            HostTopology {
                cells: vec![
                    HostCell {
                        id: 0,
                        cpus: vec![(0, vec![0, 1]), (1, vec![0, 1])],
                        distances: vec![(0, 10), (1, 21)],
                    },
                    HostCell {
                        id: 1,
                        cpus: vec![(2, vec![2]), (3, vec![3])],
                        distances: vec![(0, 21), (1, 10)],
                    },
                ]
            }
        );
        assert_eq!(detect_host_topology(&sys.join("nowhere")), None);
    }
}
