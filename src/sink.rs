//! `Sink<T>`: where a thread sends its messages, without knowing who reads
//! them or how.
//!
//! The domain manager reads all of its inputs from one channel (one wait,
//! and one wake-up to unregister from, per message: a `select!` over a
//! channel per input paid for every channel on every request). A thread
//! that produces one kind of input (the signal watcher, the agent poller,
//! libvirt's event callbacks, the manager's own workers) holds a sink that
//! wraps each message in the manager's input enum. Tests and benchmarks
//! hand the same code a sink made from a plain channel of that one type.

use std::fmt;
use std::sync::Arc;

use crossbeam_channel::Sender;

/// The reader is gone; the message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the receiving thread has stopped")
    }
}

impl std::error::Error for Closed {}

type SendFn<T> = dyn Fn(T) -> Result<(), Closed> + Send + Sync;

/// A cheap, cloneable handle that sends `T`s somewhere.
pub struct Sink<T>(Arc<SendFn<T>>);

impl<T> Clone for Sink<T> {
    fn clone(&self) -> Self {
        Sink(Arc::clone(&self.0))
    }
}

impl<T> fmt::Debug for Sink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sink")
    }
}

impl<T: Send + 'static> Sink<T> {
    /// Sends each `T` into a channel of `U`, wrapped by `wrap` (an enum
    /// variant's constructor, typically).
    pub fn wrapping<U: Send + 'static>(tx: Sender<U>, wrap: fn(T) -> U) -> Sink<T> {
        Sink(Arc::new(move |msg| tx.send(wrap(msg)).map_err(|_| Closed)))
    }

    /// Sends `msg`; `Closed` when nobody reads any more.
    pub fn send(&self, msg: T) -> Result<(), Closed> {
        (self.0)(msg)
    }
}

impl<T: Send + 'static> From<Sender<T>> for Sink<T> {
    fn from(tx: Sender<T>) -> Sink<T> {
        Sink(Arc::new(move |msg| tx.send(msg).map_err(|_| Closed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    #[derive(Debug, PartialEq)]
    enum Input {
        Number(u32),
        Word(&'static str),
    }

    #[test]
    fn wrapped_messages_arrive_in_order_on_the_shared_channel() {
        let (tx, rx) = unbounded();
        let numbers = Sink::wrapping(tx.clone(), Input::Number);
        let words = Sink::wrapping(tx, Input::Word);
        numbers.send(1).unwrap();
        words.send("two").unwrap();
        numbers.clone().send(3).unwrap();
        let got: Vec<Input> = rx.try_iter().collect();
        assert_eq!(
            got,
            [Input::Number(1), Input::Word("two"), Input::Number(3)]
        );
    }

    #[test]
    fn a_sink_whose_reader_is_gone_says_closed() {
        let (tx, rx) = unbounded::<u32>();
        let sink = Sink::from(tx);
        sink.send(1).unwrap();
        drop(rx);
        assert_eq!(sink.send(2), Err(Closed));
        let (tx, rx) = unbounded();
        let wrapped = Sink::wrapping(tx, Input::Number);
        drop(rx);
        assert_eq!(wrapped.send(3), Err(Closed));
    }
}
