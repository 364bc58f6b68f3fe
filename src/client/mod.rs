//! The client subcommands of the binary (`probe`, `freeze`, `unfreeze`,
//! `ctl`): small programs that talk to a running launcher through its
//! command socket, so that a launcher image needs nothing else (KubeVirt
//! ships virt-probe and virt-freezer for this, and users had only socat).
//!
//! | module | owns |
//! |---|---|
//! | `connection` | one connection with a deadline on every step |
//! | `guest` | `probe`, `freeze`, `unfreeze` |
//! | `ctl` | `ctl`: one command, the command list, or events |
//!
//! Each returns the process's exit status: 0 on success, 1 with one line
//! on standard error when it failed. (Usage errors, status 2, are found
//! earlier, by `cli::subcommands`.)

pub mod connection;
mod ctl;
mod guest;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::Subcommand;
use connection::RemoteError;

/// Why a subcommand could not do its work.
#[derive(Debug)]
pub enum ClientError {
    /// No socket file at the path.
    NoSocket { path: PathBuf },
    /// A socket file nobody listens on (a launcher that is gone).
    Stale { path: PathBuf },
    /// The caller may not connect (the socket is its owner's).
    Denied { path: PathBuf },
    /// No answer before the deadline.
    TimedOut {
        path: PathBuf,
        waiting_for: &'static str,
    },
    /// The launcher closed the connection.
    Closed {
        path: PathBuf,
        waiting_for: &'static str,
    },
    /// The launcher refused the connection (Busy).
    Refused { path: PathBuf, error: RemoteError },
    /// Something answered that does not speak this protocol.
    NotALauncher { path: PathBuf, line: String },
    Protocol {
        path: PathBuf,
        got: serde_json::Value,
    },
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl ClientError {
    fn connect(path: &Path, e: io::Error) -> ClientError {
        let path = path.to_path_buf();
        match e.kind() {
            io::ErrorKind::NotFound => ClientError::NoSocket { path },
            io::ErrorKind::ConnectionRefused => ClientError::Stale { path },
            io::ErrorKind::PermissionDenied => ClientError::Denied { path },
            _ => ClientError::Io {
                action: "connect to",
                path,
                source: e,
            },
        }
    }

    fn io(action: &'static str, path: &Path, source: io::Error) -> ClientError {
        ClientError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Names what was awaited when a time-out or a close had no name yet.
    fn waiting_for(self, what: &'static str) -> ClientError {
        match self {
            ClientError::TimedOut {
                path,
                waiting_for: "",
            } => ClientError::TimedOut {
                path,
                waiting_for: what,
            },
            ClientError::Closed {
                path,
                waiting_for: "",
            } => ClientError::Closed {
                path,
                waiting_for: what,
            },
            other => other,
        }
    }

    /// The one-line reason, with the time limit for a time-out.
    pub fn message(&self, limit: Duration) -> String {
        match self {
            ClientError::TimedOut { path, waiting_for } => format!(
                "the launcher at {} did not answer within {} (waiting for {}); it may be wedged or overloaded",
                path.display(),
                human_duration(limit),
                if waiting_for.is_empty() {
                    "a line"
                } else {
                    waiting_for
                }
            ),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::NoSocket { path } => write!(
                f,
                "no launcher socket at {}: the launcher is not running or not ready yet (or give --socket or --kubevirt-share-dir)",
                path.display()
            ),
            ClientError::Stale { path } => write!(
                f,
                "nothing listens on {}: the launcher that made it is gone",
                path.display()
            ),
            ClientError::Denied { path } => write!(
                f,
                "may not connect to {}: permission denied (the socket is mode 0600; only its owner, the launcher's user, and root may connect)",
                path.display()
            ),
            ClientError::TimedOut { path, waiting_for } => write!(
                f,
                "the launcher at {} did not answer in time (waiting for {waiting_for})",
                path.display()
            ),
            ClientError::Closed { path, waiting_for } => write!(
                f,
                "the launcher at {} closed the connection (while waiting for {waiting_for}); it may be exiting",
                path.display()
            ),
            ClientError::Refused { path, error } => {
                write!(
                    f,
                    "the launcher at {} refused the connection: {error}",
                    path.display()
                )
            }
            ClientError::NotALauncher { path, line } => write!(
                f,
                "{} did not answer as a virt-launcher does: {}",
                path.display(),
                shorten(line)
            ),
            ClientError::Protocol { path, got } => write!(
                f,
                "the launcher at {} speaks protocol {got}, not {}",
                path.display(),
                crate::protocol::PROTOCOL_VERSION
            ),
            ClientError::Io {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for ClientError {}

/// Runs a subcommand; returns the exit status.
pub fn run(subcommand: Subcommand) -> i32 {
    match subcommand {
        Subcommand::Help(spec) => {
            print!("{}", crate::cli::subcommands::help_text(spec));
            0
        }
        Subcommand::Probe(target) => guest::probe(&target),
        Subcommand::Freeze {
            target,
            unfreeze_timeout_seconds,
        } => guest::freeze(&target, unfreeze_timeout_seconds),
        Subcommand::Unfreeze(target) => guest::unfreeze(&target),
        Subcommand::Ctl {
            target,
            raw,
            request,
        } => ctl::run(&target, raw, request),
    }
}

/// Prints `virt-launcher NAME: MESSAGE` on standard error; returns 1.
fn fail(name: &str, message: impl fmt::Display) -> i32 {
    eprintln!("virt-launcher {name}: {message}");
    1
}

/// A duration as a person writes it: 1.5 s, 250 ms, 5 s.
fn human_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// A line from the other side, short enough for one line of error.
fn shorten(line: &str) -> String {
    const MAX: usize = 200;
    match line.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(human_duration(Duration::from_secs(5)), "5 s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
    }

    #[test]
    fn connect_errors_say_what_to_do() {
        let path = Path::new("/run/x/launcher-sock");
        let missing = ClientError::connect(path, io::Error::from(io::ErrorKind::NotFound));
        assert!(missing.to_string().contains("not running or not ready"));
        let stale = ClientError::connect(path, io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(stale.to_string().contains("is gone"));
        let denied = ClientError::connect(path, io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(denied.to_string().contains("permission denied"));
        let timed_out = ClientError::TimedOut {
            path: path.into(),
            waiting_for: "",
        }
        .waiting_for("the greeting");
        let message = timed_out.message(Duration::from_secs(2));
        assert!(
            message.contains("within 2 s (waiting for the greeting)"),
            "{message}"
        );
        assert!(!message.contains('\n'));
    }

    #[test]
    fn long_lines_are_shortened_on_a_char_boundary() {
        let long = "é".repeat(300);
        let short = shorten(&long);
        assert_eq!(short.chars().count(), 203);
        assert_eq!(shorten("abc"), "abc");
    }
}
