//! The vocabulary a component declares its configuration in.
//!
//! Owns: [`Keys`], through which each component's `check()` declares every
//! key of its section once (its name, how it is written and its bounds) and
//! holds the value to those bounds; [`ByteSize`]; the units sizes and
//! durations are written in (`units`). A component's section is a plain
//! serde struct beside the component (doc comment per field, `Default`,
//! `check`); `app::Config` aggregates them and `config` loads them; the
//! bounded reading of files a key names (`read_at_most`). Depends
//! on nothing else in the crate, so every component may use it without
//! depending on the loader.

mod keys;
mod units;

pub use keys::{Accepts, Declared, Form, Keys, Refused};
pub use units::{SIZE_UNITS, SizeError, format_duration, format_size, parse_duration, parse_size};

use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number of bytes, written in the file as an integer or a size with a
/// unit (`"64KiB"`, `"1.5GiB"`) and rendered with the largest exact unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn get(self) -> u64 {
        self.0
    }

    /// As a `usize`; every size key's bound is far below `usize::MAX`.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_size(self.0))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    /// A whole number of bytes or a size with a unit; the loader has
    /// already turned what was written into bytes, so the text form is
    /// only for callers that deserialize a section on their own.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bytes(u64),
            Text(String),
        }
        match Written::deserialize(deserializer)? {
            Written::Bytes(bytes) => Ok(ByteSize(bytes)),
            Written::Text(text) => {
                parse_size(&text).map(ByteSize).map_err(serde::de::Error::custom)
            }
        }
    }
}

impl schemars::JsonSchema for ByteSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": ["string", "integer"] })
    }
}

/// The text file at `path` (one a key names), or `None` when it is larger
/// than `max` bytes: read no further, since a file cannot bound its own
/// reading (`/dev/zero` must not fill memory). Blocking.
pub fn read_at_most(path: &Path, max: u64) -> io::Result<Option<String>> {
    let mut text = String::new();
    std::fs::File::open(path)?.take(max.saturating_add(1)).read_to_string(&mut text)?;
    Ok((text.len() as u64 <= max).then_some(text))
}

/// [`read_at_most`] for a file that need not be text.
pub fn read_bytes_at_most(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// Durations as the key tables write them.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
pub const fn mins(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}
pub const fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3600)
}
pub const fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}
pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const TIB: u64 = 1 << 40;

/// A non-zero count for a `Default` impl; `0` reads as 1.
pub const fn non_zero(value: usize) -> std::num::NonZeroUsize {
    match std::num::NonZeroUsize::new(value) {
        Some(value) => value,
        None => std::num::NonZeroUsize::MIN,
    }
}
