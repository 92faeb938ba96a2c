//! Tests of the simulator as a whole: determinism, the accounting
//! invariants over every scenario, monotonic counters, errors, and its face
//! as a [`DeviceSource`]. Scenario shapes are in `tests_scenarios`.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::model::ProcessInfo;

impl Simulator {
    /// A simulator whose scenario starts at the clock's origin.
    pub fn new(spec: SimulatorSpec, clock: ScaledClock) -> Result<Self, SimulatorError> {
        let origin = clock.origin();
        Self::with_origin(spec, clock, origin)
    }

    pub fn spec(&self) -> SimulatorSpec {
        self.spec
    }

    /// The timestamp at which the scenario starts; scenario time = at − origin.
    pub fn origin(&self) -> Timestamp {
        self.origin
    }
}

pub(super) const MINUTE_MS: u64 = 60_000;
const GPU_COUNTS: [u32; 3] = [1, 3, 8];

pub(super) fn simulator(scenario: ScenarioKind, gpus: u32, seed: u64) -> Simulator {
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    Simulator::with_origin(SimulatorSpec { scenario, gpus, seed }, clock, GOLDEN_ORIGIN).unwrap()
}

pub(super) fn at(t_ms: u64) -> Timestamp {
    GOLDEN_ORIGIN.saturating_add(Duration::from_millis(t_ms))
}

/// Every invariant the module documents, for one device at one time.
fn check_invariants(sim: &Simulator, index: u32, t_ms: u64) -> Result<(), String> {
    let context =
        format!("{} gpus={} index={index} t={t_ms}ms", sim.spec().scenario, sim.spec().gpus);
    let (fast, slow) = match (sim.fast_at(index, at(t_ms)), sim.slow_at(index, at(t_ms))) {
        (Ok(fast), Ok(slow)) => (fast, slow),
        (Err(SourceError::DeviceLost { .. }), Err(SourceError::DeviceLost { .. }))
            if sim.spec().scenario == ScenarioKind::DeviceLost =>
        {
            return Ok(());
        }
        (fast, slow) => return Err(format!("{context}: unexpected {fast:?} / {slow:?}")),
    };
    let memory = fast.memory.ok_or(format!("{context}: no memory"))?;
    let reserved = memory.reserved_bytes.ok_or(format!("{context}: no reserved"))?;
    let sum = u128::from(reserved) + u128::from(memory.used_bytes) + u128::from(memory.free_bytes);
    if sum != u128::from(memory.total_bytes) {
        return Err(format!("{context}: total != reserved + used + free: {memory:?}"));
    }
    let processes: &[ProcessInfo] =
        slow.processes.as_deref().ok_or(format!("{context}: no list"))?;
    let mut processes_used = 0u64;
    for process in processes {
        let used = process.used_bytes.ok_or(format!("{context}: {process:?} has no used"))?;
        processes_used += used;
        if let Some(stats) = process.allocator
            && (!stats.is_consistent() || stats.reserved_bytes > used)
        {
            return Err(format!("{context}: inconsistent {process:?}"));
        }
    }
    if processes_used > memory.used_bytes {
        return Err(format!("{context}: processes {processes_used} > used {memory:?}"));
    }
    for ratio in [fast.gpu_utilization, fast.memory_bandwidth_utilization] {
        match ratio {
            Some(value) if (0.0..=1.0).contains(&value) => {}
            other => return Err(format!("{context}: utilization {other:?}")),
        }
    }
    let limit = slow.power_limit_watts.unwrap_or(0.0);
    let power = slow.power_usage_watts.unwrap_or(-1.0);
    let temperature = slow.temperature_celsius.unwrap_or(-1.0);
    if !(0.0..=limit).contains(&power) || !(20.0..=90.0).contains(&temperature) {
        return Err(format!("{context}: power {power}/{limit} W, {temperature} °C"));
    }
    Ok(())
}

#[test]
fn invariants_hold_for_every_scenario_and_gpu_count_over_45_minutes() {
    // A prime stride hits every phase at odd offsets; the listed instants are
    // the documented phase boundaries, where off-by-one mistakes live.
    let boundaries = [0, 119_999, 120_000, 299_999, 300_000, 600_000, 601_999, 602_000, 603_999]
        .into_iter()
        .chain([604_000, 719_999, 720_000, 1_199_999, 1_200_000, 2_400_000, 2_700_000]);
    let times: Vec<u64> = (0..=45 * MINUTE_MS).step_by(7_001).chain(boundaries).collect();
    for &scenario in ScenarioKind::ALL {
        for gpus in GPU_COUNTS {
            let sim = simulator(scenario, gpus, 0x5EED);
            for &t_ms in &times {
                for index in 0..gpus {
                    if let Err(message) = check_invariants(&sim, index, t_ms) {
                        panic!("{message}");
                    }
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn invariants_hold_for_any_seed_and_time(
        scenario in 0..ScenarioKind::ALL.len(),
        gpus in prop::sample::select(GPU_COUNTS.to_vec()),
        seed in any::<u64>(),
        t_ms in 0..=45 * MINUTE_MS,
    ) {
        let sim = simulator(ScenarioKind::ALL[scenario], gpus, seed);
        for index in 0..gpus {
            prop_assert_eq!(check_invariants(&sim, index, t_ms), Ok(()));
        }
    }
}

#[test]
fn same_spec_gives_identical_readings_in_any_call_order() {
    let times: Vec<u64> = (0..=45 * MINUTE_MS).step_by(61_003).collect();
    for &scenario in ScenarioKind::ALL {
        let forward = simulator(scenario, 3, 11);
        let backward = simulator(scenario, 3, 11);
        let mut seen = Vec::new();
        for &t_ms in &times {
            for index in 0..3 {
                seen.push((forward.fast_at(index, at(t_ms)), forward.slow_at(index, at(t_ms))));
            }
        }
        // The second simulator answers the same questions backwards, slow
        // tier first, with unrelated calls in between.
        let mut replayed = Vec::new();
        for &t_ms in times.iter().rev() {
            for index in (0..3).rev() {
                let slow = backward.slow_at(index, at(t_ms));
                let _ = backward.fast_at((index + 1) % 3, at(t_ms / 2));
                replayed.push((backward.fast_at(index, at(t_ms)), slow));
            }
        }
        replayed.reverse();
        assert_eq!(seen, replayed, "{scenario}");
        assert_eq!(forward.devices(), backward.devices());
    }
}

#[test]
fn a_different_seed_gives_different_noise_and_identities() {
    for &scenario in ScenarioKind::ALL {
        let one = simulator(scenario, 2, 1);
        let two = simulator(scenario, 2, 2);
        let differs = (0..40u64).any(|step| {
            let t_ms = step * 1_250;
            one.fast_at(0, at(t_ms)) != two.fast_at(0, at(t_ms))
                || one.slow_at(0, at(t_ms)) != two.slow_at(0, at(t_ms))
        });
        assert!(differs, "{scenario}");
        assert_ne!(one.devices().unwrap()[0].uuid, two.devices().unwrap()[0].uuid);
    }
}

#[test]
fn allocator_counters_never_decrease_for_a_process() {
    for &scenario in ScenarioKind::ALL {
        for seed in [0, 77] {
            let sim = simulator(scenario, 3, seed);
            let mut last: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
            for t_ms in (0..=45 * MINUTE_MS).step_by(1_000) {
                for index in 0..3 {
                    let Ok(slow) = sim.slow_at(index, at(t_ms)) else { continue };
                    for process in slow.processes.unwrap() {
                        let Some(stats) = process.allocator else { continue };
                        let now = (stats.alloc_retries, stats.ooms);
                        if let Some(before) = last.insert((index, process.pid), now) {
                            assert!(
                                now.0 >= before.0 && now.1 >= before.1,
                                "{scenario} gpu {index} pid {} at {t_ms}: {before:?} -> {now:?}",
                                process.pid
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn an_index_beyond_the_devices_is_unknown() {
    for &scenario in ScenarioKind::ALL {
        let sim = simulator(scenario, 3, 0);
        for index in [3, 8, u32::MAX] {
            // Long after the device-lost onset too: unknown wins over lost.
            for t_ms in [0, 30 * MINUTE_MS] {
                assert_eq!(sim.fast_at(index, at(t_ms)), Err(SourceError::UnknownDevice { index }));
                assert_eq!(sim.slow_at(index, at(t_ms)), Err(SourceError::UnknownDevice { index }));
            }
        }
        assert_eq!(sim.read_fast(3), Err(SourceError::UnknownDevice { index: 3 }));
    }
}

#[test]
fn spec_validation_accepts_one_to_eight_gpus_and_names_the_bad_value() {
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    let spec = |gpus| SimulatorSpec { scenario: ScenarioKind::Idle, gpus, seed: 0 };
    for gpus in [0, 9, u32::MAX] {
        let error = Simulator::new(spec(gpus), clock.clone()).unwrap_err();
        assert_eq!(error, SimulatorError::InvalidGpuCount { gpus });
        assert!(error.to_string().contains(&gpus.to_string()), "{error}");
        assert!(Simulator::with_origin(spec(gpus), clock.clone(), GOLDEN_ORIGIN).is_err());
    }
    for gpus in 1..=MAX_GPUS {
        assert_eq!(
            Simulator::new(spec(gpus), clock.clone()).unwrap().devices().unwrap().len() as u32,
            gpus
        );
    }
}

#[test]
fn device_source_face_reads_at_the_clock_time() {
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    let spec = SimulatorSpec { scenario: ScenarioKind::MultiTenant, gpus: 8, seed: 4 };
    let sim = Simulator::new(spec, clock.clone()).unwrap();
    assert_eq!(sim.name(), "simulator");
    assert!(sim.origin() >= GOLDEN_ORIGIN && sim.origin() <= clock.now());
    let devices = sim.devices().unwrap();
    assert!(devices.iter().all(|d| d.name == "NVIDIA A100-SXM4-40GB"));
    assert!(devices.iter().enumerate().all(|(i, d)| d.index as usize == i));
    let mut uuids: Vec<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
    uuids.sort_unstable();
    uuids.dedup();
    assert_eq!(uuids.len(), 8);
    let fast = sim.read_fast(0).unwrap();
    assert!(fast.at >= sim.origin() && fast.at <= clock.now());
    let slow = sim.read_slow(7, 64).unwrap();
    assert!(slow.processes.unwrap().len() >= 3);
}

#[test]
fn each_scenario_plays_on_its_documented_model() {
    let expected = [
        (ScenarioKind::SteadyInference, "NVIDIA H200", 150_754_820_096),
        (ScenarioKind::MultiTenant, "NVIDIA A100-SXM4-40GB", 42_949_672_960),
        (ScenarioKind::Leak, "NVIDIA H100 80GB HBM3", 85_520_809_984),
    ];
    for (scenario, name, total) in expected {
        let sim = simulator(scenario, 1, 0);
        assert_eq!(sim.devices().unwrap()[0].name, name);
        assert_eq!(sim.fast_at(0, at(0)).unwrap().memory.unwrap().total_bytes, total);
    }
}

#[test]
fn times_before_the_origin_read_as_the_origin() {
    let sim = simulator(ScenarioKind::Leak, 1, 0);
    let early = GOLDEN_ORIGIN.saturating_sub(Duration::from_secs(3_600));
    let reading = sim.fast_at(0, early).unwrap();
    assert_eq!(reading.at, early);
    assert_eq!(reading.memory, sim.fast_at(0, GOLDEN_ORIGIN).unwrap().memory);
    assert_eq!(GOLDEN_ORIGIN.to_rfc3339(), "2026-01-01T00:00:00.000Z");
}
