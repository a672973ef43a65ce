//! Kubernetes resource quantities (`4`, `4000m`, `12Gi`, `1.5`, `1e3`), parsed exactly.
//!
//! The grammar is the one of `k8s.io/apimachinery/pkg/api/resource`:
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
//! <signedNumber>    ::= <number> | <sign><number>
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! ```
//!
//! A value is kept as `mantissa × 10^exponent` with an `i128` mantissa, so `4000m == 4`,
//! `13000Mi > 12Gi` and `0.5Gi == 512Mi` are decided exactly, never through `f64`.
//! Two deliberate differences from Kubernetes: a number without any digit (`-`, `.`, `Ki`,
//! which Kubernetes reads as zero) is rejected, and so are values beyond
//! [`MAX_SIGNIFICANT_DIGITS`] significant digits or a decimal exponent beyond
//! ±[`MAX_EXPONENT`]. Parsing never panics: every input either parses or yields an error.

use std::cmp::Ordering;
use std::fmt;

/// Most significant digits a quantity may have (leading and trailing zeros do not count).
pub const MAX_SIGNIFICANT_DIGITS: usize = 20;
/// Largest absolute decimal exponent of a parsed quantity.
pub const MAX_EXPONENT: i64 = 1000;

/// An exact quantity: `mantissa × 10^exponent`, normalised (no trailing zeros in the
/// mantissa; zero is `0 × 10^0`), so equal values have equal representations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// An empty string.
    #[error("empty quantity")]
    Empty,
    /// No digits before the suffix.
    #[error("quantity has no digits")]
    NoDigits,
    /// A suffix Kubernetes does not know.
    #[error(
        "unknown quantity suffix {0:?} (expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent like e3)"
    )]
    UnknownSuffix(String),
    /// More significant digits than a quantity may carry.
    #[error("quantity has more than {MAX_SIGNIFICANT_DIGITS} significant digits")]
    TooManyDigits,
    /// An exponent too large or too small to compare.
    #[error("quantity exponent out of range")]
    ExponentOutOfRange,
}

/// How a suffix scales the number.
enum Scale {
    Decimal(i64),
    /// Powers of 1024 (`Ki` = 1, `Ei` = 6).
    Binary(u32),
}

fn suffix_scale(suffix: &str) -> Result<Scale, QuantityError> {
    let scale = match suffix {
        "" => Scale::Decimal(0),
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        // `E` alone is exa; `E3` is an exponent.
        "E" => Scale::Decimal(18),
        "Ki" => Scale::Binary(1),
        "Mi" => Scale::Binary(2),
        "Gi" => Scale::Binary(3),
        "Ti" => Scale::Binary(4),
        "Pi" => Scale::Binary(5),
        "Ei" => Scale::Binary(6),
        _ => return decimal_exponent(suffix).map(Scale::Decimal),
    };
    Ok(scale)
}

/// `e<signed digits>` or `E<signed digits>`.
fn decimal_exponent(suffix: &str) -> Result<i64, QuantityError> {
    let unknown = || QuantityError::UnknownSuffix(suffix.to_string());
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))
        .ok_or_else(unknown)?;
    let (negative, digits) = split_sign(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unknown());
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > 6 {
        return Err(QuantityError::ExponentOutOfRange);
    }
    let value: i64 = if significant.is_empty() {
        0
    } else {
        significant
            .parse()
            .map_err(|_| QuantityError::ExponentOutOfRange)?
    };
    Ok(if negative { -value } else { value })
}

/// A leading `-` or `+`: whether the number is negative, and the rest.
fn split_sign(text: &str) -> (bool, &str) {
    match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    }
}

/// The leading ASCII digits of `text`, and the rest.
fn split_digits(text: &str) -> (&str, &str) {
    text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    )
}

fn pow10(n: u32) -> Option<u128> {
    10u128.checked_pow(n)
}

fn decimal_digits(mut n: u128) -> u32 {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity {
        mantissa: 0,
        exponent: 0,
    };

    /// Builds `mantissa × 10^exponent`, normalised.
    fn new(mut mantissa: i128, exponent: i64) -> Option<Quantity> {
        if mantissa == 0 {
            return Some(Quantity::ZERO);
        }
        let mut exponent = exponent;
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        Some(Quantity {
            mantissa,
            exponent: i32::try_from(exponent).ok()?,
        })
    }

    /// An integer quantity.
    pub fn from_int(value: i64) -> Quantity {
        Quantity::new(i128::from(value), 0).unwrap_or(Quantity::ZERO)
    }

    /// Parses a Kubernetes quantity string.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Empty);
        }
        let (negative, rest) = split_sign(text);
        let (integer_digits, rest) = split_digits(rest);
        let (fraction_digits, suffix) = match rest.strip_prefix('.') {
            Some(rest) => split_digits(rest),
            None => ("", rest),
        };
        if integer_digits.is_empty() && fraction_digits.is_empty() {
            return Err(QuantityError::NoDigits);
        }
        let scale = suffix_scale(suffix)?;

        // All digits, with the decimal point and the trailing zeros moved into the exponent.
        let digits = [integer_digits, fraction_digits].concat();
        let digits = digits.trim_start_matches('0');
        let significant = digits.trim_end_matches('0');
        if significant.is_empty() {
            return Ok(Quantity::ZERO);
        }
        if significant.len() > MAX_SIGNIFICANT_DIGITS {
            return Err(QuantityError::TooManyDigits);
        }
        let trailing_zeros = (digits.len() - significant.len()) as i64;
        let mut exponent = trailing_zeros - (fraction_digits.len().min(1 << 40) as i64);
        let mut mantissa: i128 = significant
            .parse()
            .map_err(|_| QuantityError::TooManyDigits)?;
        match scale {
            Scale::Decimal(e) => exponent = exponent.saturating_add(e),
            Scale::Binary(power) => {
                let factor = 1024i128.pow(power);
                mantissa = mantissa
                    .checked_mul(factor)
                    .ok_or(QuantityError::TooManyDigits)?;
            }
        }
        if negative {
            mantissa = -mantissa;
        }
        let quantity =
            Quantity::new(mantissa, exponent).ok_or(QuantityError::ExponentOutOfRange)?;
        if i64::from(quantity.exponent).abs() > MAX_EXPONENT {
            return Err(QuantityError::ExponentOutOfRange);
        }
        Ok(quantity)
    }

    /// Parses a JSON value: a number, or a string holding a quantity.
    pub fn from_json(value: &serde_json::Value) -> Option<Result<Quantity, QuantityError>> {
        match value {
            serde_json::Value::Number(n) => Some(Quantity::parse(&n.to_string())),
            serde_json::Value::String(s) => Some(Quantity::parse(s)),
            _ => None,
        }
    }

    /// The value as a float (rounded where it has more digits than an `f64` holds).
    pub fn to_f64(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exponent)
    }

    /// True when the value has no fractional part.
    pub fn is_integer(&self) -> bool {
        self.exponent >= 0
    }

    /// True below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// `self + other`, or `None` when it does not fit.
    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        // Zero is `0 × 10^0`: aligning it with an exponent beyond ±38 would overflow.
        if other.mantissa == 0 {
            return Some(*self);
        }
        if self.mantissa == 0 {
            return Some(*other);
        }
        let exponent = self.exponent.min(other.exponent);
        let scale = |q: &Quantity| -> Option<i128> {
            let shift = u32::try_from(q.exponent - exponent).ok()?;
            q.mantissa.checked_mul(i128::try_from(pow10(shift)?).ok()?)
        };
        let sum = scale(self)?.checked_add(scale(other)?)?;
        Quantity::new(sum, i64::from(exponent))
    }

    /// `self × factor`, or `None` when it does not fit.
    pub fn checked_mul_int(&self, factor: i64) -> Option<Quantity> {
        let mantissa = self.mantissa.checked_mul(i128::from(factor))?;
        Quantity::new(mantissa, i64::from(self.exponent))
    }

    /// `self × other`, or `None` when it does not fit.
    pub fn checked_mul(&self, other: &Quantity) -> Option<Quantity> {
        let mantissa = self.mantissa.checked_mul(other.mantissa)?;
        Quantity::new(
            mantissa,
            i64::from(self.exponent) + i64::from(other.exponent),
        )
    }

    fn cmp_magnitude(&self, other: &Quantity) -> Ordering {
        let a = self.mantissa.unsigned_abs();
        let b = other.mantissa.unsigned_abs();
        // Order of magnitude first: digits + exponent.
        let order_a = i64::from(decimal_digits(a)) + i64::from(self.exponent);
        let order_b = i64::from(decimal_digits(b)) + i64::from(other.exponent);
        if order_a != order_b {
            return order_a.cmp(&order_b);
        }
        // Same order of magnitude: the exponents differ by less than the digit count.
        let shift = (i64::from(self.exponent) - i64::from(other.exponent)).unsigned_abs();
        let scaled = |m: u128| {
            u32::try_from(shift)
                .ok()
                .and_then(pow10)
                .and_then(|p| m.checked_mul(p))
        };
        if self.exponent >= other.exponent {
            scaled(a).map_or(Ordering::Greater, |a| a.cmp(&b))
        } else {
            scaled(b).map_or(Ordering::Less, |b| a.cmp(&b))
        }
    }
}

impl Default for Quantity {
    fn default() -> Self {
        Quantity::ZERO
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        let sign_a = self.mantissa.signum();
        let sign_b = other.mantissa.signum();
        if sign_a != sign_b {
            return sign_a.cmp(&sign_b);
        }
        match sign_a {
            0 => Ordering::Equal,
            1 => self.cmp_magnitude(other),
            _ => self.cmp_magnitude(other).reverse(),
        }
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Quantity {
    /// Plain decimal (`12884901888`, `1.5`, `0.001`); scientific beyond 30 zeros.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.mantissa < 0 { "-" } else { "" };
        let digits = self.mantissa.unsigned_abs().to_string();
        if self.exponent >= 0 {
            if self.exponent > 30 {
                return write!(f, "{sign}{digits}e{}", self.exponent);
            }
            return write!(f, "{sign}{digits}{}", "0".repeat(self.exponent as usize));
        }
        let point = self.exponent.unsigned_abs() as usize;
        if point > 30 + digits.len() {
            return write!(f, "{sign}{digits}e{}", self.exponent);
        }
        if point >= digits.len() {
            write!(f, "{sign}0.{}{digits}", "0".repeat(point - digits.len()))
        } else {
            let (int, frac) = digits.split_at(digits.len() - point);
            write!(f, "{sign}{int}.{frac}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn equal_values_in_different_forms() {
        let table = [
            ("4000m", "4"),
            ("4", "4.0"),
            ("1.5", "1500m"),
            (".5", "500m"),
            ("5.", "5"),
            ("0.5Gi", "512Mi"),
            ("1Ki", "1024"),
            ("1Ei", "1152921504606846976"),
            ("1k", "1000"),
            ("1e3", "1k"),
            ("12E3", "12k"),
            ("1E", "1000P"),
            ("1e-3", "1m"),
            ("1E+3", "1000"),
            ("1n", "0.000000001"),
            ("1u", "1000n"),
            ("+2", "2"),
            ("-0", "0"),
            ("000012Gi", "12Gi"),
            ("0.000", "0"),
            ("1.G", "1G"),
            ("100000000000000000000000000000", "1e29"),
        ];
        for (a, b) in table {
            assert_eq!(q(a), q(b), "{a} == {b}");
            assert_eq!(q(a).cmp(&q(b)), Ordering::Equal, "{a} == {b}");
        }
    }

    #[test]
    fn ordering_by_value_not_text() {
        let less = [
            ("12Gi", "13000Mi"),
            ("12G", "12Gi"),
            ("999m", "1"),
            ("4", "4001m"),
            ("-1", "0"),
            ("-2", "-1"),
            ("1n", "1u"),
            ("0.1", "0.11"),
            ("9", "10"),
            ("1Ei", "2E"),
            ("1e-1000", "1e1000"),
        ];
        for (a, b) in less {
            assert!(q(a) < q(b), "{a} < {b}");
            assert!(q(b) > q(a), "{b} > {a}");
        }
    }

    #[test]
    fn garbage_is_rejected() {
        for bad in [
            "",
            "abc",
            "-",
            ".",
            "Ki",
            "1 Gi",
            "1ki",
            "1K",
            "1Gb",
            "1e",
            "1E+",
            "1e3e",
            "1..5",
            "--1",
            "1mi",
            "0x10",
            "1,5",
            "١",
            "1e9999999",
            "123456789012345678901",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn integers_and_fractions() {
        assert!(q("4000m").is_integer());
        assert!(q("1.5k").is_integer());
        assert!(!q("2.5").is_integer());
        assert!(!q("1m").is_integer());
        assert!(q("0.5Ki").is_integer());
    }

    #[test]
    fn arithmetic_for_totals() {
        let total = q("4")
            .checked_mul_int(2)
            .unwrap()
            .checked_add(&q("500m"))
            .unwrap();
        assert_eq!(total, q("8.5"));
        assert_eq!(total.to_string(), "8.5");
        assert_eq!(q("12Gi").to_string(), "12884901888");
        assert_eq!(q("1m").to_string(), "0.001");
        assert_eq!(q("-15").to_string(), "-15");
        assert!(q("1e1000").checked_mul_int(i64::MAX).is_some());
        assert!(
            q("99999999999999999999Ei")
                .checked_mul_int(i64::MAX)
                .is_none()
        );
    }

    #[test]
    fn json_numbers() {
        use serde_json::json;
        assert_eq!(Quantity::from_json(&json!(4)).unwrap().unwrap(), q("4"));
        assert_eq!(
            Quantity::from_json(&json!(2.5)).unwrap().unwrap(),
            q("2500m")
        );
        assert_eq!(
            Quantity::from_json(&json!("12Gi")).unwrap().unwrap(),
            q("12Gi")
        );
        assert!(Quantity::from_json(&json!(true)).is_none());
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}") {
            let _ = Quantity::parse(&text);
        }

        #[test]
        fn quantity_shaped_text_never_panics(text in "[-+]?[0-9]{0,30}(\\.[0-9]{0,30})?([numkMGTPE]|[KMGTPE]i|[eE][-+]?[0-9]{1,8})?") {
            if let Ok(value) = Quantity::parse(&text) {
                let _ = value.checked_mul_int(i64::MAX);
                let _ = value.checked_add(&value);
            }
        }

        #[test]
        fn display_parses_back_to_the_same_value(mantissa in -10i64.pow(15)..10i64.pow(15), exponent in -40i64..40) {
            let text = format!("{mantissa}e{exponent}");
            let value = q(&text);
            proptest::prop_assert_eq!(q(&value.to_string()), value);
        }
    }
}
