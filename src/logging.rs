//! Logging to standard error through `log` and env_logger.
//!
//! The level: `RUST_LOG` when it is set (it replaces `-v` entirely, as the
//! man page says), else info, debug with `-v`, trace with `-vv`. A line:
//!
//! ```text
//! 2026-11-30T14:22:05.123456Z INFO  [main] ready: /var/run/kubevirt/sockets/launcher-sock (12.3 ms after start)
//! ```
//!
//! the time in RFC 3339 UTC with microseconds, the level, the thread's name,
//! the message. [`RateLimit`] keeps warnings that a client or a flood can
//! trigger from filling the log.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The filter the launcher runs with: `RUST_LOG` if set and not empty,
/// else the `-v` count's level.
pub fn filter_spec(verbosity: u8, rust_log: Option<&str>) -> String {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(spec) => spec.to_string(),
        None => match verbosity {
            0 => "info",
            1 => "debug",
            _ => "trace",
        }
        .to_string(),
    }
}

thread_local! {
    /// What this thread's log lines say instead of its name: the job a
    /// worker thread runs now (`job-sync`), see manager/workers.rs.
    static LABEL: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Sets (or with `None` clears) the name this thread's log lines show.
pub fn set_thread_label(label: Option<String>) {
    LABEL.with(|l| *l.borrow_mut() = label);
}

pub fn init(verbosity: u8) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let mut builder = env_logger::Builder::new();
    builder.parse_filters(&filter_spec(verbosity, rust_log.as_deref()));
    builder.format(|out, record| {
        let thread = std::thread::current();
        let message = record.args().to_string();
        LABEL.with(|label| {
            writeln!(
                out,
                "{} {:<5} [{}] {}",
                rfc3339_utc(SystemTime::now()),
                record.level(),
                label.borrow().as_deref().or(thread.name()).unwrap_or("?"),
                indent_continuations(&message)
            )
        })
    });
    // A second init (tests) keeps the first logger.
    let _ = builder.try_init();
}

/// A message of several lines (a domain XML at debug level) keeps every
/// line after the first indented, so each record still starts a line with
/// its timestamp and a reader can tell where the next one begins.
pub fn indent_continuations(message: &str) -> std::borrow::Cow<'_, str> {
    if message.contains('\n') {
        std::borrow::Cow::Owned(message.trim_end_matches('\n').replace('\n', "\n    "))
    } else {
        std::borrow::Cow::Borrowed(message)
    }
}

/// `2026-11-30T14:22:05.123456Z`. Times before 1970 print as the epoch.
pub fn rfc3339_utc(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days(i64::try_from(secs / 86_400).unwrap_or(i64::MAX));
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        since.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // 1..=31 and 1..=12 by construction.
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Counts and summarises a warning that can repeat without bound (a flood
/// of refused connections, clients dropped for stalling), in the manner of
/// Firecracker's rate-limited logging: the first `burst` occurrences in a
/// `window` are logged, the rest only counted; the next line logged after
/// a quiet spell (or [`RateLimit::flush`] at exit) says how many were left
/// out.
pub struct RateLimit {
    window: Duration,
    burst: u32,
    state: Mutex<RateState>,
}

struct RateState {
    window_start: Option<Instant>,
    in_window: u32,
    suppressed: u64,
}

/// What to do with one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it; `suppressed` occurrences before it were not logged.
    Log { suppressed: u64 },
    /// Count it only.
    Suppress,
}

impl RateLimit {
    pub const fn new(window: Duration, burst: u32) -> RateLimit {
        RateLimit {
            window,
            burst,
            state: Mutex::new(RateState {
                window_start: None,
                in_window: 0,
                suppressed: 0,
            }),
        }
    }

    /// Decides about one occurrence at `now`.
    pub fn check(&self, now: Instant) -> Verdict {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let expired = s
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.window);
        if expired {
            s.window_start = Some(now);
            s.in_window = 0;
        }
        if s.in_window < self.burst {
            s.in_window += 1;
            Verdict::Log {
                suppressed: std::mem::take(&mut s.suppressed),
            }
        } else {
            s.suppressed += 1;
            Verdict::Suppress
        }
    }

    /// Occurrences counted but not logged since the last logged one; resets
    /// the count.
    pub fn flush(&self) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut s.suppressed)
    }
}

/// Logs a warning through a [`RateLimit`]: `warn_limited!(LIMIT, "...", args)`.
/// A line after suppressed ones ends with how many were left out.
#[macro_export]
macro_rules! warn_limited {
    ($limit:expr, $($arg:tt)+) => {
        match $limit.check(std::time::Instant::now()) {
            $crate::logging::Verdict::Log { suppressed: 0 } => log::warn!($($arg)+),
            $crate::logging::Verdict::Log { suppressed } => log::warn!(
                "{} ({suppressed} more like it not logged)",
                format_args!($($arg)+)
            ),
            $crate::logging::Verdict::Suppress => {}
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_replaces_the_verbosity_flags() {
        assert_eq!(filter_spec(0, None), "info");
        assert_eq!(filter_spec(1, None), "debug");
        assert_eq!(filter_spec(2, None), "trace");
        assert_eq!(filter_spec(5, None), "trace");
        // RUST_LOG wins over -v, in both directions.
        assert_eq!(filter_spec(2, Some("warn")), "warn");
        assert_eq!(
            filter_spec(0, Some("virt_launcher::server=trace")),
            "virt_launcher::server=trace"
        );
        // An empty RUST_LOG is as if unset.
        assert_eq!(filter_spec(1, Some("  ")), "debug");
    }

    #[test]
    fn continuation_lines_are_indented() {
        assert_eq!(indent_continuations("one line"), "one line");
        assert_eq!(
            indent_continuations("xml:\n<domain>\n</domain>\n"),
            "xml:\n    <domain>\n    </domain>"
        );
    }

    #[test]
    fn rfc3339_timestamps() {
        let at = |secs: u64, micros: u64| {
            rfc3339_utc(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 1), "2000-02-29T00:00:00.000001Z");
        assert_eq!(at(1_796_013_050, 255_581), "2026-11-30T04:30:50.255581Z");
        assert_eq!(at(4_102_444_799, 999_999), "2099-12-31T23:59:59.999999Z");
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn rate_limit_logs_a_burst_then_counts() {
        let limit = RateLimit::new(Duration::from_secs(10), 3);
        let t0 = Instant::now();
        let verdicts: Vec<Verdict> = (0..10).map(|_| limit.check(t0)).collect();
        assert_eq!(&verdicts[..3], &[Verdict::Log { suppressed: 0 }; 3]);
        assert!(verdicts[3..].iter().all(|v| *v == Verdict::Suppress));
        // The first line of the next window reports the 7 left out.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(limit.check(later), Verdict::Log { suppressed: 7 });
        assert_eq!(limit.check(later), Verdict::Log { suppressed: 0 });
        assert_eq!(limit.check(later), Verdict::Log { suppressed: 0 });
        assert_eq!(limit.check(later), Verdict::Suppress);
        assert_eq!(limit.flush(), 1);
        assert_eq!(limit.flush(), 0);
    }
}
