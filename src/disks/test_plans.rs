//! The scratch directories and disk plans the disk tests run, written once:
//! the unit tests (`tests.rs`: steps that run in-process) and
//! tests/disk_prepare.rs (the same steps after qemu-img's, which it
//! includes with `#[path]`). Every includer has the `disks` items and
//! `iso9660` in scope for `super::`.

// Each includer uses the part it needs.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::iso9660::IsoFile;
use super::{DiskErrorKind, DiskPlan, DiskStep, IsoContents, PathKind, SecretFile, prepare};

/// A scratch directory removed on drop (no tempfile crate here).
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("disks-test-{}-{name}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        Scratch(dir)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Every path under `dir`, sorted: what a rollback must leave as it was.
pub fn everything_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in fs::read_dir(&current).unwrap_or_else(|e| panic!("{e}")) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The mounted configMap and cloud-init secret the in-process steps read.
pub fn fixtures(scratch: &Scratch) {
    for dir in [
        "private/config-map/app-config",
        "private/secret/cloudinit",
        "host",
    ] {
        fs::create_dir_all(scratch.path(dir)).unwrap_or_else(|e| panic!("{e}"));
    }
    fs::write(
        scratch.path("private/config-map/app-config/app.conf"),
        b"key=value\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    fs::write(
        scratch.path("private/secret/cloudinit/userData"),
        b"#cloud-config\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Requires the configMap directory, then appends the steps that run
/// in-process: a sparse hostDisk file, a cloud-init ISO with a secret read
/// at prepare time, and a config ISO of the mounted directory.
pub fn add_in_process_steps(plan: &mut DiskPlan, scratch: &Scratch) {
    let config = scratch.path("private/config-map/app-config");
    plan.require(
        config.clone(),
        PathKind::Dir,
        "configMap volume \"app-config\"",
    );
    plan.push(DiskStep::CreateSparseFile {
        path: scratch.path("host/data.img"),
        size: 32 << 20,
        what: "hostDisk volume \"data\"".into(),
    });
    plan.make_dir(
        scratch.path("eph/cloud-init-data/default/demo"),
        "cloudInitNoCloud volume \"cloudinit\"",
    );
    plan.push(DiskStep::WriteIso {
        path: scratch.path("eph/cloud-init-data/default/demo/noCloud.iso"),
        volume_id: "cidata".into(),
        contents: IsoContents::FilesWithSecrets {
            files: vec![IsoFile {
                path: "meta-data".into(),
                data: b"{\"instance-id\":\"x\"}".to_vec(),
            }],
            secrets: vec![SecretFile {
                iso_path: "user-data".into(),
                dir: scratch.path("private/secret/cloudinit"),
                names: vec!["userdata".into(), "userData".into()],
            }],
        },
        size: None,
        what: "cloudInitNoCloud volume \"cloudinit\"".into(),
    });
    plan.make_dir(
        scratch.path("private/config-map-disks"),
        "configMap volume \"app-config\"",
    );
    plan.push(DiskStep::WriteIso {
        path: scratch.path("private/config-map-disks/app-config.iso"),
        volume_id: "cfgdata".into(),
        contents: IsoContents::Dir(config),
        size: None,
        what: "configMap volume \"app-config\"".into(),
    });
}

/// A late step (the cloud-init ISO, whose secret has no user data) fails:
/// the prepare reports it and leaves the scratch tree as it found it.
pub fn a_late_failure_leaves_nothing(scratch: &Scratch, plan: &DiskPlan) {
    // The secret has no userdata key.
    fs::remove_file(scratch.path("private/secret/cloudinit/userData"))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = everything_under(&scratch.0);
    let err = prepare(plan)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert_eq!(err.kind, DiskErrorKind::Missing);
    assert!(
        err.message.contains("has no userdata or userData"),
        "{}",
        err.message
    );
    assert_eq!(everything_under(&scratch.0), before);
}
