//! JSON helpers shared by the vocabulary: JavaScript number formatting and
//! ordered-object utilities.
//!
//! The reference writes JSON with `JSON.stringify`; session.md J6 asks that
//! numbers a Rust producer creates print the same way (`500`, not `500.0`).

use alloc::string::String;
use core::fmt::Write;
use serde::Serializer;

/// An order-preserving JSON object (serde_json with `preserve_order`).
pub type JsonObject = serde_json::Map<alloc::string::String, serde_json::Value>;

/// `serde_json::to_value`, for the core's own types.
///
/// With the feature `value-serializer` (default) this is
/// `serde_json::to_value`. Off, the value is written as JSON text and read
/// back: the same `Value` (with `float-roundtrip` off a float may read one
/// ulp off), and serde_json's `Value` serializer (`to_value` and its raw
/// value emitters) is left out.
pub(crate) fn to_value<T: serde::Serialize + ?Sized>(
    value: &T,
) -> Result<serde_json::Value, serde_json::Error> {
    #[cfg(feature = "value-serializer")]
    {
        serde_json::to_value(value)
    }
    #[cfg(not(feature = "value-serializer"))]
    {
        serde_json::from_slice(&serde_json::to_vec(value)?)
    }
}

/// Largest integer JavaScript represents exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Appends `value` formatted as JavaScript's `Number.prototype.toString` would.
///
/// Non-finite values print as `null`, which is what `JSON.stringify` writes.
pub(crate) fn write_js_number(out: &mut String, value: f64) {
    if !value.is_finite() {
        out.push_str("null");
        return;
    }
    if value == 0.0 {
        out.push('0');
        return;
    }
    // Shortest round-trip digits and decimal exponent, ties to even.
    let Some((negative, digits, exponent)) = shortest_digits(value) else {
        out.push_str("null");
        return;
    };
    let k = digits.len() as i32;
    let n = exponent + 1;
    if negative {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        for _ in 0..(n - k) {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in 0..(-n) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        let _ = write!(out, "{}", (n - 1).unsigned_abs());
    }
}

/// The sign, shortest round-trip significant digits (no leading or trailing
/// zeros) and decimal exponent of the first digit of a finite nonzero
/// `value`, as ECMAScript's `Number::toString` picks them: `1250.0` gives
/// `(false, "125", 3)`.
///
/// The digits come from serde_json's float writer (so a device build links
/// one shortest-float routine instead of also core's `{:e}`). Where two
/// shortest candidates are equally near, ECMAScript takes the even one;
/// serde_json's writer (and core's `{:e}`) may not, so [`tie_to_even`]
/// settles ties.
fn shortest_digits(value: f64) -> Option<(bool, String, i32)> {
    let text = serde_json::to_string(&value).ok()?;
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.strip_prefix('+').unwrap_or(e).parse::<i32>().ok()?),
        None => (text.as_str(), 0),
    };
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut point = int.len() as i32;
    let mut digits = String::with_capacity(int.len() + frac.len());
    for c in int.chars().chain(frac.chars()) {
        if !c.is_ascii_digit() {
            return None;
        }
        if c == '0' && digits.is_empty() {
            point -= 1;
        } else {
            digits.push(c);
        }
    }
    let kept = digits.trim_end_matches('0').len();
    digits.truncate(kept);
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let exponent = point - 1 + exponent;
    Some(tie_to_even(value, negative, digits, exponent))
}

/// When `|value|` lies exactly halfway between the odd shortest candidate
/// `digits` and a neighbour, the even neighbour (ECMAScript
/// `Number::toString`: of two equally near candidates, "choose the one that
/// is even").
fn tie_to_even(value: f64, negative: bool, digits: String, exponent: i32) -> (bool, String, i32) {
    let unchanged = |digits: String| (negative, digits, exponent);
    let Ok(d) = digits.parse::<u64>() else {
        return unchanged(digits);
    };
    if d % 2 == 0 {
        return unchanged(digits);
    }
    // |value| = m × 2^e with m odd.
    let bits = value.to_bits() & !(1u64 << 63);
    let (biased, fraction) = ((bits >> 52) as i32, bits & ((1u64 << 52) - 1));
    let (mut m, mut e) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), biased - 1075)
    };
    if m == 0 {
        return unchanged(digits);
    }
    let t = m.trailing_zeros();
    m >>= t;
    e += t as i32;
    // A midpoint c × 10^q / 2 (c = 2d ± 1, odd) equals m × 2^e exactly when
    // the odd parts match and 2^(q−1) = 2^e.
    let q = exponent - (digits.len() as i32 - 1);
    if e != q - 1 {
        return unchanged(digits);
    }
    let mut p5: u128 = 1;
    for _ in 0..q.unsigned_abs() {
        match p5.checked_mul(5) {
            Some(p) => p5 = p,
            None => return unchanged(digits),
        }
    }
    let odd_value = if q < 0 {
        u128::from(m).checked_mul(p5)
    } else {
        Some(u128::from(m))
    };
    let midpoint = |c: u128| if q < 0 { Some(c) } else { c.checked_mul(p5) };
    let twice = u128::from(d) * 2;
    let next = if odd_value.is_some() && odd_value == midpoint(twice - 1) {
        d - 1
    } else if odd_value.is_some() && odd_value == midpoint(twice + 1) {
        d + 1
    } else {
        return unchanged(digits);
    };
    let mut text = alloc::format!("{next}");
    // d + 1 may carry into one more digit (99 -> 100).
    let exponent = exponent + (text.len() as i32 - digits.len() as i32);
    let kept = text.trim_end_matches('0').len();
    text.truncate(kept);
    if text.is_empty() {
        return unchanged(digits);
    }
    (negative, text, exponent)
}

/// Formats `value` as JavaScript would (ECMAScript `Number::toString`).
pub fn js_number(value: f64) -> String {
    let mut out = String::new();
    write_js_number(&mut out, value);
    out
}

/// Serializes an `f64` as a JSON integer when it is integral (so `2000.0`
/// prints `2000`, streaming.md 0.4), and as a float otherwise.
pub fn serialize_js_f64<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    let v = *value;
    // `as i64` truncates toward zero; equal back means integral (no `fract` in core).
    if v.is_finite() && v.abs() < 9.2e18 && (v as i64) as f64 == v {
        serializer.serialize_i64(v as i64)
    } else {
        serializer.serialize_f64(v)
    }
}

/// [`serialize_js_f64`] for an optional field (used with `skip_serializing_if`).
pub(crate) fn serialize_js_f64_opt<S: Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => serialize_js_f64(v, serializer),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::js_number;

    #[test]
    fn js_number_matches_javascript() {
        let cases: &[(f64, &str)] = &[
            (500.0, "500"),
            (0.1, "0.1"),
            (10000.0, "10000"),
            (-3.0, "-3"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (123.456, "123.456"),
            (1e20, "100000000000000000000"),
            (0.0, "0"),
            (450.00000000000006, "450.00000000000006"),
            // Exact ties between two shortest candidates: the even one, as
            // node's String(x). core's `{:e}`, used here before, prints
            // ...3 for all three; serde_json's writer is not always even.
            (562_949_953_421_312.0 + 0.25, "562949953421312.2"),
            (1_177_494_534_775_288.0 + 0.25, "1177494534775288.2"),
            (-2_101_987_237_915_157.0 - 0.25, "-2101987237915157.2"),
        ];
        for (value, expected) in cases {
            assert_eq!(js_number(*value), *expected, "formatting {value:e}");
        }
    }
}
