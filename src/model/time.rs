//! Time as data: the [`Timestamp`] every reading carries, checked when
//! read from input, and its RFC 3339 serde forms for JSON people read.
//!
//! Owns: `Timestamp`, `TimestampOutOfRange`, `rfc3339`. Depends on nothing
//! in the crate: a timestamp is stamped by a source, never read from a clock.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in time, as milliseconds since the Unix epoch.
///
/// Every reading carries one of these, stamped by its source; later stages
/// compute only from these, never from the wall clock, so simulation at any
/// speed and replay of recorded traces behave exactly like live sampling.
///
/// Input (traces, reports) can only produce times in
/// [`Timestamp::EARLIEST`]`..=`[`Timestamp::LATEST`]: deserialising refuses
/// anything else, so no later stage ever formats or iterates over an
/// absurd time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

/// Why a time from input was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "timestamp {millis} ms since the Unix epoch is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z"
)]
pub struct TimestampOutOfRange {
    pub millis: i128,
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let millis = i64::deserialize(deserializer)?;
        Timestamp::checked(millis).map_err(serde::de::Error::custom)
    }
}

impl Timestamp {
    /// The Unix epoch: nothing vramd reads comes from before it.
    pub const EARLIEST: Timestamp = Timestamp(0);
    /// 9999-12-31T23:59:59.999Z, the last instant RFC 3339 can write.
    pub const LATEST: Timestamp = Timestamp(253_402_300_799_999);

    /// A time from input, refused outside `EARLIEST..=LATEST`.
    pub fn checked(millis: i64) -> Result<Self, TimestampOutOfRange> {
        if (Self::EARLIEST.0..=Self::LATEST.0).contains(&millis) {
            Ok(Self(millis))
        } else {
            Err(TimestampOutOfRange { millis: i128::from(millis) })
        }
    }

    pub const fn from_unix_millis(millis: i64) -> Self {
        Self(millis)
    }

    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    pub fn unix_seconds_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    pub fn saturating_add(self, duration: Duration) -> Self {
        Self(self.0.saturating_add(duration_millis(duration)))
    }

    pub fn saturating_sub(self, duration: Duration) -> Self {
        Self(self.0.saturating_sub(duration_millis(duration)))
    }

    /// Time elapsed since `earlier`, or `None` when `earlier` is later.
    pub fn duration_since(self, earlier: Timestamp) -> Option<Duration> {
        let delta = self.0.checked_sub(earlier.0)?;
        u64::try_from(delta).ok().map(Duration::from_millis)
    }

    /// Reads RFC 3339 text (`2026-01-01T00:00:00.250Z`; offsets and a
    /// missing fraction accepted) to millisecond precision.
    pub fn parse_rfc3339(text: &str) -> Result<Timestamp, String> {
        let time = humantime::parse_rfc3339_weak(text).map_err(|error| error.to_string())?;
        let since_epoch =
            time.duration_since(std::time::UNIX_EPOCH).map_err(|error| error.to_string())?;
        let millis = i64::try_from(since_epoch.as_millis()).map_err(|_| {
            TimestampOutOfRange {
                millis: i128::try_from(since_epoch.as_millis()).unwrap_or(i128::MAX),
            }
            .to_string()
        })?;
        Timestamp::checked(millis).map_err(|error| error.to_string())
    }

    /// RFC 3339 text with millisecond precision, e.g. `2026-01-01T00:00:00.250Z`.
    /// Total: a time outside what RFC 3339 can write (only reachable by
    /// arithmetic, never from input) is written `@<millis>ms` instead of
    /// panicking in the formatter, which accepts only years 1970 to 9999.
    pub fn to_rfc3339(self) -> String {
        if Timestamp::checked(self.0).is_err() {
            return format!("@{}ms", self.0);
        }
        let since_epoch = Duration::from_millis(self.0.unsigned_abs());
        match std::time::UNIX_EPOCH.checked_add(since_epoch) {
            Some(time) => humantime::format_rfc3339_millis(time).to_string(),
            None => format!("@{}ms", self.0),
        }
    }
}

/// Serde forms of a [`Timestamp`] as RFC 3339 text, for JSON documents
/// people read (`#[serde(with = "crate::model::rfc3339")]`, or
/// `rfc3339::option` for an `Option<Timestamp>`).
pub mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Timestamp;

    pub fn serialize<S: Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&at.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        use super::super::Timestamp;

        pub fn serialize<S: Serializer>(
            at: &Option<Timestamp>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match at {
                Some(at) => super::serialize(at, serializer),
                None => serializer.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Timestamp>, D::Error> {
            Option::<String>::deserialize(deserializer)?
                .map(|text| Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}

fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_arithmetic_saturates_and_orders() {
        let start = Timestamp::from_unix_millis(1_000);
        let later = start.saturating_add(Duration::from_millis(250));
        assert_eq!(later.unix_millis(), 1_250);
        assert_eq!(later.duration_since(start), Some(Duration::from_millis(250)));
        assert_eq!(start.duration_since(later), None);
        assert_eq!(
            Timestamp::from_unix_millis(i64::MAX).saturating_add(Duration::from_secs(1)),
            Timestamp::from_unix_millis(i64::MAX)
        );
    }

    #[test]
    fn timestamp_formats_as_rfc3339_with_millis() {
        let at = Timestamp::from_unix_millis(1_767_225_600_250);
        assert_eq!(at.to_rfc3339(), "2026-01-01T00:00:00.250Z");
    }

    #[test]
    fn times_outside_1970_to_9999_are_refused_from_input_and_never_panic_when_written() {
        for bad in ["-5", "253402300800000", "9223372036854775807", "-9223372036854775808"] {
            let error = serde_json::from_str::<Timestamp>(bad).unwrap_err().to_string();
            assert!(
                error.contains("outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z"),
                "{bad}: {error}"
            );
        }
        assert_eq!(serde_json::from_str::<Timestamp>("0").unwrap(), Timestamp::EARLIEST);
        assert_eq!(
            serde_json::from_str::<Timestamp>("253402300799999").unwrap(),
            Timestamp::LATEST
        );
        assert_eq!(Timestamp::LATEST.to_rfc3339(), "9999-12-31T23:59:59.999Z");
        // Reachable only by arithmetic, and still total.
        assert_eq!(Timestamp::from_unix_millis(-5).to_rfc3339(), "@-5ms");
        assert_eq!(Timestamp::from_unix_millis(i64::MAX).to_rfc3339(), format!("@{}ms", i64::MAX));
        assert!(Timestamp::parse_rfc3339("+10000-01-01T00:00:00Z").is_err());
        assert!(Timestamp::parse_rfc3339("1969-12-31T23:59:59Z").is_err());
    }
}
