//! Parsers for flag values. Each returns a short reason on failure; the
//! caller adds the flag name and the value.

use std::time::Duration;

/// A duration of more than zero (see [`parse_duration_or_zero`] for the
/// syntax). Zero is refused: a zero deadline or poll interval has no useful
/// meaning, and a flag that needs "never" says so with its own parser.
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
/// `4m47s`, `500ms`, or plain seconds (`287`).
pub fn parse_duration_or_zero(v: &str) -> Result<Duration, String> {
    const HINT: &str = "expected a duration such as 90s, 5m, 1h, 4m30s or plain seconds";
    if v.is_empty() {
        return Err(HINT.into());
    }
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return v
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| "number too large".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = v;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(HINT.into());
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| "number too large".to_string())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            _ => return Err(HINT.into()),
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// A whole number of seconds, zero allowed.
pub fn parse_seconds(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| "expected a whole number of seconds (0 or more)".into())
}

/// A count of at least one.
pub fn parse_count(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number".into()),
    }
}

/// A size in bytes, optionally with KiB or MiB.
pub fn parse_byte_size(v: &str) -> Result<usize, String> {
    const HINT: &str = "expected a size in bytes such as 1048576, 512KiB or 1MiB";
    let (number, multiplier) = if let Some(n) = v.strip_suffix("MiB") {
        (n, 1 << 20)
    } else if let Some(n) = v.strip_suffix("KiB") {
        (n, 1 << 10)
    } else {
        (v, 1)
    };
    let n: usize = number.parse().map_err(|_| HINT.to_string())?;
    let bytes = n.checked_mul(multiplier).ok_or("size too large")?;
    if bytes < 64 {
        return Err("must be at least 64 bytes".into());
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
        assert_eq!(parse_count("3"), Ok(3));
        assert!(parse_count("0").is_err());
        assert!(parse_count("-1").is_err());
        assert_eq!(parse_seconds("0"), Ok(0));
        assert!(parse_seconds("-1").is_err());
        assert_eq!(parse_bool("true"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert!(parse_bool("yes").is_err());
    }
}
