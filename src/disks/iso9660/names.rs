//! Names: what a path or volume label may contain, the level 1 (8.3) and
//! Joliet (UCS-2) forms of a name, and the order of directory records.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use super::tree::{Child, DirNode};
use super::{
    IsoError, JOLIET_FORBIDDEN, MAX_DIRECTORY_LEVELS, MAX_JOLIET_NAME_CHARS, MAX_MANGLE_SUFFIX,
    MAX_VOLUME_ID_LEN, invalid_path,
};

pub(super) fn volume_id_allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+' | ' ')
}

/// Returns why `id` cannot be used as a volume label, or `None` if it can.
pub(super) fn volume_id_problem(id: &str) -> Option<String> {
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

pub(super) fn depth_reason() -> String {
    format!(
        "directories are nested too deeply: ISO 9660 allows {MAX_DIRECTORY_LEVELS} directory \
         levels including the root, i.e. at most {} directories above a file",
        MAX_DIRECTORY_LEVELS - 1
    )
}

/// Checks one path component; returns why it cannot be stored.
pub(super) fn component_problem(name: &str) -> Option<String> {
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
pub(super) fn split_path(path: &str) -> Result<Vec<&str>, IsoError> {
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
// Identifiers and ordering
// ---------------------------------------------------------------------------

/// Sort key of a directory record (ECMA-119 9.3): the file name, then the
/// extension, each compared as if padded with spaces; the version numbers
/// are all 1. The recorded identifier breaks remaining ties.
#[derive(Debug)]
pub(super) struct SortKey {
    pub(super) name: Vec<u16>,
    pub(super) ext: Vec<u16>,
}

pub(super) fn padded_cmp(a: &[u16], b: &[u16]) -> Ordering {
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
pub(super) struct Record {
    /// File identifier bytes as recorded.
    pub(super) ident: Vec<u8>,
    pub(super) key: SortKey,
    pub(super) child: Child,
}

pub(super) fn record_cmp(a: &Record, b: &Record) -> Ordering {
    padded_cmp(&a.key.name, &b.key.name)
        .then_with(|| padded_cmp(&a.key.ext, &b.key.ext))
        .then_with(|| a.ident.cmp(&b.ident))
}

/// Maps a character to an ISO 9660 d-character (`A-Z 0-9 _`).
pub(super) fn d_char(c: char) -> char {
    match c {
        'a'..='z' => c.to_ascii_uppercase(),
        'A'..='Z' | '0'..='9' | '_' => c,
        _ => '_',
    }
}

/// Splits a real file name into name and extension at the last '.', unless
/// that '.' is the first character (".bashrc" has no extension).
pub(super) fn split_extension(name: &str) -> (&str, &str) {
    match name.rfind('.') {
        Some(dot) if dot > 0 => (&name[..dot], &name[dot + 1..]),
        _ => (name, ""),
    }
}

/// The 8.3 (files) or 8 character (directories) level 1 name of `name`,
/// before any uniqueness mangling.
pub(super) fn natural_primary_name(name: &str, is_dir: bool) -> (String, String) {
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
pub(super) fn primary_key(base: &str, ext: &str) -> String {
    if ext.is_empty() {
        base.to_string()
    } else {
        format!("{base}.{ext}")
    }
}

pub(super) fn ascii_units(s: &str) -> Vec<u16> {
    s.bytes().map(u16::from).collect()
}

/// The primary (ISO 9660 level 1) records of one directory, sorted.
///
/// Names are made unique deterministically: entries are taken in order of
/// their real names; each keeps its natural 8.3 name unless an earlier entry
/// (or any natural name) already has it, in which case the smallest number
/// that gives a free name replaces the tail of the name part
/// (`USER_DAT` -> `USER_DA1`, ..., `USER_D10`).
pub(super) fn primary_records(dir: &DirNode) -> Result<Vec<Record>, IsoError> {
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
    records.sort_unstable_by(record_cmp);
    Ok(records)
}

pub(super) fn ucs2(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

pub(super) fn ucs2_be(units: &[u16]) -> Vec<u8> {
    units.iter().flat_map(|u| u.to_be_bytes()).collect()
}

/// The Joliet records of one directory, sorted: real names in UCS-2 big
/// endian, without the `;1` version suffix (like genisoimage; readers accept
/// both, and tools such as `isoinfo -J -x /user-data` look names up exactly).
pub(super) fn joliet_records(dir: &DirNode) -> Vec<Record> {
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
    records.sort_unstable_by(record_cmp);
    records
}
