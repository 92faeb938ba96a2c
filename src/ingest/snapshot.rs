//! Allocator snapshots uploaded for OOM events (`ingest.snapshot_dir`): the
//! files the memory viewer (pytorch.org/memory_viz) draws.
//!
//! Owns: the snapshot directory, the names of its files, the byte budget
//! and the file bound, oldest upload evicted first. Every call here touches
//! the disk and blocks: callers run it on a blocking thread with a deadline.
//! A file's name comes from the event id only, never from client input, so
//! an upload cannot reach outside the directory. Depends on nothing else in
//! the crate; knows nothing of HTTP.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Why a snapshot could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "the snapshot of OOM event {id} is larger than {max} bytes (ingest.max_snapshot_upload, at most ingest.max_snapshot_bytes)"
    )]
    TooLarge { id: u64, max: u64 },
    #[error("the snapshot of OOM event {id} is empty")]
    Empty { id: u64 },
    #[error("cannot use the snapshot directory {path}: {source}")]
    Directory { path: PathBuf, source: io::Error },
    #[error("cannot write the snapshot of OOM event {id} to {path}: {source}")]
    Write { id: u64, path: PathBuf, source: io::Error },
    #[error(
        "the uploads in progress would pass {max} bytes on disk together (ingest.max_snapshot_bytes); retry when they end"
    )]
    Crowded { id: u64, max: u64 },
}

/// The bounds of the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// Bytes of all files together (`ingest.max_snapshot_bytes`).
    pub max_total_bytes: u64,
    /// Bytes of one upload (`ingest.max_snapshot_upload`).
    pub max_upload_bytes: u64,
    /// Files at most: one per OOM event that can be held.
    pub max_files: usize,
}

/// The snapshot directory and what it holds, in upload order.
pub struct SnapshotStore {
    dir: PathBuf,
    limits: SnapshotLimits,
    /// (event id, bytes), oldest upload first.
    held: Mutex<VecDeque<(u64, u64)>>,
    /// Bytes written by uploads still in progress: with the held files,
    /// held to `max_total_bytes` as they are written, not when they end.
    in_flight: AtomicU64,
    /// Tells apart the temporary files of concurrent uploads for one event.
    uploads: AtomicU64,
}

const PREFIX: &str = "oom-";
const SUFFIX: &str = ".snapshot";
const TEMP_PREFIX: &str = ".upload-";

impl SnapshotStore {
    /// Creates the directory if needed and removes the files of an earlier
    /// run: event ids restart with the daemon, so they would name new
    /// events' snapshots.
    pub fn open(dir: &Path, limits: SnapshotLimits) -> Result<Self, SnapshotError> {
        let directory = |source| SnapshotError::Directory { path: dir.to_owned(), source };
        fs::create_dir_all(dir).map_err(directory)?;
        own_directory(dir).map_err(directory)?;
        for entry in fs::read_dir(dir).map_err(directory)? {
            let entry = entry.map_err(directory)?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let ours = (name.starts_with(PREFIX) && name.ends_with(SUFFIX))
                || name.starts_with(TEMP_PREFIX);
            if ours {
                remove(&entry.path()).map_err(directory)?;
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
            limits,
            held: Mutex::new(VecDeque::new()),
            in_flight: AtomicU64::new(0),
            uploads: AtomicU64::new(0),
        })
    }

    /// The largest upload kept: one file never exceeds the whole budget.
    pub fn max_upload_bytes(&self) -> u64 {
        self.limits.max_upload_bytes.min(self.limits.max_total_bytes)
    }

    /// Where event `id`'s snapshot lies when held.
    pub fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{id}{SUFFIX}"))
    }

    /// The size of event `id`'s snapshot, when one is held.
    pub fn held(&self, id: u64) -> Option<u64> {
        self.held.lock().iter().find(|(held, _)| *held == id).map(|(_, bytes)| *bytes)
    }

    /// Starts writing event `id`'s snapshot to a temporary file; it replaces
    /// the held one only when [`Upload::finish`] renames it into place.
    pub fn begin(self: &Arc<Self>, id: u64) -> Result<Upload, SnapshotError> {
        let n = self.uploads.fetch_add(1, Ordering::Relaxed);
        let temp = self.dir.join(format!("{TEMP_PREFIX}{id}-{n}"));
        // A new file, never through a link: a name planted in the
        // directory must not make the daemon write elsewhere.
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)
            .map_err(|source| SnapshotError::Write { id, path: temp.clone(), source })?;
        Ok(Upload { store: Arc::clone(self), id, temp, file: Some(file), bytes: 0, reserved: 0 })
    }

    /// Counts `bytes` more written by uploads in progress, refusing them
    /// when those and the held files would pass the disk budget. The held
    /// files would be evicted for a finished upload, so only what is in
    /// flight is held against the whole budget.
    fn reserve(&self, id: u64, bytes: u64) -> Result<(), SnapshotError> {
        let max = self.limits.max_total_bytes;
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                now.checked_add(bytes).filter(|total| *total <= max)
            })
            .map(drop)
            .map_err(|_| SnapshotError::Crowded { id, max })
    }

    /// Records a renamed file and evicts the oldest uploads beyond the
    /// bounds; the new file itself fits, as no upload exceeds the budget.
    fn keep(&self, id: u64, bytes: u64) -> Vec<u64> {
        let mut held = self.held.lock();
        held.retain(|(held, _)| *held != id);
        held.push_back((id, bytes));
        let mut evicted = Vec::new();
        loop {
            let total: u64 = held.iter().map(|(_, bytes)| bytes).sum();
            let over = total > self.limits.max_total_bytes || held.len() > self.limits.max_files;
            if !over || held.len() <= 1 {
                break;
            }
            let Some((old, _)) = held.pop_front() else { break };
            evicted.push(old);
        }
        drop(held);
        for old in &evicted {
            // A file that cannot be removed is out of the index anyway (no
            // longer served); the next start clears the directory.
            if let Err(error) = remove(&self.path(*old)) {
                tracing::warn!(id = old, error = %error, "cannot remove an evicted OOM snapshot");
            }
        }
        evicted
    }
}

/// Refuses a directory another user could plant files in: not owned by
/// this process's user, or writable by group or others.
fn own_directory(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    // /proc/self belongs to the process's effective user.
    let me = fs::metadata("/proc/self")?.uid();
    let refuse = |why: String| Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
    if !meta.is_dir() {
        return refuse("not a directory (a link to one is refused too)".into());
    }
    if meta.uid() != me {
        return refuse(format!("owned by uid {}, not by this process's uid {me}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!("writable by group or others (mode {:o})", meta.mode() & 0o777));
    }
    Ok(())
}

/// Opens a held snapshot for reading, never through a link.
pub fn open_held(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// One snapshot being written. Dropped unfinished (refused, cut off, past
/// its deadline), it removes its temporary file.
pub struct Upload {
    store: Arc<SnapshotStore>,
    id: u64,
    temp: PathBuf,
    file: Option<File>,
    bytes: u64,
    /// This upload's share of the store's `in_flight`.
    reserved: u64,
}

impl Upload {
    /// Appends `chunk`, refusing it when the upload would pass the cap.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), SnapshotError> {
        let id = self.id;
        let max = self.store.max_upload_bytes();
        let bytes = self.bytes.saturating_add(chunk.len() as u64);
        if bytes > max {
            return Err(SnapshotError::TooLarge { id, max });
        }
        self.store.reserve(id, chunk.len() as u64)?;
        self.reserved = self.reserved.saturating_add(chunk.len() as u64);
        self.bytes = bytes;
        let written = match self.file.as_mut() {
            Some(file) => file.write_all(chunk),
            None => Err(io::Error::other("already finished")),
        };
        written.map_err(|source| SnapshotError::Write { id, path: self.temp.clone(), source })
    }

    /// Flushes the file to disk, renames it into place (readers see the old
    /// file or the whole new one, never a part) and evicts beyond the
    /// bounds. Returns the bytes kept and the ids evicted.
    pub fn finish(mut self) -> Result<(u64, Vec<u64>), SnapshotError> {
        let id = self.id;
        if self.bytes == 0 {
            return Err(SnapshotError::Empty { id });
        }
        let write = |path: &Path| {
            let path = path.to_owned();
            move |source| SnapshotError::Write { id, path, source }
        };
        if let Some(file) = self.file.take() {
            file.sync_all().map_err(write(&self.temp))?;
        }
        let target = self.store.path(id);
        fs::rename(&self.temp, &target).map_err(write(&target))?;
        self.release();
        let evicted = self.store.keep(id, self.bytes);
        Ok((self.bytes, evicted))
    }
}

impl Upload {
    /// Gives back this upload's share of the bytes in flight.
    fn release(&mut self) {
        let reserved = std::mem::take(&mut self.reserved);
        self.store.in_flight.fetch_sub(reserved, Ordering::AcqRel);
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.release();
        if self.file.take().is_some() {
            // Unfinished: the partial file must not count or linger.
            let _ignored = remove(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, total: u64, upload: u64, files: usize) -> Arc<SnapshotStore> {
        let limits =
            SnapshotLimits { max_total_bytes: total, max_upload_bytes: upload, max_files: files };
        Arc::new(SnapshotStore::open(dir, limits).unwrap())
    }

    fn put(store: &Arc<SnapshotStore>, id: u64, bytes: usize) -> Result<Vec<u64>, SnapshotError> {
        let mut upload = store.begin(id)?;
        upload.write(&vec![7; bytes])?;
        upload.finish().map(|(_, evicted)| evicted)
    }

    #[test]
    fn the_oldest_upload_goes_first_when_the_budget_is_passed() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), 100, 60, 10);
        assert_eq!(put(&store, 1, 40).unwrap(), Vec::<u64>::new());
        assert_eq!(put(&store, 2, 40).unwrap(), Vec::<u64>::new());
        assert_eq!(put(&store, 3, 40).unwrap(), vec![1]);
        assert_eq!(store.held(1), None);
        assert!(!store.path(1).exists());
        assert_eq!(fs::read(store.path(3)).unwrap().len(), 40);
        assert!(matches!(put(&store, 4, 61), Err(SnapshotError::TooLarge { id: 4, max: 60 })));
        let names: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "a refused upload leaves no file: {names:?}");
    }

    #[test]
    fn files_are_bounded_and_a_restart_clears_the_old_run() {
        let dir = tempfile::tempdir().unwrap();
        let first = store(dir.path(), 1000, 100, 2);
        for id in 1..=3 {
            put(&first, id, 10).unwrap();
        }
        assert_eq!((first.held(1), first.held(3)), (None, Some(10)));
        fs::write(dir.path().join("notes.txt"), "kept").unwrap();
        let second = store(dir.path(), 1000, 100, 2);
        assert_eq!(second.held(3), None);
        let names: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("notes.txt")], "only others' files stay");
    }

    #[test]
    fn uploads_in_flight_are_held_to_the_disk_budget_as_they_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path(), 10, 10, 10);
        let mut first = store.begin(1).unwrap();
        let mut second = store.begin(2).unwrap();
        first.write(&[1; 6]).unwrap();
        assert!(matches!(second.write(&[2; 6]), Err(SnapshotError::Crowded { id: 2, max: 10 })));
        drop(first);
        second.write(&[2; 6]).unwrap();
        assert_eq!(second.finish().unwrap().0, 6);
        // A finished upload no longer counts as in flight.
        assert_eq!(put(&store, 3, 10).unwrap(), vec![2]);
    }

    #[test]
    fn a_link_planted_in_the_directory_is_never_written_through_nor_served() {
        let dir = tempfile::tempdir().unwrap();
        let snapshots = dir.path().join("snapshots");
        let store = store(&snapshots, 100, 100, 10);
        let secret = dir.path().join("secret");
        fs::write(&secret, "root:x:0:0").unwrap();
        std::os::unix::fs::symlink(&secret, snapshots.join(format!("{TEMP_PREFIX}7-0"))).unwrap();
        assert!(matches!(store.begin(7), Err(SnapshotError::Write { id: 7, .. })));
        assert_eq!(fs::read_to_string(&secret).unwrap(), "root:x:0:0", "the target is untouched");
        std::os::unix::fs::symlink(&secret, store.path(8)).unwrap();
        assert!(open_held(&store.path(8)).is_err(), "a held name that is a link is not served");
    }

    #[test]
    fn a_directory_others_can_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        let limits = SnapshotLimits { max_total_bytes: 100, max_upload_bytes: 100, max_files: 10 };
        let Err(error) = SnapshotStore::open(&shared, limits) else {
            panic!("a world-writable snapshot directory was accepted")
        };
        assert!(error.to_string().contains("writable by group or others"), "{error}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(SnapshotStore::open(&link, limits).is_err(), "a link to a directory is refused");
    }
}
