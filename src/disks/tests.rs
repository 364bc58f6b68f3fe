use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::iso9660::IsoFile;
use super::prepare::write_file;
use super::qemu_img::{self, CommandFailure};
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

fn sparse(path: &Path, size: u64) {
    let file = fs::File::create(path).unwrap_or_else(|e| panic!("{e}"));
    file.set_len(size).unwrap_or_else(|e| panic!("{e}"));
}

fn qemu_img_info(path: &Path) -> serde_json::Value {
    let out = std::process::Command::new("qemu-img")
        .args(["info", "--output=json", "-U"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"))
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

fn full_plan(scratch: &Scratch) -> DiskPlan {
    let base = scratch.path("container-disks/disk_0.img");
    let config = scratch.path("private/config-map/app-config");
    let secret = scratch.path("private/secret/cloudinit");
    let mut plan = DiskPlan::default();
    plan.require(
        base.clone(),
        PathKind::File,
        "containerDisk volume \"rootdisk\"",
    );
    plan.require(
        config.clone(),
        PathKind::Dir,
        "configMap volume \"app-config\"",
    );
    plan.make_dir(
        scratch.path("eph/disk-data/rootdisk"),
        "containerDisk volume \"rootdisk\"",
    );
    plan.push(DiskStep::CreateOverlay {
        path: scratch.path("eph/disk-data/rootdisk/disk.qcow2"),
        backing: base,
        backing_format: None,
        what: "containerDisk volume \"rootdisk\"".into(),
    });
    plan.make_dir(
        scratch.path("eph/empty-disks"),
        "emptyDisk volume \"scratch\"",
    );
    plan.push(DiskStep::CreateQcow2 {
        path: scratch.path("eph/empty-disks/scratch.qcow2"),
        size: 64 << 20,
        what: "emptyDisk volume \"scratch\"".into(),
    });
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
                dir: secret,
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
        "container-disks",
        "private/config-map/app-config",
        "private/secret/cloudinit",
        "host",
    ] {
        fs::create_dir_all(scratch.path(dir)).unwrap_or_else(|e| panic!("{e}"));
    }
    sparse(&scratch.path("container-disks/disk_0.img"), 16 << 20);
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
fn prepare_creates_everything_and_rollback_removes_exactly_that() {
    let scratch = Scratch::new("full");
    fixtures(&scratch);
    let before = everything_under(&scratch.0);
    let prepared = prepare(&full_plan(&scratch)).unwrap_or_else(|e| panic!("{e}"));

    let overlay = qemu_img_info(&scratch.path("eph/disk-data/rootdisk/disk.qcow2"));
    assert_eq!(overlay["format"], "qcow2");
    assert_eq!(overlay["backing-filename-format"], "raw");
    let empty = qemu_img_info(&scratch.path("eph/empty-disks/scratch.qcow2"));
    assert_eq!(empty["virtual-size"], 64 << 20);
    let host = fs::metadata(scratch.path("host/data.img")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(host.len(), 32 << 20);
    let iso = fs::read(scratch.path("eph/cloud-init-data/default/demo/noCloud.iso"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&iso[0x8001..0x8006], b"CD001");
    assert!(
        scratch
            .path("private/config-map-disks/app-config.iso")
            .is_file()
    );
    assert!(
        !scratch
            .path("eph/cloud-init-data/default/demo/noCloud.iso.staging")
            .exists()
    );
    assert!(
        prepared
            .created_paths()
            .contains(&scratch.path("eph").as_path())
    );

    prepared.rollback();
    assert_eq!(everything_under(&scratch.0), before);
}

#[test]
fn a_missing_image_fails_before_anything_is_created() {
    let scratch = Scratch::new("missing");
    fixtures(&scratch);
    fs::remove_file(scratch.path("container-disks/disk_0.img")).unwrap_or_else(|e| panic!("{e}"));
    let before = everything_under(&scratch.0);
    let err = prepare(&full_plan(&scratch))
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
fn a_failure_midway_removes_what_was_created() {
    let scratch = Scratch::new("midway");
    fixtures(&scratch);
    // The secret has no userdata key: the cloud-init ISO (a late step) fails.
    fs::remove_file(scratch.path("private/secret/cloudinit/userData"))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = everything_under(&scratch.0);
    let err = prepare(&full_plan(&scratch))
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
fn existing_disks_are_kept_and_not_rolled_back() {
    let scratch = Scratch::new("keep");
    fixtures(&scratch);
    write_file(&scratch.path("host/data.img"), b"guest data").unwrap_or_else(|e| panic!("{e}"));
    let prepared = prepare(&full_plan(&scratch)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !prepared
            .created_paths()
            .contains(&scratch.path("host/data.img").as_path())
    );
    prepared.rollback();
    assert_eq!(
        fs::read(scratch.path("host/data.img")).ok().as_deref(),
        Some(&b"guest data"[..])
    );
}

#[test]
fn a_chained_base_image_is_refused() {
    let scratch = Scratch::new("chained");
    let base = scratch.path("base.qcow2");
    let chained = scratch.path("chained.qcow2");
    let out = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(&base)
        .arg("1M")
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.success());
    let out = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(&base)
        .arg(&chained)
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.success());
    let mut plan = DiskPlan::default();
    plan.push(DiskStep::CreateOverlay {
        path: scratch.path("overlay.qcow2"),
        backing: chained,
        backing_format: None,
        what: "containerDisk volume \"rootdisk\"".into(),
    });
    let err = prepare(&plan)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert_eq!(err.kind, DiskErrorKind::Invalid);
    assert!(
        err.message.contains("has its own backing file"),
        "{}",
        err.message
    );
    assert!(!scratch.path("overlay.qcow2").exists());
}

#[test]
fn qemu_img_failure_is_reported_with_its_output() {
    let scratch = Scratch::new("qemufail");
    let mut plan = DiskPlan::default();
    plan.make_dir(scratch.path("new"), "ephemeral volume \"data\"");
    plan.push(DiskStep::CreateOverlay {
        path: scratch.path("new/disk.qcow2"),
        backing: scratch.path("nowhere.img"),
        backing_format: Some("raw".into()),
        what: "ephemeral volume \"data\"".into(),
    });
    let err = prepare(&plan)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert_eq!(err.kind, DiskErrorKind::Command);
    assert!(
        err.message
            .starts_with("ephemeral volume \"data\": qemu-img could not create overlay"),
        "{}",
        err.message
    );
    assert!(!scratch.path("new").exists());
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

#[test]
fn a_hanging_command_is_killed_at_the_deadline() {
    let started = Instant::now();
    let result = qemu_img::run(
        Path::new("sleep"),
        &["5".as_ref()],
        Duration::from_millis(200),
    );
    assert!(
        matches!(result, Err(CommandFailure::TimedOut(_))),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}
