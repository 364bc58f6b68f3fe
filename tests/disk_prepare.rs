//! Disk plans executed for real: qemu-img creates the overlays and empty
//! disks, reads them back, refuses a chained base, is reported when it fails,
//! and is killed when it hangs. A failed prepare removes exactly what it
//! created. (The checks that run no program are unit tests in
//! src/disks/tests.rs.)

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use virt_launcher::disks::iso9660::IsoFile;
use virt_launcher::disks::{
    DiskErrorKind, DiskPlan, DiskStep, IsoContents, PathKind, PrepareOptions, SecretFile, prepare,
    prepare_with,
};

/// A scratch directory removed on drop (no tempfile crate here).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("disk-prepare-{}-{name}-{n}", std::process::id()));
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
    fs::write(scratch.path("host/data.img"), b"guest data").unwrap_or_else(|e| panic!("{e}"));
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
fn a_hanging_qemu_img_is_killed_at_the_deadline() {
    let scratch = Scratch::new("hang");
    // A stand-in for qemu-img that never finishes.
    let fake = scratch.path("qemu-img");
    fs::write(&fake, "#!/bin/sh\nexec sleep 60\n").unwrap_or_else(|e| panic!("{e}"));
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    let mut plan = DiskPlan::default();
    plan.push(DiskStep::CreateQcow2 {
        path: scratch.path("a.qcow2"),
        size: 1 << 20,
        what: "emptyDisk volume \"a\"".into(),
    });
    let options = PrepareOptions {
        qemu_img: fake,
        command_timeout: Duration::from_secs(1),
    };
    let started = Instant::now();
    let err = prepare_with(&plan, &options)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert_eq!(err.kind, DiskErrorKind::Command);
    assert!(
        err.message
            .contains("did not finish within 1 s and was killed"),
        "{}",
        err.message
    );
    // Generous: the deadline is 1 s, the stand-in would sleep 60 s.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!scratch.path("a.qcow2").exists());
}
