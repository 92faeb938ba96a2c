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
    open_readable(path)?.take(max.saturating_add(1)).read_to_string(&mut text)?;
    Ok((text.len() as u64 <= max).then_some(text))
}

/// [`read_at_most`] for a file that need not be text.
pub fn read_bytes_at_most(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    open_readable(path)?.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// Opens `path` for reading, refusing a named pipe or a socket. Such a file
/// has no end until its writer says so: a pipe nobody writes blocks the
/// open and then the read for ever, and every SIGHUP would leave one more
/// thread stuck in it (issue 35). The open itself must not block either,
/// so it is non-blocking; on a file or a device that changes nothing.
fn open_readable(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_fifo() || kind.is_socket() {
        let what = if kind.is_fifo() { "a named pipe" } else { "a socket" };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{what}, not a file: it could block every read of it (redirect a file instead of piping one)"
            ),
        ));
    }
    Ok(file)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_named_pipe_nobody_writes_is_refused_at_once_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("vramd.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let (sender, answer) = std::sync::mpsc::channel();
        // On a thread: before the fix the open blocks for ever.
        std::thread::spawn(move || {
            let _ = sender.send(read_at_most(&fifo, 1024).map_err(|error| error.to_string()));
        });
        let answer = answer.recv_timeout(Duration::from_secs(5)).expect("the read blocked");
        let error = answer.unwrap_err();
        assert!(error.contains("a named pipe, not a file"), "{error}");
    }

    #[test]
    fn files_and_devices_are_still_read() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "level = \"info\"\n").unwrap();
        assert_eq!(read_at_most(file.path(), 64).unwrap().as_deref(), Some("level = \"info\"\n"));
        assert_eq!(read_at_most(Path::new("/dev/null"), 64).unwrap().as_deref(), Some(""));
        assert_eq!(read_bytes_at_most(Path::new("/dev/zero"), 64).unwrap(), None);
    }
}
