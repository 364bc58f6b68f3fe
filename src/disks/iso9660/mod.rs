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
//!
//! # Modules
//!
//! [`write_iso`] validates and arranges the files (`names`: what a name may
//! contain and its 8.3 / Joliet forms; `tree`: the directories the paths
//! imply), plans where everything goes (`layout`), then serialises it
//! (`writer`). [`collect_dir`] (`collect`) reads a mounted volume directory.

mod collect;
mod layout;
mod names;
mod tree;
mod writer;

use std::error::Error;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use collect::collect_dir;
pub use writer::write_iso;

use names::volume_id_problem;

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

#[cfg(test)]
mod cases;
#[cfg(test)]
mod tests;
