//! The quantity parser and arithmetic. The input is up to three lines, each parsed as a
//! quantity. For values that parse: the display parses back to the same value (when it has
//! no more significant digits than the parser accepts), equality, ordering and signs agree
//! with an independent exact comparison of the displayed decimals, ordering is a total order,
//! and `checked_add` / `checked_mul_int` agree with ordering and with each other.
#![no_main]

use launchgate::quantity::{MAX_SIGNIFICANT_DIGITS, Quantity, QuantityError};
use libfuzzer_sys::fuzz_target;
use std::cmp::Ordering;

/// A displayed quantity as (negative, significant digits, exponent): value = ±0.digits × 10^exp.
fn decimal(text: &str) -> (bool, String, i64) {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (number, exponent) = match rest.split_once('e') {
        Some((n, e)) => (n, e.parse::<i64>().expect("display exponent")),
        None => (rest, 0),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    assert!(
        int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()),
        "display is plain decimal: {text:?}"
    );
    let digits = format!("{int}{frac}");
    let leading = digits.len() - digits.trim_start_matches('0').len();
    let digits = digits.trim_matches('0').to_string();
    // value = 0.<all digits> × 10^(int.len() + exponent); drop the leading zeros.
    let exp = int.len() as i64 + exponent - leading as i64;
    if digits.is_empty() {
        return (false, String::new(), 0);
    }
    (negative, digits, exp)
}

/// Exact comparison of two displayed decimals.
fn cmp_decimal(a: &(bool, String, i64), b: &(bool, String, i64)) -> Ordering {
    let sign = |d: &(bool, String, i64)| match (d.1.is_empty(), d.0) {
        (true, _) => 0,
        (false, true) => -1,
        (false, false) => 1,
    };
    let (sa, sb) = (sign(a), sign(b));
    if sa != sb || sa == 0 {
        return sa.cmp(&sb);
    }
    let magnitude = a.2.cmp(&b.2).then_with(|| {
        let width = a.1.len().max(b.1.len());
        format!("{:0<width$}", a.1).cmp(&format!("{:0<width$}", b.1))
    });
    if sa < 0 {
        magnitude.reverse()
    } else {
        magnitude
    }
}

fn check_one(q: &Quantity) {
    let shown = q.to_string();
    let d = decimal(&shown);
    if d.1.len() <= MAX_SIGNIFICANT_DIGITS {
        assert_eq!(
            Quantity::parse(&shown).as_ref(),
            Ok(q),
            "display {shown:?} round trip"
        );
    } else {
        // A binary suffix can multiply past the digit limit: such a display does not parse.
        assert_eq!(Quantity::parse(&shown), Err(QuantityError::TooManyDigits));
    }
    assert_eq!(q.is_negative(), d.0 && !d.1.is_empty(), "sign of {shown:?}");
    assert_eq!(q.is_negative(), *q < Quantity::ZERO);
    assert_eq!(
        q.is_integer(),
        d.1.len() as i64 <= d.2,
        "is_integer of {shown:?}"
    );
    assert_eq!(q.checked_add(&Quantity::ZERO), Some(*q));
    assert_eq!(q.checked_mul_int(1), Some(*q));
    assert_eq!(q.checked_mul_int(0), Some(Quantity::ZERO));
    if let Some(neg) = q.checked_mul_int(-1) {
        assert_eq!(neg.cmp(&Quantity::ZERO), Quantity::ZERO.cmp(q));
        assert_eq!(neg.checked_add(q), Some(Quantity::ZERO));
    }
    if let (Some(double), Some(sum)) = (q.checked_mul_int(2), q.checked_add(q)) {
        assert_eq!(double, sum);
    }
}

fn check_pair(a: &Quantity, b: &Quantity) {
    let ord = a.cmp(b);
    assert_eq!(ord, b.cmp(a).reverse(), "antisymmetry");
    assert_eq!(ord == Ordering::Equal, a == b, "equality is value equality");
    let (da, db) = (decimal(&a.to_string()), decimal(&b.to_string()));
    assert_eq!(ord, cmp_decimal(&da, &db), "{a} vs {b}");
    let sum = a.checked_add(b);
    assert_eq!(sum, b.checked_add(a), "addition commutes");
    if let Some(sum) = sum {
        assert_eq!(sum.cmp(a), b.cmp(&Quantity::ZERO), "{a} + {b} = {sum}");
        assert_eq!(sum.cmp(b), a.cmp(&Quantity::ZERO), "{a} + {b} = {sum}");
    }
}

fuzz_target!(|text: &str| {
    let parsed: Vec<Quantity> = text
        .splitn(3, '\n')
        .filter_map(|line| Quantity::parse(line).ok())
        .collect();
    for q in &parsed {
        check_one(q);
    }
    for a in &parsed {
        for b in &parsed {
            check_pair(a, b);
        }
    }
    if let [a, b, c] = parsed.as_slice() {
        let sorted = |x: &Quantity, y: &Quantity, z: &Quantity| x <= y && y <= z;
        if sorted(a, b, c) {
            assert!(a <= c, "transitivity");
        }
        if let (Some(ab_c), Some(a_bc)) = (
            a.checked_add(b).and_then(|ab| ab.checked_add(c)),
            b.checked_add(c).and_then(|bc| a.checked_add(&bc)),
        ) {
            assert_eq!(ab_c, a_bc, "addition associates");
        }
    }
});
