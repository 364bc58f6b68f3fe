//! Creating files and directories as root without being tricked into
//! writing elsewhere, and with modes that never depend on the umask.
//!
//! - Every file the launcher creates is opened with `O_CREAT | O_EXCL |
//!   O_NOFOLLOW`: a symlink or any existing file at the path makes the open
//!   fail instead of writing through it or truncating it.
//! - Every directory the launcher creates or adjusts is opened with
//!   `O_DIRECTORY | O_NOFOLLOW` before its mode is set on the open
//!   descriptor (`fchmod`), so a symlink planted in its place is refused,
//!   never followed, and its target's mode never changed.
//! - Modes are set explicitly after creation: the umask may only narrow
//!   what `mkdir` and `open` create, and a umask of 000 must not widen it.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The user the launcher runs as (the owner of its /proc entry).
pub fn effective_uid() -> Option<u32> {
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Opens the directory at `path` without following a symlink there.
pub fn open_dir_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| explain_nofollow(path, e, "a directory"))
}

/// `ELOOP` from an `O_NOFOLLOW` open means "a symlink is there": say so.
fn explain_nofollow(path: &Path, err: io::Error, wanted: &str) -> io::Error {
    // O_DIRECTORY | O_NOFOLLOW on a symlink fails with ENOTDIR, not ELOOP.
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    match err.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) if is_link => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link, not {wanted}; the launcher does not follow links here (remove it)",
                path.display()
            ),
        ),
        Some(libc::ENOTDIR) if wanted == "a directory" => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} exists and is not a directory", path.display()),
        ),
        _ => err,
    }
}

/// Creates `path` and any missing parents, each created directory with
/// exactly `mode`; then sets exactly `mode` on `path` itself (existing or
/// not), refusing a symlink there. Existing parents are left as they are.
pub fn ensure_dir(path: &Path, mode: u32) -> io::Result<()> {
    create_missing_dirs(path, mode)?;
    let dir = open_dir_nofollow(path)?;
    dir.set_permissions(Permissions::from_mode(mode))
}

/// Creates the missing directories of `path` (parents first), each with
/// exactly `mode`. Returns the ones it created, outermost first.
pub fn create_missing_dirs(path: &Path, mode: u32) -> io::Result<Vec<std::path::PathBuf>> {
    let missing: Vec<&Path> = path
        .ancestors()
        .take_while(|dir| !dir.as_os_str().is_empty() && fs::symlink_metadata(dir).is_err())
        .collect();
    let mut created = Vec::new();
    for dir in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(mode).create(dir) {
            Ok(()) => {
                // mkdir applied the umask; set the mode exactly.
                open_dir_nofollow(dir)?.set_permissions(Permissions::from_mode(mode))?;
                created.push(dir.to_path_buf());
            }
            // Created meanwhile by someone else: checked by the caller's
            // open of the final directory.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}

/// Creates a new file with exactly `mode`, failing if anything (a file, a
/// symlink, dangling or not) is already at `path`.
pub fn create_new_file(path: &Path, mode: u32) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    file.set_permissions(Permissions::from_mode(mode))?;
    Ok(file)
}

/// Replaces the file at `path` with `bytes`: written whole to `path` with
/// the extension `temp_extension`, opened with `mode`, then renamed over
/// `path`, so that a crash leaves the old file or the new one, never half
/// of one.
pub fn replace_file(path: &Path, temp_extension: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    let temp = path.with_extension(temp_extension);
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temp)?
        .write_all(bytes)?;
    fs::rename(&temp, path)
}

/// Reads back a JSON record written with [`replace_file`]: `None` when
/// there is none. A record that cannot be read or does not parse as `what`
/// (a half-written file from an older launcher, a hand edit) is logged and
/// treated as absent, so that a damaged record never stops the launcher.
pub fn read_record<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Option<T> {
    match fs::read(path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(record) => Some(record),
            Err(e) => {
                log::warn!("{} is not {what}: {e}; ignoring it", path.display());
                None
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            log::warn!("cannot read {}: {e}; ignoring it", path.display());
            None
        }
    }
}

/// Opens an existing regular file for writing, without following a
/// symlink at `path` or creating anything.
pub fn open_existing_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| explain_nofollow(path, e, "a regular file"))?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Opens (creating if missing, with `mode`) a regular file for reading and
/// writing without following a symlink at `path`; an existing file gets
/// exactly `mode` too. Refuses anything but a regular file owned by the
/// launcher's user.
pub fn open_own_file(path: &Path, mode: u32) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| explain_nofollow(path, e, "a regular file"))?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    if let Some(uid) = effective_uid()
        && meta.uid() != uid
    {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to the launcher's user (uid {uid}); remove it",
                path.display(),
                meta.uid()
            ),
        ));
    }
    file.set_permissions(Permissions::from_mode(mode))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;
    use std::os::unix::fs::symlink;

    fn temp(tag: &str) -> ScratchDir {
        ScratchDir::new(&format!("safefs-{tag}"))
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn new_files_never_follow_or_replace_anything() {
        let dir = temp("files");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").unwrap();
        symlink(&victim, dir.join("link")).unwrap();
        symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        for taken in ["link", "dangling", "victim"] {
            let err = create_new_file(&dir.join(taken), 0o600).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{taken}");
        }
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(!dir.join("nowhere").exists());
        let file = create_new_file(&dir.join("fresh"), 0o600).unwrap();
        drop(file);
        assert_eq!(mode(&dir.join("fresh")), 0o600);
    }

    #[test]
    fn directories_get_exact_modes_and_symlinks_are_refused() {
        let dir = temp("dirs");
        let nested = dir.join("a/b/c");
        ensure_dir(&nested, 0o750).unwrap();
        for d in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&dir.join(d)), 0o750, "{d}");
        }
        // An existing directory gets the mode set.
        fs::set_permissions(&nested, Permissions::from_mode(0o777)).unwrap();
        ensure_dir(&nested, 0o755).unwrap();
        assert_eq!(mode(&nested), 0o755);
        // A symlink in its place is refused and its target left alone.
        let target = dir.join("target");
        fs::create_dir(&target).unwrap();
        fs::set_permissions(&target, Permissions::from_mode(0o700)).unwrap();
        symlink(&target, dir.join("link")).unwrap();
        let err = ensure_dir(&dir.join("link"), 0o755).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(mode(&target), 0o700);
        // A file in its place too.
        fs::write(dir.join("file"), b"").unwrap();
        let err = ensure_dir(&dir.join("file"), 0o755).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn records_read_back_and_damaged_ones_count_as_absent() {
        let dir = temp("record");
        let path = dir.join("record.json");
        assert_eq!(read_record::<Vec<u32>>(&path, "a list"), None);
        replace_file(&path, "tmp", b"[1,2]", 0o600).unwrap();
        assert_eq!(read_record::<Vec<u32>>(&path, "a list"), Some(vec![1, 2]));
        fs::write(&path, b"[1,").unwrap();
        assert_eq!(read_record::<Vec<u32>>(&path, "a list"), None);
        fs::write(&path, b"{\"a\":1}").unwrap();
        assert_eq!(read_record::<Vec<u32>>(&path, "a list"), None);
        // A directory in its place cannot be read: absent too, no panic.
        assert_eq!(read_record::<Vec<u32>>(&dir, "a list"), None);
    }

    #[test]
    fn own_files_are_regular_files_with_the_mode() {
        let dir = temp("own");
        let path = dir.join("lock");
        fs::write(&path, b"").unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        open_own_file(&path, 0o600).unwrap();
        assert_eq!(mode(&path), 0o600);
        symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        let err = open_own_file(&dir.join("dangling"), 0o600).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!dir.join("nowhere").exists());
    }
}
