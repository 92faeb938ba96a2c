//! Finite JSON numbers for the `f64` fields of trace records.
//!
//! Owns: the serde functions that write every `f64` / `Option<f64>` a record
//! carries. Depends on nothing in the crate.
//!
//! Reading needs nothing of its own: serde_json writes an `f64` as its
//! shortest round-trip decimal, and with its `float_roundtrip` feature
//! (enabled in Cargo.toml for the whole crate) parses decimals with correct
//! rounding, so a replay reproduces a recording bit for bit. The tests below
//! pin that: without the feature about one value in ten comes back one unit
//! in the last place off (e.g. `0.9941414234139935`).

use serde::Serializer;
use serde::ser::Error as _;

/// Writes a finite value as a JSON number, `None` as `null` (callers skip
/// `None` fields). NaN and infinities are refused rather than written: JSON
/// has no spelling for them and serde_json would write `null`, which would
/// replay as "absent" — a silent change.
pub(crate) fn serialize_option<S: Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(number) if number.is_finite() => serializer.serialize_some(number),
        Some(number) => {
            Err(S::Error::custom(format!("cannot record the non-finite value {number}")))
        }
        None => serializer.serialize_none(),
    }
}

/// [`serialize_option`] for a value that is always there.
pub(crate) fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serialize_option(&Some(*value), serializer)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "super::serialize_option"
        )]
        value: Option<f64>,
    }

    #[test]
    fn values_the_default_serde_json_parser_rounds_wrongly_round_trip_exactly() {
        let mut state: u64 = 0x1234_5678_9abc_def1;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Any bit pattern: every exponent, subnormals, both signs.
            let value = f64::from_bits(state);
            if !value.is_finite() {
                continue;
            }
            let text = serde_json::to_string(&Holder { value: Some(value) }).unwrap();
            let back: Holder = serde_json::from_str(&text).unwrap();
            assert_eq!(back.value.map(f64::to_bits), Some(value.to_bits()), "{text}");
        }
        // Known to come back one ulp off through serde_json's default parser.
        let value = 0.994_141_423_413_993_5;
        let back: Holder = serde_json::from_str(r#"{"value":0.9941414234139935}"#).unwrap();
        assert_eq!(back.value, Some(value));
    }

    #[test]
    fn null_and_absent_are_none_and_non_numbers_are_refused() {
        let absent: Holder = serde_json::from_str("{}").unwrap();
        assert_eq!(absent.value, None);
        let null: Holder = serde_json::from_str(r#"{"value":null}"#).unwrap();
        assert_eq!(null.value, None);
        assert!(serde_json::from_str::<Holder>(r#"{"value":"0.5"}"#).is_err());
        assert!(serde_json::from_str::<Holder>(r#"{"value":1e400}"#).is_err());
    }

    #[test]
    fn non_finite_values_are_not_written() {
        let result = serde_json::to_string(&Holder { value: Some(f64::NAN) });
        assert!(result.is_err());
    }
}
