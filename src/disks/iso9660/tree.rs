//! The directory tree implied by the files' paths.

use std::collections::BTreeMap;

use super::names::split_path;
use super::{IsoError, IsoFile, MAX_DIRECTORIES, MAX_FILE_SIZE, invalid_path};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Child {
    Dir(usize),
    File(usize),
}

pub(super) struct DirNode {
    /// Index of the parent directory (the root is its own parent).
    pub(super) parent: usize,
    /// Children by real name; `BTreeMap` keeps everything order independent.
    pub(super) children: BTreeMap<String, Child>,
}

pub(super) struct Tree<'a> {
    pub(super) files: &'a [IsoFile],
    /// `dirs[0]` is the root.
    pub(super) dirs: Vec<DirNode>,
    /// Indices into `files`, sorted by path: the order of the file data.
    pub(super) sorted_files: Vec<usize>,
}

impl<'a> Tree<'a> {
    pub(super) fn build(files: &'a [IsoFile]) -> Result<Self, IsoError> {
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
        sorted_files.sort_unstable_by(|&a, &b| files[a].path.cmp(&files[b].path).then(a.cmp(&b)));
        Ok(Tree {
            files,
            dirs,
            sorted_files,
        })
    }
}
