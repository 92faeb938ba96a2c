//! Parsing and formatting of byte sizes and durations as configuration
//! values are written (`"64KiB"`, `"1.5GiB"`, `"250ms"`, `"1h"`).
//!
//! Owns: [`parse_size`], [`format_size`], [`parse_duration`],
//! [`format_duration`]. Depends on nothing else in the crate.

use std::time::Duration;

/// Units accepted by [`parse_size`], case-sensitive, with their byte value.
pub const SIZE_UNITS: [(&str, u64); 9] = [
    ("B", 1),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];

/// Most digits accepted after the decimal point of a size.
const MAX_FRACTION_DIGITS: usize = 18;

/// Why a size could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("sizes cannot be negative")]
    Negative,
    #[error(
        "expected a number followed by an optional unit, such as 1048576, \"64KiB\" or \"1.5GiB\""
    )]
    BadNumber,
    #[error(
        "unknown size unit `{0}`; units are B, KB, MB, GB, TB (1000-based) and KiB, MiB, GiB, TiB (1024-based), case-sensitive"
    )]
    UnknownUnit(String),
    #[error("more than {MAX_FRACTION_DIGITS} digits after the decimal point")]
    TooPrecise,
    #[error("not a whole number of bytes")]
    NotWholeBytes,
    #[error("too large")]
    Overflow,
}

/// Parses a byte size: a plain integer (bytes) or a number with a unit.
/// `B`, `KB`, `MB`, `GB`, `TB` are powers of 1000; `KiB`, `MiB`, `GiB`,
/// `TiB` powers of 1024. Fractions are allowed when the result is a whole
/// number of bytes (`1.5GiB`), whitespace between number and unit too.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SizeError::Empty);
    }
    if text.starts_with('-') {
        return Err(SizeError::Negative);
    }
    let number_len = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(number_len);
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits_only(whole)
        || !digits_only(fraction)
        || (number.contains('.') && fraction.is_empty())
    {
        return Err(SizeError::BadNumber);
    }
    let unit = unit.trim_start();
    let multiplier = SIZE_UNITS
        .iter()
        .find(|(name, _)| *name == unit || (unit.is_empty() && *name == "B"))
        .map(|(_, value)| u128::from(*value))
        .ok_or_else(|| SizeError::UnknownUnit(unit.to_owned()))?;
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > MAX_FRACTION_DIGITS {
        return Err(SizeError::TooPrecise);
    }

    let whole: u128 = whole.parse().map_err(|_| SizeError::Overflow)?;
    let mut bytes = whole.checked_mul(multiplier).ok_or(SizeError::Overflow)?;
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().map_err(|_| SizeError::BadNumber)?;
        // At most 18 digits times at most 2^40: far below u128::MAX.
        let scaled = numerator.checked_mul(multiplier).ok_or(SizeError::Overflow)?;
        let denominator = u32::try_from(fraction.len())
            .ok()
            .and_then(|digits| 10u128.checked_pow(digits))
            .ok_or(SizeError::TooPrecise)?;
        if !scaled.is_multiple_of(denominator) {
            return Err(SizeError::NotWholeBytes);
        }
        bytes = bytes.checked_add(scaled / denominator).ok_or(SizeError::Overflow)?;
    }
    u64::try_from(bytes).map_err(|_| SizeError::Overflow)
}

/// Formats a size with the largest 1024-based unit that divides it
/// exactly (`"1MiB"`, `"1536KiB"`), else in bytes (`"1000B"`).
/// [`parse_size`] reads it back to the same number.
pub fn format_size(bytes: u64) -> String {
    for (name, value) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
    {
        if bytes != 0 && bytes.is_multiple_of(value) {
            return format!("{}{name}", bytes / value);
        }
    }
    format!("{bytes}B")
}

/// Parses a duration such as `"250ms"`, `"1h 30m"` or `"7d"`
/// (humantime syntax). A number needs a unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|error| {
        format!("{error} (durations look like \"250ms\", \"10s\", \"5m\", \"1h\" or \"7d\")")
    })
}

/// Formats a duration with the largest unit that divides it exactly
/// (`"250ms"`, `"1500ms"`, `"1m"`, `"7d"`). [`parse_duration`] reads it
/// back to the same duration.
pub fn format_duration(duration: Duration) -> String {
    const UNITS: [(&str, u128); 7] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ];
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    for (name, value) in UNITS {
        if nanos.is_multiple_of(value) {
            return format!("{}{name}", nanos / value);
        }
    }
    format!("{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_parse_in_every_unit() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1048576"), Ok(1_048_576));
        assert_eq!(parse_size("12B"), Ok(12));
        assert_eq!(parse_size("1KB"), Ok(1_000));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert_eq!(parse_size("3GB"), Ok(3_000_000_000));
        assert_eq!(parse_size("1TB"), Ok(1_000_000_000_000));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("1MiB"), Ok(1_048_576));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size(" 64 KiB "), Ok(65_536));
    }

    #[test]
    fn sizes_accept_fractions_that_are_whole_bytes() {
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("0.5KiB"), Ok(512));
        assert_eq!(parse_size("0.1KB"), Ok(100));
        assert_eq!(parse_size("2.50MB"), Ok(2_500_000));
        assert_eq!(parse_size("0.0009765625KiB"), Ok(1));
        assert_eq!(parse_size("1.0"), Ok(1));
    }

    #[test]
    fn sizes_reject_bad_input() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("-1"), Err(SizeError::Negative));
        assert_eq!(parse_size("-1KiB"), Err(SizeError::Negative));
        assert_eq!(parse_size("1.5"), Err(SizeError::NotWholeBytes));
        assert_eq!(parse_size("0.3KiB"), Err(SizeError::NotWholeBytes));
        assert_eq!(parse_size("64kib"), Err(SizeError::UnknownUnit("kib".into())));
        assert_eq!(parse_size("64kB"), Err(SizeError::UnknownUnit("kB".into())));
        assert_eq!(parse_size("64 b"), Err(SizeError::UnknownUnit("b".into())));
        assert_eq!(parse_size("KiB"), Err(SizeError::BadNumber));
        assert_eq!(parse_size(".5KiB"), Err(SizeError::BadNumber));
        assert_eq!(parse_size("1.KiB"), Err(SizeError::BadNumber));
        assert_eq!(parse_size("1.2.3KiB"), Err(SizeError::BadNumber));
        assert_eq!(parse_size("+1"), Err(SizeError::BadNumber));
        assert_eq!(parse_size("18446744073709551616"), Err(SizeError::Overflow));
        assert_eq!(parse_size("16777216TiB"), Err(SizeError::Overflow));
        assert_eq!(
            parse_size("99999999999999999999999999999999999999999"),
            Err(SizeError::Overflow)
        );
        assert_eq!(parse_size("1.0000000000000000001KiB"), Err(SizeError::TooPrecise));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn sizes_format_with_the_largest_exact_unit() {
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(1000), "1000B");
        assert_eq!(format_size(1024), "1KiB");
        assert_eq!(format_size(1536 * 1024), "1536KiB");
        assert_eq!(format_size(1 << 20), "1MiB");
        assert_eq!(format_size(64 << 20), "64MiB");
    }

    #[test]
    fn durations_parse_with_units_and_reject_bare_numbers() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["25x", "", "ms", "10", "-1s", "1h30"] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains("durations look like"), "{bad}: {error}");
        }
    }

    #[test]
    fn durations_format_with_the_largest_exact_unit() {
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(60)), "1m");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(format_duration(Duration::from_nanos(1_001)), "1001ns");
    }

    proptest! {
        #[test]
        fn any_size_round_trips_through_its_formatting(bytes in any::<u64>()) {
            prop_assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }

        #[test]
        fn whole_numbers_scale_by_their_unit(n in 0u64..1_000_000, unit in 0usize..SIZE_UNITS.len()) {
            let (name, value) = SIZE_UNITS[unit];
            prop_assert_eq!(parse_size(&format!("{n}{name}")), Ok(n * value));
        }

        #[test]
        fn halves_of_binary_units_are_whole_bytes(n in 0u64..1_000_000, unit in 5usize..SIZE_UNITS.len()) {
            let (name, value) = SIZE_UNITS[unit];
            prop_assert_eq!(parse_size(&format!("{n}.5{name}")), Ok(n * value + value / 2));
        }

        #[test]
        fn any_duration_round_trips_through_its_formatting(secs in 0u64..10_000_000_000, nanos in 0u32..1_000_000_000) {
            let duration = Duration::new(secs, nanos);
            prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }
    }
}
