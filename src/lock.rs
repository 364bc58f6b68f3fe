//! One launcher per directory: the locks taken first at start-up, before
//! libvirt is contacted, so a second launcher on the same directories fails
//! at once (exit status 3) instead of after libvirt's connect timeout.
//!
//! The launcher writes into three directories, and locks each of them:
//!
//! | directory | lock file |
//! |---|---|
//! | `--kubevirt-share-dir`'s `sockets/` | `launcher-sock.lock` |
//! | `--private-dir` | `virt-launcher.lock` |
//! | `--ephemeral-disk-dir` | `virt-launcher.lock` |
//!
//! (container and hotplug disk directories are only read). Two launchers
//! that share any of them would clobber each other's files (the cloud-init
//! ISO, overlays, the serial console socket), so the second is refused,
//! whichever directory they share.
//!
//! A lock is an `flock` on the file, not the file's existence: a lock file
//! left by a launcher that was SIGKILLed is not held by anyone, and the
//! next launcher takes it. The files are mode 0600, owned by the launcher's
//! user, opened without following symlinks, in directories the launcher
//! created (0755) or was given. At exit each is unlinked while still held;
//! a launcher that locked a file which was unlinked meanwhile notices that
//! the path now names another file (or none) and locks again.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::Dirs;
use crate::safe_fs;

pub const SOCKET_LOCK_NAME: &str = "launcher-sock.lock";
pub const DIR_LOCK_NAME: &str = "virt-launcher.lock";

/// Why the locks could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another live launcher holds the lock file `lock`, in the directory
    /// that `flag`, given `given`, makes the launcher write to.
    InUse {
        flag: &'static str,
        given: PathBuf,
        lock: PathBuf,
    },
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::InUse { flag, given, lock } => write!(
                f,
                "another virt-launcher is running with {flag} {} (it holds the lock {}); stop it, or give this launcher its own {flag}",
                given.display(),
                lock.display()
            ),
            LockError::Io {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for LockError {}

/// One held lock.
struct Held {
    path: PathBuf,
    file: File,
}

/// The launcher's directory locks, held until [`DirLocks::release`] (or
/// the process's end, which releases them too).
pub struct DirLocks {
    held: Vec<Held>,
}

/// One lock a launcher takes: the lock file, its directory, and the flag
/// (with the value it was given) that makes the launcher write there.
pub struct LockFile {
    pub dir: PathBuf,
    pub flag: &'static str,
    /// The flag's value: the directory itself, except for
    /// `--kubevirt-share-dir`, whose `sockets/` subdirectory is locked.
    pub given: PathBuf,
    pub lock: PathBuf,
}

/// Which lock files a launcher with these directories takes. The socket
/// directory is `KUBEVIRT_SHARE_DIR/sockets`.
pub fn lock_files(dirs: &Dirs) -> Vec<LockFile> {
    let sockets = dirs.share.join("sockets");
    vec![
        LockFile {
            lock: sockets.join(SOCKET_LOCK_NAME),
            dir: sockets,
            flag: "--kubevirt-share-dir",
            given: dirs.share.clone(),
        },
        LockFile {
            dir: dirs.private.clone(),
            flag: "--private-dir",
            given: dirs.private.clone(),
            lock: dirs.private.join(DIR_LOCK_NAME),
        },
        LockFile {
            dir: dirs.ephemeral.clone(),
            flag: "--ephemeral-disk-dir",
            given: dirs.ephemeral.clone(),
            lock: dirs.ephemeral.join(DIR_LOCK_NAME),
        },
    ]
}

/// Creates the three directories if missing (0755) and locks each once.
/// On failure nothing stays locked.
pub fn acquire(dirs: &Dirs) -> Result<DirLocks, LockError> {
    let mut locks = DirLocks { held: Vec::new() };
    let mut seen: Vec<(u64, u64)> = Vec::new();
    for wanted in lock_files(dirs) {
        let dir = &wanted.dir;
        prepare_dir(dir, wanted.flag == "--kubevirt-share-dir")?;
        // The same directory given twice (--private-dir equal to
        // --ephemeral-disk-dir) is locked once: a second flock of it from
        // this process would conflict with the first.
        let id = fs::metadata(dir)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|source| LockError::Io {
                action: "inspect",
                path: dir.to_path_buf(),
                source,
            })?;
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let file = lock_file(&wanted)?;
        locks.held.push(Held {
            path: wanted.lock,
            file,
        });
    }
    Ok(locks)
}

/// Creates a lock's directory. The socket directory belongs to the
/// launcher: it gets mode 0755 even when it exists, so that nobody else can
/// write (or replace the lock file) there. The private and ephemeral
/// directories are the user's choice: created 0755 when missing, otherwise
/// refused only if others may write in them without the sticky bit.
fn prepare_dir(dir: &Path, own: bool) -> Result<(), LockError> {
    let io = |action: &'static str| {
        let path = dir.to_path_buf();
        move |source| LockError::Io {
            action,
            path,
            source,
        }
    };
    if own {
        return safe_fs::ensure_dir(dir, 0o755).map_err(io("create the directory"));
    }
    safe_fs::create_missing_dirs(dir, 0o755).map_err(io("create the directory"))?;
    let meta = safe_fs::open_dir_nofollow(dir)
        .and_then(|d| d.metadata())
        .map_err(io("open the directory"))?;
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(LockError::Io {
            action: "use the directory",
            path: dir.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "it is writable by other users (mode {:04o}) without the sticky bit, so they could replace the launcher's files; chmod go-w it or choose another directory",
                    mode & 0o7777
                ),
            ),
        });
    }
    Ok(())
}

/// Opens and flocks `lock`, retrying when the file was unlinked (by a
/// launcher exiting) between the open and the lock.
fn lock_file(wanted: &LockFile) -> Result<File, LockError> {
    let lock = wanted.lock.as_path();
    loop {
        let file = safe_fs::open_own_file(lock, 0o600).map_err(|source| LockError::Io {
            action: "open the lock file",
            path: lock.to_path_buf(),
            source,
        })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(LockError::InUse {
                    flag: wanted.flag,
                    given: wanted.given.clone(),
                    lock: lock.to_path_buf(),
                });
            }
            Err(fs::TryLockError::Error(source)) => {
                return Err(LockError::Io {
                    action: "lock",
                    path: lock.to_path_buf(),
                    source,
                });
            }
        }
        if still_at_path(&file, lock) {
            return Ok(file);
        }
        log::debug!(
            "lock: {} was replaced while being locked; locking again",
            lock.display()
        );
    }
}

/// Whether `path` still names the file open as `file`.
fn still_at_path(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

impl DirLocks {
    /// The lock files held.
    pub fn paths(&self) -> Vec<&Path> {
        self.held.iter().map(|h| h.path.as_path()).collect()
    }

    /// Removes the lock files, each while still held, then releases them.
    pub fn release(self) {
        for held in self.held {
            if still_at_path(&held.file, &held.path)
                && let Err(e) = fs::remove_file(&held.path)
                && e.kind() != io::ErrorKind::NotFound
            {
                log::warn!("lock: could not remove {}: {e}", held.path.display());
            }
            drop(held.file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn dirs(root: &Path, share: &str, private: &str, ephemeral: &str) -> Dirs {
        Dirs {
            share: root.join(share),
            private: root.join(private),
            ephemeral: root.join(ephemeral),
            container_disks: root.join("cd"),
            hotplug_disks: root.join("hp"),
        }
    }

    fn temp(tag: &str) -> ScratchDir {
        ScratchDir::new(&format!("lock-{tag}"))
    }

    #[test]
    fn every_writable_directory_is_locked_once() {
        let root = temp("shared");
        let first = acquire(&dirs(&root, "s1", "p", "e")).unwrap();
        assert_eq!(first.paths().len(), 3);
        for path in first.paths() {
            let mode = fs::metadata(path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
        // Another share dir, the same private dir: refused, naming it.
        match acquire(&dirs(&root, "s2", "p", "e2")) {
            Err(LockError::InUse { flag, .. }) => assert_eq!(flag, "--private-dir"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        // Nothing of the failed attempt stays locked: s2 is free.
        let other = acquire(&dirs(&root, "s2", "p2", "e3")).unwrap();
        other.release();
        match acquire(&dirs(&root, "s3", "p3", "e")) {
            Err(LockError::InUse { flag, .. }) => assert_eq!(flag, "--ephemeral-disk-dir"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        first.release();
        // Released and removed: a new launcher takes them.
        assert!(!root.join("p").join(DIR_LOCK_NAME).exists());
        acquire(&dirs(&root, "s1", "p", "e")).unwrap().release();
    }

    #[test]
    fn the_refusal_names_each_flag_with_the_value_it_was_given() {
        let root = temp("named");
        let first = acquire(&dirs(&root, "share", "p", "e")).unwrap();
        let refusal = |share: &str, private: &str, ephemeral: &str| {
            acquire(&dirs(&root, share, private, ephemeral))
                .err()
                .expect("refused")
                .to_string()
        };
        // The share directory's lock is in its sockets/ subdirectory; the
        // message names the flag's value, the lock its file.
        assert_eq!(
            refusal("share", "p2", "e2"),
            format!(
                "another virt-launcher is running with --kubevirt-share-dir {} (it holds the lock {}); stop it, or give this launcher its own --kubevirt-share-dir",
                root.join("share").display(),
                root.join("share/sockets/launcher-sock.lock").display()
            )
        );
        assert!(refusal("s2", "p", "e2").starts_with(&format!(
            "another virt-launcher is running with --private-dir {} (it holds the lock {})",
            root.join("p").display(),
            root.join("p/virt-launcher.lock").display()
        )));
        first.release();
    }

    #[test]
    fn one_directory_for_two_flags_is_fine() {
        let root = temp("same");
        let locks = acquire(&dirs(&root, "s", "both", "both")).unwrap();
        assert_eq!(locks.paths().len(), 2);
        locks.release();
    }

    #[test]
    fn a_lock_file_nobody_holds_is_taken_and_a_symlink_is_refused() {
        let root = temp("stale");
        let d = dirs(&root, "s", "p", "e");
        // Left behind by a killed launcher: exists, not locked, mode 0644.
        fs::create_dir_all(root.join("s/sockets")).unwrap();
        let stale = root.join("s/sockets").join(SOCKET_LOCK_NAME);
        fs::write(&stale, b"").unwrap();
        fs::set_permissions(&stale, fs::Permissions::from_mode(0o644)).unwrap();
        let locks = acquire(&d).unwrap();
        assert_eq!(
            fs::metadata(&stale).unwrap().permissions().mode() & 0o777,
            0o600
        );
        locks.release();
        // A dangling symlink in its place: refused, its target not created.
        symlink(root.join("victim"), &stale).unwrap();
        let err = acquire(&d).err().expect("refused").to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(!root.join("victim").exists());
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let root = temp("open");
        fs::create_dir_all(root.join("p")).unwrap();
        fs::set_permissions(root.join("p"), fs::Permissions::from_mode(0o777)).unwrap();
        let err = acquire(&dirs(&root, "s", "p", "e")).err().expect("refused");
        assert!(err.to_string().contains("writable by other users"), "{err}");
        // With the sticky bit (as /tmp) it is fine.
        fs::set_permissions(root.join("p"), fs::Permissions::from_mode(0o1777)).unwrap();
        acquire(&dirs(&root, "s", "p", "e")).unwrap().release();
        // The socket directory is the launcher's own: its mode is set.
        fs::set_permissions(root.join("s/sockets"), fs::Permissions::from_mode(0o777)).unwrap();
        acquire(&dirs(&root, "s", "p", "e")).unwrap().release();
        let mode = fs::metadata(root.join("s/sockets"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    }
}
