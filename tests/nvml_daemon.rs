//! The daemon's own upkeep on the real NVML code path, against the fake
//! driver library: sample timings in microsecond buckets, start-up memory
//! handed back while sampling goes on, and systemd's watchdog starved by a
//! hung driver call.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_types)]

#[path = "support/fake_driver.rs"]
mod fake_driver;
mod support;

use std::time::Duration;

use serde_json::json;

use fake_driver::{FakeDriver, GIB, GPU0, device};
use support::{eventually, get, sample};

/// What a sample costs is readable in /metrics: the call's wall time and
/// the sampler thread's CPU time (one sample in 16), both in buckets from
/// 1 µs, since a fast sample on NVML costs a few microseconds.
#[test]
fn sample_timings_have_microsecond_buckets_and_a_cpu_clock_figure() {
    let scenario = json!({ "devices": [ device(GPU0, 4 * GIB, json!({})) ] });
    let driver = FakeDriver::new(&scenario, false);
    let (mut daemon, addr) = driver.start(&[]);
    let cpu_count = r#"vramd_sample_cpu_seconds_count{tier="fast"}"#;
    eventually(Duration::from_secs(30), "CPU times of fast samples", || {
        sample(&get(addr, "/metrics").text(), cpu_count).is_some_and(|count| count >= 3.0)
    });
    let text = get(addr, "/metrics").text();
    for family in ["vramd_sample_duration_seconds", "vramd_sample_cpu_seconds"] {
        for tier in ["fast", "slow"] {
            let lowest = format!("{family}_bucket{{tier=\"{tier}\",le=\"0.000001\"}}");
            assert!(sample(&text, &lowest).is_some(), "{lowest} in:\n{text}");
        }
    }
    let calls = sample(&text, r#"vramd_sample_duration_seconds_count{tier="fast"}"#).unwrap();
    let measured = sample(&text, cpu_count).unwrap();
    // Scraped a moment apart: a few samples may land between the two.
    assert!(measured <= (calls + 16.0) / 16.0 + 1.0, "{measured} of {calls}");
    let cpu = sample(&text, r#"vramd_sample_cpu_seconds_sum{tier="fast"}"#).unwrap();
    assert!(cpu > 0.0, "a sample costs some CPU: {cpu}");
    assert!(daemon.exited().is_none());
}

/// Issue 15: once start-up is over (10 s) the daemon hands back its freed
/// start-up heap and unmaps its start-up code; the code it still runs is
/// mapped again on use, so sampling, readiness and the API go on.
#[test]
fn sampling_and_serving_go_on_after_start_up_memory_is_released() {
    let scenario = json!({ "devices": [ device(GPU0, 4 * GIB, json!({})) ] });
    let driver = FakeDriver::new(&scenario, false);
    let (mut daemon, addr) = driver.start(&[("VRAMD_LOG__LEVEL", "info,vramd::app=debug")]);
    eventually(Duration::from_secs(30), "start-up memory released", || {
        daemon.log().iter().any(|line| line["message"] == "start-up code unmapped")
    });
    let released = daemon
        .log()
        .iter()
        .find(|line| line["message"] == "start-up code unmapped")
        .and_then(|line| line["bytes"].as_u64());
    assert!(released.is_some_and(|bytes| bytes > 0), "{}", daemon.stderr());
    let fast = r#"vramd_sample_duration_seconds_count{tier="fast"}"#;
    let before = sample(&get(addr, "/metrics").text(), fast).unwrap();
    eventually(Duration::from_secs(10), "fast samples after the release", || {
        sample(&get(addr, "/metrics").text(), fast).is_some_and(|count| count > before)
    });
    assert_eq!(get(addr, "/readyz").status, 200);
    assert_eq!(get(addr, "/api/v1/devices").status, 200);
    assert!(daemon.exited().is_none(), "the daemon keeps running");
    assert!(!daemon.stderr().contains("panicked"), "{}", daemon.stderr());
}

#[test]
fn a_driver_call_that_hangs_starves_systemds_watchdog() {
    let scenario = json!({
        "devices": [device(GPU0, 4 * GIB, json!({
            "faults": { "sleep_ms": { "nvmlDeviceGetMemoryInfo_v2": 60_000 } },
        }))],
    });
    let driver = FakeDriver::new(&scenario, false);
    let mut socket = support::systemd::NotifySocket::new();
    let env = [
        ("NOTIFY_SOCKET", socket.path()),
        ("WATCHDOG_USEC", "200000"),
        ("VRAMD_SAMPLER__CALL_TIMEOUT", "300ms"),
    ];
    let (daemon, addr) = driver.start_listening(&env);
    let behind = "STATUS=not ready: the sampler has fallen behind on 1 device tier";
    assert!(
        socket.wait_for(support::WAIT, |seen| support::systemd::count(seen, behind) > 0),
        "no STATUS line saying the sampler fell behind: {:?}",
        socket.received
    );
    // Ten watchdog periods: a daemon feeding it regardless would have sent
    // about twenty pings by now.
    socket.collect_for(Duration::from_secs(2));
    let since_behind: Vec<&String> =
        socket.received.iter().skip_while(|m| !m.lines().any(|l| l == behind)).collect();
    assert!(
        since_behind.iter().all(|m| !m.contains("WATCHDOG=1") && !m.contains("STATUS=sampling")),
        "the watchdog was fed while the sampler was stuck: {:?}",
        socket.received
    );
    assert_eq!(get(addr, "/readyz").status, 503, "the same truth as /readyz");
    drop(daemon);
}
