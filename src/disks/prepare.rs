//! Executing a [`DiskPlan`] all-or-nothing.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::iso9660::{self, IsoError, IsoFile};
use super::plan::{DiskPlan, DiskStep, IsoContents, PathKind, SecretFile};
use super::qemu_img::{self, CommandFailure};
use crate::safe_fs;

/// How a disk step failed, for mapping to protocol error classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskErrorKind {
    /// A required image, device or directory is missing or of the wrong kind.
    Missing,
    /// The input is unusable (e.g. a base image that has its own backing file).
    Invalid,
    /// Creating or writing a file failed.
    Io,
    /// `qemu-img` failed, timed out or is not installed.
    Command,
}

/// A failed disk step. `message` names the path, the VMI volume and what to
/// do, and includes its cause's message (as `DirError` and `IsoError` do);
/// `cause` is the error behind it (the OS's, qemu-img's, the ISO writer's),
/// if one is, given by `source()`.
#[derive(Debug, Clone)]
pub struct DiskError {
    pub kind: DiskErrorKind,
    pub path: PathBuf,
    pub message: String,
    pub cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// Two errors are the same failure when they say the same of the same
/// path; the cause is part of the message.
impl PartialEq for DiskError {
    fn eq(&self, other: &DiskError) -> bool {
        self.kind == other.kind && self.path == other.path && self.message == other.message
    }
}

impl Eq for DiskError {}

impl fmt::Display for DiskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DiskError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|e| e as _)
    }
}

/// Knobs for [`prepare_with`]; [`prepare`] uses the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareOptions {
    /// `qemu-img` binary (default: looked up in PATH).
    pub qemu_img: PathBuf,
    /// Deadline for each external command.
    pub command_timeout: Duration,
}

impl Default for PrepareOptions {
    fn default() -> Self {
        PrepareOptions {
            qemu_img: qemu_img::default_program(),
            command_timeout: Duration::from_secs(60),
        }
    }
}

/// Something [`prepare`] created or replaced, to be undone on rollback.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Created {
    File(PathBuf),
    Dir(PathBuf),
    /// `path` existed before (an earlier launcher's image) and was replaced;
    /// `previous` is a hard link to the old file, put back on rollback and
    /// removed when the prepare is kept.
    Replaced {
        path: PathBuf,
        previous: PathBuf,
    },
}

/// Mode of every file the launcher writes for a VMI: images and ISOs hold
/// the guest's data and the VMI's user data (passwords, keys), so only
/// their owner may read them. QEMU reads them as the launcher's user or
/// through libvirt's dynamic ownership.
pub const FILE_MODE: u32 = 0o600;
/// Mode of the directories a prepare creates (cloud-init-data/<ns>/<name>,
/// disk-data/<volume>, ...): traversable, writable only by the launcher.
pub const DIR_MODE: u32 = 0o755;

/// What a successful [`prepare`] created. Dropping it keeps everything
/// (and removes the saved copies of replaced files);
/// [`PreparedDisks::rollback`] undoes it: what it created is removed, what
/// it replaced is put back, and nothing that existed before is deleted.
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use = "call rollback() if the domain is not defined after all"]
pub struct PreparedDisks {
    created: Vec<Created>,
}

impl PreparedDisks {
    /// Paths this prepare created or replaced (files and directories), in
    /// creation order.
    pub fn created_paths(&self) -> Vec<&Path> {
        self.created
            .iter()
            .map(|created| match created {
                Created::File(path) | Created::Dir(path) | Created::Replaced { path, .. } => {
                    path.as_path()
                }
            })
            .collect()
    }

    /// Undoes this prepare, newest first: removes what it created (a
    /// directory only when empty) and restores what it replaced. Failures
    /// are logged, not returned, because rollback runs while another error
    /// is already being reported.
    pub fn rollback(mut self) {
        for created in std::mem::take(&mut self.created).into_iter().rev() {
            let (done, path, result) = match &created {
                Created::File(path) => ("removed", path, fs::remove_file(path)),
                Created::Dir(path) => ("removed", path, fs::remove_dir(path)),
                Created::Replaced { path, previous } => {
                    ("restored", path, fs::rename(previous, path))
                }
            };
            match result {
                Ok(()) => log::debug!("disks: {done} {}", path.display()),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => log::warn!("disks: could not roll back {}: {err}", path.display()),
            }
        }
    }
}

impl Drop for PreparedDisks {
    /// Kept: the saved copies of replaced files are no longer needed.
    fn drop(&mut self) {
        for created in &self.created {
            if let Created::Replaced { previous, .. } = created {
                remove_partial(previous);
            }
        }
    }
}

/// Runs the plan with default options. See [`prepare_with`].
pub fn prepare(plan: &DiskPlan) -> Result<PreparedDisks, DiskError> {
    prepare_with(plan, &PrepareOptions::default())
}

/// Checks every `RequireExisting` step, then runs the creations in order. On
/// failure everything created so far is removed and the error returned.
pub fn prepare_with(plan: &DiskPlan, options: &PrepareOptions) -> Result<PreparedDisks, DiskError> {
    for step in &plan.steps {
        match step {
            DiskStep::RequireExisting { path, kind, what } => check_exists(path, *kind, what)?,
            DiskStep::RequireOneOf { dir, names, what } => check_one_of(dir, names, what)?,
            _ => {}
        }
    }
    let mut prepared = PreparedDisks::default();
    for step in &plan.steps {
        if let Err(err) = run_step(step, options, &mut prepared) {
            prepared.rollback();
            return Err(err);
        }
    }
    Ok(prepared)
}

fn run_step(
    step: &DiskStep,
    options: &PrepareOptions,
    prepared: &mut PreparedDisks,
) -> Result<(), DiskError> {
    match step {
        DiskStep::RequireExisting { .. } | DiskStep::RequireOneOf { .. } => Ok(()),
        DiskStep::MakeDir { path, what } => make_dir(path, what, prepared),
        DiskStep::CreateOverlay {
            path,
            backing,
            backing_format,
            what,
        } => create_overlay(
            path,
            backing,
            backing_format.as_deref(),
            what,
            options,
            prepared,
        ),
        DiskStep::CreateSparseFile { path, size, what } => {
            create_sparse_file(path, *size, what, prepared)
        }
        DiskStep::CreateQcow2 { path, size, what } => {
            create_qcow2(path, *size, what, options, prepared)
        }
        DiskStep::CreateDataFileOverlay {
            path,
            data_file,
            what,
        } => create_data_file_overlay(path, data_file, what, options, prepared),
        DiskStep::WriteIso {
            path,
            volume_id,
            contents,
            what,
        } => write_iso(path, volume_id, contents, what, prepared),
        DiskStep::CreateMetricsDisk { path, what } => create_metrics_disk(path, what, prepared),
    }
}

fn check_exists(path: &Path, kind: PathKind, what: &str) -> Result<(), DiskError> {
    let missing = |detail: String, cause: Option<io::Error>| DiskError {
        kind: DiskErrorKind::Missing,
        path: path.to_path_buf(),
        message: format!("{what}: {} {}: {detail}", kind.noun(), path.display()),
        cause: cause.map(|e| Arc::new(e) as _),
    };
    let metadata = match fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(missing(
                format!("does not exist; {}", hint(kind)),
                Some(err),
            ));
        }
        Err(err) => return Err(missing(format!("cannot be accessed ({err})"), Some(err))),
    };
    let file_type = metadata.file_type();
    let matches = match kind {
        PathKind::File => file_type.is_file(),
        PathKind::BlockDevice => file_type.is_block_device(),
        PathKind::Dir => file_type.is_dir(),
    };
    if matches {
        Ok(())
    } else {
        Err(missing(
            format!("exists but is not a {}; {}", kind.noun(), hint(kind)),
            None,
        ))
    }
}

/// `dir` (a mounted volume) must contain a file named one of `names`.
fn check_one_of(dir: &Path, names: &[String], what: &str) -> Result<(), DiskError> {
    let missing = |detail: String, cause: Option<io::Error>| DiskError {
        kind: DiskErrorKind::Missing,
        path: dir.to_path_buf(),
        message: format!("{what}: directory {}: {detail}", dir.display()),
        cause: cause.map(|e| Arc::new(e) as _),
    };
    let entries =
        fs::read_dir(dir).map_err(|e| missing(format!("cannot be listed ({e})"), Some(e)))?;
    let found = entries.flatten().any(|entry| {
        let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
        names
            .iter()
            .any(|wanted| wanted.eq_ignore_ascii_case(&name))
    });
    if found {
        Ok(())
    } else {
        Err(missing(
            format!("holds neither {}", names.join(" nor ")),
            None,
        ))
    }
}

fn hint(kind: PathKind) -> &'static str {
    match kind {
        PathKind::File => "put the image file there (the launcher pulls and copies nothing)",
        PathKind::BlockDevice => "attach the block device at that path",
        PathKind::Dir => "mount or create the directory there",
    }
}

fn io_error(path: &Path, what: &str, action: &str, err: io::Error) -> DiskError {
    DiskError {
        kind: DiskErrorKind::Io,
        path: path.to_path_buf(),
        message: format!(
            "{what}: cannot {action} {}: {err}; check that the directory exists and is writable",
            path.display()
        ),
        cause: Some(Arc::new(err)),
    }
}

/// Creates `path` and its missing parents with mode [`DIR_MODE`] exactly
/// (never from the umask), remembering each level it made. A symlink or a
/// file where a directory belongs is refused, not followed.
fn make_dir(path: &Path, what: &str, prepared: &mut PreparedDisks) -> Result<(), DiskError> {
    let created = safe_fs::create_missing_dirs(path, DIR_MODE);
    let created = created.map_err(|err| io_error(path, what, "create directory", err))?;
    prepared
        .created
        .extend(created.into_iter().map(Created::Dir));
    safe_fs::open_dir_nofollow(path)
        .map(drop)
        .map_err(|err| io_error(path, what, "use directory", err))
}

/// Whether anything (a file, a directory, a symlink, dangling or not) is at
/// `path`; unlike `Path::exists`, a dangling symlink counts.
fn occupied(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// A file qemu-img created gets [`FILE_MODE`], set on a descriptor opened
/// without following symlinks.
fn restrict_created_file(path: &Path, what: &str) -> Result<(), DiskError> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .and_then(|file| file.set_permissions(fs::Permissions::from_mode(FILE_MODE)))
        .map_err(|err| io_error(path, what, "set the mode of", err))
}

/// An existing image the plan keeps must be a regular file (or a block
/// device), not a symlink someone planted.
fn check_kept(path: &Path, what: &str) -> Result<(), DiskError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(io_error(
            path,
            what,
            "use",
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is a symbolic link; the launcher does not follow links for the images it creates (remove it)",
            ),
        )),
        _ => Ok(()),
    }
}

fn command_error(path: &Path, what: &str, action: &str, failure: CommandFailure) -> DiskError {
    DiskError {
        kind: DiskErrorKind::Command,
        path: path.to_path_buf(),
        message: format!(
            "{what}: qemu-img could not {action} {}: {failure}",
            path.display()
        ),
        cause: Some(Arc::new(failure)),
    }
}

fn create_overlay(
    path: &Path,
    backing: &Path,
    backing_format: Option<&str>,
    what: &str,
    options: &PrepareOptions,
    prepared: &mut PreparedDisks,
) -> Result<(), DiskError> {
    if occupied(path) {
        check_kept(path, what)?;
        log::info!(
            "disks: keeping existing overlay {} for {what}",
            path.display()
        );
        return Ok(());
    }
    let detected;
    let format = match backing_format {
        Some(format) => format,
        None => {
            let info = qemu_img::info(&options.qemu_img, backing, options.command_timeout)
                .map_err(|failure| command_error(backing, what, "inspect base image", failure))?;
            if let Some(chained) = info.backing_file {
                return Err(DiskError {
                    kind: DiskErrorKind::Invalid,
                    path: backing.to_path_buf(),
                    message: format!(
                        "{what}: base image {} has its own backing file {chained:?}; use a standalone image (qemu-img convert can flatten it)",
                        backing.display()
                    ),
                    cause: None,
                });
            }
            detected = info.format;
            detected.as_str()
        }
    };
    let created = qemu_img::create_overlay(
        &options.qemu_img,
        path,
        backing,
        format,
        options.command_timeout,
    );
    if let Err(failure) = created {
        remove_partial(path);
        return Err(command_error(path, what, "create overlay", failure));
    }
    prepared.created.push(Created::File(path.to_path_buf()));
    restrict_created_file(path, what)
}

fn create_qcow2(
    path: &Path,
    size: u64,
    what: &str,
    options: &PrepareOptions,
    prepared: &mut PreparedDisks,
) -> Result<(), DiskError> {
    if occupied(path) {
        check_kept(path, what)?;
        log::info!(
            "disks: keeping existing image {} for {what}",
            path.display()
        );
        return Ok(());
    }
    if let Err(failure) =
        qemu_img::create_qcow2(&options.qemu_img, path, size, options.command_timeout)
    {
        remove_partial(path);
        return Err(command_error(path, what, "create image", failure));
    }
    prepared.created.push(Created::File(path.to_path_buf()));
    restrict_created_file(path, what)
}

fn create_data_file_overlay(
    path: &Path,
    data_file: &Path,
    what: &str,
    options: &PrepareOptions,
    prepared: &mut PreparedDisks,
) -> Result<(), DiskError> {
    if occupied(path) {
        check_kept(path, what)?;
        log::info!(
            "disks: keeping existing changed block tracking image {} for {what} (and its bitmaps)",
            path.display()
        );
        return Ok(());
    }
    let size =
        data_size(data_file).map_err(|err| io_error(data_file, what, "read the size of", err))?;
    let placeholder = beside(path, ".data-placeholder");
    // A placeholder left by a launcher that died mid-way is stale.
    let _ = fs::remove_file(&placeholder);
    let created = qemu_img::create_data_file_overlay(
        &options.qemu_img,
        path,
        data_file,
        &placeholder,
        size,
        options.command_timeout,
    );
    let _ = fs::remove_file(&placeholder);
    if let Err(failure) = created {
        remove_partial(path);
        return Err(command_error(
            path,
            what,
            "create the changed block tracking image over its data file",
            failure,
        ));
    }
    prepared.created.push(Created::File(path.to_path_buf()));
    restrict_created_file(path, what)
}

/// The size of a data file: a block device's is where its end is (its
/// metadata says 0).
fn data_size(path: &Path) -> std::io::Result<u64> {
    use std::io::Seek;
    use std::os::unix::fs::FileTypeExt;
    let meta = fs::metadata(path)?;
    if meta.file_type().is_block_device() {
        return fs::File::open(path)?.seek(std::io::SeekFrom::End(0));
    }
    Ok(meta.len())
}

fn create_sparse_file(
    path: &Path,
    size: u64,
    what: &str,
    prepared: &mut PreparedDisks,
) -> Result<(), DiskError> {
    let Some(file) = create_new_or_keep(path, what, prepared)? else {
        log::info!("disks: keeping existing disk {} for {what}", path.display());
        return Ok(());
    };
    file.set_len(size)
        .map_err(|err| io_error(path, what, &format!("grow to {size} bytes"), err))
}

/// The vhostmd image of an empty metrics page; one already there is kept.
fn create_metrics_disk(
    path: &Path,
    what: &str,
    prepared: &mut PreparedDisks,
) -> Result<(), DiskError> {
    let Some(file) = create_new_or_keep(path, what, prepared)? else {
        return Ok(());
    };
    crate::metrics::page::init_disk(&file)
        .map_err(|err| io_error(path, what, "write the metrics page to", err))
}

/// A new file at `path`, recorded as created; `None` when one is already
/// there and may be kept (`check_kept`).
fn create_new_or_keep(
    path: &Path,
    what: &str,
    prepared: &mut PreparedDisks,
) -> Result<Option<fs::File>, DiskError> {
    match safe_fs::create_new_file(path, FILE_MODE) {
        Ok(file) => {
            prepared.created.push(Created::File(path.to_path_buf()));
            Ok(Some(file))
        }
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            check_kept(path, what)?;
            Ok(None)
        }
        Err(err) => Err(io_error(path, what, "create", err)),
    }
}

/// `<path><suffix>`, beside `path`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes next to the target and renames, so a crash never leaves a torn
/// image. The staging file is created new (`O_EXCL | O_NOFOLLOW`, mode
/// [`FILE_MODE`]): whatever is at its path first (a leftover, or a symlink
/// someone planted) is unlinked, never written through. An image already at
/// the target (an earlier launcher's) is kept aside until the prepare is
/// kept, so a rollback restores it instead of deleting it.
fn write_iso(
    path: &Path,
    volume_id: &str,
    contents: &IsoContents,
    what: &str,
    prepared: &mut PreparedDisks,
) -> Result<(), DiskError> {
    let files = iso_files(contents, path, what)?;
    let staging = beside(path, ".staging");
    remove_partial(&staging);
    let written = write_iso_file(&staging, volume_id, &files, path, what);
    if let Err(err) = written {
        remove_partial(&staging);
        return Err(err);
    }
    let previous = beside(path, ".previous");
    let replaced = if occupied(path) {
        remove_partial(&previous);
        if let Err(err) = fs::hard_link(path, &previous) {
            remove_partial(&staging);
            return Err(io_error(
                path,
                what,
                "keep a copy of the existing image",
                err,
            ));
        }
        true
    } else {
        false
    };
    if let Err(err) = fs::rename(&staging, path) {
        remove_partial(&staging);
        if replaced {
            remove_partial(&previous);
        }
        return Err(io_error(path, what, "rename the staged image to", err));
    }
    prepared.created.push(if replaced {
        Created::Replaced {
            path: path.to_path_buf(),
            previous,
        }
    } else {
        Created::File(path.to_path_buf())
    });
    Ok(())
}

fn write_iso_file(
    staging: &Path,
    volume_id: &str,
    files: &[IsoFile],
    target: &Path,
    what: &str,
) -> Result<(), DiskError> {
    let file = safe_fs::create_new_file(staging, FILE_MODE)
        .map_err(|err| io_error(staging, what, "create", err))?;
    let mut writer = io::BufWriter::new(file);
    iso9660::write_iso(&mut writer, volume_id, files).map_err(|err| DiskError {
        kind: iso_error_kind(&err),
        path: target.to_path_buf(),
        message: format!("{what}: cannot write ISO image {}: {err}", target.display()),
        cause: Some(Arc::new(err)),
    })?;
    let file = writer
        .into_inner()
        .map_err(|err| io_error(staging, what, "write", err.into_error()))?;
    file.sync_all()
        .map_err(|err| io_error(staging, what, "flush", err))?;
    Ok(())
}

/// A file that cannot go into an ISO is the VMI's problem; a failed write
/// (ENOSPC, EIO) is the host's, like any other failed file operation.
pub(super) fn iso_error_kind(err: &IsoError) -> DiskErrorKind {
    match err {
        IsoError::Io(_) => DiskErrorKind::Io,
        _ => DiskErrorKind::Invalid,
    }
}

/// The files of an ISO image's `contents`, secrets and directories read.
pub fn iso_files(
    contents: &IsoContents,
    target: &Path,
    what: &str,
) -> Result<Vec<IsoFile>, DiskError> {
    match contents {
        IsoContents::Files(files) => Ok(files.clone()),
        IsoContents::Dir(dir) => iso9660::collect_dir(dir).map_err(|err| DiskError {
            kind: DiskErrorKind::Io,
            path: dir.clone(),
            message: format!(
                "{what}: cannot read {} for ISO image {}: {err}",
                dir.display(),
                target.display()
            ),
            cause: Some(Arc::new(err)),
        }),
        IsoContents::FilesWithSecrets { files, secrets } => {
            let mut all = files.clone();
            for secret in secrets {
                all.push(read_secret_file(secret, what)?);
            }
            Ok(all)
        }
    }
}

fn read_secret_file(secret: &SecretFile, what: &str) -> Result<IsoFile, DiskError> {
    for name in &secret.names {
        let candidate = secret.dir.join(name);
        match fs::read(&candidate) {
            Ok(data) => {
                return Ok(IsoFile {
                    path: secret.iso_path.clone(),
                    data,
                });
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(io_error(&candidate, what, "read", err)),
        }
    }
    Err(DiskError {
        kind: DiskErrorKind::Missing,
        path: secret.dir.clone(),
        message: format!(
            "{what}: secret directory {} has no {}; add that key to the secret",
            secret.dir.display(),
            secret.names.join(" or ")
        ),
        cause: None,
    })
}

/// Best effort: the step already failed, the partial file must not survive.
fn remove_partial(path: &Path) {
    if let Err(err) = fs::remove_file(path)
        && err.kind() != io::ErrorKind::NotFound
    {
        log::warn!(
            "disks: could not remove partial file {}: {err}",
            path.display()
        );
    }
}

/// Writes all bytes (used by tests to build fixtures).
#[cfg(test)]
pub(crate) fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    fs::File::create(path)?.write_all(data)
}

#[cfg(test)]
mod cause_tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn a_failed_step_keeps_the_os_error_behind_its_message() {
        let dir = crate::scratch::ScratchDir::new("disk-cause");
        let missing = dir.join("no-such-dir");
        let err = check_one_of(&missing, &["user-data".to_string()], "volume cloudinit")
            .expect_err("a missing directory is refused");
        assert!(
            err.message.starts_with("volume cloudinit: directory ")
                && err
                    .message
                    .contains("cannot be listed (No such file or directory"),
            "{err}"
        );
        let cause = err.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(cause.map(io::Error::kind), Some(io::ErrorKind::NotFound));

        // A refusal with no OS error behind it has no cause.
        let file = dir.join("image");
        write_file(&file, b"x").unwrap();
        let not_dir = check_exists(&file, PathKind::Dir, "volume data").unwrap_err();
        assert!(not_dir.message.contains("exists but is not a"), "{not_dir}");
        assert!(not_dir.source().is_none());
    }

    #[test]
    fn a_qemu_img_that_cannot_start_is_the_cause_and_its_os_error_below_it() {
        let failure = CommandFailure::Spawn(io::Error::from(io::ErrorKind::NotFound));
        let err = command_error(Path::new("/x.qcow2"), "volume root", "create", failure);
        assert!(
            err.message
                .contains("is qemu-img (package qemu-utils) installed?"),
            "{err}"
        );
        let command = err.source().expect("qemu-img's failure is the cause");
        assert!(
            command.to_string().starts_with("could not start it"),
            "{command}"
        );
        let os = command.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(os.map(io::Error::kind), Some(io::ErrorKind::NotFound));
    }
}
