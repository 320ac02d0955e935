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
    // Shortest round-trip digits and decimal exponent, e.g. "1.25e3".
    let mut sci = String::new();
    let _ = write!(sci, "{:e}", value);
    let (mantissa, exponent) = match sci.split_once('e') {
        Some(parts) => parts,
        None => {
            out.push_str(&sci);
            return;
        }
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
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
        ];
        for (value, expected) in cases {
            assert_eq!(js_number(*value), *expected, "formatting {value:e}");
        }
    }
}
