//! The directories KubeVirt's launcher creates at start-up, with its modes.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::Config;

#[derive(Debug)]
pub struct DirError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl fmt::Display for DirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot create directory {}: {} (check the path and the launcher's permissions, or point the matching --*-dir flag elsewhere)",
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for DirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Every directory with its mode, in creation order.
pub fn layout(config: &Config) -> Vec<(PathBuf, u32)> {
    let d = &config.dirs;
    let mut out = vec![
        (d.ephemeral.join("cloud-init-data"), 0o755),
        (d.ephemeral.join("ignition-data"), 0o755),
        (d.ephemeral.join("disk-data"), 0o755),
        (d.container_disks.clone(), 0o750),
        (d.hotplug_disks.clone(), 0o755),
    ];
    for private in [
        "vm-disks",
        "config-map-disks",
        "secret-disks",
        "downwardapi-disks",
        "service-account-disk",
        "sysprep-disks",
        "downwardmetrics-channel",
    ] {
        out.push((d.private.join(private), 0o750));
    }
    out.push((d.private.join(&config.uid), 0o755));
    out
}

/// Creates the directories (and their parents) and sets their modes; an
/// existing directory just gets its mode set. A symlink where one of them
/// belongs is refused.
pub fn prepare(config: &Config) -> Result<(), DirError> {
    for (path, mode) in layout(config) {
        create(&path, mode).map_err(|source| DirError {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Creates the directory (parents too, each with `mode`) and sets its mode
/// exactly, never following a symlink planted in its place (whose target's
/// mode would otherwise be changed).
fn create(path: &Path, mode: u32) -> io::Result<()> {
    crate::safe_fs::ensure_dir(path, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Action, parse};
    use crate::scratch::ScratchDir;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn config(root: &Path) -> Config {
        let r = |s: &str| root.join(s).to_string_lossy().into_owned();
        let argv = [
            "--name".to_string(),
            "vm".into(),
            "--namespace".into(),
            "ns".into(),
            "--uid".into(),
            "uid-1".into(),
            "--kubevirt-share-dir".into(),
            r("share"),
            "--private-dir".into(),
            r("private"),
            "--ephemeral-disk-dir".into(),
            r("ephemeral"),
            "--container-disk-dir".into(),
            r("share/container-disks"),
            "--hotplug-disk-dir".into(),
            r("share/hotplug-disks"),
        ];
        match parse(argv) {
            Ok(Action::Run(a)) => Config::resolve(*a).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn creates_kubevirt_layout_with_modes() {
        let root = ScratchDir::new("dirs");
        let cfg = config(&root);
        prepare(&cfg).unwrap();
        // Idempotent.
        prepare(&cfg).unwrap();
        let mode = |p: &str| fs::metadata(root.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("ephemeral/cloud-init-data"), 0o755);
        assert_eq!(mode("ephemeral/ignition-data"), 0o755);
        assert_eq!(mode("ephemeral/disk-data"), 0o755);
        assert_eq!(mode("share/container-disks"), 0o750);
        assert_eq!(mode("share/hotplug-disks"), 0o755);
        for d in [
            "vm-disks",
            "config-map-disks",
            "secret-disks",
            "downwardapi-disks",
            "service-account-disk",
            "sysprep-disks",
            "downwardmetrics-channel",
        ] {
            assert_eq!(mode(&format!("private/{d}")), 0o750, "{d}");
        }
        assert_eq!(mode("private/uid-1"), 0o755);
    }

    #[test]
    fn failure_names_the_path() {
        let root = ScratchDir::new("dirs-fail");
        // A file where a directory must go.
        fs::write(root.join("ephemeral"), b"x").unwrap();
        let err = prepare(&config(&root)).unwrap_err();
        assert!(
            err.to_string()
                .contains(&root.join("ephemeral").display().to_string())
        );
    }

    #[test]
    fn a_symlink_in_place_of_a_directory_is_refused_and_its_target_untouched() {
        let root = ScratchDir::new("dirs-link");
        fs::create_dir_all(root.join("private")).unwrap();
        let target = root.join("elsewhere");
        fs::create_dir(&target).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&target, root.join("private/vm-disks")).unwrap();
        let err = prepare(&config(&root)).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "the link's target was chmodded");
    }

    #[test]
    fn modes_do_not_come_from_the_umask() {
        // Every directory gets exactly its mode whatever the umask allowed:
        // pre-create them wide open, as a umask of 000 would.
        let root = ScratchDir::new("dirs-umask");
        let cfg = config(&root);
        for (path, _) in layout(&cfg) {
            fs::create_dir_all(&path).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o777)).unwrap();
        }
        prepare(&cfg).unwrap();
        for (path, mode) in layout(&cfg) {
            let got = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(got, mode, "{}", path.display());
        }
    }
}
