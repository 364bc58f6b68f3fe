//! Line framing with a size limit and a time limit.
//!
//! A client can send anything; the reader never holds more than
//! `max_line_bytes` of one line. An oversized line is discarded up to its
//! newline and reported once, so the connection resynchronises on the next
//! line instead of being closed.
//!
//! Time: a line must be complete within [`LineTimeouts::line`] of its first
//! byte, however the bytes trickle in (a client sending one byte every
//! 29 s cannot hold its connection by restarting a per-read timer), and a
//! connection with no unfinished line may stay silent for
//! [`LineTimeouts::idle`] (or forever when `None`).

use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// One unit of input from a client.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete, non-blank line without its `\n` (or `\r\n`).
    Line(Vec<u8>),
    /// A line longer than the limit; `bytes` is how much was discarded.
    TooLarge { bytes: usize },
}

/// A source whose blocking reads can be bounded in time (a socket).
pub trait TimedRead: Read {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl TimedRead for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
}

/// The time limits of [`LineReader::next_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTimeouts {
    /// From a line's first byte to its newline.
    pub line: Duration,
    /// Silence allowed between lines; `None`: no limit.
    pub idle: Option<Duration>,
}

/// Why [`LineReader::next_frame`] gave up waiting; carried inside an
/// `io::Error` of kind `TimedOut`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stalled {
    /// A line was started and not finished within the line limit.
    UnfinishedLine(Duration),
    /// Nothing was sent for the idle limit.
    Idle(Duration),
}

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stalled::UnfinishedLine(limit) => write!(
                f,
                "a request line was not finished within {} s of its first byte",
                limit.as_secs()
            ),
            Stalled::Idle(limit) => write!(f, "idle for {} s", limit.as_secs()),
        }
    }
}

impl std::error::Error for Stalled {}

impl Stalled {
    /// The `Stalled` inside an error from `next_frame`, if that is what it is.
    pub fn from_error(err: &io::Error) -> Option<Stalled> {
        err.get_ref()
            .and_then(|inner| inner.downcast_ref::<Stalled>())
            .copied()
    }

    fn into_error(self) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, self)
    }
}

pub struct LineReader<R> {
    inner: BufReader<R>,
    max_line_bytes: usize,
    pending: PendingLine,
    /// The limits and how to apply a read timeout to `R` (set only where
    /// `R` is a [`TimedRead`]; any `Read` works without limits).
    timeouts: Option<(LineTimeouts, SetTimeout<R>)>,
    /// When the unfinished line's first byte arrived.
    line_started: Option<Instant>,
    /// The read timeout last set on `inner`, to avoid needless syscalls.
    applied_timeout: Option<Option<Duration>>,
}

type SetTimeout<R> = fn(&R, Option<Duration>) -> io::Result<()>;

impl<R: TimedRead> LineReader<R> {
    /// Sets the time limits (see the module documentation).
    pub fn set_timeouts(&mut self, timeouts: LineTimeouts) {
        self.timeouts = Some((timeouts, R::set_read_timeout));
    }
}

impl<R: Read> LineReader<R> {
    /// A reader without time limits: reads block as the source does.
    pub fn new(inner: R, max_line_bytes: usize) -> Self {
        LineReader {
            inner: BufReader::with_capacity(64 * 1024, inner),
            max_line_bytes,
            pending: PendingLine::default(),
            timeouts: None,
            line_started: None,
            applied_timeout: None,
        }
    }

    /// Changes the idle limit only (a subscriber has none).
    pub fn set_idle_timeout(&mut self, idle: Option<Duration>) {
        if let Some((t, _)) = &mut self.timeouts {
            t.idle = idle;
        }
    }

    /// Whether part of a line has been read and its end not yet.
    pub fn has_partial_line(&self) -> bool {
        !self.pending.line.is_empty() || self.pending.discarding > 0
    }

    /// Returns the next frame, or `None` at end of input. Blank lines are
    /// skipped. A final line without a newline is still returned. When a
    /// time limit passes, the error is of kind `TimedOut` and carries a
    /// [`Stalled`].
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if self.inner.buffer().is_empty() {
                self.arm_timeout()?;
            }
            let available = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => return Err(self.stalled(e)),
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                self.line_started = None;
                return Ok(self.pending.finish_at_eof(self.max_line_bytes));
            }
            let (consumed, frame) = match available.iter().position(|&b| b == b'\n') {
                Some(pos) => (
                    pos + 1,
                    self.pending
                        .take_segment(&available[..pos], true, self.max_line_bytes),
                ),
                None => (
                    available.len(),
                    self.pending
                        .take_segment(available, false, self.max_line_bytes),
                ),
            };
            self.inner.consume(consumed);
            if self.has_partial_line() {
                self.line_started.get_or_insert_with(Instant::now);
            } else {
                self.line_started = None;
            }
            if let Some(frame) = frame {
                return Ok(Some(frame));
            }
        }
    }

    /// Before a read that may block: bound it by what is left of the
    /// current line's time, or by the idle limit between lines.
    fn arm_timeout(&mut self) -> io::Result<()> {
        let Some((limits, set_timeout)) = self.timeouts else {
            return Ok(());
        };
        let wanted = match self.line_started {
            Some(started) => {
                let left = limits.line.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(Stalled::UnfinishedLine(limits.line).into_error());
                }
                Some(left)
            }
            None => limits.idle,
        };
        // A partial line's timeout shrinks with every read; set it each
        // time. Between lines it only changes with the limits.
        if self.line_started.is_some() || self.applied_timeout != Some(wanted) {
            set_timeout(self.inner.get_ref(), wanted)?;
            self.applied_timeout = Some(wanted);
        }
        Ok(())
    }

    fn stalled(&self, err: io::Error) -> io::Error {
        match (self.timeouts.map(|(limits, _)| limits), self.line_started) {
            (Some(limits), Some(_)) => Stalled::UnfinishedLine(limits.line).into_error(),
            (
                Some(LineTimeouts {
                    idle: Some(idle), ..
                }),
                None,
            ) => Stalled::Idle(idle).into_error(),
            _ => err,
        }
    }
}

fn is_timeout(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// The line being assembled, kept apart from the reader so that a segment
/// borrowed from the reader's buffer can be appended without a copy.
#[derive(Default)]
struct PendingLine {
    line: Vec<u8>,
    /// Bytes thrown away so far of an oversized line (0 when not discarding).
    discarding: usize,
}

impl PendingLine {
    /// Adds a piece of the current line; `complete` when it ended with `\n`.
    fn take_segment(&mut self, segment: &[u8], complete: bool, max: usize) -> Option<Frame> {
        // Discarded bytes count the line's content only, not its `\n`.
        if self.discarding > 0 {
            self.discarding += segment.len();
        } else if self.line.len() + segment.len() > max + 1 {
            // One byte of slack for the `\r` of a `\r\n` ending, which does
            // not count; the exact limit is checked when the line ends.
            self.discarding = self.line.len() + segment.len();
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(segment);
        }
        if !complete {
            return None;
        }
        self.end_of_line(max)
    }

    fn end_of_line(&mut self, max: usize) -> Option<Frame> {
        if self.discarding > 0 {
            let bytes = std::mem::take(&mut self.discarding);
            return Some(Frame::TooLarge { bytes });
        }
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.len() > max {
            return Some(Frame::TooLarge { bytes: line.len() });
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        Some(Frame::Line(line))
    }

    fn finish_at_eof(&mut self, max: usize) -> Option<Frame> {
        if self.discarding == 0 && self.line.is_empty() {
            return None;
        }
        self.end_of_line(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], max: usize) -> Vec<Frame> {
        let mut reader = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            out.push(frame);
        }
        out
    }

    fn line(s: &str) -> Frame {
        Frame::Line(s.as_bytes().to_vec())
    }

    #[test]
    fn splits_lines_and_skips_blank_ones() {
        assert_eq!(
            frames(b"a\n\n  \r\nb\r\nc", 10),
            vec![line("a"), line("b"), line("c")]
        );
    }

    #[test]
    fn oversized_line_is_reported_once_and_reader_resyncs() {
        let mut input = vec![b'x'; 25];
        input.extend_from_slice(b"\nok\n");
        assert_eq!(
            frames(&input, 10),
            vec![Frame::TooLarge { bytes: 25 }, line("ok")]
        );
    }

    #[test]
    fn line_of_exactly_the_limit_passes_even_with_crlf() {
        assert_eq!(frames(b"0123456789\r\n", 10), vec![line("0123456789")]);
        assert_eq!(
            frames(b"0123456789A\n", 10),
            vec![Frame::TooLarge { bytes: 11 }]
        );
    }

    #[test]
    fn oversized_line_across_many_reads_never_buffers_it() {
        // A reader that hands out one byte at a time exercises the
        // partial-segment path.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() || buf.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.0[0];
                self.0 = &self.0[1..];
                Ok(1)
            }
        }
        let mut input = vec![b'y'; 1000];
        input.extend_from_slice(b"\nnext\n");
        let mut reader = LineReader::new(Trickle(&input), 16);
        assert_eq!(
            reader.next_frame().unwrap(),
            Some(Frame::TooLarge { bytes: 1000 })
        );
        assert!(reader.pending.line.capacity() <= 64);
        assert_eq!(reader.next_frame().unwrap(), Some(line("next")));
        assert_eq!(reader.next_frame().unwrap(), None);
    }

    #[test]
    fn oversized_final_line_without_newline() {
        assert_eq!(frames(&[b'z'; 40], 8), vec![Frame::TooLarge { bytes: 40 }]);
    }

    /// A client that sends one byte every `gap` over a real socket.
    fn trickling_client(gap: Duration, bytes: &'static [u8]) -> UnixStream {
        let (ours, theirs) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut theirs = theirs;
            for b in bytes {
                if theirs.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(gap);
            }
            // Keep the socket open until the reader gives up.
            std::thread::sleep(Duration::from_secs(30));
        });
        ours
    }

    #[test]
    fn a_line_must_finish_in_time_however_its_bytes_trickle_in() {
        // Each byte comes well within the limit of the one before; the
        // line as a whole does not.
        let socket = trickling_client(Duration::from_millis(100), b"{\"execute\":\"ping\"}\n");
        let mut reader = LineReader::new(socket, 1024);
        let limit = Duration::from_millis(500);
        reader.set_timeouts(LineTimeouts {
            line: limit,
            idle: None,
        });
        // The whole line arrives after about 2 s; a per-read timer would
        // return it. The reader gives up instead.
        let err = reader.next_frame().unwrap_err();
        assert_eq!(
            Stalled::from_error(&err),
            Some(Stalled::UnfinishedLine(limit))
        );
        assert!(reader.has_partial_line());
    }

    #[test]
    fn idle_limit_applies_between_lines_only() {
        let socket = trickling_client(Duration::from_millis(10), b"{}\n");
        let mut reader = LineReader::new(socket, 1024);
        let idle = Duration::from_millis(300);
        reader.set_timeouts(LineTimeouts {
            line: Duration::from_secs(30),
            idle: Some(idle),
        });
        assert_eq!(reader.next_frame().unwrap(), Some(line("{}")));
        let err = reader.next_frame().unwrap_err();
        assert_eq!(Stalled::from_error(&err), Some(Stalled::Idle(idle)));
        assert!(!reader.has_partial_line());
    }

    #[test]
    fn without_limits_a_timeout_error_passes_through() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        ours.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut reader = LineReader::new(ours, 1024);
        let err = reader.next_frame().unwrap_err();
        assert!(is_timeout(&err));
        assert_eq!(Stalled::from_error(&err), None);
    }
}
