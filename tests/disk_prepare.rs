//! Disk plans executed for real: qemu-img creates the overlays and empty
//! disks, reads them back, refuses a chained base, is reported when it fails,
//! and is killed when it hangs. A failed prepare removes exactly what it
//! created. (The checks that run no program are unit tests in
//! src/disks/tests.rs.)

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use virt_launcher::disks::iso9660;
use virt_launcher::disks::{
    DiskErrorKind, DiskPlan, DiskStep, IsoContents, PathKind, PrepareOptions, SecretFile, prepare,
    prepare_with,
};

// The scratch directories and in-process steps, shared with the unit
// tests in src/disks/tests.rs.
#[path = "../src/disks/test_plans.rs"]
mod test_plans;
use test_plans::*;

mod common;
use common::{Need, require};

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

fn full_plan(scratch: &Scratch) -> DiskPlan {
    let base = scratch.path("container-disks/disk_0.img");
    let mut plan = DiskPlan::default();
    plan.require(
        base.clone(),
        PathKind::File,
        "containerDisk volume \"rootdisk\"",
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
    add_in_process_steps(&mut plan, scratch);
    plan
}

/// The shared fixtures and the container disk qemu-img overlays.
fn fixtures_with_base(scratch: &Scratch) {
    fixtures(scratch);
    fs::create_dir_all(scratch.path("container-disks")).unwrap_or_else(|e| panic!("{e}"));
    sparse(&scratch.path("container-disks/disk_0.img"), 16 << 20);
}

#[test]
fn prepare_creates_everything_and_rollback_removes_exactly_that() {
    if !require(&[Need::Program("qemu-img")]) {
        return;
    }
    let scratch = Scratch::new("full");
    fixtures_with_base(&scratch);
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
    if !require(&[Need::Program("qemu-img")]) {
        return;
    }
    let scratch = Scratch::new("midway");
    fixtures_with_base(&scratch);
    a_late_failure_leaves_nothing(&scratch, &full_plan(&scratch));
}

#[test]
fn existing_disks_are_kept_and_not_rolled_back() {
    if !require(&[Need::Program("qemu-img")]) {
        return;
    }
    let scratch = Scratch::new("keep");
    fixtures_with_base(&scratch);
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
    if !require(&[Need::Program("qemu-img")]) {
        return;
    }
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
    if !require(&[Need::Program("qemu-img")]) {
        return;
    }
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
