//! The command socket's files: the "uninitialized" socket, and the rename
//! that announces readiness. The directory lock that proves a live owner is
//! taken earlier, by `crate::lock`, before anything else at start-up.

use std::fmt;
use std::fs::{self, Permissions};
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::safe_fs;

/// A command socket's two names: where it listens while the launcher
/// starts, and the name it is renamed to once it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketNames {
    pub init: &'static str,
    pub ready: &'static str,
}

impl SocketNames {
    /// The socket virt-handler looks for (KubeVirt's names): the JSON
    /// protocol's, or in KubeVirt mode the gRPC one's.
    pub const LAUNCHER: SocketNames = SocketNames {
        init: "launcher-init-sock",
        ready: "launcher-sock",
    };
    /// The JSON protocol's socket in KubeVirt mode, where gRPC has
    /// `LAUNCHER`'s names.
    pub const JSON_BESIDE_GRPC: SocketNames = SocketNames {
        init: "launcher-json-init-sock",
        ready: "launcher-json-sock",
    };
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPaths {
    pub dir: PathBuf,
    pub init: PathBuf,
    pub ready: PathBuf,
}

impl SocketPaths {
    pub fn new(share_dir: &Path, names: SocketNames) -> SocketPaths {
        let dir = share_dir.join("sockets");
        SocketPaths {
            init: dir.join(names.init),
            ready: dir.join(names.ready),
            dir,
        }
    }
}

#[derive(Debug)]
pub enum SocketError {
    /// Something other than a socket is where the socket goes; it is not
    /// the launcher's to remove.
    NotASocket { path: PathBuf, kind: &'static str },
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl fmt::Display for SocketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SocketError::NotASocket { path, kind } => write!(
                f,
                "{} is {kind}, not a socket a launcher left behind; the launcher removes only stale sockets there: move it away",
                path.display()
            ),
            SocketError::Io {
                action,
                path,
                source,
            } => {
                write!(f, "cannot {action} {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for SocketError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SocketError::NotASocket { .. } => None,
            SocketError::Io { source, .. } => Some(source),
        }
    }
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SocketError {
    let path = path.to_path_buf();
    move |source| SocketError::Io {
        action,
        path,
        source,
    }
}

/// A bound, not yet ready, command socket.
pub struct CommandSocket {
    pub paths: SocketPaths,
    listener: Option<UnixListener>,
    /// The listening descriptor (kept for a hand-over, `upgrade`).
    pub fd: std::os::fd::RawFd,
    /// Inherited from the launcher this one replaced: already listening
    /// under its ready name, never bound nor renamed.
    pub inherited: bool,
}

impl CommandSocket {
    /// Clears sockets a dead launcher left behind and listens on the
    /// socket's init name (`launcher-init-sock`) with mode 0600. The caller
    /// holds the socket directory's lock (`crate::lock`), which proves
    /// that any socket found here is stale.
    pub fn bind(share_dir: &Path, names: SocketNames) -> Result<CommandSocket, SocketError> {
        let paths = SocketPaths::new(share_dir, names);
        safe_fs::ensure_dir(&paths.dir, 0o755)
            .map_err(io_err("create the socket directory", &paths.dir))?;
        for stale in [&paths.init, &paths.ready] {
            remove_stale_socket(stale)?;
        }
        // Bind under a temporary name, restrict it, then rename into place,
        // so nobody can connect before the mode is 0600.
        let temp = paths
            .dir
            .join(format!(".{}.{}", names.init, std::process::id()));
        remove_stale_socket(&temp)?;
        let listener = UnixListener::bind(&temp).map_err(io_err("listen on", &temp))?;
        fs::set_permissions(&temp, Permissions::from_mode(0o600))
            .map_err(io_err("set the mode of", &temp))?;
        fs::rename(&temp, &paths.init).map_err(io_err("rename into place", &paths.init))?;
        Ok(CommandSocket {
            paths,
            fd: std::os::fd::AsRawFd::as_raw_fd(&listener),
            listener: Some(listener),
            inherited: false,
        })
    }

    /// The socket a launcher replaced by `upgrade` passed on as the
    /// listening descriptor `fd`: its file stays where it is, at its ready
    /// name. The caller checked that `fd` is a listening socket.
    pub fn inherited(
        share_dir: &Path,
        names: SocketNames,
        fd: std::os::fd::RawFd,
    ) -> CommandSocket {
        use std::os::fd::FromRawFd;
        // SAFETY: the descriptor was passed to this process for this
        // purpose, is open and listening (checked at start-up), and
        // nothing else owns it.
        let listener = unsafe { UnixListener::from_raw_fd(fd) };
        CommandSocket {
            paths: SocketPaths::new(share_dir, names),
            listener: Some(listener),
            fd,
            inherited: true,
        }
    }

    /// Where the socket answers now: its init name until it is ready (an
    /// inherited socket is ready from the start).
    pub fn current_path(&self) -> &Path {
        if self.inherited {
            &self.paths.ready
        } else {
            &self.paths.init
        }
    }

    /// Hands the listener to the acceptor thread.
    pub fn take_listener(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }

    /// Announces readiness: atomically renames the socket to its final name.
    pub fn mark_ready(&self) -> Result<(), SocketError> {
        if self.inherited {
            return Ok(());
        }
        fs::rename(&self.paths.init, &self.paths.ready)
            .map_err(io_err("rename the socket to", &self.paths.ready))
    }

    /// Removes the socket files, whichever name they have.
    pub fn remove(&self) {
        for path in [&self.paths.init, &self.paths.ready] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("server: could not remove {}: {e}", path.display()),
            }
        }
    }
}

/// Removes a socket left by a launcher that is gone. Anything else at the
/// path (a file, a FIFO, a directory, a symlink) is refused, not deleted.
fn remove_stale_socket(path: &Path) -> Result<(), SocketError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspect", path)(e)),
    };
    let file_type = meta.file_type();
    let kind = if file_type.is_socket() {
        None
    } else if file_type.is_symlink() {
        Some("a symbolic link")
    } else if file_type.is_file() {
        Some("a regular file")
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else {
        Some("a device or other special file")
    };
    if let Some(kind) = kind {
        return Err(SocketError::NotASocket {
            path: path.to_path_buf(),
            kind,
        });
    }
    match fs::remove_file(path) {
        Ok(()) => {
            log::warn!("server: removed stale socket {}", path.display());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove the stale socket", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDir;
    use std::os::unix::fs::symlink;

    fn temp_dir(tag: &str) -> ScratchDir {
        ScratchDir::new(&format!("socket-{tag}"))
    }

    #[test]
    fn bind_ready_remove() {
        let dir = temp_dir("cycle");
        let socket = CommandSocket::bind(&dir, SocketNames::LAUNCHER).unwrap();
        let meta = fs::metadata(&socket.paths.init).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        socket.mark_ready().unwrap();
        assert!(!socket.paths.init.exists());
        assert!(socket.paths.ready.exists());
        socket.remove();
        assert!(!socket.paths.ready.exists());
    }

    #[test]
    fn stale_sockets_are_removed_and_anything_else_refused() {
        let dir = temp_dir("stale");
        let first = CommandSocket::bind(&dir, SocketNames::LAUNCHER).unwrap();
        first.mark_ready().unwrap();
        // A launcher that died: its socket file stays behind.
        let ready = first.paths.ready.clone();
        drop(first);
        assert!(ready.exists());
        let second = CommandSocket::bind(&dir, SocketNames::LAUNCHER).unwrap();
        assert!(!ready.exists(), "stale socket should be gone");
        assert!(second.paths.init.exists());
        second.remove();
        // Not sockets: left alone and refused.
        fs::write(&ready, b"keep me").unwrap();
        match CommandSocket::bind(&dir, SocketNames::LAUNCHER) {
            Err(SocketError::NotASocket { kind, .. }) => assert_eq!(kind, "a regular file"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        assert_eq!(fs::read(&ready).unwrap(), b"keep me");
        fs::remove_file(&ready).unwrap();
        symlink("/etc/passwd", &ready).unwrap();
        let err = CommandSocket::bind(&dir, SocketNames::LAUNCHER)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("a symbolic link, not a socket"), "{err}");
        assert!(fs::symlink_metadata(&ready).is_ok());
    }
}
