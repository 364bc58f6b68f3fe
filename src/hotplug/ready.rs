//! Whether what a step plugs in is there: a hotplugged volume's image (the
//! handler mounts it into the hotplug directory) and a host device's node
//! in sysfs. Checked for every step before the first one runs, so a
//! missing image or device changes nothing.
//!
//! KubeVirt's handler creates `<hotplug-disk-dir>/<volume>.img` (a file it
//! bind-mounts the PVC's disk image onto) or `<hotplug-disk-dir>/<volume>`
//! (a block device node) in the launcher's pod; the launcher opens a file
//! image for writing, a block device for reading, as KubeVirt's
//! `checkIfDiskReadyToUse` does.

use std::fs::OpenOptions;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use super::plan::{ImageKind, Step};

/// Why a step cannot run yet, naming the path that is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    pub message: String,
}

/// Where host devices appear (a test can point elsewhere).
pub struct HostPaths<'a> {
    /// `/sys/bus/pci/devices`.
    pub pci: &'a Path,
    /// `/sys/bus/mdev/devices`.
    pub mdev: &'a Path,
    /// `/dev/bus/usb`: `<bus>/<device>`, three digits each.
    pub usb: &'a Path,
}

impl HostPaths<'static> {
    pub fn system() -> HostPaths<'static> {
        HostPaths {
            pci: Path::new("/sys/bus/pci/devices"),
            mdev: Path::new("/sys/bus/mdev/devices"),
            usb: Path::new("/dev/bus/usb"),
        }
    }
}

/// Checks every step; `host` is `None` when the driver does not use the
/// host's devices (libvirt's test driver).
pub fn check(steps: &[Step], host: Option<&HostPaths>) -> Result<(), NotReady> {
    for step in steps {
        match step {
            Step::AttachDisk {
                volume,
                image,
                kind,
                ..
            } => image_ready(volume, Path::new(image), kind)?,
            Step::AttachHostDevice {
                name,
                host_address,
                host_type,
                ..
            } => {
                if let Some(host) = host {
                    host_device_present(name, host_address, host_type, host)?
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks that the host devices a domain starts with are on this host, so
/// that a missing one is named before QEMU fails on it.
pub fn host_devices_present(
    hostdevs: &[crate::domxml::HostDev],
    host: &HostPaths,
) -> Result<(), NotReady> {
    for dev in hostdevs {
        let name = dev.vmi_name();
        let address = dev.host_address();
        host_device_present(&name, &address, &dev.hostdev_type, host)?;
    }
    Ok(())
}

fn image_ready(volume: &str, image: &Path, kind: &ImageKind) -> Result<(), NotReady> {
    let not_ready = |what: String| NotReady {
        message: format!(
            "volume {volume:?}: {what}; the hotplugged volume's image must be mounted there before sync attaches it"
        ),
    };
    let meta = std::fs::metadata(image)
        .map_err(|e| not_ready(format!("image {} is not usable: {e}", image.display())))?;
    let opened = match kind {
        ImageKind::File => {
            if !meta.is_file() {
                return Err(not_ready(format!(
                    "image {} is not a regular file",
                    image.display()
                )));
            }
            if meta.len() == 0 {
                // The handler creates an empty file and mounts the image
                // onto it: an empty file is not mounted yet.
                return Err(not_ready(format!(
                    "image {} is empty (not mounted yet)",
                    image.display()
                )));
            }
            OpenOptions::new().read(true).write(true).open(image)
        }
        ImageKind::Block => {
            if !meta.file_type().is_block_device() {
                return Err(not_ready(format!(
                    "{} is not a block device",
                    image.display()
                )));
            }
            OpenOptions::new().read(true).open(image)
        }
    };
    opened
        .map(drop)
        .map_err(|e| not_ready(format!("image {} cannot be opened: {e}", image.display())))
}

fn host_device_present(
    name: &str,
    address: &str,
    host_type: &str,
    host: &HostPaths,
) -> Result<(), NotReady> {
    let node = match host_type {
        "mdev" => host.mdev.join(address),
        "usb" => host.usb.join(address.replace(':', "/")),
        _ => host.pci.join(address),
    };
    let what = match host_type {
        "mdev" => "mediated device",
        "usb" => "USB device",
        _ => "PCI device",
    };
    match std::fs::metadata(&node) {
        Ok(_) => Ok(()),
        Err(e) => Err(NotReady {
            message: format!(
                "host device {name:?}: {what} {address} is not on this host ({}: {e})",
                node.display()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;

    fn attach(image: &Path, kind: ImageKind) -> Step {
        Step::AttachDisk {
            volume: "hp1".into(),
            alias: "ua-hp1".into(),
            target: "sda".into(),
            bus: "scsi".into(),
            image: image.display().to_string(),
            kind,
            xml: String::new(),
        }
    }

    fn temp_dir(tag: &str) -> ScratchDir {
        ScratchDir::new(&format!("ready-{tag}"))
    }

    #[test]
    fn a_file_image_must_exist_be_mounted_and_open_for_writing() {
        let dir = temp_dir("file");
        let image = dir.join("hp1.img");
        let err = check(&[attach(&image, ImageKind::File)], None).unwrap_err();
        assert!(
            err.message.starts_with("volume \"hp1\": image "),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("hp1.img is not usable: No such file"),
            "{}",
            err.message
        );
        std::fs::write(&image, b"").unwrap();
        let err = check(&[attach(&image, ImageKind::File)], None).unwrap_err();
        assert!(
            err.message.contains("is empty (not mounted yet)"),
            "{}",
            err.message
        );
        std::fs::write(&image, vec![0u8; 4096]).unwrap();
        assert_eq!(check(&[attach(&image, ImageKind::File)], None), Ok(()));
        let err = check(&[attach(&image, ImageKind::Block)], None).unwrap_err();
        assert!(
            err.message.contains("is not a block device"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_host_device_must_be_in_sysfs_when_the_driver_uses_the_host() {
        let dir = temp_dir("host");
        std::fs::create_dir_all(dir.join("0000:81:00.1")).unwrap();
        std::fs::create_dir_all(dir.join("usb/001")).unwrap();
        std::fs::write(dir.join("usb/001/005"), "").unwrap();
        let usb = dir.join("usb");
        let host = HostPaths {
            pci: &dir,
            mdev: &dir,
            usb: &usb,
        };
        let step = |address: &str| Step::AttachHostDevice {
            name: "gpu-gpu1".into(),
            alias: "ua-gpu-gpu1".into(),
            host_address: address.into(),
            host_type: "pci".into(),
            xml: String::new(),
        };
        assert_eq!(check(&[step("0000:81:00.1")], Some(&host)), Ok(()));
        let err = check(&[step("0000:ff:1f.7")], Some(&host)).unwrap_err();
        assert!(
            err.message.starts_with(
                "host device \"gpu-gpu1\": PCI device 0000:ff:1f.7 is not on this host ("
            ),
            "{}",
            err.message
        );
        // The test driver touches no host device.
        assert_eq!(check(&[step("0000:ff:1f.7")], None), Ok(()));
        // A USB device is its node under /dev/bus/usb.
        let usb_step = |address: &str| Step::AttachHostDevice {
            name: "usb-host-stick".into(),
            alias: "ua-usb-host-stick".into(),
            host_address: address.into(),
            host_type: "usb".into(),
            xml: String::new(),
        };
        assert_eq!(check(&[usb_step("001:005")], Some(&host)), Ok(()));
        let err = check(&[usb_step("002:007")], Some(&host)).unwrap_err();
        assert!(
            err.message.starts_with(&format!(
                "host device \"usb-host-stick\": USB device 002:007 is not on this host ({}/002/007: ",
                usb.display()
            )),
            "{}",
            err.message
        );
    }
}
