//! The BPF programs pass this kernel's verifier, attach to the fake
//! libcuda and report exactly the calls a program made, with their
//! results. Needs root (or CAP_SYS_ADMIN + CAP_SYS_PTRACE) and python3: without
//! them the test is skipped, saying so.

// A test crate: a panic here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]

use std::path::Path;
use std::time::{Duration, Instant};

use cuda_fake::harness;
use cuda_fake::program::{self, CudaProgram};
use driver_trace::{Event, EventKind, LoadOptions, Tracer};

/// Why this machine cannot run the test, if it cannot.
fn unable() -> Option<String> {
    let privileges = driver_trace::privileges();
    if !privileges.sufficient() {
        return Some(format!("missing {}", privileges.missing.join(" + ")));
    }
    if !program::available() {
        return Some("no python3".into());
    }
    None
}

/// Events of `pid`, until `count` arrived or 10 s passed.
fn events_of(tracer: &mut Tracer, pid: u32, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while events.len() < count && Instant::now() < deadline {
        tracer
            .poll(Duration::from_millis(100), 1024, |event| {
                if event.pid == pid {
                    events.push(event);
                }
            })
            .unwrap();
    }
    events
}

#[test]
fn every_allocation_call_is_reported_with_its_result() {
    if let Some(reason) = unable() {
        eprintln!("SKIP: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let library = harness::install_as_libcuda(dir.path(), &harness::build_fake_library().unwrap());
    let scenario = harness::write_scenario(
        dir.path(),
        &r#"{"devices": [{"max_alloc_bytes": 1073741824}, {}]}"#,
    );
    let mut tracer = Tracer::load(LoadOptions::default()).unwrap();
    let attached = tracer.attach(&library).unwrap();
    assert_eq!(
        attached.functions,
        [
            "cuMemAlloc_v2",
            "cuMemAllocPitch_v2",
            "cuMemAllocAsync",
            "cuMemFree_v2",
            "cuMemFreeAsync",
            "cuMemCreate",
            "cuMemRelease",
            "cuCtxCreate_v2",
            "cuDevicePrimaryCtxRetain",
            "cuCtxSetCurrent",
            "cuCtxPushCurrent_v2",
            "cuCtxPopCurrent_v2",
            "cuCtxDestroy_v2"
        ],
        "the fake lacks cuMemAllocFromPoolAsync and cuMemAllocManaged: {:?}",
        attached.skipped
    );
    assert_eq!(
        attached.returning,
        [
            "cuMemAlloc_v2",
            "cuMemAllocPitch_v2",
            "cuMemAllocAsync",
            "cuMemCreate",
            "cuCtxCreate_v2",
            "cuDevicePrimaryCtxRetain"
        ],
        "frees are reported from their entry alone"
    );

    let mut cuda = CudaProgram::start(&scenario).unwrap();
    cuda.open(Path::new(&library)).unwrap();
    let first = cuda.allocate("alloc 1000").unwrap().unwrap();
    assert_eq!(cuda.allocate("alloc 2147483648").unwrap(), Err(2), "above max_alloc_bytes");
    let second = cuda.allocate("alloc_async 4096").unwrap().unwrap();
    let handle = cuda.allocate("create 1 2097152").unwrap().unwrap();
    let pitched = cuda.allocate("alloc_pitch 1000 3").unwrap().unwrap();
    assert_eq!(cuda.call(&format!("free {first}")).unwrap(), "ok");
    assert_eq!(cuda.call(&format!("free_async {second}")).unwrap(), "ok");
    assert_eq!(cuda.call(&format!("release {handle}")).unwrap(), "ok");
    assert_eq!(cuda.call("free 12345").unwrap(), "err 1", "never allocated");
    assert_eq!(cuda.call(&format!("free {pitched}")).unwrap(), "ok");
    let primary = cuda.allocate("primary 1").unwrap().unwrap();
    assert_eq!(cuda.call(&format!("push {primary}")).unwrap(), "ok");
    let own = cuda.allocate("pop").unwrap().unwrap();
    assert_eq!(own, primary);
    assert_eq!(cuda.call(&format!("set {primary}")).unwrap(), "ok");

    let seen: Vec<(EventKind, i32, u64, u64, Option<u32>)> = events_of(&mut tracer, cuda.pid, 15)
        .iter()
        .map(|event| (event.kind, event.result, event.size, event.address, event.device))
        .collect();
    assert_eq!(
        seen,
        [
            // `open` made a context on device 0 (the fake's first handle).
            (EventKind::ContextCreate, 0, 0, 0xC0_0000_0001, Some(0)),
            (EventKind::Alloc, 0, 1000, first, None),
            (EventKind::Alloc, 2, 2147483648, 0, None),
            (EventKind::Alloc, 0, 4096, second, None),
            (EventKind::Create, 0, 2097152, handle, Some(1)),
            (EventKind::Alloc, 0, 1024 * 3, pitched, None),
            (EventKind::Free, 0, 0, first, None),
            (EventKind::Free, 0, 0, second, None),
            (EventKind::Release, 0, 0, handle, None),
            // Sent from its entry: the driver's refusal is not seen.
            (EventKind::Free, 0, 0, 12345, None),
            (EventKind::Free, 0, 0, pitched, None),
            (EventKind::PrimaryContext, 0, 0, primary, Some(1)),
            (EventKind::PushCurrent, 0, 0, primary, None),
            (EventKind::PopCurrent, 0, 0, 0, None),
            (EventKind::SetCurrent, 0, 0, primary, None),
        ]
    );
    assert_eq!(tracer.counters().unwrap(), driver_trace::Counters::default(), "nothing dropped");
}
