//! Disk plans that run no external program: existence checks, kinds, files
//! and ISOs written in-process, rollback. Plans that run qemu-img are in
//! tests/disk_prepare.rs.

use std::fs;
use std::path::{Path, PathBuf};

use super::prepare::write_file;
use super::test_plans::*;
use super::*;

/// A plan whose steps all run in-process (test_plans.rs).
fn in_process_plan(scratch: &Scratch) -> DiskPlan {
    let mut plan = DiskPlan::default();
    add_in_process_steps(&mut plan, scratch);
    plan
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

/// A migration target's ISO of the source's size (`WriteIso`'s `size`):
/// the image written, then zero-filled or cut at its end.
#[test]
fn an_iso_of_a_given_size_is_zero_filled_or_cut_at_its_end() {
    let scratch = Scratch::new("isosize");
    let written = |name: &str, size: Option<u64>| {
        let mut plan = DiskPlan::default();
        plan.push(DiskStep::WriteIso {
            path: scratch.path(name),
            volume_id: "cidata".into(),
            contents: IsoContents::Files(vec![iso9660::IsoFile {
                path: "user-data".into(),
                data: b"#cloud-config\n".to_vec(),
            }]),
            size,
            what: "cloudInitNoCloud volume \"ci\"".into(),
        });
        let _kept = prepare(&plan).unwrap_or_else(|e| panic!("{e}"));
        fs::read(scratch.path(name)).unwrap_or_else(|e| panic!("{e}"))
    };
    let natural = written("natural.iso", None);
    let grown = written("grown.iso", Some(natural.len() as u64 + 4096 * 3));
    assert_eq!(grown.len(), natural.len() + 4096 * 3);
    assert_eq!(&grown[..natural.len()], &natural[..]);
    assert!(grown[natural.len()..].iter().all(|b| *b == 0));
    let cut = written("cut.iso", Some(0x9000));
    assert_eq!(&cut[..], &natural[..0x9000]);
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
    a_late_failure_leaves_nothing(&scratch, &in_process_plan(&scratch));
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

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn files_hold_user_data_privately_and_directories_ignore_the_umask() {
    let scratch = Scratch::new("modes");
    fixtures(&scratch);
    let prepared = prepare(&in_process_plan(&scratch)).unwrap_or_else(|e| panic!("{e}"));
    // The cloud-init ISO holds the user data; the sparse disk the guest's.
    for file in [
        "eph/cloud-init-data/default/demo/noCloud.iso",
        "private/config-map-disks/app-config.iso",
        "host/data.img",
    ] {
        assert_eq!(mode(&scratch.path(file)), prepare::FILE_MODE, "{file}");
    }
    // Created directories get exactly DIR_MODE: not 0777 under umask 000,
    // so nobody else can plant a link in them.
    for dir in [
        "eph",
        "eph/cloud-init-data",
        "eph/cloud-init-data/default",
        "eph/cloud-init-data/default/demo",
    ] {
        assert_eq!(mode(&scratch.path(dir)), prepare::DIR_MODE, "{dir}");
    }
    drop(prepared);
}

#[test]
fn a_symlink_at_the_staging_path_is_never_written_through() {
    let scratch = Scratch::new("staging");
    fixtures(&scratch);
    let dir = scratch.path("eph/cloud-init-data/default/demo");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let victim = scratch.path("victim");
    write_file(&victim, b"root's file").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&victim, dir.join("noCloud.iso.staging"))
        .unwrap_or_else(|e| panic!("{e}"));
    let prepared = prepare(&in_process_plan(&scratch)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fs::read(&victim).unwrap_or_default(), b"root's file");
    let iso = fs::symlink_metadata(dir.join("noCloud.iso")).unwrap_or_else(|e| panic!("{e}"));
    assert!(iso.file_type().is_file(), "the image became a link");
    assert!(fs::symlink_metadata(dir.join("noCloud.iso.staging")).is_err());
    drop(prepared);
}

#[test]
fn a_rollback_restores_an_image_it_replaced_and_a_kept_prepare_drops_the_copy() {
    let scratch = Scratch::new("replace");
    fixtures(&scratch);
    let dir = scratch.path("eph/cloud-init-data/default/demo");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let iso = dir.join("noCloud.iso");
    write_file(&iso, b"an earlier launcher's image").unwrap_or_else(|e| panic!("{e}"));
    let before = everything_under(&scratch.0);
    // Rolled back (the domain could not be defined): the old image is back.
    let prepared = prepare(&in_process_plan(&scratch)).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(
        fs::read(&iso).unwrap_or_default(),
        b"an earlier launcher's image"
    );
    prepared.rollback();
    assert_eq!(
        fs::read(&iso).unwrap_or_default(),
        b"an earlier launcher's image"
    );
    assert_eq!(everything_under(&scratch.0), before);
    // Kept: the new image stays and the saved copy goes.
    let prepared = prepare(&in_process_plan(&scratch)).unwrap_or_else(|e| panic!("{e}"));
    drop(prepared);
    let now = fs::read(&iso).unwrap_or_default();
    assert_eq!(&now[0x8001..0x8006], b"CD001");
    assert!(fs::symlink_metadata(dir.join("noCloud.iso.previous")).is_err());
}

#[test]
fn a_full_disk_while_writing_an_iso_is_an_io_error() {
    use super::iso9660::IsoError;
    let full = IsoError::Io(std::io::Error::from_raw_os_error(libc::ENOSPC));
    assert_eq!(prepare::iso_error_kind(&full), DiskErrorKind::Io);
    let bad_name = IsoError::InvalidPath {
        path: "x".into(),
        reason: "y".into(),
    };
    assert_eq!(prepare::iso_error_kind(&bad_name), DiskErrorKind::Invalid);
}
