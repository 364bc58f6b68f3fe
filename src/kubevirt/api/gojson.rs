//! What Go's `encoding/json` writes where serde's defaults write something
//! else: float64 values (Go writes `1796161898`, serde_json `1796161898.0`)
//! and Kubernetes' `metav1.Time` (RFC 3339 in UTC, whole seconds).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A float64 as Go writes it: an integral value without a fraction.
pub fn serialize_float<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    // Go's 'f' format covers magnitudes below 1e21; within i64's range an
    // integral value is written as the integer it is.
    const I64_RANGE: f64 = 9.2e18;
    if value.fract() == 0.0 && value.abs() < I64_RANGE {
        #[allow(clippy::cast_possible_truncation)] // integral and within range: exact
        return serializer.serialize_i64(*value as i64);
    }
    serializer.serialize_f64(*value)
}

/// A Kubernetes `metav1.Time` as its JSON carries it: RFC 3339 in UTC to
/// the second (`2026-12-01T21:50:42Z`). Read from any RFC 3339 time
/// (KubeVirt's XML metadata keeps nanoseconds and the local offset) and
/// kept in that form, as Go's decoder and encoder leave it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoTime(String);

impl GoTime {
    /// `text` in metav1.Time's JSON form, or why it is no RFC 3339 time.
    pub fn parse(text: &str) -> Result<GoTime, String> {
        let seconds =
            rfc3339_seconds(text).ok_or_else(|| format!("{text:?} is not an RFC 3339 time"))?;
        Ok(GoTime(format_utc(seconds)))
    }

    /// Seconds since the Unix epoch.
    pub fn from_unix(seconds: i64) -> GoTime {
        GoTime(format_utc(seconds))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Seconds since the Unix epoch (0 for none: it was parsed as a time).
    pub fn unix_seconds(&self) -> i64 {
        rfc3339_seconds(&self.0).unwrap_or(0)
    }
}

impl fmt::Display for GoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for GoTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for GoTime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<GoTime, D::Error> {
        struct TimeVisitor;
        impl Visitor<'_> for TimeVisitor {
            type Value = GoTime;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 time")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<GoTime, E> {
                GoTime::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(TimeVisitor)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day since 1970-01-01 (`civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn format_utc(seconds: i64) -> String {
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` as seconds since the epoch
/// (the fraction dropped, as metav1.Time's JSON drops it).
fn rfc3339_seconds(text: &str) -> Option<i64> {
    let number = |from: usize, len: usize| -> Option<i64> {
        let digits = text.get(from..from + len)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    };
    let bytes = text.as_bytes();
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(at, c)| bytes.get(at) != Some(&c))
        || !matches!(bytes.get(10), Some(b'T' | b't'))
    {
        return None;
    }
    let (year, month, day) = (number(0, 4)?, number(5, 2)?, number(8, 2)?);
    let (hour, minute, second) = (number(11, 2)?, number(14, 2)?, number(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Leap seconds (:60) are accepted by Go's parser.
    if second > 60 {
        return None;
    }
    let mut at = 19;
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return None;
        }
    }
    let offset = match bytes.get(at)? {
        b'Z' | b'z' if at + 1 == bytes.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == bytes.len() && bytes.get(at + 3) == Some(&b':') => {
            let minutes = number(at + 1, 2)? * 60 + number(at + 4, 2)?;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return None,
    };
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(local - offset * 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Float(#[serde(serialize_with = "serialize_float")] f64);

    #[test]
    fn floats_are_written_as_go_writes_them() {
        let json = |v| serde_json::to_string(&Float(v)).unwrap();
        assert_eq!(json(1796161898.0), "1796161898");
        assert_eq!(json(0.0), "0");
        assert_eq!(json(-3.0), "-3");
        assert_eq!(json(0.25), "0.25");
        assert_eq!(json(1796161898.5), "1796161898.5");
    }

    #[test]
    fn times_become_utc_seconds() {
        let t = |s| GoTime::parse(s).map(|t| t.0);
        assert_eq!(t("2026-12-01T21:50:42Z").unwrap(), "2026-12-01T21:50:42Z");
        assert_eq!(
            t("2026-12-01T21:50:42.468123456Z").unwrap(),
            "2026-12-01T21:50:42Z"
        );
        assert_eq!(
            t("2026-12-02T00:20:42.5+02:30").unwrap(),
            "2026-12-01T21:50:42Z"
        );
        assert_eq!(
            t("2024-02-29T23:00:00-01:00").unwrap(),
            "2024-03-01T00:00:00Z"
        );
        assert_eq!(t("1969-12-31T23:59:59Z").unwrap(), "1969-12-31T23:59:59Z");
        for bad in [
            "",
            "2026-12-01",
            "2026-12-01T21:50:42",
            "2026-13-01T21:50:42Z",
            "2026-12-01T21:50:42.Z",
            "2026-12-01T21:50:42+0200",
            "2026-12-01T21:50:42Zjunk",
            "２０２６-12-01T21:50:42Z",
        ] {
            assert!(t(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(GoTime::from_unix(0).as_str(), "1970-01-01T00:00:00Z");
        assert_eq!(
            GoTime::from_unix(1796161898).as_str(),
            "2026-12-01T21:51:38Z"
        );
    }
}
