//! Xid events through nvml-wrapper's EventSet.

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, one_device};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use serde_json::json;

#[test]
fn xid_event_is_delivered_when_due_and_only_once() {
    let events = json!([{ "after_ms": 1000, "xid": 79 }, { "after_ms": 0, "xid": 48 }]);
    let fixture = Fixture::new(one_device(json!({ "xid_events": events })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    assert!(device.supported_event_types().unwrap().contains(EventTypes::CRITICAL_XID_ERROR));
    let set = nvml.create_event_set().unwrap();
    let set = device.register_events(EventTypes::CRITICAL_XID_ERROR, set).unwrap();

    let first = set.wait(1000).unwrap();
    assert_eq!(first.event_data, Some(XidError::Value(48)));
    assert_eq!(first.device.uuid().unwrap(), device.uuid().unwrap());
    assert!(first.event_type.contains(EventTypes::CRITICAL_XID_ERROR));

    // The 79 is not due for ~1 s: a short wait times out.
    let start = Instant::now();
    assert!(matches!(set.wait(20), Err(NvmlError::Timeout)));
    assert!(start.elapsed() >= Duration::from_millis(20));

    let second = set.wait(5000).unwrap();
    assert_eq!(second.event_data, Some(XidError::Value(79)));
    assert!(matches!(set.wait(50), Err(NvmlError::Timeout)));
}

#[test]
fn events_need_registration_and_supported_types() {
    let events = json!([{ "after_ms": 0, "xid": 13 }]);
    let fixture = Fixture::new(one_device(json!({
        "xid_events": events, "supported_event_types": 8
    })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let set = nvml.create_event_set().unwrap();
    // Registered for clock changes only: the Xid is not delivered.
    let unsupported = device.register_events(EventTypes::CLOCK_CHANGE, set);
    assert!(matches!(unsupported.map(|_| ()).map_err(|e| e.error), Err(NvmlError::NotSupported)));
    let set = nvml.create_event_set().unwrap();
    assert!(matches!(set.wait(10), Err(NvmlError::Timeout)));
    let set = device.register_events(EventTypes::CRITICAL_XID_ERROR, set).unwrap();
    assert_eq!(set.wait(100).unwrap().event_data, Some(XidError::Value(13)));
    set.release_events().unwrap();
}
