//! Disk plans that run no external program: existence checks, kinds, files
//! and ISOs written in-process, rollback. Plans that run qemu-img are in
//! tests/disk_prepare.rs.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::iso9660::IsoFile;
use super::prepare::write_file;
use super::*;

/// A scratch directory removed on drop (no tempfile crate here).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("disks-test-{}-{name}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        Scratch(dir)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn everything_under(dir: &Path) -> Vec<PathBuf> {
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

/// A plan whose steps all run in-process: a config ISO of a mounted
/// directory, a cloud-init ISO with a secret read at prepare time, and a
/// sparse hostDisk file.
fn in_process_plan(scratch: &Scratch) -> DiskPlan {
    let config = scratch.path("private/config-map/app-config");
    let mut plan = DiskPlan::default();
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
        what: "configMap volume \"app-config\"".into(),
    });
    plan
}

fn fixtures(scratch: &Scratch) {
    for dir in [
        "private/config-map/app-config",
        "private/secret/cloudinit",
        "host",
    ] {
        fs::create_dir_all(scratch.path(dir)).unwrap_or_else(|e| panic!("{e}"));
    }
    write_file(
        &scratch.path("private/config-map/app-config/app.conf"),
        b"key=value\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    write_file(
        &scratch.path("private/secret/cloudinit/userData"),
        b"#cloud-config\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn in_process_steps_and_rollback() {
    let scratch = Scratch::new("inproc");
    fixtures(&scratch);
    let before = everything_under(&scratch.0);
    let prepared = prepare(&in_process_plan(&scratch)).unwrap_or_else(|e| panic!("{e}"));
    let host = fs::metadata(scratch.path("host/data.img")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(host.len(), 32 << 20);
    let iso = fs::read(scratch.path("eph/cloud-init-data/default/demo/noCloud.iso"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&iso[0x8001..0x8006], b"CD001");
    assert!(iso.windows(14).any(|w| w == b"#cloud-config\n"));
    let config = fs::read(scratch.path("private/config-map-disks/app-config.iso"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(config.windows(10).any(|w| w == b"key=value\n"));
    assert!(
        !scratch
            .path("eph/cloud-init-data/default/demo/noCloud.iso.staging")
            .exists()
    );
    prepared.rollback();
    assert_eq!(everything_under(&scratch.0), before);
}

#[test]
fn a_missing_image_fails_before_anything_is_created() {
    let scratch = Scratch::new("missing");
    fixtures(&scratch);
    let mut plan = in_process_plan(&scratch);
    plan.require(
        scratch.path("container-disks/disk_0.img"),
        PathKind::File,
        "containerDisk volume \"rootdisk\"",
    );
    let before = everything_under(&scratch.0);
    let err = prepare(&plan)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert_eq!(err.kind, DiskErrorKind::Missing);
    assert_eq!(
        err.message,
        format!(
            "containerDisk volume \"rootdisk\": file {}: does not exist; put the image file there (the launcher pulls and copies nothing)",
            scratch.path("container-disks/disk_0.img").display()
        )
    );
    assert_eq!(everything_under(&scratch.0), before);
}

#[test]
fn a_failure_midway_removes_what_was_created() {
    let scratch = Scratch::new("midway");
    fixtures(&scratch);
    // The secret has no userdata key: the cloud-init ISO (a late step) fails.
    fs::remove_file(scratch.path("private/secret/cloudinit/userData"))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = everything_under(&scratch.0);
    let err = prepare(&in_process_plan(&scratch))
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

#[test]
fn wrong_kind_is_reported() {
    let scratch = Scratch::new("kind");
    let mut plan = DiskPlan::default();
    plan.require(
        scratch.0.clone(),
        PathKind::BlockDevice,
        "persistentVolumeClaim volume \"db\"",
    );
    let err = prepare(&plan)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(
        err.message.contains("exists but is not a block device"),
        "{}",
        err.message
    );
}

#[test]
fn missing_qemu_img_says_what_to_install() {
    let scratch = Scratch::new("noqemu");
    let mut plan = DiskPlan::default();
    plan.push(DiskStep::CreateQcow2 {
        path: scratch.path("a.qcow2"),
        size: 1 << 20,
        what: "emptyDisk volume \"a\"".into(),
    });
    let options = PrepareOptions {
        qemu_img: PathBuf::from("/nonexistent/qemu-img"),
        ..PrepareOptions::default()
    };
    let err = prepare_with(&plan, &options)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert!(
        err.message
            .contains("is qemu-img (package qemu-utils) installed?"),
        "{}",
        err.message
    );
}
