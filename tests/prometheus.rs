//! The deployment artefacts against real tools: `promtool check rules`,
//! `promtool test rules` and `promtool check config` on `deploy/prometheus/`
//! (vramd's rules and the dcgm-exporter compatibility rules, which
//! tests/dcgm.rs runs live), `scripts/check-dashboards.py` on `dashboards/`
//! (and refusing a dashboard that names the job `vramd`), no rule matching a
//! job literally but the two about the scrape itself, and each PrometheusRule
//! under `deploy/kubernetes/` being exactly what
//! `scripts/sync-prometheusrule.py` makes of its rules file. Then, live: the
//! vramd binary on a simulated host (training-fragmentation at 15×, with
//! probe.headroom on: its exhaustion_forecast alert fires ~12 s in and stays
//! firing ~1 min; the simulator provides CUDA probe readings) scraped
//! by a real Prometheus on loopback (job="gpu-memory", scrape and evaluation every
//! 1 s, `deploy/prometheus/vramd-rules.yml` loaded). VramdForwardedAlert must
//! reach state firing for the daemon's alert; then every expression is run
//! through `/api/v1/query` and every failure is reported at once.
//!
//! What "returns data" means, per kind of expression:
//! - dashboard targets (`targets[].expr` anywhere in dashboards/*.json, rows
//!   included): `$__rate_interval`, `$__interval` and `$__range` become
//!   `30s`, any other template variable (`$instance`, `${gpu}` …) `.*`
//!   (dashboards use `=~` for variables); the result must be non-empty;
//! - `label_values(SELECTOR, LABEL)` variables: `count by (LABEL) (SELECTOR)`
//!   must be non-empty;
//! - recording rules: the expression must be non-empty;
//! - alerting rules, legitimately empty while nothing is wrong: the
//!   expression must be accepted, and every metric it names (identifiers
//!   outside strings starting `vramd_` or `vramd:`, and `up{…}`) must have
//!   data;
//! - every rule's health in `/api/v1/rules` must be `ok`.
//!
//! Needs `/usr/bin/prometheus` and `promtool` (Debian package `prometheus`)
//! and `python3`; `scripts/test.sh` installs them. Every wait is bounded;
//! both processes are killed when the test ends, pass or fail.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Real processes and sockets: wall-clock waits are what this test measures.
#![allow(clippy::disallowed_types)]

#[path = "support/pki.rs"]
mod pki;
#[path = "support/prometheus.rs"]
mod prom;
mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;

use prom::{Prometheus, dashboard_exprs, repo, substitute, tool, verdict};
use support::SERVE;

const RULES: &str = "deploy/prometheus/vramd-rules.yml";
const DCGM_RULES: &str = "deploy/prometheus/dcgm-compat-rules.yml";

/// The scrape job's name: not `vramd`, so that a dashboard or recording
/// rule that assumed it would return nothing here (issue 36).
const JOB: &str = "gpu-memory";

/// `scripts/sync-prometheusrule.py`'s transformation: the rules file from
/// its `groups:` line on, non-empty lines indented by two spaces.
fn prometheusrule_groups(rules: &str) -> String {
    let start = rules.lines().position(|line| line == "groups:").expect("no `groups:` line");
    let indent =
        |line: &str| if line.trim().is_empty() { String::new() } else { format!("  {line}") };
    rules.lines().skip(start).map(|line| indent(line) + "\n").collect()
}

/// Each rules file and the PrometheusRule `scripts/sync-prometheusrule.py`
/// makes of it.
const RULE_FILES: [(&str, &str); 2] = [
    (RULES, "deploy/kubernetes/prometheusrule.yaml"),
    (DCGM_RULES, "deploy/kubernetes/prometheusrule-dcgm.yaml"),
];

/// The rules that may name a job: they are about the scrape itself, and a
/// target that is down has no vramd series to select instead.
const SCRAPE_RULES: [&str; 2] = ["VramdExporterDown", "VramdExporterMissing"];

/// The names of the rules in a rules file that match a job by a literal
/// value (`job="vramd"`) rather than selecting vramd's series by name.
fn rules_naming_a_job(rules: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current = String::new();
    for line in rules.lines().map(str::trim_start).filter(|line| !line.starts_with('#')) {
        if let Some(name) = line.strip_prefix("- record:").or(line.strip_prefix("- alert:")) {
            current = name.trim().to_owned();
        }
        let literal = line.match_indices("job").any(|(at, _)| {
            let after = line[at + 3..].trim_start();
            let value = ["=~", "!~", "!=", "="].iter().find_map(|op| after.strip_prefix(op));
            value.is_some_and(|value| value.trim_start().starts_with('"'))
                && !line[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        });
        if literal && !found.contains(&current) {
            found.push(current.clone());
        }
    }
    found
}

#[test]
fn rules_dashboards_and_manifests_pass_their_static_checks() {
    for args in [
        &["check", "rules", RULES, DCGM_RULES][..],
        &["test", "rules", "deploy/prometheus/vramd-rules.test.yml"],
        &["test", "rules", "deploy/prometheus/dcgm-compat-rules.test.yml"],
        &["check", "config", "deploy/prometheus/prometheus.yml"],
    ] {
        let (ok, said) = tool("promtool", args);
        assert!(ok, "promtool {} failed:\n{said}", args.join(" "));
    }
    let (ok, said) = tool("python3", &["scripts/check-dashboards.py"]);
    assert!(ok, "scripts/check-dashboards.py failed:\n{said}");

    for (rules_file, manifest_file) in RULE_FILES {
        let rules = std::fs::read_to_string(repo(rules_file)).unwrap();
        let manifest = std::fs::read_to_string(repo(manifest_file)).unwrap();
        let groups = manifest.split_once("\nspec:\n").map(|(_, groups)| groups);
        assert!(
            groups == Some(prometheusrule_groups(&rules).as_str()),
            "{manifest_file}'s spec.groups differs from {rules_file}: run \
             scripts/sync-prometheusrule.py"
        );
        let naming: Vec<String> = rules_naming_a_job(&rules)
            .into_iter()
            .filter(|name| !SCRAPE_RULES.contains(&name.as_str()))
            .collect();
        assert!(
            naming.is_empty(),
            "{rules_file}: {naming:?} match a job literally; select vramd's series by name so \
             that any scrape job name works"
        );
    }
}

/// A dashboard that names the job `vramd`, in a panel or in a variable,
/// returns nothing when vramd is scraped under another job name:
/// scripts/check-dashboards.py refuses both.
#[test]
fn check_dashboards_refuses_a_job_named_literally() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo("dashboards/fleet-overview.json")).unwrap();
    let literal = text.replace(r#"job=~\"$job\""#, r#"job=\"vramd\""#);
    assert_ne!(literal, text, "fleet-overview.json no longer selects job=~\"$job\"");
    std::fs::write(dir.path().join("fleet-overview.json"), literal).unwrap();
    let (ok, said) =
        tool("python3", &["scripts/check-dashboards.py", dir.path().to_str().unwrap()]);
    assert!(!ok, "check-dashboards.py accepted job=\"vramd\":\n{said}");
    assert!(said.contains("variable `instance` names a job literally"), "{said}");
    assert!(said.contains("target A: names a job literally"), "{said}");
}

/// Starts Prometheus scraping vramd at `target` under `JOB`, with `RULES`
/// loaded.
fn start(target: SocketAddr) -> Prometheus {
    Prometheus::start_with(
        &format!("[{{job_name: {JOB}, static_configs: [{{targets: [\"{target}\"]}}]}}]"),
        &format!("rule_files: [\"{}\"]\n", repo(RULES).display()),
    )
}

/// The metric names an expression selects: identifiers outside string
/// literals that start with `vramd_` or `vramd:`, and `up` before a `{`.
fn metric_names(expr: &str) -> Vec<String> {
    let (mut code, mut quote, mut escaped) = (String::new(), None, false);
    for c in expr.chars() {
        if let Some(open) = quote {
            quote = (c != open || escaped).then_some(open);
            escaped = c == '\\' && !escaped;
        } else if matches!(c, '"' | '\'' | '`') {
            quote = Some(c);
        }
        code.push(if quote.is_some() { ' ' } else { c });
    }
    let mut names: Vec<String> = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '{')))
        .filter_map(|token| {
            let (name, selector) = token.split_once('{').map_or((token, false), |(n, _)| (n, true));
            let metric = name.starts_with("vramd_") || name.starts_with("vramd:");
            (metric || (name == "up" && selector)).then(|| name.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_dashboard_and_rule_expression_returns_data_from_a_real_prometheus() {
    // Recording too, so the recording's series and rule have data.
    let trace_dir = tempfile::tempdir().unwrap();
    let trace = trace_dir.path().join("trace.ndjson");
    let record = ["--record", trace.to_str().unwrap()];
    let mut daemon = support::Process::spawn(
        &[&["--simulate", "training-fragmentation", "--speed", "15"][..], &record, &SERVE].concat(),
        // The headroom search is off by default; its panel needs it.
        &[("VRAMD_PROBE__HEADROOM", "true")],
    );
    let target = daemon.listening();
    daemon.wait_ready(target);
    let prometheus = start(target);

    // The daemon's first firing alert, then Prometheus forwarding it.
    let fired = prometheus.wait_for("vramd raised no firing alert", || {
        let alerts = support::get(target, "/api/v1/alerts?state=firing").json();
        alerts["alerts"].as_array().and_then(|list| list.first().cloned())
    });
    let what = format!("VramdForwardedAlert did not fire for {fired}");
    let forwarded = prometheus.wait_for(&what, || {
        let alerts = prometheus.api("/api/v1/alerts")["alerts"].clone();
        let ours = |alert: &&Value| {
            alert["labels"]["alertname"] == "VramdForwardedAlert"
                && alert["labels"]["rule"] == fired["rule"]
                && alert["labels"]["uuid"] == fired["uuid"]
                && alert["state"] == "firing"
        };
        alerts.as_array().into_iter().flatten().find(ours).cloned()
    });
    let labels = &forwarded["labels"];
    let alertname = labels["vramd_alertname"].as_str().unwrap_or_default();
    assert!(alertname.starts_with("Vramd"), "{forwarded:#}");
    assert_eq!(labels["severity"], fired["severity"], "{forwarded:#}");
    assert_eq!(labels["gpu"], fired["gpu"].to_string().as_str(), "{forwarded:#}");
    let summary = forwarded["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(summary.starts_with(alertname), "{forwarded:#}");

    // A few scrapes, so that range functions over RANGE have samples.
    prometheus.wait_for("fewer than 5 successful scrapes", || {
        let result =
            prometheus.query(&format!("sum_over_time(up{{job=\"{JOB}\"}}[1m]) >= 5")).ok()?;
        (!result.is_empty()).then_some(())
    });

    let (mut failures, mut exprs) = (Vec::new(), Vec::new());
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("dashboards"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no dashboards/*.json");
    for path in &files {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let name = path.file_name().unwrap().to_string_lossy();
        dashboard_exprs(&dashboard, &name, &mut exprs);
    }
    for (what, expr) in &exprs {
        failures.extend(verdict(what, expr, prometheus.query(expr)));
    }

    let groups = prometheus.api("/api/v1/rules")["groups"].clone();
    let rules: Vec<Value> = groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    let in_file = std::fs::read_to_string(repo(RULES)).unwrap();
    let in_file = in_file.lines().filter(|line| {
        let line = line.trim_start();
        line.starts_with("- record:") || line.starts_with("- alert:")
    });
    assert_eq!(rules.len(), in_file.count(), "Prometheus did not load every rule of {RULES}");
    for rule in &rules {
        let name = rule["name"].as_str().unwrap_or_default();
        let expr = rule["query"].as_str().unwrap_or_default();
        if rule["health"] != "ok" {
            failures
                .push(format!("rule {name}: health {} ({})", rule["health"], rule["lastError"]));
        }
        if rule["type"] == "recording" {
            failures.extend(verdict(
                &format!("recording rule {name}"),
                expr,
                prometheus.query(expr),
            ));
            continue;
        }
        if let Err(error) = prometheus.query(expr) {
            failures.push(format!("alerting rule {name}: {error}: {expr}"));
        }
        for metric in metric_names(expr) {
            let what = format!("alerting rule {name}: metric {metric}");
            failures.extend(verdict(&what, &metric, prometheus.query(&format!("count({metric})"))));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} dashboard expressions and {} rules failed (daemon alert forwarded: {}):\n{}",
        failures.len(),
        exprs.len(),
        rules.len(),
        alertname,
        failures.join("\n")
    );
}

#[test]
fn substitution_and_metric_names_follow_the_documented_rules() {
    let rules = concat!(
        "  - record: a\n    expr: sum by (job) (x{job=~\"$job\"})\n",
        "  # job=\"vramd\" in a comment\n",
        "  - alert: B\n    expr: up{job = \"vramd\"} == 0\n",
        "  - record: c\n    expr: y{cronjob=\"x\"}\n",
    );
    assert_eq!(rules_naming_a_job(rules), ["a", "B"]);
    assert_eq!(
        substitute(r#"rate(x{a=~"$instance",b=~"${gpu}",c=~"${pid:regex}"}[$__rate_interval])"#),
        r#"rate(x{a=~".*",b=~".*",c=~".*"}[30s])"#
    );
    assert_eq!(
        substitute(r#"label_replace(x, "y", "$1", "z", "(.*)")"#),
        r#"label_replace(x, "y", "$1", "z", "(.*)")"#
    );
    assert_eq!(
        metric_names(concat!(
            r#"absent(up{job="vramd"}) or vramd:a:ratio > 1 unless "#,
            r#"label_replace(vramd_b, "vramd_c", "$1", "d", "up")"#
        )),
        ["up", "vramd:a:ratio", "vramd_b"]
    );
}

/// The secure surface as Prometheus sees it: one vramd over TLS with basic
/// auth, one over TLS requiring a client certificate, each scraped by a job
/// with the right credentials (`up` 1) and one without (`up` 0), using
/// Prometheus' own `scheme`, `tls_config` and `basic_auth`, as
/// docs/deploy.md documents them.
#[test]
fn a_real_prometheus_scrapes_over_tls_with_basic_auth_and_client_certificates() {
    let pki = pki::Pki::new();
    pki.leaf("server", &["localhost", "127.0.0.1"], false, false);
    pki.leaf("prometheus", &["prometheus"], false, false);
    let dir = pki.path("");
    let dir = dir.display();
    let hash = bcrypt::hash("scrape secret", 4).unwrap();

    let basic = pki.path("basic.yml");
    let text =
        format!("{}basic_auth_users:\n  prometheus: {hash}\n", pki.tls("server", "NoClientCert"));
    std::fs::write(&basic, text).unwrap();
    let certs = pki.path("certs.yml");
    std::fs::write(&certs, pki.tls("server", "RequireAndVerifyClientCert")).unwrap();

    let start = |web: &Path| {
        let args = [
            &["--simulate", "steady-inference", "--web.config.file"][..],
            &[web.to_str().unwrap()],
            &SERVE,
        ]
        .concat();
        let mut daemon = support::Process::spawn(&args, &[]);
        let addr = daemon.listening();
        (daemon, addr)
    };
    let (_basic_daemon, basic_addr) = start(&basic);
    let (_cert_daemon, cert_addr) = start(&certs);

    let tls = |extra: &str| format!("{{ca_file: \"{dir}/ca.pem\", server_name: localhost{extra}}}");
    let client =
        format!(", cert_file: \"{dir}/prometheus.pem\", key_file: \"{dir}/prometheus-key.pem\"");
    let job = |name: &str, target: SocketAddr, tls_config: String, auth: &str| {
        format!(
            "{{job_name: {name}, scheme: https, tls_config: {tls_config}{auth}, \
             static_configs: [{{targets: [\"{target}\"]}}]}}"
        )
    };
    let jobs = [
        job(
            "basic_auth",
            basic_addr,
            tls(""),
            ", basic_auth: {username: prometheus, password: \"scrape secret\"}",
        ),
        job(
            "wrong_password",
            basic_addr,
            tls(""),
            ", basic_auth: {username: prometheus, password: wrong}",
        ),
        job("client_cert", cert_addr, tls(&client), ""),
        job("no_cert", cert_addr, tls(""), ""),
    ];
    let prometheus = Prometheus::start_with(&format!("[{}]", jobs.join(", ")), "");

    let up = |job: &str| {
        let result = prometheus.query(&format!("up{{job=\"{job}\"}}")).ok()?;
        result.first()?["value"][1].as_str().map(str::to_owned)
    };
    // Every job scraped at least twice, so `up` is settled.
    prometheus.wait_for("not every job was scraped twice", || {
        let counts = prometheus.query("count_over_time(up[1m]) >= 2").ok()?;
        (counts.len() == 4).then_some(())
    });
    let verdicts: Vec<(&str, Option<String>)> =
        ["basic_auth", "wrong_password", "client_cert", "no_cert"]
            .iter()
            .map(|job| (*job, up(job)))
            .collect();
    let expected = [
        ("basic_auth", Some("1".to_owned())),
        ("wrong_password", Some("0".to_owned())),
        ("client_cert", Some("1".to_owned())),
        ("no_cert", Some("0".to_owned())),
    ];
    assert_eq!(verdicts, expected, "targets: {}", prometheus.api("/api/v1/targets"));
    // The successful scrapes carried vramd's own series.
    let series = prometheus.query("vramd_build_info").unwrap();
    let jobs: Vec<&str> = series.iter().filter_map(|s| s["metric"]["job"].as_str()).collect();
    assert!(jobs.contains(&"basic_auth") && jobs.contains(&"client_cert"), "{series:?}");
}
