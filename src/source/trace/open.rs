//! Opening a trace file to record into without ever destroying one.
//!
//! Owns: [`RecordMode`] (what to do when the file exists), rotation of
//! earlier recordings (`trace.ndjson` → `trace.ndjson.1` → … →
//! `trace.ndjson.<keep>`, the oldest removed), and the identity check that
//! refuses to record into a file being replayed. Identity is the device and
//! inode after following links, so a symlink or a second path to the same
//! file is caught where a path comparison is not. Depends only on `std`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::error::TraceError;
pub use crate::model::RecordMode;

/// How a recording opens its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordOptions {
    pub mode: RecordMode,
    /// Earlier recordings kept by [`RecordMode::Rotate`] (at least 1).
    pub keep: usize,
    /// A file that must never be recorded into (the trace being replayed).
    pub protect: Option<PathBuf>,
}

#[cfg(test)]
impl Default for RecordOptions {
    fn default() -> Self {
        Self { mode: RecordMode::Rotate, keep: 5, protect: None }
    }
}

/// `(device, inode)` of what `path` names after following links, or `None`
/// when it does not exist.
fn identity(path: &Path) -> io::Result<Option<(u64, u64)>> {
    match std::fs::metadata(path) {
        Ok(metadata) => Ok(Some((metadata.dev(), metadata.ino()))),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Opens `path` for a new recording as `options` say.
pub fn open_for_recording(path: &Path, options: &RecordOptions) -> Result<File, TraceError> {
    let shown = path.display().to_string();
    let create_error = |source| TraceError::Create { path: shown.clone(), source };
    let existing = identity(path).map_err(create_error)?;
    if let (Some(target), Some(protected)) = (existing, &options.protect)
        && identity(protected).map_err(create_error)? == Some(target)
    {
        return Err(TraceError::SameFile {
            path: shown,
            replayed: protected.display().to_string(),
        });
    }
    // Only regular files are rotated or refused: a recording to a pipe or a
    // device (`/dev/null`, `/dev/stdout`) has nothing to keep.
    let regular = std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file());
    match (options.mode, regular) {
        (RecordMode::Refuse, true) => return Err(TraceError::Exists { path: shown }),
        (RecordMode::Rotate, true) => rotate(path, options.keep.max(1))
            .map_err(|source| TraceError::Rotate { path: shown.clone(), source })?,
        _ => {}
    }
    OpenOptions::new().write(true).create(true).truncate(true).open(path).map_err(create_error)
}

/// `<file>.<n>` for rotation.
fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Shifts `<file>.1 … <file>.<keep-1>` up by one (dropping `<file>.<keep>`)
/// and renames `<file>` to `<file>.1`. An empty file is not worth a slot.
fn rotate(path: &Path, keep: usize) -> io::Result<()> {
    if std::fs::metadata(path)?.len() == 0 {
        return Ok(());
    }
    // Gaps in the numbering (a slot never filled, or removed by hand) are fine.
    let unless_missing = |result: io::Result<()>| match result {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    unless_missing(std::fs::remove_file(numbered(path, keep)))?;
    for n in (1..keep).rev() {
        unless_missing(std::fs::rename(numbered(path, n), numbered(path, n + 1)))?;
    }
    std::fs::rename(path, numbered(path, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(mode: RecordMode) -> RecordOptions {
        RecordOptions { mode, keep: 2, protect: None }
    }

    #[test]
    fn rotation_keeps_earlier_recordings_and_drops_the_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.ndjson");
        for run in ["first", "second", "third"] {
            let mut file = open_for_recording(&path, &options(RecordMode::Rotate)).unwrap();
            std::io::Write::write_all(&mut file, run.as_bytes()).unwrap();
        }
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(path.clone()), "third");
        assert_eq!(read(numbered(&path, 1)), "second");
        assert_eq!(read(numbered(&path, 2)), "first");
        open_for_recording(&path, &options(RecordMode::Rotate)).unwrap();
        assert_eq!(read(numbered(&path, 2)), "second", "keep = 2: the oldest goes");
        assert!(!numbered(&path, 3).exists());
    }

    #[test]
    fn refuse_names_the_file_and_leaves_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.ndjson");
        std::fs::write(&path, "precious").unwrap();
        let error = open_for_recording(&path, &options(RecordMode::Refuse)).unwrap_err();
        assert!(error.to_string().contains("trace.ndjson"), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
        // A new file is fine.
        assert!(open_for_recording(&dir.path().join("new"), &options(RecordMode::Refuse)).is_ok());
    }

    #[test]
    fn a_link_to_the_replayed_file_is_refused_whatever_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let replayed = dir.path().join("replayed.ndjson");
        std::fs::write(&replayed, "the replay's source").unwrap();
        let link = dir.path().join("link.ndjson");
        std::os::unix::fs::symlink(&replayed, &link).unwrap();
        for &mode in RecordMode::ALL {
            let options = RecordOptions { mode, keep: 2, protect: Some(replayed.clone()) };
            let error = open_for_recording(&link, &options).unwrap_err();
            assert!(matches!(error, TraceError::SameFile { .. }), "{mode:?}: {error}");
        }
        assert_eq!(std::fs::read_to_string(&replayed).unwrap(), "the replay's source");
    }
}
