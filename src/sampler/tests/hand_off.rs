//! Hung calls and the hand-off of the other devices, on the fast and the
//! slow shared threads, under paused time and on real threads.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn a_hung_device_does_not_delay_another_and_its_call_is_not_repeated() {
    let harness = start_hung_for_five_seconds(FakeSource::new(2)).await;

    let devices = harness.store.devices();
    assert_eq!(devices.len(), 2);
    let healthy = devices[0].live();
    assert!(healthy.is_up());
    assert!(healthy.fast_samples >= 20, "device 0 sampled {} times", healthy.fast_samples);

    let hung = devices[1].live();
    assert!(!hung.is_up(), "a device whose call hangs has no current values");
    assert_eq!(hung.fast_failure.as_ref().map(|f| f.kind), Some(ErrorKind::StillRunning));
    assert_eq!(
        harness.source.fast_calls[1].load(Ordering::SeqCst),
        1,
        "the stuck call must not be started again while it runs"
    );
    assert!(harness.telemetry.error_count(ErrorKind::Timeout) >= 2, "fast and slow both timed out");
    assert!(harness.telemetry.error_count(ErrorKind::StillRunning) >= 18);
    assert_eq!(harness.telemetry.calls_stuck(), 2);
    assert!(harness.store.cycle_completed());

    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    advance(Duration::from_millis(250), 4).await;
    let recovered = devices[1].live();
    assert!(recovered.is_up(), "the device recovers once its driver answers");
    assert!(recovered.fast_failure.is_none());
    assert_eq!(harness.telemetry.calls_stuck(), 0);

    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn every_device_is_read_by_one_fast_and_one_slow_thread_at_each_tiers_rate() {
    let harness = start(FakeSource::new(3), settings());
    settle().await;
    advance(Duration::from_millis(250), 20).await;
    for device in harness.store.devices() {
        let live = device.live();
        assert!(live.fast_samples >= 20, "{} fast samples in 21 ticks", live.fast_samples);
        assert!(
            (5..=6).contains(&live.slow_samples),
            "{} slow samples in 6 ticks",
            live.slow_samples
        );
    }
    assert_eq!(harness.fleet.threads(Tier::Fast), 1);
    assert_eq!(harness.fleet.threads(Tier::Slow), 1, "three slow tiers, one thread");
    harness.stop().await;
    assert_eq!(harness.fleet.threads(Tier::Slow), 0);
}

#[tokio::test(start_paused = true)]
async fn a_hang_ahead_of_others_on_a_shared_thread_hands_them_off_within_an_interval() {
    // Device 0 is sampled first on the shared fast thread and on the
    // shared slow thread: its hang would hold up devices 1 and 2 on both
    // if they were not moved to fresh threads.
    let mut source = FakeSource::new(3);
    source.hung_index = 0;
    // 5 s at 4 Hz: 21 ticks, of which a hand-off after one interval costs
    // at most one.
    let harness = start_hung_for_five_seconds(source).await;

    let devices = harness.store.devices();
    for other in &devices[1..] {
        let live = other.live();
        assert!(live.is_up());
        assert!(live.fast_samples >= 19, "device sampled {} times in 21 ticks", live.fast_samples);
        // Slow ticks at 0 to 5 s: the first is held up for one hand-off
        // limit (a fast interval), none is lost.
        assert!(live.slow_samples >= 5, "{} slow samples in 6 ticks", live.slow_samples);
    }
    let hung = devices[0].live();
    assert!(!hung.is_up(), "stale at its deadline");
    assert_eq!(hung.fast_failure.as_ref().map(|f| f.kind), Some(ErrorKind::StillRunning));
    assert_eq!(harness.source.fast_calls[0].load(Ordering::SeqCst), 1, "never started twice");
    assert_eq!(harness.telemetry.calls_stuck(), 2, "its fast and slow calls are counted stuck");
    assert_eq!(harness.fleet.threads(Tier::Fast), 2, "one hand-off, not one per look");
    assert_eq!(harness.fleet.threads(Tier::Slow), 2, "the same on the slow thread");

    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    let before = [1, 2].map(|i| harness.source.fast_calls[i].load(Ordering::SeqCst));
    advance(Duration::from_millis(250), 4).await;
    let recovered = devices[0].live();
    assert!(recovered.is_up(), "the device resumes once its call returns");
    assert!(recovered.fast_failure.is_none());
    assert!(harness.source.fast_calls[0].load(Ordering::SeqCst) >= 4, "sampled at its rate again");
    for (i, calls) in [1, 2].into_iter().zip(before) {
        let now = harness.source.fast_calls[i].load(Ordering::SeqCst);
        assert!(now >= calls + 4, "device {i} keeps its rate after the recovery");
    }
    assert_eq!(harness.telemetry.calls_stuck(), 0);
    advance(Duration::from_millis(250), 4).await;
    assert_eq!(harness.fleet.threads(Tier::Slow), 1, "the slow reads share one thread again");
    assert!(devices[0].live().slow_failure.is_none(), "and device 0's slow tier reads again");

    harness.stop().await;
    assert_eq!(harness.fleet.threads(Tier::Slow), 0, "every slow thread ends at cancel");
}

#[tokio::test(start_paused = true)]
async fn the_slow_thread_hands_off_at_a_quarter_of_the_slow_interval_not_at_the_fast_limit() {
    // A slow read longer than the fast thread's limit (250 ms here) is
    // left alone up to a quarter of the slow interval (1 s of 4 s): a read
    // that is only slow, such as PCIe throughput's 45 ms at 100 Hz, must
    // not start a thread every slow tick.
    let mut source = FakeSource::new(3);
    source.hung_index = 0;
    source.hang.store(true, Ordering::SeqCst);
    let mut settings = settings();
    settings.config.slow_interval = Duration::from_secs(4);
    let harness = start(source, settings);
    settle().await;
    advance(Duration::from_millis(250), 2).await;
    assert_eq!(harness.fleet.threads(Tier::Fast), 2, "the fast thread hands off at 250 ms");
    assert_eq!(harness.fleet.threads(Tier::Slow), 1, "the slow one waits to 1 s");
    advance(Duration::from_millis(250), 3).await;
    assert_eq!(harness.fleet.threads(Tier::Slow), 2, "and hands off then");
    let devices = harness.store.devices();
    assert!(devices[1..].iter().all(|device| device.live().slow_samples >= 1));

    harness.source.hang.store(false, Ordering::SeqCst);
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stuck_call_is_counted_once_per_period_however_often_the_watchdog_looks() {
    // The watchdog looks every fast interval (250 ms) for the shared
    // thread; the stuck slow call (1 s period) must not be counted at each.
    let harness = start_hung_for_five_seconds(FakeSource::new(3)).await;

    let hung = harness.store.devices()[1].live();
    let count = |failure: Option<&crate::history::ReadFailure>| {
        failure.map(|failure| (failure.kind, failure.consecutive))
    };
    // Timed out at 0.1 s, then once a period: 1.1, 2.1, 3.1, 4.1 s.
    let slow = count(hung.slow_failure.as_ref());
    assert!(
        matches!(slow, Some((ErrorKind::StillRunning, 4..=6))),
        "slow tier counted {slow:?} in 5 s"
    );
    // 0.1 s, then every 250 ms: at most one a tick.
    let fast = count(hung.fast_failure.as_ref());
    assert!(matches!(fast, Some((ErrorKind::StillRunning, 17..=21))), "fast tier counted {fast:?}");

    harness.source.hang.store(false, Ordering::SeqCst);
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_fast_call_is_stale_at_its_deadline_though_the_hand_off_limit_is_longer() {
    // The hand-off limit is one fast interval (1 s), ten call timeouts; no
    // slow tier is in the watchdog's care (their readings ended), so only
    // the fast side can bring its next look forward. A call that starts
    // just after a look with nothing in flight must still be judged at its
    // own deadline, not at the next hand-off look a second later.
    let mut source = FakeSource::new(2);
    source.hung_index = 0;
    source.slow_ended = true;
    let mut settings = settings();
    settings.config.fast_interval = Duration::from_secs(1);
    settings.config.slow_interval = Duration::from_secs(1);
    let harness = start(source, settings);
    settle().await;
    // 0.5 s: the first tick answered and the slow tiers have ended.
    advance(Duration::from_millis(500), 1).await;
    let devices = harness.store.devices();
    assert!(devices[0].live().is_up());
    harness.source.hang.store(true, Ordering::SeqCst);
    // 1.0 s: device 0's second call hangs; its deadline is 1.1 s.
    advance(Duration::from_millis(500), 1).await;
    advance(Duration::from_millis(50), 3).await;
    let hung = devices[0].live();
    assert!(!hung.is_up(), "stale 150 ms into a call with a 100 ms deadline");
    assert!(hung.fast_failure.is_some());
    assert_eq!(harness.source.fast_calls[0].load(Ordering::SeqCst), 2, "never started twice");

    harness.source.hang.store(false, Ordering::SeqCst);
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_handed_off_device_rejoins_the_shared_thread_once_its_call_returns() {
    // Device 0 is sampled first on the shared fast thread; its call hangs
    // for 2 s, then returns (a driver stall, or a thread descheduled on a
    // busy host). Devices 1 and 2 move to a fresh thread meanwhile.
    let mut source = FakeSource::new(3);
    source.hung_index = 0;
    source.hang.store(true, Ordering::SeqCst);
    let harness = start(source, settings());
    settle().await;
    advance(Duration::from_millis(250), 8).await;
    assert_eq!(
        harness.fleet.threads(Tier::Fast),
        2,
        "the stuck call keeps its thread, the others share one"
    );

    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    advance(Duration::from_millis(250), 2).await;
    assert_eq!(
        harness.fleet.threads(Tier::Fast),
        1,
        "the device whose call returned is back on the shared thread"
    );

    let before = [0, 1, 2].map(|i| harness.source.fast_calls[i].load(Ordering::SeqCst));
    advance(Duration::from_millis(250), 8).await;
    for (i, calls) in [0, 1, 2].into_iter().zip(before) {
        let now = harness.source.fast_calls[i].load(Ordering::SeqCst);
        assert!(now >= calls + 7, "device {i}: {} calls in 8 ticks after the rejoin", now - calls);
    }
    let devices = harness.store.devices();
    assert!(devices.iter().all(|device| device.live().is_up()), "every device reads again");
    assert_eq!(harness.fleet.threads(Tier::Fast), 1);
    assert_eq!(harness.telemetry.calls_stuck(), 0);

    // A second hang after the rejoin is handed off again, and rejoins again.
    harness.source.hang.store(true, Ordering::SeqCst);
    advance(Duration::from_millis(250), 4).await;
    assert_eq!(harness.fleet.threads(Tier::Fast), 2);
    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    advance(Duration::from_millis(250), 2).await;
    assert_eq!(harness.fleet.threads(Tier::Fast), 1);

    harness.stop().await;
    assert_eq!(harness.fleet.threads(Tier::Fast), 0, "every fast thread ends at cancel");
}

/// Polls `done` every 5 ms of real time, at most `limit`; whether it held.
async fn real_wait(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = tokio::time::Instant::now();
    while started.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_its_own_thread_the_watchdog_hands_off_at_the_limit_and_marks_stale_at_the_deadline() {
    // Real time, threads sleeping to their own ticks: the daemon's set-up.
    // Device 0 hangs first on the shared thread at 100 Hz; the hand-off
    // limit (50 ms) comes long before the deadline (3 s).
    let mut source = FakeSource::new(3);
    source.hung_index = 0;
    source.hang.store(true, Ordering::SeqCst);
    let mut settings = SamplerSettings { runtime_ticks: false, ..settings() };
    settings.config.fast_interval = Duration::from_millis(10);
    settings.config.call_timeout = Duration::from_secs(3);
    let harness = start(source, settings);
    let limit = Duration::from_secs(10);
    assert!(real_wait(limit, || harness.store.devices().len() == 3).await);
    let devices = harness.store.devices();
    assert!(
        real_wait(limit, || harness.fleet.threads(Tier::Fast) == 2).await,
        "the others are handed off"
    );
    let hung = devices[0].live();
    assert!(hung.fast_failure.is_none(), "handed off at the limit, before the call's deadline");
    let before = [1, 2].map(|i| harness.source.fast_calls[i].load(Ordering::SeqCst));
    assert!(
        real_wait(limit, || {
            [1, 2]
                .into_iter()
                .zip(before)
                .all(|(i, calls)| harness.source.fast_calls[i].load(Ordering::SeqCst) >= calls + 20)
        })
        .await,
        "devices 1 and 2 keep sampling while device 0's call hangs"
    );
    // The slow thread hands off too: device 0's slow call hangs as well,
    // and the other devices' slow reads go on at 1 Hz (jittered).
    assert!(real_wait(limit, || harness.fleet.threads(Tier::Slow) == 2).await);
    let slow_before = [1, 2].map(|i| devices[i].live().slow_samples);
    assert!(
        real_wait(limit, || {
            [1, 2]
                .into_iter()
                .zip(slow_before)
                .all(|(i, n)| devices[i].live().slow_samples >= n + 2)
        })
        .await,
        "devices 1 and 2 keep their slow reads while device 0's hangs"
    );
    assert!(
        real_wait(limit, || devices[0].live().fast_failure.is_some()).await,
        "the watchdog marks the hung fast tier stale at its deadline"
    );
    assert_eq!(harness.source.fast_calls[0].load(Ordering::SeqCst), 1, "never started twice");
    assert!(harness.telemetry.error_count(ErrorKind::Timeout) >= 1);

    harness.source.hang.store(false, Ordering::SeqCst);
    assert!(
        real_wait(limit, || {
            harness.fleet.threads(Tier::Fast) == 1
                && harness.fleet.threads(Tier::Slow) == 1
                && devices[0].live().is_up()
        })
        .await,
        "the calls returned: the device is back on the shared threads and reads again"
    );
    harness.cancel.cancel();
    assert!(
        real_wait(limit, || {
            harness.fleet.threads(Tier::Fast) == 0 && harness.fleet.threads(Tier::Slow) == 0
        })
        .await,
        "every fast and slow thread ends"
    );
    assert!(real_wait(limit, || harness.task.is_finished()).await);
}
