//! VMI → libvirt domain conversion, modelled on KubeVirt's converter
//! (pkg/virt-launcher/virtwrap/converter).
//!
//! [`convert`] is pure and deterministic: it reads only the VMI and the
//! [`ConvertContext`] and touches no file. Whatever needs the filesystem is
//! either a `detect_*` helper the caller runs first ([`detect_ovmf`],
//! [`detect_block_pvcs`]) or a step of the returned
//! [`DiskPlan`], executed later by `crate::disks::prepare`.
//!
//! The conversion is a pipeline of small steps, each in its own module and
//! testable alone: metadata → CPU → memory → firmware → features and clock →
//! disks → interfaces → console and channels → controllers and devices.

mod boot_order;
mod cloudinit;
mod cluster_options;
mod codec;
mod cpu;
mod dedicated;
mod detect;
mod devices;
mod dra;
mod features;
mod filesystems;
mod firmware;
mod hostdev;
mod hotplug_ports;
mod memory;
mod metadata;
mod network;
mod paths;
mod pci;
mod probe;
mod refusals;
mod storage;
mod virtio;

#[cfg(test)]
mod test_support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use crate::disks::DiskPlan;
use crate::domxml::{Domain, MemBalloon};
use crate::vmi::VirtualMachineInstance;

pub use cloudinit::CloudInitIso;
pub use cluster_options::{
    ClusterOptions, DomainAttachment, NumaCell, NumaCpu, NumaDistance, NumaTopology, SmbiosSystem,
};
pub use detect::{detect_block_pvcs, detect_ovmf, detect_ovmf_in};
pub use devices::GUEST_AGENT_CHANNEL;
pub use dra::{DEFAULT_DRA_METADATA_DIR, DraDevice, DraDevices, detect_dra_devices};
pub use filesystems::VirtiofsShare;
pub use hostdev::is_device_variable;
pub use metadata::hook_sidecar_count;
pub(crate) use network::interfaces_and_networks;
pub use network::{passt_by_libvirt, passt_socket};
pub use paths::{BACKEND_NVRAM_DIR, BACKEND_SWTPM_DIR, BACKEND_SWTPM_LOCALCA_DIR};
pub use probe::{
    default_cpuset_file, detect_host_topology, detect_present_paths, read_cpuset,
    read_vsock_local_namespace,
};
pub use refusals::{Checked, Refused, path_matches};

/// A context with KubeVirt's default directories, fixed OVMF paths,
/// user-mode networking over slirp, no block PVCs, and a 30 s grace
/// period: a base for reproducible conversions (tests, benchmarks).
pub fn kubevirt_defaults(domain_type: DomainType) -> ConvertContext {
    ConvertContext {
        domain_type,
        namespace: String::new(),
        name: String::new(),
        uid: String::new(),
        private_dir: PathBuf::from("/var/run/kubevirt-private"),
        ephemeral_disk_dir: PathBuf::from("/var/run/kubevirt-ephemeral-disks"),
        share_dir: PathBuf::from("/var/run/kubevirt"),
        container_disk_dir: PathBuf::from("/var/run/kubevirt/container-disks"),
        hotplug_disk_dir: PathBuf::from("/var/run/kubevirt/hotplug-disks"),
        ovmf: Some(OvmfPaths {
            code: PathBuf::from("/usr/share/OVMF/OVMF_CODE_4M.fd"),
            vars: PathBuf::from("/usr/share/OVMF/OVMF_VARS_4M.fd"),
            secure_code: Some(PathBuf::from("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd")),
            secure_vars: Some(PathBuf::from("/usr/share/OVMF/OVMF_VARS_4M.ms.fd")),
        }),
        user_net_backend: UserNetBackend::Slirp,
        block_pvcs: BTreeSet::new(),
        grace_period_seconds: 30,
        service_account_dir: PathBuf::from(DEFAULT_SERVICE_ACCOUNT_DIR),
        present_paths: BTreeSet::new(),
        cpuset: Err("the launcher's cpuset was not read".to_string()),
        host_topology: None,
        libvirt_version: None,
        device_env: BTreeMap::new(),
        vsock_local_namespace: false,
        dra_devices: DraDevices::new(),
        backend_storage_dir: None,
        backend_storage_keeps_tpm: true,
        options: None,
    }
}

/// KubeVirt's (and Kubernetes') mount point of the pod's service account
/// token (`--service-account-dir`).
pub const DEFAULT_SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The converter compares the daemon's version with the ones features
/// need; versions are the hypervisor layer's vocabulary.
pub use crate::hypervisor::state::libvirt_version;

/// The host's NUMA cells and the hyper-thread siblings of each CPU, as
/// libvirt's capabilities report them (read from sysfs by
/// [`detect_host_topology`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTopology {
    pub cells: Vec<HostCell>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCell {
    pub id: u32,
    /// Host CPU id → its thread siblings (itself included), in cell order.
    pub cpus: Vec<(u32, Vec<u32>)>,
    /// (other cell id, distance), this cell's own included.
    pub distances: Vec<(u32, u32)>,
}

/// libvirt domain type: `kvm`, `qemu` (TCG emulation) or `test` (libvirt's
/// `test:///default` driver; same XML, `type='test'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainType {
    Kvm,
    Qemu,
    Test,
}

impl DomainType {
    pub fn as_str(self) -> &'static str {
        match self {
            DomainType::Kvm => "kvm",
            DomainType::Qemu => "qemu",
            DomainType::Test => "test",
        }
    }
}

/// How `masquerade`/`bridge` interfaces reach the network when the launcher
/// has no pod network: libvirt user-mode networking with passt (when
/// installed) or QEMU's built-in slirp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserNetBackend {
    Passt,
    Slirp,
}

/// OVMF firmware files (from [`detect_ovmf`]). `secure_*` are the Secure
/// Boot builds, when installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvmfPaths {
    pub code: PathBuf,
    pub vars: PathBuf,
    pub secure_code: Option<PathBuf>,
    pub secure_vars: Option<PathBuf>,
}

/// Everything about the launcher's environment the conversion needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertContext {
    pub domain_type: DomainType,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// KubeVirt: /var/run/kubevirt-private.
    pub private_dir: PathBuf,
    /// KubeVirt: /var/run/kubevirt-ephemeral-disks.
    pub ephemeral_disk_dir: PathBuf,
    /// KubeVirt: /var/run/kubevirt (virtiofsd's sockets are under it).
    pub share_dir: PathBuf,
    /// KubeVirt: /var/run/kubevirt/container-disks.
    pub container_disk_dir: PathBuf,
    /// KubeVirt: /var/run/kubevirt/hotplug-disks (hotplug is not supported).
    pub hotplug_disk_dir: PathBuf,
    /// From [`detect_ovmf`]; `None` makes EFI VMIs a clear error.
    pub ovmf: Option<OvmfPaths>,
    pub user_net_backend: UserNetBackend,
    /// Volume names whose PVC is a block device at `/dev/<volume>`.
    pub block_pvcs: BTreeSet<String>,
    /// Written to the domain's KubeVirt metadata.
    pub grace_period_seconds: i64,
    /// Where the pod's service account token is mounted (the content of a
    /// `serviceAccount` volume).
    pub service_account_dir: PathBuf,
    /// Which of the candidate paths of hostDisk and kernelBoot files exist
    /// ([`detect_present_paths`]): KubeVirt's layout is used where it is
    /// present, an absolute host path otherwise.
    pub present_paths: BTreeSet<PathBuf>,
    /// The CPUs of the launcher's cpuset (dedicated CPU placement), or why
    /// they are not known.
    pub cpuset: Result<Vec<u32>, String>,
    /// The host's NUMA topology; `None` treats every CPU of the cpuset as a
    /// core of its own in one cell.
    pub host_topology: Option<HostTopology>,
    /// The libvirt daemon's version ([`libvirt_version`]); features it is
    /// too old for are refused before libvirt sees them. `None` skips the
    /// checks.
    pub libvirt_version: Option<u32>,
    /// The device plugins' assignments from the launcher's environment
    /// (`PCI_RESOURCE_*`, `MDEV_PCI_RESOURCE_*`, `KUBEVIRT_RESOURCE_NAME_*`;
    /// see `hostdev`).
    pub device_env: BTreeMap<String, String>,
    /// The launcher's vsock namespace is in the `local` mode
    /// ([`read_vsock_local_namespace`]): the guest gets KubeVirt's local
    /// CID instead of the one of the VMI's status.
    pub vsock_local_namespace: bool,
    /// The devices of the resource claims the VMI's GPUs and host devices
    /// name ([`detect_dra_devices`]).
    pub dra_devices: DraDevices,
    /// `--backend-storage-dir`: where the VM's persistent state lives
    /// (KubeVirt's backend-storage PVC); `None` refuses persistent EFI.
    pub backend_storage_dir: Option<PathBuf>,
    /// Whether the launcher's libvirt keeps a persistent TPM's state in
    /// `backend_storage_dir`'s `swtpm/` (its own daemons, which mount it
    /// there, as KubeVirt's pod does); when not, such a TPM is refused
    /// with a `backend_storage_dir`.
    pub backend_storage_keeps_tpm: bool,
    /// What virt-handler sent beside the VMI; `None`: this launcher's
    /// defaults (KubeVirt's cluster defaults).
    pub options: Option<ClusterOptions>,
}

/// The domain to define and the disk work to do before defining it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    pub domain: Domain,
    pub disk_plan: DiskPlan,
    /// The directories the VMI's filesystems share, each served by a
    /// virtiofsd the launcher starts before the domain.
    pub filesystems: Vec<VirtiofsShare>,
    /// Where the qemu-pr-helper the launcher starts before the domain
    /// listens, when a LUN asks for persistent reservations.
    pub pr_helper_socket: Option<PathBuf>,
    /// The first cloud-init volume's ISO: what KubeVirt's hook sidecars
    /// may change (`PreCloudInitIso`) before it is written.
    pub cloud_init: Option<CloudInitIso>,
}

/// Why a VMI cannot be converted: `path` is the JSON path of the field to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertError {
    pub path: String,
    pub message: String,
    /// The entry of docs/vmi.md's lists this refusal is, if it is one.
    pub listed: Option<Listed>,
}

/// An entry of one of the two tables of refusals docs/vmi.md lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    Refused(Refused),
    Checked(Checked),
}

impl ConvertError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> ConvertError {
        ConvertError {
            path: path.into(),
            message: message.into(),
            listed: None,
        }
    }

    /// A field this launcher does not implement: `what` "is not supported
    /// by this launcher". `path` is `refused`'s with its indices.
    pub(crate) fn unsupported(
        refused: Refused,
        path: impl Into<String>,
        what: &str,
    ) -> ConvertError {
        ConvertError {
            listed: Some(Listed::Refused(refused)),
            ..ConvertError::new(path, format!("{what} is not supported by this launcher"))
        }
    }

    /// A check made before libvirt sees the domain. `path` is `checked`'s
    /// with its indices.
    pub(crate) fn checked(
        checked: Checked,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> ConvertError {
        ConvertError {
            listed: Some(Listed::Checked(checked)),
            ..ConvertError::new(path, message)
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConvertError {}

/// Which VMI feature needs which libvirt daemon, and what the launcher
/// does on an older one: the one table of version facts, checked against
/// the connected daemon's version at sync time. docs/vmi.md's "Versions"
/// section shows it (tests/vmi_doc.rs keeps the two equal).
pub struct VersionFact {
    /// The VMI field (or binding) the fact is about.
    pub field: &'static str,
    /// The first libvirt (major, minor, micro) that has it.
    pub libvirt: (u32, u32, u32),
    /// What happens on an older daemon.
    pub older: &'static str,
}

/// Refused on an older daemon, naming the field and both versions.
const REFUSED_OLDER: &str =
    "refused (`InvalidArgument`), naming the field, the version it needs and the daemon's";

/// The version facts ([`VersionFact`]).
pub const VERSION_FACTS: &[VersionFact] = &[
    VersionFact {
        field: "spec.domain.devices.disks[].blockSize.custom.discardGranularity",
        libvirt: storage::DISCARD_GRANULARITY_SINCE,
        older: REFUSED_OLDER,
    },
    VersionFact {
        field: "spec.domain.devices.disks[].changedBlockTracking: a block device",
        libvirt: storage::DATA_STORE_SINCE,
        older: "a sync gets `InvalidArgument`, naming the field, the version it needs and the daemon's (a raw image file is tracked on any version)",
    },
    VersionFact {
        field: "spec.domain.features.hyperv.tlbflush.direct",
        libvirt: features::TLBFLUSH_CHILDREN_SINCE,
        older: REFUSED_OLDER,
    },
    VersionFact {
        field: "spec.domain.features.hyperv.tlbflush.extended",
        libvirt: features::TLBFLUSH_CHILDREN_SINCE,
        older: REFUSED_OLDER,
    },
    VersionFact {
        field: "spec.domain.devices.interfaces[].binding.name: passt",
        libvirt: network::PASST_BACKEND_SINCE,
        older: "the launcher runs passt itself and QEMU joins its socket on its command line; the passt interfaces of a running VMI cannot change",
    },
    VersionFact {
        field: "spec.domain.cpu.sockets: fewer, live, under emulation (TCG)",
        libvirt: crate::hotplug::plan::TCG_VCPU_REMOVAL_SINCE,
        older: "needs a restart of the VMI (`InvalidArgument`, naming the libvirt and QEMU 10.0.0 it needs and the daemon's); more vCPUs work live",
    },
];

/// Refuses `what` at `path` when the libvirt daemon is older than `since`
/// (a version unknown to the context is not checked).
pub(crate) fn require_libvirt(
    ctx: &ConvertContext,
    (major, minor, micro): (u32, u32, u32),
    (checked, path): (Checked, &str),
    what: &str,
) -> Result<(), ConvertError> {
    match ctx.libvirt_version {
        Some(running) if running < libvirt_version(major, minor, micro) => {
            Err(ConvertError::checked(
                checked,
                path,
                format!(
                    "{what} needs libvirt {major}.{minor}.{micro} or newer; this launcher's libvirt is {}.{}.{}",
                    running / 1_000_000,
                    running / 1_000 % 1_000,
                    running % 1_000
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// KubeVirt's default memory balloon statistics period, in seconds.
pub const DEFAULT_BALLOON_STATS_PERIOD: u32 = 10;

/// Converts a VMI into a libvirt domain and the disk plan it needs.
pub fn convert(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
) -> Result<Conversion, ConvertError> {
    // KubeVirt's webhook defaults, for VMIs that did not go through it.
    let mut defaulted = vmi.clone();
    crate::vmi::defaults::apply(&mut defaulted)
        .map_err(|e| ConvertError::new(e.path, e.message))?;
    let vmi = &defaulted;
    for path in crate::vmi::fields_without_effect(vmi) {
        log::debug!("convert: {path} is accepted; it does not change the domain");
    }
    let mut domain = Domain::default();
    let mut plan = DiskPlan::default();
    metadata::configure(vmi, ctx, &mut domain)?;
    let vcpus = cpu::configure(vmi, ctx.domain_type, &mut domain)?;
    memory::configure(vmi, vcpus, &mut domain)?;
    firmware::configure(vmi, ctx, &mut domain, &mut plan)?;
    features::configure(vmi, ctx, &mut domain)?;
    features::configure_clock(vmi, ctx, &mut domain)?;
    let boot_orders = storage::configure(vmi, ctx, vcpus, &mut domain, &mut plan)?;
    let filesystems = filesystems::configure(vmi, ctx, &mut domain)?;
    network::configure(vmi, ctx, vcpus, &boot_orders, &mut domain)?;
    // Host devices first: a USB one needs the USB controller.
    hostdev::configure(vmi, ctx, &mut domain)?;
    devices::configure(vmi, ctx, &mut domain, &mut plan)?;
    dedicated::configure(vmi, ctx, &mut domain)?;
    if let Some(options) = &ctx.options {
        cluster_options::apply(options, &mut domain);
    }
    let memory = domain.memory.to_bytes().unwrap_or(0);
    hotplug_ports::configure(vmi, memory, &mut domain);
    Ok(Conversion {
        domain,
        disk_plan: plan,
        filesystems,
        pr_helper_socket: storage::wants_reservations(vmi).then(|| storage::pr_helper_socket(ctx)),
        cloud_init: cloudinit::first_iso(vmi, ctx),
    })
}

/// Changes the balloon statistics period of a converted domain (KubeVirt
/// takes it from the cluster configuration; 0 disables statistics).
pub fn set_balloon_stats_period(domain: &mut Domain, seconds: u32) {
    if let Some(MemBalloon { model, stats, .. }) = domain.devices.memballoon.as_mut()
        && model != "none"
    {
        *stats = (seconds > 0).then_some(crate::domxml::BalloonStats { period: seconds });
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    /// The source text of every `.rs` file under `src/convert/<rel>`.
    fn sources(rel: &str) -> Vec<(String, String)> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/convert")
            .join(rel);
        let files = if path.is_dir() {
            fs::read_dir(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .map(|entry| entry.unwrap_or_else(|e| panic!("{e}")).path())
                .collect()
        } else {
            vec![path]
        };
        files
            .into_iter()
            .map(|file| {
                let text =
                    fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                (file.display().to_string(), text)
            })
            .collect()
    }

    /// Interfaces and disks share helpers (boot orders, PCI addresses, the
    /// virtio model) through their own modules, not through each other.
    #[test]
    fn network_and_storage_do_not_depend_on_each_other() {
        for (file, text) in sources("network.rs") {
            assert!(!text.contains("storage::"), "{file} uses the storage step");
        }
        for (file, text) in sources("storage") {
            assert!(!text.contains("network::"), "{file} uses the network step");
        }
    }
}
