//! Reading a mounted volume directory (configMap, secret, ...) into the
//! files of an image.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::names::depth_reason;
use super::{ELOOP, IsoError, IsoFile, MAX_DIRECTORY_LEVELS, invalid_path, io_at};

/// Collects every regular file under `dir`, recursively, into [`IsoFile`]s
/// whose paths are relative to `dir`, sorted by path.
///
/// Rules (chosen for Kubernetes configMap / secret / serviceAccount /
/// downwardAPI volume mounts, which publish each key as a symlink
/// `key -> ..data/key` with `..data -> ..2024_01_01_00_00_00.123456789`):
///
/// * Entries whose name starts with `..` (`..data`, `..2024_...`, the
///   AtomicWriter's private entries) are skipped at every level; Kubernetes
///   forbids user keys starting with `..`.
/// * Symbolic links (to files or directories) are followed when their
///   fully resolved target lies inside `dir` (after resolving `dir` itself),
///   so the keys appear as regular files with the linked content.
/// * Symbolic links whose target is outside `dir`, dangling links and links
///   to a directory that is already being walked (loops) are skipped
///   silently: nothing outside the given directory ever ends up in an image.
/// * Other special files (sockets, FIFOs, devices) are skipped; empty
///   directories contribute nothing (an image only has directories that
///   contain files).
/// * Other dot-files (e.g. `.hidden`) are collected.
///
/// Errors: a name that is not valid UTF-8 is an [`IsoError::InvalidPath`];
/// so is a directory nested deeper than an image can hold; I/O errors carry
/// the path that failed.
pub fn collect_dir(dir: &Path) -> Result<Vec<IsoFile>, IsoError> {
    let root = fs::canonicalize(dir).map_err(|err| io_at("cannot resolve", dir, err))?;
    let meta = fs::metadata(&root).map_err(|err| io_at("cannot stat", dir, err))?;
    if !meta.is_dir() {
        return Err(invalid_path(
            &dir.display().to_string(),
            "it is not a directory; collect_dir needs the directory whose files go into the image",
        ));
    }
    let mut walker = Walker {
        root: root.clone(),
        stack: vec![root.clone()],
        files: Vec::new(),
    };
    walker.walk(&root, "", 1)?;
    let mut files = walker.files;
    files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

struct Walker {
    /// Canonical form of the directory given to `collect_dir`.
    root: PathBuf,
    /// Canonical directories currently being walked (symlink loop guard).
    stack: Vec<PathBuf>,
    files: Vec<IsoFile>,
}

impl Walker {
    /// Walks the canonical directory `real` whose image path is `prefix`
    /// (empty for the root) and whose directory level is `level`.
    fn walk(&mut self, real: &Path, prefix: &str, level: usize) -> Result<(), IsoError> {
        let mut names = Vec::new();
        let entries = fs::read_dir(real).map_err(|err| io_at("cannot list", real, err))?;
        for entry in entries {
            let entry = entry.map_err(|err| io_at("cannot list", real, err))?;
            names.push(entry.file_name());
        }
        names.sort_unstable();
        for name in names {
            let full = real.join(&name);
            let Some(name) = name.to_str() else {
                return Err(invalid_path(
                    &full.display().to_string(),
                    "the file name is not valid UTF-8, which Joliet names cannot represent; \
                     rename it",
                ));
            };
            if name.starts_with("..") {
                continue;
            }
            let link_meta =
                fs::symlink_metadata(&full).map_err(|err| io_at("cannot stat", &full, err))?;
            let (target, meta) = if link_meta.file_type().is_symlink() {
                let target = match fs::canonicalize(&full) {
                    Ok(target) => target,
                    // Dangling link (or a link loop the OS refuses to resolve).
                    Err(err)
                        if err.kind() == io::ErrorKind::NotFound
                            || err.raw_os_error() == Some(ELOOP) =>
                    {
                        continue;
                    }
                    Err(err) => return Err(io_at("cannot resolve symlink", &full, err)),
                };
                if !target.starts_with(&self.root) {
                    continue;
                }
                let meta =
                    fs::metadata(&target).map_err(|err| io_at("cannot stat", &target, err))?;
                (target, meta)
            } else {
                (full, link_meta)
            };
            let rel = if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            };
            if meta.is_dir() {
                if self.stack.contains(&target) {
                    continue;
                }
                if level >= MAX_DIRECTORY_LEVELS {
                    return Err(invalid_path(&rel, depth_reason()));
                }
                self.stack.push(target.clone());
                let result = self.walk(&target, &rel, level + 1);
                self.stack.pop();
                result?;
            } else if meta.is_file() {
                let data = fs::read(&target).map_err(|err| io_at("cannot read", &target, err))?;
                self.files.push(IsoFile { path: rel, data });
            }
        }
        Ok(())
    }
}
