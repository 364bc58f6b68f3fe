//! Parsers for flag values. Each returns a short reason on failure; the
//! caller adds the flag name and the value.

use std::time::Duration;

use crate::limits::{MAX_DURATION, MAX_DURATION_TEXT, MAX_SECONDS};

/// Most command-socket connections `--max-clients` may allow: each is a
/// thread and a file descriptor.
pub const MAX_CLIENTS: usize = 65_536;

/// `--max-line-bytes`: the shortest limit (a request line's envelope needs
/// some room) and the longest (each client may buffer one whole line).
pub const MIN_LINE_BYTES: usize = 64;
pub const MAX_LINE_BYTES: usize = 1 << 30;

/// A duration of more than zero and at most [`MAX_DURATION`] (see
/// [`parse_duration_or_zero`] for the syntax). Zero is refused: a zero
/// deadline or poll interval has no useful meaning, and a flag that needs
/// "never" says so with its own parser.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    match parse_duration_or_zero(v)? {
        Duration::ZERO => Err("must be more than zero".into()),
        d => Ok(d),
    }
}

/// `--client-idle-timeout`: 0 means no idle limit.
pub fn parse_idle_timeout(v: &str) -> Result<Option<Duration>, String> {
    parse_duration_or_zero(v).map(|d| (!d.is_zero()).then_some(d))
}

/// Durations as KubeVirt's controller writes them: `90s`, `5m`, `1h`,
/// `4m47s`, `500ms`, or plain seconds (`287`); at most [`MAX_DURATION`].
pub fn parse_duration_or_zero(v: &str) -> Result<Duration, String> {
    let d = parse_duration_saturating(v)?;
    if d > MAX_DURATION {
        return Err(format!("must be at most {MAX_DURATION_TEXT}"));
    }
    Ok(d)
}

/// The duration syntax without a maximum: a sum too large for `Duration`
/// is `Duration::MAX`, for the caller to refuse with its own range.
pub fn parse_duration_saturating(v: &str) -> Result<Duration, String> {
    const HINT: &str = "expected a duration such as 90s, 5m, 1h, 4m30s or plain seconds";
    if v.is_empty() {
        return Err(HINT.into());
    }
    // Digits beyond u64 are a number too large, not a syntax error; the
    // sum saturates and is then held to the maximum.
    let number = |digits: &str| digits.parse::<u64>().unwrap_or(u64::MAX);
    let total = if v.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(number(v))
    } else {
        let mut total = Duration::ZERO;
        let mut rest = v;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(HINT.into());
            }
            let n = number(&rest[..digits]);
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            let part = match unit {
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                "m" => Duration::from_secs(n.saturating_mul(60)),
                "h" => Duration::from_secs(n.saturating_mul(3600)),
                _ => return Err(HINT.into()),
            };
            total = total.saturating_add(part);
        }
        total
    };
    Ok(total)
}

/// A whole number of seconds, 0 to [`MAX_SECONDS`].
pub fn parse_seconds(v: &str) -> Result<u64, String> {
    let range = || format!("expected a whole number of seconds, 0 to {MAX_SECONDS} (ten years)");
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(range());
    }
    match v.parse::<u64>() {
        Ok(n) if n <= MAX_SECONDS => Ok(n),
        _ => Err(range()),
    }
}

/// A count from 1 to `max`.
pub fn parse_count(v: &str, max: usize) -> Result<usize, String> {
    let range = || format!("expected a whole number from 1 to {max}");
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(range());
    }
    match v.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(range()),
    }
}

/// A size in bytes, optionally with KiB or MiB, from [`MIN_LINE_BYTES`] to
/// [`MAX_LINE_BYTES`] (the one flag that takes a size).
pub fn parse_byte_size(v: &str) -> Result<usize, String> {
    const HINT: &str = "expected a size in bytes such as 1048576, 512KiB or 1MiB";
    let range = || {
        format!(
            "must be at least {MIN_LINE_BYTES} bytes and at most {}MiB",
            MAX_LINE_BYTES >> 20
        )
    };
    let (number, multiplier) = if let Some(n) = v.strip_suffix("MiB") {
        (n, 1 << 20)
    } else if let Some(n) = v.strip_suffix("KiB") {
        (n, 1 << 10)
    } else {
        (v, 1)
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HINT.into());
    }
    // All digits: a number that does not fit is too large, not malformed.
    let bytes = number
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .unwrap_or(usize::MAX);
    if !(MIN_LINE_BYTES..=MAX_LINE_BYTES).contains(&bytes) {
        return Err(range());
    }
    Ok(bytes)
}

/// libvirt's `log_filters` syntax, checked as libvirt's own parser does so
/// that a typo is a usage error naming the flag, not a failure to
/// initialise libvirt: filters separated by spaces, each `LEVEL:MATCH` with
/// LEVEL 1 to 4 (debug, info, warning, error) and a non-empty MATCH (a
/// leading `+`, libvirt's old stack-trace marker, is allowed).
pub fn parse_log_filters(v: &str) -> Result<String, String> {
    const HINT: &str = "expected space-separated LEVEL:MATCH filters, LEVEL 1 (debug) to 4 (error), e.g. \"1:qemu 3:*\"";
    let mut count = 0;
    for filter in v.split(' ').filter(|f| !f.is_empty()) {
        count += 1;
        let Some((level, rest)) = filter.split_once(':') else {
            return Err(format!("filter \"{filter}\" has no LEVEL: part; {HINT}"));
        };
        let digits = level.strip_prefix('+').unwrap_or(level);
        let level_ok = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && matches!(digits.parse::<u32>(), Ok(1..=4));
        if !level_ok {
            return Err(format!(
                "filter \"{filter}\": level \"{level}\" is not 1 to 4; {HINT}"
            ));
        }
        // libvirt matches on the text up to a further ':'.
        let matched = rest.split(':').next().unwrap_or("");
        if matched.strip_prefix('+').unwrap_or(matched).is_empty() {
            return Err(format!("filter \"{filter}\" has nothing to match; {HINT}"));
        }
    }
    if count == 0 {
        return Err(format!("no filter given; {HINT}"));
    }
    Ok(v.to_string())
}

/// A switch's value: Go's flag package accepts these spellings, and
/// KubeVirt writes `--flag=true` style arguments.
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let s = Duration::from_secs;
        assert_eq!(parse_duration("90s"), Ok(s(90)));
        assert_eq!(parse_duration("5m"), Ok(s(300)));
        assert_eq!(parse_duration("1h"), Ok(s(3600)));
        assert_eq!(parse_duration("287"), Ok(s(287)));
        assert_eq!(parse_duration("4m47s"), Ok(s(287)));
        assert_eq!(parse_duration("1h2m3s"), Ok(s(3723)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "s", "5x", "m5", "-5s", "1.5s", "5 s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("99999999999999999999").is_err());
    }

    #[test]
    fn zero_durations_are_refused_unless_they_mean_never() {
        for zero in ["0", "0s", "0ms", "0m0s"] {
            assert_eq!(
                parse_duration(zero),
                Err("must be more than zero".to_string()),
                "{zero}"
            );
            assert_eq!(parse_idle_timeout(zero), Ok(None));
        }
        assert_eq!(parse_idle_timeout("5m"), Ok(Some(Duration::from_secs(300))));
        assert!(parse_idle_timeout("never").is_err());
    }

    #[test]
    fn every_number_has_a_range_and_the_message_gives_it() {
        let ten_years = Duration::from_secs(315_360_000);
        assert_eq!(parse_duration("87600h"), Ok(ten_years));
        assert_eq!(parse_duration("315360000"), Ok(ten_years));
        assert_eq!(parse_duration_or_zero("87599h60m"), Ok(ten_years));
        for too_long in [
            "87600h1ms",
            "87601h",
            "315360001",
            "18446744073709551615",
            "18446744073709551616",
            "5000000000000000h",
            "18446744073709551615h18446744073709551615h",
            "18446744073709551615ms",
            "99999999999999999999999999999s",
        ] {
            let why = "must be at most 87600h (ten years)".to_string();
            assert_eq!(parse_duration(too_long), Err(why.clone()), "{too_long}");
            assert_eq!(parse_idle_timeout(too_long), Err(why), "{too_long}");
        }
        assert_eq!(parse_seconds("315360000"), Ok(315_360_000));
        for bad in [
            "315360001",
            "18446744073709551615",
            "9223372036854775807",
            "+5",
            "",
        ] {
            let err = parse_seconds(bad).unwrap_err();
            assert!(err.contains("0 to 315360000"), "{bad}: {err}");
        }
        assert_eq!(parse_count("65536", MAX_CLIENTS), Ok(65_536));
        for bad in [
            "65537",
            "18446744073709551615",
            "99999999999999999999999",
            "+1",
        ] {
            let err = parse_count(bad, MAX_CLIENTS).unwrap_err();
            assert_eq!(err, "expected a whole number from 1 to 65536", "{bad}");
        }
        assert_eq!(parse_byte_size("64"), Ok(64));
        assert_eq!(parse_byte_size("1024MiB"), Ok(1 << 30));
        for bad in [
            "63",
            "0KiB",
            "1073741825",
            "1025MiB",
            "18446744073709551615",
            "18446744073709551615KiB",
            "99999999999999999999999MiB",
        ] {
            let err = parse_byte_size(bad).unwrap_err();
            assert_eq!(
                err, "must be at least 64 bytes and at most 1024MiB",
                "{bad}"
            );
        }
        for bad in ["-1", "1.5MiB", "MiB", "+64", "1e9"] {
            assert!(
                parse_byte_size(bad)
                    .unwrap_err()
                    .starts_with("expected a size"),
                "{bad}"
            );
        }
    }

    #[test]
    fn log_filters_follow_libvirts_parser() {
        // Accepted by libvirt 9.0's virLogParseFilters (checked with virsh).
        for good in [
            "1:qemu 3:*",
            "1:+qemu",
            "  1:qemu   ",
            "01:qemu",
            "+1:qemu",
            "1:a:b",
            "4:x",
        ] {
            assert_eq!(parse_log_filters(good), Ok(good.to_string()), "{good}");
        }
        // Refused by libvirt ("Malformed format", "Invalid priority",
        // "Invalid match string").
        for (bad, why) in [
            ("garbage", "has no LEVEL: part"),
            ("0:qemu", "is not 1 to 4"),
            ("5:qemu", "is not 1 to 4"),
            ("x:qemu", "is not 1 to 4"),
            ("1:", "nothing to match"),
            ("1:+", "nothing to match"),
            ("1:qemu garbage", "\"garbage\""),
            (" ", "no filter given"),
        ] {
            let err = parse_log_filters(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn sizes_counts_seconds_bools() {
        assert_eq!(parse_byte_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_byte_size("4KiB"), Ok(4096));
        assert_eq!(parse_byte_size("1000"), Ok(1000));
        assert!(parse_byte_size("1GB").is_err());
        assert!(parse_byte_size("10").is_err());
        assert!(parse_byte_size("99999999999999999999MiB").is_err());
        assert_eq!(parse_count("3", 10), Ok(3));
        assert!(parse_count("0", 10).is_err());
        assert!(parse_count("-1", 10).is_err());
        assert_eq!(parse_seconds("0"), Ok(0));
        assert!(parse_seconds("-1").is_err());
        assert_eq!(parse_bool("true"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert!(parse_bool("yes").is_err());
    }
}
