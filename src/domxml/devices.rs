//! `<devices>` and the device elements the converter emits or reads back.
//!
//! libvirt accepts devices in any order and lists them grouped by kind; with
//! quick-xml's `overlapped-lists` feature each list also collects elements
//! that are interleaved with other kinds.

use serde::{Deserialize, Serialize};

use super::general::{Flag, ScaledInteger};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Devices {
    /// Filled in by libvirt (e.g. /usr/bin/qemu-system-x86_64).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator: Option<String>,
    #[serde(rename = "disk", skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    #[serde(rename = "controller", skip_serializing_if = "Vec::is_empty")]
    pub controllers: Vec<Controller>,
    #[serde(rename = "interface", skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(rename = "serial", skip_serializing_if = "Vec::is_empty")]
    pub serials: Vec<Serial>,
    #[serde(rename = "console", skip_serializing_if = "Vec::is_empty")]
    pub consoles: Vec<Console>,
    #[serde(rename = "channel", skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<Channel>,
    #[serde(rename = "input", skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<Input>,
    #[serde(rename = "graphics", skip_serializing_if = "Vec::is_empty")]
    pub graphics: Vec<Graphics>,
    #[serde(rename = "video", skip_serializing_if = "Vec::is_empty")]
    pub videos: Vec<Video>,
    #[serde(rename = "watchdog", skip_serializing_if = "Vec::is_empty")]
    pub watchdogs: Vec<Watchdog>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memballoon: Option<MemBalloon>,
    #[serde(rename = "rng", skip_serializing_if = "Vec::is_empty")]
    pub rngs: Vec<Rng>,
    #[serde(rename = "panic", skip_serializing_if = "Vec::is_empty")]
    pub panics: Vec<Panic>,
    #[serde(rename = "memory", skip_serializing_if = "Vec::is_empty")]
    pub memory_devices: Vec<MemoryDevice>,
    #[serde(rename = "tpm", skip_serializing_if = "Vec::is_empty")]
    pub tpms: Vec<Tpm>,
    #[serde(rename = "hostdev", skip_serializing_if = "Vec::is_empty")]
    pub hostdevs: Vec<HostDev>,
    #[serde(rename = "filesystem", skip_serializing_if = "Vec::is_empty")]
    pub filesystems: Vec<FilesystemDevice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vsock: Option<Vsock>,
}

/// `<vsock model='virtio-non-transitional'><cid auto='no' address='N'/>`:
/// a vhost-vsock device with the CID virt-controller allocated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Vsock {
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub cid: VsockCid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VsockCid {
    /// "no": the CID is `address`, not libvirt's choice.
    #[serde(rename = "@auto")]
    pub auto: String,
    #[serde(rename = "@address", skip_serializing_if = "Option::is_none")]
    pub address: Option<u32>,
}

/// `<filesystem type='mount' accessmode='passthrough'><driver
/// type='virtiofs' queue='1024'/><source socket='…'/><target dir='tag'/>`:
/// a directory a virtiofsd outside libvirt serves (`socket`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemDevice {
    #[serde(rename = "@type")]
    pub fs_type: String,
    #[serde(rename = "@accessmode", skip_serializing_if = "Option::is_none")]
    pub access_mode: Option<String>,
    pub driver: FilesystemDriver,
    pub source: FilesystemSource,
    pub target: FilesystemTarget,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemDriver {
    #[serde(rename = "@type")]
    pub driver_type: String,
    #[serde(rename = "@queue", skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemSource {
    #[serde(rename = "@socket", skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
}

/// The guest's mount tag.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesystemTarget {
    #[serde(rename = "@dir")]
    pub dir: String,
}

/// `<tpm model='tpm-crb'><backend type='emulator' version='2.0'/></tpm>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tpm {
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub backend: TpmBackend,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
}

/// The emulator backend: libvirt runs swtpm for the domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TpmBackend {
    #[serde(rename = "@type")]
    pub backend_type: String,
    #[serde(rename = "@version", skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// "yes": libvirt keeps the TPM state when the domain is undefined.
    #[serde(rename = "@persistent_state", skip_serializing_if = "Option::is_none")]
    pub persistent_state: Option<String>,
}

/// `<alias name='ua-rootdisk'/>`: KubeVirt names user devices `ua-<name>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Alias {
    #[serde(rename = "@name")]
    pub name: String,
}

impl Alias {
    /// libvirt only keeps user aliases that start with "ua-".
    pub fn user(name: &str) -> Alias {
        Alias {
            name: format!("ua-{name}"),
        }
    }
}

/// `<address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>`
/// or `<address type='drive' controller='0' bus='0' target='0' unit='1'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Address {
    #[serde(rename = "@type")]
    pub address_type: String,
    #[serde(rename = "@domain", skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(rename = "@controller", skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    #[serde(rename = "@bus", skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(rename = "@slot", skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(rename = "@target", skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    #[serde(rename = "@function", skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(rename = "@multifunction", skip_serializing_if = "Option::is_none")]
    pub multifunction: Option<String>,
}

/// `<boot order='1'/>` on a disk or interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BootOrder {
    #[serde(rename = "@order")]
    pub order: u32,
}

/// `<disk type='file' device='disk'>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Disk {
    /// "file" or "block".
    #[serde(rename = "@type")]
    pub disk_type: String,
    /// "disk", "cdrom" or "lun".
    #[serde(rename = "@device", skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// "virtio-non-transitional" / "virtio-transitional" for virtio disks.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<DiskDriver>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<DiskSource>,
    #[serde(rename = "backingStore", skip_serializing_if = "Option::is_none")]
    pub backing_store: Option<BackingStore>,
    pub target: DiskTarget,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootOrder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readonly: Option<Flag>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shareable: Option<Flag>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blockio: Option<BlockIo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<driver name='qemu' type='qcow2' cache='none' error_policy='stop' discard='unmap'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskDriver {
    #[serde(rename = "@name", skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(rename = "@cache", skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    #[serde(rename = "@io", skip_serializing_if = "Option::is_none")]
    pub io: Option<String>,
    #[serde(rename = "@error_policy", skip_serializing_if = "Option::is_none")]
    pub error_policy: Option<String>,
    #[serde(rename = "@discard", skip_serializing_if = "Option::is_none")]
    pub discard: Option<String>,
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    #[serde(rename = "@iothread", skip_serializing_if = "Option::is_none")]
    pub iothread: Option<u32>,
}

/// `<source file='…'/>` or `<source dev='…'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskSource {
    #[serde(rename = "@file", skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// libvirt's index in the backing chain (live XML).
    #[serde(rename = "@index", skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// SCSI persistent reservations through a qemu-pr-helper.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservations: Option<Reservations>,
    /// Where a qcow2 image's data lives (its `data-file`), libvirt 10.10
    /// and newer: changed block tracking over a block device.
    #[serde(rename = "dataStore", skip_serializing_if = "Option::is_none")]
    pub data_store: Option<Box<DataStore>>,
}

/// `<dataStore type='block'><format type='raw'/><source dev='…'/></dataStore>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DataStore {
    #[serde(rename = "@type")]
    pub store_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<FormatType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<DiskSource>,
}

/// `<reservations managed='no'><source type='unix' path='…'
/// mode='client'/></reservations>`: QEMU asks the qemu-pr-helper listening
/// on `path` to issue the LUN's persistent reservation commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reservations {
    #[serde(rename = "@managed", skip_serializing_if = "Option::is_none")]
    pub managed: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ReservationsSource>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReservationsSource {
    #[serde(rename = "@type")]
    pub source_type: String,
    #[serde(rename = "@path")]
    pub path: String,
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `<backingStore type='file'><format type='raw'/><source file='…'/></backingStore>`.
/// An empty `<backingStore/>` ends a chain in live XML.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackingStore {
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub store_type: Option<String>,
    #[serde(rename = "@index", skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<FormatType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<DiskSource>,
    #[serde(rename = "backingStore", skip_serializing_if = "Option::is_none")]
    pub backing_store: Option<Box<BackingStore>>,
}

/// `<format type='raw'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FormatType {
    #[serde(rename = "@type")]
    pub format: String,
}

/// `<target dev='vda' bus='virtio'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskTarget {
    #[serde(rename = "@dev")]
    pub dev: String,
    #[serde(rename = "@bus", skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(rename = "@tray", skip_serializing_if = "Option::is_none")]
    pub tray: Option<String>,
}

/// `<blockio logical_block_size='512' physical_block_size='4096'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockIo {
    #[serde(
        rename = "@logical_block_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub logical_block_size: Option<u32>,
    #[serde(
        rename = "@physical_block_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub physical_block_size: Option<u32>,
    #[serde(
        rename = "@discard_granularity",
        skip_serializing_if = "Option::is_none"
    )]
    pub discard_granularity: Option<u32>,
}

/// `<controller type='scsi' index='0' model='virtio-non-transitional'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Controller {
    #[serde(rename = "@type")]
    pub controller_type: String,
    #[serde(rename = "@index")]
    pub index: u32,
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<ControllerDriver>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<driver queues='2' iothread='1'/>` on a controller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControllerDriver {
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    #[serde(rename = "@iothread", skip_serializing_if = "Option::is_none")]
    pub iothread: Option<u32>,
}

/// `<interface type='user'>` (slirp/passt) or `type='ethernet'` (pre-created tap).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Interface {
    #[serde(rename = "@type")]
    pub interface_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddress>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<InterfaceSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<InterfaceTarget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<InterfaceDriver>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<InterfaceBackend>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<Mtu>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip: Vec<InterfaceIp>,
    #[serde(rename = "portForward", skip_serializing_if = "Vec::is_empty")]
    pub port_forward: Vec<PortForward>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootOrder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rom: Option<Rom>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<AcpiIndex>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<mac address='52:54:00:12:34:56'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MacAddress {
    #[serde(rename = "@address")]
    pub address: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceSource {
    #[serde(rename = "@network", skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(rename = "@bridge", skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
}

/// `<target dev='tap0' managed='no'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceTarget {
    #[serde(rename = "@dev")]
    pub dev: String,
    #[serde(rename = "@managed", skip_serializing_if = "Option::is_none")]
    pub managed: Option<String>,
}

/// `<model type='virtio-non-transitional'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelType {
    #[serde(rename = "@type")]
    pub model_type: String,
}

/// `<driver name='vhost' queues='4'/>` on an interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceDriver {
    #[serde(rename = "@name", skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
}

/// `<backend type='passt'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceBackend {
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub backend_type: Option<String>,
    #[serde(rename = "@logFile", skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
}

/// `<ip family='ipv4' address='10.0.2.0' prefix='24'/>` (user-mode network).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterfaceIp {
    #[serde(rename = "@family", skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    #[serde(rename = "@address")]
    pub address: String,
    #[serde(rename = "@prefix", skip_serializing_if = "Option::is_none")]
    pub prefix: Option<u32>,
}

/// `<portForward proto='tcp'><range start='22'/></portForward>` (passt).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PortForward {
    #[serde(rename = "@proto")]
    pub proto: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub range: Vec<PortRange>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PortRange {
    #[serde(rename = "@start")]
    pub start: u16,
    #[serde(rename = "@end", skip_serializing_if = "Option::is_none")]
    pub end: Option<u16>,
}

/// `<link state='down'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LinkState {
    #[serde(rename = "@state")]
    pub state: String,
}

/// `<mtu size='1500'/>`: the tap's MTU, told to the guest's virtio NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Mtu {
    #[serde(rename = "@size")]
    pub size: u32,
}

/// `<rom enabled='no'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rom {
    #[serde(rename = "@enabled", skip_serializing_if = "Option::is_none")]
    pub enabled: Option<String>,
}

/// `<acpi index='1'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AcpiIndex {
    #[serde(rename = "@index")]
    pub index: u32,
}

/// `<source mode='bind' path='…'/>` of a character device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CharSource {
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(rename = "@path", skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `<target type='serial' port='0'/>` or `<target type='virtio' name='org.qemu.guest_agent.0'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CharTarget {
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub target_type: Option<String>,
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    #[serde(rename = "@name", skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// "connected" / "disconnected" in live XML of a guest-agent channel.
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// `<log file='…' append='on'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CharLog {
    #[serde(rename = "@file")]
    pub file: String,
    #[serde(rename = "@append", skip_serializing_if = "Option::is_none")]
    pub append: Option<String>,
}

/// `<serial type='unix'>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Serial {
    #[serde(rename = "@type")]
    pub serial_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<CharSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<CharTarget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<CharLog>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
}

/// `<console type='pty'>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Console {
    #[serde(rename = "@type")]
    pub console_type: String,
    /// The pty path in live XML.
    #[serde(rename = "@tty", skip_serializing_if = "Option::is_none")]
    pub tty: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<CharSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<CharTarget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
}

/// `<channel type='unix'>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Channel {
    #[serde(rename = "@type")]
    pub channel_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<CharSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<CharTarget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<input type='tablet' bus='usb'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Input {
    #[serde(rename = "@type")]
    pub input_type: String,
    #[serde(rename = "@bus", skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<graphics type='vnc'><listen type='socket' socket='…'/></graphics>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Graphics {
    #[serde(rename = "@type")]
    pub graphics_type: String,
    #[serde(rename = "@socket", skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listen: Vec<GraphicsListen>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GraphicsListen {
    #[serde(rename = "@type")]
    pub listen_type: String,
    #[serde(rename = "@socket", skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    #[serde(rename = "@address", skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// `<video><model type='vga' vram='16384' heads='1'/></video>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Video {
    pub model: VideoModel,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VideoModel {
    #[serde(rename = "@type")]
    pub model_type: String,
    #[serde(rename = "@vram", skip_serializing_if = "Option::is_none")]
    pub vram: Option<u32>,
    #[serde(rename = "@heads", skip_serializing_if = "Option::is_none")]
    pub heads: Option<u32>,
    #[serde(rename = "@primary", skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
}

/// `<watchdog model='i6300esb' action='poweroff'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Watchdog {
    #[serde(rename = "@model")]
    pub model: String,
    #[serde(rename = "@action", skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<memballoon model='virtio-non-transitional' freePageReporting='off'><stats period='10'/></memballoon>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemBalloon {
    #[serde(rename = "@model")]
    pub model: String,
    #[serde(rename = "@freePageReporting", skip_serializing_if = "Option::is_none")]
    pub free_page_reporting: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<BalloonStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<stats period='10'/>` (seconds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BalloonStats {
    #[serde(rename = "@period")]
    pub period: u32,
}

/// `<rng model='virtio-non-transitional'><backend model='random'>/dev/urandom</backend></rng>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rng {
    #[serde(rename = "@model")]
    pub model: String,
    pub backend: RngBackend,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RngBackend {
    #[serde(rename = "@model")]
    pub model: String,
    #[serde(rename = "$text")]
    pub source: String,
}

/// `<panic model='isa'/>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Panic {
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

/// `<memory model='virtio-mem'>`: hot-pluggable memory (spec.domain.memory.maxGuest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryDevice {
    #[serde(rename = "@model")]
    pub model: String,
    pub target: MemoryTarget,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryTarget {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<ScaledInteger>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<ScaledInteger>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<ScaledInteger>,
    /// Plugged size reported in live XML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<ScaledInteger>,
    /// Where the device's memory starts in the guest's physical address
    /// space, as libvirt 9.4 and newer report it: kept as read, since
    /// libvirt refuses an update that changes (or drops) it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<MemoryTargetAddress>,
}

/// `<address base='0x100000000'/>` in a memory device's target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryTargetAddress {
    #[serde(rename = "@base", skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

/// `<hostdev mode='subsystem' type='pci' managed='no'>`: a host PCI device
/// handed to the guest, or with `type='mdev'` a mediated device (a vGPU).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostDev {
    /// "subsystem".
    #[serde(rename = "@mode")]
    pub mode: String,
    /// "pci", "mdev" or "usb".
    #[serde(rename = "@type")]
    pub hostdev_type: String,
    /// "no": the device plugin has bound the device to vfio-pci already.
    #[serde(rename = "@managed", skip_serializing_if = "Option::is_none")]
    pub managed: Option<String>,
    /// "vfio-pci" for a mediated device.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(rename = "@display", skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    #[serde(rename = "@ramfb", skip_serializing_if = "Option::is_none")]
    pub ramfb: Option<String>,
    pub source: HostDevSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootOrder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Where the guest sees it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Address>,
}

impl HostDev {
    /// The VMI's name for the device: its alias without KubeVirt's "ua-"
    /// prefix ("" when it has no alias).
    pub fn vmi_name(&self) -> String {
        self.alias
            .as_ref()
            .map(|a| a.name.trim_start_matches("ua-").to_string())
            .unwrap_or_default()
    }

    /// The host address as messages name it: the PCI address or the
    /// mediated device's UUID ("" when there is none).
    pub fn host_address(&self) -> String {
        self.source
            .address
            .as_ref()
            .map(|a| a.describe())
            .unwrap_or_default()
    }
}

/// `<source><address domain='0x0000' bus='0x81' slot='0x00' function='0x1'/></source>`,
/// or `<address uuid='…'/>` for a mediated device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostDevSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<HostAddress>,
}

/// A device on the host: a PCI address or a mediated device's UUID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostAddress {
    #[serde(rename = "@domain", skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(rename = "@bus", skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    #[serde(rename = "@slot", skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(rename = "@function", skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    #[serde(rename = "@uuid", skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// A USB device's number on its `bus` (both decimal).
    #[serde(rename = "@device", skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl HostAddress {
    /// "0000:81:00.1" for a PCI device, the UUID for a mediated one,
    /// "001:005" (bus:device, as `lsusb` and /dev/bus/usb name them) for a
    /// USB one.
    pub fn describe(&self) -> String {
        if let Some(uuid) = &self.uuid {
            return uuid.clone();
        }
        if let Some(device) = &self.device {
            return format!(
                "{:0>3}:{device:0>3}",
                self.bus.as_deref().unwrap_or_default()
            );
        }
        let part = |v: &Option<String>| {
            v.as_deref()
                .map(|s| s.trim_start_matches("0x").to_string())
                .unwrap_or_default()
        };
        format!(
            "{:0>4}:{:0>2}:{:0>2}.{}",
            part(&self.domain),
            part(&self.bus),
            part(&self.slot),
            part(&self.function)
        )
    }
}
