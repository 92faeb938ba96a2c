//! eBPF uprobes on the CUDA driver's device-memory allocation and free
//! calls in `libcuda.so.1`: the committed BPF object (`bpf/`), loaded with
//! `aya`, attached to one library file at a time, and the events it sends
//! decoded into [`Event`]s.
//!
//! Owns: the BPF object and the functions it probes ([`PROBES`]), the
//! event layout shared with the C program, the kernel-side drop counters,
//! and the privilege check ([`privileges`]). Knows nothing of processes,
//! devices or vramd's accounting: the daemon keeps those.
//!
//! Every call here is blocking (BPF syscalls, reading the library's ELF
//! symbols, polling the ring buffer): call it from a thread of its own.

mod event;
mod privilege;
mod tracer;

pub use event::{EVENT_SIZE, Event, EventKind};
pub use privilege::{Privileges, privileges};
pub use tracer::{Attached, Counters, LoadOptions, PROBES, Probe, TraceError, Tracer};

/// The compiled BPF program (`bpf/driver_trace.bpf.c`, built by
/// `bpf/build.sh`; `tests/object.rs` checks that they match).
pub const OBJECT: &[u8] = include_bytes!("../bpf/driver_trace.bpf.o");

/// The architecture the committed object reads registers for; the
/// argument registers of another architecture differ.
pub const SUPPORTED_ARCH: &str = "x86_64";
