//! Line framing with a size limit.
//!
//! A client can send anything; the reader never holds more than
//! `max_line_bytes` of one line. An oversized line is discarded up to its
//! newline and reported once, so the connection resynchronises on the next
//! line instead of being closed.

use std::io::{self, BufRead, BufReader, Read};

/// One unit of input from a client.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete, non-blank line without its `\n` (or `\r\n`).
    Line(Vec<u8>),
    /// A line longer than the limit; `bytes` is how much was discarded.
    TooLarge { bytes: usize },
}

pub struct LineReader<R> {
    inner: BufReader<R>,
    max_line_bytes: usize,
    pending: PendingLine,
}

impl<R: Read> LineReader<R> {
    pub fn new(inner: R, max_line_bytes: usize) -> Self {
        LineReader {
            inner: BufReader::with_capacity(64 * 1024, inner),
            max_line_bytes,
            pending: PendingLine::default(),
        }
    }

    /// Whether part of a line has been read and its end not yet.
    pub fn has_partial_line(&self) -> bool {
        !self.pending.line.is_empty() || self.pending.discarding > 0
    }

    /// Returns the next frame, or `None` at end of input. Blank lines are
    /// skipped. A final line without a newline is still returned.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        loop {
            let available = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
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
            if let Some(frame) = frame {
                return Ok(Some(frame));
            }
        }
    }
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
}
