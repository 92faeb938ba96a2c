//! The shape of each scenario, as the module documentation promises it:
//! what grows, what stays flat, and when counters and losses happen.

use super::devices::{GIB, MIB};
use super::tests::{MINUTE_MS, at, simulator};
use super::*;
use crate::model::{AllocatorStats, MemoryInfo, ProcessInfo};

const SEEDS: [u64; 4] = [0, 1, 0xDEAD_BEEF, u64::MAX];

fn memory(sim: &Simulator, index: u32, t_ms: u64) -> MemoryInfo {
    sim.fast_at(index, at(t_ms)).unwrap().memory.unwrap()
}

fn processes(sim: &Simulator, index: u32, t_ms: u64) -> Vec<ProcessInfo> {
    sim.slow_at(index, at(t_ms)).unwrap().processes.unwrap()
}

/// The allocator stats of the first process on a device.
fn first_stats(sim: &Simulator, index: u32, t_ms: u64) -> AllocatorStats {
    processes(sim, index, t_ms)[0].allocator.unwrap()
}

/// Least-squares slope of `(seconds, bytes)` points, in bytes per second.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let variance: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    covariance / variance
}

/// Slope of device `used` over `[from, to)` minutes, sampled every 10 s.
fn used_slope(sim: &Simulator, index: u32, from_min: u64, to_min: u64) -> f64 {
    let points: Vec<(f64, f64)> = (from_min * MINUTE_MS..to_min * MINUTE_MS)
        .step_by(10_000)
        .map(|t_ms| (t_ms as f64 / 1000.0, memory(sim, index, t_ms).used_bytes as f64))
        .collect();
    slope(&points)
}

#[test]
fn steady_inference_never_trends_or_runs_low() {
    for seed in SEEDS {
        let sim = simulator(ScenarioKind::SteadyInference, 3, seed);
        for index in 0..3 {
            assert!(used_slope(&sim, index, 0, 45).abs() < 0.05 * MIB as f64, "seed {seed}");
            for t_ms in (0..45 * MINUTE_MS).step_by(60_000) {
                let m = memory(&sim, index, t_ms);
                assert!(m.free_bytes > m.total_bytes * 3 / 10, "{m:?}");
                let stats = first_stats(&sim, index, t_ms);
                assert_eq!((stats.alloc_retries, stats.ooms), (0, 0));
            }
        }
    }
}

#[test]
fn training_fragmentation_grows_reserved_over_flat_allocated_then_retries_then_ooms() {
    for seed in SEEDS {
        let sim = simulator(ScenarioKind::TrainingFragmentation, 3, seed);
        let growth: Vec<AllocatorStats> =
            (0..24).map(|step| first_stats(&sim, 0, step * 30_000 + 15_000)).collect();
        assert!(growth.windows(2).all(|w| w[1].reserved_bytes > w[0].reserved_bytes), "{seed}");
        let (first, last) = (growth[0], growth[23]);
        assert!(last.reserved_bytes > first.reserved_bytes + 15 * GIB, "{first:?} {last:?}");
        assert!(last.inactive_split_bytes > first.inactive_split_bytes + 12 * GIB);
        let allocated: Vec<u64> = growth.iter().map(|s| s.allocated_bytes).collect();
        let spread = allocated.iter().max().unwrap() - allocated.iter().min().unwrap();
        assert!(spread < GIB, "allocated should stay flat, spread {spread}");

        let total = memory(&sim, 0, 0).total_bytes;
        assert!(memory(&sim, 0, 0).free_bytes > total / 5);
        assert!(memory(&sim, 0, 11 * MINUTE_MS).free_bytes < total / 20);
        assert!(memory(&sim, 0, 13 * MINUTE_MS).free_bytes < total / 50);

        let retries = |t_ms| first_stats(&sim, 0, t_ms).alloc_retries;
        assert_eq!(retries(12 * MINUTE_MS - 1), 0);
        assert!(retries(13 * MINUTE_MS) > 0);
        assert!(retries(16 * MINUTE_MS) > retries(13 * MINUTE_MS));
        assert!(retries(20 * MINUTE_MS - 1) > retries(16 * MINUTE_MS));

        let before = first_stats(&sim, 0, 20 * MINUTE_MS - 1);
        let after = first_stats(&sim, 0, 20 * MINUTE_MS);
        assert_eq!((before.ooms, after.ooms), (0, 1));
        assert!(after.reserved_bytes + 15 * GIB < before.reserved_bytes);
        assert_eq!(processes(&sim, 0, 0)[0].pid, processes(&sim, 0, 20 * MINUTE_MS)[0].pid);
        assert_eq!(first_stats(&sim, 0, 40 * MINUTE_MS).ooms, 2);

        for index in 1..3 {
            let reserved = first_stats(&sim, index, 0).reserved_bytes;
            for t_ms in (0..45 * MINUTE_MS).step_by(30_000) {
                let stats = first_stats(&sim, index, t_ms);
                assert_eq!(stats.reserved_bytes, reserved);
                assert_eq!((stats.alloc_retries, stats.ooms), (0, 0));
            }
        }
    }
}

#[test]
fn leak_grows_at_the_documented_rate_then_saturates_below_total() {
    let rate = timeline::LEAK_RATE_BYTES_PER_SECOND as f64;
    for seed in SEEDS {
        let sim = simulator(ScenarioKind::Leak, 3, seed);
        let before =
            memory(&sim, 0, 0).used_bytes.abs_diff(memory(&sim, 0, 2 * MINUTE_MS).used_bytes);
        assert!(before < 16 * MIB, "flat before onset, moved {before}");
        let measured = used_slope(&sim, 0, 3, 30);
        assert!((measured - rate).abs() < rate * 0.1, "slope {measured} vs {rate}");
        let allocated_growth = first_stats(&sim, 0, 30 * MINUTE_MS).allocated_bytes
            - first_stats(&sim, 0, 3 * MINUTE_MS).allocated_bytes;
        let expected = rate * 27.0 * 60.0;
        assert!((allocated_growth as f64 - expected).abs() < expected * 0.1, "{allocated_growth}");

        for t_ms in [40 * MINUTE_MS, 45 * MINUTE_MS, 300 * MINUTE_MS] {
            let m = memory(&sim, 0, t_ms);
            assert!((200 * MIB..=512 * MIB).contains(&m.free_bytes), "saturated: {m:?}");
        }
        for index in 1..3 {
            assert!(used_slope(&sim, index, 0, 45).abs() < 0.05 * MIB as f64);
        }
    }
}

#[test]
fn oom_spike_fills_the_device_briefly_without_any_trend() {
    for seed in SEEDS {
        let sim = simulator(ScenarioKind::OomSpike, 3, seed);
        let fill = |t_ms| {
            let m = memory(&sim, 0, t_ms);
            (m.reserved_bytes.unwrap() + m.used_bytes) as f64 / m.total_bytes as f64
        };
        for t_ms in [10 * MINUTE_MS, 10 * MINUTE_MS + 2_000, 10 * MINUTE_MS + 3_999] {
            assert!((0.975..=0.985).contains(&fill(t_ms)), "spike {}", fill(t_ms));
        }
        for t_ms in [10 * MINUTE_MS - 1, 10 * MINUTE_MS + 4_000, 30 * MINUTE_MS] {
            assert!(fill(t_ms) < 0.8, "steady {}", fill(t_ms));
        }
        assert!(used_slope(&sim, 0, 0, 10).abs() < 0.05 * MIB as f64);
        assert!(used_slope(&sim, 0, 11, 45).abs() < 0.05 * MIB as f64);
        let ooms = |t_ms| first_stats(&sim, 0, t_ms).ooms;
        assert_eq!((ooms(10 * MINUTE_MS + 1_999), ooms(10 * MINUTE_MS + 2_000)), (0, 1));
        assert_eq!(ooms(45 * MINUTE_MS), 1);
        assert!(
            (0.975..=0.985).contains(&fill(10 * MINUTE_MS)) && fill(10 * MINUTE_MS + 4_000) < 0.8
        );
        assert!(memory(&sim, 1, 10 * MINUTE_MS).free_bytes > memory(&sim, 1, 0).total_bytes / 5);
    }
}

#[test]
fn multi_tenant_shares_each_gpu_and_grows_one_process_on_gpu_0() {
    let rate = timeline::TENANT_GROWTH_RATE_BYTES_PER_SECOND as f64;
    for seed in SEEDS {
        let sim = simulator(ScenarioKind::MultiTenant, 8, seed);
        let mut growers = Vec::new();
        for index in 0..8 {
            let early = processes(&sim, index, 2 * MINUTE_MS);
            let late = processes(&sim, index, 30 * MINUTE_MS);
            assert!((3..=6).contains(&early.len()), "gpu {index}: {}", early.len());
            assert!(early.iter().any(|p| p.allocator.is_some()));
            assert!(early.iter().any(|p| p.allocator.is_none()));
            assert_eq!(early.len(), late.len());
            for (e, l) in early.iter().zip(&late) {
                assert_eq!(e.pid, l.pid);
                if l.used_bytes.unwrap() > e.used_bytes.unwrap() {
                    growers.push((index, l.used_bytes.unwrap() - e.used_bytes.unwrap()));
                }
            }
        }
        assert_eq!(growers.len(), 1, "{growers:?}");
        let (index, grown) = growers[0];
        let expected = rate * 28.0 * 60.0;
        assert_eq!(index, 0);
        assert!((grown as f64 - expected).abs() < expected * 0.1, "{grown}");
    }
}

#[test]
fn device_lost_loses_only_the_last_gpu_and_only_after_onset() {
    for gpus in [1, 3, 8] {
        let sim = simulator(ScenarioKind::DeviceLost, gpus, 3);
        let lost = gpus - 1;
        for index in 0..gpus {
            assert!(sim.fast_at(index, at(5 * MINUTE_MS - 1)).is_ok());
            assert!(sim.slow_at(index, at(5 * MINUTE_MS - 1)).is_ok());
            for t_ms in [5 * MINUTE_MS, 45 * MINUTE_MS] {
                let fast = sim.fast_at(index, at(t_ms));
                let slow = sim.slow_at(index, at(t_ms));
                if index == lost {
                    assert!(
                        matches!(fast, Err(SourceError::DeviceLost { index: i, .. }) if i == lost)
                    );
                    assert!(
                        matches!(slow, Err(SourceError::DeviceLost { index: i, .. }) if i == lost)
                    );
                } else {
                    assert!(fast.is_ok() && slow.is_ok(), "gpu {index} of {gpus}");
                }
            }
        }
        assert_eq!(sim.devices().unwrap().len() as u32, gpus);
    }
}

#[test]
fn idle_has_no_processes_no_utilization_and_tiny_used() {
    let sim = simulator(ScenarioKind::Idle, 8, 9);
    for t_ms in (0..45 * MINUTE_MS).step_by(37_000) {
        for index in 0..8 {
            let fast = sim.fast_at(index, at(t_ms)).unwrap();
            assert_eq!(fast.gpu_utilization, Some(0.0));
            assert_eq!(fast.memory_bandwidth_utilization, Some(0.0));
            assert!(fast.memory.unwrap().used_bytes <= 6 * MIB);
            assert_eq!(processes(&sim, index, t_ms), Vec::new());
        }
    }
}
