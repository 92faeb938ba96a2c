//! Loading the BPF object, attaching its programs to a `libcuda` file, and
//! reading what they send.

use std::os::fd::{AsFd as _, AsRawFd as _};
use std::path::Path;
use std::time::Duration;

use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::programs::{UProbe, uprobe::UProbeScope};
use aya::{Ebpf, EbpfLoader};

use crate::event::{EVENT_SIZE, Event};

/// One probed function: its symbol, the entry program that reads its
/// arguments, and whether the shared return program reads its result
/// (allocations only: a free's arguments say all vramd needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub symbol: &'static str,
    pub entry: &'static str,
    pub returns: bool,
}

/// Every function traced, with its entry program: the allocation and free
/// calls, then the context calls that say which device a `cuMemAlloc*`
/// lands on.
pub const PROBES: &[Probe] = &[
    Probe { symbol: "cuMemAlloc_v2", entry: "alloc_enter", returns: true },
    Probe { symbol: "cuMemAllocPitch_v2", entry: "pitch_enter", returns: true },
    Probe { symbol: "cuMemAllocAsync", entry: "alloc_enter", returns: true },
    Probe { symbol: "cuMemAllocFromPoolAsync", entry: "alloc_enter", returns: true },
    Probe { symbol: "cuMemAllocManaged", entry: "alloc_enter", returns: true },
    Probe { symbol: "cuMemFree_v2", entry: "free_enter", returns: false },
    Probe { symbol: "cuMemFreeAsync", entry: "free_enter", returns: false },
    Probe { symbol: "cuMemCreate", entry: "create_enter", returns: true },
    Probe { symbol: "cuMemRelease", entry: "release_enter", returns: false },
    Probe { symbol: "cuCtxCreate_v2", entry: "context_enter", returns: true },
    Probe { symbol: "cuDevicePrimaryCtxRetain", entry: "primary_enter", returns: true },
    Probe { symbol: "cuCtxSetCurrent", entry: "set_current_enter", returns: false },
    Probe { symbol: "cuCtxPushCurrent_v2", entry: "push_current_enter", returns: false },
    Probe { symbol: "cuCtxPopCurrent_v2", entry: "pop_current_enter", returns: false },
    Probe { symbol: "cuCtxDestroy_v2", entry: "context_destroy_enter", returns: false },
];

const RETURN_PROGRAM: &str = "alloc_return";
const ENTRY_PROGRAMS: &[&str] = &[
    "alloc_enter",
    "pitch_enter",
    "create_enter",
    "free_enter",
    "release_enter",
    "context_enter",
    "primary_enter",
    "set_current_enter",
    "push_current_enter",
    "pop_current_enter",
    "context_destroy_enter",
];

/// Sizes of the kernel-side tables, fixed at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Bytes of the ring buffer (rounded up to a power of two of at least
    /// one page by the loader, as the kernel requires).
    pub ring_bytes: u32,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self { ring_bytes: 1 << 20 }
    }
}

/// Why tracing could not start or continue.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("driver tracing needs {SUPPORTED}, this is {actual}", SUPPORTED = crate::SUPPORTED_ARCH)]
    Architecture { actual: &'static str },
    #[error("loading the BPF object: {0}")]
    Load(#[source] Box<aya::EbpfError>),
    #[error("the BPF object has no {what} named {name}")]
    Missing { what: &'static str, name: &'static str },
    #[error("BPF program {name}: {source}")]
    Program {
        name: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error("BPF map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("no traced function could be probed in {library}: {reasons}")]
    NothingAttached { library: String, reasons: String },
    #[error("polling the ring buffer: {0}")]
    Poll(#[source] std::io::Error),
}

/// What attaching to one library did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attached {
    /// The symbols probed.
    pub functions: Vec<&'static str>,
    /// Of those, the ones with a return probe too: allocations, whose
    /// result and new address only the return says. A free is reported
    /// from its entry alone, at half the cost.
    pub returning: Vec<&'static str>,
    /// The symbols not probed, each with why (older drivers lack the
    /// asynchronous and virtual-memory calls).
    pub skipped: Vec<(&'static str, String)>,
}

/// What the BPF side dropped, since load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Events lost because the ring buffer was full (user space too slow).
    pub ring_full: u64,
    /// Allocation calls lost because another thread sharing their
    /// in-flight slot (thread id modulo 16384) allocated at the same time.
    pub in_flight_full: u64,
    /// Returns without a saved entry (a probe attached mid-call).
    pub unpaired_returns: u64,
}

/// The loaded programs, their maps and the probes attached so far.
pub struct Tracer {
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    counters: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").finish_non_exhaustive()
    }
}

impl Tracer {
    /// Loads the programs into the kernel (the verifier runs here) and
    /// opens the maps. Attaches nothing.
    pub fn load(options: LoadOptions) -> Result<Tracer, TraceError> {
        if std::env::consts::ARCH != crate::SUPPORTED_ARCH {
            return Err(TraceError::Architecture { actual: std::env::consts::ARCH });
        }
        let ring_bytes = ring_size(options.ring_bytes);
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("events", ring_bytes)
            .load(crate::OBJECT)
            .map_err(|error| TraceError::Load(Box::new(error)))?;
        for &name in ENTRY_PROGRAMS.iter().chain([&RETURN_PROGRAM]) {
            uprobe(&mut ebpf, name)?
                .load()
                .map_err(|source| TraceError::Program { name, source: Box::new(source) })?;
        }
        let ring = take_map(&mut ebpf, "events", RingBuf::try_from)?;
        let counters = take_map(&mut ebpf, "counters", PerCpuArray::try_from)?;
        Ok(Tracer { ebpf, ring, counters })
    }

    /// Probes every traced function `library` exports, for every process
    /// that maps that file (now or later). `library` is opened by path, so
    /// a file in another mount namespace is reached through
    /// `/proc/<pid>/root/…`. Attaching the same file twice probes it twice:
    /// the caller keeps one attachment per file.
    pub fn attach(&mut self, library: &Path) -> Result<Attached, TraceError> {
        let mut attached = Attached::default();
        for probe in PROBES {
            // The return probe first: an entry without its return would
            // leave the thread's in-flight slot taken.
            let returned = if probe.returns {
                uprobe(&mut self.ebpf, RETURN_PROGRAM)?
                    .attach(probe.symbol, library, UProbeScope::AllProcesses)
                    .map(|_| ())
            } else {
                Ok(())
            };
            let outcome = returned.and_then(|()| {
                // The return probe stays if the entry fails: a return
                // without its entry is only counted.
                let entry = uprobe(&mut self.ebpf, probe.entry)
                    .map_err(|_| aya::programs::ProgramError::UnexpectedProgramType)?;
                entry.attach(probe.symbol, library, UProbeScope::AllProcesses)
            });
            match outcome {
                Ok(_) => {
                    attached.functions.push(probe.symbol);
                    if probe.returns {
                        attached.returning.push(probe.symbol);
                    }
                }
                Err(error) => attached.skipped.push((probe.symbol, error.to_string())),
            }
        }
        if attached.functions.is_empty() {
            let reasons: Vec<String> =
                attached.skipped.iter().map(|(symbol, why)| format!("{symbol}: {why}")).collect();
            return Err(TraceError::NothingAttached {
                library: library.display().to_string(),
                reasons: reasons.join("; "),
            });
        }
        Ok(attached)
    }

    /// Waits up to `timeout` for a batch of events, then hands each one waiting to
    /// `sink`, at most `max` of them (the rest stay for the next call).
    /// Returns how many records were read (undecodable ones included).
    pub fn poll(
        &mut self,
        timeout: Duration,
        max: usize,
        mut sink: impl FnMut(Event),
    ) -> Result<usize, TraceError> {
        // The program wakes the reader only for a batch (see the C
        // source), so what arrived during a wait that timed out is read too.
        wait_readable(self.ring.as_fd().as_raw_fd(), timeout)?;
        let mut read = 0;
        while read < max {
            let Some(item) = self.ring.next() else { break };
            read += 1;
            if item.len() >= EVENT_SIZE
                && let Some(event) = Event::decode(&item)
            {
                sink(event);
            }
        }
        Ok(read)
    }

    /// The BPF side's drop counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters, TraceError> {
        let read = |slot: u32| -> Result<u64, TraceError> {
            let values = self
                .counters
                .get(&slot, 0)
                .map_err(|source| TraceError::Map { name: "counters", source: Box::new(source) })?;
            Ok(values.iter().copied().fold(0u64, u64::saturating_add))
        };
        Ok(Counters { ring_full: read(0)?, in_flight_full: read(1)?, unpaired_returns: read(2)? })
    }
}

fn uprobe<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut UProbe, TraceError> {
    let program = ebpf.program_mut(name).ok_or(TraceError::Missing { what: "program", name })?;
    program.try_into().map_err(|source| TraceError::Program { name, source: Box::new(source) })
}

fn take_map<M>(
    ebpf: &mut Ebpf,
    name: &'static str,
    convert: impl FnOnce(aya::maps::Map) -> Result<M, aya::maps::MapError>,
) -> Result<M, TraceError> {
    let map = ebpf.take_map(name).ok_or(TraceError::Missing { what: "map", name })?;
    convert(map).map_err(|source| TraceError::Map { name, source: Box::new(source) })
}

/// The kernel wants a ring buffer of a power of two pages.
fn ring_size(requested: u32) -> u32 {
    requested.max(4096).checked_next_power_of_two().unwrap_or(1 << 31)
}

/// Whether `fd` became readable within `timeout`; an interrupted wait
/// counts as not readable (the caller polls again).
fn wait_readable(fd: std::os::fd::RawFd, timeout: Duration) -> Result<bool, TraceError> {
    let mut entry = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `entry` is one valid, initialised pollfd that lives across
    // the call, and the count passed is 1; `fd` is the ring buffer's
    // descriptor, owned by `self.ring` for the duration of the call.
    let ready = unsafe { libc::poll(&mut entry, 1, millis) };
    if ready < 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(TraceError::Poll(error));
    }
    Ok(ready > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_are_whole_powers_of_two_pages() {
        assert_eq!(ring_size(0), 4096);
        assert_eq!(ring_size(5000), 8192);
        assert_eq!(ring_size(1 << 20), 1 << 20);
    }

    #[test]
    fn every_probe_names_an_entry_program_of_the_object() {
        for probe in PROBES {
            assert!(ENTRY_PROGRAMS.contains(&probe.entry), "{probe:?}");
        }
    }
}
