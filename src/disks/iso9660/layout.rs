//! Where every descriptor, path table, directory extent and file goes.

use super::names::{Record, joliet_records, primary_records};
use super::tree::{Child, Tree};
use super::{FIRST_FREE_SECTOR, IsoError, MAX_DIRECTORIES, SECTOR_SIZE, SECTOR_SIZE_U64};

// Layout
// ---------------------------------------------------------------------------

/// Length of a directory record with an identifier of `ident_len` bytes
/// (ECMA-119 9.1: 33 fixed bytes, identifier, padding to an even length).
pub(super) fn record_len(ident_len: usize) -> usize {
    33 + ident_len + usize::from(ident_len.is_multiple_of(2))
}

/// Length of a path table record (ECMA-119 9.4).
pub(super) fn path_record_len(ident_len: usize) -> usize {
    8 + ident_len + ident_len % 2
}

/// Sectors needed by a directory extent holding `.`, `..` and `records`,
/// with no record crossing a sector boundary (ECMA-119 6.8.1.1).
pub(super) fn extent_sectors(records: &[Record]) -> u64 {
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

pub(super) fn sectors_for(bytes: u64) -> u64 {
    bytes.div_ceil(SECTOR_SIZE_U64)
}

/// One directory hierarchy (primary or Joliet) with its on-disk layout.
pub(super) struct Hierarchy {
    pub(super) joliet: bool,
    /// Sorted records of each directory, indexed like `Tree::dirs`.
    pub(super) records: Vec<Vec<Record>>,
    /// Directory indices in path table order (ECMA-119 6.9.1).
    pub(super) order: Vec<usize>,
    /// Path table directory number of each directory (1-based).
    pub(super) number: Vec<u16>,
    /// Identifier of each directory as recorded in this hierarchy.
    pub(super) idents: Vec<Vec<u8>>,
    /// Extent size of each directory, in sectors.
    pub(super) sectors: Vec<u64>,
    /// Extent location of each directory.
    pub(super) location: Vec<u64>,
    pub(super) path_table_size: u64,
    pub(super) path_table_l: u64,
    pub(super) path_table_m: u64,
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
}

/// Where everything goes.
pub(super) struct Layout {
    pub(super) primary: Hierarchy,
    pub(super) joliet: Hierarchy,
    /// Extent location of each input file (0 for empty files).
    pub(super) file_location: Vec<u64>,
    /// Input indices of the non-empty files, in on-disk order.
    pub(super) data_order: Vec<usize>,
    /// First sector after all metadata (= first file data sector).
    pub(super) metadata_sectors: u64,
    pub(super) total_sectors: u64,
}

impl Layout {
    pub(super) fn plan(tree: &Tree<'_>) -> Result<Self, IsoError> {
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
}
