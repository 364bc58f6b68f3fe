//! Where KubeVirt's launcher keeps per-VMI files, rooted at the directories
//! of the [`ConvertContext`]. Each function names the KubeVirt source it
//! follows (paths relative to kubevirt/kubevirt).

use std::path::{Path, PathBuf};

use super::ConvertContext;

/// Serial console socket: pkg/virt-launcher/virtwrap/converter/compute/console.go
/// (`<VirtPrivateDir>/<uid>/virt-serial0`, log file `…-log`).
pub(crate) fn serial_socket(ctx: &ConvertContext) -> PathBuf {
    vmi_private_dir(ctx).join("virt-serial0")
}

pub(crate) fn serial_log(ctx: &ConvertContext) -> PathBuf {
    vmi_private_dir(ctx).join("virt-serial0-log")
}

/// VNC socket: converter/compute/graphics.go (`/var/run/kubevirt-private/<uid>/virt-vnc`).
pub(crate) fn vnc_socket(ctx: &ConvertContext) -> PathBuf {
    vmi_private_dir(ctx).join("virt-vnc")
}

/// `<private>/<uid>`: cmd/virt-launcher `InitializePrivateDirectories`.
pub(crate) fn vmi_private_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.private_dir.join(&ctx.uid)
}

/// Base image of a containerDisk: pkg/container-disk/container-disk.go
/// `GetDiskTargetPathFromLauncherView` (`disk_<volume index>.img`).
pub(crate) fn container_disk_image(ctx: &ConvertContext, volume_index: usize) -> PathBuf {
    ctx.container_disk_dir
        .join(format!("disk_{volume_index}.img"))
}

/// Overlay of a containerDisk or ephemeral volume: pkg/ephemeral-disk/ephemeral-disk.go
/// (`<ephemeral>/disk-data/<volume>/disk.qcow2`).
pub(crate) fn overlay_dir(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.ephemeral_disk_dir.join("disk-data").join(volume)
}

pub(crate) fn overlay_image(ctx: &ConvertContext, volume: &str) -> PathBuf {
    overlay_dir(ctx, volume).join("disk.qcow2")
}

/// KubeVirt's ephemeral disk dir in its pod. A launcher given it runs in
/// KubeVirt's pod layout, where per-VMI files must be where KubeVirt's
/// launcher keeps them: a domain defined by either launcher runs, and
/// migrates, under the other's pod.
const POD_EPHEMERAL_DISK_DIR: &str = "/var/run/kubevirt-ephemeral-disks";

/// emptyDisk images: pkg/emptydisk/emptydisk.go
/// (`/var/run/libvirt/empty-disks/<volume>.qcow2`) in KubeVirt's pod
/// layout. Elsewhere this launcher keeps them under the ephemeral disk dir,
/// so that every per-VMI file lives in a directory the caller chose.
pub(crate) fn empty_disk_dir(ctx: &ConvertContext) -> PathBuf {
    if ctx.ephemeral_disk_dir == Path::new(POD_EPHEMERAL_DISK_DIR) {
        PathBuf::from("/var/run/libvirt/empty-disks")
    } else {
        ctx.ephemeral_disk_dir.join("empty-disks")
    }
}

pub(crate) fn empty_disk_image(ctx: &ConvertContext, volume: &str) -> PathBuf {
    empty_disk_dir(ctx).join(format!("{volume}.qcow2"))
}

/// Filesystem PVC / DataVolume image: converter.go `GetFilesystemVolumePath`
/// (`/var/run/kubevirt-private/vmi-disks/<volume>/disk.img`).
pub(crate) fn pvc_image(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.private_dir
        .join("vmi-disks")
        .join(volume)
        .join("disk.img")
}

/// A filesystem PVC / DataVolume's mount: the directory `pvc_image` is in,
/// which a virtiofs filesystem shares whole.
pub(crate) fn pvc_dir(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.private_dir.join("vmi-disks").join(volume)
}

/// Block PVC / DataVolume: converter.go `GetBlockDeviceVolumePath` (`/dev/<volume>`).
pub(crate) fn pvc_block_device(volume: &str) -> PathBuf {
    Path::new("/dev").join(volume)
}

/// A hotplugged filesystem volume's image, which virt-handler bind-mounts
/// into the pod: pkg/storage/volumepath `HotplugFilesystem`
/// (`<hotplug-disk-dir>/<volume>.img`).
pub(crate) fn hotplug_image(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.hotplug_disk_dir.join(format!("{volume}.img"))
}

/// A hotplugged block volume's device node: `HotplugBlockDevice`
/// (`<hotplug-disk-dir>/<volume>`).
pub(crate) fn hotplug_block_device(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.hotplug_disk_dir.join(volume)
}

/// Cloud-init ISOs: pkg/cloud-init/cloud-init.go `GetIsoFilePath` with the local
/// dir set to `<ephemeral>/cloud-init-data` by virt-launcher
/// (`<dir>/<namespace>/<name>/noCloud.iso` or `configdrive.iso`).
pub(crate) fn cloud_init_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.ephemeral_disk_dir
        .join("cloud-init-data")
        .join(&ctx.namespace)
        .join(&ctx.name)
}

pub(crate) fn no_cloud_iso(ctx: &ConvertContext) -> PathBuf {
    cloud_init_dir(ctx).join("noCloud.iso")
}

pub(crate) fn config_drive_iso(ctx: &ConvertContext) -> PathBuf {
    cloud_init_dir(ctx).join("configdrive.iso")
}

/// Mounted secret of a cloud-init `secretRef`: cloud-init.go
/// `resolveNoCloudSecrets` reads `<SecretSourceDir>/<volume>/userdata`.
pub(crate) fn cloud_init_secret_dir(ctx: &ConvertContext, volume: &str) -> PathBuf {
    secret_source(ctx, volume)
}

/// configMap: pkg/config/config-map.go (`config-map/<volume>` → `config-map-disks/<volume>.iso`).
pub(crate) fn config_map_source(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.private_dir.join("config-map").join(volume)
}

pub(crate) fn config_map_disks_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.private_dir.join("config-map-disks")
}

/// secret: pkg/config/secret.go (`secret/<volume>` → `secret-disks/<volume>.iso`).
pub(crate) fn secret_source(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.private_dir.join("secret").join(volume)
}

pub(crate) fn secret_disks_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.private_dir.join("secret-disks")
}

/// downwardAPI: pkg/config/downwardapi.go (`downwardapi/<volume>` → `downwardapi-disks/<volume>.iso`).
pub(crate) fn downward_api_source(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.private_dir.join("downwardapi").join(volume)
}

pub(crate) fn downward_api_disks_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.private_dir.join("downwardapi-disks")
}

/// serviceAccount: pkg/config/config.go `ServiceAccountSourceDir` (the pod's
/// token mount, `--service-account-dir`) → `service-account-disk/service-account.iso`.
pub(crate) fn service_account_disk_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.private_dir.join("service-account-disk")
}

pub(crate) fn service_account_iso(ctx: &ConvertContext) -> PathBuf {
    service_account_disk_dir(ctx).join("service-account.iso")
}

/// sysprep: pkg/config/sysprep.go (`sysprep/<volume>` → `sysprep-disks/<volume>.iso`).
pub(crate) fn sysprep_source(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.private_dir.join("sysprep").join(volume)
}

pub(crate) fn sysprep_disks_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.private_dir.join("sysprep-disks")
}

/// hostDisk: pkg/host-disk `GetMountedHostDiskDir` — KubeVirt mounts the
/// directory of `hostDisk.path` at `<private>/vmi-disks/<volume>/`.
pub(crate) fn host_disk_mount_dir(ctx: &ConvertContext, volume: &str) -> PathBuf {
    ctx.private_dir.join("vmi-disks").join(volume)
}

/// `GetMountedHostDiskPath`: the file's base name inside that mount.
pub(crate) fn host_disk_in_mount(
    ctx: &ConvertContext,
    volume: &str,
    path: &str,
) -> Option<PathBuf> {
    let name = Path::new(path).file_name()?;
    Some(host_disk_mount_dir(ctx, volume).join(name))
}

/// kernelBoot: pkg/container-disk `GetKernelBootArtifactPathFromLauncherView`
/// — the kernel-boot container's files as the launcher sees them,
/// `<container-disk-dir>/kernel-boot/<base name>`.
pub(crate) fn kernel_boot_artifact(ctx: &ConvertContext, path: &str) -> Option<PathBuf> {
    let name = Path::new(path).file_name()?;
    Some(ctx.container_disk_dir.join("kernel-boot").join(name))
}

/// EFI variable store: pkg/util `PathForNVram` (non-root:
/// `<VirtPrivateDir>/libvirt/qemu/nvram`) and converter/compute/os.go
/// (`<vmi name>_VARS.fd`).
pub(crate) fn nvram_dir(ctx: &ConvertContext) -> PathBuf {
    ctx.private_dir.join("libvirt").join("qemu").join("nvram")
}

pub(crate) fn nvram_file(ctx: &ConvertContext) -> PathBuf {
    nvram_dir(ctx).join(nvram_file_name(ctx))
}

fn nvram_file_name(ctx: &ConvertContext) -> String {
    format!("{}_VARS.fd", ctx.name)
}

/// The backend-storage directory's subdirectories, named as KubeVirt's
/// PVC has them (pkg/virt-controller/services/rendervolumes.go
/// `withBackendStorage`: the subPaths `nvram`, `swtpm`, `swtpm-localca`).
pub const BACKEND_NVRAM_DIR: &str = "nvram";
pub const BACKEND_SWTPM_DIR: &str = "swtpm";
pub const BACKEND_SWTPM_LOCALCA_DIR: &str = "swtpm-localca";

/// A persistent EFI variable store: `<backend>/nvram/<vmi name>_VARS.fd`,
/// the file KubeVirt's launcher sees at `PathForNVram` with the PVC's
/// `nvram` subPath mounted there.
pub(crate) fn persistent_nvram_file(backend: &Path, ctx: &ConvertContext) -> PathBuf {
    backend.join(BACKEND_NVRAM_DIR).join(nvram_file_name(ctx))
}

/// Paths go into XML and the disk plan as text.
pub(crate) fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Kubernetes DNS-1123 label: what KubeVirt requires of volume, disk,
/// interface and network names. Enforcing it here also keeps names that are
/// used as path components free of `/` and `..`.
pub(crate) fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// A single safe path component (VMI name, namespace, UID from the launcher's flags).
pub(crate) fn is_safe_component(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns_label("rootdisk"));
        assert!(is_dns_label("a-1"));
        assert!(!is_dns_label("Root"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a/../b"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_safe_component("fedora-1.x"));
        assert!(!is_safe_component(".."));
        assert!(!is_safe_component("a/b"));
    }
}
