//! KubeVirt's `api.Devices` and the device structs, in the same form as
//! `spec` (Go's field names, every field written, XML names as aliases).

use serde::{Deserialize, Serialize};

use super::dual::{Alias, XmlName};
use super::spec::{Empty, Memory, ModeAttr, StateAttr, TypeAttr};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Devices {
    #[serde(rename = "Emulator", alias = "emulator")]
    pub emulator: String,
    #[serde(rename = "Interfaces", alias = "interface")]
    pub interfaces: Option<Vec<Interface>>,
    #[serde(rename = "Channels", alias = "channel")]
    pub channels: Option<Vec<Channel>>,
    #[serde(rename = "HostDevices", alias = "hostdev")]
    pub host_devices: Option<Vec<HostDevice>>,
    #[serde(rename = "PanicDevices", alias = "panic")]
    pub panic_devices: Option<Vec<PanicDevice>>,
    #[serde(rename = "Controllers", alias = "controller")]
    pub controllers: Option<Vec<Controller>>,
    #[serde(rename = "Video", alias = "video")]
    pub video: Option<Vec<Video>>,
    #[serde(rename = "Graphics", alias = "graphics")]
    pub graphics: Option<Vec<Graphics>>,
    #[serde(rename = "Ballooning", alias = "memballoon")]
    pub ballooning: Option<MemBalloon>,
    #[serde(rename = "Disks", alias = "disk")]
    pub disks: Option<Vec<Disk>>,
    #[serde(rename = "Inputs", alias = "input")]
    pub inputs: Option<Vec<Input>>,
    #[serde(rename = "Serials", alias = "serial")]
    pub serials: Option<Vec<Serial>>,
    #[serde(rename = "Consoles", alias = "console")]
    pub consoles: Option<Vec<Console>>,
    #[serde(rename = "Watchdogs", alias = "watchdog")]
    pub watchdogs: Option<Vec<Watchdog>>,
    #[serde(rename = "Rng", alias = "rng")]
    pub rng: Option<Rng>,
    #[serde(rename = "Filesystems", alias = "filesystem")]
    pub filesystems: Option<Vec<FilesystemDevice>>,
    #[serde(rename = "Redirs", alias = "redirdev")]
    pub redirs: Option<Vec<RedirectedDevice>>,
    #[serde(rename = "SoundCards", alias = "sound")]
    pub sound_cards: Option<Vec<SoundCard>>,
    #[serde(rename = "TPMs", alias = "tpm")]
    pub tpms: Option<Vec<Tpm>>,
    #[serde(rename = "VSOCK", alias = "vsock")]
    pub vsock: Option<Vsock>,
    #[serde(rename = "Memory", alias = "memory")]
    pub memory: Option<MemoryDevice>,
    #[serde(rename = "IOMMU", alias = "iommu")]
    pub iommu: Option<Vec<IommuDevice>>,
}

/// A device's PCI, drive, virtio-serial, CCW, ... address: every
/// attribute is kept as written (`0x0000`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Address {
    #[serde(rename = "Type", alias = "@type")]
    pub address_type: String,
    #[serde(rename = "Domain", alias = "@domain")]
    pub domain: String,
    #[serde(rename = "Bus", alias = "@bus")]
    pub bus: String,
    #[serde(rename = "Slot", alias = "@slot")]
    pub slot: String,
    #[serde(rename = "Function", alias = "@function")]
    pub function: String,
    #[serde(rename = "Controller", alias = "@controller")]
    pub controller: String,
    #[serde(rename = "Target", alias = "@target")]
    pub target: String,
    #[serde(rename = "Unit", alias = "@unit")]
    pub unit: String,
    #[serde(rename = "UUID", alias = "@uuid")]
    pub uuid: String,
    #[serde(rename = "Device", alias = "@device")]
    pub device: String,
    #[serde(rename = "CSSID", alias = "@cssid")]
    pub cssid: String,
    #[serde(rename = "SSID", alias = "@ssid")]
    pub ssid: String,
    #[serde(rename = "DevNo", alias = "@devno")]
    pub devno: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BootOrder {
    #[serde(rename = "Order", alias = "@order")]
    pub order: u64,
}

// Interfaces -------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Interface {
    #[serde(rename = "XMLName")]
    pub xml_name: XmlName,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
    #[serde(rename = "Type", alias = "@type")]
    pub interface_type: String,
    #[serde(rename = "TrustGuestRxFilters", alias = "@trustGuestRxFilters")]
    pub trust_guest_rx_filters: String,
    #[serde(rename = "Source", alias = "source")]
    pub source: InterfaceSource,
    #[serde(rename = "Target", alias = "target")]
    pub target: Option<InterfaceTarget>,
    #[serde(rename = "Model", alias = "model")]
    pub model: Option<TypeAttr>,
    #[serde(rename = "MAC", alias = "mac")]
    pub mac: Option<Mac>,
    #[serde(rename = "MTU", alias = "mtu")]
    pub mtu: Option<Mtu>,
    #[serde(rename = "BandWidth", alias = "bandwidth")]
    pub bandwidth: Option<Empty>,
    #[serde(rename = "BootOrder", alias = "boot")]
    pub boot_order: Option<BootOrder>,
    #[serde(rename = "LinkState", alias = "link")]
    pub link_state: Option<StateAttr>,
    #[serde(rename = "FilterRef", alias = "filterref")]
    pub filter_ref: Option<FilterRef>,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<InterfaceDriver>,
    #[serde(rename = "Rom", alias = "rom")]
    pub rom: Option<Rom>,
    #[serde(rename = "ACPI", alias = "acpi")]
    pub acpi: Option<Acpi>,
    #[serde(rename = "Backend", alias = "backend")]
    pub backend: Option<InterfaceBackend>,
    #[serde(rename = "PortForward", alias = "portForward")]
    pub port_forward: Option<Vec<InterfacePortForward>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceSource {
    #[serde(rename = "Network", alias = "@network")]
    pub network: String,
    #[serde(rename = "Device", alias = "@dev")]
    pub device: String,
    #[serde(rename = "Bridge", alias = "@bridge")]
    pub bridge: String,
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceTarget {
    #[serde(rename = "Device", alias = "@dev")]
    pub device: String,
    #[serde(rename = "Managed", alias = "@managed")]
    pub managed: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Mac {
    #[serde(rename = "MAC", alias = "@address")]
    pub mac: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Mtu {
    #[serde(rename = "Size", alias = "@size")]
    pub size: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilterRef {
    #[serde(rename = "Filter", alias = "@filter")]
    pub filter: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceDriver {
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "Queues", alias = "@queues")]
    pub queues: Option<u64>,
    #[serde(rename = "IOMMU", alias = "@iommu")]
    pub iommu: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rom {
    #[serde(rename = "Enabled", alias = "@enabled")]
    pub enabled: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Acpi {
    #[serde(rename = "Index", alias = "@index")]
    pub index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceBackend {
    #[serde(rename = "Type", alias = "@type")]
    pub backend_type: String,
    #[serde(rename = "LogFile", alias = "@logFile")]
    pub log_file: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfacePortForward {
    #[serde(rename = "Proto", alias = "@proto")]
    pub proto: String,
    #[serde(rename = "Address", alias = "@address")]
    pub address: String,
    #[serde(rename = "Dev", alias = "@dev")]
    pub dev: String,
    #[serde(rename = "Ranges", alias = "range")]
    pub ranges: Option<Vec<InterfacePortForwardRange>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfacePortForwardRange {
    #[serde(rename = "Start", alias = "@start")]
    pub start: u64,
    #[serde(rename = "End", alias = "@end")]
    pub end: u64,
    #[serde(rename = "To", alias = "@to")]
    pub to: u64,
    #[serde(rename = "Exclude", alias = "@exclude")]
    pub exclude: String,
}

// Channels, host devices, panic devices ----------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Channel {
    #[serde(rename = "Type", alias = "@type")]
    pub channel_type: String,
    #[serde(rename = "Source", alias = "source")]
    pub source: Option<ModePath>,
    #[serde(rename = "Target", alias = "target")]
    pub target: Option<ChannelTarget>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelTarget {
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "Type", alias = "@type")]
    pub target_type: String,
    #[serde(rename = "Address", alias = "@address")]
    pub address: String,
    #[serde(rename = "Port", alias = "@port")]
    pub port: u64,
    #[serde(rename = "State", alias = "@state")]
    pub state: String,
}

/// The structs of a `mode` and a `path` attribute (`ChannelSource`,
/// `SerialSource`, `ConsoleSource`, `RedirectedDeviceSource`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModePath {
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
    #[serde(rename = "Path", alias = "@path")]
    pub path: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostDevice {
    #[serde(rename = "XMLName")]
    pub xml_name: XmlName,
    #[serde(rename = "Source", alias = "source")]
    pub source: HostDeviceSource,
    #[serde(rename = "Type", alias = "@type")]
    pub device_type: String,
    #[serde(rename = "BootOrder", alias = "boot")]
    pub boot_order: Option<BootOrder>,
    #[serde(rename = "Managed", alias = "@managed")]
    pub managed: String,
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Display", alias = "@display")]
    pub display: String,
    #[serde(rename = "RamFB", alias = "@ramfb")]
    pub ram_fb: String,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<HostDevDriver>,
    #[serde(rename = "ACPI", alias = "acpi")]
    pub acpi: Option<AcpiHostDev>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostDeviceSource {
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostDevDriver {
    #[serde(rename = "Iommufd", alias = "@iommufd")]
    pub iommufd: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AcpiHostDev {
    #[serde(rename = "NodeSet", alias = "@nodeset")]
    pub node_set: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PanicDevice {
    #[serde(rename = "Model", alias = "@model")]
    pub model: Option<String>,
}

// Controllers --------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Controller {
    #[serde(rename = "Type", alias = "@type")]
    pub controller_type: String,
    #[serde(rename = "Index", alias = "@index")]
    pub index: String,
    /// The `model` attribute (a `<model name=.../>` child is not kept).
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<ControllerDriver>,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
    #[serde(rename = "PCIHole64", alias = "pcihole64")]
    pub pci_hole64: Option<PciHole64>,
    #[serde(rename = "Target", alias = "target")]
    pub target: Option<ControllerTarget>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControllerDriver {
    #[serde(rename = "IOThread", alias = "@iothread")]
    pub io_thread: Option<u64>,
    #[serde(rename = "Queues", alias = "@queues")]
    pub queues: Option<u64>,
    #[serde(rename = "IOMMU", alias = "@iommu")]
    pub iommu: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PciHole64 {
    #[serde(rename = "Value", alias = "$text")]
    pub value: u64,
    #[serde(rename = "Unit", alias = "@unit")]
    pub unit: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControllerTarget {
    #[serde(rename = "Hotplug", alias = "@hotplug")]
    pub hotplug: String,
    #[serde(rename = "BusNr", alias = "@busNr")]
    pub bus_nr: Option<u32>,
    /// A `<node>` child element, as KubeVirt's struct reads it.
    #[serde(rename = "NUMANode", alias = "node")]
    pub numa_node: Option<u32>,
}

// Video, graphics ----------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Video {
    #[serde(rename = "Model", alias = "model")]
    pub model: VideoModel,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VideoModel {
    #[serde(rename = "Type", alias = "@type")]
    pub model_type: String,
    #[serde(rename = "Heads", alias = "@heads")]
    pub heads: Option<u64>,
    #[serde(rename = "Ram", alias = "@ram")]
    pub ram: Option<u64>,
    #[serde(rename = "VRam", alias = "@vram")]
    pub vram: Option<u64>,
    #[serde(rename = "VGAMem", alias = "@vgamem")]
    pub vga_mem: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Graphics {
    #[serde(rename = "AutoPort", alias = "@autoport")]
    pub auto_port: String,
    #[serde(rename = "DefaultMode", alias = "@defaultMode")]
    pub default_mode: String,
    #[serde(rename = "Listen", alias = "listen")]
    pub listen: Option<GraphicsListen>,
    #[serde(rename = "PasswdValidTo", alias = "@passwdValidTo")]
    pub passwd_valid_to: String,
    #[serde(rename = "Port", alias = "@port")]
    pub port: i32,
    #[serde(rename = "TLSPort", alias = "@tlsPort")]
    pub tls_port: i64,
    #[serde(rename = "Type", alias = "@type")]
    pub graphics_type: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GraphicsListen {
    #[serde(rename = "Type", alias = "@type")]
    pub listen_type: String,
    #[serde(rename = "Address", alias = "@address")]
    pub address: String,
    /// KubeVirt's tag spells the attribute `newtork`; libvirt's `network`
    /// is therefore never read.
    #[serde(rename = "Network", alias = "@newtork")]
    pub network: String,
    #[serde(rename = "Socket", alias = "@socket")]
    pub socket: String,
}

// Balloon, watchdog, RNG ---------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemBalloon {
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Stats", alias = "stats")]
    pub stats: Option<BalloonStats>,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<IommuAttr>,
    #[serde(rename = "FreePageReporting", alias = "@freePageReporting")]
    pub free_page_reporting: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BalloonStats {
    #[serde(rename = "Period", alias = "@period")]
    pub period: u64,
}

/// The structs of one `iommu` attribute (`MemBalloonDriver`, `RngDriver`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IommuAttr {
    #[serde(rename = "IOMMU", alias = "@iommu")]
    pub iommu: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Watchdog {
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Action", alias = "@action")]
    pub action: String,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rng {
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Backend", alias = "backend")]
    pub backend: Option<RngBackend>,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<IommuAttr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RngBackend {
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Source", alias = "$text")]
    pub source: String,
}

// Disks --------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Disk {
    #[serde(rename = "Device", alias = "@device")]
    pub device: String,
    #[serde(rename = "Snapshot", alias = "@snapshot")]
    pub snapshot: String,
    #[serde(rename = "Type", alias = "@type")]
    pub disk_type: String,
    #[serde(rename = "Source", alias = "source")]
    pub source: DiskSource,
    #[serde(rename = "Target", alias = "target")]
    pub target: DiskTarget,
    #[serde(rename = "Serial", alias = "serial")]
    pub serial: String,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<DiskDriver>,
    #[serde(rename = "ReadOnly", alias = "readonly")]
    pub read_only: Option<Empty>,
    #[serde(rename = "Auth", alias = "auth")]
    pub auth: Option<DiskAuth>,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "BackingStore", alias = "backingStore")]
    pub backing_store: Option<BackingStore>,
    #[serde(rename = "BootOrder", alias = "boot")]
    pub boot_order: Option<BootOrder>,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "BlockIO", alias = "blockio")]
    pub block_io: Option<BlockIo>,
    /// KubeVirt's `v1.Percent`, a decimal string.
    #[serde(rename = "FilesystemOverhead", alias = "filesystemOverhead")]
    pub filesystem_overhead: Option<String>,
    #[serde(rename = "Capacity", alias = "capacity")]
    pub capacity: Option<i64>,
    #[serde(rename = "Shareable", alias = "shareable")]
    pub shareable: Option<Empty>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskAuth {
    #[serde(rename = "Username", alias = "@username")]
    pub username: String,
    #[serde(rename = "Secret", alias = "secret")]
    pub secret: Option<DiskSecret>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskSecret {
    #[serde(rename = "Type", alias = "@type")]
    pub secret_type: String,
    #[serde(rename = "Usage", alias = "@usage")]
    pub usage: String,
    #[serde(rename = "UUID", alias = "@uuid")]
    pub uuid: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskSource {
    #[serde(rename = "Dev", alias = "@dev")]
    pub dev: String,
    #[serde(rename = "File", alias = "@file")]
    pub file: String,
    #[serde(rename = "StartupPolicy", alias = "@startupPolicy")]
    pub startup_policy: String,
    #[serde(rename = "Protocol", alias = "@protocol")]
    pub protocol: String,
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "Host", alias = "host")]
    pub host: Option<DiskSourceHost>,
    #[serde(rename = "Reservations", alias = "reservations")]
    pub reservations: Option<Reservations>,
    #[serde(rename = "Slices", alias = "slices")]
    pub slices: Option<Vec<Slice>>,
    #[serde(rename = "DataStore", alias = "dataStore")]
    pub data_store: Option<Box<DataStore>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskSourceHost {
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "Port", alias = "@port")]
    pub port: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reservations {
    #[serde(rename = "Managed", alias = "@managed")]
    pub managed: String,
    #[serde(rename = "Migration", alias = "@migration")]
    pub migration: String,
    #[serde(rename = "SourceReservations", alias = "source")]
    pub source_reservations: Option<SourceReservations>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SourceReservations {
    #[serde(rename = "Type", alias = "@type")]
    pub reservations_type: String,
    #[serde(rename = "Path", alias = "@path")]
    pub path: String,
    #[serde(rename = "Mode", alias = "@mode")]
    pub mode: String,
}

/// `<slices>`: KubeVirt's struct holds one `<slice>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Slice {
    #[serde(rename = "Slice", alias = "slice")]
    pub slice: SliceType,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SliceType {
    #[serde(rename = "Type", alias = "@type")]
    pub slice_type: String,
    #[serde(rename = "Offset", alias = "@offset")]
    pub offset: i64,
    #[serde(rename = "Size", alias = "@size")]
    pub size: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DataStore {
    #[serde(rename = "Type", alias = "@type")]
    pub store_type: String,
    #[serde(rename = "Format", alias = "format")]
    pub format: Option<TypeAttr>,
    #[serde(rename = "Source", alias = "source")]
    pub source: Option<DiskSource>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskTarget {
    #[serde(rename = "Bus", alias = "@bus")]
    pub bus: String,
    #[serde(rename = "Device", alias = "@dev")]
    pub device: String,
    #[serde(rename = "Tray", alias = "@tray")]
    pub tray: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskDriver {
    #[serde(rename = "Cache", alias = "@cache")]
    pub cache: String,
    #[serde(rename = "ErrorPolicy", alias = "@error_policy")]
    pub error_policy: String,
    #[serde(rename = "IO", alias = "@io")]
    pub io: String,
    #[serde(rename = "Name", alias = "@name")]
    pub name: String,
    #[serde(rename = "Type", alias = "@type")]
    pub driver_type: String,
    #[serde(rename = "IOThread", alias = "@iothread")]
    pub io_thread: Option<u64>,
    #[serde(rename = "IOThreads", alias = "iothreads")]
    pub io_threads: Option<DiskIoThreads>,
    #[serde(rename = "Queues", alias = "@queues")]
    pub queues: Option<u64>,
    #[serde(rename = "Discard", alias = "@discard")]
    pub discard: String,
    #[serde(rename = "IOMMU", alias = "@iommu")]
    pub iommu: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskIoThreads {
    #[serde(rename = "IOThread", alias = "iothread")]
    pub io_thread: Option<Vec<DiskIoThread>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskIoThread {
    #[serde(rename = "Id", alias = "@id")]
    pub id: u32,
}

/// `<backingStore>`: KubeVirt's struct keeps the first level only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackingStore {
    #[serde(rename = "Type", alias = "@type")]
    pub store_type: String,
    #[serde(rename = "Format", alias = "format")]
    pub format: Option<TypeAttr>,
    #[serde(rename = "Source", alias = "source")]
    pub source: Option<DiskSource>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockIo {
    #[serde(rename = "LogicalBlockSize", alias = "@logical_block_size")]
    pub logical_block_size: u64,
    #[serde(rename = "PhysicalBlockSize", alias = "@physical_block_size")]
    pub physical_block_size: u64,
    #[serde(rename = "DiscardGranularity", alias = "@discard_granularity")]
    pub discard_granularity: Option<u64>,
}

// Inputs, serials, consoles ------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Input {
    #[serde(rename = "Type", alias = "@type")]
    pub input_type: String,
    #[serde(rename = "Bus", alias = "@bus")]
    pub bus: String,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Serial {
    #[serde(rename = "Type", alias = "@type")]
    pub serial_type: String,
    #[serde(rename = "Target", alias = "target")]
    pub target: Option<SerialTarget>,
    #[serde(rename = "Source", alias = "source")]
    pub source: Option<ModePath>,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Log", alias = "log")]
    pub log: Option<SerialLog>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SerialTarget {
    #[serde(rename = "Port", alias = "@port")]
    pub port: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SerialLog {
    #[serde(rename = "File", alias = "@file")]
    pub file: String,
    #[serde(rename = "Append", alias = "@append")]
    pub append: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Console {
    #[serde(rename = "Type", alias = "@type")]
    pub console_type: String,
    #[serde(rename = "Target", alias = "target")]
    pub target: Option<ConsoleTarget>,
    #[serde(rename = "Source", alias = "source")]
    pub source: Option<ModePath>,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsoleTarget {
    #[serde(rename = "Type", alias = "@type")]
    pub target_type: Option<String>,
    #[serde(rename = "Port", alias = "@port")]
    pub port: Option<u64>,
}

// Filesystems, redirection, sound, TPM, vsock, memory, IOMMU ---------------

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemDevice {
    #[serde(rename = "Type", alias = "@type")]
    pub fs_type: String,
    #[serde(rename = "AccessMode", alias = "@accessMode")]
    pub access_mode: String,
    #[serde(rename = "Source", alias = "source")]
    pub source: Option<FilesystemSource>,
    #[serde(rename = "Target", alias = "target")]
    pub target: Option<FilesystemTarget>,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<FilesystemDriver>,
    #[serde(rename = "Binary", alias = "binary")]
    pub binary: Option<FilesystemBinary>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemSource {
    #[serde(rename = "Dir", alias = "@dir")]
    pub dir: String,
    #[serde(rename = "Socket", alias = "@socket")]
    pub socket: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemTarget {
    #[serde(rename = "Dir", alias = "@dir")]
    pub dir: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemDriver {
    #[serde(rename = "Type", alias = "@type")]
    pub driver_type: String,
    #[serde(rename = "Queue", alias = "@queue")]
    pub queue: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemBinary {
    #[serde(rename = "Path", alias = "@path")]
    pub path: String,
    #[serde(rename = "Xattr", alias = "@xattr")]
    pub xattr: String,
    #[serde(rename = "Cache", alias = "cache")]
    pub cache: Option<ModeAttr>,
    #[serde(rename = "Lock", alias = "lock")]
    pub lock: Option<FilesystemBinaryLock>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemBinaryLock {
    #[serde(rename = "Posix", alias = "@posix")]
    pub posix: String,
    #[serde(rename = "Flock", alias = "@flock")]
    pub flock: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RedirectedDevice {
    #[serde(rename = "Type", alias = "@type")]
    pub redir_type: String,
    #[serde(rename = "Bus", alias = "@bus")]
    pub bus: String,
    #[serde(rename = "Source", alias = "source")]
    pub source: ModePath,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SoundCard {
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tpm {
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Backend", alias = "backend")]
    pub backend: TpmBackend,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TpmBackend {
    #[serde(rename = "Type", alias = "@type")]
    pub backend_type: String,
    #[serde(rename = "Version", alias = "@version")]
    pub version: String,
    #[serde(rename = "PersistentState", alias = "@persistent_state")]
    pub persistent_state: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Vsock {
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "CID", alias = "cid")]
    pub cid: Cid,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cid {
    #[serde(rename = "Auto", alias = "@auto")]
    pub auto: String,
    #[serde(rename = "Address", alias = "@address")]
    pub address: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryDevice {
    #[serde(rename = "XMLName")]
    pub xml_name: XmlName,
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Target", alias = "target")]
    pub target: Option<MemoryTarget>,
    #[serde(rename = "Alias", alias = "alias")]
    pub alias: Option<Alias>,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryTarget {
    #[serde(rename = "Size", alias = "size")]
    pub size: Memory,
    #[serde(rename = "Requested", alias = "requested")]
    pub requested: Memory,
    #[serde(rename = "Current", alias = "current")]
    pub current: Memory,
    #[serde(rename = "Node", alias = "node")]
    pub node: String,
    #[serde(rename = "Block", alias = "block")]
    pub block: Memory,
    #[serde(rename = "Address", alias = "address")]
    pub address: Option<MemoryAddress>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryAddress {
    #[serde(rename = "Base", alias = "@base")]
    pub base: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IommuDevice {
    #[serde(rename = "XMLName")]
    pub xml_name: XmlName,
    #[serde(rename = "Model", alias = "@model")]
    pub model: String,
    #[serde(rename = "Driver", alias = "driver")]
    pub driver: Option<IommuDriver>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IommuDriver {
    #[serde(rename = "PCIBus", alias = "@pciBus")]
    pub pci_bus: String,
    #[serde(rename = "Accel", alias = "@accel")]
    pub accel: String,
    #[serde(rename = "ATS", alias = "@ats")]
    pub ats: String,
    #[serde(rename = "RIL", alias = "@ril")]
    pub ril: String,
    #[serde(rename = "SSIDSize", alias = "@ssidSize")]
    pub ssid_size: String,
    #[serde(rename = "OAS", alias = "@oas")]
    pub oas: String,
}
