//! Shared fixture: a private copy of the fake library with its own scenario,
//! loaded through the real `nvml-wrapper`.

#![allow(dead_code)]
// Test helpers: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use nvidia_ml_fake::harness;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use serde_json::Value;
use tempfile::TempDir;

pub struct Fixture {
    pub dir: TempDir,
    pub lib: PathBuf,
    pub scenario: PathBuf,
}

impl Fixture {
    /// A fresh copy of the (normal or legacy) library pointed at `scenario`.
    pub fn with(legacy: bool, scenario: Value) -> Self {
        let built = harness::build_fake_library(legacy).expect("build fake-nvml");
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = harness::install_as_libnvidia(dir.path(), &built);
        let scenario = harness::write_scenario(dir.path(), &scenario);
        harness::set_scenario_path(&lib, &scenario).expect("set scenario path");
        Self { dir, lib, scenario }
    }

    pub fn new(scenario: Value) -> Self {
        Self::with(false, scenario)
    }

    pub fn try_init(&self) -> Result<Nvml, NvmlError> {
        Nvml::builder().lib_path(self.lib.as_os_str()).init()
    }

    pub fn init(&self) -> Nvml {
        self.try_init().expect("nvmlInit")
    }
}

pub const GIB: u64 = 1 << 30;

/// One plain H100-like device with the given extra fields.
pub fn one_device(extra: Value) -> Value {
    let mut device = serde_json::json!({
        "uuid": "GPU-11111111-2222-3333-4444-555555555555",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:17:00.0",
        "memory": { "total_bytes": 80 * GIB, "reserved_bytes": GIB, "used_bytes": 10 * GIB },
        "utilization": { "gpu": 35, "memory": 20 }
    });
    if let (Some(base), Value::Object(extra)) = (device.as_object_mut(), extra) {
        base.extend(extra);
    }
    serde_json::json!({ "driver_version": "570.133.20", "devices": [device] })
}
