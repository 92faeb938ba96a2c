//! Finding the `libcuda` each listed process maps: its `/proc/PID/maps`
//! names the file (as the process sees it, in its own mount namespace) and
//! its device and inode; `/proc/PID/root/<path>` reaches it from here. The
//! device and inode tell one file from another, so each is probed once.
//! A process's maps are read until they name a libcuda, then not again
//! while NVML keeps listing it ([`NewlyListed`]): a PyTorch process maps
//! thousands of regions, and reading them every discovery cost 0.85 ms per
//! process each second on an H200 (the tracer thread's 0.68 % of a core
//! with 8 such processes).
//! Blocking file I/O: the tracer thread calls it.

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Bytes of one process's maps read at most: a process mapping more than
/// this (tens of thousands of mappings) has its libcuda near the start,
/// among the shared libraries its loader mapped first.
const MAX_MAPS_BYTES: u64 = 4 << 20;

/// One library file as a process maps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryFile {
    /// `/proc/PID/root/<path>`: the file, reachable from vramd's namespace.
    pub path: PathBuf,
    /// (device, inode) as the maps name them.
    pub id: (String, u64),
}

/// The listed processes whose maps named a libcuda, while they stay listed.
///
/// A CUDA process maps its libcuda before NVML can list it (the listing
/// needs a context), so once its maps named one, reading them again finds
/// nothing new. A listed process whose maps named none (a graphics-only
/// process, or one that loads the driver later) is read at every
/// discovery. A PID left out of one listing is read again if it comes back
/// (it may be another process by then).
#[derive(Debug)]
pub struct NewlyListed {
    proc_root: PathBuf,
    read: HashSet<u32>,
}

impl NewlyListed {
    pub fn new(proc_root: PathBuf) -> Self {
        Self { proc_root, read: HashSet::new() }
    }

    /// The libcuda files mapped by the processes of `listed` whose maps
    /// did not name one yet; forgets the processes no longer listed. A
    /// process whose maps cannot be read (vramd may not look, or it is
    /// going) is tried again at the next call.
    pub fn libraries(&mut self, listed: &[u32]) -> Vec<LibraryFile> {
        let still: HashSet<u32> = listed.iter().copied().collect();
        self.read.retain(|pid| still.contains(pid));
        let mut found: Vec<LibraryFile> = Vec::new();
        for &pid in listed {
            if self.read.contains(&pid) {
                continue;
            }
            if libraries_of(&self.proc_root, pid, &mut found) == Some(true) {
                self.read.insert(pid);
            }
        }
        found
    }

    /// Whether the process still exists.
    pub fn alive(&self, pid: u32) -> bool {
        self.proc_root.join(pid.to_string()).exists()
    }
}

/// Adds the libcuda files `pid` maps to `found`, each file once; whether
/// its maps named any, `None` when they cannot be read (it exited, or
/// vramd may not look).
fn libraries_of(proc_root: &Path, pid: u32, found: &mut Vec<LibraryFile>) -> Option<bool> {
    let process = proc_root.join(pid.to_string());
    let mut bytes = Vec::new();
    std::fs::File::open(process.join("maps"))
        .and_then(|file| file.take(MAX_MAPS_BYTES).read_to_end(&mut bytes))
        .ok()?;
    let mut named = false;
    for line in String::from_utf8_lossy(&bytes).lines() {
        let Some(library) = parse_line(&process, line) else { continue };
        named = true;
        if !found.iter().any(|known| known.id == library.id) {
            found.push(library);
        }
    }
    Some(named)
}

/// `address perms offset dev inode path`, for a libcuda mapping.
fn parse_line(process: &Path, line: &str) -> Option<LibraryFile> {
    let mut fields = line.split_whitespace();
    let device = fields.nth(3)?;
    let inode: u64 = fields.next()?.parse().ok()?;
    let path = fields.collect::<Vec<_>>().join(" ");
    let name = Path::new(&path).file_name()?.to_str()?;
    // A replaced file (" (deleted)") has no path to open by.
    if inode == 0 || !name.starts_with("libcuda.so") || path.ends_with(" (deleted)") {
        return None;
    }
    let relative = path.strip_prefix('/')?;
    Some(LibraryFile { path: process.join("root").join(relative), id: (device.to_owned(), inode) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_libcuda_mappings_are_found_once_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let process = dir.path().join("42");
        std::fs::create_dir(&process).unwrap();
        std::fs::write(
            process.join("maps"),
            "7f00-7f10 r--p 00000000 fd:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54\n\
             7f10-7f20 r-xp 00010000 fd:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54\n\
             7f20-7f30 r-xp 00000000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
             7f30-7f40 r-xp 00000000 00:2a 77 /opt/cuda copy/libcuda.so.1\n\
             7f40-7f50 r-xp 00000000 fd:01 55 /old/libcuda.so.1 (deleted)\n\
             7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n",
        )
        .unwrap();
        let mut found = Vec::new();
        assert_eq!(libraries_of(dir.path(), 42, &mut found), Some(true));
        assert_eq!(
            found,
            [
                LibraryFile {
                    path: process.join("root/usr/lib/x86_64-linux-gnu/libcuda.so.550.54"),
                    id: ("fd:01".into(), 1234),
                },
                LibraryFile {
                    path: process.join("root/opt/cuda copy/libcuda.so.1"),
                    id: ("00:2a".into(), 77),
                },
            ]
        );
        assert_eq!(libraries_of(dir.path(), 43, &mut found), None);
        let listed = NewlyListed::new(dir.path().to_owned());
        assert!(listed.alive(42) && !listed.alive(43));
    }

    fn maps_naming(process: &Path, inode: u64) {
        std::fs::create_dir_all(process).unwrap();
        let line = format!("7f00-7f10 r-xp 00000000 fd:01 {inode} /usr/lib/libcuda.so.1\n");
        std::fs::write(process.join("maps"), line).unwrap();
    }

    fn inodes(found: &[LibraryFile]) -> Vec<u64> {
        found.iter().map(|library| library.id.1).collect()
    }

    #[test]
    fn a_listed_process_has_its_maps_read_once_while_it_stays_listed() {
        let dir = tempfile::tempdir().unwrap();
        maps_naming(&dir.path().join("7"), 1);
        maps_naming(&dir.path().join("8"), 2);
        let mut listed = NewlyListed::new(dir.path().to_owned());
        assert_eq!(inodes(&listed.libraries(&[7, 8])), [1, 2]);
        // Read once: a maps file changed since is not read again while the
        // process stays listed (a read of every listed process each
        // discovery is what this saves).
        maps_naming(&dir.path().join("7"), 3);
        assert_eq!(inodes(&listed.libraries(&[7, 8])), Vec::<u64>::new());
        // Left out of a listing, then listed again: read again.
        assert_eq!(inodes(&listed.libraries(&[8])), Vec::<u64>::new());
        assert_eq!(inodes(&listed.libraries(&[7, 8])), [3]);
        // Maps that cannot be read yet, or name no libcuda yet, are read at
        // every discovery; two processes mapping one file name it once.
        std::fs::create_dir_all(dir.path().join("10")).unwrap();
        std::fs::write(
            dir.path().join("10/maps"),
            "7f00-7f10 r-xp 00000000 fd:01 99 /usr/lib/libc.so.6\n",
        )
        .unwrap();
        assert_eq!(inodes(&listed.libraries(&[7, 8, 9, 10])), Vec::<u64>::new());
        maps_naming(&dir.path().join("9"), 4);
        maps_naming(&dir.path().join("10"), 4);
        assert_eq!(inodes(&listed.libraries(&[7, 8, 9, 10])), [4]);
    }
}
