//! KubeVirt's `api.DomainSpec` (pkg/virt-launcher/virtwrap/api/schema.go):
//! libvirt's domain XML in KubeVirt's Go structs, as `encoding/json`
//! writes them. Go's field names are the JSON keys (the structs carry
//! XML tags only), every field is always written (`omitempty` in an XML
//! tag does nothing to JSON), a nil pointer or slice is `null`.
//!
//! So here: a Go pointer is an `Option`, a Go slice an `Option<Vec<_>>`
//! (Go's XML decoder leaves a slice nil when no element is there: `null`,
//! not `[]`), and each field reads its XML name too (see `dual`), so
//! that the live domain XML reads into these types as Go's `xml.Unmarshal`
//! reads it into KubeVirt's: what KubeVirt's structs do not have is
//! skipped, and what they do not read (`<qemu:commandline>`, whose
//! prefixed tag Go's decoder never matches) stays empty. Devices are in
//! `devices`.

use serde::{Deserialize, Serialize};

use super::devices::Devices;
use super::dual::{XmlName, entries};
use super::gojson::GoTime;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DomainSpec {
    /// `{"Space": "", "Local": "domain"}` once read from XML.
    #[serde(rename = "XMLName")]
    pub xml_name: XmlName,
    #[serde(rename = "Type", alias = "@type")]
    pub domain_type: String,
    /// `xmlns:qemu`: Go's decoder does not read it back (the tag names a
    /// prefix), so from XML it stays empty.
    #[serde(rename = "XmlNS")]
    pub xml_ns: String,
    #[serde(rename = "Name", alias = "name")]
    pub name: String,
    #[serde(rename = "UUID", alias = "uuid")]
    pub uuid: String,
    #[serde(rename = "Memory", alias = "memory")]
    pub memory: Memory,
    #[serde(rename = "CurrentMemory", alias = "currentMemory")]
    pub current_memory: Option<Memory>,
    #[serde(rename = "MaxMemory", alias = "maxMemory")]
    pub max_memory: Option<MaxMemory>,
    #[serde(rename = "MemoryBacking", alias = "memoryBacking")]
    pub memory_backing: Option<MemoryBacking>,
    #[serde(rename = "OS", alias = "os")]
    pub os: Os,
    #[serde(rename = "SysInfo", alias = "sysinfo")]
    pub sys_info: Option<SysInfo>,
    #[serde(rename = "Devices", alias = "devices")]
    pub devices: Devices,
    #[serde(rename = "Clock", alias = "clock")]
    pub clock: Option<Clock>,
    #[serde(rename = "Resource", alias = "resource")]
    pub resource: Option<Resource>,
    /// `<qemu:commandline>`: never read from XML (see the module's doc).
    #[serde(rename = "QEMUCmd")]
    pub qemu_cmd: Option<Commandline>,
    #[serde(rename = "Metadata", alias = "metadata")]
    pub metadata: Metadata,
    #[serde(rename = "Features", alias = "features")]
    pub features: Option<Features>,
    #[serde(rename = "CPU", alias = "cpu")]
    pub cpu: Cpu,
    #[serde(rename = "VCPU", alias = "vcpu")]
    pub vcpu: Option<Vcpu>,
    #[serde(rename = "VCPUs", alias = "vcpus")]
    pub vcpus: Option<Vcpus>,
    #[serde(rename = "CPUTune", alias = "cputune")]
    pub cpu_tune: Option<CpuTune>,
    #[serde(rename = "NUMATune", alias = "numatune")]
    pub numa_tune: Option<NumaTune>,
    #[serde(rename = "IOThreads", alias = "iothreads")]
    pub io_threads: Option<IoThreads>,
    #[serde(rename = "LaunchSecurity", alias = "launchSecurity")]
    pub launch_security: Option<LaunchSecurity>,
    #[serde(rename = "OnReboot", alias = "on_reboot")]
    pub on_reboot: String,
    #[serde(rename = "IOMMUFD", alias = "iommufd")]
    pub iommufd: Option<Iommufd>,
}

impl DomainSpec {
    /// Reads libvirt's domain XML as KubeVirt's launcher reads it
    /// (`xml.Unmarshal` into `api.DomainSpec`).
    pub fn from_xml(xml: &str) -> Result<DomainSpec, String> {
        let mut spec: DomainSpec = crate::domxml::read::from_str(xml)?;
        spec.name_elements();
        Ok(spec)
    }

    /// Go's XML decoder records the element's name in each struct that
    /// has an `XMLName` field.
    fn name_elements(&mut self) {
        self.xml_name = XmlName::local("domain");
        let devices = &mut self.devices;
        for interface in devices.interfaces.iter_mut().flatten() {
            interface.xml_name = XmlName::local("interface");
        }
        for host_device in devices.host_devices.iter_mut().flatten() {
            host_device.xml_name = XmlName::local("hostdev");
        }
        for iommu in devices.iommu.iter_mut().flatten() {
            iommu.xml_name = XmlName::local("iommu");
        }
        if let Some(memory) = &mut devices.memory {
            memory.xml_name = XmlName::local("memory");
        }
        if let Some(iommufd) = &mut self.iommufd {
            iommufd.xml_name = XmlName::local("iommufd");
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    #[serde(rename = "Value", alias = "$text")]
    pub value: u64,
    #[serde(rename = "Unit", alias = "@unit")]
    pub unit: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MaxMemory {
    #[serde(rename = "Value", alias = "$text")]
    pub value: u64,
    #[serde(rename = "Unit", alias = "@unit")]
    pub unit: String,
    #[serde(rename = "Slots", alias = "@slots")]
    pub slots: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryBacking {
    #[serde(rename = "HugePages", alias = "hugepages")]
    pub huge_pages: Option<HugePages>,
    #[serde(rename = "Source", alias = "source")]
    pub source: Option<TypeAttr>,
    #[serde(rename = "Access", alias = "access")]
    pub access: Option<ModeAttr>,
    #[serde(rename = "Allocation", alias = "allocation")]
    pub allocation: Option<ModeAttr>,
    #[serde(rename = "NoSharePages", alias = "nosharepages")]
    pub no_share_pages: Option<Empty>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HugePages {
    #[serde(rename = "HugePage", alias = "page")]
    pub huge_page: Option<Vec<HugePage>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HugePage {
    #[serde(rename = "Size", alias = "@size")]
    pub size: String,
    #[serde(rename = "Unit", alias = "@unit")]
    pub unit: String,
    #[serde(rename = "NodeSet", alias = "@nodeset")]
    pub node_set: String,
}

/// KubeVirt's empty marker structs (`FeatureEnabled`, `NoSharePages`,
/// `ReadOnly`, `Shareable`, `BandWidth`): `{}` in JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// The structs of one `type` attribute (`MemoryBackingSource`, `Model`,
/// `DataStoreFormat`, `BackingStoreFormat`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TypeAttr {
    #[serde(rename = "Type", alias = "@type")]
    pub value: String,
}

/// The structs of one `mode` attribute (`MemoryBackingAccess`,
/// `MemoryAllocation`, `SMBios`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModeAttr {
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
}

/// The structs of one `state` attribute (`FeatureState`,
/// `FeaturePVSpinlock`, `LinkState`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StateAttr {
    #[serde(rename = "State", alias = "@state")]
    pub state: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Os {
    #[serde(rename = "Firmware", alias = "@firmware")]
    pub firmware: String,
    #[serde(rename = "FirmwareInfo", alias = "firmware")]
    pub firmware_info: Option<FirmwareInfo>,
    #[serde(rename = "Type", alias = "type")]
    pub os_type: OsType,
    #[serde(rename = "ACPI", alias = "acpi")]
    pub acpi: Option<OsAcpi>,
    #[serde(rename = "SMBios", alias = "smbios")]
    pub smbios: Option<ModeAttr>,
    #[serde(rename = "BootOrder", alias = "boot")]
    pub boot_order: Option<Vec<Boot>>,
    #[serde(rename = "BootMenu", alias = "bootmenu")]
    pub boot_menu: Option<BootMenu>,
    #[serde(rename = "BIOS", alias = "bios")]
    pub bios: Option<Bios>,
    #[serde(rename = "BootLoader", alias = "loader")]
    pub boot_loader: Option<Loader>,
    #[serde(rename = "NVRam", alias = "nvram")]
    pub nvram: Option<NvRam>,
    #[serde(rename = "Kernel", alias = "kernel")]
    pub kernel: String,
    #[serde(rename = "Initrd", alias = "initrd")]
    pub initrd: String,
    #[serde(rename = "KernelArgs", alias = "cmdline")]
    pub kernel_args: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FirmwareInfo {
    #[serde(rename = "Features", alias = "feature")]
    pub features: Option<Vec<FirmwareFeature>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FirmwareFeature {
    #[serde(rename = "Enabled", alias = "@enabled")]
    pub enabled: String,
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OsType {
    #[serde(rename = "OS", alias = "$text")]
    pub os: String,
    #[serde(rename = "Arch", alias = "@arch")]
    pub arch: String,
    #[serde(rename = "Machine", alias = "@machine")]
    pub machine: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OsAcpi {
    #[serde(rename = "Table", alias = "table")]
    pub table: Option<Vec<AcpiTable>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AcpiTable {
    #[serde(rename = "Path", alias = "$text")]
    pub path: String,
    #[serde(rename = "Type", alias = "@type")]
    pub table_type: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Boot {
    #[serde(rename = "Dev", alias = "@dev")]
    pub dev: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BootMenu {
    #[serde(rename = "Enable", alias = "@enable")]
    pub enable: String,
    #[serde(rename = "Timeout", alias = "@timeout")]
    pub timeout: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Bios {
    #[serde(rename = "UseSerial", alias = "@useserial")]
    pub use_serial: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Loader {
    #[serde(rename = "ReadOnly", alias = "@readonly")]
    pub read_only: String,
    #[serde(rename = "Secure", alias = "@secure")]
    pub secure: String,
    #[serde(rename = "Type", alias = "@type")]
    pub loader_type: String,
    #[serde(rename = "Path", alias = "$text")]
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvRam {
    #[serde(rename = "Template", alias = "@template")]
    pub template: String,
    #[serde(rename = "Format", alias = "@format")]
    pub format: String,
    #[serde(rename = "NVRam", alias = "$text")]
    pub nvram: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SysInfo {
    #[serde(rename = "Type", alias = "@type")]
    pub sysinfo_type: String,
    #[serde(rename = "System", alias = "system", deserialize_with = "entries")]
    pub system: Option<Vec<Entry>>,
    #[serde(rename = "BIOS", alias = "bios", deserialize_with = "entries")]
    pub bios: Option<Vec<Entry>>,
    #[serde(
        rename = "BaseBoard",
        alias = "baseBoard",
        deserialize_with = "entries"
    )]
    pub base_board: Option<Vec<Entry>>,
    #[serde(rename = "Chassis", alias = "chassis", deserialize_with = "entries")]
    pub chassis: Option<Vec<Entry>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Entry {
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "Value", alias = "$text")]
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Clock {
    #[serde(rename = "Offset", alias = "@offset")]
    pub offset: String,
    #[serde(rename = "Timezone", alias = "@timezone")]
    pub timezone: String,
    #[serde(rename = "Adjustment", alias = "@adjustment")]
    pub adjustment: String,
    #[serde(rename = "Timer", alias = "timer")]
    pub timer: Option<Vec<Timer>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timer {
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "TickPolicy", alias = "@tickpolicy")]
    pub tick_policy: String,
    #[serde(rename = "Present", alias = "@present")]
    pub present: String,
    #[serde(rename = "Track", alias = "@track")]
    pub track: String,
    #[serde(rename = "Frequency", alias = "@frequency")]
    pub frequency: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resource {
    #[serde(rename = "Partition", alias = "partition")]
    pub partition: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Commandline {
    #[serde(rename = "QEMUEnv")]
    pub qemu_env: Option<Vec<QemuEnv>>,
    #[serde(rename = "QEMUArg")]
    pub qemu_arg: Option<Vec<QemuArg>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QemuEnv {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Value")]
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct QemuArg {
    #[serde(rename = "Value")]
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Metadata {
    #[serde(rename = "KubeVirt", alias = "kubevirt")]
    pub kubevirt: KubeVirtMetadata,
}

/// What KubeVirt keeps about the VMI beside the domain: its launcher
/// answers these from its own cache (not from the XML, whose
/// `<kubevirt>` element it leaves nearly empty), so a launcher builds them
/// from what it knows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KubeVirtMetadata {
    #[serde(rename = "UID", alias = "uid")]
    pub uid: String,
    #[serde(rename = "GracePeriod", alias = "graceperiod")]
    pub grace_period: Option<GracePeriodMetadata>,
    #[serde(rename = "Migration", alias = "migration")]
    pub migration: Option<MigrationMetadata>,
    #[serde(rename = "Backup", alias = "backup")]
    pub backup: Option<BackupMetadata>,
    #[serde(rename = "AccessCredential", alias = "accessCredential")]
    pub access_credential: Option<AccessCredentialMetadata>,
    #[serde(rename = "MemoryDump", alias = "memoryDump")]
    pub memory_dump: Option<MemoryDumpMetadata>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GracePeriodMetadata {
    #[serde(
        rename = "DeletionGracePeriodSeconds",
        alias = "deletionGracePeriodSeconds"
    )]
    pub deletion_grace_period_seconds: i64,
    #[serde(rename = "DeletionTimestamp", alias = "deletionTimestamp")]
    pub deletion_timestamp: Option<GoTime>,
    #[serde(
        rename = "MarkedForGracefulShutdown",
        alias = "markedForGracefulShutdown"
    )]
    pub marked_for_graceful_shutdown: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MigrationMetadata {
    #[serde(rename = "UID", alias = "uid")]
    pub uid: String,
    #[serde(rename = "StartTimestamp", alias = "startTimestamp")]
    pub start_timestamp: Option<GoTime>,
    #[serde(rename = "EndTimestamp", alias = "endTimestamp")]
    pub end_timestamp: Option<GoTime>,
    #[serde(rename = "Failed", alias = "failed")]
    pub failed: bool,
    #[serde(rename = "FailureReason", alias = "failureReason")]
    pub failure_reason: String,
    #[serde(rename = "AbortStatus", alias = "abortStatus")]
    pub abort_status: String,
    /// KubeVirt's `v1.MigrationMode` (`PreCopy`, `PostCopy`).
    #[serde(rename = "Mode", alias = "mode")]
    pub mode: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackupMetadata {
    #[serde(rename = "Name", alias = "name")]
    pub name: String,
    #[serde(rename = "Mode", alias = "mode")]
    pub mode: String,
    #[serde(rename = "SkipQuiesce", alias = "skipQuiesce")]
    pub skip_quiesce: bool,
    #[serde(rename = "StartTimestamp", alias = "startTimestamp")]
    pub start_timestamp: Option<GoTime>,
    #[serde(rename = "EndTimestamp", alias = "endTimestamp")]
    pub end_timestamp: Option<GoTime>,
    #[serde(rename = "Completed", alias = "completed")]
    pub completed: bool,
    #[serde(rename = "Failed", alias = "failed")]
    pub failed: bool,
    #[serde(rename = "BackupMsg", alias = "backupMsg")]
    pub backup_msg: String,
    #[serde(rename = "CheckpointName", alias = "checkpointName")]
    pub checkpoint_name: String,
    #[serde(rename = "Volumes", alias = "volumes")]
    pub volumes: String,
    #[serde(rename = "QuiesceStatus", alias = "quiesceStatus")]
    pub quiesce_status: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AccessCredentialMetadata {
    #[serde(rename = "Succeeded", alias = "succeeded")]
    pub succeeded: bool,
    #[serde(rename = "Message", alias = "message")]
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryDumpMetadata {
    #[serde(rename = "FileName", alias = "fileName")]
    pub file_name: String,
    #[serde(rename = "StartTimestamp", alias = "startTimestamp")]
    pub start_timestamp: Option<GoTime>,
    #[serde(rename = "EndTimestamp", alias = "endTimestamp")]
    pub end_timestamp: Option<GoTime>,
    #[serde(rename = "Completed", alias = "completed")]
    pub completed: bool,
    #[serde(rename = "Failed", alias = "failed")]
    pub failed: bool,
    #[serde(rename = "FailureReason", alias = "failureReason")]
    pub failure_reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Features {
    #[serde(rename = "ACPI", alias = "acpi")]
    pub acpi: Option<Empty>,
    #[serde(rename = "APIC", alias = "apic")]
    pub apic: Option<Empty>,
    #[serde(rename = "Hyperv", alias = "hyperv")]
    pub hyperv: Option<FeatureHyperv>,
    #[serde(rename = "SMM", alias = "smm")]
    pub smm: Option<Empty>,
    #[serde(rename = "KVM", alias = "kvm")]
    pub kvm: Option<FeatureKvm>,
    #[serde(rename = "PVSpinlock", alias = "pvspinlock")]
    pub pv_spinlock: Option<StateAttr>,
    #[serde(rename = "PMU", alias = "pmu")]
    pub pmu: Option<StateAttr>,
    #[serde(rename = "VMPort", alias = "vmport")]
    pub vm_port: Option<StateAttr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FeatureHyperv {
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
    #[serde(rename = "Relaxed", alias = "relaxed")]
    pub relaxed: Option<StateAttr>,
    #[serde(rename = "VAPIC", alias = "vapic")]
    pub vapic: Option<StateAttr>,
    #[serde(rename = "Spinlocks", alias = "spinlocks")]
    pub spinlocks: Option<FeatureSpinlocks>,
    #[serde(rename = "VPIndex", alias = "vpindex")]
    pub vp_index: Option<StateAttr>,
    #[serde(rename = "Runtime", alias = "runtime")]
    pub runtime: Option<StateAttr>,
    #[serde(rename = "SyNIC", alias = "synic")]
    pub synic: Option<StateAttr>,
    #[serde(rename = "SyNICTimer", alias = "stimer")]
    pub synic_timer: Option<SynicTimer>,
    #[serde(rename = "Reset", alias = "reset")]
    pub reset: Option<StateAttr>,
    #[serde(rename = "VendorID", alias = "vendor_id")]
    pub vendor_id: Option<FeatureVendorId>,
    #[serde(rename = "Frequencies", alias = "frequencies")]
    pub frequencies: Option<StateAttr>,
    #[serde(rename = "Reenlightenment", alias = "reenlightenment")]
    pub reenlightenment: Option<StateAttr>,
    #[serde(rename = "TLBFlush", alias = "tlbflush")]
    pub tlb_flush: Option<TlbFlush>,
    #[serde(rename = "IPI", alias = "ipi")]
    pub ipi: Option<StateAttr>,
    #[serde(rename = "EVMCS", alias = "evmcs")]
    pub evmcs: Option<StateAttr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FeatureSpinlocks {
    #[serde(rename = "State", alias = "@state")]
    pub state: String,
    #[serde(rename = "Retries", alias = "@retries")]
    pub retries: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SynicTimer {
    #[serde(rename = "Direct", alias = "direct")]
    pub direct: Option<StateAttr>,
    #[serde(rename = "State", alias = "@state")]
    pub state: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlbFlush {
    #[serde(rename = "Direct", alias = "direct")]
    pub direct: Option<StateAttr>,
    #[serde(rename = "Extended", alias = "extended")]
    pub extended: Option<StateAttr>,
    #[serde(rename = "State", alias = "@state")]
    pub state: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FeatureVendorId {
    #[serde(rename = "State", alias = "@state")]
    pub state: String,
    #[serde(rename = "Value", alias = "@value")]
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FeatureKvm {
    #[serde(rename = "Hidden", alias = "hidden")]
    pub hidden: Option<StateAttr>,
    #[serde(rename = "HintDedicated", alias = "hint-dedicated")]
    pub hint_dedicated: Option<StateAttr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cpu {
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
    /// `<model>`'s text (its attributes are not kept).
    #[serde(rename = "Model", alias = "model")]
    pub model: String,
    #[serde(rename = "Features", alias = "feature")]
    pub features: Option<Vec<CpuFeature>>,
    #[serde(rename = "Topology", alias = "topology")]
    pub topology: Option<CpuTopology>,
    #[serde(rename = "NUMA", alias = "numa")]
    pub numa: Option<Numa>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuFeature {
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "Policy", alias = "@policy")]
    pub policy: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuTopology {
    #[serde(rename = "Sockets", alias = "@sockets")]
    pub sockets: u32,
    #[serde(rename = "Cores", alias = "@cores")]
    pub cores: u32,
    #[serde(rename = "Threads", alias = "@threads")]
    pub threads: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Numa {
    #[serde(rename = "Cells", alias = "cell")]
    pub cells: Option<Vec<NumaCell>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaCell {
    #[serde(rename = "ID", alias = "@id")]
    pub id: String,
    #[serde(rename = "CPUs", alias = "@cpus")]
    pub cpus: String,
    #[serde(rename = "Memory", alias = "@memory")]
    pub memory: Option<u64>,
    #[serde(rename = "Unit", alias = "@unit")]
    pub unit: String,
    #[serde(rename = "MemoryAccess", alias = "@memAccess")]
    pub memory_access: String,
    #[serde(rename = "Distances", alias = "distances")]
    pub distances: Option<NumaCellDistances>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaCellDistances {
    #[serde(rename = "Siblings", alias = "sibling")]
    pub siblings: Option<Vec<NumaCellSibling>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaCellSibling {
    #[serde(rename = "ID", alias = "@id")]
    pub id: String,
    #[serde(rename = "Value", alias = "@value")]
    pub value: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Vcpu {
    #[serde(rename = "Placement", alias = "@placement")]
    pub placement: String,
    #[serde(rename = "CPUs", alias = "$text")]
    pub cpus: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Vcpus {
    #[serde(rename = "VCPU", alias = "vcpu")]
    pub vcpu: Option<Vec<VcpusVcpu>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VcpusVcpu {
    #[serde(rename = "ID", alias = "@id")]
    pub id: u32,
    #[serde(rename = "Enabled", alias = "@enabled")]
    pub enabled: String,
    #[serde(rename = "Hotpluggable", alias = "@hotpluggable")]
    pub hotpluggable: String,
    #[serde(rename = "Order", alias = "@order")]
    pub order: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuTune {
    #[serde(rename = "VCPUPin", alias = "vcpupin")]
    pub vcpu_pin: Option<Vec<CpuTuneVcpuPin>>,
    #[serde(rename = "IOThreadPin", alias = "iothreadpin")]
    pub io_thread_pin: Option<Vec<CpuTuneIoThreadPin>>,
    #[serde(rename = "EmulatorPin", alias = "emulatorpin")]
    pub emulator_pin: Option<CpuEmulatorPin>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuTuneVcpuPin {
    #[serde(rename = "VCPU", alias = "@vcpu")]
    pub vcpu: u32,
    #[serde(rename = "CPUSet", alias = "@cpuset")]
    pub cpu_set: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuTuneIoThreadPin {
    #[serde(rename = "IOThread", alias = "@iothread")]
    pub io_thread: u32,
    #[serde(rename = "CPUSet", alias = "@cpuset")]
    pub cpu_set: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuEmulatorPin {
    #[serde(rename = "CPUSet", alias = "@cpuset")]
    pub cpu_set: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaTune {
    #[serde(rename = "Memory", alias = "memory")]
    pub memory: NumaTuneMemory,
    #[serde(rename = "MemNodes", alias = "memnode")]
    pub mem_nodes: Option<Vec<MemNode>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaTuneMemory {
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
    #[serde(rename = "NodeSet", alias = "@nodeset")]
    pub node_set: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemNode {
    #[serde(rename = "CellID", alias = "@cellid")]
    pub cell_id: u32,
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
    #[serde(rename = "NodeSet", alias = "@nodeset")]
    pub node_set: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IoThreads {
    #[serde(rename = "IOThreads", alias = "$text")]
    pub io_threads: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LaunchSecurity {
    #[serde(rename = "Type", alias = "@type")]
    pub security_type: String,
    #[serde(rename = "DHCert", alias = "dhCert")]
    pub dh_cert: String,
    #[serde(rename = "Session", alias = "session")]
    pub session: String,
    #[serde(rename = "Cbitpos", alias = "cbitpos")]
    pub cbitpos: String,
    #[serde(rename = "ReducedPhysBits", alias = "reducedPhysBits")]
    pub reduced_phys_bits: String,
    #[serde(rename = "Policy", alias = "policy")]
    pub policy: String,
    #[serde(rename = "QuoteGenerationService", alias = "quoteGenerationService")]
    pub quote_generation_service: Option<Qgs>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Qgs {
    #[serde(rename = "Path", alias = "@path")]
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Iommufd {
    #[serde(rename = "XMLName")]
    pub xml_name: XmlName,
    #[serde(rename = "Enabled", alias = "@enabled")]
    pub enabled: String,
    #[serde(rename = "FDGroup", alias = "@fdgroup")]
    pub fd_group: String,
}
