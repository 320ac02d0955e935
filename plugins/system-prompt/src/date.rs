//! Calendar dates from epoch milliseconds (no clock, no I/O).

use alloc::format;
use alloc::string::String;

/// The UTC calendar date of `epoch_ms` as `YYYY-MM-DD` (proleptic
/// Gregorian; dates before 1970 work too).
pub fn utc_date(epoch_ms: i64) -> String {
    let days = epoch_ms.div_euclid(86_400_000);
    // Howard Hinnant's days-from-civil inverse.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(86_399_999), "1970-01-01");
        assert_eq!(utc_date(86_400_000), "1970-01-02");
        assert_eq!(utc_date(-1), "1969-12-31");
        // 2000-02-29 (a leap day of a century leap year).
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        // 2026-12-01T13:31:07Z.
        assert_eq!(utc_date(1_796_131_867_000), "2026-12-01");
        assert!(utc_date(i64::MAX).len() > 4);
        assert!(!utc_date(i64::MIN).is_empty());
    }
}
