//! Kubernetes `resource.Quantity` values ("1Gi", "512M", "1.5Gi", "100m", "1e3").
//!
//! The grammar and the meaning of every suffix follow k8s.io/apimachinery's
//! `resource.Quantity`: binary suffixes (Ki, Mi, Gi, Ti, Pi, Ei) are powers of
//! 1024, decimal suffixes (n, u, m, k, M, G, T, P, E) powers of 1000, and `e<N>`
//! a power of ten. The value is kept exact (mantissa × 10^exp10 × 2^exp2) so
//! that "1.5Gi" is exactly 1610612736 bytes.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

/// A parsed quantity. `text` keeps what the user wrote, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    text: String,
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    pub message: String,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for QuantityError {}

/// More digits than this cannot be held exactly in the u128 mantissa.
const MAX_DIGITS: usize = 38;

fn invalid(text: &str, why: &str) -> QuantityError {
    QuantityError {
        message: format!(
            "invalid quantity {text:?}: {why} (examples of valid quantities: 1Gi, 512Mi, 1.5G, 1024)"
        ),
    }
}

impl Quantity {
    /// Parses a quantity exactly like Kubernetes does.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(invalid(text, "it is empty"));
        }
        let (negative, unsigned) = match trimmed.as_bytes()[0] {
            b'-' => (true, &trimmed[1..]),
            b'+' => (false, &trimmed[1..]),
            _ => (false, trimmed),
        };
        let number_len = unsigned
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(number_len);
        let (mantissa, fraction_digits) = parse_number(text, number)?;
        let (suffix_exp10, exp2) = parse_suffix(text, suffix)?;
        let fraction =
            i32::try_from(fraction_digits).map_err(|_| invalid(text, "too many digits"))?;
        Ok(Quantity {
            text: text.to_string(),
            negative: negative && mantissa != 0,
            mantissa,
            exp10: suffix_exp10 - fraction,
            exp2,
        })
    }

    /// What the user wrote.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The value rounded up to an integer, like `Quantity.Value()` in Go
    /// ("100m" → 1, "1.5" → 2, "-1.5" → -1).
    pub fn ceil(&self) -> Result<i64, QuantityError> {
        self.rounded(true)
    }

    /// The value rounded down to an integer ("1.5" → 1, "100m" → 0).
    pub fn floor(&self) -> Result<i64, QuantityError> {
        self.rounded(false)
    }

    /// True when both quantities denote the same number ("1Gi" == "1024Mi").
    pub fn same_value(&self, other: &Quantity) -> bool {
        match (self.ratio(), other.ratio()) {
            (Some((n1, d1)), Some((n2, d2))) => {
                self.negative == other.negative
                    && match (n1.checked_mul(d2), n2.checked_mul(d1)) {
                        (Some(a), Some(b)) => a == b,
                        _ => self.text == other.text,
                    }
            }
            _ => self.text == other.text,
        }
    }

    /// |value| as numerator / denominator, or None if it does not fit in u128.
    fn ratio(&self) -> Option<(u128, u128)> {
        let binary = 1u128.checked_shl(self.exp2)?;
        let scaled = self.mantissa.checked_mul(binary)?;
        if self.exp10 >= 0 {
            let power = 10u128.checked_pow(self.exp10.unsigned_abs())?;
            Some((scaled.checked_mul(power)?, 1))
        } else {
            let power = 10u128.checked_pow(self.exp10.unsigned_abs())?;
            Some((scaled, power))
        }
    }

    fn rounded(&self, up: bool) -> Result<i64, QuantityError> {
        let too_large = || invalid(&self.text, "it is too large");
        let (numerator, denominator) = match self.ratio() {
            Some(ratio) => ratio,
            // A huge negative power of ten: the magnitude is below 1.
            None if self.exp10 < 0 && self.mantissa != 0 => {
                let tiny = if up != self.negative { 1 } else { 0 };
                return Ok(if self.negative { -tiny } else { tiny });
            }
            None => return Err(too_large()),
        };
        let whole = numerator / denominator;
        let has_fraction = numerator % denominator != 0;
        // Rounding the magnitude away from zero is "up" for positive values
        // and "down" for negative ones.
        let away_from_zero = has_fraction && (up != self.negative);
        let magnitude = whole + u128::from(away_from_zero);
        let magnitude = i64::try_from(magnitude).map_err(|_| too_large())?;
        Ok(if self.negative { -magnitude } else { magnitude })
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Returns (all digits as one integer, number of digits after the point).
fn parse_number(text: &str, number: &str) -> Result<(u128, usize), QuantityError> {
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    if whole.is_empty() && fraction.is_empty() {
        return Err(invalid(text, "it has no digits"));
    }
    if fraction.contains('.') {
        return Err(invalid(text, "it has more than one decimal point"));
    }
    let digits = whole.trim_start_matches('0').len() + fraction.len();
    if digits > MAX_DIGITS {
        return Err(invalid(text, "too many digits"));
    }
    let mut mantissa: u128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa * 10 + u128::from(digit - b'0');
    }
    Ok((mantissa, fraction.len()))
}

/// Returns (power of ten, power of two) for a suffix.
fn parse_suffix(text: &str, suffix: &str) -> Result<(i32, u32), QuantityError> {
    let known = match suffix {
        "" => Some((0, 0)),
        "n" => Some((-9, 0)),
        "u" => Some((-6, 0)),
        "m" => Some((-3, 0)),
        "k" => Some((3, 0)),
        "M" => Some((6, 0)),
        "G" => Some((9, 0)),
        "T" => Some((12, 0)),
        "P" => Some((15, 0)),
        "E" => Some((18, 0)),
        "Ki" => Some((0, 10)),
        "Mi" => Some((0, 20)),
        "Gi" => Some((0, 30)),
        "Ti" => Some((0, 40)),
        "Pi" => Some((0, 50)),
        "Ei" => Some((0, 60)),
        _ => None,
    };
    if let Some(exponents) = known {
        return Ok(exponents);
    }
    // Decimal exponent: "e3", "E-2", "e+6".
    let exponent = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))
        .ok_or_else(|| invalid(text, &format!("unknown suffix {suffix:?}")))?;
    let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(text, &format!("unknown suffix {suffix:?}")));
    }
    let value: i32 = exponent
        .parse()
        .map_err(|_| invalid(text, "exponent out of range"))?;
    if value.unsigned_abs() > 1000 {
        return Err(invalid(text, "exponent out of range"));
    }
    Ok((value, 0))
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// Kubernetes accepts quantities as JSON strings or plain JSON numbers.
struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quantity such as \"1Gi\", \"512M\" or 1024")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Quantity, E> {
        Quantity::parse(value).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Quantity, E> {
        Quantity::parse(&value.to_string()).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Quantity, E> {
        Quantity::parse(&value.to_string()).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Quantity, E> {
        Quantity::parse(&value.to_string()).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> i64 {
        match Quantity::parse(text).and_then(|q| q.floor()) {
            Ok(value) => value,
            Err(err) => panic!("{text}: {err}"),
        }
    }

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(bytes("1Gi"), 1 << 30);
        assert_eq!(bytes("512Mi"), 512 << 20);
        assert_eq!(bytes("512M"), 512_000_000);
        assert_eq!(bytes("1024"), 1024);
        assert_eq!(bytes("1.5Gi"), 1_610_612_736);
        assert_eq!(bytes("2k"), 2000);
        assert_eq!(bytes("3Ki"), 3072);
        assert_eq!(bytes("1e3"), 1000);
        assert_eq!(bytes("1E6"), 1_000_000);
        assert_eq!(bytes("+7"), 7);
        assert_eq!(bytes("0.5Ki"), 512);
        assert_eq!(bytes(".5Ki"), 512);
        assert_eq!(bytes("5."), 5);
        assert_eq!(bytes("1Ei"), 1 << 60);
    }

    #[test]
    fn rounding_follows_go_value() {
        let millis = Quantity::parse("100m").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(millis.ceil(), Ok(1));
        assert_eq!(millis.floor(), Ok(0));
        let negative = Quantity::parse("-1.5").unwrap_or_else(|e| panic!("{e}"));
        assert!(negative.is_negative());
        assert_eq!(negative.ceil(), Ok(-1));
        assert_eq!(negative.floor(), Ok(-2));
        assert_eq!(Quantity::parse("1e-2000").map(|q| q.floor()).ok(), None);
    }

    #[test]
    fn same_value_compares_numbers() {
        let a = Quantity::parse("1Gi").unwrap_or_else(|e| panic!("{e}"));
        let b = Quantity::parse("1024Mi").unwrap_or_else(|e| panic!("{e}"));
        let c = Quantity::parse("1G").unwrap_or_else(|e| panic!("{e}"));
        assert!(a.same_value(&b));
        assert!(!a.same_value(&c));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", "Gi", "1.2.3", "1GB", "1 Gi", "abc", "1e", "1e+", "--1", "1ki",
        ] {
            let err = Quantity::parse(bad).err();
            assert!(err.is_some(), "{bad:?} should be rejected");
        }
        let err = Quantity::parse("12XB").err().map(|e| e.message);
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid quantity \"12XB\": unknown suffix \"XB\" (examples of valid quantities: 1Gi, 512Mi, 1.5G, 1024)"
            )
        );
        let huge = Quantity::parse("9999999999Ei").unwrap_or_else(|e| panic!("{e}"));
        assert!(huge.floor().is_err());
    }

    #[test]
    fn deserializes_strings_and_numbers() {
        let from_string: Quantity =
            serde_json::from_str("\"2Gi\"").unwrap_or_else(|e| panic!("{e}"));
        let from_number: Quantity = serde_json::from_str("2048").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_string.floor(), Ok(2 << 30));
        assert_eq!(from_number.floor(), Ok(2048));
    }
}
