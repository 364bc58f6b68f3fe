//! Facts about the host the caller gathers before [`super::convert`], which
//! itself never touches the filesystem.

use std::collections::BTreeSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::OvmfPaths;
use crate::vmi::VirtualMachineInstance;

/// Where OVMF is looked for without --ovmf-path: KubeVirt's default
/// (Fedora/RHEL), then Debian/Ubuntu, Arch, QEMU's own.
const OVMF_DIRS: [&str; 4] = [
    "/usr/share/edk2/ovmf",
    "/usr/share/OVMF",
    "/usr/share/edk2/x64",
    "/usr/share/qemu",
];

/// (code, vars) file names, best first. Secure Boot builds pair a code file
/// with SMM and a vars template with Microsoft's keys enrolled.
const PLAIN_BUILDS: [(&str, &str); 3] = [
    ("OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd"),
    ("OVMF_CODE.fd", "OVMF_VARS.fd"),
    ("OVMF_CODE.4m.fd", "OVMF_VARS.4m.fd"),
];
const SECURE_BUILDS: [(&str, &str); 4] = [
    ("OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd"),
    ("OVMF_CODE_4M.ms.fd", "OVMF_VARS_4M.ms.fd"),
    ("OVMF_CODE.secboot.fd", "OVMF_VARS.secboot.fd"),
    ("OVMF_CODE.secboot.fd", "OVMF_VARS.ms.fd"),
];

/// Finds OVMF in the standard locations.
pub fn detect_ovmf() -> Option<OvmfPaths> {
    let dirs: Vec<PathBuf> = OVMF_DIRS.iter().map(PathBuf::from).collect();
    detect_ovmf_in(&dirs)
}

/// Finds OVMF in `dirs` (first directory with a usable non-secure build wins).
pub fn detect_ovmf_in(dirs: &[PathBuf]) -> Option<OvmfPaths> {
    dirs.iter().find_map(|dir| {
        let (code, vars) = first_pair(dir, &PLAIN_BUILDS)?;
        let secure = first_pair(dir, &SECURE_BUILDS);
        Some(OvmfPaths {
            code,
            vars,
            secure_code: secure.as_ref().map(|(code, _)| code.clone()),
            secure_vars: secure.map(|(_, vars)| vars),
        })
    })
}

fn first_pair(dir: &Path, builds: &[(&str, &str)]) -> Option<(PathBuf, PathBuf)> {
    builds.iter().find_map(|(code, vars)| {
        let (code, vars) = (dir.join(code), dir.join(vars));
        (code.is_file() && vars.is_file()).then_some((code, vars))
    })
}

/// Names of the VMI's claim volumes (persistentVolumeClaim, dataVolume,
/// ephemeral) that are block devices, as KubeVirt's virt-handler reports
/// them (`IsBlockPVC`): at `<dev_dir>/<volume>`, or for a hotpluggable
/// volume at `<hotplug_dir>/<volume>` (`isHotplugBlockDeviceVolume`).
pub fn detect_block_pvcs(
    vmi: &VirtualMachineInstance,
    dev_dir: &Path,
    hotplug_dir: &Path,
) -> BTreeSet<String> {
    vmi.spec
        .volumes
        .iter()
        .filter(|v| {
            v.persistent_volume_claim.is_some() || v.data_volume.is_some() || v.ephemeral.is_some()
        })
        .filter(|v| !v.name.contains('/') && v.name != ".." && !v.name.is_empty())
        .filter(|v| {
            let dir = if is_hotpluggable(v) {
                hotplug_dir
            } else {
                dev_dir
            };
            std::fs::metadata(dir.join(&v.name))
                .is_ok_and(|meta| meta.file_type().is_block_device())
        })
        .map(|v| v.name.clone())
        .collect()
}

/// A volume virt-handler mounts into the running pod (`hotpluggable: true`).
pub(crate) fn is_hotpluggable(volume: &crate::vmi::Volume) -> bool {
    volume
        .persistent_volume_claim
        .as_ref()
        .is_some_and(|p| p.hotpluggable)
        || volume.data_volume.as_ref().is_some_and(|d| d.hotpluggable)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use serde_json::json;

    use super::super::test_support::vmi_with;
    use super::*;
    use crate::scratch::ScratchDir;

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new(&format!("detect-{name}"))
    }

    fn touch(path: PathBuf) {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        fs::write(path, b"x").unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn ovmf_prefers_4m_and_finds_secure_builds() {
        let dir = scratch("ovmf");
        touch(dir.join("OVMF_CODE.fd"));
        touch(dir.join("OVMF_VARS.fd"));
        touch(dir.join("OVMF_CODE_4M.fd"));
        touch(dir.join("OVMF_VARS_4M.fd"));
        touch(dir.join("OVMF_CODE_4M.secboot.fd"));
        touch(dir.join("OVMF_VARS_4M.ms.fd"));
        let found = detect_ovmf_in(&[dir.join("missing"), dir.to_path_buf()])
            .unwrap_or_else(|| panic!("not found"));
        assert_eq!(found.code, dir.join("OVMF_CODE_4M.fd"));
        assert_eq!(found.secure_code, Some(dir.join("OVMF_CODE_4M.secboot.fd")));
        assert_eq!(found.secure_vars, Some(dir.join("OVMF_VARS_4M.ms.fd")));
        assert_eq!(detect_ovmf_in(&[dir.join("missing")]), None);
    }

    #[test]
    fn block_pvcs_need_a_block_device() {
        let dir = scratch("dev");
        touch(dir.join("data"));
        let vmi = vmi_with(
            json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]}),
        );
        assert!(detect_block_pvcs(&vmi, &dir, &dir).is_empty());
        // /dev/loop0 exists as a block device on Linux hosts.
        let vmi = vmi_with(
            json!({"volumes": [{"name": "loop0", "persistentVolumeClaim": {"claimName": "c"}}]}),
        );
        let found = detect_block_pvcs(&vmi, Path::new("/dev"), Path::new("/nonexistent"));
        let loop_is_block =
            fs::metadata("/dev/loop0").is_ok_and(|m| m.file_type().is_block_device());
        assert_eq!(found.contains("loop0"), loop_is_block);
    }
}
