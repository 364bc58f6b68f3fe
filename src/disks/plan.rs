//! The disk plan: what must exist and what must be created before a domain
//! that uses the VMI's disks can be defined.

use std::path::PathBuf;

use super::iso9660::IsoFile;

/// What kind of filesystem object a [`DiskStep::RequireExisting`] expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    File,
    BlockDevice,
    Dir,
}

impl PathKind {
    pub(crate) fn noun(self) -> &'static str {
        match self {
            PathKind::File => "file",
            PathKind::BlockDevice => "block device",
            PathKind::Dir => "directory",
        }
    }
}

/// A file whose content is read when the plan runs (cloud-init `secretRef`):
/// the first of `names` that exists in `dir` becomes `iso_path` in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFile {
    pub iso_path: String,
    pub dir: PathBuf,
    pub names: Vec<String>,
}

/// The files of an ISO image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsoContents {
    /// Generated content (cloud-init user-data, meta-data, ...).
    Files(Vec<IsoFile>),
    /// Every file of a mounted directory (configMap, secret, downwardAPI,
    /// serviceAccount), following Kubernetes' `..data` symlinks.
    Dir(PathBuf),
    /// Generated files plus files read from secret directories at prepare time.
    FilesWithSecrets {
        files: Vec<IsoFile>,
        secrets: Vec<SecretFile>,
    },
}

/// One step. `what` names the VMI volume or feature the step is for, so
/// errors can say which part of the VMI to fix (e.g. `containerDisk volume
/// "rootdisk"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskStep {
    /// `path` must exist and be of `kind` before anything is created.
    RequireExisting {
        path: PathBuf,
        kind: PathKind,
        what: String,
    },
    /// `dir` must hold a file named one of `names` (compared without case),
    /// e.g. a sysprep volume's `autounattend.xml`; checked with the
    /// `RequireExisting` steps, before anything is created.
    RequireOneOf {
        dir: PathBuf,
        names: Vec<String>,
        what: String,
    },
    /// Creates the directory and its missing parents.
    MakeDir { path: PathBuf, what: String },
    /// `qemu-img create -f qcow2 -F <format> -b <backing> <path>`; the format is
    /// detected with `qemu-img info` when not given. An existing overlay is
    /// kept (as KubeVirt does), so the guest's writes survive a re-sync.
    CreateOverlay {
        path: PathBuf,
        backing: PathBuf,
        backing_format: Option<String>,
        what: String,
    },
    /// A sparse raw file of `size` bytes; an existing file is kept.
    CreateSparseFile {
        path: PathBuf,
        size: u64,
        what: String,
    },
    /// An empty qcow2 image of `size` bytes; an existing image is kept.
    CreateQcow2 {
        path: PathBuf,
        size: u64,
        what: String,
    },
    /// A qcow2 image holding only metadata whose data is the raw image
    /// `data_file`, byte for byte (qcow2's `data-file` with
    /// `data-file-raw`): what changed block tracking needs of a raw disk,
    /// since the qcow2 metadata can carry persistent dirty bitmaps
    /// (KubeVirt's CBT overlay). An existing image is kept, and with it
    /// the bitmaps of earlier checkpoints.
    CreateDataFileOverlay {
        path: PathBuf,
        data_file: PathBuf,
        what: String,
    },
    /// The downward metrics' vhostmd disk image with an empty page; an
    /// existing image is kept (a running QEMU may have it open, and the
    /// launcher rewrites it in place).
    CreateMetricsDisk { path: PathBuf, what: String },
    /// Writes an ISO 9660 + Joliet image (always rewritten).
    WriteIso {
        path: PathBuf,
        volume_id: String,
        contents: IsoContents,
        /// The image's size in bytes, zero-filled or cut at its end; `None`:
        /// as written. A migration target's cloud-init ISO takes the size of
        /// the source's (virt-handler's `status.volumeStatus`), which the
        /// block copy fills: QEMU copies a disk only onto one of its size.
        size: Option<u64>,
        what: String,
    },
}

impl DiskStep {
    /// The path the step checks or creates.
    pub fn path(&self) -> &PathBuf {
        match self {
            DiskStep::RequireExisting { path, .. }
            | DiskStep::RequireOneOf { dir: path, .. }
            | DiskStep::MakeDir { path, .. }
            | DiskStep::CreateOverlay { path, .. }
            | DiskStep::CreateSparseFile { path, .. }
            | DiskStep::CreateQcow2 { path, .. }
            | DiskStep::CreateDataFileOverlay { path, .. }
            | DiskStep::CreateMetricsDisk { path, .. }
            | DiskStep::WriteIso { path, .. } => path,
        }
    }

    /// The VMI volume or feature the step belongs to.
    pub fn what(&self) -> &str {
        match self {
            DiskStep::RequireExisting { what, .. }
            | DiskStep::RequireOneOf { what, .. }
            | DiskStep::MakeDir { what, .. }
            | DiskStep::CreateOverlay { what, .. }
            | DiskStep::CreateSparseFile { what, .. }
            | DiskStep::CreateQcow2 { what, .. }
            | DiskStep::CreateDataFileOverlay { what, .. }
            | DiskStep::CreateMetricsDisk { what, .. }
            | DiskStep::WriteIso { what, .. } => what,
        }
    }
}

/// The ordered steps for one VMI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskPlan {
    pub steps: Vec<DiskStep>,
}

impl DiskPlan {
    pub fn push(&mut self, step: DiskStep) {
        self.steps.push(step);
    }

    /// Adds a `MakeDir` unless the same directory is already planned.
    pub fn make_dir(&mut self, path: PathBuf, what: &str) {
        let planned = self
            .steps
            .iter()
            .any(|step| matches!(step, DiskStep::MakeDir { path: p, .. } if *p == path));
        if !planned {
            self.steps.push(DiskStep::MakeDir {
                path,
                what: what.to_string(),
            });
        }
    }

    /// Adds a `RequireExisting` check.
    pub fn require(&mut self, path: PathBuf, kind: PathKind, what: &str) {
        self.steps.push(DiskStep::RequireExisting {
            path,
            kind,
            what: what.to_string(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}
