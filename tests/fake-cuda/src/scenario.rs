//! The scenario file: what the fake driver reports and which faults it
//! injects, in two stages: [`RawScenario`] as written (serde, unknown keys
//! are errors, every field optional) and [`Scenario`], validated, with the
//! defaults filled in. The format is documented in this crate's README.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::codes::{CUresult, SUCCESS};
use crate::symbols::HANGABLE;

/// The environment variable that names the scenario file (read by `cuInit`).
pub const SCENARIO_ENV: &str = "FAKE_CUDA_SCENARIO";

const DEFAULT_DRIVER_VERSION: i32 = 12040;
const DEFAULT_NAME: &str = "NVIDIA H100 80GB HBM3";
const DEFAULT_TOTAL_BYTES: u64 = 80 << 30;
const DEFAULT_CONTEXT_BYTES: u64 = 512 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    driver_version: Option<i32>,
    init_error: Option<CUresult>,
    #[serde(default)]
    devices: Vec<RawDevice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDevice {
    uuid: Option<String>,
    name: Option<String>,
    total_bytes: Option<u64>,
    free_bytes: Option<u64>,
    context_bytes: Option<u64>,
    max_alloc_bytes: Option<u64>,
    alloc_error: Option<CUresult>,
    context_error: Option<CUresult>,
    alloc_delay_us: Option<u64>,
    hang: Option<String>,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// `cuDriverGetVersion`'s answer (default 12040).
    pub driver_version: i32,
    /// `cuInit` returns this instead of initialising.
    pub init_error: Option<CUresult>,
    /// Device ordinal = position.
    pub devices: Vec<DeviceSpec>,
}

/// One device, validated, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub uuid: [u8; 16],
    pub name: String,
    pub total_bytes: u64,
    /// Free memory before any context or allocation.
    pub free_bytes: u64,
    /// What each live context takes from free memory.
    pub context_bytes: u64,
    /// Larger allocations fail with OUT_OF_MEMORY even if free allows.
    pub max_alloc_bytes: Option<u64>,
    pub alloc_error: Option<CUresult>,
    pub context_error: Option<CUresult>,
    pub alloc_delay: Duration,
    /// The function (one of [`HANGABLE`]) that never returns on this device.
    pub hang: Option<&'static str>,
}

impl Scenario {
    /// Parses and validates a scenario file's text.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let raw: RawScenario = serde_json::from_str(text).map_err(|e| e.to_string())?;
        raw.validate()
    }

    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("invalid scenario {}: {e}", path.display()))
    }

    /// The scenario named by `FAKE_CUDA_SCENARIO`.
    pub fn load_configured() -> Result<Scenario, String> {
        let path = std::env::var_os(SCENARIO_ENV)
            .map(PathBuf::from)
            .ok_or_else(|| format!("{SCENARIO_ENV} is not set"))?;
        Self::load(&path)
    }

    /// Whether any device hangs in `function`.
    pub fn hangs_in(&self, function: &str) -> bool {
        self.devices.iter().any(|device| device.hang == Some(function))
    }
}

impl RawScenario {
    fn validate(self) -> Result<Scenario, String> {
        let init_error = error_code(self.init_error, "init_error")?;
        let devices = self
            .devices
            .into_iter()
            .enumerate()
            .map(|(index, device)| {
                device.validate(index).map_err(|e| format!("devices[{index}].{e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Scenario {
            driver_version: self.driver_version.unwrap_or(DEFAULT_DRIVER_VERSION),
            init_error,
            devices,
        })
    }
}

impl RawDevice {
    fn validate(self, index: usize) -> Result<DeviceSpec, String> {
        let uuid = match &self.uuid {
            Some(text) => parse_uuid(text).ok_or_else(|| {
                format!("uuid: {text:?} is not GPU-/MIG- and 8-4-4-4-12 hex digits")
            })?,
            None => default_uuid(index),
        };
        let total_bytes = self.total_bytes.unwrap_or(DEFAULT_TOTAL_BYTES);
        let free_bytes = self.free_bytes.unwrap_or(total_bytes);
        if free_bytes > total_bytes {
            return Err(format!("free_bytes: {free_bytes} exceeds total_bytes {total_bytes}"));
        }
        let hang = match self.hang {
            None => None,
            Some(name) => Some(
                HANGABLE
                    .iter()
                    .copied()
                    .find(|known| *known == name)
                    .ok_or_else(|| format!("hang: {name:?} is not one of {HANGABLE:?}"))?,
            ),
        };
        Ok(DeviceSpec {
            uuid,
            name: self.name.unwrap_or_else(|| DEFAULT_NAME.to_owned()),
            total_bytes,
            free_bytes,
            context_bytes: self.context_bytes.unwrap_or(DEFAULT_CONTEXT_BYTES),
            max_alloc_bytes: self.max_alloc_bytes,
            alloc_error: error_code(self.alloc_error, "alloc_error")?,
            context_error: error_code(self.context_error, "context_error")?,
            alloc_delay: Duration::from_micros(self.alloc_delay_us.unwrap_or(0)),
            hang,
        })
    }
}

/// An injected error must be an error: 0 (`CUDA_SUCCESS`) is refused, so
/// that "no error" is always spelled `null`.
fn error_code(code: Option<CUresult>, field: &str) -> Result<Option<CUresult>, String> {
    match code {
        Some(SUCCESS) => Err(format!("{field}: 0 is CUDA_SUCCESS; leave it out or use null")),
        other => Ok(other),
    }
}

/// `GPU-00000000-0000-0000-0000-<index as 12 hex digits>`.
fn default_uuid(index: usize) -> [u8; 16] {
    let mut uuid = [0u8; 16];
    uuid[8..].copy_from_slice(&(index as u64).to_be_bytes());
    uuid
}

/// `GPU-`/`MIG-` + 8-4-4-4-12 hex digits. Deliberately not `cuda-driver`'s
/// parser: the fake must not share code with what it tests.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let rest = text.strip_prefix("GPU-").or_else(|| text.strip_prefix("MIG-"))?;
    let lengths: Vec<usize> = rest.split('-').map(str::len).collect();
    if lengths != [8, 4, 4, 4, 12] {
        return None;
    }
    let digits: Vec<u8> = rest.bytes().filter(|b| *b != b'-').collect();
    let mut uuid = [0u8; 16];
    for (byte, pair) in uuid.iter_mut().zip(digits.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        if !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_an_empty_device() {
        let scenario = Scenario::parse(r#"{"devices": [{}, {}]}"#).unwrap();
        assert_eq!(scenario.driver_version, 12040);
        assert_eq!(scenario.init_error, None);
        let second = &scenario.devices[1];
        assert_eq!(second.uuid, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(second.name, "NVIDIA H100 80GB HBM3");
        assert_eq!((second.total_bytes, second.free_bytes), (80 << 30, 80 << 30));
        assert_eq!(second.context_bytes, 512 << 20);
        assert_eq!((second.max_alloc_bytes, second.alloc_error, second.hang), (None, None, None));
        assert_eq!(Scenario::parse("{}").unwrap().devices, []);
    }

    #[test]
    fn uuids_parse_in_either_case() {
        let text = r#"{"devices": [{"uuid": "MIG-01234567-89AB-cdef-0123-456789abcdef"}]}"#;
        let uuid = Scenario::parse(text).unwrap().devices[0].uuid;
        assert_eq!(uuid[..4], [0x01, 0x23, 0x45, 0x67]);
        assert_eq!(uuid[15], 0xef);
    }

    #[test]
    fn bad_scenarios_are_rejected_with_the_field() {
        for (text, expected) in [
            (r#"{"devices": [{"hang": "cuDeviceGetName"}]}"#, "devices[0].hang"),
            (r#"{"devices": [{"uuid": "GPU-1234"}]}"#, "devices[0].uuid"),
            (r#"{"devices": [{"uuid": "GPU-0123456+-89ab-cdef-0123-456789abcdef"}]}"#, "uuid"),
            (r#"{"devices": [{"total_bytes": 1, "free_bytes": 2}]}"#, "free_bytes"),
            (r#"{"devices": [{}, {"alloc_error": 0}]}"#, "devices[1].alloc_error"),
            (r#"{"init_error": 0}"#, "init_error"),
            (r#"{"devices": [{"free": 1}]}"#, "unknown field `free`"),
            (r#"{"driver": 1}"#, "unknown field `driver`"),
            (r#"{"devices": [{"total_bytes": -1}]}"#, "invalid value"),
        ] {
            let error = Scenario::parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn the_readme_example_is_a_valid_scenario() {
        let readme = include_str!("../README.md");
        let start = readme.find("```json\n").expect("json block") + "```json\n".len();
        let end = start + readme[start..].find("```").expect("end of block");
        let scenario = Scenario::parse(&readme[start..end]).unwrap();
        assert_eq!(scenario.devices.len(), 2);
        assert_eq!(scenario.devices[0].free_bytes, 80_000_000_000);
    }
}
