//! The example VMIs (`examples/*.json`) and the fixed conversion context
//! their golden XML files (`tests/golden/*.xml`) are made with. Shared by
//! the golden tests, the libvirt tests and the conversion benchmark.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use virt_launcher::convert::Conversion;
use virt_launcher::convert::{
    ConvertContext, DomainType, HostCell, HostTopology, convert, kubevirt_defaults, libvirt_version,
};
use virt_launcher::disks::{ImageProbe, set_cache_modes};
use virt_launcher::domxml::Domain;
use virt_launcher::vmi::{VirtualMachineInstance, parse_vmi};

pub const EXAMPLES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
pub const GOLDEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

/// Files in `dir` ending in `.ext`, as (stem, path), sorted.
pub fn files_with_ext(dir: &str, ext: &str) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|entry| entry.unwrap_or_else(|e| panic!("{dir}: {e}")).path())
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .filter_map(|path| Some((path.file_stem()?.to_string_lossy().into_owned(), path)))
        .collect();
    found.sort();
    found
}

/// Every `examples/*.json`, as (stem, path), sorted.
pub fn examples() -> Vec<(String, PathBuf)> {
    files_with_ext(EXAMPLES_DIR, "json")
}

/// The example's JSON document.
pub fn example_json(path: &Path) -> serde_json::Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The example, parsed.
pub fn load_example(path: &Path) -> VirtualMachineInstance {
    parse_vmi(&example_json(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `--backend-storage-dir` of the golden files (persistent EFI).
pub const BACKEND_STORAGE_DIR: &str = "/var/lib/vm-state/efi-state";

/// The fixed context of the golden files (made for KVM, as in production): KubeVirt's default directories,
/// fixed OVMF paths, slirp, the VMI's identity and grace period, the block
/// PVC volume names the examples use, libvirt 9.0.0 (this project's), and
/// for dedicated CPUs a cpuset of 4 CPUs on two NUMA cells (0-1 and 2-3,
/// distance 20), and a `--backend-storage-dir`.
pub fn example_context(vmi: &VirtualMachineInstance, domain_type: DomainType) -> ConvertContext {
    ConvertContext {
        namespace: vmi.namespace().to_string(),
        name: vmi.name().to_string(),
        uid: vmi.uid().to_string(),
        block_pvcs: BTreeSet::from(["database".to_string(), "shared-lun".to_string()]),
        grace_period_seconds: vmi.termination_grace_period_seconds(),
        libvirt_version: Some(libvirt_version(9, 0, 0)),
        backend_storage_dir: Some(PathBuf::from(BACKEND_STORAGE_DIR)),
        cpuset: Ok(vec![0, 1, 2, 3]),
        host_topology: Some(HostTopology {
            cells: (0..2)
                .map(|id| HostCell {
                    id,
                    cpus: (id * 2..id * 2 + 2).map(|cpu| (cpu, vec![cpu])).collect(),
                    distances: vec![
                        (0, if id == 0 { 10 } else { 20 }),
                        (1, if id == 1 { 10 } else { 20 }),
                    ],
                })
                .collect(),
        }),
        ..kubevirt_defaults(domain_type)
    }
}

/// `examples/<stem>.json` converted with [`example_context`], with the
/// cache modes a sync then sets ([`with_cache_modes`]), as XML.
pub fn example_xml(path: &Path, domain_type: DomainType) -> String {
    let vmi = load_example(path);
    let conversion = convert(&vmi, &example_context(&vmi, domain_type))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    with_cache_modes(conversion)
        .to_xml()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The conversion's domain with the disks' cache and I/O modes a sync sets
/// once the images are prepared, on a host as KubeVirt's reference was
/// made on: every file system takes O_DIRECT, and the images written whole
/// are the ISOs the launcher writes (a PVC's image is sparse).
pub fn with_cache_modes(conversion: Conversion) -> Domain {
    struct ReferenceHost;
    impl ImageProbe for ReferenceHost {
        fn direct_io(&mut self, _path: &Path, _block: bool) -> bool {
            true
        }
        fn preallocated(&mut self, path: &Path, _format: &str) -> bool {
            path.extension().is_some_and(|e| e == "iso")
        }
    }
    let mut domain = conversion.domain;
    set_cache_modes(&mut domain, &conversion.disk_plan, &mut ReferenceHost)
        .unwrap_or_else(|e| panic!("{e}"));
    domain
}
