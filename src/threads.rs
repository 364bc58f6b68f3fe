//! Named threads whose panics become an orderly exit.
//!
//! A panic in any thread is caught, logged and reported to the main thread,
//! which exits with a non-zero status instead of hanging with a dead part.
//!
//! The static build is compiled with `panic = "abort"` (Cargo.toml's
//! `static` profile): without unwinding's landing pads it is much smaller
//! (docs/figures.md). There a panic cannot be caught, so [`exit_on_panic`]
//! installs a hook that logs it the same way and ends the process at once
//! with the internal-error status, rather than letting `abort` kill it with
//! SIGABRT. What the default build does after a caught panic (answering
//! requests already read, removing the socket) is skipped; what must not
//! outlive the launcher (its libvirt daemons and their QEMU, passt) dies
//! with it as after a SIGKILL.

use std::any::Any;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::thread::{self, JoinHandle};

use crossbeam_channel::Sender;

/// Why a thread ended the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    pub thread: String,
    pub message: String,
}

pub type FatalSender = Sender<Fatal>;

pub fn spawn_named<F, T>(
    name: &str,
    fatal: &FatalSender,
    body: F,
) -> io::Result<JoinHandle<Option<T>>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let fatal = fatal.clone();
    let thread_name = name.to_string();
    thread::Builder::new()
        .name(name.to_string())
        .spawn(move || match panic::catch_unwind(AssertUnwindSafe(body)) {
            Ok(value) => Some(value),
            Err(payload) => {
                let message = panic_message(&payload);
                log::error!("thread {thread_name} panicked: {message}");
                let _ = fatal.send(Fatal {
                    thread: thread_name,
                    message,
                });
                None
            }
        })
}

pub fn panic_message(payload: &Box<dyn Any + Send>) -> String {
    payload_message(payload.as_ref())
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// What the abort build's hook prints for a panic: the thread, where, and
/// the message (the default build prints the same parts in two lines).
fn describe_panic(thread: Option<&str>, location: Option<String>, message: &str) -> String {
    let thread = thread.unwrap_or("unnamed");
    match location {
        Some(at) => format!("internal error: thread {thread} panicked at {at}: {message}"),
        None => format!("internal error: thread {thread} panicked: {message}"),
    }
}

/// In a build whose panics abort (the static one), makes a panic log and
/// exit with [`ExitCode::Internal`](crate::exit::ExitCode::Internal), the
/// status the default build reaches by catching it. A no-op otherwise.
pub fn exit_on_panic() {
    if cfg!(panic = "abort") {
        panic::set_hook(Box::new(|info| {
            let line = describe_panic(
                thread::current().name(),
                info.location().map(ToString::to_string),
                &payload_message(info.payload()),
            );
            log::error!("{line}");
            eprintln!("virt-launcher: {line}");
            std::process::exit(crate::exit::ExitCode::Internal.code());
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    #[test]
    fn panic_is_reported_not_propagated() {
        let (tx, rx) = unbounded();
        // Keep the default hook from printing the expected panic.
        let handle = spawn_named("boom", &tx, || -> u32 { panic!("kaboom") }).unwrap();
        assert_eq!(handle.join().unwrap(), None);
        let fatal = rx.recv().unwrap();
        assert_eq!(fatal.thread, "boom");
        assert_eq!(fatal.message, "kaboom");
        let ok = spawn_named("fine", &tx, || 7).unwrap();
        assert_eq!(ok.join().unwrap(), Some(7));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn an_aborting_panic_is_described_with_thread_place_and_message() {
        assert_eq!(
            describe_panic(Some("manager"), Some("src/x.rs:3:9".into()), "boom"),
            "internal error: thread manager panicked at src/x.rs:3:9: boom"
        );
        assert_eq!(
            describe_panic(None, None, "boom"),
            "internal error: thread unnamed panicked: boom"
        );
    }
}
