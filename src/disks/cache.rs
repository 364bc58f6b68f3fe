//! The disks' cache and I/O modes, chosen as KubeVirt's launcher chooses them
//! once the images exist (`SetDriverCacheMode` and `SetOptimalIOMode`, run by
//! its `preStartHook`): a disk whose cache the VMI leaves unset gets
//! `cache="none"` where its image's file system takes `O_DIRECT`, and
//! `writethrough` where it does not; a disk that asks for `none` (or needs it:
//! shareable, `io: native`) on such a file system is refused. With cache
//! `none`, a block device or a preallocated image whose I/O mode is unset gets
//! `io="native"`. Run by the sync job after `prepare`, never by the manager.

use std::path::Path;

use super::{DiskPlan, DiskStep};
use crate::domxml::{Disk, Domain};

/// What the choice needs to know of an image.
pub trait ImageProbe {
    /// Whether the file system under `path` takes `O_DIRECT` (false when
    /// that cannot be told, as KubeVirt's launcher takes it).
    fn direct_io(&mut self, path: &Path, block: bool) -> bool;
    /// Whether the image at `path` (of `format`) has all its virtual size
    /// allocated (KubeVirt: `qemu-img info`'s virtual size <= actual size).
    fn preallocated(&mut self, path: &Path, format: &str) -> bool;
}

/// The images on this host.
pub struct HostProbe;

impl ImageProbe for HostProbe {
    fn direct_io(&mut self, path: &Path, block: bool) -> bool {
        match crate::os::supports_direct_io(path, !block) {
            Ok(true) => true,
            Ok(false) => {
                log::info!(
                    "{}: its file system does not support direct I/O",
                    path.display()
                );
                false
            }
            Err(e) => {
                log::warn!("{}: the direct I/O check failed: {e}", path.display());
                false
            }
        }
    }

    fn preallocated(&mut self, path: &Path, format: &str) -> bool {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let Ok(mut file) = std::fs::File::open(path) else {
            return false;
        };
        let Ok(meta) = file.metadata() else {
            return false;
        };
        let virtual_size = if format == "qcow2" {
            // The header's size field (big-endian, at byte 24).
            let mut header = [0u8; 32];
            if file.read_exact(&mut header).is_err() || header[..4] != *b"QFI\xfb" {
                return false;
            }
            let mut size = [0u8; 8];
            size.copy_from_slice(&header[24..32]);
            u64::from_be_bytes(size)
        } else {
            meta.len()
        };
        virtual_size <= meta.blocks().saturating_mul(512)
    }
}

/// Sets each disk's cache and I/O mode. `plan` tells the cloud-init ISOs,
/// which KubeVirt's launcher writes only after the domain is defined (so
/// its probe finds no image there and never asks `io="native"` for them).
/// Errs, naming the disk, on cache `none` where `O_DIRECT` does not work.
pub fn set_cache_modes(
    domain: &mut Domain,
    plan: &DiskPlan,
    probe: &mut dyn ImageProbe,
) -> Result<(), String> {
    for disk in &mut domain.devices.disks {
        let late = |path: &Path| {
            plan.steps.iter().any(|step| {
                matches!(step, DiskStep::WriteIso { path: p, what, .. }
                    if p == path && what.starts_with("cloudInit"))
            })
        };
        set_cache_mode(disk, &late, probe)?;
    }
    Ok(())
}

fn set_cache_mode(
    disk: &mut Disk,
    late: &dyn Fn(&Path) -> bool,
    probe: &mut dyn ImageProbe,
) -> Result<(), String> {
    let source = disk.source.as_ref();
    let (path, block) = match (
        source.and_then(|s| s.dev.as_deref()),
        source.and_then(|s| s.file.as_deref()),
    ) {
        (_, Some(file)) => (Path::new(file), false),
        (Some(dev), None) => (Path::new(dev), true),
        // An empty CD-ROM (or a source that is no local image): nothing to probe.
        (None, None) => return Ok(()),
    };
    let backing = disk
        .backing_store
        .as_ref()
        .and_then(|b| b.source.as_ref()?.file.as_deref());
    let driver = disk.driver.get_or_insert_with(Default::default);
    let direct_io = match driver.cache.as_deref() {
        None | Some("none") => {
            probe.direct_io(path, block)
                && backing.is_none_or(|b| probe.direct_io(Path::new(b), false))
        }
        Some(_) => true,
    };
    match driver.cache.as_deref() {
        Some("none") if !direct_io => {
            let name = disk
                .alias
                .as_ref()
                .map_or(disk.target.dev.as_str(), |a| a.name.as_str());
            let name = name.strip_prefix("ua-").unwrap_or(name);
            return Err(format!(
                "disk {name:?} cannot use cache none: the file system where {} is stored does not support direct I/O (O_DIRECT)",
                path.display()
            ));
        }
        None => {
            driver.cache = Some(if direct_io { "none" } else { "writethrough" }.to_string());
        }
        _ => {}
    }
    if driver.io.is_none()
        && driver.cache.as_deref() == Some("none")
        && (block
            || (!late(path) && probe.preallocated(path, driver.format.as_deref().unwrap_or("raw"))))
    {
        driver.io = Some("native".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domxml::{Alias, BackingStore, DiskDriver, DiskSource, DiskTarget};
    use std::path::PathBuf;

    /// O_DIRECT works everywhere but under `/tmpfs`; the images under
    /// `/full` are preallocated.
    struct Model(Vec<PathBuf>);

    impl ImageProbe for Model {
        fn direct_io(&mut self, path: &Path, _block: bool) -> bool {
            self.0.push(path.to_path_buf());
            !path.starts_with("/tmpfs")
        }
        fn preallocated(&mut self, path: &Path, _format: &str) -> bool {
            path.starts_with("/full")
        }
    }

    fn disk(file: Option<&str>, dev: Option<&str>, cache: Option<&str>, io: Option<&str>) -> Disk {
        Disk {
            disk_type: if dev.is_some() { "block" } else { "file" }.into(),
            device: Some("disk".into()),
            model: None,
            driver: Some(DiskDriver {
                name: Some("qemu".into()),
                format: Some("raw".into()),
                cache: cache.map(Into::into),
                io: io.map(Into::into),
                ..Default::default()
            }),
            source: Some(DiskSource {
                file: file.map(Into::into),
                dev: dev.map(Into::into),
                ..Default::default()
            }),
            backing_store: None,
            target: DiskTarget {
                dev: "vda".into(),
                bus: Some("virtio".into()),
                tray: None,
            },
            serial: None,
            boot: None,
            readonly: None,
            shareable: None,
            blockio: None,
            alias: Some(Alias {
                name: "ua-root".into(),
            }),
            address: None,
        }
    }

    fn modes(disk: Disk) -> Result<(Option<String>, Option<String>), String> {
        let mut domain = Domain::default();
        domain.devices.disks.push(disk);
        set_cache_modes(&mut domain, &DiskPlan::default(), &mut Model(Vec::new()))?;
        let driver = domain.devices.disks[0].driver.clone().unwrap_or_default();
        Ok((driver.cache, driver.io))
    }

    fn pair(cache: &str, io: Option<&str>) -> Result<(Option<String>, Option<String>), String> {
        Ok((Some(cache.to_string()), io.map(str::to_string)))
    }

    #[test]
    fn the_vmis_cache_wins() {
        for cache in ["writeback", "writethrough", "unsafe", "directsync"] {
            for dir in ["/disk", "/tmpfs", "/full"] {
                let file = format!("{dir}/disk.img");
                assert_eq!(
                    modes(disk(Some(&file), None, Some(cache), None)),
                    pair(cache, None)
                );
            }
        }
        // The VMI's I/O mode too.
        assert_eq!(
            modes(disk(None, Some("/dev/sdb"), None, Some("threads"))),
            pair("none", Some("threads"))
        );
    }

    #[test]
    fn direct_io_gives_cache_none_and_native_io_on_block_devices_and_preallocated_images() {
        assert_eq!(
            modes(disk(Some("/disk/disk.img"), None, None, None)),
            pair("none", None)
        );
        assert_eq!(
            modes(disk(Some("/full/disk.img"), None, None, None)),
            pair("none", Some("native"))
        );
        assert_eq!(
            modes(disk(None, Some("/dev/sdb"), None, None)),
            pair("none", Some("native"))
        );
        assert_eq!(
            modes(disk(Some("/full/disk.img"), None, Some("none"), None)),
            pair("none", Some("native"))
        );
    }

    #[test]
    fn no_direct_io_gives_writethrough() {
        assert_eq!(
            modes(disk(Some("/tmpfs/disk.img"), None, None, None)),
            pair("writethrough", None)
        );
        // A backing file on such a file system decides as much as the image.
        let mut overlay = disk(Some("/disk/disk.qcow2"), None, None, None);
        overlay.backing_store = Some(BackingStore {
            source: Some(DiskSource {
                file: Some("/tmpfs/base.img".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(modes(overlay), pair("writethrough", None));
    }

    #[test]
    fn cache_none_without_direct_io_is_refused_naming_the_disk() {
        let err = modes(disk(Some("/tmpfs/disk.img"), None, Some("none"), None)).unwrap_err();
        assert_eq!(
            err,
            "disk \"root\" cannot use cache none: the file system where /tmpfs/disk.img is stored does not support direct I/O (O_DIRECT)"
        );
    }

    #[test]
    fn cloud_init_isos_get_no_native_io_and_empty_cdroms_are_left_alone() {
        let mut domain = Domain::default();
        domain
            .devices
            .disks
            .push(disk(Some("/full/noCloud.iso"), None, None, None));
        domain
            .devices
            .disks
            .push(disk(Some("/full/cfg.iso"), None, None, None));
        domain.devices.disks.push(disk(None, None, None, None));
        let mut plan = DiskPlan::default();
        for (path, what) in [
            ("/full/noCloud.iso", "cloudInitNoCloud volume \"ci\""),
            ("/full/cfg.iso", "configMap volume \"cfg\""),
        ] {
            plan.push(DiskStep::WriteIso {
                path: path.into(),
                volume_id: "x".into(),
                contents: super::super::IsoContents::Files(Vec::new()),
                size: None,
                what: what.into(),
            });
        }
        let mut probe = Model(Vec::new());
        set_cache_modes(&mut domain, &plan, &mut probe).unwrap();
        let driver = |i: usize| domain.devices.disks[i].driver.clone().unwrap_or_default();
        assert_eq!(
            (driver(0).cache.as_deref(), driver(0).io.as_deref()),
            (Some("none"), None)
        );
        assert_eq!(
            (driver(1).cache.as_deref(), driver(1).io.as_deref()),
            (Some("none"), Some("native"))
        );
        assert_eq!((driver(2).cache, driver(2).io), (None, None));
        assert_eq!(probe.0.len(), 2, "{:?}", probe.0);
    }

    #[test]
    fn the_host_probe_opens_an_image_with_o_direct_and_reads_its_allocation() {
        let dir = crate::scratch::ScratchDir::new("cache");
        let image = dir.join("disk.img");
        let mut probe = HostProbe;
        // A missing image is created for the check and removed again.
        let direct = probe.direct_io(&image, false);
        assert!(!image.exists());
        std::fs::write(&image, vec![1u8; 8192]).unwrap();
        assert_eq!(probe.direct_io(&image, false), direct);
        assert!(probe.preallocated(&image, "raw"));
        std::fs::File::options()
            .write(true)
            .open(&image)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        assert!(!probe.preallocated(&image, "raw"));
        assert!(!probe.preallocated(&image, "qcow2"), "no qcow2 header");
    }
}
