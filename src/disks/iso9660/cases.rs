//! The images the ISO writer is checked and measured with, written once:
//! its unit tests read them with an independent reader (`tests.rs`), the
//! real tools read them in tests/iso9660_tools.rs, and the bench times them
//! (benches/sections/iso9660.rs). The last two include this file with
//! `#[path]`; every includer has `IsoFile` in scope for `super::IsoFile`.

// Each includer uses the part it needs.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::IsoFile;

pub fn file(path: &str, data: impl AsRef<[u8]>) -> IsoFile {
    IsoFile {
        path: path.to_string(),
        data: data.as_ref().to_vec(),
    }
}

/// Deterministic filler bytes.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = u32::try_from(i)
                .unwrap_or(u32::MAX)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed);
            // The low byte of the scrambled index.
            (x >> 13).to_le_bytes()[0]
        })
        .collect()
}

/// A NoCloud seed (label `cidata`).
pub fn nocloud_files() -> Vec<IsoFile> {
    vec![
        file(
            "user-data",
            "#cloud-config\npassword: fedora\nchpasswd: { expire: False }\nssh_pwauth: True\n",
        ),
        file(
            "meta-data",
            "instance-id: vmi-1234\nlocal-hostname: testvmi\n",
        ),
        file(
            "network-config",
            "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n",
        ),
    ]
}

/// An OpenStack ConfigDrive (label `config-2`): files in directories.
pub fn configdrive_files() -> Vec<IsoFile> {
    vec![
        file(
            "openstack/latest/meta_data.json",
            r#"{"uuid":"6c8e","hostname":"vm"}"#,
        ),
        file("openstack/latest/user_data", "#cloud-config\n"),
        file("openstack/latest/network_data.json", r#"{"links":[]}"#),
        file("openstack/latest/vendor_data.json", "{}"),
        file("openstack/2012-08-10/meta_data.json", "{}"),
        file("openstack/content/0000", "interfaces"),
        file("ec2/latest/meta-data.json", "{}"),
    ]
}

/// `count` configMap keys of a few hundred to a few thousand bytes.
pub fn configmap_files(count: usize) -> Vec<IsoFile> {
    (0..count)
        .map(|i| {
            file(
                &format!("application-setting-{i:03}.properties"),
                pattern(200 + (i * 37) % 3000, u32::try_from(i).unwrap_or(u32::MAX)),
            )
        })
        .collect()
}

/// Empty files and files around sector boundaries.
pub fn sized_files() -> Vec<IsoFile> {
    vec![
        file("empty", ""),
        file("dir/also-empty", ""),
        file("one-byte", "x"),
        file("sector-minus-one", pattern(2047, 1)),
        file("exactly-one-sector", pattern(2048, 2)),
        file("sector-plus-one", pattern(2049, 3)),
        file("dir/big.bin", pattern(3 * 1024 * 1024 + 5, 4)),
    ]
}

/// 300 names that all shorten to the same 8.3 name, in one directory
/// that spans several sectors, and one more file.
pub fn many_files() -> Vec<IsoFile> {
    let mut files = configmap_files(300);
    for f in &mut files {
        f.path = format!("conf.d/{}", f.path);
    }
    files.push(file("README", "many files"));
    files
}

/// The deepest nesting ISO 9660 allows (8 levels).
pub const DEEPEST_FILE: &str = "l2/l3/l4/l5/l6/l7/l8/file.txt";

pub fn deep_files() -> Vec<IsoFile> {
    vec![file(DEEPEST_FILE, "deep"), file("l2/l3/side", "side")]
}

/// Names that collide once mangled to 8.3.
pub fn colliding_files() -> Vec<IsoFile> {
    let names = [
        "user-data",
        "User-Data",
        "user_data",
        "USER_DATA",
        "user-da1",
        "user-data-2",
        "a.tar.gz",
        "A.TAR.GZ",
        "a_tar.gz",
        ".hidden",
        "_hidden",
        "docs",
        "DOCS/readme.md",
        "Docs.d/x",
        "config.yaml",
        "config.yml",
        "config.yaml.bak",
    ];
    names
        .iter()
        .enumerate()
        .map(|(i, n)| file(n, format!("content of {n} #{i}")))
        .collect()
}

/// Names beyond ASCII and of the longest lengths Joliet holds.
pub fn unicode_files() -> Vec<IsoFile> {
    vec![
        file("données/café.txt", "bonjour"),
        file("日本語/ファイル.txt", "nihongo"),
        file("Grüße", "hallo"),
        file("space in name.txt", "spaces"),
        file(&"x".repeat(64), "longest name"),
        file(
            &format!("{}/{}", "é".repeat(64), "ü".repeat(60)),
            "long non-ascii",
        ),
    ]
}

/// Path -> content, as a reader of the image must find them.
pub fn expected_map(files: &[IsoFile]) -> BTreeMap<String, Vec<u8>> {
    files
        .iter()
        .map(|f| (f.path.clone(), f.data.clone()))
        .collect()
}

/// Every directory the image must hold.
pub fn expected_dirs(files: &[IsoFile]) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for f in files {
        let mut parts: Vec<&str> = f.path.split('/').collect();
        parts.pop();
        while !parts.is_empty() {
            dirs.insert(parts.join("/"));
            parts.pop();
        }
    }
    dirs
}

static NEXT_TEMP: AtomicUsize = AtomicUsize::new(0);

/// A unique path under the temp dir, removed (file or tree) on drop.
pub struct TempPath(PathBuf);

impl TempPath {
    pub fn new(tag: &str) -> Self {
        let n = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
        let name = format!("iso9660-{}-{n}-{tag}", std::process::id());
        TempPath(std::env::temp_dir().join(name))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Extracted trees can be read-only (xorriso's): make them removable.
fn make_writable(path: &Path) {
    if let Ok(meta) = fs::symlink_metadata(path)
        && meta.is_dir()
    {
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(path) {
            for entry in entries.flatten() {
                make_writable(&entry.path());
            }
        }
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if fs::symlink_metadata(&self.0).is_ok_and(|m| m.is_dir()) {
            make_writable(&self.0);
            let _ = fs::remove_dir_all(&self.0);
        } else {
            let _ = fs::remove_file(&self.0);
        }
    }
}
