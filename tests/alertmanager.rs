//! End to end against a real Alertmanager on loopback: `AlertmanagerNotifier`
//! posts a firing alert, Alertmanager lists it with its labels and
//! annotations, then the resolution makes it inactive.
//!
//! Needs `/usr/bin/prometheus-alertmanager` (Debian package
//! `prometheus-alertmanager`); `scripts/test.sh` installs it. Every wait is
//! bounded and the Alertmanager process is killed when the test ends.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Real processes and sockets: wall-clock waits are what this test measures.
#![allow(clippy::disallowed_types)]

mod support;

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use support::{Deadline, http, pause};
use vramd::alerts::notify::{AlertmanagerNotifier, Notifier, NotifyConfig};
use vramd::alerts::{Alert, AlertKey, AlertState, Severity};
use vramd::clock::wall_now;
use vramd::model::RuleId;

const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// Bound of every wait on Alertmanager (start-up, alert processing).
const AM_WAIT: Duration = Duration::from_secs(20);

const CONFIG: &str = r#"route:
  receiver: "null"
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: "null"
"#;

/// A running Alertmanager, killed and reaped on drop.
struct Alertmanager {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
}

impl Alertmanager {
    /// Starts Alertmanager on a free loopback port (retrying with another
    /// port if it loses the race for one) and waits for `/-/ready`.
    fn start() -> Self {
        assert!(
            Path::new(ALERTMANAGER).exists(),
            "{ALERTMANAGER} is missing: run scripts/test.sh, which installs the Debian package \
             `prometheus-alertmanager`"
        );
        let mut last_log = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let config = dir.path().join("alertmanager.yml");
            std::fs::write(&config, CONFIG).unwrap();
            let storage = dir.path().join("data");
            std::fs::create_dir(&storage).unwrap();
            let log = File::create(dir.path().join("alertmanager.log")).unwrap();
            let addr = free_port();
            let child = Command::new(ALERTMANAGER)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.path={}", storage.display()))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--cluster.listen-address=")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|error| panic!("cannot start {ALERTMANAGER}: {error}"));
            let mut alertmanager = Self { child, addr, dir };
            if alertmanager.wait_ready() {
                return alertmanager;
            }
            last_log = alertmanager.log();
        }
        panic!("Alertmanager exited before it was ready, three times; last log:\n{last_log}");
    }

    /// Polls `/-/ready`: true once it answers 200, false if the process
    /// exited first; fails the test after `AM_WAIT`.
    fn wait_ready(&mut self) -> bool {
        let deadline = Deadline::after(AM_WAIT);
        loop {
            if matches!(http::get(self.addr, "/-/ready"), Ok(response) if response.status == 200) {
                return true;
            }
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            assert!(
                !deadline.passed(),
                "Alertmanager not ready within {AM_WAIT:?}; log:\n{}",
                self.log()
            );
            pause();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("alertmanager.log")).unwrap_or_default()
    }

    /// `GET path`, which must answer a JSON array.
    fn alerts(&self, path: &str) -> Vec<Value> {
        let response = http::get(self.addr, path).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(response.status, 200, "GET {path}: {}", response.text());
        match response.json() {
            Value::Array(alerts) => alerts,
            other => panic!("GET {path}: expected a JSON array, got {other}"),
        }
    }

    /// Polls `GET path` until `found` picks something out of the list.
    fn wait_for<T>(&self, path: &str, what: &str, found: impl Fn(&[Value]) -> Option<T>) -> T {
        let deadline = Deadline::after(AM_WAIT);
        loop {
            let alerts = self.alerts(path);
            if let Some(result) = found(&alerts) {
                return result;
            }
            assert!(
                !deadline.passed(),
                "{what} within {AM_WAIT:?}; GET {path} answered {alerts:#?}\nlog:\n{}",
                self.log()
            );
            pause();
        }
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on right now.
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

fn notify_config(base: &str) -> NotifyConfig {
    NotifyConfig {
        alertmanager_url: Some(base.to_owned()),
        webhook_url: None,
        queue_capacity: std::num::NonZeroUsize::new(16).unwrap(),
        timeout: Duration::from_secs(5),
        resend_interval: Duration::from_secs(60),
        max_retries: 3,
        retry_backoff_max: Duration::from_secs(1),
        external_url: None,
    }
}

/// A firing leak alert for process 4242 on GPU 3, with real timestamps so
/// Alertmanager considers it current.
fn firing_alert() -> Alert {
    let now = wall_now();
    let key =
        AlertKey { rule: RuleId::LeakSuspected, uuid: "GPU-e2e-0001".to_owned(), pid: Some(4242) };
    Alert {
        id: key.id(),
        key,
        severity: Severity::Warning,
        state: AlertState::Firing,
        gpu: 3,
        process: Some("python3".to_owned()),
        value: 1_048_576.0,
        threshold: 524_288.0,
        unit: "bytes_per_second".to_owned(),
        since: now.saturating_sub(Duration::from_secs(120)),
        firing_since: Some(now.saturating_sub(Duration::from_secs(60))),
        resolved_at: None,
        updated_at: now,
        summary: "process 4242 (python3) grows 1 MiB/s on GPU 3".to_owned(),
        description: "steady growth over 10m, fit r²=0.98".to_owned(),
        remediation: "look for tensors kept across iterations".to_owned(),
    }
}

fn is_ours(alert: &Value) -> bool {
    alert["labels"]["alertname"] == "VramdLeakSuspected"
        && alert["labels"]["uuid"] == "GPU-e2e-0001"
}

#[test]
fn a_firing_alert_reaches_alertmanager_and_its_resolution_ends_it() {
    let alertmanager = Alertmanager::start();
    let base = format!("http://{}", alertmanager.addr);
    let notifier = AlertmanagerNotifier::new(&base, &notify_config(&base), "http://127.0.0.1:9400")
        .unwrap()
        .with_instance("e2e-host");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();

    let firing = firing_alert();
    runtime
        .block_on(notifier.deliver(std::slice::from_ref(&firing)))
        .unwrap_or_else(|error| panic!("{error}\nAlertmanager log:\n{}", alertmanager.log()));

    let listed =
        alertmanager.wait_for("/api/v2/alerts", "the firing alert was not listed", |alerts| {
            alerts.iter().find(|alert| is_ours(alert)).cloned()
        });
    let expected_labels = serde_json::json!({
        "alertname": "VramdLeakSuspected",
        "severity": "warning",
        "gpu": "3",
        "uuid": "GPU-e2e-0001",
        "rule": "leak_suspected",
        "pid": "4242",
        "process": "python3",
        "instance": "e2e-host",
    });
    assert_eq!(listed["labels"], expected_labels, "{listed:#}");
    let annotations = &listed["annotations"];
    assert_eq!(annotations["summary"], firing.summary.as_str(), "{listed:#}");
    assert_eq!(annotations["description"], firing.description.as_str());
    assert_eq!(annotations["remediation"], firing.remediation.as_str());
    assert_eq!(annotations["value"], "1048576");
    assert_eq!(annotations["threshold"], "524288");
    assert_eq!(listed["status"]["state"], "active", "{listed:#}");
    assert_eq!(
        listed["generatorURL"],
        "http://127.0.0.1:9400/api/v1/alerts/leak_suspected.GPU-e2e-0001.4242"
    );
    let starts_at = firing.firing_since.unwrap().to_rfc3339();
    assert_eq!(
        listed["startsAt"].as_str().map(|text| &text[..19]),
        Some(&starts_at[..19]),
        "startsAt is firing_since (to the second): {listed:#}"
    );

    // The same query that must lack it once resolved lists it now.
    alertmanager.wait_for(
        "/api/v2/alerts?active=true",
        "the firing alert was not active",
        |alerts| alerts.iter().any(is_ours).then_some(()),
    );

    let resolved_at = wall_now();
    let resolved = Alert {
        state: AlertState::Resolved,
        resolved_at: Some(resolved_at),
        updated_at: resolved_at,
        ..firing
    };
    runtime
        .block_on(notifier.deliver(std::slice::from_ref(&resolved)))
        .unwrap_or_else(|error| panic!("{error}\nAlertmanager log:\n{}", alertmanager.log()));

    alertmanager.wait_for("/api/v2/alerts?active=true", "the alert was still active", |alerts| {
        (!alerts.iter().any(is_ours)).then_some(())
    });
}

/// A replayable trace of one GPU whose memory is 95 % used for 3 s, then
/// 50 %, stamped from now on, so alert timestamps match Alertmanager's clock.
fn high_then_normal_trace(dir: &Path) -> std::path::PathBuf {
    const TOTAL: u64 = 80 << 30;
    let start = wall_now().unix_millis();
    let mut lines = vec![serde_json::json!({
        "format": "vramd-trace",
        "version": 1,
        "source": "e2e",
        "devices": [ { "index": 0, "uuid": "GPU-e2e-high", "name": "Test GPU" } ],
    })];
    for step in 0..120u64 {
        let used = if step < 12 { TOTAL * 95 / 100 } else { TOTAL / 2 };
        lines.push(serde_json::json!({
            "record": "fast",
            "device": 0,
            "at": start + (step as i64) * 250,
            "memory": { "total_bytes": TOTAL, "reserved_bytes": 0, "used_bytes": used, "free_bytes": TOTAL - used },
        }));
    }
    let path = dir.join("trace.ndjson");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    path
}

#[test]
fn the_daemon_pushes_a_scenario_alert_to_alertmanager_and_then_its_resolution() {
    let alertmanager = Alertmanager::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = high_then_normal_trace(dir.path());
    let url = format!("http://{}", alertmanager.addr);
    let mut daemon = support::Process::spawn(
        &["--replay", trace.to_str().unwrap(), "--listen", "127.0.0.1:0", "--log-format", "json"],
        &[
            ("VRAMD_NOTIFY__ALERTMANAGER_URL", url.as_str()),
            ("VRAMD_ALERTS__MEMORY_HIGH__FOR", "0s"),
            ("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "250ms"),
            ("VRAMD_NOTIFY__RESEND_INTERVAL", "1s"),
        ],
    );
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let ours = |alert: &Value| {
        alert["labels"]["alertname"] == "VramdMemoryHigh"
            && alert["labels"]["uuid"] == "GPU-e2e-high"
    };
    let listed = alertmanager.wait_for(
        "/api/v2/alerts",
        "vramd's memory_high alert never reached Alertmanager",
        |alerts| alerts.iter().find(|alert| ours(alert)).cloned(),
    );
    assert_eq!(listed["labels"]["severity"], "warning", "{listed:#}");
    assert_eq!(listed["labels"]["gpu"], "0", "{listed:#}");
    assert!(
        listed["annotations"]["summary"].as_str().is_some_and(|s| s.contains("95%")),
        "{listed:#}"
    );
    alertmanager.wait_for(
        "/api/v2/alerts?active=true",
        "the resolution did not end the alert",
        |alerts| (!alerts.iter().any(ours)).then_some(()),
    );
    let alerts = support::get(addr, "/api/v1/alerts?rule=memory_high").json();
    assert_eq!(alerts["alerts"][0]["state"], "resolved", "{alerts:#}");
    drop(daemon);
}
