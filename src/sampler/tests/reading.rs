//! What becomes of a reading: the process cap, a source that is down,
//! the speed of replayed time, a lost device.

use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn processes_beyond_the_cap_are_counted_and_the_largest_kept() {
    let mut source = FakeSource::new(1);
    source.processes = 5;
    let harness = start(source, settings());
    settle().await;
    advance(Duration::from_millis(250), 1).await;
    let live = harness.store.devices()[0].live();
    let slow = live.slow.expect("a slow reading");
    let kept: Vec<u32> = slow.processes.iter().flatten().map(|p| p.pid).collect();
    assert_eq!(kept, vec![104, 103], "the two largest users are kept");
    assert_eq!(live.processes_dropped, 3);
    harness.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_source_serves_ready_with_no_devices_then_recovers() {
    let source = FakeSource::new(1);
    source.available.store(false, Ordering::SeqCst);
    let harness = start(source, settings());
    settle().await;
    assert!(harness.store.cycle_completed(), "ready: the daemon can say the source is down");
    assert!(!harness.telemetry.source_up());
    assert!(harness.store.devices().is_empty());
    assert_eq!(harness.telemetry.error_count(ErrorKind::Unavailable), 1);

    harness.source.available.store(true, Ordering::SeqCst);
    advance(Duration::from_secs(1), 1).await;
    assert!(harness.telemetry.source_up());
    assert_eq!(harness.store.devices().len(), 1);
    harness.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn speed_scales_the_real_interval_but_not_the_sample_spacing() {
    let harness = start(FakeSource::new(1), SamplerSettings { speed: 10.0, ..settings() });
    settle().await;
    advance(Duration::from_millis(25), 40).await;
    let samples = harness.store.devices()[0].live().fast_samples;
    assert!(samples >= 40, "at 10x, one real second holds 40 fast samples, got {samples}");
    harness.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_lost_device_is_retried_with_backoff_and_recovers() {
    let source = FakeSource::new(2);
    source.lost.store(true, Ordering::SeqCst);
    let harness = start(source, settings());
    settle().await;
    // 10 s of 4 Hz ticks: without backoff, 41 calls.
    advance(Duration::from_millis(250), 40).await;
    let calls = harness.source.fast_calls[1].load(Ordering::SeqCst);
    assert!((3..=5).contains(&calls), "retries at 0, 1, 3, 7 s; got {calls} calls");
    let devices = harness.store.devices();
    assert!(!devices[1].live().is_up());
    assert_eq!(devices[1].live().fast_failure.map(|f| f.kind), Some(ErrorKind::DeviceLost));
    assert!(devices[0].live().fast_samples >= 40, "the healthy device is unaffected");

    harness.source.lost.store(false, Ordering::SeqCst);
    // The next retry is at most 8 s away.
    advance(Duration::from_millis(250), 36).await;
    assert!(devices[1].live().is_up(), "the device is read again once it answers");
    harness.cancel.cancel();
}

#[test]
fn cap_keeps_unknown_usage_last() {
    let mut reading = SlowReading {
        allocations: None,
        at: Timestamp::from_unix_millis(0),
        processes: Some(vec![
            ProcessInfo {
                pid: 1,
                name: None,
                used_bytes: None,
                allocator: None,
                details: Default::default(),
            },
            ProcessInfo {
                pid: 2,
                name: None,
                used_bytes: Some(5),
                allocator: None,
                details: Default::default(),
            },
            ProcessInfo {
                pid: 3,
                name: None,
                used_bytes: Some(7),
                allocator: None,
                details: Default::default(),
            },
        ]),
        temperature_celsius: None,
        power_usage_watts: None,
        power_limit_watts: None,
        details: Default::default(),
        processes_left_out: 0,
    };
    assert_eq!(reading.cap_processes(2), 1);
    let pids: Vec<u32> = reading.processes.iter().flatten().map(|p| p.pid).collect();
    assert_eq!(pids, vec![3, 2]);
}
