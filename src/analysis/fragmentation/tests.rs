use super::*;

const GIB: u64 = 1 << 30;

fn stats(allocated: u64, reserved: u64, inactive_split: u64) -> AllocatorStats {
    AllocatorStats {
        allocated_bytes: allocated,
        reserved_bytes: reserved,
        active_bytes: allocated,
        inactive_split_bytes: inactive_split,
        alloc_retries: 0,
        ooms: 0,
    }
}

fn point(pid: u32, allocator: Option<AllocatorStats>) -> ProcessPoint {
    ProcessPoint::from(&ProcessInfo {
        pid,
        name: None,
        used_bytes: Some(20 * GIB),
        allocator,
        details: Default::default(),
    })
}

#[test]
fn ratios_follow_the_accounting_definitions() {
    let pool = stats(6 * GIB, 10 * GIB, 3 * GIB);
    assert_eq!(cache_ratio(&pool), Some(0.4));
    assert_eq!(split_fragmentation_ratio(&pool), Some(0.3));
}

#[test]
fn ratios_are_absent_when_nothing_is_reserved() {
    let empty = stats(0, 0, 0);
    assert_eq!(cache_ratio(&empty), None);
    assert_eq!(split_fragmentation_ratio(&empty), None);
    assert_eq!(fragmentation_finding(1, &empty, &FragmentationThresholds::default()), None);
}

#[test]
fn external_index_measures_how_scattered_free_memory_is() {
    assert_eq!(external_fragmentation_index(GIB, GIB), Some(0.0));
    assert_eq!(external_fragmentation_index(GIB / 4, GIB), Some(0.75));
    assert_eq!(external_fragmentation_index(0, 0), None, "nothing free");
    assert_eq!(external_fragmentation_index(2 * GIB, GIB), None, "inconsistent report");
}

#[test]
fn fragmentation_finding_needs_both_ratio_and_size() {
    let thresholds = FragmentationThresholds::default();
    // 31 % of 10 GiB in split pieces: reported, with the allocator setting.
    let fragmented = stats(GIB, 10 * GIB, 31 * GIB / 10);
    let finding = fragmentation_finding(42, &fragmented, &thresholds).unwrap();
    assert_eq!(finding.pid, 42);
    assert_eq!(finding.inactive_split_bytes, 31 * GIB / 10);
    assert_eq!(finding.cache_bytes, 9 * GIB);
    assert!((finding.ratio - 0.31).abs() < 1e-9);
    assert_eq!(finding.remediation, remediation::FRAGMENTATION);
    // Exactly at the ratio: not above it.
    assert_eq!(fragmentation_finding(42, &stats(GIB, 10 * GIB, 3 * GIB), &thresholds), None);
    // Same ratio on a 1 GiB pool: too small to matter.
    let small = stats(GIB / 10, GIB, GIB * 31 / 100);
    assert_eq!(fragmentation_finding(42, &small, &thresholds), None);
}

#[test]
fn releasable_cache_matters_only_under_pressure() {
    let thresholds = CacheThresholds::default();
    // 8 GiB cached, 1 GiB of it fragmented: 7 GiB releasable.
    let cached = stats(2 * GIB, 10 * GIB, GIB);
    assert_eq!(releasable_cache_finding(7, &cached, PressureLevel::Elevated, &thresholds), None);
    let finding = releasable_cache_finding(7, &cached, PressureLevel::High, &thresholds).unwrap();
    assert_eq!(finding.releasable_bytes, 7 * GIB);
    assert_eq!(finding.cache_bytes, 8 * GIB);
    assert_eq!(finding.cache_ratio, 0.8);
    assert_eq!(finding.remediation, remediation::RELEASE_CACHE);
    // Mostly fragmented: empty_cache() would not help.
    let stuck = stats(2 * GIB, 10 * GIB, 7 * GIB);
    assert_eq!(releasable_cache_finding(7, &stuck, PressureLevel::Critical, &thresholds), None);
}

#[test]
fn device_totals_sum_processes_with_allocator_stats() {
    let processes = [
        point(1, Some(stats(6 * GIB, 10 * GIB, 3 * GIB))),
        point(2, None),
        point(3, Some(stats(GIB, 2 * GIB, 0))),
    ];
    let totals = device_fragmentation(&processes);
    assert_eq!(totals.processes_with_allocator_stats, 2);
    assert_eq!(totals.reserved_bytes, 12 * GIB);
    assert_eq!(totals.cache_bytes, 5 * GIB);
    assert_eq!(totals.fragmented_bytes, 3 * GIB);
    assert_eq!(totals.releasable_bytes, 2 * GIB);
    assert_eq!(totals.fragmentation_ratio(), Some(0.25));
    assert_eq!(device_fragmentation(&[point(2, None)]).fragmentation_ratio(), None);
}
