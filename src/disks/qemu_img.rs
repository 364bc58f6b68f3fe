//! Running `qemu-img` with a deadline.
//!
//! Output is read by two helper threads (one per pipe) that hand it over a
//! channel; the caller waits with `recv_timeout`, so there is no polling. On
//! timeout the child is killed and reaped.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Why a command did not succeed.
#[derive(Debug)]
pub(crate) enum CommandFailure {
    /// It could not be started (not installed, not executable, ...).
    Spawn(std::io::Error),
    /// It ran longer than allowed and was killed.
    TimedOut(Duration),
    /// It exited unsuccessfully; `stderr` is its trimmed error output.
    Failed { status: String, stderr: String },
    /// Waiting for it or reading its output failed.
    Io(std::io::Error),
}

impl std::fmt::Display for CommandFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandFailure::Spawn(err) => write!(
                f,
                "could not start it ({err}); is qemu-img (package qemu-utils) installed?"
            ),
            CommandFailure::TimedOut(limit) => write!(
                f,
                "it did not finish within {} s and was killed",
                limit.as_secs()
            ),
            CommandFailure::Failed { status, stderr } if stderr.is_empty() => {
                write!(f, "it failed ({status})")
            }
            CommandFailure::Failed { status, stderr } => {
                write!(f, "it failed ({status}): {stderr}")
            }
            CommandFailure::Io(err) => write!(f, "reading its result failed: {err}"),
        }
    }
}

impl std::error::Error for CommandFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CommandFailure::Spawn(err) | CommandFailure::Io(err) => Some(err),
            CommandFailure::TimedOut(_) | CommandFailure::Failed { .. } => None,
        }
    }
}

/// Which pipe a chunk of output came from.
enum Pipe {
    Stdout,
    Stderr,
}

/// Runs `program args…` and returns its stdout, or why it failed.
pub(crate) fn run(
    program: &Path,
    args: &[&OsStr],
    timeout: Duration,
) -> Result<Vec<u8>, CommandFailure> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(CommandFailure::Spawn)?;
    let (sender, receiver) = mpsc::channel();
    let readers = [
        child
            .stdout
            .take()
            .map(|pipe| (Pipe::Stdout, Box::new(pipe) as Box<dyn Read + Send>)),
        child
            .stderr
            .take()
            .map(|pipe| (Pipe::Stderr, Box::new(pipe) as Box<dyn Read + Send>)),
    ];
    let mut expected = 0;
    for (pipe, mut reader) in readers.into_iter().flatten() {
        let sender = sender.clone();
        let spawned = thread::Builder::new()
            .name("qemu-img-output".to_string())
            .spawn(move || {
                let mut buffer = Vec::new();
                let result = reader.read_to_end(&mut buffer).map(|_| buffer);
                // The receiver is gone only if the caller already gave up.
                let _ = sender.send((pipe, result));
            });
        if let Err(err) = spawned {
            kill_and_reap(&mut child);
            return Err(CommandFailure::Io(err));
        }
        expected += 1;
    }
    drop(sender);

    let deadline = Instant::now() + timeout;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    for _ in 0..expected {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(remaining) {
            Ok((pipe, Ok(bytes))) => match pipe {
                Pipe::Stdout => stdout = bytes,
                Pipe::Stderr => stderr = bytes,
            },
            Ok((_, Err(err))) => {
                kill_and_reap(&mut child);
                return Err(CommandFailure::Io(err));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                kill_and_reap(&mut child);
                return Err(CommandFailure::TimedOut(timeout));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // Both pipes are closed, which for qemu-img means it has exited.
    let status = child.wait().map_err(CommandFailure::Io)?;
    if status.success() {
        Ok(stdout)
    } else {
        Err(CommandFailure::Failed {
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
        })
    }
}

fn kill_and_reap(child: &mut Child) {
    // Both can only fail if the child already exited, which is fine here.
    let _ = child.kill();
    let _ = child.wait();
}

/// What `qemu-img info` says about an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImageInfo {
    pub format: String,
    pub backing_file: Option<String>,
}

#[derive(serde::Deserialize)]
struct InfoJson {
    format: String,
    #[serde(rename = "backing-filename", default)]
    backing_filename: Option<String>,
}

/// `qemu-img info --output=json -U <image>`; `-U` (force-share) lets it read an
/// image another process holds open.
pub(crate) fn info(
    qemu_img: &Path,
    image: &Path,
    timeout: Duration,
) -> Result<ImageInfo, CommandFailure> {
    let args: [&OsStr; 5] = [
        "info".as_ref(),
        "--output=json".as_ref(),
        "-U".as_ref(),
        "--".as_ref(),
        image.as_os_str(),
    ];
    let stdout = run(qemu_img, &args, timeout)?;
    let parsed: InfoJson = serde_json::from_slice(&stdout).map_err(|err| {
        CommandFailure::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unexpected output: {err}"),
        ))
    })?;
    Ok(ImageInfo {
        format: parsed.format,
        backing_file: parsed.backing_filename,
    })
}

/// `qemu-img create -f qcow2 -F <format> -b <backing> <overlay>`.
pub(crate) fn create_overlay(
    qemu_img: &Path,
    overlay: &Path,
    backing: &Path,
    backing_format: &str,
    timeout: Duration,
) -> Result<(), CommandFailure> {
    let args: [&OsStr; 9] = [
        "create".as_ref(),
        "-q".as_ref(),
        "-f".as_ref(),
        "qcow2".as_ref(),
        "-F".as_ref(),
        backing_format.as_ref(),
        "-b".as_ref(),
        backing.as_os_str(),
        overlay.as_os_str(),
    ];
    run(qemu_img, &args, timeout).map(|_| ())
}

/// `qemu-img create -f qcow2 <image> <size>`.
pub(crate) fn create_qcow2(
    qemu_img: &Path,
    image: &Path,
    size: u64,
    timeout: Duration,
) -> Result<(), CommandFailure> {
    let size = size.to_string();
    let args: [&OsStr; 6] = [
        "create".as_ref(),
        "-q".as_ref(),
        "-f".as_ref(),
        "qcow2".as_ref(),
        image.as_os_str(),
        size.as_ref(),
    ];
    run(qemu_img, &args, timeout).map(|_| ())
}

/// A qcow2 image at `overlay` with only metadata, whose data is the raw
/// image `data_file` as it is (`data_file_raw`), of `size` bytes, with
/// KubeVirt's 256 KiB clusters. `qemu-img create` would truncate the
/// data file it is given, so the image is created over `placeholder` (a
/// new sparse file) and then pointed at `data_file` with `qemu-img amend`,
/// which opens only the placeholder; the caller removes the placeholder.
pub(crate) fn create_data_file_overlay(
    qemu_img: &Path,
    overlay: &Path,
    data_file: &Path,
    placeholder: &Path,
    size: u64,
    timeout: Duration,
) -> Result<(), CommandFailure> {
    let size = size.to_string();
    let create_options = format!(
        "data_file={},data_file_raw=on,cluster_size=262144",
        escape_option(placeholder)
    );
    let args: [&OsStr; 8] = [
        "create".as_ref(),
        "-q".as_ref(),
        "-f".as_ref(),
        "qcow2".as_ref(),
        "-o".as_ref(),
        create_options.as_ref(),
        overlay.as_os_str(),
        size.as_ref(),
    ];
    run(qemu_img, &args, timeout)?;
    let amend_options = format!("data_file={}", escape_option(data_file));
    let args: [&OsStr; 7] = [
        "amend".as_ref(),
        "-q".as_ref(),
        "-f".as_ref(),
        "qcow2".as_ref(),
        "-o".as_ref(),
        amend_options.as_ref(),
        overlay.as_os_str(),
    ];
    run(qemu_img, &args, timeout).map(|_| ())
}

/// A path as the value of a `-o` option: qemu's option parser splits at
/// commas, and a doubled comma stands for one.
fn escape_option(path: &Path) -> String {
    path.to_string_lossy().replace(',', ",,")
}

/// The default program: found through PATH like KubeVirt does.
pub(crate) fn default_program() -> PathBuf {
    PathBuf::from("qemu-img")
}
