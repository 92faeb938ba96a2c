//! The dcgm-exporter migration (docs/migrating-from-dcgm-exporter.md) on a
//! real Prometheus: the vramd binary on the fake NVML driver (every value
//! dcgm's default fields need, two GPUs, the first allocated to a pod by a
//! fake kubelet) scraped on loopback under a job not called `vramd`, with
//! `deploy/prometheus/dcgm-compat-rules.yml` loaded. Every recording rule
//! must have data, every query of dcgm-exporter's own Grafana dashboard
//! (tests/fixtures/dcgm-exporter/) that uses only recorded fields must
//! return data, the series carry dcgm's units and labels, and the doc's
//! field tables and figures match the rules and this run.
//!
//! The share of dashboard queries answered is printed (`cargo test --test
//! dcgm -- --nocapture`). Needs prometheus and promtool (scripts/test.sh
//! installs them); every wait is bounded; the daemon, the fakes and
//! Prometheus are stopped when the test ends, pass or fail.

// A test crate: a panic here is a failed test, not a failed daemon; and
// these tests run real processes in real time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]

#[path = "support/kubernetes.rs"]
mod fake;
#[path = "support/prometheus.rs"]
mod prom;
mod support;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use fake::{FakeApi, pod, start_on_fake_driver};
use prom::{Prometheus, dashboard_exprs, repo};

const RULES: &str = "deploy/prometheus/dcgm-compat-rules.yml";
const DASHBOARD: &str = "tests/fixtures/dcgm-exporter/dcgm-exporter-dashboard.json";
const DOC: &str = "docs/migrating-from-dcgm-exporter.md";

/// Not `vramd`: the rules must not depend on the job's name.
const JOB: &str = "gpu-memory";

const GIB: u64 = 1 << 30;
const UUIDS: [&str; 2] =
    ["GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20", "GPU-5e36dfda-07e6-b97b-431a-a6427be834f7"];

/// A GPU answering every NVML call behind dcgm's default fields.
fn device(uuid: &str, name: &str, used_bytes: u64) -> Value {
    json!({
        "uuid": uuid,
        "name": name,
        "memory": { "total_bytes": 80 * GIB, "reserved_bytes": GIB / 2, "used_bytes": used_bytes },
        "utilization": { "gpu": 87, "memory": 41 },
        "temperature_c": 64,
        "power_usage_mw": 412_000,
        "power_limit_mw": 700_000,
        "energy_mj": 5_000_000,
        "encoder_utilization": 12,
        "decoder_utilization": 7,
        "clocks": { "graphics_mhz": 1980, "sm_mhz": 1980, "memory_mhz": 2619, "video_mhz": 1755 },
        "ecc": {
            "enabled": true, "pending": false,
            "volatile_corrected": 2, "volatile_uncorrected": 0,
            "aggregate_corrected": 17, "aggregate_uncorrected": 1
        },
        "retired_pages": {
            "multiple_single_bit": [ { "address": 1_048_576, "timestamp": 1_717_171_717 } ],
            "double_bit": [],
            "pending": false
        },
        "remapped_rows": { "correctable": 1, "uncorrectable": 0, "pending": false, "failure": false },
        "pcie_throughput": { "tx_kbps": 12_000, "rx_kbps": 34_000 },
        "xid_events": [ { "after_ms": 500, "xid": 13 } ],
    })
}

/// The `DCGM_…` field names in a text.
fn fields(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("DCGM_F") || word.starts_with("DCGM_EXP_"))
        .map(str::to_owned)
        .collect()
}

/// The dcgm series the rules file records.
fn recorded() -> BTreeSet<String> {
    let rules = std::fs::read_to_string(repo(RULES)).unwrap();
    rules
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("- record:"))
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("DCGM_"))
        .collect()
}

/// The doc's field table rows: (fields named in the first cell, whether
/// the vramd column says "none").
fn doc_rows() -> Vec<(BTreeSet<String>, bool)> {
    let doc = std::fs::read_to_string(repo(DOC)).unwrap();
    doc.lines()
        .filter(|line| line.starts_with("| `DCGM_"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (fields(cells[1]), cells[3].starts_with("none"))
        })
        .collect()
}

/// The single series `expr` returns: its labels and value.
fn single(prometheus: &Prometheus, expr: &str) -> (Value, f64) {
    let result = prometheus.query(expr).unwrap_or_else(|error| panic!("{expr}: {error}"));
    assert_eq!(result.len(), 1, "{expr}: {result:?}");
    let value = result[0]["value"][1].as_str().unwrap().parse().unwrap();
    (result[0]["metric"].clone(), value)
}

#[test]
fn dcgm_exporters_dashboard_runs_on_vramd_through_the_recording_rules() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeApi::serve(&dir.path().join("kubelet.sock"));
    let runtime = FakeApi::serve(&dir.path().join("containerd.sock"));
    kubelet.set_pods(vec![pod("train-0", "ml", "trainer", "nvidia.com/gpu", &[UUIDS[0]])]);
    let scenario = json!({ "devices": [
        device(UUIDS[0], "NVIDIA H100 80GB HBM3", 10 * GIB),
        device(UUIDS[1], "NVIDIA H100 80GB HBM3", 3 * GIB),
    ]});
    let pcie = [("VRAMD_NVML__PCIE_THROUGHPUT", "true")];
    let (_daemon, target) = start_on_fake_driver(dir.path(), &scenario, &kubelet, &runtime, &pcie);
    let prometheus = Prometheus::start_with(
        &format!("[{{job_name: {JOB}, static_configs: [{{targets: [\"{target}\"]}}]}}]"),
        &format!("rule_files: [\"{}\"]\n", repo(RULES).display()),
    );

    // Every recorded field has data, the pod's labels included, over a few
    // scrapes (the dashboard's ranges need samples).
    let recorded = recorded();
    prometheus.wait_for("not every recording rule has data after 3 scrapes", || {
        let scrapes = prometheus.query(&format!("sum_over_time(up{{job=\"{JOB}\"}}[1m]) >= 3"));
        let with_pod = prometheus.query(r#"DCGM_FI_DEV_FB_USED{pod="train-0"}"#).ok()?;
        let missing = recorded.iter().any(|name| {
            prometheus.query(&format!("count({name})")).map_or(true, |result| result.is_empty())
        });
        (!scrapes.ok()?.is_empty() && !with_pod.is_empty() && !missing).then_some(())
    });
    let rules: Vec<Value> = prometheus.api("/api/v1/rules")["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    let in_file = std::fs::read_to_string(repo(RULES)).unwrap().matches("- record:").count();
    assert_eq!(rules.len(), in_file, "Prometheus did not load every rule of {RULES}");
    let unhealthy: Vec<&Value> = rules.iter().filter(|rule| rule["health"] != "ok").collect();
    assert!(unhealthy.is_empty(), "{unhealthy:#?}");

    // dcgm's units and labels, from the scenario's values.
    let gpu0 = format!("{{UUID=\"{}\"}}", UUIDS[0]);
    let (labels, used) = single(&prometheus, &format!("DCGM_FI_DEV_FB_USED{gpu0}"));
    assert_eq!(used, 10240.0, "10 GiB in MiB");
    let host = target.ip().to_string();
    for (label, value) in [
        ("gpu", "0"),
        ("device", "nvidia0"),
        ("modelName", "NVIDIA H100 80GB HBM3"),
        ("pci_bus_id", "00000000:17:00.0"),
        ("Hostname", host.as_str()),
        ("hostname", host.as_str()),
        ("DCGM_FI_DRIVER_VERSION", "570.133.20"),
        ("pod", "train-0"),
        ("namespace", "ml"),
        ("container", "trainer"),
        ("job", JOB),
    ] {
        assert_eq!(labels[label], value, "{label} in {labels}");
    }
    let (labels, _) = single(&prometheus, &format!("DCGM_FI_DEV_FB_USED{{UUID=\"{}\"}}", UUIDS[1]));
    assert!(labels.get("pod").is_none(), "a GPU allocated to no pod has no pod label: {labels}");
    for (field, expected) in [
        ("DCGM_FI_DEV_FB_RESERVED", 512.0),
        ("DCGM_FI_DEV_FB_FREE", 80.0 * 1024.0 - 512.0 - 10240.0),
        ("DCGM_FI_DEV_GPU_UTIL", 87.0),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", 41.0),
        ("DCGM_FI_DEV_ENC_UTIL", 12.0),
        ("DCGM_FI_DEV_DEC_UTIL", 7.0),
        ("DCGM_FI_DEV_SM_CLOCK", 1980.0),
        ("DCGM_FI_DEV_MEM_CLOCK", 2619.0),
        ("DCGM_FI_DEV_GPU_TEMP", 64.0),
        ("DCGM_FI_DEV_POWER_USAGE", 412.0),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", 12_000.0 * 1024.0),
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 17.0),
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 1.0),
        ("DCGM_FI_DEV_RETIRED_SBE", 1.0),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 1.0),
    ] {
        let (_, value) = single(&prometheus, &format!("{field}{gpu0}"));
        assert!((value - expected).abs() < 1e-6, "{field}: {value}, expected {expected}");
    }
    let (_, energy) = single(&prometheus, &format!("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu0}"));
    assert!(energy >= 5_000_000.0, "energy in mJ from the driver's counter: {energy}");

    // dcgm-exporter's dashboard: every query naming only recorded fields
    // answers; the others name fields the doc says vramd has not.
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo(DASHBOARD)).unwrap()).unwrap();
    let mut queries = Vec::new();
    dashboard_exprs(&dashboard, "dcgm-exporter-dashboard.json", &mut queries);
    assert!(!queries.is_empty(), "no queries in {DASHBOARD}");
    let documented_none: BTreeSet<String> =
        doc_rows().into_iter().filter(|(_, none)| *none).flat_map(|(names, _)| names).collect();
    let (mut failures, mut unanswered) = (Vec::new(), Vec::new());
    for (what, expr) in &queries {
        let used = fields(expr);
        let provided = used.is_subset(&recorded);
        let answered = prometheus.query(expr).is_ok_and(|result| !result.is_empty());
        if !answered {
            unanswered.push(format!("{what}: {expr}"));
        }
        if provided && !answered {
            failures.push(format!("{what} uses only recorded fields but is empty: {expr}"));
        }
        for field in used.difference(&recorded) {
            if !documented_none.contains(field) {
                failures.push(format!("{what}: {field} is neither recorded nor in {DOC}"));
            }
        }
    }
    let answered = queries.len() - unanswered.len();
    println!(
        "dcgm-exporter dashboard: {answered} of {} queries answered; not answered:\n{}",
        queries.len(),
        unanswered.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let doc = std::fs::read_to_string(repo(DOC)).unwrap();
    let claim = format!("{answered} of its {} queries return data", queries.len());
    assert!(doc.contains(&claim), "{DOC} does not say \"{claim}\"");
}

#[test]
fn the_doc_lists_every_recorded_field_and_only_those_as_provided() {
    let rows = doc_rows();
    let provided: BTreeSet<String> =
        rows.iter().filter(|(_, none)| !none).flat_map(|(names, _)| names.clone()).collect();
    let provided: BTreeSet<String> =
        provided.into_iter().filter(|name| name != "DCGM_FI_DRIVER_VERSION").collect();
    assert_eq!(provided, recorded(), "{DOC}'s provided fields differ from {RULES}'s records");
    let none: Vec<String> =
        rows.iter().filter(|(_, none)| *none).flat_map(|(names, _)| names.clone()).collect();
    let both: Vec<&String> = none.iter().filter(|name| provided.contains(*name)).collect();
    assert!(both.is_empty(), "{both:?} both recorded and listed as none");
}
