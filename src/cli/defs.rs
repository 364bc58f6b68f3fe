//! The flag definitions: every flag's names, value, default, documentation
//! and how it sets [`Args`]. `FLAGS` is the single source of truth for the
//! parser (`parse.rs`), `--help` (`help.rs`) and the man page (`man.rs`).

use std::path::PathBuf;
use std::time::Duration;

use super::values::{
    MAX_CLIENTS, parse_byte_size, parse_count, parse_duration, parse_idle_timeout,
    parse_log_filters, parse_seconds,
};
use crate::config::AgentIntervals;

/// Everything the command line says, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub kubevirt_share_dir: PathBuf,
    pub private_dir: PathBuf,
    pub ephemeral_disk_dir: PathBuf,
    pub container_disk_dir: PathBuf,
    pub hotplug_disk_dir: PathBuf,
    /// Where the pod's service account token is mounted.
    pub service_account_dir: PathBuf,
    /// None: KubeVirt's /usr/share/edk2/ovmf, then the distributions' dirs.
    pub ovmf_path: Option<PathBuf>,
    /// None: the cgroup's cpuset file, as KubeVirt's launcher reads it.
    pub cpuset_file: Option<PathBuf>,
    /// The host's vhost-vsock device (`autoattachVSOCK`).
    pub vhost_vsock_device: PathBuf,
    /// Where persistent EFI variables and TPM state are kept (KubeVirt's
    /// backend-storage PVC); None: persistent EFI is refused.
    pub backend_storage_dir: Option<PathBuf>,
    /// Where the DRA drivers' metadata of the pod's resource claims is.
    pub dra_metadata_dir: PathBuf,
    pub connect: Option<String>,
    pub qemu_timeout: Duration,
    /// None: use the VMI's terminationGracePeriodSeconds.
    pub grace_period_seconds: Option<u64>,
    pub vmi_file: Option<PathBuf>,
    pub allow_emulation: bool,
    pub force_emulation: bool,
    pub spawn_libvirt: bool,
    pub pod_network: PodNetworkMode,
    pub resolv_conf: PathBuf,
    pub max_clients: usize,
    pub max_line_bytes: usize,
    /// None: an idle connection may stay as long as it likes.
    pub client_idle_timeout: Option<Duration>,
    pub libvirt_log_filters: Option<String>,
    pub verbosity: u8,
    pub agent_intervals: AgentIntervals,
    /// KubeVirt mode and the flags of KubeVirt's own launcher.
    pub kubevirt: KubevirtArgs,
    /// The informational switches; `parse` turns them into an [`super::Action`].
    pub help: bool,
    pub version: bool,
    pub generate_man: bool,
    /// `--upgrade-check FILE`: can this binary resume from FILE?
    pub upgrade_check: Option<PathBuf>,
}

/// KubeVirt mode (`--kubevirt`, or the binary called as
/// `virt-launcher-monitor`) and the flags virt-controller renders for
/// KubeVirt's launcher that mean nothing elsewhere.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KubevirtArgs {
    pub mode: bool,
    /// `--hook-sidecars`: hook sidecars to wait for.
    pub hook_sidecars: u32,
    /// `--hook-sidecars-dir`: where their sockets are.
    pub hook_sidecars_dir: PathBuf,
    /// `--hook-timeout`: the most one call to a sidecar may take.
    pub hook_timeout: Duration,
    pub run_as_nonroot: bool,
    /// `--hypervisor`: the hypervisor KubeVirt's cluster configuration names.
    pub hypervisor: String,
    /// `--disk-memory-limit`: bytes `qemu-img info` may use on a disk image.
    pub disk_memory_limit: Option<u64>,
    pub firmware_auto_selection: bool,
    pub vm_stats_collector: bool,
    pub image_volume: bool,
    pub upgrade_ordinal_ifaces: bool,
    pub vgpu_dedicated_hook: bool,
    pub allow_cross_arch_emulation: bool,
    pub simulate_crash: bool,
    pub keep_after_failure: bool,
}

/// Whether the launcher creates the pod networking of masquerade and
/// bridge interfaces (`--pod-network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodNetworkMode {
    /// Setup with CAP_NET_ADMIN, --spawn-libvirt and a network namespace
    /// other than PID 1's; else Existing.
    Auto,
    Setup,
    Existing,
}

/// How a flag takes its value.
#[derive(Clone, Copy)]
pub enum FlagKind {
    /// The flag needs a value, named in the docs (`DIR`, `DURATION`):
    /// `--flag VALUE` or `--flag=VALUE`.
    Value {
        name: &'static str,
        apply: fn(&mut Args, &str) -> Result<(), String>,
    },
    /// An on/off switch: `--flag` is on; `--flag=true` and `--flag=false`
    /// (and Go's other spellings, as KubeVirt writes them) set it either way.
    Switch(fn(&mut Args, bool)),
}

/// One flag: its names, its value, its default and its documentation.
pub struct FlagSpec {
    pub long: &'static str,
    pub short: Option<char>,
    pub kind: FlagKind,
    /// Default applied before parsing (value flags only); also shown in
    /// the docs.
    pub default: Option<&'static str>,
    /// Shown in the docs when the default is not a fixed value.
    pub default_doc: Option<&'static str>,
    pub help: &'static str,
}

impl FlagSpec {
    /// The value's name in the docs, or `None` for a switch.
    pub fn value_name(&self) -> Option<&'static str> {
        match self.kind {
            FlagKind::Value { name, .. } => Some(name),
            FlagKind::Switch(_) => None,
        }
    }

    /// The default as the docs show it, if any.
    pub fn default_text(&self) -> Option<&'static str> {
        self.default_doc.or(self.default)
    }
}

/// A flag that takes a value and has a fixed default (or none).
macro_rules! value_flag {
    ($long:literal, $value:literal, $default:expr, $help:literal, $apply:expr) => {
        FlagSpec {
            long: $long,
            short: None,
            kind: FlagKind::Value {
                name: $value,
                apply: $apply,
            },
            default: $default,
            default_doc: None,
            help: $help,
        }
    };
}

/// An on/off switch without a short name.
macro_rules! switch {
    ($long:literal, $help:literal, $apply:expr) => {
        FlagSpec {
            long: $long,
            short: None,
            kind: FlagKind::Switch($apply),
            default: None,
            default_doc: None,
            help: $help,
        }
    };
}

/// Every flag the launcher accepts, in the order `--help` lists them.
pub static FLAGS: &[FlagSpec] = &[
    value_flag!(
        "name",
        "NAME",
        None,
        "Name of the VMI. The libvirt domain is called NAMESPACE_NAME. Required unless --vmi names the VMI.",
        |a, v| {
            a.name = Some(non_empty(v)?);
            Ok(())
        }
    ),
    value_flag!(
        "namespace",
        "NAMESPACE",
        None,
        "Namespace of the VMI. Required unless --vmi names it.",
        |a, v| {
            a.namespace = Some(non_empty(v)?);
            Ok(())
        }
    ),
    value_flag!(
        "uid",
        "UID",
        None,
        "UID of the VMI; names the per-VMI private directory. Defaults to metadata.uid of --vmi, else one is generated.",
        |a, v| {
            a.uid = Some(non_empty(v)?);
            Ok(())
        }
    ),
    value_flag!(
        "kubevirt-share-dir",
        "DIR",
        Some("/var/run/kubevirt"),
        "Directory shared with virt-handler; the command socket and its lock are created in its sockets/ subdirectory.",
        |a, v| {
            a.kubevirt_share_dir = path(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "private-dir",
        "DIR",
        Some("/var/run/kubevirt-private"),
        "Private directory for disk images made from config maps and secrets, the serial console socket and per-VMI state. One launcher at a time may use it.",
        |a, v| {
            a.private_dir = path(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "ephemeral-disk-dir",
        "DIR",
        Some("/var/run/kubevirt-ephemeral-disks"),
        "Base directory for cloud-init and ignition data, disk overlays and empty disks. One launcher at a time may use it.",
        |a, v| {
            a.ephemeral_disk_dir = path(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "container-disk-dir",
        "DIR",
        Some("/var/run/kubevirt/container-disks"),
        "Where containerDisk base images are found (disk_N.img). The launcher only reads them.",
        |a, v| {
            a.container_disk_dir = path(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "hotplug-disk-dir",
        "DIR",
        Some("/var/run/kubevirt/hotplug-disks"),
        "Where KubeVirt's virt-handler mounts hotplugged volumes: a filesystem volume's disk image as VOLUME.img, a block volume as the device node VOLUME. sync plugs them into a running guest and unplugs them.",
        |a, v| {
            a.hotplug_disk_dir = path(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "service-account-dir",
        "DIR",
        Some("/var/run/secrets/kubernetes.io/serviceaccount"),
        "Where the pod's service account token is mounted: the content of a serviceAccount volume's ISO.",
        |a, v| {
            a.service_account_dir = path(v)?;
            Ok(())
        }
    ),
    FlagSpec {
        long: "ovmf-path",
        short: None,
        kind: FlagKind::Value {
            name: "DIR",
            apply: |a, v| {
                a.ovmf_path = Some(path(v)?);
                Ok(())
            },
        },
        default: None,
        default_doc: Some(
            "KubeVirt's /usr/share/edk2/ovmf, then /usr/share/OVMF, /usr/share/edk2/x64, /usr/share/qemu",
        ),
        help: "The directory with the EFI firmware (OVMF code and variables files) for VMIs that boot EFI. When given, only this directory is searched.",
    },
    FlagSpec {
        long: "cpuset-file",
        short: None,
        kind: FlagKind::Value {
            name: "FILE",
            apply: |a, v| {
                a.cpuset_file = Some(path(v)?);
                Ok(())
            },
        },
        default: None,
        default_doc: Some(
            "/sys/fs/cgroup/cpuset.cpus.effective (cgroup v2), else /sys/fs/cgroup/cpuset/cpuset.cpus",
        ),
        help: "The file listing the CPUs (\"0-3,8\") a VMI with dedicatedCpuPlacement is pinned to, read at each sync.",
    },
    FlagSpec {
        long: "backend-storage-dir",
        short: None,
        kind: FlagKind::Value {
            name: "DIR",
            apply: |a, v| {
                a.backend_storage_dir = Some(path(v)?);
                Ok(())
            },
        },
        default: None,
        default_doc: Some(
            "none; a VMI with efi.persistent is refused, except in KubeVirt mode with the pod's own daemons, where the store is /var/lib/libvirt/qemu/nvram/<name>_VARS.fd (KubeVirt's pod mounts its backend-storage PVC there)",
        ),
        help: "The VM's persistent state, as KubeVirt's backend-storage PVC: EFI variables of a VMI with efi.persistent in nvram/NAME_VARS.fd, and with --spawn-libvirt the state of a persistent TPM in swtpm/ (and the TPM certificate authority in swtpm-localca/, as root; with another libvirt, which keeps the TPM's state in its own directory, a VMI with a persistent TPM is refused). Give the same directory to the next launcher of the VM, or to a migration target (shared, or its own: the state then migrates with the guest).",
    },
    value_flag!(
        "vhost-vsock-device",
        "PATH",
        Some("/dev/vhost-vsock"),
        "The host's vhost-vsock device, which a VMI with autoattachVSOCK needs: a sync of one is refused before anything starts when it is missing (the kernel module vhost_vsock makes it).",
        |a, v| {
            a.vhost_vsock_device = path(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "dra-metadata-dir",
        "DIR",
        Some("/var/run/kubernetes.io/dra-device-attributes"),
        "Where Kubernetes mounts the DRA drivers' metadata of the pod's resource claims (resourceclaims/<claim>/<request>/*-metadata.json, resourceclaimtemplates/...), read at each sync for the GPUs and host devices with a claimName.",
        |a, v| {
            a.dra_metadata_dir = path(v)?;
            Ok(())
        }
    ),
    FlagSpec {
        long: "connect",
        short: None,
        kind: FlagKind::Value {
            name: "URI",
            apply: |a, v| {
                a.connect = Some(non_empty(v)?);
                Ok(())
            },
        },
        default: None,
        default_doc: Some("qemu:///system as root, qemu:///session otherwise"),
        help: "libvirt connection URI. test:///default is libvirt's in-process test driver, which needs no daemon; the static (wire) build reaches the test driver of a running libvirtd as test+unix:///default instead. Ignored with --spawn-libvirt.",
    },
    value_flag!(
        "qemu-timeout",
        "DURATION",
        Some("3m"),
        "How long to wait for a domain to be defined and started (by --vmi or a sync command) before giving up with exit status 5; also the deadline of each sync. More than zero, at most 87600h.",
        |a, v| {
            a.qemu_timeout = parse_duration(v)?;
            Ok(())
        }
    ),
    FlagSpec {
        long: "grace-period-seconds",
        short: None,
        kind: FlagKind::Value {
            name: "SECONDS",
            apply: |a, v| {
                a.grace_period_seconds = Some(parse_seconds(v)?);
                Ok(())
            },
        },
        default: None,
        default_doc: Some("the VMI's spec.terminationGracePeriodSeconds, else 30"),
        help: "After SIGTERM, SIGINT, SIGHUP or SIGQUIT, how long the guest has to power off after the ACPI request before it is forced off: 0 (forced off at once) to 315360000 (ten years).",
    },
    value_flag!(
        "vmi",
        "FILE",
        None,
        "Standalone mode: read this VMI (KubeVirt JSON) and sync it at start-up, as KubeVirt's STANDALONE_VMI does.",
        |a, v| {
            a.vmi_file = Some(path(v)?);
            Ok(())
        }
    ),
    switch!(
        "allow-emulation",
        "Use plain QEMU emulation (domain type qemu) when /dev/kvm is missing or unusable. Without it, a sync on such a host fails with a clear error.",
        |a, on| a.allow_emulation = on
    ),
    switch!(
        "force-emulation",
        "Always use plain QEMU emulation, even where /dev/kvm exists. For hosts whose KVM does not boot guests (for example some nested setups). Implies --allow-emulation.",
        |a, on| a.force_emulation = on
    ),
    switch!(
        "spawn-libvirt",
        "Start and supervise the launcher's own libvirt daemon and virtlogd, with a private runtime directory, as KubeVirt's launcher pod does; connect to that daemon and stop it on exit. The daemon loads only libvirt's QEMU driver (no network, storage, node-device, nwfilter, secret or interface driver: the launcher uses none of them). They run in a PID namespace of their own that dies with the launcher: they, QEMU and its helpers cannot outlive it, even when it is killed with SIGKILL. As root they run privileged; as any other user (non-root mode, no capabilities needed) the daemons and QEMU run as that user, in libvirt's session mode (qemu+unix:///session), and the launcher first enters a user namespace of its own, where its user and group map to themselves. Non-root mode needs unprivileged user namespaces and the directories /run/libvirt, /etc/libvirt, /var/cache/libvirt, /var/lib/libvirt and /var/log/libvirt to exist as mount points; what needs root (creating taps, a tap or disk the user may not open, a host device without a VFIO group node the user may open or above its locked-memory limit, real-time scheduling) is refused at start or at sync, for live changes before the first one.",
        |a, on| a.spawn_libvirt = on
    ),
    value_flag!(
        "pod-network",
        "MODE",
        Some("auto"),
        "How masquerade and bridge interfaces get their taps. setup: create the bridge, tap, addresses and nftables rules in the launcher's network namespace, as KubeVirt does in the pod (needs CAP_NET_ADMIN: refused before anything is touched without it), and remove them on exit. existing: use taps that already exist with KubeVirt's names (tap0, tap<hash>); the DHCP server still runs on an existing masquerade bridge. auto: setup when the launcher has CAP_NET_ADMIN, runs with --spawn-libvirt and is in a network namespace other than PID 1's (so never on a host's own network; when PID 1's namespace cannot be read, existing), else existing.",
        |a, v| {
            a.pod_network = match v {
                "auto" => PodNetworkMode::Auto,
                "setup" => PodNetworkMode::Setup,
                "existing" => PodNetworkMode::Existing,
                other => return Err(format!("{other:?} is not auto, setup or existing")),
            };
            Ok(())
        }
    ),
    value_flag!(
        "resolv-conf",
        "PATH",
        Some("/etc/resolv.conf"),
        "The pod's resolver configuration: its nameservers and search domains go to the guest by DHCP.",
        |a, v| {
            a.resolv_conf = PathBuf::from(non_empty(v)?);
            Ok(())
        }
    ),
    value_flag!(
        "max-clients",
        "N",
        Some("16"),
        "Most command-socket connections served at once, 1 to 65536. One more gets a Busy error line and is closed.",
        |a, v| {
            a.max_clients = parse_count(v, MAX_CLIENTS)?;
            Ok(())
        }
    ),
    value_flag!(
        "max-line-bytes",
        "BYTES",
        Some("1MiB"),
        "Longest request line accepted: at least 64 bytes, at most 1024MiB. A longer line gets RequestTooLarge and is discarded.",
        |a, v| {
            a.max_line_bytes = parse_byte_size(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "client-idle-timeout",
        "DURATION",
        Some("0"),
        "Close a command-socket connection that has not subscribed to events and has sent nothing for this long (at most 87600h), so idle clients cannot hold every slot of --max-clients. 0 never closes an idle connection. A started line must always be finished within 30 s.",
        |a, v| {
            a.client_idle_timeout = parse_idle_timeout(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "libvirt-log-filters",
        "FILTERS",
        None,
        "libvirt log filters for the libvirt client library and any daemon the launcher spawns, in libvirt's log_filters syntax: space-separated LEVEL:MATCH, LEVEL 1 (debug) to 4 (error), e.g. \"1:qemu 3:*\". Checked at start-up.",
        |a, v| {
            a.libvirt_log_filters = Some(parse_log_filters(v)?);
            Ok(())
        }
    ),
    value_flag!(
        "qemu-agent-sys-interval",
        "DURATION",
        Some("120s"),
        "Guest-agent poll interval for interfaces, OS info, hostname and timezone. More than zero, at most 87600h.",
        |a, v| {
            a.agent_intervals.sys = parse_duration(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "qemu-agent-file-interval",
        "DURATION",
        Some("300s"),
        "Guest-agent poll interval for the filesystem list. More than zero, at most 87600h.",
        |a, v| {
            a.agent_intervals.file = parse_duration(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "qemu-agent-user-interval",
        "DURATION",
        Some("10s"),
        "Guest-agent poll interval for logged-in users. More than zero, at most 87600h.",
        |a, v| {
            a.agent_intervals.user = parse_duration(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "qemu-agent-version-interval",
        "DURATION",
        Some("300s"),
        "Guest-agent poll interval for the agent version and supported commands. More than zero, at most 87600h.",
        |a, v| {
            a.agent_intervals.version = parse_duration(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "qemu-fsfreeze-status-interval",
        "DURATION",
        Some("5s"),
        "Guest-agent poll interval for the filesystem freeze status. More than zero, at most 87600h.",
        |a, v| {
            a.agent_intervals.fsfreeze = parse_duration(v)?;
            Ok(())
        }
    ),
    switch!(
        "kubevirt",
        "KubeVirt mode, for a launcher in a KubeVirt pod driven by virt-handler (also on when the binary is called virt-launcher-monitor, as virt-controller starts the pod): the command socket sockets/launcher-sock speaks KubeVirt's gRPC protocol (cmd v1 and CmdInfo) instead of JSON, and the JSON protocol moves to sockets/launcher-json-sock (listening as launcher-json-init-sock until ready); domain events go to virt-handler through KUBEVIRT_SHARE_DIR/domain-notify-pipe.sock; and, without --connect or --spawn-libvirt, the launcher starts virtqemud (else libvirtd) and virtlogd as plain supervised children on the container's own paths, as KubeVirt's launcher does inside its pod: as root in libvirt's system mode, as any other user (a non-root pod) in session mode on the pod's XDG directories (XDG_RUNTIME_DIR, else /var/run; XDG_CONFIG_HOME and XDG_CACHE_HOME, else /var/run/kubevirt-private, where /etc/libvirt/qemu.conf is copied).",
        |a, on| a.kubevirt.mode = on
    ),
    value_flag!(
        "hook-sidecars",
        "COUNT",
        Some("0"),
        "KubeVirt's number of hook sidecars (hooks.kubevirt.io/hookSidecars) to wait for at start-up, 0 to 4294967295: the launcher asks the gRPC socket of each in a subdirectory of --hook-sidecars-dir for its Info until COUNT answered, for at most --qemu-timeout (else exit status 3). Their OnDefineDomain hooks change the domain XML before it is defined, their PreCloudInitIso hooks the cloud-init data before its ISO is written, and their Shutdown hooks are called once the domain is gone.",
        |a, v| {
            a.kubevirt.hook_sidecars = v
                .parse::<u32>()
                .map_err(|_| "expected a whole number".to_string())?;
            Ok(())
        }
    ),
    value_flag!(
        "hook-sidecars-dir",
        "DIR",
        Some("/var/run/kubevirt-hooks"),
        "Where the hook sidecars' sockets are: one subdirectory per sidecar container, as KubeVirt's pod mounts them (DIR/<container>/<name>.sock).",
        |a, v| {
            a.kubevirt.hook_sidecars_dir = path(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "hook-timeout",
        "DURATION",
        Some("1m"),
        "How long one call to a hook sidecar may take (KubeVirt's minute), its Info at start-up included; a sync whose hook does not answer in time fails with Unavailable. More than zero, at most 87600h.",
        |a, v| {
            a.kubevirt.hook_timeout = parse_duration(v)?;
            Ok(())
        }
    ),
    value_flag!(
        "hypervisor",
        "NAME",
        Some("kvm"),
        "KubeVirt's hypervisor name. Only kvm (QEMU through libvirt, with or without /dev/kvm) is supported; any other exits with status 2.",
        |a, v| {
            if v != "kvm" {
                return Err(format!("{v:?}: only the kvm hypervisor is supported"));
            }
            a.kubevirt.hypervisor = v.to_string();
            Ok(())
        }
    ),
    value_flag!(
        "disk-memory-limit",
        "INTEGER",
        None,
        "KubeVirt's memory limit in bytes for inspecting a disk image (qemu-img info), 0 to 9223372036854775807. Accepted for KubeVirt's command line; the launcher reads image headers itself and runs no qemu-img info.",
        |a, v| {
            let limit = v
                .parse::<u64>()
                .ok()
                .filter(|l| i64::try_from(*l).is_ok())
                .ok_or_else(|| {
                    "expected a whole number of bytes from 0 to 9223372036854775807".to_string()
                })?;
            a.kubevirt.disk_memory_limit = Some(limit);
            Ok(())
        }
    ),
    switch!(
        "run-as-nonroot",
        "KubeVirt's non-root pod. The launcher decides by its own user (non-root mode when not root: in KubeVirt mode its daemons run in session mode); with this switch and root, it logs that the pod asked for non-root.",
        |a, on| a.kubevirt.run_as_nonroot = on
    ),
    switch!(
        "firmware-auto-selection",
        "KubeVirt's libvirt firmware auto-selection. Accepted; the launcher always picks the EFI firmware files itself (--ovmf-path).",
        |a, on| a.kubevirt.firmware_auto_selection = on
    ),
    switch!(
        "vm-stats-collector",
        "KubeVirt's VMStatsCollector feature gate: GetVMStats answers (the domain statistics, the dirty rate, the guest agent's answers); without it, a gRPC error, as KubeVirt's.",
        |a, on| a.kubevirt.vm_stats_collector = on
    ),
    switch!(
        "image-volume",
        "KubeVirt's image volumes in place of containerDisk sidecars. Accepted; container disks are read from --container-disk-dir either way.",
        |a, on| a.kubevirt.image_volume = on
    ),
    switch!(
        "upgrade-ordinal-ifaces",
        "KubeVirt's pre-migration hook renaming ordinal pod interfaces. Accepted without effect: the launcher names interfaces itself.",
        |a, on| a.kubevirt.upgrade_ordinal_ifaces = on
    ),
    switch!(
        "vgpu-dedicated-hook",
        "KubeVirt's pre-migration hook for vGPU mediated-device UUIDs. Accepted without effect.",
        |a, on| a.kubevirt.vgpu_dedicated_hook = on
    ),
    switch!(
        "allow-cross-arch-emulation",
        "KubeVirt's cross-architecture emulation. Accepted; the launcher runs x86_64 guests only.",
        |a, on| a.kubevirt.allow_cross_arch_emulation = on
    ),
    switch!(
        "simulate-crash",
        "As KubeVirt's launcher: fail at once, for tests of the pod's failure handling (exit status 1 after the flags are read).",
        |a, on| a.kubevirt.simulate_crash = on
    ),
    switch!(
        "keep-after-failure",
        "As KubeVirt's virt-launcher-monitor: after a failure (any exit status but 0), stay alive instead of exiting, for debugging, until SIGTERM or SIGKILL.",
        |a, on| a.kubevirt.keep_after_failure = on
    ),
    value_flag!(
        "v",
        "LEVEL",
        None,
        "KubeVirt's (klog's) log verbosity, 0 to 2147483647: 0 to 3 as the default, 4 to 5 as -v (debug), 6 and more as -vv (trace). VIRT_LAUNCHER_LOG_VERBOSITY, as KubeVirt reads it, sets the same.",
        |a, v| {
            let level = parse_klog_level(v)?;
            a.verbosity = a.verbosity.max(klog_verbosity(level));
            Ok(())
        }
    ),
    FlagSpec {
        long: "verbose",
        short: Some('v'),
        kind: FlagKind::Switch(|a, on| {
            if on {
                a.verbosity = a.verbosity.saturating_add(1);
            }
        }),
        default: None,
        default_doc: None,
        help: "More log output: once (-v) for debug, twice (-vv) for trace, which logs every request and reply on the command socket and every libvirt call with its duration. RUST_LOG, when set, takes precedence over -v.",
    },
    switch!("version", "Print the version and exit.", |a, on| a
        .version =
        on),
    FlagSpec {
        long: "help",
        short: Some('h'),
        kind: FlagKind::Switch(|a, on| a.help = on),
        default: None,
        default_doc: None,
        help: "Print this help and exit.",
    },
    switch!(
        "generate-man",
        "Print the man page (roff) built from this flag table and exit.",
        |a, on| a.generate_man = on
    ),
    value_flag!(
        "upgrade-check",
        "FILE",
        None,
        "Check that this binary can resume from the hand-over state FILE that a running launcher wrote for upgrade (see COMMAND SOCKET's upgrade), print what it read and exit 0; exit 2 when it cannot. The running launcher runs this on the new binary before it hands over.",
        |a, v| {
            a.upgrade_check = Some(PathBuf::from(v));
            Ok(())
        }
    ),
];

/// A klog verbosity level: a whole number that fits Go's int32.
pub fn parse_klog_level(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|l| i32::try_from(*l).is_ok())
        .ok_or_else(|| format!("{v:?} is not a whole number from 0 to 2147483647"))
}

/// klog's verbosity levels as the launcher's: KubeVirt logs its details at
/// 4 and more.
pub fn klog_verbosity(level: u64) -> u8 {
    match level {
        0..=3 => 0,
        4..=5 => 1,
        _ => 2,
    }
}

fn non_empty(v: &str) -> Result<String, String> {
    if v.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(v.to_string())
    }
}

fn path(v: &str) -> Result<PathBuf, String> {
    non_empty(v).map(PathBuf::from)
}

impl Args {
    /// The defaults, applied through the same code as the command line so
    /// the documented default is exactly what runs.
    pub fn defaults() -> Args {
        let zero = Duration::ZERO;
        let mut args = Args {
            name: None,
            namespace: None,
            uid: None,
            kubevirt_share_dir: PathBuf::new(),
            private_dir: PathBuf::new(),
            ephemeral_disk_dir: PathBuf::new(),
            container_disk_dir: PathBuf::new(),
            hotplug_disk_dir: PathBuf::new(),
            service_account_dir: PathBuf::new(),
            ovmf_path: None,
            cpuset_file: None,
            vhost_vsock_device: PathBuf::new(),
            backend_storage_dir: None,
            dra_metadata_dir: PathBuf::new(),
            connect: None,
            qemu_timeout: zero,
            grace_period_seconds: None,
            vmi_file: None,
            allow_emulation: false,
            force_emulation: false,
            spawn_libvirt: false,
            pod_network: PodNetworkMode::Auto,
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            max_clients: 0,
            max_line_bytes: 0,
            client_idle_timeout: None,
            libvirt_log_filters: None,
            verbosity: 0,
            agent_intervals: AgentIntervals {
                sys: zero,
                file: zero,
                user: zero,
                version: zero,
                fsfreeze: zero,
            },
            kubevirt: KubevirtArgs::default(),
            help: false,
            version: false,
            generate_man: false,
            upgrade_check: None,
        };
        for flag in FLAGS {
            if let (Some(default), FlagKind::Value { apply, .. }) = (flag.default, flag.kind) {
                // The defaults are literals in this file and covered by a
                // unit test; a bad one is a programming error caught there.
                let _ = apply(&mut args, default);
            }
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_default_parses() {
        let mut args = Args::defaults();
        for flag in FLAGS {
            if let (Some(d), FlagKind::Value { apply, .. }) = (flag.default, flag.kind) {
                apply(&mut args, d).unwrap_or_else(|e| panic!("--{}: {e}", flag.long));
            }
            assert!(
                flag.default.is_none() || flag.value_name().is_some(),
                "--{}: a switch has no default",
                flag.long
            );
        }
    }

    #[test]
    fn names_are_unique() {
        for (i, a) in FLAGS.iter().enumerate() {
            for b in &FLAGS[i + 1..] {
                assert_ne!(a.long, b.long);
                assert!(a.short.is_none() || a.short != b.short, "{}", a.long);
            }
        }
    }
}
