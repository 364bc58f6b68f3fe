//! Domain-level elements: metadata, memory, CPU, OS/firmware, features, clock
//! and SMBIOS sysinfo.

use serde::{Deserialize, Serialize};

/// An element whose presence is the information, e.g. `<acpi/>`, `<readonly/>`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flag {}

/// `<x state='on'/>` / `<x state='off'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    #[serde(rename = "@state")]
    pub state: String,
}

impl State {
    pub fn on_off(on: bool) -> State {
        State {
            state: if on { "on" } else { "off" }.to_string(),
        }
    }
}

/// A number with an optional unit attribute: `<memory unit='b'>1024</memory>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScaledInteger {
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(rename = "$text")]
    pub value: u64,
}

impl ScaledInteger {
    pub fn bytes(value: u64) -> ScaledInteger {
        ScaledInteger {
            unit: Some("b".to_string()),
            value,
        }
    }

    /// The value in bytes, for the units libvirt writes ("KiB" when absent).
    pub fn to_bytes(&self) -> Option<u64> {
        let multiplier: u64 = match self.unit.as_deref().unwrap_or("KiB") {
            "b" | "bytes" => 1,
            "KB" => 1000,
            "k" | "KiB" => 1 << 10,
            "MB" => 1_000_000,
            "M" | "MiB" => 1 << 20,
            "GB" => 1_000_000_000,
            "G" | "GiB" => 1 << 30,
            "TB" => 1_000_000_000_000,
            "T" | "TiB" => 1 << 40,
            _ => return None,
        };
        self.value.checked_mul(multiplier)
    }
}

/// `<metadata>`: only KubeVirt's own element is modelled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Metadata {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubevirt: Option<KubeVirtMetadata>,
}

/// KubeVirt's namespace for its metadata element
/// (pkg/virt-launcher/virtwrap/api/schema.go, `Metadata.KubeVirt`).
pub const KUBEVIRT_XMLNS: &str = "http://kubevirt.io";

/// `<kubevirt xmlns="http://kubevirt.io"><uid/><graceperiod/></kubevirt>`,
/// shaped like KubeVirt's `KubeVirtMetadata`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KubeVirtMetadata {
    #[serde(rename = "@xmlns")]
    pub xmlns: String,
    pub uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graceperiod: Option<GracePeriodMetadata>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GracePeriodMetadata {
    #[serde(rename = "deletionGracePeriodSeconds")]
    pub deletion_grace_period_seconds: i64,
    /// RFC 3339 time set when a graceful shutdown started.
    #[serde(rename = "deletionTimestamp", skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(
        rename = "markedForGracefulShutdown",
        skip_serializing_if = "Option::is_none"
    )]
    pub marked_for_graceful_shutdown: Option<bool>,
}

/// `<maxMemory slots='N' unit='b'>…</maxMemory>` (memory hotplug).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MaxMemory {
    #[serde(rename = "@slots", skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(rename = "$text")]
    pub value: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryBacking {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<HugePages>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<MemorySource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<MemoryAccess>,
    /// `<nosharepages/>`: no KSM merging (real-time guests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nosharepages: Option<Flag>,
    /// `<allocation mode='immediate'/>`: allocate all guest memory at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<MemoryAllocation>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryAllocation {
    #[serde(rename = "@mode")]
    pub mode: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HugePages {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub page: Vec<HugePage>,
}

/// `<page size='2048' unit='KiB'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HugePage {
    #[serde(rename = "@size")]
    pub size: u64,
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(rename = "@nodeset", skip_serializing_if = "Option::is_none")]
    pub nodeset: Option<String>,
}

/// `<source type='memfd'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemorySource {
    #[serde(rename = "@type")]
    pub source_type: String,
}

/// `<access mode='shared'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryAccess {
    #[serde(rename = "@mode")]
    pub mode: String,
}

/// `<vcpu placement='static' current='2'>4</vcpu>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Vcpu {
    #[serde(rename = "@placement", skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    #[serde(rename = "@current", skip_serializing_if = "Option::is_none")]
    pub current: Option<u32>,
    #[serde(rename = "$text")]
    pub count: u32,
}

/// `<vcpus><vcpu id='0' enabled='yes' hotpluggable='no'/>…</vcpus>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VcpuList {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vcpu: Vec<VcpuEntry>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VcpuEntry {
    #[serde(rename = "@id")]
    pub id: u32,
    #[serde(rename = "@enabled")]
    pub enabled: String,
    #[serde(rename = "@hotpluggable", skip_serializing_if = "Option::is_none")]
    pub hotpluggable: Option<String>,
    #[serde(rename = "@order", skip_serializing_if = "Option::is_none")]
    pub order: Option<u32>,
}

/// `<sysinfo type='smbios'>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SysInfo {
    #[serde(rename = "@type")]
    pub sysinfo_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<SysInfoEntries>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chassis: Option<SysInfoEntries>,
    #[serde(rename = "oemStrings", skip_serializing_if = "Option::is_none")]
    pub oem_strings: Option<OemStrings>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SysInfoEntries {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entry: Vec<SysInfoEntry>,
}

/// `<entry name='serial'>abc</entry>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SysInfoEntry {
    #[serde(rename = "@name")]
    pub name: String,
    #[serde(rename = "$text")]
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OemStrings {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entry: Vec<String>,
}

/// `<os>`: guest type, firmware and boot settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Os {
    /// "efi" with firmware auto-selection; not used by the converter.
    #[serde(rename = "@firmware", skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    #[serde(rename = "type")]
    pub os_type: OsType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loader: Option<Loader>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvram: Option<Nvram>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub boot: Vec<OsBoot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootmenu: Option<BootMenu>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smbios: Option<Smbios>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bios: Option<OsBios>,
}

/// `<type arch='x86_64' machine='q35'>hvm</type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OsType {
    #[serde(rename = "@arch", skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(rename = "@machine", skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    #[serde(rename = "$text")]
    pub value: String,
}

/// `<loader readonly='yes' secure='no' type='pflash'>/path/OVMF_CODE.fd</loader>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Loader {
    #[serde(rename = "@readonly", skip_serializing_if = "Option::is_none")]
    pub readonly: Option<String>,
    #[serde(rename = "@secure", skip_serializing_if = "Option::is_none")]
    pub secure: Option<String>,
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub loader_type: Option<String>,
    #[serde(rename = "$text")]
    pub path: String,
}

/// `<nvram template='/…/OVMF_VARS.fd'>/…/<name>_VARS.fd</nvram>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Nvram {
    #[serde(rename = "@template", skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(rename = "$text")]
    pub path: String,
}

/// `<boot dev='hd'/>` (the converter uses per-device boot order instead).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OsBoot {
    #[serde(rename = "@dev")]
    pub dev: String,
}

/// `<bootmenu enable='yes' timeout='10000'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BootMenu {
    #[serde(rename = "@enable")]
    pub enable: String,
    #[serde(rename = "@timeout", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
}

/// `<smbios mode='sysinfo'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Smbios {
    #[serde(rename = "@mode")]
    pub mode: String,
}

/// `<bios useserial='yes'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OsBios {
    #[serde(rename = "@useserial", skip_serializing_if = "Option::is_none")]
    pub useserial: Option<String>,
}

/// `<features>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Features {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<Flag>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apic: Option<Apic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperv: Option<HyperV>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm: Option<KvmFeatures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvspinlock: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pmu: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vmport: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smm: Option<Smm>,
}

/// `<apic eoi='on'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Apic {
    #[serde(rename = "@eoi", skip_serializing_if = "Option::is_none")]
    pub eoi: Option<String>,
}

/// `<smm/>` or `<smm state='on'/>` (libvirt writes the latter).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Smm {
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// `<hyperv mode='custom'>` enlightenments for Windows guests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HyperV {
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relaxed: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vapic: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spinlocks: Option<Spinlocks>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpindex: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synic: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stimer: Option<Stimer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset: Option<State>,
    #[serde(rename = "vendor_id", skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<VendorId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequencies: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reenlightenment: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tlbflush: Option<TlbFlush>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipi: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evmcs: Option<State>,
}

/// `<spinlocks state='on' retries='8191'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spinlocks {
    #[serde(rename = "@state")]
    pub state: String,
    #[serde(rename = "@retries", skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
}

/// `<stimer state='on'><direct state='on'/></stimer>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stimer {
    #[serde(rename = "@state")]
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<State>,
}

/// `<vendor_id state='on' value='KVMKVMKVM'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VendorId {
    #[serde(rename = "@state")]
    pub state: String,
    #[serde(rename = "@value", skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// `<tlbflush state='on'><direct state='on'/><extended state='on'/></tlbflush>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlbFlush {
    #[serde(rename = "@state")]
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extended: Option<State>,
}

/// `<kvm><hidden state='on'/></kvm>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KvmFeatures {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<State>,
    #[serde(rename = "hint-dedicated", skip_serializing_if = "Option::is_none")]
    pub hint_dedicated: Option<State>,
}

/// `<cpu mode='host-model'>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cpu {
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(rename = "@match", skip_serializing_if = "Option::is_none")]
    pub match_mode: Option<String>,
    #[serde(rename = "@check", skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<CpuModel>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<CpuTopology>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub feature: Vec<CpuFeature>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa: Option<Numa>,
}

/// `<model fallback='allow'>Skylake-Server</model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuModel {
    #[serde(rename = "@fallback", skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    #[serde(rename = "$text")]
    pub name: String,
}

/// `<topology sockets='1' cores='2' threads='1'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuTopology {
    #[serde(rename = "@sockets")]
    pub sockets: u32,
    #[serde(rename = "@dies", skip_serializing_if = "Option::is_none")]
    pub dies: Option<u32>,
    #[serde(rename = "@cores")]
    pub cores: u32,
    #[serde(rename = "@threads")]
    pub threads: u32,
}

/// `<feature policy='require' name='pcid'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuFeature {
    #[serde(rename = "@policy", skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(rename = "@name")]
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Numa {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cell: Vec<NumaCell>,
}

/// `<cell id='0' cpus='0-1' memory='1048576' unit='KiB'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaCell {
    #[serde(rename = "@id", skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    #[serde(rename = "@cpus", skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    #[serde(rename = "@memory")]
    pub memory: u64,
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(rename = "@memAccess", skip_serializing_if = "Option::is_none")]
    pub mem_access: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distances: Option<NumaDistances>,
}

/// `<distances><sibling id='1' value='21'/></distances>` of a guest cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaDistances {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sibling: Vec<NumaSibling>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaSibling {
    #[serde(rename = "@id")]
    pub id: u32,
    #[serde(rename = "@value")]
    pub value: u32,
}

/// `<cputune>`: where vCPUs, the emulator and I/O threads run, and how
/// vCPUs are scheduled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuTune {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vcpupin: Vec<VcpuPin>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulatorpin: Option<EmulatorPin>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub iothreadpin: Vec<IoThreadPin>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vcpusched: Vec<VcpuSched>,
}

/// `<vcpupin vcpu='0' cpuset='2'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VcpuPin {
    #[serde(rename = "@vcpu")]
    pub vcpu: u32,
    #[serde(rename = "@cpuset")]
    pub cpuset: String,
}

/// `<emulatorpin cpuset='3'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EmulatorPin {
    #[serde(rename = "@cpuset")]
    pub cpuset: String,
}

/// `<iothreadpin iothread='1' cpuset='3'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IoThreadPin {
    #[serde(rename = "@iothread")]
    pub iothread: u32,
    #[serde(rename = "@cpuset")]
    pub cpuset: String,
}

/// `<vcpusched vcpus='0-1' scheduler='fifo' priority='1'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VcpuSched {
    #[serde(rename = "@vcpus")]
    pub vcpus: String,
    #[serde(rename = "@scheduler")]
    pub scheduler: String,
    #[serde(rename = "@priority", skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

/// `<numatune>`: which host NUMA nodes back the guest's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaTune {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<NumaTuneMemory>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memnode: Vec<MemNode>,
}

/// `<memory mode='strict' nodeset='0-1'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaTuneMemory {
    #[serde(rename = "@mode")]
    pub mode: String,
    #[serde(rename = "@nodeset")]
    pub nodeset: String,
}

/// `<memnode cellid='0' mode='strict' nodeset='1'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemNode {
    #[serde(rename = "@cellid")]
    pub cellid: u32,
    #[serde(rename = "@mode")]
    pub mode: String,
    #[serde(rename = "@nodeset")]
    pub nodeset: String,
}

/// `<clock offset='utc' adjustment='reset'>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Clock {
    #[serde(rename = "@offset")]
    pub offset: String,
    #[serde(rename = "@timezone", skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(rename = "@adjustment", skip_serializing_if = "Option::is_none")]
    pub adjustment: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timer: Vec<Timer>,
}

/// `<timer name='rtc' tickpolicy='catchup' present='yes'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timer {
    #[serde(rename = "@name")]
    pub name: String,
    #[serde(rename = "@tickpolicy", skip_serializing_if = "Option::is_none")]
    pub tickpolicy: Option<String>,
    #[serde(rename = "@track", skip_serializing_if = "Option::is_none")]
    pub track: Option<String>,
    #[serde(rename = "@present", skip_serializing_if = "Option::is_none")]
    pub present: Option<String>,
    #[serde(rename = "@frequency", skip_serializing_if = "Option::is_none")]
    pub frequency: Option<u64>,
}
