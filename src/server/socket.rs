//! The command socket's files: the lock that proves a live owner, the
//! "uninitialized" socket, and the rename that announces readiness.

use std::fmt;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

pub const INIT_SOCKET_NAME: &str = "launcher-init-sock";
pub const READY_SOCKET_NAME: &str = "launcher-sock";
pub const LOCK_FILE_NAME: &str = "launcher-sock.lock";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPaths {
    pub dir: PathBuf,
    pub init: PathBuf,
    pub ready: PathBuf,
    pub lock: PathBuf,
}

impl SocketPaths {
    pub fn new(share_dir: &Path) -> SocketPaths {
        let dir = share_dir.join("sockets");
        SocketPaths {
            init: dir.join(INIT_SOCKET_NAME),
            ready: dir.join(READY_SOCKET_NAME),
            lock: dir.join(LOCK_FILE_NAME),
            dir,
        }
    }
}

#[derive(Debug)]
pub enum SocketError {
    /// Another live launcher holds the lock.
    InUse { lock: PathBuf },
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl fmt::Display for SocketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SocketError::InUse { lock } => write!(
                f,
                "another virt-launcher is running with this share directory (it holds {}); stop it or use another --kubevirt-share-dir",
                lock.display()
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
            SocketError::InUse { .. } => None,
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

/// A bound, not yet ready, command socket and the lock that owns it.
pub struct CommandSocket {
    pub paths: SocketPaths,
    listener: Option<UnixListener>,
    _lock: File,
}

impl CommandSocket {
    /// Takes the lock, clears sockets a dead launcher left behind, and
    /// listens on `launcher-init-sock` with mode 0600.
    pub fn bind(share_dir: &Path) -> Result<CommandSocket, SocketError> {
        let paths = SocketPaths::new(share_dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&paths.dir)
            .map_err(io_err("create the socket directory", &paths.dir))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&paths.lock)
            .map_err(io_err("open the lock file", &paths.lock))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(SocketError::InUse { lock: paths.lock });
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(io_err("lock", &paths.lock)(e));
            }
        }
        // We hold the lock, so any socket here belongs to a launcher that
        // is gone: remove it rather than fail with "address in use".
        for stale in [&paths.init, &paths.ready] {
            match fs::remove_file(stale) {
                Ok(()) => log::warn!("server: removed stale socket {}", stale.display()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove the stale socket", stale)(e)),
            }
        }
        // Bind under a temporary name, restrict it, then rename into place,
        // so nobody can connect before the mode is 0600.
        let temp = paths
            .dir
            .join(format!(".{INIT_SOCKET_NAME}.{}", std::process::id()));
        let _ = fs::remove_file(&temp);
        let listener = UnixListener::bind(&temp).map_err(io_err("listen on", &temp))?;
        fs::set_permissions(&temp, Permissions::from_mode(0o600))
            .map_err(io_err("set the mode of", &temp))?;
        fs::rename(&temp, &paths.init).map_err(io_err("rename into place", &paths.init))?;
        Ok(CommandSocket {
            paths,
            listener: Some(listener),
            _lock: lock,
        })
    }

    /// Hands the listener to the acceptor thread.
    pub fn take_listener(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }

    /// Announces readiness: atomically renames the socket to its final name.
    pub fn mark_ready(&self) -> Result<(), SocketError> {
        fs::rename(&self.paths.init, &self.paths.ready)
            .map_err(io_err("rename the socket to", &self.paths.ready))
    }

    /// Removes the socket files (whichever name they have) and the lock.
    pub fn remove(&self) {
        for path in [&self.paths.init, &self.paths.ready, &self.paths.lock] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("server: could not remove {}: {e}", path.display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vl-socket-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn bind_ready_remove() {
        let dir = temp_dir("cycle");
        let socket = CommandSocket::bind(&dir).unwrap();
        let meta = fs::metadata(&socket.paths.init).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        socket.mark_ready().unwrap();
        assert!(!socket.paths.init.exists());
        assert!(socket.paths.ready.exists());
        socket.remove();
        assert!(!socket.paths.ready.exists());
        assert!(!socket.paths.lock.exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn second_owner_is_refused_and_stale_sockets_are_removed() {
        let dir = temp_dir("lock");
        let first = CommandSocket::bind(&dir).unwrap();
        match CommandSocket::bind(&dir) {
            Err(SocketError::InUse { .. }) => {}
            other => panic!("expected InUse, got {:?}", other.map(|_| ())),
        }
        first.mark_ready().unwrap();
        // Simulate a dead launcher: the lock is released but the socket
        // file stays behind.
        let ready = first.paths.ready.clone();
        drop(first);
        assert!(ready.exists());
        let second = CommandSocket::bind(&dir).unwrap();
        assert!(!ready.exists(), "stale socket should be gone");
        assert!(second.paths.init.exists());
        second.remove();
        fs::remove_dir_all(dir).unwrap();
    }
}
