//! The ranges that numbers from outside share (flags, socket arguments,
//! VMI fields), and [`later`], the one way to turn such a number into a
//! deadline. A number out of its range is refused where it is read, with
//! the range in the message; what is accepted can then be added to an
//! instant or multiplied without overflow, and `later` saturates anyway.
//!
//! Ranges that belong to one value alone live beside its parser (the
//! guest commands' `MAX_GUEST_TIMEOUT_SECONDS` in `command`, guest memory
//! in `convert::memory`, ...); the man page, docs/protocol.md and
//! docs/vmi.md state each one.

use std::time::{Duration, Instant};

/// The longest duration or number of seconds any flag, socket argument or
/// VMI field may give (3650 days: "ten years" in the docs). Longer waits
/// mean nothing to a launcher, and every deadline built from one stays
/// far inside what `Instant` and `SystemTime` can hold.
pub const MAX_SECONDS: u64 = 3650 * 24 * 3600;

/// [`MAX_SECONDS`] as a duration.
pub const MAX_DURATION: Duration = Duration::from_secs(MAX_SECONDS);

/// How [`MAX_DURATION`] is written in messages and the docs.
pub const MAX_DURATION_TEXT: &str = "87600h (ten years)";

/// `at + wait`, or the latest instant within [`MAX_DURATION`] of `at` when
/// that would overflow: a deadline too far away to matter, never a panic.
pub fn later(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .or_else(|| at.checked_add(MAX_DURATION))
        .unwrap_or(at)
}

/// `Instant::now() + wait`, saturating as [`later`] does.
pub fn deadline_in(wait: Duration) -> Instant {
    later(Instant::now(), wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_maximum_is_ten_years_of_seconds() {
        assert_eq!(MAX_SECONDS, 315_360_000);
        assert_eq!(MAX_DURATION.as_secs() / 3600, 87_600);
        assert!(MAX_DURATION_TEXT.starts_with("87600h"));
    }

    #[test]
    fn later_saturates_instead_of_panicking() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let far = later(now, Duration::MAX);
        assert!(far >= now + MAX_DURATION, "{far:?}");
        assert!(deadline_in(Duration::MAX) > now);
        assert!(deadline_in(Duration::from_secs(u64::MAX)) > now);
    }
}
