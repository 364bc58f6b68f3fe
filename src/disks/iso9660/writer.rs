//! Serialising a planned layout: volume descriptors, path tables, directory
//! records, then the file data.

use std::io::Write;

use super::layout::{Hierarchy, Layout, record_len};
use super::names::volume_id_problem;
use super::tree::{Child, Tree};
use super::{
    IsoError, IsoFile, JOLIET_VOLUME_ID_CHARS, NO_DATE, PVD_SECTOR, RECORD_DATE, SECTOR_SIZE,
    SECTOR_SIZE_U64, VOLUME_DATE, write_failed,
};

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

impl Hierarchy {
    fn path_table(&self, tree: &Tree<'_>, big_endian: bool) -> Vec<u8> {
        let mut table = Vec::with_capacity(in_memory(self.path_table_size));
        for &dir in &self.order {
            let ident = &self.idents[dir];
            // Lengths and locations were checked against their limits in
            // `Layout::plan`.
            let location = field32(self.location[dir]);
            let parent = self.number[tree.dirs[dir].parent];
            table.push(field8(ident.len()));
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
        let size = in_memory(self.sectors[dir]) * SECTOR_SIZE;
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
        d[80..88].copy_from_slice(&both_u32(field32(total_sectors)));
        d[120..124].copy_from_slice(&both_u16(1)); // volume set size
        d[124..128].copy_from_slice(&both_u16(1)); // volume sequence number
        d[128..132].copy_from_slice(&both_u16(field16(SECTOR_SIZE)));
        d[132..140].copy_from_slice(&both_u32(field32(self.path_table_size)));
        d[140..144].copy_from_slice(&field32(self.path_table_l).to_le_bytes());
        d[148..152].copy_from_slice(&field32(self.path_table_m).to_be_bytes());
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

// On-disc fields. `Layout::plan` refuses every tree whose identifiers,
// locations and sizes would not fit them, so these conversions never
// saturate; saturating (rather than wrapping) keeps a broken invariant from
// becoming a plausible wrong value.

fn field32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn field16(value: usize) -> u16 {
    u16::try_from(value).unwrap_or(u16::MAX)
}

fn field8(value: usize) -> u8 {
    u8::try_from(value).unwrap_or(u8::MAX)
}

/// A size or offset of the metadata built in memory (at most a few MiB).
fn in_memory(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// Appends a directory record (ECMA-119 9.1). Callers guarantee that the
/// identifier is at most 132 bytes and that location and size fit 32 bits.
fn push_record(buf: &mut Vec<u8>, ident: &[u8], location: u64, size: u64, is_dir: bool) {
    buf.push(field8(record_len(ident.len())));
    buf.push(0); // extended attribute record length
    buf.extend_from_slice(&both_u32(field32(location)));
    buf.extend_from_slice(&both_u32(field32(size)));
    buf.extend_from_slice(&RECORD_DATE);
    buf.push(if is_dir { 0x02 } else { 0x00 });
    buf.push(0); // file unit size
    buf.push(0); // interleave gap size
    buf.extend_from_slice(&both_u16(1)); // volume sequence number
    buf.push(field8(ident.len()));
    buf.extend_from_slice(ident);
    if ident.len().is_multiple_of(2) {
        buf.push(0);
    }
}

impl Layout {
    /// Everything before the first file data sector.
    fn metadata(&self, tree: &Tree<'_>, volume_id: &str) -> Vec<u8> {
        let mut image = vec![0u8; in_memory(self.metadata_sectors) * SECTOR_SIZE];
        let mut put = |sector: u64, bytes: &[u8]| {
            let start = in_memory(sector) * SECTOR_SIZE;
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
