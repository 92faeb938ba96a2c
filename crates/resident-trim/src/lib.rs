//! Hands back resident memory an idle daemon no longer uses, once, after
//! start-up.
//!
//! Owns: two calls, glibc's `malloc_trim(0)` and `madvise(MADV_DONTNEED)`
//! over the executable's own read-only mappings. Why (issue 15,
//! docs/performance.md "Memory, fourth round"):
//! - glibc keeps freed memory inside its arenas, and the main arena only
//!   shrinks from its top. Start-up builds large short-lived values (the
//!   OpenAPI document is ~2.6 MiB at its peak), which would stay resident,
//!   freed, for the daemon's life (~2 MiB).
//! - The kernel maps the 64 KiB around every code page touched, and
//!   start-up (command line, configuration layers, router, TLS set-up)
//!   touches code all over the executable, so ~95 % of `.text` stays mapped
//!   though an idle daemon runs ~3 MiB of it. Dropping the mappings' page
//!   table entries leaves the pages in the page cache; the code still in
//!   use is mapped again by its next minor fault.
//!
//! Must not depend on anything of vramd's. Elsewhere than Linux with glibc
//! both do nothing.

use std::io;

/// Releases the free pages of every malloc arena. True when the C library
/// returned some memory to the kernel; false when it had none to return or
/// is not glibc. It walks the arenas under their locks: about a millisecond
/// on a small heap, so call it off the async runtime.
pub fn release_free_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes a pad size and touches only glibc's
        // own allocator state, under the arena locks it takes itself; it may
        // be called from any thread at any time. Only free chunks are
        // released, so no live allocation (Rust's global allocator is this
        // malloc) changes.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Bytes the C library's heap holds free after they were freed (glibc's
/// `mallinfo2().fordblks`): what a benchmark tells apart from the memory
/// its values use. `None` elsewhere than Linux with glibc.
pub fn heap_free_bytes() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallinfo2` takes no argument, returns a struct by value
        // and only reads glibc's allocator statistics under its own locks.
        Some(unsafe { libc::mallinfo2() }.fordblks)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Unmaps the resident pages of the executable's read-only mappings that
/// hold nothing but the file's bytes (its code and read-only data, not the
/// relocated RELRO pages), so that only the code run from now on becomes
/// resident again. Returns the bytes of the mappings so advised. Reads
/// `/proc/self/smaps` (blocking file I/O): call it off the async runtime.
pub fn release_idle_code() -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    {
        linux::release_idle_code()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(0)
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::unix::fs::MetadataExt;

    /// One mapping of `/proc/self/smaps`, as far as the choice needs it.
    #[derive(Debug, PartialEq)]
    pub(crate) struct Mapping {
        pub start: usize,
        pub end: usize,
        pub writable: bool,
        pub device: (u32, u32),
        pub inode: u64,
        /// `Anonymous:` in KiB: pages that are private copies, no longer
        /// the file's bytes. `None` when the field was not found.
        pub anonymous_kib: Option<u64>,
    }

    pub(crate) fn release_idle_code() -> io::Result<usize> {
        let exe = std::fs::metadata("/proc/self/exe")?;
        let device = (libc::major(exe.dev()), libc::minor(exe.dev()));
        let smaps = std::fs::read_to_string("/proc/self/smaps")?;
        let mut released = 0;
        for mapping in parse(&smaps) {
            let ours = mapping.inode == exe.ino() && mapping.device == device;
            if !ours || mapping.writable || mapping.anonymous_kib != Some(0) {
                continue;
            }
            let length = mapping.end - mapping.start;
            let address = std::ptr::with_exposed_provenance_mut::<libc::c_void>(mapping.start);
            // SAFETY: the range is exactly one mapping of this process's
            // own executable as the kernel listed it a moment ago (page
            // aligned); the executable is never unmapped while the process
            // runs, so no other mapping can have taken its place. It is not
            // writable and holds no anonymous (copied-on-write) page, so
            // every page is the file's bytes: MADV_DONTNEED only drops page
            // table entries, and the next access maps the same bytes from
            // the page cache again. No memory Rust code refers to changes.
            if unsafe { libc::madvise(address, length, libc::MADV_DONTNEED) } != 0 {
                return Err(io::Error::last_os_error());
            }
            released += length;
        }
        Ok(released)
    }

    /// The mappings of a `/proc/PID/smaps` text; lines that do not parse
    /// are skipped (a mapping with an unreadable header is never advised).
    pub(crate) fn parse(smaps: &str) -> Vec<Mapping> {
        let mut mappings = Vec::new();
        for line in smaps.lines() {
            if let Some(mapping) = header(line) {
                mappings.push(mapping);
            } else if let (Some(last), Some(value)) =
                (mappings.last_mut(), line.strip_prefix("Anonymous:"))
            {
                last.anonymous_kib = value.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        mappings
    }

    /// `start-end perms offset major:minor inode [path]`.
    fn header(line: &str) -> Option<Mapping> {
        let mut fields = line.split_ascii_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?;
        let _offset = fields.next()?;
        let (major, minor) = fields.next()?.split_once(':')?;
        let inode = fields.next()?.parse().ok()?;
        if perms.len() != 4 {
            return None;
        }
        Some(Mapping {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            writable: perms.as_bytes().get(1) != Some(&b'-'),
            device: (u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?),
            inode,
            anonymous_kib: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{release_free_heap, release_idle_code};

    /// A field of `/proc/self/status`, in KiB.
    fn status_kib(key: &str) -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|line| line.starts_with(key)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// What a user notices is a smaller idle RSS (measured by
    /// `scripts/bench-sampler.sh`); here, memory freed in the middle of the
    /// heap, which glibc would otherwise keep resident, leaves the process.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_heap_pages_leave_the_process() {
        // 8 MiB in 64 KiB blocks (below the mmap threshold, so they live in
        // an arena), written so they are resident; every other one freed:
        // 4 MiB of whole free pages between live blocks, which free() keeps.
        let mut blocks: Vec<Option<Vec<u8>>> =
            (0..128).map(|i| Some(vec![i as u8 | 1; 64 * 1024])).collect();
        for block in blocks.iter_mut().step_by(2) {
            *block = None;
        }
        let before = status_kib("RssAnon:");
        assert!(release_free_heap());
        let after = status_kib("RssAnon:");
        assert!(after + 2048 <= before, "RssAnon {before} KiB -> {after} KiB");
        assert!(blocks.iter().skip(1).step_by(2).flatten().all(|block| block[1] != 0));
    }

    /// Read-only bytes of the test executable, far more than any code the
    /// test runs afterwards can map back in: an edge may share a large page
    /// cache folio with data the test touches, its middle never does.
    #[cfg(target_os = "linux")]
    static READ_ONLY_BLOB: [u8; 8 << 20] = [0xa5; 8 << 20];

    /// How many of the pages `range` spans this process has mapped now, and
    /// how many it spans, from the present bit of `/proc/self/pagemap`
    /// (readable without privilege; only the frame numbers are hidden).
    #[cfg(target_os = "linux")]
    fn mapped_pages(range: &[u8]) -> (usize, usize) {
        use std::io::{Read, Seek, SeekFrom};
        let page = page_size();
        let first = range.as_ptr() as usize / page;
        let last = (range.as_ptr() as usize + range.len() - 1) / page;
        let mut pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        pagemap.seek(SeekFrom::Start(first as u64 * 8)).unwrap();
        let mut entries = vec![0u8; (last - first + 1) * 8];
        pagemap.read_exact(&mut entries).unwrap();
        let mapped = entries.chunks_exact(8).filter(|entry| entry[7] & 0x80 != 0).count();
        (mapped, last - first + 1)
    }

    /// The kernel's page size: `pagemap` has one entry per page, and
    /// pages are 16 or 64 KiB on some arm64 kernels.
    #[cfg(target_os = "linux")]
    fn page_size() -> usize {
        // SAFETY: `sysconf` only reads a system constant; it takes no
        // pointer and touches no memory of ours.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).unwrap()
    }

    /// The executable's read-only pages leave the process's page tables
    /// and its code still runs; its relocated data (and everything else) is
    /// left alone. Measured on pages nothing touches afterwards rather than
    /// on `RssFile`: that total also counts shared libraries, the other
    /// tests' threads and the code that reads `/proc` map code back in
    /// (each fault maps a whole fault-around window, or more), and CI once
    /// saw it rise (2412 -> 2472 KiB) across a release that had succeeded.
    #[cfg(target_os = "linux")]
    #[test]
    fn idle_code_is_unmapped_and_still_runs() {
        let blob = std::hint::black_box(&READ_ONLY_BLOB[..]);
        // Read one byte of every page, so that every page is mapped.
        for page in blob.chunks(page_size()) {
            assert_eq!(std::hint::black_box(page[0]), 0xa5);
        }
        let (before, pages) = mapped_pages(blob);
        assert_eq!(before, pages, "the blob was read, so every page is mapped");
        let released = release_idle_code().unwrap();
        assert!(released >= blob.len(), "released {released} bytes");
        let (after, _) = mapped_pages(blob);
        assert!(after <= pages / 2, "{after} of {pages} blob pages still mapped");
        // Code, read-only data, statics and the heap all still work.
        assert!(blob.iter().all(|&byte| byte == 0xa5));
        static TABLE: [&str; 2] = ["relocated", "pointers"];
        let text = format!("{}-{}", TABLE[0], TABLE[1]);
        assert_eq!(text.len(), 18);
        assert!(status_kib("VmRSS:") > 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn smaps_headers_and_anonymous_pages_are_read() {
        let smaps = "\
5650f512b000-5650f5963000 r-xp 00236000 fe:00 10010877   /usr/bin/vramd
Size:               8416 kB
Anonymous:             0 kB
5650f5963000-5650f59a4000 r--p 00a6d000 fe:00 10010877   /usr/bin/vramd
Anonymous:           240 kB
7f59300bb000-7f5930ebb000 rw-p 00000000 00:00 0
Anonymous:          1024 kB
";
        let mappings = super::linux::parse(smaps);
        assert_eq!(mappings.len(), 3);
        assert_eq!(mappings[0].start, 0x5650_f512_b000);
        assert_eq!(mappings[0].device, (0xfe, 0));
        assert_eq!(mappings[0].inode, 10_010_877);
        assert_eq!(mappings[0].anonymous_kib, Some(0));
        assert!(!mappings[0].writable);
        assert_eq!(mappings[1].anonymous_kib, Some(240));
        assert!(mappings[2].writable);
    }
}
