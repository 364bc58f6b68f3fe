//! `spec.domain.devices.filesystems`: a volume's directory shared with the
//! guest through virtiofs (KubeVirt: converter/storage/virtiofs.go for the
//! device, virt-controller/services/virtiofs.go and the pod mutator's
//! containerPath case for the virtiofsd beside it).
//!
//! Each filesystem becomes `<filesystem type='mount'>` with a virtiofs
//! driver whose backend is a virtiofsd the launcher runs
//! (`crate::daemons::virtiofs`), one per filesystem, listening where
//! KubeVirt's virtiofs container listens:
//! `<share-dir>/virtiofs-containers/<name>.sock`. The guest mounts it with
//! the filesystem's name as the tag. QEMU's vhost-user backend needs the
//! guest's memory shared with virtiofsd, so the memory is backed by memfd
//! with shared access (converter/compute/memory_backing.go).
//!
//! Which directory is shared, and whether read-only, follows what
//! KubeVirt's pod mounts in the virtiofs container: a PVC (or DataVolume)
//! read-write unless the claim is `readOnly`; configMap, secret,
//! downwardAPI and serviceAccount volumes, which Kubernetes always mounts
//! read-only; a containerPath only with `readOnly: true` (the pod mutator
//! makes no virtiofs container otherwise, so KubeVirt's VMI would not
//! start).

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::{ConvertContext, ConvertError, paths};
use crate::domxml::{
    Domain, FilesystemDevice, FilesystemDriver, FilesystemSource, FilesystemTarget, MemoryAccess,
    MemoryBacking, MemorySource,
};
use crate::vmi::{VirtualMachineInstance, Volume};

/// A Unix socket's path has room for 107 bytes (`sun_path`).
const MAX_SOCKET_PATH: usize = 107;
/// The vhost-user queue size KubeVirt gives the device.
const QUEUE_SIZE: u32 = 1024;
/// Paths KubeVirt's webhook keeps from containerPath volumes.
const RESERVED_CONTAINER_PATHS: [&str; 2] = ["/var/run/kubevirt", "/var/run/libvirt"];

/// One directory shared with the guest, and the virtiofsd that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtiofsShare {
    /// The filesystem's (and volume's) name: the guest's mount tag.
    pub name: String,
    /// Where virtiofsd listens and QEMU connects.
    pub socket: PathBuf,
    /// The directory shared.
    pub source: PathBuf,
    pub read_only: bool,
}

/// `<share-dir>/virtiofs-containers/<name>.sock`: pkg/virtiofs
/// `VirtioFSSocketPath`.
pub(crate) fn socket_path(ctx: &ConvertContext, name: &str) -> PathBuf {
    ctx.share_dir
        .join("virtiofs-containers")
        .join(format!("{name}.sock"))
}

/// Adds the VMI's filesystems to `domain` and returns what virtiofsd must
/// serve for them.
pub(crate) fn configure(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    domain: &mut Domain,
) -> Result<Vec<VirtiofsShare>, ConvertError> {
    let filesystems = &vmi.spec.domain.devices.filesystems;
    check_container_paths(vmi)?;
    let mut shares = Vec::new();
    let mut names = BTreeSet::new();
    for (i, fs) in filesystems.iter().enumerate() {
        let path = format!("spec.domain.devices.filesystems[{i}]");
        if !names.insert(fs.name.as_str()) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("filesystem {:?} is listed twice", fs.name),
            ));
        }
        if vmi
            .spec
            .domain
            .devices
            .disks
            .iter()
            .any(|d| d.name == fs.name)
        {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "{:?} names a disk too; a volume is either a disk or a filesystem",
                    fs.name
                ),
            ));
        }
        let Some((index, volume)) = vmi
            .spec
            .volumes
            .iter()
            .enumerate()
            .find(|(_, v)| v.name == fs.name)
        else {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("no volume is named {:?}", fs.name),
            ));
        };
        let (source, read_only) = shared_directory(ctx, volume, index)?;
        let socket = socket_path(ctx, &fs.name);
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "virtiofsd's socket {} is longer than a Unix socket path can be ({MAX_SOCKET_PATH} bytes); use a shorter --kubevirt-share-dir or name",
                    socket.display()
                ),
            ));
        }
        domain.devices.filesystems.push(FilesystemDevice {
            fs_type: "mount".to_string(),
            access_mode: Some("passthrough".to_string()),
            driver: FilesystemDriver {
                driver_type: "virtiofs".to_string(),
                queue: Some(QUEUE_SIZE),
            },
            source: FilesystemSource {
                socket: Some(socket.to_string_lossy().into_owned()),
            },
            target: FilesystemTarget {
                dir: fs.name.clone(),
            },
            alias: None,
            address: None,
        });
        shares.push(VirtiofsShare {
            name: fs.name.clone(),
            socket,
            source,
            read_only,
        });
    }
    if !shares.is_empty() {
        share_memory(domain);
    }
    Ok(shares)
}

/// memfd-backed, shared guest memory, which vhost-user needs (KubeVirt
/// adds both for virtiofs; hugepages keep their pages).
fn share_memory(domain: &mut Domain) {
    let backing = domain
        .memory_backing
        .get_or_insert_with(MemoryBacking::default);
    backing.access = Some(MemoryAccess {
        mode: "shared".to_string(),
    });
    backing.source.get_or_insert_with(|| MemorySource {
        source_type: "memfd".to_string(),
    });
}

/// The directory a filesystem's volume shares and whether read-only.
fn shared_directory(
    ctx: &ConvertContext,
    volume: &Volume,
    index: usize,
) -> Result<(PathBuf, bool), ConvertError> {
    let name = volume.name.as_str();
    if let Some(pvc) = &volume.persistent_volume_claim {
        return Ok((paths::pvc_dir(ctx, name), pvc.read_only == Some(true)));
    }
    if volume.data_volume.is_some() {
        return Ok((paths::pvc_dir(ctx, name), false));
    }
    if volume.config_map.is_some() {
        return Ok((paths::config_map_source(ctx, name), true));
    }
    if volume.secret.is_some() {
        return Ok((paths::secret_source(ctx, name), true));
    }
    if volume.downward_api.is_some() {
        return Ok((paths::downward_api_source(ctx, name), true));
    }
    if volume.service_account.is_some() {
        return Ok((ctx.service_account_dir.clone(), true));
    }
    if let Some(container_path) = &volume.container_path {
        return Ok((PathBuf::from(&container_path.path), true));
    }
    let kind = super::storage::source_kind(volume).unwrap_or("empty");
    Err(ConvertError::new(
        format!("spec.volumes[{index}]"),
        format!(
            "a {kind} volume cannot be a filesystem: virtiofs shares a directory, from a \
             persistentVolumeClaim, dataVolume, configMap, secret, serviceAccount, downwardAPI \
             or containerPath volume"
        ),
    ))
}

/// KubeVirt's webhook rules for containerPath volumes: shared through a
/// filesystem only, read-only, never under KubeVirt's own directories.
fn check_container_paths(vmi: &VirtualMachineInstance) -> Result<(), ConvertError> {
    let devices = &vmi.spec.domain.devices;
    for (i, volume) in vmi.spec.volumes.iter().enumerate() {
        let Some(container_path) = &volume.container_path else {
            continue;
        };
        let path = format!("spec.volumes[{i}]");
        if devices.disks.iter().any(|d| d.name == volume.name) {
            return Err(ConvertError::new(
                path,
                format!(
                    "containerPath volume {:?} must be shared through a filesystem, not a disk",
                    volume.name
                ),
            ));
        }
        if !devices.filesystems.iter().any(|f| f.name == volume.name) {
            return Err(ConvertError::new(
                path,
                format!(
                    "containerPath volume {:?} needs a filesystem of the same name in spec.domain.devices.filesystems",
                    volume.name
                ),
            ));
        }
        if container_path.read_only != Some(true) {
            return Err(ConvertError::new(
                format!("{path}.containerPath.readOnly"),
                "a containerPath volume is shared read-only only: set readOnly: true (KubeVirt starts no virtiofsd for it otherwise)",
            ));
        }
        if !container_path.path.starts_with('/') {
            return Err(ConvertError::new(
                format!("{path}.containerPath.path"),
                format!("{:?} is not an absolute path", container_path.path),
            ));
        }
        if let Some(prefix) = RESERVED_CONTAINER_PATHS
            .iter()
            .find(|p| container_path.path.starts_with(*p))
        {
            return Err(ConvertError::new(
                format!("{path}.containerPath.path"),
                format!(
                    "containerPath volume {:?} uses the reserved path prefix {prefix}",
                    volume.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{context, convert_with, vmi_with};
    use super::super::{ConvertContext, convert};
    use super::*;

    fn shared(volume: serde_json::Value) -> (Domain, Vec<VirtiofsShare>) {
        let vmi = vmi_with(json!({
            "domain": {"devices": {"filesystems": [{"name": "fs", "virtiofs": {}}]}},
            "volumes": [volume],
        }));
        let conversion = convert(&vmi, &context()).unwrap_or_else(|e| panic!("{e}"));
        (conversion.domain, conversion.filesystems)
    }

    #[test]
    fn a_pvc_is_a_virtiofs_device_on_kubevirts_socket_with_shared_memfd_memory() {
        let (domain, shares) =
            shared(json!({"name": "fs", "persistentVolumeClaim": {"claimName": "data"}}));
        let xml = domain.to_xml().unwrap_or_else(|e| panic!("{e}"));
        let xml: String = xml.lines().map(str::trim).collect();
        assert!(
            xml.contains(
                "<filesystem type=\"mount\" accessmode=\"passthrough\"><driver type=\"virtiofs\" queue=\"1024\"/>\
                 <source socket=\"/var/run/kubevirt/virtiofs-containers/fs.sock\"/><target dir=\"fs\"/></filesystem>"
            ),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<memoryBacking><source type=\"memfd\"/><access mode=\"shared\"/></memoryBacking>"
            ),
            "{xml}"
        );
        // No disk for the filesystem's volume.
        assert!(!xml.contains("<disk"), "{xml}");
        assert_eq!(
            shares,
            vec![VirtiofsShare {
                name: "fs".into(),
                socket: "/var/run/kubevirt/virtiofs-containers/fs.sock".into(),
                source: "/var/run/kubevirt-private/vmi-disks/fs".into(),
                read_only: false,
            }]
        );
    }

    #[test]
    fn config_volumes_and_read_only_claims_are_shared_read_only() {
        let cases = [
            (
                json!({"configMap": {"name": "cm"}}),
                "/var/run/kubevirt-private/config-map/fs",
                true,
            ),
            (
                json!({"secret": {"secretName": "s"}}),
                "/var/run/kubevirt-private/secret/fs",
                true,
            ),
            (
                json!({"downwardAPI": {"fields": []}}),
                "/var/run/kubevirt-private/downwardapi/fs",
                true,
            ),
            (
                json!({"serviceAccount": {"serviceAccountName": "default"}}),
                "/var/run/secrets/kubernetes.io/serviceaccount",
                true,
            ),
            (
                json!({"containerPath": {"path": "/etc/app", "readOnly": true}}),
                "/etc/app",
                true,
            ),
            (
                json!({"persistentVolumeClaim": {"claimName": "c", "readOnly": true}}),
                "/var/run/kubevirt-private/vmi-disks/fs",
                true,
            ),
            (
                json!({"dataVolume": {"name": "dv"}}),
                "/var/run/kubevirt-private/vmi-disks/fs",
                false,
            ),
        ];
        for (source, dir, read_only) in cases {
            let mut volume = source.clone();
            volume["name"] = json!("fs");
            let (_, shares) = shared(volume);
            assert_eq!(shares.len(), 1, "{source}");
            assert_eq!(shares[0].source, PathBuf::from(dir), "{source}");
            assert_eq!(shares[0].read_only, read_only, "{source}");
        }
    }

    #[test]
    fn hugepages_keep_their_pages_and_gain_shared_access() {
        let vmi = vmi_with(json!({
            "domain": {"memory": {"hugepages": {"pageSize": "2Mi"}},
                "devices": {"filesystems": [{"name": "fs", "virtiofs": {}}]}},
            "volumes": [{"name": "fs", "persistentVolumeClaim": {"claimName": "c"}}],
        }));
        let domain = convert(&vmi, &context())
            .unwrap_or_else(|e| panic!("{e}"))
            .domain;
        let backing = domain.memory_backing.unwrap_or_default();
        assert!(backing.hugepages.is_some());
        assert_eq!(backing.access.map(|a| a.mode).as_deref(), Some("shared"));
        assert_eq!(
            backing.source.map(|s| s.source_type).as_deref(),
            Some("memfd")
        );
    }

    #[test]
    fn without_filesystems_memory_is_not_shared() {
        let vmi = vmi_with(json!({}));
        let domain = convert(&vmi, &context())
            .unwrap_or_else(|e| panic!("{e}"))
            .domain;
        assert!(domain.memory_backing.is_none());
    }

    #[test]
    fn what_cannot_be_shared_is_refused_naming_the_field() {
        let fs = json!([{"name": "fs", "virtiofs": {}}]);
        let cases = [
            (
                json!({"domain": {"devices": {"filesystems": fs}}, "volumes": [{"name": "fs", "containerDisk": {"image": "i"}}]}),
                "spec.volumes[0]",
                "a containerDisk volume cannot be a filesystem",
            ),
            (
                json!({"domain": {"devices": {"filesystems": fs}}}),
                "spec.domain.devices.filesystems[0].name",
                "no volume is named \"fs\"",
            ),
            (
                json!({"domain": {"devices": {"filesystems": fs, "disks": [{"name": "fs"}]}},
                    "volumes": [{"name": "fs", "persistentVolumeClaim": {"claimName": "c"}}]}),
                "spec.domain.devices.filesystems[0].name",
                "names a disk too",
            ),
            (
                json!({"volumes": [{"name": "fs", "containerPath": {"path": "/data", "readOnly": true}}]}),
                "spec.volumes[0]",
                "needs a filesystem of the same name",
            ),
            (
                json!({"domain": {"devices": {"filesystems": fs, "disks": [{"name": "fs"}]}},
                    "volumes": [{"name": "fs", "containerPath": {"path": "/data", "readOnly": true}}]}),
                "spec.volumes[0]",
                "needs a filesystem of the same name",
            ),
            (
                json!({"domain": {"devices": {"filesystems": fs}},
                    "volumes": [{"name": "fs", "containerPath": {"path": "/data"}}]}),
                "spec.volumes[0].containerPath.readOnly",
                "read-only only",
            ),
            (
                json!({"domain": {"devices": {"filesystems": fs}},
                    "volumes": [{"name": "fs", "containerPath": {"path": "/var/run/kubevirt/x", "readOnly": true}}]}),
                "spec.volumes[0].containerPath.path",
                "reserved path prefix /var/run/kubevirt",
            ),
        ];
        for (spec, path, words) in cases {
            let error = convert_with(spec.clone(), &context())
                .err()
                .unwrap_or_else(|| panic!("{spec}: accepted"));
            assert_eq!(error.path, path, "{spec}: {error}");
            assert!(error.message.contains(words), "{spec}: {error}");
        }
    }

    #[test]
    fn a_socket_path_too_long_for_unix_sockets_is_refused() {
        let vmi = vmi_with(json!({
            "domain": {"devices": {"filesystems": [{"name": "fs", "virtiofs": {}}]}},
            "volumes": [{"name": "fs", "persistentVolumeClaim": {"claimName": "c"}}],
        }));
        let ctx = ConvertContext {
            share_dir: PathBuf::from("/").join("d".repeat(100)),
            ..context()
        };
        let error = convert(&vmi, &ctx)
            .err()
            .unwrap_or_else(|| panic!("accepted"));
        assert!(
            error.message.contains("longer than a Unix socket path"),
            "{error}"
        );
    }
}
