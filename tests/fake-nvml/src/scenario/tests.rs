//! Unit tests of scenario parsing and validation.

use super::*;

#[test]
fn bus_ids_parse_in_both_widths() {
    assert_eq!(parse_bus_id("00000000:17:00.0"), Some((0, 0x17, 0)));
    assert_eq!(parse_bus_id("0001:AB:1F.0"), Some((1, 0xAB, 0x1F)));
    assert_eq!(parse_bus_id("17:00.0"), None);
    assert_eq!(parse_bus_id("0000:zz:00.0"), None);
}

#[test]
fn error_codes_parse_by_c_name_only() {
    let parsed: ErrorCode = serde_json::from_str("\"NVML_ERROR_GPU_IS_LOST\"").unwrap();
    assert_eq!(parsed.0, crate::codes::GPU_IS_LOST);
    assert!(serde_json::from_str::<ErrorCode>("\"GPU_IS_LOST\"").is_err());
}

#[test]
fn defaults_fill_a_bare_device() {
    let scenario = Scenario::parse(r#"{"devices": [{}, {}]}"#).unwrap();
    assert_eq!(scenario.devices[1].uuid(1), "GPU-00000000-0000-0000-0000-000000000001");
    assert_eq!(scenario.devices[1].pci_bus_id(1), "00000000:18:00.0");
    assert!(scenario.devices[0].memory.is_none());
}

#[test]
fn bad_scenarios_are_rejected_with_the_key() {
    let typo =
        r#"{"devices": [{"faults": {"fail": {"nvmlDeviceGetPower": "NVML_ERROR_UNKNOWN"}}}]}"#;
    assert!(Scenario::parse(typo).unwrap_err().contains("nvmlDeviceGetPower"));
    let reserved = r#"{"devices": [{"memory": {"total_bytes": 1, "reserved_bytes": 2}}]}"#;
    assert!(Scenario::parse(reserved).is_err());
    let lost = r#"{"system_faults": {"gpu_lost_after_calls": 1}}"#;
    assert!(Scenario::parse(lost).is_err());
}

#[test]
fn the_readme_example_is_a_valid_scenario() {
    let readme = include_str!("../../README.md");
    let start = readme.find("```json\n").expect("json block") + "```json\n".len();
    let end = start + readme[start..].find("```").expect("end of block");
    let scenario = Scenario::parse(&readme[start..end]).unwrap();
    assert_eq!(scenario.devices.len(), 1);
    assert_eq!(scenario.devices[0].mig.as_ref().unwrap().devices.len(), 1);
}
