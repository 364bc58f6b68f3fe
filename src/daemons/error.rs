//! Why the launcher's libvirt daemons, their namespaces or their
//! configuration could not be set up, with the cause. As elsewhere in the
//! crate (`dirs::DirError`, `IsoError`), the message includes its cause's,
//! so the line logged and returned reads as before; `source()` gives the
//! cause itself.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum DaemonError {
    /// An OS call failed while the launcher was doing `what`.
    Os { what: String, source: io::Error },
    /// What the launcher found makes the step impossible, with no OS error
    /// behind it; the message says what to do.
    Refused(String),
    /// A non-root launcher could not enter a user namespace of its own.
    NoUserNamespace { source: io::Error },
    /// `error`, and what the launcher learnt about it afterwards (the
    /// daemon's last words, how the namespace's init ended): `detail` is
    /// appended to its message as written, starting with its separator.
    Detailed {
        error: Box<DaemonError>,
        detail: String,
    },
}

impl DaemonError {
    /// An OS error while doing `what`.
    pub fn os(what: impl Into<String>, source: io::Error) -> DaemonError {
        DaemonError::Os {
            what: what.into(),
            source,
        }
    }

    /// A refusal: what was found and what to do.
    pub fn refused(message: impl Into<String>) -> DaemonError {
        DaemonError::Refused(message.into())
    }

    /// This error with `detail` appended (see [`DaemonError::Detailed`]).
    pub fn detailed(self, detail: impl Into<String>) -> DaemonError {
        DaemonError::Detailed {
            error: Box::new(self),
            detail: detail.into(),
        }
    }

    /// The OS error at the root of this one, if one is.
    pub fn os_error(&self) -> Option<&io::Error> {
        match self {
            DaemonError::Os { source, .. } | DaemonError::NoUserNamespace { source } => {
                Some(source)
            }
            DaemonError::Refused(_) => None,
            DaemonError::Detailed { error, .. } => error.os_error(),
        }
    }
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DaemonError::Os { what, source } => write!(f, "{what}: {source}"),
            DaemonError::Refused(message) => f.write_str(message),
            DaemonError::NoUserNamespace { source } => write!(
                f,
                "a non-root launcher runs its daemons in a user namespace of its own, and this host does not allow one ({source}); \
                 allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and on Debian \
                 kernel.unprivileged_userns_clone=1; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), \
                 or run the launcher as root, or without --spawn-libvirt"
            ),
            DaemonError::Detailed { error, detail } => write!(f, "{error}{detail}"),
        }
    }
}

impl std::error::Error for DaemonError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DaemonError::Os { source, .. } | DaemonError::NoUserNamespace { source } => {
                Some(source)
            }
            DaemonError::Refused(_) => None,
            DaemonError::Detailed { error, .. } => Some(error.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn messages_read_as_before_and_keep_their_causes() {
        let e = DaemonError::os(
            "cannot create /run/x",
            io::Error::from_raw_os_error(libc::EACCES),
        );
        assert!(
            e.to_string()
                .starts_with("cannot create /run/x: Permission denied"),
            "{e}"
        );
        let detailed = e.detailed(" (virtqemud said: no)");
        assert!(
            detailed
                .to_string()
                .ends_with(": Permission denied (os error 13) (virtqemud said: no)"),
            "{detailed}"
        );
        // Detailed -> Os -> io::Error
        let os = detailed.source().and_then(|s| s.source());
        let io = os.and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(io.and_then(io::Error::raw_os_error), Some(libc::EACCES));
        assert_eq!(
            detailed.os_error().and_then(io::Error::raw_os_error),
            Some(libc::EACCES)
        );

        let refused = DaemonError::refused("neither virtqemud nor libvirtd is installed");
        assert_eq!(
            refused.to_string(),
            "neither virtqemud nor libvirtd is installed"
        );
        assert!(refused.source().is_none() && refused.os_error().is_none());
    }
}
