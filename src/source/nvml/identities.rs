//! Process identities kept for as long as a process stays on a device.
//!
//! Owns: per device, the identity (comm, command line, container, pod,
//! namespace PID) of each PID in that device's last process list, keyed by
//! PID and the start time `/proc/<pid>/stat` gave when the PID first
//! appeared. A PID still listed is not read again; a new PID costs one read
//! of its `stat` and then its identity files, or only the `stat` when
//! another device already knows that PID with that start time (the identity
//! is then shared); a PID that leaves the list is forgotten with it. A PID
//! still listed but left out by the cap keeps its identity without a read,
//! so processes of similar sizes trading places at the cap's edge are not
//! read again each time they come back. So each device holds at most twice
//! the processes its list keeps (`sampler.max_processes_per_device`), for at
//! most the listed devices.
//!
//! What the cache hands out is shared, never copied: the identity is an
//! `Arc`, its strings `SharedStr`s, so each sample's process list carries
//! reference counts to the strings read when the PID appeared.
//!
//! A PID that stays in consecutive lists is taken to be the same process:
//! to be otherwise, it would have to exit, be reused by a new process and
//! that process open a GPU context, all within one slow interval.
//!
//! Depends on `source::procfs` only. Its reads block (call off the runtime);
//! no lock is held while reading, so one device's slow `/proc` read never
//! waits on another's.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::source::procfs::{ProcReader, ProcessIdentity};

/// One known process.
struct Known {
    /// Clock ticks after boot, from `/proc/<pid>/stat`; with the PID, what
    /// tells this process from a later one with the same PID.
    start_time: u64,
    identity: Arc<ProcessIdentity>,
    /// The sample that last kept it ([`Identities::of_capped`]'s sweep).
    generation: u64,
}

/// Identities by device, then by PID.
pub(super) struct Identities {
    reader: ProcReader,
    devices: Mutex<HashMap<u32, HashMap<u32, Known>>>,
    generation: AtomicU64,
}

impl Identities {
    pub(super) fn new(reader: ProcReader) -> Self {
        Self { reader, devices: Mutex::new(HashMap::new()), generation: AtomicU64::new(0) }
    }

    /// The identities of `pids`, the device's whole (already capped) list,
    /// in the same order. Never fails: a process that cannot be read has an
    /// empty identity, not kept, so it is tried again next time.
    #[cfg(test)]
    pub(super) fn of(&self, device: u32, pids: &[u32]) -> Vec<Arc<ProcessIdentity>> {
        self.of_capped(device, pids, &[])
    }

    /// [`Identities::of`] the `kept` PIDs, also keeping (never reading) the
    /// known identities of up to as many `left_out` PIDs: listed, but not
    /// kept by the cap this time.
    pub(super) fn of_capped(
        &self,
        device: u32,
        pids: &[u32],
        left_out: &[u32],
    ) -> Vec<Arc<ProcessIdentity>> {
        // Taken out rather than locked: a device's slow reads never overlap,
        // and other devices must not wait on this one's /proc reads.
        let mut known = self.devices.lock().remove(&device).unwrap_or_default();
        // Updated in place, not rebuilt: each sample marks what it keeps and
        // sweeps the rest, so a steady list costs no allocation or rehash.
        let generation = self.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let identities = pids
            .iter()
            .map(|&pid| {
                if let Some(entry) = known.get_mut(&pid) {
                    entry.generation = generation;
                    return entry.identity.clone();
                }
                match self.read(pid, generation) {
                    Some(entry) => {
                        let identity = entry.identity.clone();
                        known.insert(pid, entry);
                        identity
                    }
                    None => Arc::default(),
                }
            })
            .collect();
        // At most as many carried as kept, the first the cut left out.
        let mut carried = 0;
        for pid in left_out {
            if carried == pids.len() {
                break;
            }
            if let Some(entry) = known.get_mut(pid) {
                entry.generation = generation;
                carried += 1;
            }
        }
        known.retain(|_, entry| entry.generation == generation);
        self.devices.lock().insert(device, known);
        identities
    }

    /// Forgets every device not in `listed` (after a new listing).
    pub(super) fn retain_devices(&self, listed: impl Fn(u32) -> bool) {
        self.devices.lock().retain(|device, _| listed(*device));
    }

    fn read(&self, pid: u32, generation: u64) -> Option<Known> {
        let start_time = self.reader.start_time(pid)?;
        // A process on several GPUs (one rank driving two, a notebook) is
        // read once and its identity shared.
        let shared = self.devices.lock().values().find_map(|known| {
            known
                .get(&pid)
                .filter(|known| known.start_time == start_time)
                .map(|k| k.identity.clone())
        });
        if let Some(identity) = shared {
            return Some(Known { start_time, identity, generation });
        }
        let identity = self.reader.identify(pid);
        // Read again after the identity files: a process that exited (and
        // whose PID was reused) in between would give a mix of two.
        (self.reader.start_time(pid)? == start_time).then(|| Known {
            start_time,
            identity: Arc::new(identity),
            generation,
        })
    }

    #[cfg(test)]
    pub(super) fn start_time_of(&self, device: u32, pid: u32) -> Option<u64> {
        self.devices.lock().get(&device)?.get(&pid).map(|known| known.start_time)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use tempfile::TempDir;

    use super::*;

    fn process(root: &Path, pid: u32, comm: &str, start: u64) {
        let dir = root.join(pid.to_string());
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        let stat =
            format!("{pid} ({comm}) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0");
        fs::write(dir.join("stat"), stat).unwrap();
    }

    fn names(identities: &[Arc<ProcessIdentity>]) -> Vec<Option<&str>> {
        identities.iter().map(|identity| identity.comm.as_deref()).collect()
    }

    #[test]
    fn a_listed_process_is_read_once_and_forgotten_when_it_leaves() {
        let root = TempDir::new().unwrap();
        process(root.path(), 10, "python3", 500);
        process(root.path(), 11, "trainer", 600);
        let identities = Identities::new(ProcReader::new(root.path(), 64));
        assert_eq!(names(&identities.of(0, &[10, 11])), [Some("python3"), Some("trainer")]);
        assert_eq!(identities.start_time_of(0, 11), Some(600));

        // Still listed: not read again, even if /proc now says otherwise.
        process(root.path(), 10, "renamed", 500);
        assert_eq!(names(&identities.of(0, &[10, 11])), [Some("python3"), Some("trainer")]);

        // Gone from the list, then back as a new process: read afresh.
        assert_eq!(names(&identities.of(0, &[11])), [Some("trainer")]);
        assert_eq!(identities.start_time_of(0, 10), None);
        process(root.path(), 10, "new-job", 900);
        assert_eq!(names(&identities.of(0, &[10, 11])), [Some("new-job"), Some("trainer")]);
        assert_eq!(identities.start_time_of(0, 10), Some(900));
    }

    #[test]
    fn an_unreadable_process_is_empty_and_tried_again() {
        let root = TempDir::new().unwrap();
        let identities = Identities::new(ProcReader::new(root.path(), 64));
        assert_eq!(names(&identities.of(3, &[42])), [None]);
        assert_eq!(identities.start_time_of(3, 42), None);
        process(root.path(), 42, "late", 7);
        assert_eq!(names(&identities.of(3, &[42])), [Some("late")]);
    }

    #[test]
    fn devices_are_kept_apart_and_forgotten_when_no_longer_listed() {
        let root = TempDir::new().unwrap();
        process(root.path(), 5, "shared", 1);
        let identities = Identities::new(ProcReader::new(root.path(), 64));
        let first = identities.of(0, &[5]);
        process(root.path(), 5, "renamed", 1);
        let second = identities.of(1, &[5]);
        assert!(Arc::ptr_eq(&first[0], &second[0]), "the same process is read once");
        identities.of(0, &[]);
        assert_eq!(identities.start_time_of(0, 5), None);
        assert_eq!(identities.start_time_of(1, 5), Some(1));
        identities.retain_devices(|device| device == 0);
        assert_eq!(identities.start_time_of(1, 5), None);
    }
}
