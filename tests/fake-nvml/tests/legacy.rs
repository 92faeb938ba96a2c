//! The `legacy-driver` build: an older driver without the newer symbols.

// Test helpers below unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, one_device};
use nvidia_ml_fake::{harness, symbols};
use nvml_wrapper::error::NvmlError;
use serde_json::json;

#[test]
fn legacy_build_lacks_newer_symbols_but_still_shuts_down() {
    let fixture = Fixture::with(true, one_device(json!({ "temperature_c": 40 })));
    let nvml = fixture.init();
    assert!(nvml.lib().nvmlShutdown.is_ok());
    assert!(nvml.lib().nvmlDeviceGetMemoryInfo_v2.is_err());
    assert!(nvml.lib().nvmlDeviceGetMemoryInfo.is_ok());
    let device = nvml.device_by_index(0).unwrap();
    assert!(matches!(device.memory_info(), Err(NvmlError::FailedToLoadSymbol(_))));
    assert!(matches!(device.running_compute_processes(), Err(NvmlError::FailedToLoadSymbol(_))));
    assert!(
        device.temperature(nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu).is_ok()
    );
    nvml.shutdown().unwrap();
}

fn exported(legacy: bool) -> Vec<&'static str> {
    let built = harness::build_fake_library(legacy).unwrap();
    // SAFETY: loading the fake library runs no initialisers.
    let lib = unsafe { libloading::Library::new(&built) }.unwrap();
    let present = |name: &str| {
        let symbol = format!("{name}\0");
        // SAFETY: only checks presence; the symbol is never called.
        unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_ok()
    };
    symbols::ALL.iter().copied().filter(|name| present(name)).collect()
}

#[test]
fn every_listed_symbol_is_exported_and_legacy_exports_fewer() {
    let full = exported(false);
    assert_eq!(full, symbols::ALL);
    let legacy = exported(true);
    let mut missing: Vec<_> =
        symbols::ALL.iter().filter(|n| !legacy.contains(n)).copied().collect();
    let mut newer = symbols::NEWER.to_vec();
    missing.sort_unstable();
    newer.sort_unstable();
    assert_eq!(missing, newer);
}
