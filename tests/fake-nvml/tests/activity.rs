//! Activity calls: energy, performance state, encoder/decoder, and the
//! per-process utilization samples' last-seen-timestamp protocol.

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, GIB, one_device};
use nvml_wrapper::enum_wrappers::device::PerformanceState;
use nvml_wrapper::error::NvmlError;
use serde_json::json;

#[test]
fn device_activity_values_are_reported_or_not_supported() {
    let fixture = Fixture::new(one_device(json!({
        "energy_mj": 1_000,
        "power_usage_mw": 300_000,
        "performance_state": 2,
        "encoder_utilization": 12,
        "decoder_utilization": 34,
    })));
    let nvml = fixture.init();
    let gpu = nvml.device_by_index(0).unwrap();
    let first = gpu.total_energy_consumption().unwrap();
    assert!(first >= 1_000);
    assert_eq!(gpu.performance_state().unwrap(), PerformanceState::Two);
    assert_eq!(gpu.encoder_utilization().unwrap().utilization, 12);
    assert_eq!(gpu.decoder_utilization().unwrap().utilization, 34);
    // The counter grows with the power draw and never goes back.
    let started = Instant::now();
    while gpu.total_energy_consumption().unwrap() == first {
        assert!(started.elapsed() < Duration::from_secs(5), "the energy counter never moved");
        std::thread::yield_now();
    }

    let bare = Fixture::new(one_device(json!({})));
    let nvml = bare.init();
    let gpu = nvml.device_by_index(0).unwrap();
    assert!(matches!(gpu.total_energy_consumption(), Err(NvmlError::NotSupported)));
    assert!(matches!(gpu.performance_state(), Err(NvmlError::NotSupported)));
    assert!(matches!(gpu.encoder_utilization(), Err(NvmlError::NotSupported)));
}

#[test]
fn process_utilization_returns_only_samples_newer_than_last_seen() {
    let fixture = Fixture::new(one_device(json!({
        "processes": { "compute": [
            { "pid": 10, "used_bytes": GIB, "utilization": { "sm": 70, "memory": 20 } },
            { "pid": 11, "used_bytes": GIB },
        ] }
    })));
    let nvml = fixture.init();
    let gpu = nvml.device_by_index(0).unwrap();
    let samples = gpu.process_utilization_stats(None).unwrap();
    assert_eq!(samples.len(), 1, "only busy processes have samples: {samples:?}");
    assert_eq!((samples[0].pid, samples[0].sm_util, samples[0].mem_util), (10, 70, 20));
    let seen = samples[0].timestamp;
    // Nothing newer yet, as the driver answers: NOT_FOUND.
    let started = Instant::now();
    let newer = loop {
        match gpu.process_utilization_stats(seen) {
            Err(NvmlError::NotFound) => {
                assert!(started.elapsed() < Duration::from_secs(5), "no new sample period");
                std::thread::yield_now();
            }
            other => break other.unwrap(),
        }
    };
    assert!(newer[0].timestamp > seen);
}
