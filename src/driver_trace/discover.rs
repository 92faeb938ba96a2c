//! Finding the `libcuda` each listed process maps: its `/proc/PID/maps`
//! names the file (as the process sees it, in its own mount namespace) and
//! its device and inode; `/proc/PID/root/<path>` reaches it from here. The
//! device and inode tell one file from another, so each is probed once.
//! Blocking file I/O: the tracer thread calls it.

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

/// The libcuda files `pid` maps; empty when its maps cannot be read (it
/// exited, or vramd may not look).
pub fn libraries_of(proc_root: &Path, pid: u32) -> Vec<LibraryFile> {
    let process = proc_root.join(pid.to_string());
    let mut bytes = Vec::new();
    let read = std::fs::File::open(process.join("maps"))
        .and_then(|file| file.take(MAX_MAPS_BYTES).read_to_end(&mut bytes));
    if read.is_err() {
        return Vec::new();
    }
    let mut found: Vec<LibraryFile> = Vec::new();
    for line in String::from_utf8_lossy(&bytes).lines() {
        let Some(library) = parse_line(&process, line) else { continue };
        if !found.iter().any(|known| known.id == library.id) {
            found.push(library);
        }
    }
    found
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

/// Whether the process still exists.
pub fn alive(proc_root: &Path, pid: u32) -> bool {
    proc_root.join(pid.to_string()).exists()
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
        let found = libraries_of(dir.path(), 42);
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
        assert!(libraries_of(dir.path(), 43).is_empty());
        assert!(alive(dir.path(), 42) && !alive(dir.path(), 43));
    }
}
