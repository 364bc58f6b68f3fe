//! Serde model of KubeVirt's `VirtualMachineInstance` (kubevirt.io/v1,
//! staging/src/kubevirt.io/api/core/v1/{types,schema}.go). Field names are
//! KubeVirt's JSON names.
//!
//! Everything that describes the VM (`spec.domain`, `spec.volumes`,
//! `spec.networks`) denies unknown fields, so a typo is an error with its JSON
//! path. Every field of KubeVirt's current `VirtualMachineInstanceSpec` is
//! known: features the launcher does not implement use [`Unsupported`] (or
//! are refused by the converter with their path); pod- and scheduling-level
//! fields that do not change the domain are [`Ignored`] and logged at debug
//! level by [`super::fields_without_effect`].

use std::collections::BTreeMap;

use serde::Deserialize;

use super::quantity::Quantity;
use super::strict::{Empty, Unsupported, string_enum};

/// A field accepted for compatibility whose content does not affect the domain.
pub type Ignored = Option<serde_json::Value>;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstance {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: VmiSpec,
    /// Only what virt-controller decides for the launcher is read; the
    /// rest of `status` (and anything else at the top level) is ignored.
    #[serde(default)]
    pub status: Option<VmiStatus>,
}

/// The parts of `status` the domain depends on; other fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct VmiStatus {
    /// The vsock CID virt-controller allocated for `autoattachVSOCK`.
    #[serde(default, rename = "VSOCKCID")]
    pub vsock_cid: Option<u32>,
}

/// Kubernetes object metadata; unknown fields (managedFields, ...) are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VmiSpec {
    pub domain: DomainSpec,
    #[serde(default)]
    pub volumes: Vec<Volume>,
    #[serde(default)]
    pub networks: Vec<Network>,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default)]
    pub start_strategy: Option<StartStrategy>,
    /// Used as the cloud-init hostname (KubeVirt: dns.SanitizeHostname).
    #[serde(default)]
    pub hostname: Option<String>,
    /// Only the launcher's own architecture (amd64) is accepted.
    #[serde(default)]
    pub architecture: Option<String>,
    #[serde(default)]
    pub priority_class_name: Ignored,
    #[serde(default)]
    pub node_selector: Ignored,
    #[serde(default)]
    pub affinity: Ignored,
    #[serde(default)]
    pub scheduler_name: Ignored,
    #[serde(default)]
    pub tolerations: Ignored,
    #[serde(default)]
    pub topology_spread_constraints: Ignored,
    #[serde(default)]
    pub eviction_strategy: Ignored,
    #[serde(default)]
    pub liveness_probe: Ignored,
    #[serde(default)]
    pub readiness_probe: Ignored,
    #[serde(default)]
    pub subdomain: Ignored,
    #[serde(default)]
    pub dns_policy: Ignored,
    #[serde(default, rename = "dnsConfig")]
    pub dns_config: Ignored,
    #[serde(default)]
    pub access_credentials: Ignored,
    /// The pod's service account (the token reaches the guest only through a
    /// `serviceAccount` volume).
    #[serde(default)]
    pub service_account_name: Ignored,
    /// The pod's resource claims that DRA devices name (`claimName`).
    #[serde(default)]
    pub resource_claims: Vec<ResourceClaim>,
    #[serde(default)]
    pub utility_volumes: Unsupported,
}

string_enum!(StartStrategy, "startStrategy", { Paused => "Paused" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DomainSpec {
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub cpu: Option<Cpu>,
    #[serde(default)]
    pub memory: Option<Memory>,
    #[serde(default)]
    pub machine: Option<Machine>,
    #[serde(default)]
    pub firmware: Option<Firmware>,
    #[serde(default)]
    pub clock: Option<Clock>,
    #[serde(default)]
    pub features: Option<Features>,
    #[serde(default)]
    pub devices: Devices,
    #[serde(default)]
    pub io_threads_policy: Option<IoThreadsPolicy>,
    #[serde(default)]
    pub io_threads: Option<IoThreads>,
    #[serde(default)]
    pub chassis: Option<Chassis>,
    #[serde(default)]
    pub reboot_policy: Option<RebootPolicy>,
    #[serde(default)]
    pub launch_security: Unsupported,
}

string_enum!(IoThreadsPolicy, "ioThreadsPolicy", {
    Shared => "shared",
    Auto => "auto",
    SupplementalPool => "supplementalPool",
});

string_enum!(RebootPolicy, "rebootPolicy", { Reboot => "Reboot", Terminate => "Terminate" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IoThreads {
    #[serde(default)]
    pub supplemental_pool_thread_count: Option<u32>,
}

/// `resources.requests` / `resources.limits`: "memory" and "cpu" are used;
/// other keys (e.g. device-plugin resources) are kept but ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub overcommit_guest_overhead: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cpu {
    #[serde(default)]
    pub cores: Option<u32>,
    #[serde(default)]
    pub sockets: Option<u32>,
    #[serde(default)]
    pub max_sockets: Option<u32>,
    #[serde(default)]
    pub threads: Option<u32>,
    /// "host-model" (default), "host-passthrough" or a libvirt CPU model name.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub features: Vec<CpuFeature>,
    /// Accepted; `true` is reported as unsupported by the converter.
    #[serde(default)]
    pub dedicated_cpu_placement: bool,
    /// Accepted; `true` is reported as unsupported by the converter.
    #[serde(default)]
    pub isolate_emulator_thread: bool,
    #[serde(default)]
    pub numa: Option<Numa>,
    #[serde(default)]
    pub realtime: Option<Realtime>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Numa {
    /// Guest NUMA cells mirror the host cells the dedicated CPUs are on.
    #[serde(default)]
    pub guest_mapping_passthrough: Option<Empty>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Realtime {
    /// The vCPUs that run with real-time scheduling, as a cpuset list
    /// ("0-3,^1"); all of them when absent.
    #[serde(default)]
    pub mask: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CpuFeature {
    pub name: String,
    #[serde(default)]
    pub policy: Option<CpuFeaturePolicy>,
}

string_enum!(CpuFeaturePolicy, "CPU feature policy", {
    Force => "force",
    Require => "require",
    Optional => "optional",
    Disable => "disable",
    Forbid => "forbid",
});

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Memory {
    #[serde(default)]
    pub hugepages: Option<Hugepages>,
    #[serde(default)]
    pub guest: Option<Quantity>,
    #[serde(default)]
    pub max_guest: Option<Quantity>,
    /// Extra memory for the pod's limits; the guest does not see it.
    #[serde(default)]
    pub reserved_overhead: Ignored,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hugepages {
    /// "2Mi" or "1Gi" on x86_64.
    #[serde(default)]
    pub page_size: Option<Quantity>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    #[serde(default, rename = "type")]
    pub machine_type: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Firmware {
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default)]
    pub bootloader: Option<Bootloader>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub kernel_boot: Option<KernelBoot>,
    #[serde(default)]
    pub oem_strings: Vec<String>,
    #[serde(default)]
    pub acpi: Unsupported,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bootloader {
    #[serde(default)]
    pub bios: Option<Bios>,
    #[serde(default)]
    pub efi: Option<Efi>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bios {
    #[serde(default)]
    pub use_serial: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Efi {
    /// KubeVirt's default is true.
    #[serde(default)]
    pub secure_boot: Option<bool>,
    #[serde(default)]
    pub persistent: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KernelBoot {
    #[serde(default)]
    pub kernel_args: Option<String>,
    #[serde(default)]
    pub container: Option<KernelBootContainer>,
}

/// The launcher pulls no images: `kernelPath` / `initrdPath` are absolute
/// paths on the launcher's filesystem; `image` is only informational.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KernelBootContainer {
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub image_pull_secret: Option<String>,
    #[serde(default)]
    pub image_pull_policy: Option<String>,
    #[serde(default)]
    pub kernel_path: Option<String>,
    #[serde(default)]
    pub initrd_path: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Chassis {
    #[serde(default)]
    pub manufacturer: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub asset: Option<String>,
    #[serde(default)]
    pub sku: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Clock {
    #[serde(default)]
    pub utc: Option<ClockUtc>,
    /// A TZ name such as "Europe/Paris".
    #[serde(default)]
    pub timezone: Option<String>,
    #[serde(default)]
    pub timer: Option<Timer>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClockUtc {
    #[serde(default)]
    pub offset_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timer {
    #[serde(default)]
    pub hpet: Option<HpetTimer>,
    #[serde(default)]
    pub kvm: Option<PresentTimer>,
    #[serde(default)]
    pub pit: Option<PitTimer>,
    #[serde(default)]
    pub rtc: Option<RtcTimer>,
    #[serde(default)]
    pub hyperv: Option<PresentTimer>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HpetTimer {
    #[serde(default)]
    pub tick_policy: Option<HpetTickPolicy>,
    #[serde(default)]
    pub present: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PitTimer {
    #[serde(default)]
    pub tick_policy: Option<PitTickPolicy>,
    #[serde(default)]
    pub present: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RtcTimer {
    #[serde(default)]
    pub tick_policy: Option<RtcTickPolicy>,
    #[serde(default)]
    pub present: Option<bool>,
    #[serde(default)]
    pub track: Option<RtcTrack>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresentTimer {
    #[serde(default)]
    pub present: Option<bool>,
}

string_enum!(HpetTickPolicy, "tick policy", {
    Delay => "delay", Catchup => "catchup", Merge => "merge", Discard => "discard",
});
string_enum!(PitTickPolicy, "tick policy", { Delay => "delay", Catchup => "catchup", Discard => "discard" });
string_enum!(RtcTickPolicy, "tick policy", { Delay => "delay", Catchup => "catchup" });
string_enum!(RtcTrack, "track", { Guest => "guest", Wall => "wall" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Features {
    #[serde(default)]
    pub acpi: Option<FeatureState>,
    #[serde(default)]
    pub apic: Option<FeatureApic>,
    #[serde(default)]
    pub hyperv_passthrough: Option<FeatureState>,
    #[serde(default)]
    pub hyperv: Option<FeatureHyperv>,
    #[serde(default)]
    pub smm: Option<FeatureState>,
    #[serde(default)]
    pub kvm: Option<FeatureKvm>,
    #[serde(default)]
    pub pvspinlock: Option<FeatureState>,
}

/// `{}` or `{"enabled": bool}`; absent `enabled` means true.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureState {
    #[serde(default)]
    pub enabled: Option<bool>,
}

impl FeatureState {
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeatureApic {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub end_of_interrupt: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureKvm {
    #[serde(default)]
    pub hidden: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureHyperv {
    #[serde(default)]
    pub relaxed: Option<FeatureState>,
    #[serde(default)]
    pub vapic: Option<FeatureState>,
    #[serde(default)]
    pub spinlocks: Option<FeatureSpinlocks>,
    #[serde(default)]
    pub vpindex: Option<FeatureState>,
    #[serde(default)]
    pub runtime: Option<FeatureState>,
    #[serde(default)]
    pub synic: Option<FeatureState>,
    #[serde(default)]
    pub synictimer: Option<FeatureSynicTimer>,
    #[serde(default)]
    pub reset: Option<FeatureState>,
    #[serde(default)]
    pub vendorid: Option<FeatureVendorId>,
    #[serde(default)]
    pub frequencies: Option<FeatureState>,
    #[serde(default)]
    pub reenlightenment: Option<FeatureState>,
    #[serde(default)]
    pub tlbflush: Option<FeatureTlbFlush>,
    #[serde(default)]
    pub ipi: Option<FeatureState>,
    #[serde(default)]
    pub evmcs: Option<FeatureState>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSpinlocks {
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Retry count (KubeVirt's JSON name is "spinlocks"), at least 4096.
    #[serde(default)]
    pub spinlocks: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSynicTimer {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub direct: Option<FeatureState>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureVendorId {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub vendorid: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureTlbFlush {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub direct: Option<FeatureState>,
    #[serde(default)]
    pub extended: Option<FeatureState>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Devices {
    #[serde(default)]
    pub use_virtio_transitional: Option<bool>,
    #[serde(default)]
    pub disable_hotplug: bool,
    #[serde(default)]
    pub disks: Vec<Disk>,
    #[serde(default)]
    pub watchdog: Option<Watchdog>,
    #[serde(default)]
    pub interfaces: Vec<Interface>,
    #[serde(default)]
    pub inputs: Vec<Input>,
    #[serde(default)]
    pub autoattach_pod_interface: Option<bool>,
    #[serde(default)]
    pub autoattach_graphics_device: Option<bool>,
    #[serde(default)]
    pub autoattach_serial_console: Option<bool>,
    #[serde(default)]
    pub log_serial_console: Option<bool>,
    #[serde(default)]
    pub autoattach_mem_balloon: Option<bool>,
    #[serde(default)]
    pub autoattach_input_device: Option<bool>,
    /// Accepted; `true` is reported as unsupported by the converter.
    #[serde(default, rename = "autoattachVSOCK")]
    pub autoattach_vsock: Option<bool>,
    #[serde(default)]
    pub rng: Option<Empty>,
    #[serde(default)]
    pub block_multi_queue: Option<bool>,
    #[serde(default, rename = "networkInterfaceMultiqueue")]
    pub network_interface_multiqueue: Option<bool>,
    #[serde(default)]
    pub panic_devices: Vec<PanicDevice>,
    #[serde(default)]
    pub video: Option<Video>,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    #[serde(default)]
    pub host_devices: Vec<HostDevice>,
    /// Directories shared with the guest through virtiofs, each named
    /// after its volume.
    #[serde(default)]
    pub filesystems: Vec<Filesystem>,
    /// The vhostmd metrics channel (`org.github.vhostmd.1`), which the
    /// launcher itself answers (src/metrics).
    #[serde(default)]
    pub downward_metrics: Option<Empty>,
    #[serde(default)]
    pub client_passthrough: Unsupported,
    #[serde(default)]
    pub sound: Unsupported,
    #[serde(default)]
    pub tpm: Option<Tpm>,
}

/// `spec.domain.devices.filesystems[]`: the volume of the same name,
/// shared with the guest through virtiofs (its mount tag is the name).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Filesystem {
    pub name: String,
    /// KubeVirt's only filesystem type, required by its schema.
    pub virtiofs: Empty,
}

/// A host device a device plugin assigned to the VMI's pod
/// (`spec.domain.devices.hostDevices`): its PCI address or mediated
/// device is in the launcher's environment under `deviceName`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostDevice {
    pub name: String,
    /// The device plugin's resource name, e.g. "intel.com/qat"; empty for
    /// a device of a resource claim.
    #[serde(default)]
    pub device_name: String,
    #[serde(default)]
    pub tag: Option<String>,
    /// Dynamic resource allocation: `spec.resourceClaims[].name`.
    #[serde(default)]
    pub claim_name: Option<String>,
    /// Dynamic resource allocation: the claim's request.
    #[serde(default)]
    pub request_name: Option<String>,
}

/// `spec.resourceClaims[]`: a claim of the pod, by its own name or made
/// from a template.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceClaim {
    pub name: String,
    #[serde(default)]
    pub resource_claim_name: Option<String>,
    #[serde(default)]
    pub resource_claim_template_name: Option<String>,
}

/// A GPU or vGPU (`spec.domain.devices.gpus`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gpu {
    pub name: String,
    /// Empty for a GPU of a resource claim.
    #[serde(default)]
    pub device_name: String,
    #[serde(default, rename = "virtualGPUOptions")]
    pub virtual_gpu_options: Option<VgpuOptions>,
    #[serde(default)]
    pub tag: Option<String>,
    /// Dynamic resource allocation: `spec.resourceClaims[].name`.
    #[serde(default)]
    pub claim_name: Option<String>,
    /// Dynamic resource allocation: the claim's request.
    #[serde(default)]
    pub request_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VgpuOptions {
    #[serde(default)]
    pub display: Option<VgpuDisplay>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VgpuDisplay {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default, rename = "ramFB")]
    pub ram_fb: Option<FeatureState>,
}

/// An emulated TPM 2.0 (swtpm run by libvirt).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tpm {
    /// `false` removes the device; absent means present.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Keep the TPM's state across restarts of the VMI.
    #[serde(default)]
    pub persistent: Option<bool>,
}

impl Tpm {
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disk {
    pub name: String,
    #[serde(default)]
    pub disk: Option<DiskTarget>,
    #[serde(default)]
    pub lun: Option<LunTarget>,
    #[serde(default)]
    pub cdrom: Option<CdromTarget>,
    #[serde(default)]
    pub boot_order: Option<u32>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default, rename = "dedicatedIOThread")]
    pub dedicated_io_thread: Option<bool>,
    #[serde(default)]
    pub cache: Option<DiskCache>,
    #[serde(default)]
    pub io: Option<DiskIo>,
    /// Config-drive device tag; accepted, not used (no device metadata).
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub block_size: Option<BlockSize>,
    #[serde(default)]
    pub shareable: Option<bool>,
    #[serde(default)]
    pub error_policy: Option<ErrorPolicy>,
    /// Accepted; `true` is reported as unsupported by the converter.
    #[serde(default)]
    pub changed_block_tracking: Option<bool>,
}

string_enum!(DiskBus, "bus", { Virtio => "virtio", Sata => "sata", Scsi => "scsi", Usb => "usb" });
string_enum!(DiskCache, "cache mode", { None => "none", Writethrough => "writethrough", Writeback => "writeback" });
string_enum!(DiskIo, "io mode", { Native => "native", Threads => "threads", Default => "default" });
string_enum!(ErrorPolicy, "error policy", {
    Stop => "stop", Ignore => "ignore", Report => "report", Enospace => "enospace",
});
string_enum!(Tray, "tray state", { Open => "open", Closed => "closed" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiskTarget {
    #[serde(default)]
    pub bus: Option<DiskBus>,
    #[serde(default)]
    pub readonly: bool,
    #[serde(default)]
    pub pci_address: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LunTarget {
    #[serde(default)]
    pub bus: Option<DiskBus>,
    #[serde(default)]
    pub readonly: bool,
    /// Accepted; `true` is reported as unsupported (needs qemu-pr-helper).
    #[serde(default)]
    pub reservation: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CdromTarget {
    #[serde(default)]
    pub bus: Option<DiskBus>,
    /// KubeVirt's default is true.
    #[serde(default)]
    pub readonly: Option<bool>,
    #[serde(default)]
    pub tray: Option<Tray>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockSize {
    #[serde(default)]
    pub custom: Option<CustomBlockSize>,
    /// Needs the volume at conversion time; not supported.
    #[serde(default)]
    pub match_volume: Unsupported,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomBlockSize {
    pub logical: u32,
    pub physical: u32,
    #[serde(default)]
    pub discard_granularity: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watchdog {
    pub name: String,
    #[serde(default)]
    pub i6300esb: Option<I6300esbWatchdog>,
    #[serde(default)]
    pub diag288: Unsupported,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct I6300esbWatchdog {
    #[serde(default)]
    pub action: Option<WatchdogAction>,
}

string_enum!(WatchdogAction, "watchdog action", {
    Poweroff => "poweroff", Reset => "reset", Shutdown => "shutdown",
});

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    #[serde(default)]
    pub bus: Option<InputBus>,
    /// KubeVirt's default is tablet ([`super::defaults`]).
    #[serde(default, rename = "type")]
    pub input_type: Option<InputType>,
    pub name: String,
}

string_enum!(InputBus, "input bus", { Usb => "usb", Virtio => "virtio" });
string_enum!(InputType, "input type", { Tablet => "tablet", Keyboard => "keyboard" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanicDevice {
    #[serde(default)]
    pub model: Option<PanicModel>,
}

string_enum!(PanicModel, "panic device model", { Hyperv => "hyperv", Isa => "isa", Pvpanic => "pvpanic" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Video {
    #[serde(default, rename = "type")]
    pub video_type: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Interface {
    pub name: String,
    /// e1000, e1000e, igb, ne2k_pci, pcnet, rtl8139 or virtio (default).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub bridge: Option<Empty>,
    #[serde(default)]
    pub masquerade: Option<Empty>,
    /// Deprecated KubeVirt binding; mapped like masquerade.
    #[serde(default)]
    pub slirp: Option<Empty>,
    #[serde(default)]
    pub passt_binding: Option<Empty>,
    /// SR-IOV: a virtual function of the host's NIC, as a host device.
    #[serde(default)]
    pub sriov: Option<Empty>,
    #[serde(default)]
    pub macvtap: Unsupported,
    #[serde(default)]
    pub passt: Unsupported,
    /// KubeVirt's network binding plugins: `passt` and `slirp` are known.
    #[serde(default)]
    pub binding: Option<PluginBinding>,
    #[serde(default)]
    pub ports: Vec<Port>,
    /// Port ranges to forward to the guest; interface conversion decides
    /// what they mean for the binding.
    #[serde(default)]
    pub port_ranges: Vec<PortRange>,
    #[serde(default)]
    pub mac_address: Option<String>,
    #[serde(default)]
    pub boot_order: Option<u32>,
    #[serde(default)]
    pub pci_address: Option<String>,
    #[serde(default, rename = "dhcpOptions")]
    pub dhcp_options: Option<DhcpOptions>,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub acpi_index: Option<u32>,
    #[serde(default)]
    pub state: Option<InterfaceState>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginBinding {
    pub name: String,
}

/// Extra DHCP options for the guest (KubeVirt's `DHCPOptions`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DhcpOptions {
    #[serde(default)]
    pub boot_file_name: Option<String>,
    #[serde(default, rename = "tftpServerName")]
    pub tftp_server_name: Option<String>,
    #[serde(default, rename = "ntpServers")]
    pub ntp_servers: Vec<String>,
    #[serde(default)]
    pub private_options: Vec<DhcpPrivateOption>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DhcpPrivateOption {
    pub option: i64,
    pub value: String,
}

string_enum!(InterfaceState, "interface state", { Absent => "absent", Up => "up", Down => "down" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Port {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub protocol: Option<PortProtocol>,
    pub port: u16,
}

string_enum!(PortProtocol, "protocol", { Tcp => "TCP", Udp => "UDP" });

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRange {
    pub protocol: PortProtocol,
    pub start: u16,
    pub end: u16,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    pub name: String,
    #[serde(default)]
    pub pod: Option<PodNetwork>,
    #[serde(default)]
    pub multus: Option<MultusNetwork>,
    /// A network from a DRA resource claim.
    #[serde(default, rename = "resourceClaim")]
    pub resource_claim: Unsupported,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodNetwork {
    #[serde(default, rename = "vmNetworkCIDR")]
    pub vm_network_cidr: Option<String>,
    #[serde(default, rename = "vmIPv6NetworkCIDR")]
    pub vm_ipv6_network_cidr: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MultusNetwork {
    pub network_name: String,
    #[serde(default)]
    pub default: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Volume {
    pub name: String,
    #[serde(default)]
    pub container_disk: Option<ContainerDiskSource>,
    #[serde(default)]
    pub host_disk: Option<HostDisk>,
    #[serde(default)]
    pub persistent_volume_claim: Option<PvcSource>,
    #[serde(default)]
    pub data_volume: Option<DataVolumeSource>,
    #[serde(default)]
    pub ephemeral: Option<EphemeralSource>,
    #[serde(default)]
    pub empty_disk: Option<EmptyDiskSource>,
    #[serde(default)]
    pub cloud_init_no_cloud: Option<CloudInitSource>,
    #[serde(default)]
    pub cloud_init_config_drive: Option<CloudInitSource>,
    #[serde(default)]
    pub config_map: Option<ConfigMapSource>,
    #[serde(default)]
    pub secret: Option<SecretSource>,
    #[serde(default, rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiSource>,
    #[serde(default)]
    pub service_account: Option<ServiceAccountSource>,
    #[serde(default)]
    pub sysprep: Option<SysprepSource>,
    /// The vhostmd metrics disk, which the launcher itself writes
    /// (src/metrics).
    #[serde(default)]
    pub downward_metrics: Option<Empty>,
    /// A PVC virt-handler mounts in the hotplug directory for
    /// `memory-dump` to write to; not a disk of the domain.
    #[serde(default)]
    pub memory_dump: Option<PvcSource>,
    /// A directory of the launcher's container, shared (read-only)
    /// through a virtiofs filesystem of the same name.
    #[serde(default)]
    pub container_path: Option<ContainerPathSource>,
}

/// A Windows answer file (`autounattend.xml` or `unattend.xml`) from a
/// ConfigMap or Secret, mounted at `<private>/sysprep/<volume>`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SysprepSource {
    #[serde(default)]
    pub secret: Option<LocalObjectReference>,
    #[serde(default)]
    pub config_map: Option<LocalObjectReference>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerPathSource {
    pub path: String,
    #[serde(default)]
    pub read_only: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerDiskSource {
    /// Informational: the launcher pulls nothing; the image's disk must already
    /// be at `<container-disk-dir>/disk_<volume index>.img`.
    pub image: String,
    #[serde(default)]
    pub image_pull_secret: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub image_pull_policy: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostDisk {
    pub path: String,
    #[serde(rename = "type")]
    pub disk_type: HostDiskType,
    #[serde(default)]
    pub capacity: Option<Quantity>,
    #[serde(default)]
    pub shared: Option<bool>,
}

string_enum!(HostDiskType, "hostDisk type", { Disk => "Disk", DiskOrCreate => "DiskOrCreate" });

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PvcSource {
    pub claim_name: String,
    #[serde(default)]
    pub read_only: Option<bool>,
    #[serde(default)]
    pub hotpluggable: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataVolumeSource {
    pub name: String,
    #[serde(default)]
    pub hotpluggable: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EphemeralSource {
    #[serde(default)]
    pub persistent_volume_claim: Option<PvcSource>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmptyDiskSource {
    pub capacity: Quantity,
}

/// Both `cloudInitNoCloud` and `cloudInitConfigDrive`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudInitSource {
    #[serde(default, rename = "secretRef")]
    pub user_data_secret_ref: Option<LocalObjectReference>,
    #[serde(default)]
    pub user_data_base64: Option<String>,
    #[serde(default)]
    pub user_data: Option<String>,
    #[serde(default)]
    pub network_data_secret_ref: Option<LocalObjectReference>,
    #[serde(default)]
    pub network_data_base64: Option<String>,
    #[serde(default)]
    pub network_data: Option<String>,
    /// Extension of this launcher (not in KubeVirt's API): replaces the
    /// generated meta-data file verbatim.
    #[serde(default)]
    pub meta_data: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalObjectReference {
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapSource {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub optional: Option<bool>,
    #[serde(default)]
    pub volume_label: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretSource {
    #[serde(default)]
    pub secret_name: Option<String>,
    #[serde(default)]
    pub optional: Option<bool>,
    #[serde(default)]
    pub volume_label: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DownwardApiSource {
    /// Kubernetes DownwardAPIVolumeFile entries; the kubelet renders them into
    /// the mounted directory, so their content is not needed here.
    #[serde(default)]
    pub fields: Vec<serde_json::Value>,
    #[serde(default)]
    pub volume_label: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountSource {
    #[serde(default)]
    pub service_account_name: Option<String>,
}
