//! A real Prometheus for tests: started on a free loopback port with a
//! given scrape and rule configuration, queried over its HTTP API, killed
//! and reaped on drop; and the rules that turn a Grafana dashboard's
//! queries into ones Prometheus can run (template variables substituted).
//! Shared by tests/prometheus.rs and tests/dcgm.rs.
//!
//! Needs `/usr/bin/prometheus` and `promtool` (Debian package `prometheus`);
//! `scripts/test.sh` installs them. Every wait is bounded.

// Test code: a panic here is a failed test; real processes in real time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]
#![allow(dead_code)]

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::support::{Deadline, http, pause};

pub const PROMETHEUS: &str = "/usr/bin/prometheus";

/// Bound of every wait on Prometheus (start-up, scrapes, the alert).
pub const PROM_WAIT: Duration = Duration::from_secs(60);

/// What the dashboards' interval variables become.
pub const RANGE: &str = "30s";

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a tool in the repository root: whether it succeeded, and its output.
pub fn tool(program: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run {program}: {error}; scripts/test.sh installs it (promtool: Debian \
                 package `prometheus`)"
            )
        });
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned() + &stderr)
}

/// A running Prometheus, killed and reaped on drop.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus with `scrape_configs` (YAML) and `extra` top-level
    /// configuration, as [`Self::start`] does.
    pub fn start_with(scrape_configs: &str, extra: &str) -> Self {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: run scripts/test.sh, which installs the Debian package \
             `prometheus`"
        );
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n{extra}\
             scrape_configs: {scrape_configs}"
        );
        let mut last_log = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("prometheus.yml"), &config).unwrap();
            let log = File::create(dir.path().join("prometheus.log")).unwrap();
            let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            let child = Command::new(PROMETHEUS)
                .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
                .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
                .arg(format!("--web.listen-address={addr}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|error| panic!("cannot start {PROMETHEUS}: {error}"));
            let mut prometheus = Self { child, addr, dir };
            if prometheus.wait_ready() {
                return prometheus;
            }
            last_log = prometheus.log();
        }
        panic!("Prometheus exited before it was ready, three times; last log:\n{last_log}");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Deadline::after(PROM_WAIT);
        loop {
            if matches!(http::get(self.addr, "/-/ready"), Ok(response) if response.status == 200) {
                return true;
            }
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            assert!(!deadline.passed(), "Prometheus not ready in {PROM_WAIT:?}:\n{}", self.log());
            pause();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path`'s JSON `data`; fails the test unless status is success.
    pub fn api(&self, path: &str) -> Value {
        let response = http::get(self.addr, path).unwrap_or_else(|error| panic!("{error}"));
        let body = response.json();
        assert_eq!(body["status"], "success", "GET {path}: {body}");
        body["data"].clone()
    }

    /// An instant query's result vector, or why it failed.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let path = format!("/api/v1/query?query={}", encode(expr));
        let response = http::get(self.addr, &path)?;
        let body: Value = serde_json::from_slice(&response.body)
            .map_err(|_| format!("HTTP {}: {}", response.status, response.text()))?;
        match body["status"].as_str() {
            Some("success") => Ok(body["data"]["result"].as_array().cloned().unwrap_or_default()),
            _ => Err(format!("{}: {}", body["errorType"], body["error"])),
        }
    }

    /// Polls `found` until it returns something; fails after `PROM_WAIT`.
    pub fn wait_for<T>(&self, what: &str, mut found: impl FnMut() -> Option<T>) -> T {
        let deadline = Deadline::after(PROM_WAIT);
        loop {
            if let Some(result) = found() {
                return result;
            }
            assert!(!deadline.passed(), "{what} within {PROM_WAIT:?}; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter value.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Replaces Grafana's interval variables with `RANGE` and every other
/// template variable (`$name`, `${name}`, `${name:format}`) with `.*`.
pub fn substitute(expr: &str) -> String {
    let mut text = expr.to_owned();
    for name in ["__rate_interval", "__interval", "__range"] {
        text = text.replace(&format!("${{{name}}}"), RANGE).replace(&format!("${name}"), RANGE);
    }
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let end = if let Some(braced) = after.strip_prefix('{') {
            braced.find('}').map_or(after.len(), |close| close + 2)
        } else {
            after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len())
        };
        // A `$` not followed by a name (as in label_replace's "$1") stays.
        let is_variable = end > 0 && !after[..end].starts_with(|c: char| c.is_ascii_digit());
        out.push_str(if is_variable { ".*" } else { "$" });
        rest = if is_variable { &after[end..] } else { after };
    }
    out + rest
}

/// Every `targets[].expr` and every `label_values(…)` variable query (as
/// `count by (label) (selector)`) in `node`, with variables substituted.
pub fn dashboard_exprs(node: &Value, file: &str, out: &mut Vec<(String, String)>) {
    match node {
        Value::Object(map) => {
            for target in map.get("targets").and_then(Value::as_array).into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or_default();
                let title = map.get("title").and_then(Value::as_str).unwrap_or_default();
                out.push((format!("{file}: panel {title:?}"), substitute(expr)));
            }
            // A query variable's query: a string, or {"query": string}.
            let query = map.get("query").filter(|_| map.get("type") == Some(&"query".into()));
            let query = query.and_then(|query| query.get("query").or(Some(query)));
            if let Some(inner) = query.and_then(Value::as_str).and_then(|q| {
                q.trim().strip_prefix("label_values(").and_then(|q| q.strip_suffix(')'))
            }) {
                let (selector, label) =
                    inner.rsplit_once(',').expect("label_values(selector, label)");
                let expr = format!("count by ({}) ({selector})", label.trim());
                let name = map.get("name").and_then(Value::as_str).unwrap_or_default();
                out.push((format!("{file}: variable {name}"), substitute(&expr)));
            }
            map.values().for_each(|value| dashboard_exprs(value, file, out));
        }
        Value::Array(items) => items.iter().for_each(|value| dashboard_exprs(value, file, out)),
        _ => {}
    }
}

/// Why a query that must return data did not, if it did not.
pub fn verdict(what: &str, expr: &str, result: Result<Vec<Value>, String>) -> Option<String> {
    match result {
        Ok(result) if !result.is_empty() => None,
        Ok(_) => Some(format!("{what}: empty: {expr}")),
        Err(error) => Some(format!("{what}: {error}: {expr}")),
    }
}
