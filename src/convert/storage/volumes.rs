//! Where a disk's data comes from: each volume source becomes a file or
//! block device plus the [`DiskPlan`] steps that create or check it.

use std::collections::{BTreeMap, BTreeSet};

use super::super::cloudinit::{self, DataSource};
use super::super::{ConvertContext, ConvertError, paths};
use super::{DiskEntry, Source};
use crate::disks::{DiskPlan, DiskStep, IsoContents, PathKind};
use crate::domxml::{self, BackingStore, DiskSource, FormatType};
use crate::vmi::{HostDiskType, Quantity, VirtualMachineInstance, Volume};

const MIB: u64 = 1 << 20;

/// Volume name → (index in spec.volumes, volume), after checking names and
/// that each volume has exactly one source.
pub(super) fn index_volumes(
    volumes: &[Volume],
) -> Result<BTreeMap<&str, (usize, &Volume)>, ConvertError> {
    let mut index = BTreeMap::new();
    for (i, volume) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        if !paths::is_dns_label(&volume.name) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid volume name (lowercase letters, digits and '-', at most 63)",
                    volume.name
                ),
            ));
        }
        let sources = source_kinds(volume);
        if sources.len() != 1 {
            let found = if sources.is_empty() {
                "none".to_string()
            } else {
                sources.join(", ")
            };
            return Err(ConvertError::new(
                path,
                format!("a volume needs exactly one source (found: {found})"),
            ));
        }
        if index.insert(volume.name.as_str(), (i, volume)).is_some() {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("volume {:?} is defined twice", volume.name),
            ));
        }
    }
    // KubeVirt's webhook allows one downwardMetrics volume: the image's
    // path is fixed.
    let mut metrics_volumes = volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| v.downward_metrics.is_some());
    if let (Some(_), Some((second, _))) = (metrics_volumes.next(), metrics_volumes.next()) {
        return Err(ConvertError::new(
            format!("spec.volumes[{second}]"),
            "only one downwardMetrics volume is allowed",
        ));
    }
    // KubeVirt's webhook allows one serviceAccount volume (any number of
    // cloud-init volumes: each gets its own ISO here, see `cloud_init`).
    let mut service_accounts = volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| v.service_account.is_some());
    if let (Some(_), Some((second, _))) = (service_accounts.next(), service_accounts.next()) {
        return Err(ConvertError::new(
            format!("spec.volumes[{second}]"),
            "only one serviceAccount volume is allowed",
        ));
    }
    Ok(index)
}

pub(super) fn source_kinds(volume: &Volume) -> Vec<&'static str> {
    let present = [
        ("containerDisk", volume.container_disk.is_some()),
        ("hostDisk", volume.host_disk.is_some()),
        (
            "persistentVolumeClaim",
            volume.persistent_volume_claim.is_some(),
        ),
        ("dataVolume", volume.data_volume.is_some()),
        ("ephemeral", volume.ephemeral.is_some()),
        ("emptyDisk", volume.empty_disk.is_some()),
        ("cloudInitNoCloud", volume.cloud_init_no_cloud.is_some()),
        (
            "cloudInitConfigDrive",
            volume.cloud_init_config_drive.is_some(),
        ),
        ("configMap", volume.config_map.is_some()),
        ("secret", volume.secret.is_some()),
        ("downwardAPI", volume.downward_api.is_some()),
        ("serviceAccount", volume.service_account.is_some()),
        ("sysprep", volume.sysprep.is_some()),
        ("containerPath", volume.container_path.is_some()),
        ("downwardMetrics", volume.downward_metrics.is_some()),
        ("memoryDump", volume.memory_dump.is_some()),
    ];
    present
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
}

/// Whether a filesystem (virtiofs) shares volume `name`.
fn is_filesystem(vmi: &VirtualMachineInstance, name: &str) -> bool {
    vmi.spec
        .domain
        .devices
        .filesystems
        .iter()
        .any(|f| f.name == name)
}

/// The VMI's disks plus a default disk for each volume that has none.
pub(super) fn disk_entries(
    vmi: &VirtualMachineInstance,
    volumes: &BTreeMap<&str, (usize, &Volume)>,
) -> Result<Vec<DiskEntry>, ConvertError> {
    let mut names = BTreeSet::new();
    let mut entries = Vec::new();
    for (i, disk) in vmi.spec.domain.devices.disks.iter().enumerate() {
        let path = format!("spec.domain.devices.disks[{i}]");
        if !paths::is_dns_label(&disk.name) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid disk name (lowercase letters, digits and '-', at most 63)",
                    disk.name
                ),
            ));
        }
        if !names.insert(disk.name.as_str()) {
            return Err(ConvertError::new(
                format!("{path}.name"),
                format!("disk {:?} is listed twice", disk.name),
            ));
        }
        entries.push(DiskEntry {
            path,
            disk: disk.clone(),
        });
    }
    // A memoryDump volume is where `memory-dump` writes (virt-handler
    // mounts it in the hotplug directory), never a disk: KubeVirt adds it
    // to a running VMI, after the defaulting that gives volumes disks.
    for entry in &entries {
        if let Some((index, _)) = volumes
            .get(entry.disk.name.as_str())
            .filter(|(_, v)| v.memory_dump.is_some())
        {
            return Err(ConvertError::new(
                format!("{}.name", entry.path),
                format!(
                    "spec.volumes[{index}] ({:?}) is a memoryDump volume, which is where a memory dump is written, not a disk",
                    entry.disk.name
                ),
            ));
        }
    }
    // In spec.volumes order, like KubeVirt's defaulting, which gives no
    // disk to a filesystem's volume (`SetDefaultVolumeDisk`).
    let mut without_disk: Vec<(usize, &str)> = volumes
        .iter()
        .filter(|(name, (_, volume))| {
            !names.contains(*name) && volume.memory_dump.is_none() && !is_filesystem(vmi, name)
        })
        .map(|(name, (index, _))| (*index, *name))
        .collect();
    without_disk.sort_unstable();
    for (index, name) in without_disk {
        entries.push(DiskEntry {
            path: format!("spec.volumes[{index}]"),
            disk: crate::vmi::defaults::disk_for_volume(name),
        });
    }
    Ok(entries)
}

pub(super) fn volume_source(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    volume: &Volume,
    index: usize,
    plan: &mut DiskPlan,
    disk: &mut domxml::Disk,
) -> Result<Source, ConvertError> {
    let name = volume.name.as_str();
    let path = format!("spec.volumes[{index}]");
    if volume.container_disk.is_some() {
        return Ok(container_disk(ctx, name, index, plan));
    }
    if let Some(pvc) = &volume.persistent_volume_claim {
        return Ok(claim(
            ctx,
            name,
            "persistentVolumeClaim",
            pvc.hotpluggable,
            plan,
        ));
    }
    if let Some(dv) = &volume.data_volume {
        return Ok(claim(ctx, name, "dataVolume", dv.hotpluggable, plan));
    }
    if volume.ephemeral.is_some() {
        return Ok(ephemeral(ctx, name, plan, disk));
    }
    if let Some(empty) = &volume.empty_disk {
        let size = disk_size(&empty.capacity, &format!("{path}.emptyDisk.capacity"))?;
        return Ok(empty_disk(ctx, name, size, plan));
    }
    if let Some(host_disk) = &volume.host_disk {
        return host_disk_source(ctx, name, &path, host_disk, plan);
    }
    if let Some(source) = &volume.cloud_init_no_cloud {
        return cloud_init(vmi, ctx, name, index, source, DataSource::NoCloud, plan);
    }
    if let Some(source) = &volume.cloud_init_config_drive {
        return cloud_init(vmi, ctx, name, index, source, DataSource::ConfigDrive, plan);
    }
    if let Some(sysprep) = &volume.sysprep {
        return sysprep_source(ctx, name, &path, sysprep, plan);
    }
    if volume.downward_metrics.is_some() {
        return Ok(downward_metrics(ctx, name, plan));
    }
    if volume.container_path.is_some() {
        return Err(ConvertError::new(
            path,
            format!(
                "containerPath volume {name:?} needs a filesystem of the same name in spec.domain.devices.filesystems (a container directory is shared through virtiofs, never a disk)"
            ),
        ));
    }
    if let Some(config_map) = &volume.config_map {
        let source = paths::config_map_source(ctx, name);
        let iso = paths::config_map_disks_dir(ctx).join(format!("{name}.iso"));
        let label = config_map.volume_label.as_deref();
        return Ok(config_iso(plan, "configMap", name, source, iso, label));
    }
    if let Some(secret) = &volume.secret {
        let source = paths::secret_source(ctx, name);
        let iso = paths::secret_disks_dir(ctx).join(format!("{name}.iso"));
        return Ok(config_iso(
            plan,
            "secret",
            name,
            source,
            iso,
            secret.volume_label.as_deref(),
        ));
    }
    if let Some(downward) = &volume.downward_api {
        let source = paths::downward_api_source(ctx, name);
        let iso = paths::downward_api_disks_dir(ctx).join(format!("{name}.iso"));
        return Ok(config_iso(
            plan,
            "downwardAPI",
            name,
            source,
            iso,
            downward.volume_label.as_deref(),
        ));
    }
    // index_volumes guarantees exactly one source: this is serviceAccount.
    let source = ctx.service_account_dir.clone();
    Ok(config_iso(
        plan,
        "serviceAccount",
        name,
        source,
        paths::service_account_iso(ctx),
        None,
    ))
}

/// The vhostmd image of the downward metrics, created before the domain
/// is defined (KubeVirt's `CreateDownwardMetricDisk`) and rewritten by the
/// launcher's `metrics-disk` thread while the domain runs.
pub(super) fn downward_metrics(ctx: &ConvertContext, volume: &str, plan: &mut DiskPlan) -> Source {
    let what = what("downwardMetrics", volume);
    let path = crate::metrics::disk_path(&ctx.private_dir);
    if let Some(dir) = path.parent() {
        plan.make_dir(dir.to_path_buf(), &what);
    }
    plan.push(DiskStep::CreateMetricsDisk {
        path: path.clone(),
        what,
    });
    Source::File {
        path: paths::text(&path),
        format: "raw",
    }
}

pub(super) fn what(kind: &str, volume: &str) -> String {
    format!("{kind} volume {volume:?}")
}

/// A qcow2 overlay on the read-only base image, so the base is never written.
pub(super) fn container_disk(
    ctx: &ConvertContext,
    volume: &str,
    index: usize,
    plan: &mut DiskPlan,
) -> Source {
    let what = what("containerDisk", volume);
    let base = paths::container_disk_image(ctx, index);
    let overlay = paths::overlay_image(ctx, volume);
    plan.require(base.clone(), PathKind::File, &what);
    plan.make_dir(paths::overlay_dir(ctx, volume), &what);
    // The base format (qcow2 or raw) is detected when the plan runs and
    // recorded in the overlay, so libvirt reads the chain from the image.
    plan.push(DiskStep::CreateOverlay {
        path: overlay.clone(),
        backing: base,
        backing_format: None,
        what,
    });
    Source::File {
        path: paths::text(&overlay),
        format: "qcow2",
    }
}

/// PVC or DataVolume: an image file in the mounted claim, or a block device.
pub(super) fn claim(
    ctx: &ConvertContext,
    volume: &str,
    kind: &str,
    hotpluggable: bool,
    plan: &mut DiskPlan,
) -> Source {
    let what = what(kind, volume);
    if hotpluggable {
        // virt-handler mounts hotpluggable volumes into the hotplug
        // directory; one that is there at start is attached with the rest.
        return if ctx.block_pvcs.contains(volume) {
            let device = paths::hotplug_block_device(ctx, volume);
            plan.require(device.clone(), PathKind::BlockDevice, &what);
            Source::Block {
                path: paths::text(&device),
            }
        } else {
            let image = paths::hotplug_image(ctx, volume);
            plan.require(image.clone(), PathKind::File, &what);
            Source::File {
                path: paths::text(&image),
                format: "raw",
            }
        };
    }
    if ctx.block_pvcs.contains(volume) {
        let device = paths::pvc_block_device(volume);
        plan.require(device.clone(), PathKind::BlockDevice, &what);
        Source::Block {
            path: paths::text(&device),
        }
    } else {
        let image = paths::pvc_image(ctx, volume);
        plan.require(image.clone(), PathKind::File, &what);
        Source::File {
            path: paths::text(&image),
            format: "raw",
        }
    }
}

/// A qcow2 overlay over a raw PVC: the claim stays untouched.
pub(super) fn ephemeral(
    ctx: &ConvertContext,
    volume: &str,
    plan: &mut DiskPlan,
    disk: &mut domxml::Disk,
) -> Source {
    let what = what("ephemeral", volume);
    let block = ctx.block_pvcs.contains(volume);
    let (backing, kind, store_type) = if block {
        (
            paths::pvc_block_device(volume),
            PathKind::BlockDevice,
            "block",
        )
    } else {
        (paths::pvc_image(ctx, volume), PathKind::File, "file")
    };
    let overlay = paths::overlay_image(ctx, volume);
    plan.require(backing.clone(), kind, &what);
    plan.make_dir(paths::overlay_dir(ctx, volume), &what);
    plan.push(DiskStep::CreateOverlay {
        path: overlay.clone(),
        backing: backing.clone(),
        backing_format: Some("raw".to_string()),
        what,
    });
    let backing_text = paths::text(&backing);
    disk.backing_store = Some(BackingStore {
        store_type: Some(store_type.to_string()),
        format: Some(FormatType {
            format: "raw".to_string(),
        }),
        source: Some(if block {
            DiskSource {
                dev: Some(backing_text),
                ..DiskSource::default()
            }
        } else {
            DiskSource {
                file: Some(backing_text),
                ..DiskSource::default()
            }
        }),
        ..BackingStore::default()
    });
    Source::File {
        path: paths::text(&overlay),
        format: "qcow2",
    }
}

pub(super) fn empty_disk(
    ctx: &ConvertContext,
    volume: &str,
    size: u64,
    plan: &mut DiskPlan,
) -> Source {
    let what = what("emptyDisk", volume);
    let image = paths::empty_disk_image(ctx, volume);
    plan.make_dir(paths::empty_disk_dir(ctx), &what);
    plan.push(DiskStep::CreateQcow2 {
        path: image.clone(),
        size,
        what,
    });
    Source::File {
        path: paths::text(&image),
        format: "qcow2",
    }
}

/// KubeVirt mounts the directory of `hostDisk.path` at
/// `<private>/vmi-disks/<volume>/` and uses the file of the same name in
/// it. That layout is used when it is present ([`ConvertContext::present_paths`]);
/// otherwise, as a standalone convenience, the absolute host path itself.
/// In order:
///
/// 1. `<private>/vmi-disks/<volume>/<base name>` exists: use it;
/// 2. `path` exists: use it;
/// 3. `DiskOrCreate`: create the sparse file in the mount when the mount
///    directory exists, else at `path` (its directory created), as
///    KubeVirt's `DirectoryOrCreate` host mount would;
/// 4. `Disk`: the file must exist; the error names the mount path.
pub(super) fn host_disk_source(
    ctx: &ConvertContext,
    volume: &str,
    path: &str,
    host_disk: &crate::vmi::HostDisk,
    plan: &mut DiskPlan,
) -> Result<Source, ConvertError> {
    let what = what("hostDisk", volume);
    let host_path = std::path::PathBuf::from(&host_disk.path);
    let in_mount = paths::host_disk_in_mount(ctx, volume, &host_disk.path);
    let in_mount = match in_mount {
        Some(file) if host_path.is_absolute() => file,
        _ => {
            return Err(ConvertError::new(
                format!("{path}.hostDisk.path"),
                format!("{:?} is not an absolute file path", host_disk.path),
            ));
        }
    };
    let mount_dir = paths::host_disk_mount_dir(ctx, volume);
    let present = |p: &std::path::Path| ctx.present_paths.contains(p);
    let image = if present(&in_mount) {
        in_mount
    } else if present(&host_path) {
        host_path
    } else {
        match host_disk.disk_type {
            HostDiskType::Disk => {
                plan.require(
                    in_mount.clone(),
                    PathKind::File,
                    &format!("{what} (neither it nor {} exists)", host_disk.path),
                );
                in_mount
            }
            HostDiskType::DiskOrCreate => {
                let capacity_path = format!("{path}.hostDisk.capacity");
                let capacity = host_disk.capacity.as_ref().ok_or_else(|| {
                    ConvertError::new(
                        &capacity_path,
                        "capacity is required with type DiskOrCreate",
                    )
                })?;
                let size = disk_size(capacity, &capacity_path)?;
                let image = if present(&mount_dir) {
                    in_mount
                } else {
                    if let Some(parent) = host_path.parent() {
                        plan.make_dir(parent.to_path_buf(), &what);
                    }
                    host_path
                };
                plan.push(DiskStep::CreateSparseFile {
                    path: image.clone(),
                    size,
                    what,
                });
                image
            }
        }
    };
    Ok(Source::File {
        path: paths::text(&image),
        format: "raw",
    })
}

/// A Windows answer file as a cdrom, as KubeVirt builds it
/// (pkg/config/sysprep.go): every file of the mounted ConfigMap or Secret
/// in an ISO labelled "unattendCD", which must hold `autounattend.xml` or
/// `unattend.xml` (any case).
pub(super) fn sysprep_source(
    ctx: &ConvertContext,
    volume: &str,
    path: &str,
    sysprep: &crate::vmi::SysprepSource,
    plan: &mut DiskPlan,
) -> Result<Source, ConvertError> {
    match (&sysprep.config_map, &sysprep.secret) {
        (Some(_), None) | (None, Some(_)) => {}
        _ => {
            return Err(ConvertError::new(
                format!("{path}.sysprep"),
                "set exactly one of configMap or secret",
            ));
        }
    }
    let what = what("sysprep", volume);
    let source = paths::sysprep_source(ctx, volume);
    plan.require(source.clone(), PathKind::Dir, &what);
    plan.push(DiskStep::RequireOneOf {
        dir: source.clone(),
        names: vec![
            SYSPREP_ANSWER_FILES[0].to_string(),
            SYSPREP_ANSWER_FILES[1].to_string(),
        ],
        what: what.clone(),
    });
    let iso = paths::sysprep_disks_dir(ctx).join(format!("{volume}.iso"));
    plan.make_dir(paths::sysprep_disks_dir(ctx), &what);
    plan.push(DiskStep::WriteIso {
        path: iso.clone(),
        volume_id: SYSPREP_LABEL.to_string(),
        contents: IsoContents::Dir(source),
        what,
    });
    Ok(Source::File {
        path: paths::text(&iso),
        format: "raw",
    })
}

/// KubeVirt's label of a sysprep ISO (`sysprepVolumeLabel`).
const SYSPREP_LABEL: &str = "unattendCD";
/// The answer files Windows Setup looks for on removable media.
const SYSPREP_ANSWER_FILES: [&str; 2] = ["autounattend.xml", "unattend.xml"];

/// Disk sizes are rounded down to whole MiB, as KubeVirt does for emptyDisks.
pub(super) fn disk_size(capacity: &Quantity, path: &str) -> Result<u64, ConvertError> {
    let bytes = capacity
        .floor()
        .map_err(|err| ConvertError::new(path, err.message))?;
    let aligned = u64::try_from(bytes).unwrap_or(0) / MIB * MIB;
    if aligned == 0 {
        return Err(ConvertError::new(
            path,
            format!("{capacity} is below 1Mi (sizes are rounded down to whole MiB)"),
        ));
    }
    Ok(aligned)
}

pub(super) fn cloud_init(
    vmi: &VirtualMachineInstance,
    ctx: &ConvertContext,
    volume: &str,
    index: usize,
    source: &crate::vmi::CloudInitSource,
    data_source: DataSource,
    plan: &mut DiskPlan,
) -> Result<Source, ConvertError> {
    let kind = match data_source {
        DataSource::NoCloud => "cloudInitNoCloud",
        DataSource::ConfigDrive => "cloudInitConfigDrive",
    };
    let what = what(kind, volume);
    let contents = cloudinit::contents(vmi, ctx, source, data_source, volume, index)?;
    if let IsoContents::FilesWithSecrets { secrets, .. } = &contents
        && let Some(secret) = secrets.first()
    {
        plan.require(
            secret.dir.clone(),
            PathKind::Dir,
            &format!("secret of {what}"),
        );
    }
    // KubeVirt writes only the first cloud-init volume's ISO and points
    // every cloud-init disk at the file of its data source; two disks on
    // one writable file would fight over QEMU's image lock, so each further
    // volume of a data source gets an ISO of its own data.
    let first_of_kind = vmi.spec.volumes.iter().position(|v| match data_source {
        DataSource::NoCloud => v.cloud_init_no_cloud.is_some(),
        DataSource::ConfigDrive => v.cloud_init_config_drive.is_some(),
    }) == Some(index);
    let iso = match (data_source, first_of_kind) {
        (DataSource::NoCloud, true) => paths::no_cloud_iso(ctx),
        (DataSource::ConfigDrive, true) => paths::config_drive_iso(ctx),
        (DataSource::NoCloud, false) => {
            paths::cloud_init_dir(ctx).join(format!("{volume}-noCloud.iso"))
        }
        (DataSource::ConfigDrive, false) => {
            paths::cloud_init_dir(ctx).join(format!("{volume}-configdrive.iso"))
        }
    };
    plan.make_dir(paths::cloud_init_dir(ctx), &what);
    plan.push(DiskStep::WriteIso {
        path: iso.clone(),
        volume_id: data_source.volume_id().to_string(),
        contents,
        what,
    });
    Ok(Source::File {
        path: paths::text(&iso),
        format: "raw",
    })
}

/// configMap / secret / downwardAPI / serviceAccount: an ISO of the mounted
/// directory, labelled `volumeLabel` or "cfgdata" (KubeVirt pkg/config).
pub(super) fn config_iso(
    plan: &mut DiskPlan,
    kind: &str,
    volume: &str,
    source: std::path::PathBuf,
    iso: std::path::PathBuf,
    label: Option<&str>,
) -> Source {
    let what = what(kind, volume);
    plan.require(source.clone(), PathKind::Dir, &what);
    if let Some(dir) = iso.parent() {
        plan.make_dir(dir.to_path_buf(), &what);
    }
    plan.push(DiskStep::WriteIso {
        path: iso.clone(),
        volume_id: label
            .filter(|l| !l.is_empty())
            .unwrap_or("cfgdata")
            .to_string(),
        contents: IsoContents::Dir(source),
        what,
    });
    Source::File {
        path: paths::text(&iso),
        format: "raw",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::super::test_support::{context, convert_err, convert_ok, convert_with};
    use crate::disks::{DiskStep, IsoContents, PathKind};

    #[test]
    fn missing_volume_and_name_errors() {
        let missing = convert_err(
            json!({"domain": {"devices": {"disks": [{"name": "root"}, {"name": "data"}]}},
            "volumes": [{"name": "root", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert_eq!(
            missing,
            "spec.domain.devices.disks[1].name: no volume named \"data\" in spec.volumes; add one (only a cdrom may be empty)"
        );
        let twice = convert_err(
            json!({"volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "a", "emptyDisk": {"capacity": "1Gi"}}]}),
        );
        assert_eq!(twice, "spec.volumes[1].name: volume \"a\" is defined twice");
        let two_sources = convert_err(
            json!({"volumes": [{"name": "a", "emptyDisk": {"capacity": "1Gi"},
            "containerDisk": {"image": "x"}}]}),
        );
        assert_eq!(
            two_sources,
            "spec.volumes[0]: a volume needs exactly one source (found: containerDisk, emptyDisk)"
        );
        let bad_name =
            convert_err(json!({"volumes": [{"name": "../x", "emptyDisk": {"capacity": "1Gi"}}]}));
        assert!(
            bad_name.starts_with("spec.volumes[0].name: \"../x\" is not a valid volume name"),
            "{bad_name}"
        );
        let small =
            convert_err(json!({"volumes": [{"name": "a", "emptyDisk": {"capacity": "100Ki"}}]}));
        assert_eq!(
            small,
            "spec.volumes[0].emptyDisk.capacity: 100Ki is below 1Mi (sizes are rounded down to whole MiB)"
        );
    }

    #[test]
    fn every_cloud_init_volume_gets_its_own_iso() {
        let conversion = convert_ok(json!({"volumes": [
            {"name": "a", "cloudInitNoCloud": {"userData": "x"}},
            {"name": "b", "cloudInitConfigDrive": {"userData": "y"}},
            {"name": "c", "cloudInitNoCloud": {"userData": "z"}}]}));
        let sources: Vec<String> = conversion
            .domain
            .devices
            .disks
            .iter()
            .filter_map(|d| d.source.as_ref().and_then(|s| s.file.clone()))
            .collect();
        let dir = "/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/testvmi";
        assert_eq!(
            sources,
            [
                format!("{dir}/noCloud.iso"),
                format!("{dir}/configdrive.iso"),
                format!("{dir}/c-noCloud.iso")
            ]
        );
        let isos = conversion
            .disk_plan
            .steps
            .iter()
            .filter(|s| matches!(s, DiskStep::WriteIso { .. }))
            .count();
        assert_eq!(isos, 3);
        let twice = convert_err(json!({"volumes": [
            {"name": "a", "serviceAccount": {"serviceAccountName": "x"}},
            {"name": "b", "serviceAccount": {"serviceAccountName": "y"}}]}));
        assert_eq!(
            twice,
            "spec.volumes[1]: only one serviceAccount volume is allowed"
        );
    }

    #[test]
    fn sysprep_is_an_unattend_iso_and_container_path_is_refused() {
        let conversion = convert_ok(json!({"domain": {"devices": {"disks": [
            {"name": "sysprep", "cdrom": {"bus": "sata"}}]}},
            "volumes": [{"name": "sysprep", "sysprep": {"configMap": {"name": "unattend"}}}]}));
        let steps = &conversion.disk_plan.steps;
        assert!(steps.contains(&DiskStep::RequireOneOf {
            dir: "/var/run/kubevirt-private/sysprep/sysprep".into(),
            names: vec!["autounattend.xml".into(), "unattend.xml".into()],
            what: "sysprep volume \"sysprep\"".into(),
        }));
        assert!(steps.contains(&DiskStep::WriteIso {
            path: "/var/run/kubevirt-private/sysprep-disks/sysprep.iso".into(),
            volume_id: "unattendCD".into(),
            contents: IsoContents::Dir("/var/run/kubevirt-private/sysprep/sysprep".into()),
            what: "sysprep volume \"sysprep\"".into(),
        }));
        let both = convert_err(json!({"volumes": [{"name": "s", "sysprep": {
            "configMap": {"name": "a"}, "secret": {"name": "b"}}}]}));
        assert_eq!(
            both,
            "spec.volumes[0].sysprep: set exactly one of configMap or secret"
        );
        let container_path =
            convert_err(json!({"volumes": [{"name": "p", "containerPath": {"path": "/data"}}]}));
        assert!(
            container_path.starts_with(
                "spec.volumes[0]: containerPath volume \"p\" needs a filesystem of the same name"
            ),
            "{container_path}"
        );
    }

    #[test]
    fn a_downward_metrics_volume_is_a_read_only_vhostmd_disk() {
        let conversion = convert_ok(json!({
            "domain": {"devices": {"disks": [{"name": "m", "disk": {"bus": "virtio"}, "cache": "writeback"}]}},
            "volumes": [{"name": "m", "downwardMetrics": {}}]}));
        let disk = &conversion.domain.devices.disks[0];
        let source = disk.source.as_ref().and_then(|s| s.file.as_deref());
        assert_eq!(
            source,
            Some("/var/run/kubevirt-private/downwardapi-disks/vhostmd0")
        );
        assert!(disk.readonly.is_some());
        let driver = disk.driver.clone().unwrap_or_default();
        assert_eq!(
            (
                driver.name.as_deref(),
                driver.format.as_deref(),
                driver.cache,
                driver.discard
            ),
            (Some("qemu"), Some("raw"), None, None)
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::CreateMetricsDisk {
                    path: "/var/run/kubevirt-private/downwardapi-disks/vhostmd0".into(),
                    what: "downwardMetrics volume \"m\"".into(),
                })
        );
    }

    #[test]
    fn a_downward_metrics_volume_needs_one_virtio_disk() {
        let volume = json!([{"name": "m", "downwardMetrics": {}}]);
        // KubeVirt's defaults make it a SATA disk, which its webhook refuses.
        let defaulted = convert_err(json!({"volumes": volume}));
        assert!(
            defaulted.contains("disk.bus") && defaulted.contains("virtio"),
            "{defaulted}"
        );
        let cdrom = convert_err(json!({
            "domain": {"devices": {"disks": [{"name": "m", "cdrom": {"bus": "sata"}}]}},
            "volumes": volume}));
        assert!(cdrom.contains("must be mapped to a disk"), "{cdrom}");
        let two = convert_err(json!({"volumes": [
            {"name": "m", "downwardMetrics": {}}, {"name": "n", "downwardMetrics": {}}]}));
        assert_eq!(
            two,
            "spec.volumes[1]: only one downwardMetrics volume is allowed"
        );
    }

    #[test]
    fn a_memory_dump_volume_is_no_disk() {
        let conversion = convert_ok(json!({"volumes": [
            {"name": "root", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "dump", "memoryDump": {"claimName": "dump-pvc", "hotpluggable": true}}]}));
        let names: Vec<_> = conversion
            .domain
            .devices
            .disks
            .iter()
            .map(|d| d.alias.as_ref().map(|a| a.name.clone()))
            .collect();
        assert_eq!(names, [Some("ua-root".to_string())]);
        let as_disk = convert_err(json!({"domain": {"devices": {"disks": [{"name": "dump"}]}},
            "volumes": [{"name": "dump", "memoryDump": {"claimName": "dump-pvc"}}]}));
        assert_eq!(
            as_disk,
            "spec.domain.devices.disks[0].name: spec.volumes[0] (\"dump\") is a memoryDump volume, which is where a memory dump is written, not a disk"
        );
    }

    #[test]
    fn container_disk_overlay_plan() {
        let conversion = convert_ok(
            json!({"volumes": [{"name": "other", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}}]}),
        );
        let root = &conversion.domain.devices.disks[1];
        assert_eq!(root.disk_type, "file");
        assert_eq!(
            root.driver.as_ref().and_then(|d| d.format.as_deref()),
            Some("qcow2")
        );
        assert_eq!(
            root.source.as_ref().and_then(|s| s.file.as_deref()),
            Some("/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2")
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::CreateOverlay {
                    path: "/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2".into(),
                    backing: "/var/run/kubevirt/container-disks/disk_1.img".into(),
                    backing_format: None,
                    what: "containerDisk volume \"root\"".into(),
                })
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::RequireExisting {
                    path: "/var/run/kubevirt/container-disks/disk_1.img".into(),
                    kind: PathKind::File,
                    what: "containerDisk volume \"root\"".into(),
                })
        );
    }

    #[test]
    fn pvc_file_block_and_ephemeral() {
        let mut ctx = context();
        ctx.block_pvcs.insert("fast".into());
        let spec = json!({"volumes": [
            {"name": "slow", "persistentVolumeClaim": {"claimName": "slow-pvc"}},
            {"name": "fast", "dataVolume": {"name": "fast-dv"}},
            {"name": "scratch", "ephemeral": {"persistentVolumeClaim": {"claimName": "base"}}}]});
        let conversion = convert_with(spec, &ctx).unwrap_or_else(|e| panic!("{e}"));
        let disks = &conversion.domain.devices.disks;
        assert_eq!(
            disks[0].source.as_ref().and_then(|s| s.file.as_deref()),
            Some("/var/run/kubevirt-private/vmi-disks/slow/disk.img")
        );
        assert_eq!(
            (
                disks[1].disk_type.as_str(),
                disks[1].source.as_ref().and_then(|s| s.dev.as_deref())
            ),
            ("block", Some("/dev/fast"))
        );
        let backing = disks[2].backing_store.clone().unwrap_or_default();
        assert_eq!(backing.format.map(|f| f.format).as_deref(), Some("raw"));
        assert_eq!(
            backing.source.and_then(|s| s.file).as_deref(),
            Some("/var/run/kubevirt-private/vmi-disks/scratch/disk.img")
        );
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::RequireExisting {
                    path: "/dev/fast".into(),
                    kind: PathKind::BlockDevice,
                    what: "dataVolume volume \"fast\"".into(),
                })
        );
    }

    #[test]
    fn host_disks() {
        let conversion = convert_ok(json!({"volumes": [
            {"name": "existing", "hostDisk": {"path": "/data/existing.img", "type": "Disk"}},
            {"name": "created", "hostDisk": {"path": "/data/new/created.img", "type": "DiskOrCreate", "capacity": "10.5Gi"}}]}));
        assert!(
            conversion
                .disk_plan
                .steps
                .contains(&DiskStep::CreateSparseFile {
                    path: "/data/new/created.img".into(),
                    size: 10_737_418_240 + (512 << 20),
                    what: "hostDisk volume \"created\"".into(),
                })
        );
        let relative = convert_err(
            json!({"volumes": [{"name": "h", "hostDisk": {"path": "disk.img", "type": "Disk"}}]}),
        );
        assert_eq!(
            relative,
            "spec.volumes[0].hostDisk.path: \"disk.img\" is not an absolute file path"
        );
        let no_capacity = convert_err(
            json!({"volumes": [{"name": "h", "hostDisk": {"path": "/d.img", "type": "DiskOrCreate"}}]}),
        );
        assert_eq!(
            no_capacity,
            "spec.volumes[0].hostDisk.capacity: capacity is required with type DiskOrCreate"
        );
    }

    #[test]
    fn changed_block_tracking_puts_a_raw_image_under_qcow2_metadata() {
        let conversion = convert_ok(json!({
            "domain": {"devices": {"disks": [
                {"name": "raw", "changedBlockTracking": true},
                {"name": "empty", "changedBlockTracking": true},
                {"name": "plain"}]}},
            "volumes": [
                {"name": "raw", "hostDisk": {"path": "/data/raw.img", "type": "Disk"}},
                {"name": "empty", "emptyDisk": {"capacity": "1Gi"}},
                {"name": "plain", "hostDisk": {"path": "/data/plain.img", "type": "Disk"}}]}));
        let overlay = "/var/run/kubevirt-private/libvirt/qemu/cbt/raw.qcow2";
        assert!(conversion.disk_plan.steps.iter().any(|step| matches!(step,
            DiskStep::CreateDataFileOverlay { path, data_file, .. }
                if path.to_str() == Some(overlay) && data_file.to_str().is_some_and(|d| d.ends_with("raw.img")))));
        let disks = &conversion.domain.devices.disks;
        let source = |i: usize| disks[i].source.as_ref().and_then(|s| s.file.clone());
        let format = |i: usize| disks[i].driver.as_ref().and_then(|d| d.format.clone());
        assert_eq!(source(0).as_deref(), Some(overlay));
        assert_eq!(format(0).as_deref(), Some("qcow2"));
        // A qcow2 image carries the bitmaps itself; a disk without the flag
        // keeps its raw image.
        assert!(source(1).is_some_and(|s| s.ends_with(".qcow2")));
        assert_eq!(format(2).as_deref(), Some("raw"));
        assert!(source(2).is_some_and(|s| s.ends_with("plain.img")));
    }

    #[test]
    fn changed_block_tracking_of_a_block_device_is_its_data_store_from_libvirt_10_10() {
        let vmi = json!({"domain": {"devices": {"disks": [{"name": "fast", "changedBlockTracking": true}]}},
            "volumes": [{"name": "fast", "persistentVolumeClaim": {"claimName": "fast"}}]});
        let mut ctx = context();
        ctx.block_pvcs.insert("fast".to_string());
        ctx.libvirt_version = Some(crate::convert::libvirt_version(10, 9, 0));
        let err = convert_with(vmi.clone(), &ctx).unwrap_err().to_string();
        assert_eq!(
            err,
            "spec.domain.devices.disks[0].changedBlockTracking: changed block tracking of a block device needs libvirt 10.10.0 or newer (a disk's <dataStore>, naming the device under its qcow2 metadata image); this launcher's libvirt is 10.9.0"
        );

        ctx.libvirt_version = Some(crate::convert::libvirt_version(10, 10, 0));
        let conversion = convert_with(vmi, &ctx).unwrap();
        let overlay = "/var/run/kubevirt-private/libvirt/qemu/cbt/fast.qcow2";
        assert!(conversion.disk_plan.steps.iter().any(|step| matches!(step,
            DiskStep::CreateDataFileOverlay { path, data_file, .. }
                if path.to_str() == Some(overlay) && data_file.to_str() == Some("/dev/fast"))));
        let disk = &conversion.domain.devices.disks[0];
        assert_eq!(disk.disk_type, "file");
        assert_eq!(
            disk.driver.as_ref().and_then(|d| d.format.as_deref()),
            Some("qcow2")
        );
        let xml = conversion.domain.to_xml().unwrap();
        let compact: String = xml.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            compact.contains(
                r#"<source file="/var/run/kubevirt-private/libvirt/qemu/cbt/fast.qcow2"> <dataStore type="block"> <format type="raw"/> <source dev="/dev/fast"/> </dataStore> </source>"#
            ),
            "{xml}"
        );
        // libvirt's live XML reads back the same.
        let read = crate::domxml::Domain::from_xml(&xml).unwrap();
        assert_eq!(read.devices.disks[0].source, disk.source);
    }

    #[test]
    fn config_volumes_become_isos_of_their_mounts() {
        let conversion = convert_ok(json!({"volumes": [
            {"name": "app", "configMap": {"name": "app-config", "volumeLabel": "OEMDRV"}},
            {"name": "creds", "secret": {"secretName": "creds"}},
            {"name": "info", "downwardAPI": {"fields": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}}]}));
        let isos: Vec<(String, String, IsoContents)> = conversion
            .disk_plan
            .steps
            .into_iter()
            .filter_map(|s| match s {
                DiskStep::WriteIso {
                    path,
                    volume_id,
                    contents,
                    ..
                } => Some((path.to_string_lossy().into_owned(), volume_id, contents)),
                _ => None,
            })
            .collect();
        assert_eq!(
            isos,
            [
                (
                    "/var/run/kubevirt-private/config-map-disks/app.iso",
                    "OEMDRV",
                    "/var/run/kubevirt-private/config-map/app"
                ),
                (
                    "/var/run/kubevirt-private/secret-disks/creds.iso",
                    "cfgdata",
                    "/var/run/kubevirt-private/secret/creds"
                ),
                (
                    "/var/run/kubevirt-private/downwardapi-disks/info.iso",
                    "cfgdata",
                    "/var/run/kubevirt-private/downwardapi/info"
                ),
                (
                    "/var/run/kubevirt-private/service-account-disk/service-account.iso",
                    "cfgdata",
                    "/var/run/secrets/kubernetes.io/serviceaccount"
                ),
            ]
            .map(|(iso, label, dir)| (
                iso.to_string(),
                label.to_string(),
                IsoContents::Dir(dir.into())
            ))
        );
    }

    #[test]
    fn host_disks_follow_kubevirts_mount_first() {
        let spec = json!({"volumes": [{"name": "h", "hostDisk": {"path": "/data/h.img", "type": "Disk"}}]});
        let mount = "/var/run/kubevirt-private/vmi-disks/h/h.img";
        let source = |conversion: &crate::convert::Conversion| {
            conversion.domain.devices.disks[0]
                .source
                .as_ref()
                .and_then(|s| s.file.clone())
                .unwrap_or_default()
        };
        // Neither exists: the mount path is required (and named).
        let none = convert_ok(spec.clone());
        assert_eq!(source(&none), mount);
        assert!(none.disk_plan.steps.contains(&DiskStep::RequireExisting {
            path: mount.into(),
            kind: PathKind::File,
            what: "hostDisk volume \"h\" (neither it nor /data/h.img exists)".into(),
        }));
        // Only the host path exists: the standalone convenience.
        let mut ctx = context();
        ctx.present_paths.insert("/data/h.img".into());
        let host = convert_with(spec.clone(), &ctx).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(source(&host), "/data/h.img");
        // Both: KubeVirt's mount wins.
        ctx.present_paths.insert(mount.into());
        let both = convert_with(spec, &ctx).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(source(&both), mount);
        // DiskOrCreate in a present mount directory creates the file there.
        let mut mounted = context();
        mounted
            .present_paths
            .insert("/var/run/kubevirt-private/vmi-disks/n".into());
        let created = convert_with(
            json!({"volumes": [{"name": "n", "hostDisk": {"path": "/data/n.img", "type": "DiskOrCreate", "capacity": "1Gi"}}]}),
            &mounted,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            created
                .disk_plan
                .steps
                .contains(&DiskStep::CreateSparseFile {
                    path: "/var/run/kubevirt-private/vmi-disks/n/n.img".into(),
                    size: 1 << 30,
                    what: "hostDisk volume \"n\"".into(),
                })
        );
    }
}
