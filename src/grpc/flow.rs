//! HTTP/2 flow control (RFC 9113 section 5.2), one window at a time: a
//! connection has one of each kind, and so does every open stream.

/// The largest window HTTP/2 allows.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// The window every connection and stream starts with.
pub const DEFAULT_WINDOW: u32 = 65_535;

/// A window broken by the peer: a connection error, or a stream error for
/// a stream's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowError;

/// How much we may still send: the peer grants it with WINDOW_UPDATE and
/// SETTINGS_INITIAL_WINDOW_SIZE; every DATA payload uses it up.
#[derive(Debug)]
pub struct SendWindow(i64);

impl SendWindow {
    pub fn new(initial: u32) -> SendWindow {
        SendWindow(i64::from(initial))
    }

    /// Octets that may be sent now (a window made negative by a smaller
    /// SETTINGS_INITIAL_WINDOW_SIZE allows none).
    pub fn available(&self) -> usize {
        usize::try_from(self.0).unwrap_or(0)
    }

    pub fn consume(&mut self, sent: usize) {
        self.0 -= i64::try_from(sent).unwrap_or(i64::MAX);
    }

    /// A WINDOW_UPDATE; past 2^31-1 it is the peer's error.
    pub fn grow(&mut self, increment: u32) -> Result<(), FlowError> {
        self.adjust(i64::from(increment))
    }

    /// A change of SETTINGS_INITIAL_WINDOW_SIZE moves every stream's window
    /// by the difference, which may make it negative.
    pub fn adjust(&mut self, delta: i64) -> Result<(), FlowError> {
        let next = self.0 + delta;
        if next > MAX_WINDOW {
            return Err(FlowError);
        }
        self.0 = next;
        Ok(())
    }
}

/// How much the peer may still send us, and when to grant it more.
#[derive(Debug)]
pub struct ReceiveWindow {
    /// What the peer may send before our next WINDOW_UPDATE.
    left: i64,
    /// The window we keep granting.
    size: u32,
    /// Octets received and consumed but not yet granted back.
    consumed: u32,
}

impl ReceiveWindow {
    pub fn new(size: u32) -> ReceiveWindow {
        ReceiveWindow {
            left: i64::from(size),
            size,
            consumed: 0,
        }
    }

    /// A DATA frame's flow-controlled length (padding included); more than
    /// the window is the peer's error.
    pub fn receive(&mut self, len: u32) -> Result<(), FlowError> {
        if i64::from(len) > self.left {
            return Err(FlowError);
        }
        self.left -= i64::from(len);
        Ok(())
    }

    /// Octets that were received and are now dealt with (kept or dropped).
    /// Returns the WINDOW_UPDATE increment to send, once half the window
    /// is waiting: one update per half window, not one per frame.
    pub fn release(&mut self, len: u32) -> Option<u32> {
        self.consumed = self.consumed.saturating_add(len);
        if self.consumed < self.size / 2 {
            return None;
        }
        let increment = std::mem::take(&mut self.consumed);
        self.left += i64::from(increment);
        Some(increment)
    }

    /// What a connection's first WINDOW_UPDATE grants, so that its window
    /// (which starts at HTTP/2's default, settings or not) is this one.
    pub fn initial_increment(&self) -> Option<u32> {
        self.size.checked_sub(DEFAULT_WINDOW).filter(|&n| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sending_stops_at_the_window_and_resumes_on_an_update() {
        let mut w = SendWindow::new(100);
        assert_eq!(w.available(), 100);
        w.consume(100);
        assert_eq!(w.available(), 0);
        w.grow(50).unwrap();
        assert_eq!(w.available(), 50);
        // A smaller initial window can take it below zero.
        w.adjust(-80).unwrap();
        assert_eq!(w.available(), 0);
        w.grow(40).unwrap();
        assert_eq!(w.available(), 10);
    }

    #[test]
    fn a_window_past_2_pow_31_is_the_peers_error() {
        let mut w = SendWindow::new(DEFAULT_WINDOW);
        assert_eq!(w.grow(u32::MAX >> 1), Err(FlowError));
        assert_eq!(w.available(), usize::from(u16::MAX));
        let mut w = SendWindow::new(0);
        assert_eq!(w.grow(u32::MAX >> 1), Ok(()));
        assert_eq!(w.grow(1), Err(FlowError));
    }

    #[test]
    fn receiving_past_the_window_is_the_peers_error() {
        let mut w = ReceiveWindow::new(1000);
        w.receive(600).unwrap();
        assert_eq!(w.receive(401), Err(FlowError));
        w.receive(400).unwrap();
        assert_eq!(w.receive(1), Err(FlowError));
    }

    #[test]
    fn updates_are_granted_per_half_window() {
        let mut w = ReceiveWindow::new(1000);
        w.receive(300).unwrap();
        assert_eq!(w.release(300), None);
        w.receive(300).unwrap();
        assert_eq!(w.release(300), Some(600));
        // What was granted may be sent again.
        w.receive(1000).unwrap();
        assert_eq!(w.receive(1), Err(FlowError));
    }

    #[test]
    fn a_connection_window_is_raised_by_its_first_update() {
        let w = ReceiveWindow::new(1 << 20);
        assert_eq!(w.initial_increment(), Some((1 << 20) - DEFAULT_WINDOW));
        assert_eq!(ReceiveWindow::new(DEFAULT_WINDOW).initial_increment(), None);
    }
}
