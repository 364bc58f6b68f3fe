//! Parsers for flag values. Each returns a short reason on failure; the
//! caller adds the flag name and the value.

use std::time::Duration;

/// Durations as KubeVirt's controller writes them: `90s`, `5m`, `1h`,
/// `4m47s`, `500ms`, or plain seconds (`287`).
pub fn parse_duration(v: &str) -> Result<Duration, String> {
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
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "s", "5x", "m5", "-5s", "1.5s", "5 s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("99999999999999999999").is_err());
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
