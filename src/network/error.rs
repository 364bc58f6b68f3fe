//! Why a step of the pod network's set-up or clean-up failed, with its
//! cause. As elsewhere in the crate (`dirs::DirError`, `IsoError`), an
//! error's message includes its cause's, so the one line logged and
//! returned reads as before; `source()` gives the cause itself to code that
//! wants to look at it (an errno, a missing program).

use std::fmt;
use std::io;

/// A failed step of one interface's set-up or of the clean-up.
#[derive(Debug)]
pub enum StepError {
    /// An OS call failed while the launcher was doing `what`.
    Os { what: String, source: io::Error },
    /// The `nft` program could not load the rules.
    Nft(NftError),
    /// What the launcher found makes the step impossible; no OS error
    /// behind it. The message says what to do.
    Refused(String),
}

impl StepError {
    /// An OS error while doing `what`.
    pub fn os(what: impl Into<String>, source: io::Error) -> StepError {
        StepError::Os {
            what: what.into(),
            source,
        }
    }

    /// The OS error behind this step's failure, if one is.
    pub fn os_error(&self) -> Option<&io::Error> {
        match self {
            StepError::Os { source, .. } => Some(source),
            StepError::Nft(e) => e.io_error(),
            _ => None,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Os { what, source } => write!(f, "{what}: {source}"),
            StepError::Nft(e) => e.fmt(f),
            StepError::Refused(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for StepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StepError::Os { source, .. } => Some(source),
            StepError::Nft(e) => Some(e),
            StepError::Refused(_) => None,
        }
    }
}

impl From<NftError> for StepError {
    fn from(e: NftError) -> StepError {
        StepError::Nft(e)
    }
}

/// Running `nft -f -` failed.
#[derive(Debug)]
pub enum NftError {
    /// No `nft` program where the launcher looks.
    NotInstalled,
    /// The program could not be started.
    Spawn {
        program: &'static str,
        source: io::Error,
    },
    /// The rules could not be written to its standard input.
    Write {
        program: &'static str,
        source: io::Error,
    },
    /// Waiting for it failed.
    Wait {
        program: &'static str,
        source: io::Error,
    },
    /// `nft` ran and refused the rules; what it wrote on its standard error.
    Refused { stderr: String },
}

impl fmt::Display for NftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NftError::NotInstalled => f.write_str(
                "the nft program is not installed (Debian: apt-get install nftables); masquerade needs it",
            ),
            NftError::Spawn { program, source } => write!(f, "cannot run {program}: {source}"),
            NftError::Write { program, source } => {
                write!(f, "cannot write to {program}: {source}")
            }
            NftError::Wait { program, source } => write!(f, "{program} did not finish: {source}"),
            NftError::Refused { stderr } => {
                write!(f, "nft refused the masquerade rules: {stderr}")
            }
        }
    }
}

impl NftError {
    fn io_error(&self) -> Option<&io::Error> {
        match self {
            NftError::Spawn { source, .. }
            | NftError::Write { source, .. }
            | NftError::Wait { source, .. } => Some(source),
            NftError::NotInstalled | NftError::Refused { .. } => None,
        }
    }
}

impl std::error::Error for NftError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io_error().map(|e| e as _)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn a_step_reads_as_before_and_keeps_its_cause() {
        let e = StepError::os(
            "cannot read links",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert!(
            e.to_string()
                .starts_with("cannot read links: Operation not permitted"),
            "{e}"
        );
        let cause = e.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(cause.and_then(io::Error::raw_os_error), Some(libc::EPERM));
        assert_eq!(
            e.os_error().and_then(io::Error::raw_os_error),
            Some(libc::EPERM)
        );

        let refused = StepError::Refused("tap0 does not exist".into());
        assert_eq!(refused.to_string(), "tap0 does not exist");
        assert!(refused.source().is_none());
    }

    #[test]
    fn nft_failures_say_what_failed_and_chain_the_os_error() {
        let spawn = StepError::from(NftError::Spawn {
            program: "/usr/sbin/nft",
            source: io::Error::from_raw_os_error(libc::ENOENT),
        });
        assert!(
            spawn
                .to_string()
                .starts_with("cannot run /usr/sbin/nft: No such file"),
            "{spawn}"
        );
        // StepError -> NftError -> io::Error
        let nft = spawn.source().and_then(|s| s.downcast_ref::<NftError>());
        assert!(nft.is_some_and(|n| n.source().is_some()));
        let wait = NftError::Wait {
            program: "/usr/sbin/nft",
            source: io::Error::from_raw_os_error(libc::EINTR),
        };
        assert!(
            wait.to_string()
                .starts_with("/usr/sbin/nft did not finish: "),
            "{wait}"
        );
        let refused = NftError::Refused {
            stderr: "Error: syntax error".into(),
        };
        assert_eq!(
            refused.to_string(),
            "nft refused the masquerade rules: Error: syntax error"
        );
        assert!(refused.source().is_none());
    }
}
