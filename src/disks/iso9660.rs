//! In-process ISO 9660 (ECMA-119) image writer with Joliet extensions.
//!
//! The launcher runs in minimal images without `genisoimage`/`xorriso`, so the
//! seed disks it hands to guests (cloud-init NoCloud `cidata`, OpenStack
//! ConfigDrive `config-2`, and images built from configMap / secret /
//! serviceAccount volumes) are written here, using only the standard library.
//!
//! # What an image contains
//!
//! * Sectors 0-15: empty system area.
//! * Sector 16: primary volume descriptor (PVD), ISO 9660 interchange level 1:
//!   8.3 upper-case d-character names (`USER_DAT.;1`, `META_DAT.JSO;1`),
//!   directory names of at most 8 d-characters, unique within their directory
//!   after mangling.
//! * Sector 17: Joliet supplementary volume descriptor (escape sequence `%/E`,
//!   UCS-2 level 3) whose hierarchy carries the real names, case preserved
//!   (`user-data`, `openstack/latest/meta_data.json`). Linux (and Windows)
//!   use this hierarchy whenever it is present and there is no Rock Ridge.
//! * Sector 18: volume descriptor set terminator.
//! * Type L and type M path tables for both hierarchies, then the directory
//!   extents of both hierarchies, then the file data (shared by both
//!   hierarchies; every non-empty file starts on its own sector).
//!
//! # Volume label
//!
//! The label is written verbatim into the PVD volume identifier and into the
//! Joliet volume identifier (first 16 characters, UCS-2), exactly like
//! `genisoimage -V` does. `blkid` (util-linux 2.38) prefers the Joliet label
//! and completes labels longer than 16 characters from the PVD, so it reports
//! `LABEL=cidata` / `LABEL=config-2`, which is what cloud-init searches for;
//! readers that only look at the PVD see the same label. (Strict ECMA-119
//! would want upper-case d-characters in the PVD; cloud-init, nova and
//! KubeVirt have always used the verbatim lower-case label, so we do too.)
//!
//! # Determinism
//!
//! All timestamps are fixed (2000-01-01T00:00:00Z) and the layout depends
//! only on the label and the set of `(path, data)` pairs, not on the order of
//! the input slice, so identical input gives byte-identical output.
//!
//! # Limits
//!
//! * At most 8 directory levels counting the root (ECMA-119 6.8.2.1), so a
//!   path has at most 8 components: 7 directories plus the file name.
//! * Names (path components) of at most 64 UCS-2 characters; no characters
//!   outside the Basic Multilingual Plane, no control characters, none of
//!   `* / : ; ? \`, and no trailing `.` (Joliet readers strip it).
//! * Files of at most 4 GiB - 1 byte each (single extent, no multi-extent
//!   files); at most 65535 directories (path table parent numbers are 16 bit).
//! * Directories exist only as parents of files: empty directories cannot be
//!   expressed. No Rock Ridge (no permissions/owners/symlinks), no El Torito.
//! * Empty files are recorded with extent location 0 and length 0 (they own
//!   no sectors). The image is not padded beyond its last file sector.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::error::Error;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Logical sector (and logical block) size used for the whole image.
const SECTOR_SIZE: usize = 2048;
const SECTOR_SIZE_U64: u64 = SECTOR_SIZE as u64;
/// Sector of the primary volume descriptor (sectors 0-15 are the system area).
const PVD_SECTOR: u64 = 16;
/// First sector after PVD, Joliet SVD and terminator.
const FIRST_FREE_SECTOR: u64 = 19;
/// ECMA-119 6.8.2.1: at most 8 directory levels, the root being level 1.
const MAX_DIRECTORY_LEVELS: usize = 8;
/// Joliet: identifiers of at most 64 UCS-2 characters.
const MAX_JOLIET_NAME_CHARS: usize = 64;
/// Single-extent files: the data length field is 32 bits.
const MAX_FILE_SIZE: u64 = u32::MAX as u64;
/// Path table records reference their parent by a 16-bit directory number.
const MAX_DIRECTORIES: u64 = u16::MAX as u64;
/// The volume identifier field is 32 bytes.
const MAX_VOLUME_ID_LEN: usize = 32;
/// The Joliet volume identifier field holds 16 UCS-2 characters.
const JOLIET_VOLUME_ID_CHARS: usize = 16;
/// Largest number appended to a mangled 8.3 name to make it unique.
const MAX_MANGLE_SUFFIX: u32 = 99_999_999;
/// Linux errno for "too many levels of symbolic links".
const ELOOP: i32 = 40;
/// Characters Joliet forbids in identifiers (besides control characters).
const JOLIET_FORBIDDEN: &[char] = &['*', '/', ':', ';', '?', '\\'];

// The image records one fixed timestamp everywhere (creation, modification
// and recording dates) so output is reproducible: 2000-01-01T00:00:00Z.

/// The fixed timestamp as a 7-byte directory record date (ECMA-119 9.1.5):
/// years since 1900, month, day, hour, minute, second, GMT offset.
const RECORD_DATE: [u8; 7] = [100, 1, 1, 0, 0, 0, 0];
/// The fixed timestamp as a 17-byte volume descriptor date (ECMA-119 8.4.26.1).
const VOLUME_DATE: &[u8; 17] = b"2000010100000000\0";
/// "Date and time not specified" (ECMA-119 8.4.26.1).
const NO_DATE: &[u8; 17] = b"0000000000000000\0";

/// One file to put in the image. `path` uses '/' separators, relative, e.g.
/// "openstack/latest/meta_data.json".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoFile {
    pub path: String,
    pub data: Vec<u8>,
}

/// Why an image could not be built or written.
#[derive(Debug)]
pub enum IsoError {
    /// A file path cannot be stored in the image (see [`write_iso`] for the
    /// rules); `reason` says what to change.
    InvalidPath { path: String, reason: String },
    /// The volume label (the offending label is carried) is not usable.
    InvalidVolumeId(String),
    /// Something exceeds a hard ISO 9660 limit: `what` names the quantity,
    /// `size` is its value and `limit` the largest value allowed.
    TooLarge { what: String, size: u64, limit: u64 },
    /// Reading the source directory or writing the image failed.
    Io(io::Error),
}

impl fmt::Display for IsoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsoError::InvalidPath { path, reason } => {
                write!(f, "cannot put {path:?} into an ISO 9660 image: {reason}")
            }
            IsoError::InvalidVolumeId(id) => {
                let problem = volume_id_problem(id).unwrap_or_else(|| "it was rejected".into());
                write!(
                    f,
                    "invalid ISO 9660 volume label {id:?}: {problem}; use 1 to {MAX_VOLUME_ID_LEN} \
                     ASCII letters, digits, '_', '-', '.', '+' or inner spaces \
                     (e.g. \"cidata\" or \"config-2\")"
                )
            }
            IsoError::TooLarge { what, size, limit } => write!(
                f,
                "ISO 9660 limit exceeded: {what} is {size}, but at most {limit} is possible"
            ),
            IsoError::Io(err) => write!(f, "I/O error while building an ISO image: {err}"),
        }
    }
}

impl Error for IsoError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            IsoError::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<io::Error> for IsoError {
    fn from(err: io::Error) -> Self {
        IsoError::Io(err)
    }
}

/// An I/O error annotated with what was being done to which file. Wrapped in
/// an `io::Error` of the same kind so `IsoError::Io` keeps its shape.
#[derive(Debug)]
struct IoContext {
    action: &'static str,
    path: PathBuf,
    err: io::Error,
}

impl fmt::Display for IoContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.action, self.path.display(), self.err)
    }
}

impl Error for IoContext {}

fn io_at(action: &'static str, path: &Path, err: io::Error) -> IsoError {
    let kind = err.kind();
    IsoError::Io(io::Error::new(
        kind,
        IoContext {
            action,
            path: path.to_path_buf(),
            err,
        },
    ))
}

fn write_failed(err: io::Error) -> IsoError {
    let kind = err.kind();
    IsoError::Io(io::Error::new(kind, format!("writing the image: {err}")))
}

fn invalid_path(path: &str, reason: impl Into<String>) -> IsoError {
    IsoError::InvalidPath {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// Writes a complete image to `out`. Directories are implied by the paths.
///
/// `volume_id` is the label (`cidata`, `config-2`, ...): 1 to 32 ASCII
/// letters, digits, `_`, `-`, `.`, `+` or inner spaces; it is stored verbatim
/// in the primary descriptor and (first 16 characters) in the Joliet one.
///
/// Paths must be relative, '/'-separated, without empty, `.` or `..`
/// components, at most 8 components deep, unique, and no path may be both a
/// file and a parent directory of another file. See the module documentation
/// for the per-name rules. Invalid input is reported before anything is
/// written to `out`.
///
/// The output depends only on the label and the set of files (not on their
/// order in `files`) and is byte-identical across runs.
pub fn write_iso<W: Write>(
    out: &mut W,
    volume_id: &str,
    files: &[IsoFile],
) -> Result<(), IsoError> {
    if volume_id_problem(volume_id).is_some() {
        return Err(IsoError::InvalidVolumeId(volume_id.to_string()));
    }
    let tree = Tree::build(files)?;
    let layout = Layout::plan(&tree)?;
    let metadata = layout.metadata(&tree, volume_id);
    out.write_all(&metadata).map_err(write_failed)?;
    let zeros = [0u8; SECTOR_SIZE];
    for &index in &layout.data_order {
        let data = &files[index].data;
        out.write_all(data).map_err(write_failed)?;
        let padding = (SECTOR_SIZE - data.len() % SECTOR_SIZE) % SECTOR_SIZE;
        out.write_all(&zeros[..padding]).map_err(write_failed)?;
    }
    out.flush().map_err(write_failed)?;
    Ok(())
}

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
    files.sort_by(|a, b| a.path.cmp(&b.path));
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
        names.sort();
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

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

fn volume_id_allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+' | ' ')
}

/// Returns why `id` cannot be used as a volume label, or `None` if it can.
fn volume_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("it is empty".into());
    }
    if let Some(c) = id.chars().find(|&c| !volume_id_allowed(c)) {
        return Some(format!("character {c:?} is not allowed"));
    }
    if id.len() > MAX_VOLUME_ID_LEN {
        return Some(format!(
            "it is {} characters long, at most {MAX_VOLUME_ID_LEN} fit",
            id.len()
        ));
    }
    if id.starts_with(' ') || id.ends_with(' ') {
        return Some("leading or trailing spaces would be lost (the field is space padded)".into());
    }
    None
}

fn depth_reason() -> String {
    format!(
        "directories are nested too deeply: ISO 9660 allows {MAX_DIRECTORY_LEVELS} directory \
         levels including the root, i.e. at most {} directories above a file",
        MAX_DIRECTORY_LEVELS - 1
    )
}

/// Checks one path component; returns why it cannot be stored.
fn component_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it has an empty component (a leading, trailing or doubled '/')".into());
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} components are not allowed"));
    }
    for c in name.chars() {
        if c.is_control() {
            return Some(format!(
                "the name {name:?} contains the control character {c:?}"
            ));
        }
        if JOLIET_FORBIDDEN.contains(&c) {
            return Some(format!(
                "the name {name:?} contains {c:?}, which Joliet does not allow \
                 (forbidden: * / : ; ? \\)"
            ));
        }
        if u32::from(c) > 0xFFFF {
            return Some(format!(
                "the name {name:?} contains {c:?}, which is outside the Unicode Basic \
                 Multilingual Plane and cannot be stored in a Joliet (UCS-2) name"
            ));
        }
    }
    let chars = name.chars().count();
    if chars > MAX_JOLIET_NAME_CHARS {
        return Some(format!(
            "the name {name:?} is {chars} characters long; Joliet allows at most \
             {MAX_JOLIET_NAME_CHARS}"
        ));
    }
    if name.ends_with('.') {
        return Some(format!(
            "the name {name:?} ends with '.', which Joliet readers strip; rename it"
        ));
    }
    None
}

/// Splits and validates a relative '/'-separated path.
fn split_path(path: &str) -> Result<Vec<&str>, IsoError> {
    if path.is_empty() {
        return Err(invalid_path(path, "the path is empty"));
    }
    if path.starts_with('/') {
        return Err(invalid_path(
            path,
            "absolute paths are not allowed; give the path relative to the image root, \
             e.g. \"openstack/latest/meta_data.json\"",
        ));
    }
    let components: Vec<&str> = path.split('/').collect();
    for component in &components {
        if let Some(reason) = component_problem(component) {
            return Err(invalid_path(path, reason));
        }
    }
    if components.len() > MAX_DIRECTORY_LEVELS {
        return Err(invalid_path(path, depth_reason()));
    }
    Ok(components)
}

// ---------------------------------------------------------------------------
// Directory tree
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Child {
    Dir(usize),
    File(usize),
}

struct DirNode {
    /// Index of the parent directory (the root is its own parent).
    parent: usize,
    /// Children by real name; `BTreeMap` keeps everything order independent.
    children: BTreeMap<String, Child>,
}

struct Tree<'a> {
    files: &'a [IsoFile],
    /// `dirs[0]` is the root.
    dirs: Vec<DirNode>,
    /// Indices into `files`, sorted by path: the order of the file data.
    sorted_files: Vec<usize>,
}

impl<'a> Tree<'a> {
    fn build(files: &'a [IsoFile]) -> Result<Self, IsoError> {
        let mut dirs = vec![DirNode {
            parent: 0,
            children: BTreeMap::new(),
        }];
        for (index, file) in files.iter().enumerate() {
            let components = split_path(&file.path)?;
            let size = file.data.len() as u64;
            if size > MAX_FILE_SIZE {
                return Err(IsoError::TooLarge {
                    what: format!("the size in bytes of {:?}", file.path),
                    size,
                    limit: MAX_FILE_SIZE,
                });
            }
            let Some((name, parents)) = components.split_last() else {
                return Err(invalid_path(&file.path, "the path is empty"));
            };
            let mut current = 0;
            for (depth, component) in parents.iter().enumerate() {
                current = match dirs[current].children.get(*component) {
                    Some(Child::Dir(dir)) => *dir,
                    Some(Child::File(_)) => {
                        return Err(invalid_path(
                            &file.path,
                            format!(
                                "its parent {:?} is also given as a file; a path cannot be \
                                 both a file and a directory",
                                parents[..=depth].join("/"),
                            ),
                        ));
                    }
                    None => {
                        let new = dirs.len();
                        dirs.push(DirNode {
                            parent: current,
                            children: BTreeMap::new(),
                        });
                        dirs[current]
                            .children
                            .insert((*component).to_string(), Child::Dir(new));
                        new
                    }
                };
            }
            match dirs[current].children.get(*name) {
                Some(Child::File(_)) => {
                    return Err(invalid_path(&file.path, "the same path is given twice"));
                }
                Some(Child::Dir(_)) => {
                    return Err(invalid_path(
                        &file.path,
                        "it is a file, but other paths use it as a directory",
                    ));
                }
                None => {
                    dirs[current]
                        .children
                        .insert((*name).to_string(), Child::File(index));
                }
            }
        }
        if dirs.len() as u64 > MAX_DIRECTORIES {
            return Err(IsoError::TooLarge {
                what: "the number of directories".into(),
                size: dirs.len() as u64,
                limit: MAX_DIRECTORIES,
            });
        }
        let mut sorted_files: Vec<usize> = (0..files.len()).collect();
        sorted_files.sort_by(|&a, &b| files[a].path.cmp(&files[b].path));
        Ok(Tree {
            files,
            dirs,
            sorted_files,
        })
    }
}

// ---------------------------------------------------------------------------
// Identifiers and ordering
// ---------------------------------------------------------------------------

/// Sort key of a directory record (ECMA-119 9.3): the file name, then the
/// extension, each compared as if padded with spaces; the version numbers
/// are all 1. The recorded identifier breaks remaining ties.
#[derive(Debug)]
struct SortKey {
    name: Vec<u16>,
    ext: Vec<u16>,
}

fn padded_cmp(a: &[u16], b: &[u16]) -> Ordering {
    let len = a.len().max(b.len());
    for i in 0..len {
        let x = a.get(i).copied().unwrap_or(0x20);
        let y = b.get(i).copied().unwrap_or(0x20);
        match x.cmp(&y) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    Ordering::Equal
}

/// One directory record (other than `.` and `..`) in one hierarchy.
struct Record {
    /// File identifier bytes as recorded.
    ident: Vec<u8>,
    key: SortKey,
    child: Child,
}

fn record_cmp(a: &Record, b: &Record) -> Ordering {
    padded_cmp(&a.key.name, &b.key.name)
        .then_with(|| padded_cmp(&a.key.ext, &b.key.ext))
        .then_with(|| a.ident.cmp(&b.ident))
}

/// Maps a character to an ISO 9660 d-character (`A-Z 0-9 _`).
fn d_char(c: char) -> char {
    match c {
        'a'..='z' => c.to_ascii_uppercase(),
        'A'..='Z' | '0'..='9' | '_' => c,
        _ => '_',
    }
}

/// Splits a real file name into name and extension at the last '.', unless
/// that '.' is the first character (".bashrc" has no extension).
fn split_extension(name: &str) -> (&str, &str) {
    match name.rfind('.') {
        Some(dot) if dot > 0 => (&name[..dot], &name[dot + 1..]),
        _ => (name, ""),
    }
}

/// The 8.3 (files) or 8 character (directories) level 1 name of `name`,
/// before any uniqueness mangling.
fn natural_primary_name(name: &str, is_dir: bool) -> (String, String) {
    let (base, ext) = if is_dir {
        (name, "")
    } else {
        split_extension(name)
    };
    let mut base: String = base.chars().map(d_char).take(8).collect();
    let ext: String = ext.chars().map(d_char).take(3).collect();
    if base.is_empty() {
        base.push('_');
    }
    (base, ext)
}

/// The namespace key of a level 1 name: "NAME" or "NAME.EXT". A directory
/// `FOO` and an extension-less file `FOO.;1` share a key, because readers
/// that strip `;1` and a trailing '.' would show both as `foo`.
fn primary_key(base: &str, ext: &str) -> String {
    if ext.is_empty() {
        base.to_string()
    } else {
        format!("{base}.{ext}")
    }
}

fn ascii_units(s: &str) -> Vec<u16> {
    s.bytes().map(u16::from).collect()
}

/// The primary (ISO 9660 level 1) records of one directory, sorted.
///
/// Names are made unique deterministically: entries are taken in order of
/// their real names; each keeps its natural 8.3 name unless an earlier entry
/// (or any natural name) already has it, in which case the smallest number
/// that gives a free name replaces the tail of the name part
/// (`USER_DAT` -> `USER_DA1`, ..., `USER_D10`).
fn primary_records(dir: &DirNode) -> Result<Vec<Record>, IsoError> {
    let candidates: Vec<(String, String, Child)> = dir
        .children
        .iter()
        .map(|(name, child)| {
            let (base, ext) = natural_primary_name(name, matches!(child, Child::Dir(_)));
            (base, ext, *child)
        })
        .collect();
    let mut taken: HashSet<String> = HashSet::new();
    let mut names: Vec<Option<String>> = Vec::with_capacity(candidates.len());
    for (base, ext, _) in &candidates {
        if taken.insert(primary_key(base, ext)) {
            names.push(Some(base.clone()));
        } else {
            names.push(None);
        }
    }
    let mut next_suffix: HashMap<(String, String), u32> = HashMap::new();
    for (slot, (base, ext, _)) in names.iter_mut().zip(&candidates) {
        if slot.is_some() {
            continue;
        }
        let counter = next_suffix.entry((base.clone(), ext.clone())).or_insert(1);
        loop {
            let n = *counter;
            if n > MAX_MANGLE_SUFFIX {
                return Err(IsoError::TooLarge {
                    what: format!("the number of names in one directory that shorten to {base:?}"),
                    size: u64::from(n),
                    limit: u64::from(MAX_MANGLE_SUFFIX),
                });
            }
            *counter = n + 1;
            let digits = n.to_string();
            let keep = 8usize.saturating_sub(digits.len()).min(base.len());
            let candidate = format!("{}{digits}", &base[..keep]);
            if taken.insert(primary_key(&candidate, ext)) {
                *slot = Some(candidate);
                break;
            }
        }
    }
    let mut records = Vec::with_capacity(candidates.len());
    for (name, (_, ext, child)) in names.into_iter().zip(candidates) {
        let base = name.unwrap_or_default();
        let ident = match child {
            Child::Dir(_) => base.clone().into_bytes(),
            Child::File(_) => format!("{base}.{ext};1").into_bytes(),
        };
        records.push(Record {
            ident,
            key: SortKey {
                name: ascii_units(&base),
                ext: ascii_units(&ext),
            },
            child,
        });
    }
    records.sort_by(record_cmp);
    Ok(records)
}

fn ucs2(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

fn ucs2_be(units: &[u16]) -> Vec<u8> {
    units.iter().flat_map(|u| u.to_be_bytes()).collect()
}

/// The Joliet records of one directory, sorted: real names in UCS-2 big
/// endian, without the `;1` version suffix (like genisoimage; readers accept
/// both, and tools such as `isoinfo -J -x /user-data` look names up exactly).
fn joliet_records(dir: &DirNode) -> Vec<Record> {
    let mut records: Vec<Record> = dir
        .children
        .iter()
        .map(|(name, child)| {
            let (ident, key) = match child {
                Child::Dir(_) => {
                    let units = ucs2(name);
                    (
                        ucs2_be(&units),
                        SortKey {
                            name: units,
                            ext: Vec::new(),
                        },
                    )
                }
                Child::File(_) => {
                    let (base, ext) = split_extension(name);
                    let ident = ucs2_be(&ucs2(name));
                    (
                        ident,
                        SortKey {
                            name: ucs2(base),
                            ext: ucs2(ext),
                        },
                    )
                }
            };
            Record {
                ident,
                key,
                child: *child,
            }
        })
        .collect();
    records.sort_by(record_cmp);
    records
}

// ---------------------------------------------------------------------------
// Layout
// ---------------------------------------------------------------------------

/// Length of a directory record with an identifier of `ident_len` bytes
/// (ECMA-119 9.1: 33 fixed bytes, identifier, padding to an even length).
fn record_len(ident_len: usize) -> usize {
    33 + ident_len + usize::from(ident_len.is_multiple_of(2))
}

/// Length of a path table record (ECMA-119 9.4).
fn path_record_len(ident_len: usize) -> usize {
    8 + ident_len + ident_len % 2
}

/// Sectors needed by a directory extent holding `.`, `..` and `records`,
/// with no record crossing a sector boundary (ECMA-119 6.8.1.1).
fn extent_sectors(records: &[Record]) -> u64 {
    let mut sectors = 1;
    let mut used = 2 * record_len(1);
    for record in records {
        let len = record_len(record.ident.len());
        if used + len > SECTOR_SIZE {
            sectors += 1;
            used = 0;
        }
        used += len;
    }
    sectors
}

fn sectors_for(bytes: u64) -> u64 {
    bytes.div_ceil(SECTOR_SIZE_U64)
}

/// One directory hierarchy (primary or Joliet) with its on-disk layout.
struct Hierarchy {
    joliet: bool,
    /// Sorted records of each directory, indexed like `Tree::dirs`.
    records: Vec<Vec<Record>>,
    /// Directory indices in path table order (ECMA-119 6.9.1).
    order: Vec<usize>,
    /// Path table directory number of each directory (1-based).
    number: Vec<u16>,
    /// Identifier of each directory as recorded in this hierarchy.
    idents: Vec<Vec<u8>>,
    /// Extent size of each directory, in sectors.
    sectors: Vec<u64>,
    /// Extent location of each directory.
    location: Vec<u64>,
    path_table_size: u64,
    path_table_l: u64,
    path_table_m: u64,
}

impl Hierarchy {
    fn new(tree: &Tree<'_>, joliet: bool) -> Result<Self, IsoError> {
        let mut records = Vec::with_capacity(tree.dirs.len());
        for dir in &tree.dirs {
            records.push(if joliet {
                joliet_records(dir)
            } else {
                primary_records(dir)?
            });
        }
        let count = tree.dirs.len();
        let mut idents = vec![vec![0u8]; count];
        for dir_records in &records {
            for record in dir_records {
                if let Child::Dir(dir) = record.child {
                    idents[dir] = record.ident.clone();
                }
            }
        }
        // Breadth first with children in record order is exactly the path
        // table order: by level, then parent number, then identifier.
        let mut order = vec![0];
        let mut next = 0;
        while next < order.len() {
            let dir = order[next];
            for record in &records[dir] {
                if let Child::Dir(child) = record.child {
                    order.push(child);
                }
            }
            next += 1;
        }
        let mut number = vec![0u16; count];
        for (position, &dir) in order.iter().enumerate() {
            number[dir] = u16::try_from(position + 1).map_err(|_| IsoError::TooLarge {
                what: "the number of directories".into(),
                size: count as u64,
                limit: MAX_DIRECTORIES,
            })?;
        }
        let sectors = records.iter().map(|r| extent_sectors(r)).collect();
        let path_table_size = idents
            .iter()
            .map(|ident| path_record_len(ident.len()) as u64)
            .sum();
        Ok(Hierarchy {
            joliet,
            records,
            order,
            number,
            idents,
            sectors,
            location: vec![0; count],
            path_table_size,
            path_table_l: 0,
            path_table_m: 0,
        })
    }

    fn place_path_tables(&mut self, next: &mut u64) {
        let sectors = sectors_for(self.path_table_size);
        self.path_table_l = *next;
        self.path_table_m = *next + sectors;
        *next += 2 * sectors;
    }

    fn place_directories(&mut self, next: &mut u64) {
        for &dir in &self.order {
            self.location[dir] = *next;
            *next += self.sectors[dir];
        }
    }

    fn path_table(&self, tree: &Tree<'_>, big_endian: bool) -> Vec<u8> {
        let mut table = Vec::with_capacity(self.path_table_size as usize);
        for &dir in &self.order {
            let ident = &self.idents[dir];
            // Lengths and locations were checked against their limits in
            // `Layout::plan`.
            let location = self.location[dir] as u32;
            let parent = self.number[tree.dirs[dir].parent];
            table.push(ident.len() as u8);
            table.push(0);
            if big_endian {
                table.extend_from_slice(&location.to_be_bytes());
                table.extend_from_slice(&parent.to_be_bytes());
            } else {
                table.extend_from_slice(&location.to_le_bytes());
                table.extend_from_slice(&parent.to_le_bytes());
            }
            table.extend_from_slice(ident);
            if ident.len() % 2 == 1 {
                table.push(0);
            }
        }
        table
    }

    /// The extent of directory `dir`.
    fn directory_extent(&self, tree: &Tree<'_>, layout: &Layout, dir: usize) -> Vec<u8> {
        let size = self.sectors[dir] as usize * SECTOR_SIZE;
        let mut extent = Vec::with_capacity(size);
        let parent = tree.dirs[dir].parent;
        push_record(
            &mut extent,
            &[0],
            self.location[dir],
            self.sectors[dir] * SECTOR_SIZE_U64,
            true,
        );
        push_record(
            &mut extent,
            &[1],
            self.location[parent],
            self.sectors[parent] * SECTOR_SIZE_U64,
            true,
        );
        for record in &self.records[dir] {
            let len = record_len(record.ident.len());
            if extent.len() % SECTOR_SIZE + len > SECTOR_SIZE {
                extent.resize(extent.len().next_multiple_of(SECTOR_SIZE), 0);
            }
            match record.child {
                Child::Dir(child) => push_record(
                    &mut extent,
                    &record.ident,
                    self.location[child],
                    self.sectors[child] * SECTOR_SIZE_U64,
                    true,
                ),
                Child::File(file) => push_record(
                    &mut extent,
                    &record.ident,
                    layout.file_location[file],
                    tree.files[file].data.len() as u64,
                    false,
                ),
            }
        }
        extent.resize(size, 0);
        extent
    }

    fn volume_descriptor(&self, volume_id: &str, total_sectors: u64) -> Vec<u8> {
        let mut d = vec![0u8; SECTOR_SIZE];
        d[0] = if self.joliet { 2 } else { 1 };
        d[1..6].copy_from_slice(b"CD001");
        d[6] = 1;
        let text = |d: &mut [u8], start: usize, end: usize, value: &str| {
            fill_text(&mut d[start..end], value, self.joliet);
        };
        text(&mut d, 8, 40, ""); // system identifier
        if self.joliet {
            let label: String = volume_id.chars().take(JOLIET_VOLUME_ID_CHARS).collect();
            text(&mut d, 40, 72, &label);
            // Escape sequence for UCS-2 level 3.
            d[88..91].copy_from_slice(b"%/E");
        } else {
            text(&mut d, 40, 72, volume_id);
        }
        d[80..88].copy_from_slice(&both_u32(total_sectors as u32));
        d[120..124].copy_from_slice(&both_u16(1)); // volume set size
        d[124..128].copy_from_slice(&both_u16(1)); // volume sequence number
        d[128..132].copy_from_slice(&both_u16(SECTOR_SIZE as u16));
        d[132..140].copy_from_slice(&both_u32(self.path_table_size as u32));
        d[140..144].copy_from_slice(&(self.path_table_l as u32).to_le_bytes());
        d[148..152].copy_from_slice(&(self.path_table_m as u32).to_be_bytes());
        let mut root = Vec::with_capacity(34);
        push_record(
            &mut root,
            &[0],
            self.location[0],
            self.sectors[0] * SECTOR_SIZE_U64,
            true,
        );
        d[156..190].copy_from_slice(&root);
        text(&mut d, 190, 318, ""); // volume set identifier
        text(&mut d, 318, 446, ""); // publisher
        text(&mut d, 446, 574, ""); // data preparer
        text(&mut d, 574, 702, ""); // application
        text(&mut d, 702, 739, ""); // copyright file
        text(&mut d, 739, 776, ""); // abstract file
        text(&mut d, 776, 813, ""); // bibliographic file
        d[813..830].copy_from_slice(VOLUME_DATE); // creation
        d[830..847].copy_from_slice(VOLUME_DATE); // modification
        d[847..864].copy_from_slice(NO_DATE); // expiration
        d[864..881].copy_from_slice(NO_DATE); // effective
        d[881] = 1; // file structure version
        d
    }
}

/// Writes `value` into a space-padded text field: ASCII for the primary
/// descriptor, UCS-2 big endian for Joliet (an odd last byte stays zero).
fn fill_text(field: &mut [u8], value: &str, joliet: bool) {
    if joliet {
        let mut units = value.encode_utf16().chain(std::iter::repeat(0x20));
        for pair in field.chunks_exact_mut(2) {
            let unit = units.next().unwrap_or(0x20);
            pair.copy_from_slice(&unit.to_be_bytes());
        }
    } else {
        let mut bytes = value.bytes().chain(std::iter::repeat(b' '));
        for byte in field.iter_mut() {
            *byte = bytes.next().unwrap_or(b' ');
        }
    }
}

fn both_u16(value: u16) -> [u8; 4] {
    let le = value.to_le_bytes();
    let be = value.to_be_bytes();
    [le[0], le[1], be[0], be[1]]
}

fn both_u32(value: u32) -> [u8; 8] {
    let le = value.to_le_bytes();
    let be = value.to_be_bytes();
    [le[0], le[1], le[2], le[3], be[0], be[1], be[2], be[3]]
}

/// Appends a directory record (ECMA-119 9.1). Callers guarantee that the
/// identifier is at most 132 bytes and that location and size fit 32 bits.
fn push_record(buf: &mut Vec<u8>, ident: &[u8], location: u64, size: u64, is_dir: bool) {
    buf.push(record_len(ident.len()) as u8);
    buf.push(0); // extended attribute record length
    buf.extend_from_slice(&both_u32(location as u32));
    buf.extend_from_slice(&both_u32(size as u32));
    buf.extend_from_slice(&RECORD_DATE);
    buf.push(if is_dir { 0x02 } else { 0x00 });
    buf.push(0); // file unit size
    buf.push(0); // interleave gap size
    buf.extend_from_slice(&both_u16(1)); // volume sequence number
    buf.push(ident.len() as u8);
    buf.extend_from_slice(ident);
    if ident.len().is_multiple_of(2) {
        buf.push(0);
    }
}

/// Where everything goes.
struct Layout {
    primary: Hierarchy,
    joliet: Hierarchy,
    /// Extent location of each input file (0 for empty files).
    file_location: Vec<u64>,
    /// Input indices of the non-empty files, in on-disk order.
    data_order: Vec<usize>,
    /// First sector after all metadata (= first file data sector).
    metadata_sectors: u64,
    total_sectors: u64,
}

impl Layout {
    fn plan(tree: &Tree<'_>) -> Result<Self, IsoError> {
        let mut primary = Hierarchy::new(tree, false)?;
        let mut joliet = Hierarchy::new(tree, true)?;
        let mut next = FIRST_FREE_SECTOR;
        primary.place_path_tables(&mut next);
        joliet.place_path_tables(&mut next);
        primary.place_directories(&mut next);
        joliet.place_directories(&mut next);
        let metadata_sectors = next;
        let mut file_location = vec![0; tree.files.len()];
        let mut data_order = Vec::new();
        for &index in &tree.sorted_files {
            let len = tree.files[index].data.len() as u64;
            if len > 0 {
                file_location[index] = next;
                next += sectors_for(len);
                data_order.push(index);
            }
        }
        let limit = u64::from(u32::MAX);
        for hierarchy in [&primary, &joliet] {
            if hierarchy.path_table_size > limit {
                return Err(IsoError::TooLarge {
                    what: "the path table size in bytes".into(),
                    size: hierarchy.path_table_size,
                    limit,
                });
            }
            let largest_directory = hierarchy.sectors.iter().max().copied().unwrap_or(0);
            if largest_directory * SECTOR_SIZE_U64 > limit {
                return Err(IsoError::TooLarge {
                    what: "the size in bytes of one directory".into(),
                    size: largest_directory * SECTOR_SIZE_U64,
                    limit,
                });
            }
        }
        if next > limit {
            return Err(IsoError::TooLarge {
                what: "the image size in bytes".into(),
                size: next.saturating_mul(SECTOR_SIZE_U64),
                limit: limit * SECTOR_SIZE_U64,
            });
        }
        Ok(Layout {
            primary,
            joliet,
            file_location,
            data_order,
            metadata_sectors,
            total_sectors: next,
        })
    }

    /// Everything before the first file data sector.
    fn metadata(&self, tree: &Tree<'_>, volume_id: &str) -> Vec<u8> {
        let mut image = vec![0u8; self.metadata_sectors as usize * SECTOR_SIZE];
        let mut put = |sector: u64, bytes: &[u8]| {
            let start = sector as usize * SECTOR_SIZE;
            image[start..start + bytes.len()].copy_from_slice(bytes);
        };
        put(
            PVD_SECTOR,
            &self
                .primary
                .volume_descriptor(volume_id, self.total_sectors),
        );
        put(
            PVD_SECTOR + 1,
            &self.joliet.volume_descriptor(volume_id, self.total_sectors),
        );
        let mut terminator = vec![0u8; SECTOR_SIZE];
        terminator[0] = 255;
        terminator[1..6].copy_from_slice(b"CD001");
        terminator[6] = 1;
        put(PVD_SECTOR + 2, &terminator);
        for hierarchy in [&self.primary, &self.joliet] {
            put(hierarchy.path_table_l, &hierarchy.path_table(tree, false));
            put(hierarchy.path_table_m, &hierarchy.path_table(tree, true));
            for &dir in &hierarchy.order {
                put(
                    hierarchy.location[dir],
                    &hierarchy.directory_extent(tree, self, dir),
                );
            }
        }
        image
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    use std::process::{Command, Output};
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    // -- helpers ------------------------------------------------------------

    static NEXT_TEMP: AtomicUsize = AtomicUsize::new(0);

    /// A unique path under the temp dir, removed (file or tree) on drop.
    struct TempPath(PathBuf);

    impl TempPath {
        fn new(tag: &str) -> Self {
            let n = NEXT_TEMP.fetch_add(1, AtomicOrdering::Relaxed);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let name = format!("iso9660-test-{}-{n}-{nanos}-{tag}", std::process::id());
            TempPath(std::env::temp_dir().join(name))
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            if fs::symlink_metadata(&self.0).is_ok_and(|m| m.is_dir()) {
                // xorriso extracts read-only trees: make them removable.
                let _ = Command::new("chmod")
                    .arg("-R")
                    .arg("u+rwx")
                    .arg(&self.0)
                    .output();
                let _ = fs::remove_dir_all(&self.0);
            } else {
                let _ = fs::remove_file(&self.0);
            }
        }
    }

    fn file(path: &str, data: impl AsRef<[u8]>) -> IsoFile {
        IsoFile {
            path: path.to_string(),
            data: data.as_ref().to_vec(),
        }
    }

    fn pattern(len: usize, seed: u32) -> Vec<u8> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
            .collect()
    }

    fn image_bytes(label: &str, files: &[IsoFile]) -> Vec<u8> {
        let mut out = Vec::new();
        write_iso(&mut out, label, files).unwrap_or_else(|e| panic!("write_iso failed: {e}"));
        out
    }

    /// Writes the image to a temp file (through `fs::File`) and checks that
    /// it equals the in-memory rendering.
    fn image_file(tag: &str, label: &str, files: &[IsoFile]) -> (TempPath, Vec<u8>) {
        let bytes = image_bytes(label, files);
        let path = TempPath::new(&format!("{tag}.iso"));
        let mut out = fs::File::create(path.path()).expect("create image file");
        write_iso(&mut out, label, files).expect("write_iso to file");
        drop(out);
        assert!(
            fs::read(path.path()).expect("read image back") == bytes,
            "file output differs from in-memory output"
        );
        (path, bytes)
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

    fn expected_map(files: &[IsoFile]) -> BTreeMap<String, Vec<u8>> {
        files
            .iter()
            .map(|f| (f.path.clone(), f.data.clone()))
            .collect()
    }

    fn expected_dirs(files: &[IsoFile]) -> BTreeSet<String> {
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

    // -- an independent reader that checks the on-disk structure -------------

    #[derive(Debug, Clone)]
    struct RawRecord {
        ident: Vec<u8>,
        location: u32,
        size: u32,
        is_dir: bool,
    }

    fn both32(b: &[u8]) -> u32 {
        let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let be = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        assert_eq!(le, be, "both-endian 32-bit field disagrees");
        le
    }

    fn both16(b: &[u8]) -> u16 {
        let le = u16::from_le_bytes([b[0], b[1]]);
        let be = u16::from_be_bytes([b[2], b[3]]);
        assert_eq!(le, be, "both-endian 16-bit field disagrees");
        le
    }

    fn sector(img: &[u8], n: u32) -> &[u8] {
        &img[n as usize * SECTOR_SIZE..][..SECTOR_SIZE]
    }

    fn parse_record(r: &[u8]) -> RawRecord {
        let len = r[0] as usize;
        let id_len = r[32] as usize;
        assert_eq!(
            len,
            33 + id_len + usize::from(id_len.is_multiple_of(2)),
            "record length"
        );
        assert_eq!(r[1], 0, "extended attribute length");
        assert_eq!(&r[18..25], &RECORD_DATE, "recording date");
        assert_eq!(both16(&r[28..32]), 1, "volume sequence number");
        RawRecord {
            ident: r[33..33 + id_len].to_vec(),
            location: both32(&r[2..10]),
            size: both32(&r[10..18]),
            is_dir: r[25] & 2 != 0,
        }
    }

    fn read_directory(img: &[u8], location: u32, size: u32) -> Vec<RawRecord> {
        assert!(
            size > 0 && (size as usize).is_multiple_of(SECTOR_SIZE),
            "directory size {size}"
        );
        let mut records = Vec::new();
        for s in 0..size / SECTOR_SIZE as u32 {
            let data = sector(img, location + s);
            let mut off = 0;
            while off < SECTOR_SIZE {
                let len = data[off] as usize;
                if len == 0 {
                    assert!(
                        data[off..].iter().all(|&b| b == 0),
                        "junk after last record"
                    );
                    break;
                }
                assert!(off + len <= SECTOR_SIZE, "record crosses a sector boundary");
                records.push(parse_record(&data[off..off + len]));
                off += len;
            }
        }
        records
    }

    fn units_of(ident: &[u8], joliet: bool) -> Vec<u16> {
        if joliet {
            assert!(ident.len().is_multiple_of(2), "odd Joliet identifier");
            ident
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect()
        } else {
            ident.iter().map(|&b| u16::from(b)).collect()
        }
    }

    /// (name, extension) as ECMA-119 9.3 orders them.
    fn spec_key(r: &RawRecord, joliet: bool) -> (Vec<u16>, Vec<u16>) {
        let mut u = units_of(&r.ident, joliet);
        if r.is_dir {
            return (u, Vec::new());
        }
        if u.ends_with(&[u16::from(b';'), u16::from(b'1')]) {
            u.truncate(u.len() - 2);
        }
        match u.iter().rposition(|&c| c == u16::from(b'.')) {
            Some(p) if p > 0 || !joliet => (u[..p].to_vec(), u[p + 1..].to_vec()),
            _ => (u, Vec::new()),
        }
    }

    fn is_d_chars(s: &str) -> bool {
        s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    }

    fn record_name(r: &RawRecord, joliet: bool) -> String {
        if joliet {
            return String::from_utf16(&units_of(&r.ident, true)).expect("Joliet name is UCS-2");
        }
        let s = String::from_utf8(r.ident.clone()).expect("ASCII identifier");
        if r.is_dir {
            assert!(
                (1..=8).contains(&s.len()) && is_d_chars(&s),
                "bad level 1 directory name {s:?}"
            );
            return s;
        }
        let stem = s.strip_suffix(";1").expect("file version ;1");
        let (name, ext) = stem.split_once('.').expect("file name has a '.'");
        assert!(
            name.len() <= 8 && ext.len() <= 3 && !(name.is_empty() && ext.is_empty()),
            "bad 8.3 name {s:?}"
        );
        assert!(
            is_d_chars(name) && is_d_chars(ext),
            "non d-characters in {s:?}"
        );
        stem.to_string()
    }

    #[derive(Debug, Default)]
    struct ReadHierarchy {
        files: BTreeMap<String, Vec<u8>>,
        dirs: BTreeSet<String>,
        dir_sectors: BTreeMap<String, u32>,
    }

    fn read_hierarchy(img: &[u8], vd_sector: u32, joliet: bool) -> ReadHierarchy {
        let vd = sector(img, vd_sector);
        let root = parse_record(&vd[156..190]);
        assert_eq!(root.ident, vec![0]);
        assert!(root.is_dir);
        let pt_size = both32(&vd[132..140]) as usize;
        let l_loc = u32::from_le_bytes([vd[140], vd[141], vd[142], vd[143]]);
        let m_loc = u32::from_be_bytes([vd[148], vd[149], vd[150], vd[151]]);
        // (path, location, size, parent location, parent size, level)
        let mut dirs = vec![(
            String::new(),
            root.location,
            root.size,
            root.location,
            root.size,
            1,
        )];
        // Expected path table: (identifier, location, parent number).
        let mut path_table = vec![(vec![0u8], root.location, 1u16)];
        let mut out = ReadHierarchy::default();
        let mut i = 0;
        while i < dirs.len() {
            let (path, loc, size, parent_loc, parent_size, level) = dirs[i].clone();
            out.dir_sectors
                .insert(path.clone(), size / SECTOR_SIZE as u32);
            let records = read_directory(img, loc, size);
            assert!(records.len() >= 2, "missing . and .. in {path:?}");
            let (dot, dotdot) = (&records[0], &records[1]);
            assert_eq!(
                (&dot.ident[..], dot.location, dot.size),
                (&[0u8][..], loc, size)
            );
            assert_eq!(
                (&dotdot.ident[..], dotdot.location, dotdot.size),
                (&[1u8][..], parent_loc, parent_size)
            );
            assert!(dot.is_dir && dotdot.is_dir);
            let entries = &records[2..];
            for pair in entries.windows(2) {
                let (a, b) = (spec_key(&pair[0], joliet), spec_key(&pair[1], joliet));
                let order = padded_cmp(&a.0, &b.0).then_with(|| padded_cmp(&a.1, &b.1));
                assert_eq!(
                    order,
                    Ordering::Less,
                    "records out of order in {path:?}: {pair:?}"
                );
            }
            for r in entries {
                let name = record_name(r, joliet);
                let child = if path.is_empty() {
                    name
                } else {
                    format!("{path}/{name}")
                };
                if r.is_dir {
                    assert!(level < MAX_DIRECTORY_LEVELS, "{child:?} is too deep");
                    dirs.push((child.clone(), r.location, r.size, loc, size, level + 1));
                    path_table.push((r.ident.clone(), r.location, (i + 1) as u16));
                    assert!(out.dirs.insert(child), "duplicate directory");
                } else {
                    let data = if r.size == 0 {
                        Vec::new()
                    } else {
                        img[r.location as usize * SECTOR_SIZE..][..r.size as usize].to_vec()
                    };
                    assert!(out.files.insert(child, data).is_none(), "duplicate file");
                }
            }
            i += 1;
        }
        for (location, big_endian) in [(l_loc, false), (m_loc, true)] {
            let table = &img[location as usize * SECTOR_SIZE..][..pt_size];
            let mut parsed = Vec::new();
            let mut off = 0;
            while off < table.len() {
                let len = table[off] as usize;
                let (loc, parent) = if big_endian {
                    (
                        u32::from_be_bytes(table[off + 2..off + 6].try_into().expect("4 bytes")),
                        u16::from_be_bytes([table[off + 6], table[off + 7]]),
                    )
                } else {
                    (
                        u32::from_le_bytes(table[off + 2..off + 6].try_into().expect("4 bytes")),
                        u16::from_le_bytes([table[off + 6], table[off + 7]]),
                    )
                };
                parsed.push((table[off + 8..off + 8 + len].to_vec(), loc, parent));
                off += 8 + len + len % 2;
            }
            assert_eq!(parsed, path_table, "path table (big endian: {big_endian})");
        }
        out
    }

    /// Checks the whole image with the reader above; returns the primary
    /// (8.3) and Joliet hierarchies.
    fn check_structure(
        img: &[u8],
        label: &str,
        files: &[IsoFile],
    ) -> (ReadHierarchy, ReadHierarchy) {
        assert_eq!(img.len() % SECTOR_SIZE, 0);
        assert!(
            img[..16 * SECTOR_SIZE].iter().all(|&b| b == 0),
            "system area"
        );
        let pvd = sector(img, 16);
        let svd = sector(img, 17);
        let term = sector(img, 18);
        assert_eq!(&pvd[..7], b"\x01CD001\x01");
        assert_eq!(&svd[..7], b"\x02CD001\x01");
        assert_eq!(&term[..7], b"\xffCD001\x01");
        assert_eq!(&svd[88..91], b"%/E", "Joliet escape sequence");
        for vd in [pvd, svd] {
            assert_eq!(
                both32(&vd[80..88]) as usize * SECTOR_SIZE,
                img.len(),
                "volume space size"
            );
            assert_eq!(both16(&vd[120..124]), 1);
            assert_eq!(both16(&vd[124..128]), 1);
            assert_eq!(both16(&vd[128..132]), 2048);
            assert_eq!(&vd[813..830], VOLUME_DATE);
            assert_eq!(vd[881], 1);
        }
        assert_eq!(&pvd[40..72], format!("{label:<32}").as_bytes());
        let joliet_label: Vec<u16> = format!("{:<16}", label.chars().take(16).collect::<String>())
            .encode_utf16()
            .collect();
        assert_eq!(units_of(&svd[40..72], true), joliet_label);
        let primary = read_hierarchy(img, 16, false);
        let joliet = read_hierarchy(img, 17, true);
        assert_eq!(joliet.files, expected_map(files), "Joliet tree content");
        assert_eq!(joliet.dirs, expected_dirs(files), "Joliet directories");
        let mut a: Vec<&Vec<u8>> = primary.files.values().collect();
        let mut b: Vec<&Vec<u8>> = joliet.files.values().collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "primary and Joliet trees hold different data");
        assert_eq!(primary.dirs.len(), joliet.dirs.len());
        (primary, joliet)
    }

    // -- checks with the real tools -------------------------------------------

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
                .map(|c| u32::from(c) as u8)
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

    fn check_everything(tag: &str, label: &str, files: &[IsoFile]) -> (TempPath, Vec<u8>) {
        let (iso, bytes) = image_file(tag, label, files);
        check_structure(&bytes, label, files);
        check_with_tools(iso.path(), label, files);
        (iso, bytes)
    }

    fn nocloud_files() -> Vec<IsoFile> {
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

    fn configmap_files(count: usize) -> Vec<IsoFile> {
        (0..count)
            .map(|i| {
                file(
                    &format!("application-setting-{i:03}.properties"),
                    pattern(200 + (i * 37) % 3000, i as u32),
                )
            })
            .collect()
    }

    // -- tests --------------------------------------------------------------

    #[test]
    fn nocloud_cidata_image() {
        let files = nocloud_files();
        let (iso, bytes) = check_everything("nocloud", "cidata", &files);
        let (primary, _) = check_structure(&bytes, "cidata", &files);
        let names: Vec<&String> = primary.files.keys().collect();
        assert_eq!(names, ["META_DAT.", "NETWORK_.", "USER_DAT."]);
        let label = stdout(&run(Command::new("blkid")
            .args(["-o", "value", "-s", "LABEL"])
            .arg(iso.path())));
        println!("blkid LABEL of the NoCloud image: {}", label.trim_end());
    }

    #[test]
    fn configdrive_image_with_directories() {
        let files = vec![
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
        ];
        let (iso, _) = check_everything("configdrive", "config-2", &files);
        let label = stdout(&run(Command::new("blkid")
            .args(["-o", "value", "-s", "LABEL"])
            .arg(iso.path())));
        println!("blkid LABEL of the ConfigDrive image: {}", label.trim_end());
    }

    #[test]
    fn empty_file_list() {
        let (_, bytes) = check_everything("empty", "cidata", &[]);
        // 16 system sectors, 3 descriptors, 4 path tables, 2 root directories.
        assert_eq!(bytes.len(), 25 * SECTOR_SIZE);
    }

    #[test]
    fn zero_length_and_multi_sector_files() {
        let files = vec![
            file("empty", ""),
            file("dir/also-empty", ""),
            file("one-byte", "x"),
            file("sector-minus-one", pattern(2047, 1)),
            file("exactly-one-sector", pattern(2048, 2)),
            file("sector-plus-one", pattern(2049, 3)),
            file("dir/big.bin", pattern(3 * 1024 * 1024 + 5, 4)),
        ];
        check_everything("sizes", "cidata", &files);
    }

    #[test]
    fn many_files_in_one_directory() {
        let mut files = configmap_files(300);
        for f in &mut files {
            f.path = format!("conf.d/{}", f.path);
        }
        files.push(file("README", "many files"));
        let (_, bytes) = check_everything("many", "cfgdata", &files);
        let (primary, joliet) = check_structure(&bytes, "cfgdata", &files);
        // All 300 long names shorten to APPLICAT.PRO and must be made unique.
        assert_eq!(primary.files.len(), 301);
        assert!(
            primary.dir_sectors["CONF_D"] > 1,
            "{:?}",
            primary.dir_sectors
        );
        assert!(joliet.dir_sectors["conf.d"] > 1, "{:?}", joliet.dir_sectors);
    }

    #[test]
    fn deepest_allowed_nesting() {
        let deep = "l2/l3/l4/l5/l6/l7/l8/file.txt";
        let files = vec![file(deep, "deep"), file("l2/l3/side", "side")];
        let (_, bytes) = check_everything("deep", "cidata", &files);
        let (primary, _) = check_structure(&bytes, "cidata", &files);
        assert!(primary.dirs.contains("L2/L3/L4/L5/L6/L7/L8"));
        let too_deep = [file("l2/l3/l4/l5/l6/l7/l8/l9/file.txt", "x")];
        match write_iso(&mut io::sink(), "cidata", &too_deep) {
            Err(IsoError::InvalidPath { reason, .. }) => assert!(reason.contains("too deep")),
            other => panic!("expected InvalidPath, got {other:?}"),
        }
    }

    #[test]
    fn names_colliding_after_mangling() {
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
        let files: Vec<IsoFile> = names
            .iter()
            .enumerate()
            .map(|(i, n)| file(n, format!("content of {n} #{i}")))
            .collect();
        let (_, bytes) = check_everything("collide", "cidata", &files);
        let (primary, _) = check_structure(&bytes, "cidata", &files);
        let root: Vec<&String> = primary.files.keys().filter(|k| !k.contains('/')).collect();
        assert_eq!(root.len(), 15, "{root:?}");
        // The first name in byte order keeps the natural 8.3 name.
        assert!(primary.files.contains_key("USER_DAT."));
        assert!(primary.files.contains_key("USER_DA1."));
    }

    #[test]
    fn non_ascii_names_in_joliet() {
        let files = vec![
            file("données/café.txt", "bonjour"),
            file("日本語/ファイル.txt", "nihongo"),
            file("Grüße", "hallo"),
            file("space in name.txt", "spaces"),
            file(&"x".repeat(64), "longest name"),
            file(
                &format!("{}/{}", "é".repeat(64), "ü".repeat(60)),
                "long non-ascii",
            ),
        ];
        check_everything("unicode", "cidata", &files);
    }

    #[test]
    fn invalid_paths_are_rejected() {
        let cases: Vec<(&str, String)> = vec![
            ("", "empty".into()),
            ("/etc/passwd", "absolute".into()),
            ("a//b", "empty component".into()),
            ("a/", "empty component".into()),
            ("../x", "\"..\"".into()),
            ("a/../b", "\"..\"".into()),
            ("./a", "\".\"".into()),
            (".", "\".\"".into()),
            ("a:b", "':'".into()),
            ("a\\b", "'\\\\'".into()),
            ("semi;1", "';'".into()),
            ("tab\there", "control".into()),
            ("nul\0", "control".into()),
            ("emoji-\u{1F600}", "Basic Multilingual Plane".into()),
            ("trailing.", "ends with '.'".into()),
            (&*"y".repeat(65).leak(), "at most 64".into()),
            ("1/2/3/4/5/6/7/8/9", "too deep".into()),
        ];
        for (path, needle) in cases {
            let files = [file(path, "x")];
            match write_iso(&mut Vec::new(), "cidata", &files) {
                Err(err @ IsoError::InvalidPath { .. }) => {
                    let msg = err.to_string();
                    assert!(msg.contains(&needle), "{path:?}: {msg}");
                    assert!(err.source().is_none());
                }
                other => panic!("{path:?}: expected InvalidPath, got {other:?}"),
            }
        }
        let conflicts = [
            vec![file("a", "1"), file("a", "2")],
            vec![file("a", "1"), file("a/b", "2")],
            vec![file("a/b", "1"), file("a", "2")],
        ];
        for files in conflicts {
            let mut out = Vec::new();
            let err = write_iso(&mut out, "cidata", &files).expect_err("conflict");
            assert!(matches!(err, IsoError::InvalidPath { .. }), "{err:?}");
            assert!(out.is_empty(), "nothing may be written for invalid input");
        }
    }

    #[test]
    fn volume_ids() {
        for bad in [
            "",
            " cidata",
            "cidata ",
            "ci/data",
            "cidätä",
            "a*",
            &"v".repeat(33),
        ] {
            match write_iso(&mut io::sink(), bad, &[]) {
                Err(err @ IsoError::InvalidVolumeId(_)) => {
                    let msg = err.to_string();
                    assert!(msg.contains("volume label"), "{msg}");
                }
                other => panic!("{bad:?}: expected InvalidVolumeId, got {other:?}"),
            }
        }
        // The longest label: Joliet holds 16 characters, blkid merges the rest
        // from the primary descriptor.
        let long = "CONFIG-DRIVE_with.long+label-32c";
        assert_eq!(long.len(), 32);
        check_everything("label32", long, &[file("a", "b")]);
        check_everything("labelcase", "CIDATA", &[file("a", "b")]);
    }

    #[test]
    fn output_is_deterministic_and_order_independent() {
        let mut files = configmap_files(50);
        files.extend(nocloud_files());
        files.push(file("sub/dir/file", pattern(5000, 9)));
        let first = image_bytes("cidata", &files);
        let second = image_bytes("cidata", &files);
        assert!(first == second, "two runs differ");
        files.reverse();
        let reversed = image_bytes("cidata", &files);
        assert!(first == reversed, "input order changed the image");
        let (a, a_bytes) = image_file("det-a", "cidata", &files);
        let (b, b_bytes) = image_file("det-b", "cidata", &files);
        assert!(a_bytes == first && b_bytes == first);
        assert!(fs::read(a.path()).expect("a") == fs::read(b.path()).expect("b"));
    }

    #[test]
    fn too_large_file() {
        // calloc'ed, so this costs address space, not memory.
        let files = [IsoFile {
            path: "huge.img".into(),
            data: vec![0u8; MAX_FILE_SIZE as usize + 1],
        }];
        let mut out = Vec::new();
        match write_iso(&mut out, "cidata", &files) {
            Err(err @ IsoError::TooLarge { .. }) => {
                let msg = err.to_string();
                assert!(
                    msg.contains("huge.img") && msg.contains("4294967295"),
                    "{msg}"
                );
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(out.is_empty());
    }

    #[test]
    fn write_errors_are_reported() {
        struct Failing;
        impl Write for Failing {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let err = write_iso(&mut Failing, "cidata", &nocloud_files()).expect_err("must fail");
        assert!(matches!(&err, IsoError::Io(e) if e.kind() == io::ErrorKind::StorageFull));
        assert!(err.to_string().contains("disk full"), "{err}");
        assert!(err.source().is_some());
        let converted: IsoError = io::Error::other("x").into();
        assert!(matches!(converted, IsoError::Io(_)));
    }

    /// Random (but reproducible) inputs: never a panic, and every image that
    /// is produced passes the structural checks.
    #[test]
    fn random_inputs_never_panic() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pieces = [
            "a",
            "B",
            "c.d",
            "é",
            "日",
            ".",
            "..",
            "",
            "-",
            "_",
            " ",
            "*",
            ";1",
            "x.tar.gz",
            "\u{1F600}",
            "\0",
            "LONGNAME",
            "longname",
            "~",
            "%",
        ];
        let labels = ["cidata", "config-2", "", "x y", "ÿ", "CIDATA"];
        let (mut ok, mut rejected) = (0, 0);
        for _ in 0..400 {
            let count = (next() % 8) as usize;
            let mut files = Vec::new();
            for _ in 0..count {
                let depth = 1 + (next() % 10) as usize;
                let mut parts = Vec::new();
                for _ in 0..depth {
                    let n = 1 + (next() % 3) as usize;
                    let part: String = (0..n)
                        .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                        .collect();
                    parts.push(part);
                }
                let mut path = parts.join("/");
                if next() % 20 == 0 {
                    path.insert(0, '/');
                }
                files.push(file(
                    &path,
                    pattern((next() % 5000) as usize, next() as u32),
                ));
            }
            let label = labels[(next() % labels.len() as u64) as usize];
            let mut out = Vec::new();
            match write_iso(&mut out, label, &files) {
                Ok(()) => {
                    check_structure(&out, label, &files);
                    ok += 1;
                }
                Err(err) => {
                    assert!(!err.to_string().is_empty());
                    assert!(out.is_empty());
                    rejected += 1;
                }
            }
        }
        assert!(ok > 20 && rejected > 20, "ok {ok}, rejected {rejected}");
    }

    fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, link).expect("symlink");
    }

    #[test]
    fn collect_dir_follows_kubernetes_atomic_writer_layout() {
        let outside = TempPath::new("outside");
        fs::create_dir_all(outside.path().join("dir")).expect("outside dir");
        fs::write(outside.path().join("secret"), "host file").expect("outside file");
        fs::write(outside.path().join("dir/x"), "host dir file").expect("outside file");

        let vol = TempPath::new("configmap");
        let root = vol.path();
        let ts = root.join("..2024_01_01_00_00_00.123456789");
        fs::create_dir_all(ts.join("nested")).expect("mkdir");
        fs::write(ts.join("user-data"), "#cloud-config\n").expect("write");
        fs::write(ts.join("meta-data"), "instance-id: x\n").expect("write");
        fs::write(ts.join("nested/deep.txt"), "deep").expect("write");
        symlink("..2024_01_01_00_00_00.123456789", root.join("..data"));
        symlink("..data/user-data", root.join("user-data"));
        symlink("..data/meta-data", root.join("meta-data"));
        symlink("..data/nested", root.join("nested"));
        fs::write(root.join(".hidden"), "dot file").expect("write");
        fs::create_dir_all(root.join("plain/dir")).expect("mkdir");
        fs::write(root.join("plain/dir/file.txt"), "plain").expect("write");
        fs::create_dir_all(root.join("empty-dir")).expect("mkdir");
        symlink(outside.path().join("secret"), root.join("outside-file"));
        symlink(outside.path().join("dir"), root.join("outside-dir"));
        symlink("..data/missing", root.join("dangling"));
        symlink(".", root.join("loop"));
        symlink("../..", root.join("plain/dir/up"));
        symlink("self", root.join("self"));
        run(Command::new("mkfifo").arg(root.join("fifo")));

        let files = collect_dir(root).expect("collect_dir");
        let got: Vec<(&str, &[u8])> = files
            .iter()
            .map(|f| (f.path.as_str(), &f.data[..]))
            .collect();
        assert_eq!(
            got,
            vec![
                (".hidden", &b"dot file"[..]),
                ("meta-data", b"instance-id: x\n"),
                ("nested/deep.txt", b"deep"),
                ("plain/dir/file.txt", b"plain"),
                ("user-data", b"#cloud-config\n"),
            ]
        );
        // Through a symlink to the volume, as a pod sees it.
        let alias = TempPath::new("alias");
        symlink(root, alias.path());
        assert_eq!(collect_dir(alias.path()).expect("via symlink"), files);

        check_everything("collected", "cfgdata", &files);
    }

    #[test]
    fn collect_dir_errors() {
        let missing = TempPath::new("missing");
        match collect_dir(missing.path()) {
            Err(err @ IsoError::Io(_)) => {
                let msg = err.to_string();
                assert!(msg.contains(&missing.path().display().to_string()), "{msg}");
                assert!(err.source().is_some());
            }
            other => panic!("expected Io, got {other:?}"),
        }
        let plain = TempPath::new("plain-file");
        fs::write(plain.path(), "x").expect("write");
        assert!(matches!(
            collect_dir(plain.path()),
            Err(IsoError::InvalidPath { .. })
        ));

        let deep = TempPath::new("deep");
        let mut dir = deep.path().to_path_buf();
        for level in 2..=9 {
            dir.push(format!("l{level}"));
        }
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("f"), "x").expect("write");
        match collect_dir(deep.path()) {
            Err(IsoError::InvalidPath { reason, .. }) => assert!(reason.contains("too deep")),
            other => panic!("expected InvalidPath, got {other:?}"),
        }
        let bad = TempPath::new("non-utf8");
        fs::create_dir_all(bad.path()).expect("mkdir");
        fs::write(
            bad.path().join(OsString::from_vec(b"bad\xff".to_vec())),
            "x",
        )
        .expect("write");
        assert!(matches!(
            collect_dir(bad.path()),
            Err(IsoError::InvalidPath { .. })
        ));
    }

    /// Mounts an image with the Linux kernel's isofs driver when the machine
    /// allows it (root, loop devices, iso9660 support), else says why not.
    #[test]
    fn linux_kernel_reads_image() {
        let mut files = nocloud_files();
        files.push(file("openstack/latest/meta_data.json", "{}"));
        files.push(file("日本語.txt", "nihongo"));
        files.push(file("big", pattern(100_000, 5)));
        let (iso, _) = image_file("mount", "cidata", &files);
        let skip = |why: &str| println!("NOTE: kernel mount check skipped: {why}");
        if !Path::new("/dev/loop-control").exists() {
            return skip("no loop devices (/dev/loop-control missing)");
        }
        let mountpoint = TempPath::new("mnt");
        fs::create_dir_all(mountpoint.path()).expect("mkdir");
        let output = match Command::new("mount")
            .args(["-t", "iso9660", "-o", "loop,ro"])
            .arg(iso.path())
            .arg(mountpoint.path())
            .output()
        {
            Ok(output) => output,
            Err(e) => return skip(&format!("cannot run mount: {e}")),
        };
        if !output.status.success() {
            let err = String::from_utf8_lossy(&output.stderr).into_owned();
            let kernel_has_isofs = fs::read_to_string("/proc/filesystems")
                .is_ok_and(|s| s.lines().any(|l| l.trim_end().ends_with("iso9660")));
            let unavailable = err.contains("unknown filesystem type")
                || err.contains("loop device")
                || err.contains("only root")
                || err.contains("ermission denied");
            if unavailable || !kernel_has_isofs {
                return skip(&format!(
                    "{} (kernel lists iso9660: {kernel_has_isofs})",
                    err.trim()
                ));
            }
            panic!("mount failed: {err}");
        }
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg(self.0).output();
            }
        }
        let _guard = Unmount(mountpoint.path());
        let mut got = BTreeMap::new();
        collect_tree(mountpoint.path(), "", &mut got);
        assert_eq!(got, expected_map(&files), "kernel view of the image");
        println!("kernel mount check passed");
    }

    fn time_it(iterations: u32, mut f: impl FnMut()) -> Duration {
        f(); // warm up
        let start = Instant::now();
        for _ in 0..iterations {
            f();
        }
        start.elapsed() / iterations
    }

    #[test]
    fn timing_typical_images() {
        let nocloud = nocloud_files();
        let configmap = configmap_files(200);
        let bytes: usize = configmap.iter().map(|f| f.data.len()).sum();
        let mut sizes = (0, 0);
        let nocloud_mem = time_it(200, || {
            let mut out = Vec::new();
            write_iso(&mut out, "cidata", &nocloud).expect("nocloud");
            sizes.0 = out.len();
        });
        let configmap_mem = time_it(50, || {
            let mut out = Vec::new();
            write_iso(&mut out, "cfgdata", &configmap).expect("configmap");
            sizes.1 = out.len();
        });
        let target = TempPath::new("timing.iso");
        let nocloud_file = time_it(20, || {
            let mut out = io::BufWriter::new(fs::File::create(target.path()).expect("create"));
            write_iso(&mut out, "cidata", &nocloud).expect("nocloud");
        });
        let configmap_file = time_it(20, || {
            let mut out = io::BufWriter::new(fs::File::create(target.path()).expect("create"));
            write_iso(&mut out, "cfgdata", &configmap).expect("configmap");
        });
        println!(
            "timing: NoCloud (3 files, {} byte image): {nocloud_mem:?} in memory, \
             {nocloud_file:?} to a file",
            sizes.0
        );
        println!(
            "timing: configMap (200 files, {bytes} data bytes, {} byte image): \
             {configmap_mem:?} in memory, {configmap_file:?} to a file",
            sizes.1
        );
        // Generous bounds: only catch pathological slowness.
        assert!(nocloud_mem < Duration::from_millis(50));
        assert!(configmap_mem < Duration::from_millis(500));
    }
}
