//! `memory_high` on a GPU a preallocating allocator (JAX) holds.

use super::*;
use crate::alerts::engine::Verdict;
use crate::analysis::snapshot::DeviceFacts;
use crate::analysis::summary::DeviceAnalysis;
use crate::config::default_alerts;
use crate::model::{AllocatorStats, Timestamp};

const GIB: u64 = 1 << 30;

fn process(allocated: u64, reserved: u64, pool_limit: Option<u64>) -> ProcessFacts {
    ProcessFacts {
        pid: 4242,
        name: Some("python3".into()),
        allocator: Some(AllocatorStats {
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            active_bytes: allocated,
            inactive_split_bytes: 0,
            alloc_retries: 0,
            ooms: 0,
        }),
        snapshot: None,
        pool_limit_bytes: pool_limit,
        retries_in_window: None,
        ooms_in_window: None,
        leak: None,
    }
}

/// An 80 GiB GPU with 76 GiB used (95 %), held by `holder`.
fn snapshot(holder: ProcessFacts) -> (DeviceSnapshot, MemoryInfo) {
    let memory = MemoryInfo {
        total_bytes: 80 * GIB,
        reserved_bytes: None,
        used_bytes: 76 * GIB,
        free_bytes: 4 * GIB,
    };
    let facts = DeviceFacts {
        info: DeviceInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        },
        up: true,
        failure: None,
        memory: Some(memory),
        processes: vec![holder],
        xid_in_window: None,
        probe: None,
        oom_events: Vec::new(),
    };
    let analysis = DeviceAnalysis {
        at: Timestamp::from_unix_millis(1_767_225_600_000),
        growth_bytes_per_second: None,
        growth_fit: None,
        trend_window_seconds: 0.0,
        time_to_exhaustion_seconds: None,
        pressure_level: 0,
        pressure: "none",
        pressure_reasons: Vec::new(),
        allocator_cache_bytes: 0,
        allocator_fragmented_bytes: 0,
        leaks: Vec::new(),
    };
    (DeviceSnapshot { facts, analysis }, memory)
}

fn memory_high(holder: ProcessFacts) -> Observation {
    let (snapshot, memory) = snapshot(holder);
    let mut out = Vec::new();
    memory_rules(&default_alerts().rules, &snapshot, "GPU 0", memory, &mut out);
    out.into_iter().find(|observation| observation.key.rule == RuleId::MemoryHigh.as_str()).unwrap()
}

#[test]
fn a_preallocated_pool_mostly_unused_is_not_memory_pressure() {
    let observation = memory_high(process(10 * GIB, 60 * GIB, Some(60 * GIB)));
    assert_eq!(observation.verdict, Verdict::Clear, "{observation:?}");
    assert!(observation.value < 0.35, "its 50 GiB unused count as free: {}", observation.value);
}

#[test]
fn a_preallocated_pool_near_its_limit_is_memory_pressure() {
    let observation = memory_high(process(58 * GIB, 60 * GIB, Some(60 * GIB)));
    assert_eq!(observation.verdict, Verdict::Breached, "{observation:?}");
    assert!(observation.value > 0.96, "judged by the pool's own fill: {}", observation.value);
    assert!(
        observation.description.contains("the fullest is 97% of its limit"),
        "{}",
        observation.description
    );
}

#[test]
fn a_caching_allocator_without_a_pool_limit_counts_its_cache_as_used() {
    let observation = memory_high(process(10 * GIB, 60 * GIB, None));
    assert_eq!(observation.verdict, Verdict::Breached, "{observation:?}");
    assert!(!observation.description.contains("Preallocated"));
}
