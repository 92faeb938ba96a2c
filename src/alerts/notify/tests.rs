//! Notifier and dispatcher tests: payloads against a local axum receiver on
//! 127.0.0.1, queueing, retries and isolation against the recording fake
//! (in paused tokio time where backoff is involved). Every wait is bounded.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::alerts::{Alert, AlertKey, AlertState, Severity, Transition};
use crate::model::{RuleId, Timestamp};
use crate::telemetry::{NotificationOutcome, Telemetry};

use super::recording_tests::RecordingNotifier;
use super::*;

/// Bound of every wait (real or paused time).
const WAIT: Duration = Duration::from_secs(10);

/// 2026-01-01T00:00:00Z.
const BASE_MS: i64 = 1_767_225_600_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_unix_millis(BASE_MS + seconds * 1000)
}

fn config() -> NotifyConfig {
    NotifyConfig {
        alertmanager_url: None,
        webhook_url: None,
        queue_capacity: NonZeroUsize::new(16).unwrap(),
        timeout: Duration::from_secs(5),
        resend_interval: Duration::from_secs(60),
        max_retries: 3,
        retry_backoff_max: Duration::from_secs(1),
        external_url: None,
    }
}

/// An alert on GPU 1; a process alert when `pid` is set. Pending since
/// +0 s, firing since +60 s, updated at +200 s, resolved at +300 s.
fn alert(rule: RuleId, pid: Option<u32>, state: AlertState) -> Alert {
    let key = AlertKey { rule, uuid: "GPU-0f1e2d3c".to_owned(), pid };
    Alert {
        id: key.id(),
        key,
        severity: Severity::Critical,
        state,
        gpu: 1,
        process: pid.map(|_| "python3".to_owned()),
        value: 0.97,
        threshold: 0.95,
        unit: "ratio".to_owned(),
        since: at(0),
        firing_since: (state != AlertState::Pending).then(|| at(60)),
        resolved_at: (state == AlertState::Resolved).then(|| at(300)),
        updated_at: if state == AlertState::Resolved { at(300) } else { at(200) },
        summary: format!("{rule} on GPU 1"),
        description: "used 97% of 80 GiB".to_owned(),
        remediation: "reduce the batch size".to_owned(),
    }
}

fn change(alert: Alert) -> Transition {
    Transition { from: None, alert }
}

fn telemetry() -> Arc<Telemetry> {
    Arc::new(Telemetry::new("simulator").unwrap())
}

fn ids(alerts: &[Alert]) -> Vec<&str> {
    alerts.iter().map(|alert| alert.id.as_str()).collect()
}

async fn bounded<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(WAIT, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

// ---------------------------------------------------------------------------
// A local receiver.

#[derive(Clone)]
struct ReceiverState {
    requests: mpsc::UnboundedSender<(String, Value)>,
    release: watch::Receiver<bool>,
    status: StatusCode,
    answered: Arc<AtomicUsize>,
}

/// An HTTP server on 127.0.0.1:0 that reports every request's path and JSON
/// body, and answers `status` — at once, or only after `release()` when
/// started held.
struct Receiver {
    addr: SocketAddr,
    requests: mpsc::UnboundedReceiver<(String, Value)>,
    release: watch::Sender<bool>,
    answered: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(status: StatusCode, held: bool) -> Self {
        let (requests_tx, requests) = mpsc::unbounded_channel();
        let (release, release_rx) = watch::channel(!held);
        let answered = Arc::new(AtomicUsize::new(0));
        let state = ReceiverState {
            requests: requests_tx,
            release: release_rx,
            status,
            answered: answered.clone(),
        };
        let app = Router::new().fallback(receive).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, requests, release, answered, server }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn next(&mut self) -> (String, Value) {
        bounded("a request at the receiver", self.requests.recv()).await.unwrap()
    }

    fn release(&self) {
        self.release.send_replace(true);
    }

    fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(State(state): State<ReceiverState>, uri: Uri, body: Bytes) -> StatusCode {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = state.requests.send((uri.path().to_owned(), body));
    let mut release = state.release.clone();
    let _ = release.wait_for(|released| *released).await;
    state.answered.fetch_add(1, Ordering::SeqCst);
    state.status
}

// ---------------------------------------------------------------------------
// Payloads.

#[tokio::test]
async fn alertmanager_payload_has_labels_annotations_times_and_generator_url() {
    let mut receiver = Receiver::start(StatusCode::OK, false).await;
    let notifier =
        AlertmanagerNotifier::new(&receiver.url("/am/"), &config(), "http://vramd.example:9400/")
            .unwrap()
            .with_instance("node-7");
    assert_eq!(notifier.endpoint(), receiver.url("/am/api/v2/alerts"));
    let firing = alert(RuleId::LeakSuspected, Some(4242), AlertState::Firing);
    let resolved = alert(RuleId::MemoryHigh, None, AlertState::Resolved);

    notifier.deliver(&[firing, resolved]).await.unwrap();

    let (path, body) = receiver.next().await;
    assert_eq!(path, "/am/api/v2/alerts");
    assert_eq!(
        body,
        json!([
            {
                "labels": {
                    "alertname": "VramdLeakSuspected",
                    "severity": "critical",
                    "gpu": "1",
                    "uuid": "GPU-0f1e2d3c",
                    "rule": "leak_suspected",
                    "pid": "4242",
                    "process": "python3",
                    "instance": "node-7",
                },
                "annotations": {
                    "summary": "leak_suspected on GPU 1",
                    "description": "used 97% of 80 GiB",
                    "remediation": "reduce the batch size",
                    "value": "0.97",
                    "threshold": "0.95",
                    "unit": "ratio",
                },
                // firing_since; updated_at (+200 s) + 3 × 60 s resend.
                "startsAt": "2026-01-01T00:01:00.000Z",
                "endsAt": "2026-01-01T00:06:20.000Z",
                "generatorURL":
                    "http://vramd.example:9400/api/v1/alerts/leak_suspected.GPU-0f1e2d3c.4242",
            },
            {
                "labels": {
                    "alertname": "VramdMemoryHigh",
                    "severity": "critical",
                    "gpu": "1",
                    "uuid": "GPU-0f1e2d3c",
                    "rule": "memory_high",
                    "instance": "node-7",
                },
                "annotations": {
                    "summary": "memory_high on GPU 1",
                    "description": "used 97% of 80 GiB",
                    "remediation": "reduce the batch size",
                    "value": "0.97",
                    "threshold": "0.95",
                    "unit": "ratio",
                },
                "startsAt": "2026-01-01T00:01:00.000Z",
                // resolved_at.
                "endsAt": "2026-01-01T00:05:00.000Z",
                "generatorURL": "http://vramd.example:9400/api/v1/alerts/memory_high.GPU-0f1e2d3c",
            },
        ])
    );
}

#[test]
fn alertmanager_starts_at_falls_back_to_since() {
    let notifier =
        AlertmanagerNotifier::new("http://127.0.0.1:9/", &config(), "http://h:1").unwrap();
    let mut firing = alert(RuleId::MemoryHigh, None, AlertState::Firing);
    firing.firing_since = None;
    let body: Value = serde_json::from_slice(&notifier.payload(&[firing]).unwrap()).unwrap();
    assert_eq!(body[0]["startsAt"], "2026-01-01T00:00:00.000Z");
    assert!(!body[0]["labels"]["instance"].as_str().unwrap().is_empty(), "host name is set");
}

#[tokio::test]
async fn webhook_payload_is_a_versioned_document_of_serialized_alerts() {
    let mut receiver = Receiver::start(StatusCode::NO_CONTENT, false).await;
    let notifier = WebhookNotifier::new(&receiver.url("/hook?team=ml"), &config()).unwrap();
    let firing = alert(RuleId::AllocatorOom, Some(7), AlertState::Firing);
    let resolved = alert(RuleId::MemoryHigh, None, AlertState::Resolved);

    notifier.deliver(&[firing.clone(), resolved.clone()]).await.unwrap();

    let (path, body) = receiver.next().await;
    assert_eq!(path, "/hook");
    assert_eq!(
        body,
        json!({
            "version": "1",
            "source": "vramd",
            "alerts": [
                serde_json::to_value(&firing).unwrap(),
                serde_json::to_value(&resolved).unwrap(),
            ],
        })
    );
    assert_eq!(body["alerts"][0]["state"], "firing");
    assert_eq!(body["alerts"][0]["pid"], 7);
}

// ---------------------------------------------------------------------------
// HTTP failures carry their context.

#[tokio::test]
async fn an_error_status_reports_url_status_and_body() {
    let receiver = Receiver::start(StatusCode::SERVICE_UNAVAILABLE, false).await;
    let notifier = WebhookNotifier::new(&receiver.url("/hook"), &config()).unwrap();
    let error = notifier.deliver(&[alert(RuleId::MemoryHigh, None, AlertState::Firing)]).await;
    match error {
        Err(NotifyError::Status { url, status, .. }) => {
            assert_eq!((url.as_str(), status), (receiver.url("/hook").as_str(), 503));
        }
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_receiver_that_does_not_answer_times_out() {
    let mut receiver = Receiver::start(StatusCode::OK, true).await;
    let config = NotifyConfig { timeout: Duration::from_millis(200), ..config() };
    let notifier = WebhookNotifier::new(&receiver.url("/hook"), &config).unwrap();
    let error = bounded(
        "the request deadline",
        notifier.deliver(&[alert(RuleId::MemoryHigh, None, AlertState::Firing)]),
    )
    .await;
    receiver.next().await;
    assert!(
        matches!(&error, Err(NotifyError::Timeout { timeout, .. }) if *timeout == Duration::from_millis(200)),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_refused_connection_is_a_request_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let notifier = WebhookNotifier::new(&format!("http://{addr}/hook"), &config()).unwrap();
    let error = bounded(
        "a refused connection",
        notifier.deliver(&[alert(RuleId::MemoryHigh, None, AlertState::Firing)]),
    )
    .await;
    match error {
        Err(error @ NotifyError::Request { .. }) => {
            assert!(error.to_string().contains(&addr.to_string()), "{error}");
        }
        other => panic!("expected a request error, got {other:?}"),
    }
}

#[test]
fn invalid_urls_are_refused_with_the_reason() {
    for url in ["ftp://host/x", "not a url", "/relative/path", "http://user:secret@host/"] {
        match WebhookNotifier::new(url, &config()) {
            Err(NotifyError::InvalidUrl { url: got, reason }) => {
                assert_eq!(got, url);
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("{url}: expected InvalidUrl, got {other}"),
            Ok(_) => panic!("{url}: accepted"),
        }
    }
}

#[test]
fn notifiers_are_built_from_config() {
    assert!(build_notifiers(&config(), "http://127.0.0.1:9400").unwrap().is_empty());
    let both = NotifyConfig {
        alertmanager_url: Some("http://127.0.0.1:9093".to_owned()),
        webhook_url: Some("http://127.0.0.1:8080/hook".to_owned()),
        ..config()
    };
    let names: Vec<_> = build_notifiers(&both, "http://127.0.0.1:9400")
        .unwrap()
        .iter()
        .map(|notifier| notifier.name())
        .collect();
    assert_eq!(names, ["alertmanager", "webhook"]);
    let bad = NotifyConfig { webhook_url: Some("hook".to_owned()), ..config() };
    assert!(matches!(
        build_notifiers(&bad, "http://127.0.0.1:9400"),
        Err(NotifyError::InvalidUrl { .. })
    ));
}

// ---------------------------------------------------------------------------
// Dispatch.

fn dispatch(
    notifiers: Vec<Arc<dyn Notifier>>,
    config: &NotifyConfig,
) -> (DispatchHandle, Arc<Telemetry>, CancellationToken) {
    let telemetry = telemetry();
    let cancel = CancellationToken::new();
    let handle = spawn(notifiers, config, telemetry.clone(), cancel.clone());
    (handle, telemetry, cancel)
}

#[tokio::test(start_paused = true)]
async fn pending_alerts_are_not_delivered() {
    let recorder = RecordingNotifier::new("rec");
    let (handle, telemetry, _cancel) = dispatch(vec![recorder.clone()], &config());

    // One that ended while pending never fired: nobody was told of it.
    let mut ended_pending = alert(RuleId::MemoryHigh, None, AlertState::Resolved);
    ended_pending.firing_since = None;
    handle.submit(&[
        change(alert(RuleId::MemoryHigh, None, AlertState::Pending)),
        change(ended_pending),
    ]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(recorder.attempts(), 0, "nothing deliverable was submitted");
    assert_eq!(handle.queued("rec"), Some(0));

    handle.submit(&[
        change(alert(RuleId::LeakSuspected, Some(1), AlertState::Pending)),
        change(alert(RuleId::MemoryHigh, None, AlertState::Firing)),
        change(alert(RuleId::AllocatorOom, Some(2), AlertState::Resolved)),
    ]);
    bounded("one batch", recorder.wait_until(|rec| !rec.batches().is_empty())).await;
    assert_eq!(
        ids(&recorder.alerts()),
        ["memory_high.GPU-0f1e2d3c", "allocator_oom.GPU-0f1e2d3c.2"]
    );
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Sent), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_delivery_is_retried_with_backoff_until_it_succeeds() {
    let recorder = RecordingNotifier::new("rec");
    recorder.fail_next(2);
    let (handle, telemetry, _cancel) = dispatch(vec![recorder.clone()], &config());

    handle.submit(&[change(alert(RuleId::MemoryHigh, None, AlertState::Firing))]);
    bounded("a delivered batch", recorder.wait_until(|rec| !rec.batches().is_empty())).await;

    assert_eq!(recorder.attempts(), 3);
    let times = recorder.attempt_times();
    assert_eq!(times[1] - times[0], Duration::from_millis(100));
    assert_eq!(times[2] - times[1], Duration::from_millis(200));
    assert_eq!(ids(&recorder.alerts()), ["memory_high.GPU-0f1e2d3c"]);
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Sent), 1);
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Failed), 0);
    assert_eq!(telemetry.notification_attempts("rec"), 3);
}

#[tokio::test(start_paused = true)]
async fn delivery_is_given_up_after_max_retries_and_counted() {
    let recorder = RecordingNotifier::new("rec");
    let config =
        NotifyConfig { max_retries: 3, retry_backoff_max: Duration::from_millis(250), ..config() };
    recorder.fail_next(4);
    let (handle, telemetry, _cancel) = dispatch(vec![recorder.clone()], &config);

    handle.submit(&[
        change(alert(RuleId::MemoryHigh, None, AlertState::Firing)),
        change(alert(RuleId::AllocatorOom, Some(2), AlertState::Firing)),
    ]);
    bounded(
        "the batch to be given up",
        recorder
            .wait_until(|_| telemetry.notification_count("rec", NotificationOutcome::Failed) > 0),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;

    assert_eq!(recorder.attempts(), 4, "one attempt and max_retries = 3 retries, then no more");
    let times = recorder.attempt_times();
    let gaps: Vec<Duration> = times.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert_eq!(gaps, [100, 200, 250].map(Duration::from_millis), "doubling, capped");
    assert!(recorder.batches().is_empty());
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Failed), 2);
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Sent), 0);

    // The next change is delivered normally: the worker recovered.
    handle.submit(&[change(alert(RuleId::MemoryHigh, None, AlertState::Resolved))]);
    bounded("a delivered batch", recorder.wait_until(|rec| !rec.batches().is_empty())).await;
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Sent), 1);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_the_oldest_and_counts() {
    let recorder = RecordingNotifier::new("rec");
    let config = NotifyConfig { queue_capacity: NonZeroUsize::new(3).unwrap(), ..config() };
    let (handle, telemetry, _cancel) = dispatch(vec![recorder.clone()], &config);
    recorder.stall();

    handle.submit(&[change(alert(RuleId::MemoryHigh, None, AlertState::Firing))]);
    bounded("the first attempt", recorder.wait_until(|rec| rec.attempts() == 1)).await;
    for rule in [
        RuleId::ExhaustionForecast,
        RuleId::LeakSuspected,
        RuleId::AllocatorFragmentationHigh,
        RuleId::AllocatorRetries,
    ] {
        handle.submit(&[change(alert(rule, None, AlertState::Firing))]);
    }

    assert_eq!(handle.queued("rec"), Some(3));
    assert_eq!(telemetry.notifications_dropped("rec"), 1);
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Dropped), 1);

    recorder.resume();
    bounded("two batches", recorder.wait_until(|rec| rec.batches().len() == 2)).await;
    let batches = recorder.batches();
    assert_eq!(ids(&batches[0]), ["memory_high.GPU-0f1e2d3c"]);
    assert_eq!(
        ids(&batches[1]),
        [
            "leak_suspected.GPU-0f1e2d3c",
            "allocator_fragmentation_high.GPU-0f1e2d3c",
            "allocator_retries.GPU-0f1e2d3c"
        ]
    );
    assert_eq!(telemetry.notification_count("rec", NotificationOutcome::Sent), 4);
}

#[tokio::test(start_paused = true)]
async fn resend_queues_firing_alerts_not_already_queued() {
    let recorder = RecordingNotifier::new("rec");
    let (handle, _telemetry, _cancel) = dispatch(vec![recorder.clone()], &config());
    recorder.stall();
    handle.submit(&[change(alert(RuleId::MemoryHigh, None, AlertState::Firing))]);
    bounded("the first attempt", recorder.wait_until(|rec| rec.attempts() == 1)).await;

    let firing_x = alert(RuleId::DeviceLost, None, AlertState::Firing);
    let firing_z = alert(RuleId::ProbeHeadroomLow, None, AlertState::Firing);
    let resolved_y = alert(RuleId::XidError, None, AlertState::Resolved);
    handle.resend(&[firing_x.clone(), resolved_y, firing_z.clone()]);
    handle.resend(&[firing_x, firing_z]);
    assert_eq!(handle.queued("rec"), Some(2), "resolved alerts are not re-sent, nor duplicates");

    recorder.resume();
    bounded("two batches", recorder.wait_until(|rec| rec.batches().len() == 2)).await;
    assert_eq!(
        ids(&recorder.batches()[1]),
        ["device_lost.GPU-0f1e2d3c", "probe_headroom_low.GPU-0f1e2d3c"]
    );
}

#[tokio::test]
async fn a_stalled_receiver_delays_neither_submit_nor_another_notifier() {
    // The webhook's receiver holds every request until released; the
    // request deadline is far beyond the test.
    let mut receiver = Receiver::start(StatusCode::OK, true).await;
    let config = NotifyConfig { timeout: Duration::from_secs(60), ..config() };
    let webhook = Arc::new(WebhookNotifier::new(&receiver.url("/hook"), &config).unwrap());
    let recorder = RecordingNotifier::new("rec");
    let (handle, telemetry, _cancel) = dispatch(vec![webhook, recorder.clone()], &config);

    handle.submit(&[change(alert(RuleId::MemoryHigh, None, AlertState::Firing))]);
    let (_, first) = receiver.next().await;
    assert_eq!(first["alerts"][0]["rule"], "memory_high");
    bounded("the other notifier's batch", recorder.wait_until(|rec| rec.batches().len() == 1))
        .await;

    // The webhook worker is stuck inside its request; submit still returns,
    // and the other notifier still delivers.
    handle.submit(&[change(alert(RuleId::ExhaustionForecast, None, AlertState::Firing))]);
    assert_eq!(receiver.answered(), 0, "the first request is still held");
    assert_eq!(handle.queued("webhook"), Some(1));
    bounded(
        "the other notifier's second batch",
        recorder.wait_until(|rec| rec.batches().len() == 2),
    )
    .await;
    assert_eq!(receiver.answered(), 0, "the first request is still held");

    receiver.release();
    let (_, second) = receiver.next().await;
    assert_eq!(second["alerts"][0]["rule"], "exhaustion_forecast");
    bounded("both webhook deliveries to count", async {
        while telemetry.notification_count("webhook", NotificationOutcome::Sent) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_stops_the_workers() {
    let recorder = RecordingNotifier::new("rec");
    recorder.stall();
    let (handle, _telemetry, cancel) = dispatch(vec![recorder.clone()], &config());
    handle.submit(&[change(alert(RuleId::MemoryHigh, None, AlertState::Firing))]);
    bounded("the first attempt", recorder.wait_until(|rec| rec.attempts() == 1)).await;

    cancel.cancel();
    bounded("the workers to stop", handle.join()).await;
    handle.submit(&[change(alert(RuleId::ExhaustionForecast, None, AlertState::Firing))]);
    assert_eq!(handle.notifiers(), ["rec"]);
}

#[tokio::test(start_paused = true)]
async fn notification_series_exist_from_the_start() {
    let recorder = RecordingNotifier::new("rec");
    let (_handle, telemetry, _cancel) = dispatch(vec![recorder], &config());
    let mut text = Vec::new();
    telemetry.encode_into(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    for outcome in ["sent", "failed", "dropped"] {
        assert!(
            text.contains(&format!(
                "vramd_notifications_total{{notifier=\"rec\",outcome=\"{outcome}\"}} 0"
            )),
            "{outcome}:\n{text}"
        );
    }
    assert!(text.contains("vramd_notifications_dropped_total{notifier=\"rec\"} 0"));
    assert!(text.contains("vramd_notification_duration_seconds_count{notifier=\"rec\"} 0"));
}
