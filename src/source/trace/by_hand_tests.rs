//! Tests of the hand reader of reading lines: it gives exactly the serde
//! path's record for every line it takes, and leaves every other line (and
//! so every message) to that path.

use std::time::Duration;

use super::by_hand::parse_reading_line;
use super::line::{parse_line, parse_record};
use crate::clock::ScaledClock;
use crate::model::ScenarioKind;
use crate::play::{Schedule, record_simulator};
use crate::source::simulator::{GOLDEN_ORIGIN, Simulator, SimulatorSpec};

/// The hand reader's record for `line`, after checking it is serde's.
fn by_hand(line: &str) -> Option<super::TraceRecord> {
    let record = parse_reading_line(line.as_bytes())?;
    assert_eq!(Ok(&record), parse_record(line).as_ref(), "{line}");
    Some(record)
}

#[test]
fn every_simulated_reading_line_is_read_by_hand_into_the_serde_record() {
    let dir = tempfile::tempdir().unwrap();
    for (seed, &scenario) in ScenarioKind::ALL.iter().enumerate() {
        let path = dir.path().join(format!("{}.ndjson", scenario.name()));
        let spec = SimulatorSpec { scenario, gpus: 2, seed: seed as u64 + 1 };
        let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
        let simulator = Simulator::with_origin(spec, clock, GOLDEN_ORIGIN).unwrap();
        let schedule = Schedule {
            from: GOLDEN_ORIGIN,
            duration: Duration::from_secs(120),
            fast: Duration::from_millis(250),
            slow: Duration::from_secs(1),
        };
        record_simulator(simulator, schedule, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().skip(1) {
            let reading =
                line.starts_with(r#"{"record":"fast""#) || line.starts_with(r#"{"record":"slow""#);
            assert_eq!(by_hand(line).is_some(), reading, "{scenario:?}: {line}");
        }
    }
}

const SLOW: &str = r#"{"record":"slow","device":3,"at":1767225600000,"processes":[{"pid":7,"name":"pt_main_thread","used_bytes":600,"allocator":{"allocated_bytes":100,"reserved_bytes":500,"active_bytes":120,"inactive_split_bytes":40,"alloc_retries":2,"ooms":1,"interval":{"allocated_min_bytes":90,"allocated_max_bytes":110,"reserved_min_bytes":500,"reserved_max_bytes":500}},"details":{"namespace_pid":1,"sm_utilization_percent":92,"memory_utilization_percent":55,"pool_limit_bytes":4096}},{"pid":8}],"temperature_celsius":65.7547700063477,"power_usage_watts":5.78e2,"power_limit_watts":700,"details":{"sm_clock_mhz":1980,"memory_clock_mhz":2619,"throttle_reasons":4,"persistence_mode":true,"mig_enabled":false,"pcie_tx_bytes_per_second":1,"pcie_rx_bytes_per_second":2,"energy_millijoules":3600000000,"performance_state":15,"encoder_utilization_percent":0,"decoder_utilization_percent":100,"last_xid_unix_ms":5,"kubelet_allocatable":true},"processes_left_out":4}"#;
const FAST: &str = r#"{"record":"fast","device":0,"at":0,"memory":{"total_bytes":100,"reserved_bytes":5,"used_bytes":60,"free_bytes":35},"gpu_utilization":1.0,"memory_bandwidth_utilization":0}"#;

#[test]
fn every_field_the_hand_reader_knows_comes_out_as_serde_reads_it() {
    assert!(by_hand(SLOW).is_some());
    assert!(by_hand(FAST).is_some());
    assert!(
        by_hand(r#"{"record":"slow","device":0,"at":1,"processes":[],"details":{}}"#).is_some()
    );
    assert!(by_hand(r#"{"record":"fast","device":4294967295,"at":253402300799999}"#).is_some());
}

#[test]
fn lines_off_the_recorders_layout_or_refused_are_left_to_serde_with_its_message() {
    let edits = [
        // Refused by serde: its message must be the one reported.
        ("\"at\":1767225600000", "\"at\":01767225600000"),
        ("\"at\":1767225600000", "\"at\":253402300800000"),
        ("\"sm_utilization_percent\":92", "\"sm_utilization_percent\":101"),
        ("\"performance_state\":15", "\"performance_state\":16"),
        ("\"temperature_celsius\":65.7547700063477", "\"temperature_celsius\":1e400"),
        ("\"temperature_celsius\":65.7547700063477", "\"temperature_celsius\":65."),
        ("\"pid\":7", "\"pid\":4294967296"),
        ("\"pid\":7", "\"pid\":7,\"pid\":7"),
        ("\"ooms\":1", "\"ooms\":1.0"),
        ("\"ooms\":1,", ""),
        ("\"name\":\"pt_main_thread\"", "\"name\":\"pt\u{1}\""),
        ("\"processes_left_out\":4", "\"processes_left_out\":4,\"extra\":1"),
        ("\"processes\":[", "\"processes\":null,\"x\":["),
        ("\"device\":3", "\"device\":03"),
        ("\"device\":3", "\"device\":4294967296"),
        // Accepted by serde, read by it rather than by hand.
        ("\"name\":\"pt_main_thread\"", "\"name\":\"pt\\u0041\""),
        ("\"name\":\"pt_main_thread\"", "\"name\":\"pt\u{e9}\u{1F600}\""),
        ("\"temperature_celsius\":65.7547700063477", "\"temperature_celsius\":-5.5"),
        ("\"temperature_celsius\":65.7547700063477", "\"temperature_celsius\": 65.7547700063477"),
        ("\"sm_clock_mhz\":1980", "\"bar1\":{\"total_bytes\":2,\"used_bytes\":1,\"free_bytes\":1}"),
        ("\"processes_left_out\":4", "\"allocations\":[]"),
        ("\"details\":{\"namespace_pid\":1", "\"details\":{\"kind\":\"compute\""),
    ];
    for (from, to) in edits {
        assert!(SLOW.contains(from), "{from}");
        let line = SLOW.replacen(from, to, 1);
        let hand = parse_reading_line(line.as_bytes());
        // Non-ASCII names are the hand reader's too.
        if to.contains('\u{e9}') {
            assert!(hand.is_some(), "{line}");
        } else {
            assert!(hand.is_none(), "{line}");
        }
        let mut bytes = line.clone().into_bytes();
        assert_eq!(parse_line(&mut bytes), parse_record(&line), "{line}");
    }
    let fast_edits = [
        ("\"gpu_utilization\":1.0", "\"gpu_utilization\":1.5"),
        ("\"gpu_utilization\":1.0", "\"gpu_utilization\":-0.0"),
        ("\"used_bytes\":60", "\"used_bytes\":101"),
        ("\"reserved_bytes\":5", "\"reserved_bytes\":500"),
        ("\"memory_bandwidth_utilization\":0}", "\"memory_bandwidth_utilization\":0} "),
        ("\"memory_bandwidth_utilization\":0}", "\"memory_bandwidth_utilization\":0}\r"),
    ];
    for (from, to) in fast_edits {
        let line = FAST.replacen(from, to, 1);
        assert!(parse_reading_line(line.as_bytes()).is_none(), "{line}");
        let mut bytes = line.clone().into_bytes();
        assert_eq!(parse_line(&mut bytes), parse_record(&line), "{line}");
    }
    let mut bytes = b"{\"record\":\"fast\",\"device\":0,\"at\":1,\"x\":\"\xff\"}".to_vec();
    assert!(parse_reading_line(&bytes).is_none());
    assert_eq!(parse_line(&mut bytes), Err(super::LineError::NotUtf8));
}
