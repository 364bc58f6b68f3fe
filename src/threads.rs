//! Named threads whose panics become an orderly exit.
//!
//! A panic in any thread is caught, logged and reported to the main thread,
//! which exits with a non-zero status instead of hanging with a dead part.

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
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
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
}
