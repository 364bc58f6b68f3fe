//! The ISO images the launcher writes, read by the real tools: isoinfo
//! (genisoimage), xorriso and blkid (util-linux) must see the label, the
//! Joliet names, the 8.3 tree and every byte; the kernel's isofs driver
//! likewise where the host kernel has it (the test guest, which always has
//! it, mounts a NoCloud ISO in tests/cloud_init.rs). The writer's unit tests
//! (src/disks/iso9660/tests.rs) check the same images with an independent
//! reader and run no program.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::{Command, Output};

use virt_launcher::disks::iso9660::{IsoFile, collect_dir, write_iso};

mod common;
use common::{Need, require};

/// The tools that read the images back.
const ISO_TOOLS: &[Need] = &[
    Need::Program("isoinfo"),
    Need::Program("xorriso"),
    Need::Program("blkid"),
];

// The images, shared with the writer's unit tests and the bench.
#[path = "../src/disks/iso9660/cases.rs"]
mod cases;
use cases::*;

/// Writes the image to a temp file.
fn image_file(tag: &str, label: &str, files: &[IsoFile]) -> TempPath {
    let path = TempPath::new(&format!("{tag}.iso"));
    let mut out = fs::File::create(path.path()).expect("create image file");
    write_iso(&mut out, label, files).expect("write_iso to file");
    path
}

/// Writes the image and checks it with every tool.
fn check_everything(tag: &str, label: &str, files: &[IsoFile]) -> TempPath {
    let iso = image_file(tag, label, files);
    check_with_tools(iso.path(), label, files);
    iso
}

fn run(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let output = cmd.env("LC_ALL", "C.UTF-8").output().unwrap_or_else(|e| {
        panic!(
            "cannot run {what}: {e}; these tests need isoinfo (package genisoimage), \
             xorriso and blkid (util-linux) installed"
        )
    });
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// Parses `isoinfo [-J] -l` output into (path, is_dir) pairs.
fn isoinfo_listing(iso: &Path, joliet: bool) -> Vec<(String, bool)> {
    let mut cmd = Command::new("isoinfo");
    if joliet {
        cmd.args(["-J", "-j", "iso8859-1"]);
    }
    let output = run(cmd.arg("-l").arg("-i").arg(iso));
    let text = latin1(&output.stdout);
    let mut dir = String::from("/");
    let mut entries = Vec::new();
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("Directory listing of ") {
            dir = d.to_string();
            continue;
        }
        let Some(pos) = line.find("]  ") else {
            continue;
        };
        let name = &line[pos + 3..];
        let name = name.strip_suffix(' ').unwrap_or(name);
        if name == "." || name == ".." {
            continue;
        }
        entries.push((format!("{dir}{name}"), line.starts_with('d')));
    }
    entries.sort();
    entries
}

fn xorriso_checked(args: &[&str], iso: &Path, extra: &[&Path]) -> Output {
    let mut cmd = Command::new("xorriso");
    cmd.arg("-abort_on")
        .arg("FAILURE")
        .arg("-indev")
        .arg(iso)
        .args(args);
    cmd.args(extra);
    let output = run(&mut cmd);
    let err = String::from_utf8_lossy(&output.stderr);
    for bad in [": WARNING :", ": SORRY :", ": FAILURE :", ": FATAL :"] {
        assert!(!err.contains(bad), "xorriso complained:\n{err}");
    }
    output
}

fn collect_tree(root: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
    let mut entries: Vec<_> = fs::read_dir(root)
        .expect("read extracted dir")
        .map(|e| e.expect("dir entry"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().into_string().expect("UTF-8 name");
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let path = e.path();
        if path.is_dir() {
            collect_tree(&path, &rel, out);
        } else {
            out.insert(rel, fs::read(&path).expect("read extracted file"));
        }
    }
}

/// Checks an image file with isoinfo, xorriso and blkid. These tools
/// are required: a missing tool fails the test.
fn check_with_tools(iso: &Path, label: &str, files: &[IsoFile]) {
    // isoinfo -d: label and Joliet.
    let info = stdout(&run(Command::new("isoinfo").arg("-d").arg("-i").arg(iso)));
    assert!(
        info.contains(&format!("Volume id: {label}\n")),
        "isoinfo -d:\n{info}"
    );
    assert!(
        info.contains("Joliet with UCS level 3 found"),
        "isoinfo -d:\n{info}"
    );

    // isoinfo -J -l: the Joliet names (Latin-1 display; others show as '_').
    let shown = |s: &str| -> String {
        s.chars()
            .map(|c| if u32::from(c) > 0xFF { '_' } else { c })
            .collect()
    };
    let mut expected: Vec<(String, bool)> = files
        .iter()
        .map(|f| (shown(&format!("/{}", f.path)), false))
        .chain(
            expected_dirs(files)
                .iter()
                .map(|d| (shown(&format!("/{d}")), true)),
        )
        .collect();
    expected.sort();
    assert_eq!(isoinfo_listing(iso, true), expected, "isoinfo -J -l");

    // isoinfo -l: the 8.3 tree has the same shape.
    let primary = isoinfo_listing(iso, false);
    assert_eq!(primary.len(), expected.len(), "isoinfo -l:\n{primary:?}");

    // isoinfo -J -x: extract files (at most ~40 of them) and compare.
    let step = files.len().div_ceil(40).max(1);
    for f in files.iter().step_by(step) {
        if f.path.chars().any(|c| u32::from(c) > 0xFF) {
            continue; // isoinfo cannot name it; xorriso checks it below
        }
        let latin: Vec<u8> = format!("/{}", f.path)
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap())
            .collect();
        let output = run(Command::new("isoinfo")
            .args(["-J", "-j", "iso8859-1", "-x"])
            .arg(OsString::from_vec(latin))
            .arg("-i")
            .arg(iso));
        assert!(
            output.stdout == f.data,
            "isoinfo -J -x /{} returned other bytes",
            f.path
        );
    }

    // xorriso -find: the full tree with real (UTF-8) names.
    let found = stdout(&xorriso_checked(&["-find", "/"], iso, &[]));
    let found: BTreeSet<String> = found
        .lines()
        .filter_map(|l| l.strip_prefix('\'').and_then(|l| l.strip_suffix('\'')))
        .map(str::to_string)
        .collect();
    let mut want: BTreeSet<String> = files.iter().map(|f| format!("/{}", f.path)).collect();
    want.extend(expected_dirs(files).iter().map(|d| format!("/{d}")));
    want.insert("/".into());
    assert_eq!(found, want, "xorriso -find /");

    // xorriso -check_media: every block readable.
    let media = xorriso_checked(&["-check_media", "--"], iso, &[]);
    let report = format!(
        "{}{}",
        stdout(&media),
        String::from_utf8_lossy(&media.stderr)
    );
    let regions: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("Media region"))
        .collect();
    assert!(!regions.is_empty(), "no -check_media report:\n{report}");
    assert!(regions.iter().all(|l| l.contains("+ good")), "{report}");

    // xorriso -extract: every file, byte for byte.
    let extracted = TempPath::new("extract");
    xorriso_checked(
        &["-osirrox", "on", "-extract", "/"],
        iso,
        &[extracted.path()],
    );
    let mut got = BTreeMap::new();
    if extracted.path().exists() {
        collect_tree(extracted.path(), "", &mut got);
    }
    assert_eq!(got, expected_map(files), "xorriso -extract");

    // blkid: what udev / cloud-init see.
    for probe in [&["-o", "value", "-s"][..], &["-p", "-o", "value", "-s"][..]] {
        let label_out = stdout(&run(Command::new("blkid")
            .args(probe)
            .arg("LABEL")
            .arg(iso)));
        assert_eq!(label_out.trim_end(), label, "blkid {probe:?} LABEL");
        let type_out = stdout(&run(Command::new("blkid").args(probe).arg("TYPE").arg(iso)));
        assert_eq!(type_out.trim_end(), "iso9660", "blkid {probe:?} TYPE");
    }
}

fn blkid_label(iso: &Path) -> String {
    stdout(&run(Command::new("blkid")
        .args(["-o", "value", "-s", "LABEL"])
        .arg(iso)))
    .trim_end()
    .to_string()
}

#[test]
fn nocloud_cidata_image() {
    if !require(ISO_TOOLS) {
        return;
    }
    let iso = check_everything("nocloud", "cidata", &nocloud_files());
    assert_eq!(blkid_label(iso.path()), "cidata");
}

#[test]
fn configdrive_image_with_directories() {
    if !require(ISO_TOOLS) {
        return;
    }
    let iso = check_everything("configdrive", "config-2", &configdrive_files());
    assert_eq!(blkid_label(iso.path()), "config-2");
}

#[test]
fn empty_image() {
    if !require(ISO_TOOLS) {
        return;
    }
    check_everything("empty", "cidata", &[]);
}

#[test]
fn zero_length_and_multi_sector_files() {
    if !require(ISO_TOOLS) {
        return;
    }
    check_everything("sizes", "cidata", &sized_files());
}

#[test]
fn many_files_in_one_directory() {
    if !require(ISO_TOOLS) {
        return;
    }
    check_everything("many", "cfgdata", &many_files());
}

#[test]
fn deepest_allowed_nesting() {
    if !require(ISO_TOOLS) {
        return;
    }
    check_everything("deep", "cidata", &deep_files());
}

#[test]
fn names_colliding_after_mangling() {
    if !require(ISO_TOOLS) {
        return;
    }
    check_everything("collide", "cidata", &colliding_files());
}

#[test]
fn non_ascii_names_in_joliet() {
    if !require(ISO_TOOLS) {
        return;
    }
    check_everything("unicode", "cidata", &unicode_files());
}

#[test]
fn longest_and_upper_case_labels() {
    if !require(ISO_TOOLS) {
        return;
    }
    // Joliet holds 16 characters; blkid merges the rest from the primary
    // descriptor.
    let long = "CONFIG-DRIVE_with.long+label-32c";
    assert_eq!(long.len(), 32);
    let iso = check_everything("label32", long, &[file("a", "b")]);
    assert_eq!(blkid_label(iso.path()), long);
    check_everything("labelcase", "CIDATA", &[file("a", "b")]);
}

#[test]
fn a_collected_kubernetes_volume() {
    if !require(ISO_TOOLS) {
        return;
    }
    let vol = TempPath::new("configmap");
    let root = vol.path();
    let ts = root.join("..2024_01_01_00_00_00.123456789");
    fs::create_dir_all(ts.join("nested")).expect("mkdir");
    fs::write(ts.join("user-data"), "#cloud-config\n").expect("write");
    fs::write(ts.join("nested/deep.txt"), "deep").expect("write");
    std::os::unix::fs::symlink("..2024_01_01_00_00_00.123456789", root.join("..data"))
        .expect("symlink");
    std::os::unix::fs::symlink("..data/user-data", root.join("user-data")).expect("symlink");
    std::os::unix::fs::symlink("..data/nested", root.join("nested")).expect("symlink");
    let files = collect_dir(root).expect("collect_dir");
    assert_eq!(files.len(), 2, "{files:?}");
    check_everything("collected", "cfgdata", &files);
}
