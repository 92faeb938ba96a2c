//! Golden files for the wire formats: `/metrics` device series and the
//! device REST document, for a fixed seed and simulated time; and the
//! configuration error messages, word for word.
//!
//! A difference fails the test. When a change to the output is intended,
//! regenerate deliberately with `VRAMD_UPDATE_GOLDEN=1 cargo test --test golden`
//! and review the diff of `tests/golden/` before committing.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;

use vramd::alerts::board::AlertBoard;
use vramd::analysis::snapshot::AnalysisBoard;
use vramd::api::{self, AppState, Limits};
use vramd::cli::Overrides;
use vramd::clock::ScaledClock;
use vramd::config::LoadOptions;
use vramd::exposition::MetricsConfig;
use vramd::history::{HistoryStore, Sizing};
use vramd::kubernetes::proto::{
    Container, ContainerDevices, ContainerResources, ListContainersResponse,
    ListPodResourcesResponse, PodResources,
};
use vramd::kubernetes::{self, Attribution};
use vramd::play::{self, Schedule};
use vramd::source::DeviceSource;
use vramd::source::simulator::{
    GOLDEN_ORIGIN, ScenarioKind, Simulator, SimulatorSpec, container_id,
};
use vramd::telemetry::Telemetry;

/// The default `sampler.max_processes_per_device`, as the daemon applies it.
fn cap() -> play::ProcessCap {
    play::ProcessCap(vramd::app::Config::default().sampler.max_processes_per_device.get())
}

/// Plays `scenario` from its start to `until` at 4 Hz fast / 1 Hz slow.
fn store_after(scenario: ScenarioKind, gpus: u32, until: Duration) -> Arc<HistoryStore> {
    let spec = SimulatorSpec { scenario, gpus, seed: 42 };
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    let simulator = Simulator::with_origin(spec, clock, GOLDEN_ORIGIN).unwrap();
    let store = Arc::new(HistoryStore::new(Sizing {
        fast_capacity: 20_000,
        slow_capacity: 5_000,
        peak_window: Duration::from_secs(60),
        oom_events: 64,
    }));
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        duration: until,
        fast: Duration::from_millis(250),
        slow: Duration::from_secs(1),
    };
    play::play_simulator(&simulator, &store, schedule, cap(), |_| {}).unwrap();
    store.mark_cycle_completed();
    store
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

fn check_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var_os("VRAMD_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!("{}: {error}; create it with VRAMD_UPDATE_GOLDEN=1", path.display())
    });
    if expected != actual {
        let first_difference = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .find(|(_, (want, got))| want != got)
            .map(|(line, (want, got))| {
                format!("line {}:\n  golden: {want}\n  actual: {got}", line + 1)
            })
            .unwrap_or_else(|| "one output is a prefix of the other".to_owned());
        panic!(
            "{name} differs from the golden file ({first_difference}).\nIf the change is intended, regenerate with VRAMD_UPDATE_GOLDEN=1 and review the diff."
        );
    }
}

#[test]
fn metrics_for_a_multi_tenant_host_match_the_golden_file() {
    let store = store_after(ScenarioKind::MultiTenant, 2, Duration::from_secs(300));
    let text =
        String::from_utf8(vramd::exposition::render_devices(&store, &Default::default())).unwrap();
    check_golden("metrics-multi-tenant.txt", &text);
}

#[test]
fn metrics_for_a_lost_device_leave_its_values_out() {
    let store = store_after(ScenarioKind::DeviceLost, 2, Duration::from_secs(360));
    let text =
        String::from_utf8(vramd::exposition::render_devices(&store, &Default::default())).unwrap();
    check_golden("metrics-device-lost.txt", &text);
    let lost_uuid = store.devices()[1].info().uuid.clone();
    assert!(text.contains(&format!("vramd_device_up{{gpu=\"1\",uuid=\"{lost_uuid}\"}} 0")));
    assert!(!text.contains("vramd_memory_used_bytes{gpu=\"1\""));
}

/// Plays two multi-tenant GPUs as on a Kubernetes node: every process in a
/// container, GPU 0 whole to one pod, GPU 1 time-sliced (`::N`) between two
/// pods whose processes alternate by PID; joined as the daemon's sampler
/// joins the kubelet's and the runtime's answers.
fn store_with_pods(until: Duration) -> Arc<HistoryStore> {
    let spec = SimulatorSpec { scenario: ScenarioKind::MultiTenant, gpus: 2, seed: 42 };
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    let simulator = Simulator::with_origin(spec, clock, GOLDEN_ORIGIN).unwrap();
    let store = Arc::new(HistoryStore::new(Sizing {
        fast_capacity: 20_000,
        slow_capacity: 5_000,
        peak_window: Duration::from_secs(60),
        oom_events: 64,
    }));
    let devices = store.set_devices(simulator.devices().unwrap());
    let infos: Vec<_> = devices.iter().map(|device| device.info().clone()).collect();
    let kubelet = ListPodResourcesResponse {
        pod_resources: vec![
            pod_resources("train-0", "ml", "trainer", &infos[0].uuid),
            pod_resources("infer-a", "serving", "server", &format!("{}::0", infos[1].uuid)),
            pod_resources("infer-b", "serving", "server", &format!("{}::1", infos[1].uuid)),
        ],
    };
    // The kubelet could hand out GPU 0 (by index, as GKE names it) and GPU
    // 1's replicas.
    let allocatable = vec!["nvidia0".to_owned(), infos[1].uuid.to_string()];
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        duration: until,
        fast: Duration::from_millis(250),
        slow: Duration::from_secs(1),
    };
    let slow = |index: u32, at| {
        let mut reading = simulator.slow_at(index, at)?;
        let mut runtime = ListContainersResponse::default();
        for process in reading.processes.iter_mut().flatten() {
            let id = container_id(index, process.pid);
            let (pod, namespace, name) = match (index, process.pid % 2) {
                (0, _) => ("train-0", "ml", "trainer"),
                (_, 0) => ("infer-a", "serving", "server"),
                _ => ("infer-b", "serving", "server"),
            };
            runtime.containers.push(runtime_container(&id, pod, namespace, name));
            process.details.container_id = Some(id.into());
        }
        let attribution = Attribution {
            allocations: Some(kubernetes::allocations(kubelet.clone(), 64).0),
            containers: Some(kubernetes::containers(runtime, 64).0),
            allocatable: Some(allocatable.clone()),
        };
        attribution.join(&infos[index as usize], &mut reading);
        Ok(reading)
    };
    play::play(&devices, schedule, cap(), |index, at| simulator.fast_at(index, at), slow, |_| {});
    store.mark_cycle_completed();
    store
}

fn pod_resources(name: &str, namespace: &str, container: &str, device_id: &str) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: vec![ContainerDevices {
                resource_name: "nvidia.com/gpu".into(),
                device_ids: vec![device_id.into()],
            }],
            dynamic_resources: vec![],
        }],
    }
}

fn runtime_container(id: &str, pod: &str, namespace: &str, name: &str) -> Container {
    let labels = [
        ("io.kubernetes.pod.name", pod),
        ("io.kubernetes.pod.namespace", namespace),
        ("io.kubernetes.pod.uid", &format!("uid-{pod}")),
        ("io.kubernetes.container.name", name),
    ];
    Container {
        id: id.into(),
        metadata: None,
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
    }
}

#[test]
fn metrics_with_pod_labels_match_the_golden_file() {
    let store = store_with_pods(Duration::from_secs(120));
    // GPU 0, held by one pod, carries it on its device series; GPU 1,
    // shared by two, does not.
    let config = MetricsConfig { device_pod_labels: true, ..MetricsConfig::default() };
    let text = String::from_utf8(vramd::exposition::render_devices(&store, &config)).unwrap();
    check_golden("metrics-kubernetes.txt", &text);
}

#[tokio::test]
async fn device_document_with_pods_matches_the_golden_file() {
    let store = store_with_pods(Duration::from_secs(120));
    let pretty = device_document(store, 1).await;
    check_golden("device-kubernetes.json", &pretty);
}

/// `GET /api/v1/devices/{index}` on `store`, pretty-printed.
async fn device_document(store: Arc<HistoryStore>, index: u32) -> String {
    let state = AppState::new(
        store,
        Arc::new(Telemetry::new("simulator").unwrap()),
        Arc::new(AnalysisBoard::default()),
        Arc::new(AlertBoard::new(16, 1)),
        Limits {
            request_timeout: Duration::from_secs(5),
            snapshot_upload_timeout: Duration::from_secs(300),
            max_request_body_bytes: 1024,
            max_concurrent_requests: 4,
            max_concurrent_scrapes: 4,
            max_history_points: 1_000,
            retention: Duration::from_secs(3_600),
            max_event_streams: 2,
        },
        vramd::app::report_intake(&vramd::app::Config::default(), None),
    );
    let uri = format!("/api/v1/devices/{index}");
    let response = api::router(state)
        .oneshot(Request::builder().uri(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut pretty = serde_json::to_string_pretty(&value).unwrap();
    pretty.push('\n');
    pretty
}

#[tokio::test]
async fn device_document_matches_the_golden_file() {
    let store = store_after(ScenarioKind::TrainingFragmentation, 1, Duration::from_secs(900));
    let pretty = device_document(store, 0).await;
    check_golden("device-training-fragmentation.json", &pretty);
}

/// One invalid configuration: a file's text, environment variables and
/// command-line options, each layer optional.
struct BadConfig {
    file: Option<&'static str>,
    env: &'static [(&'static str, &'static str)],
    overrides: Overrides,
}

fn env_only(env: &'static [(&'static str, &'static str)]) -> BadConfig {
    BadConfig { file: None, env, overrides: Overrides::default() }
}

fn file_only(file: &'static str) -> BadConfig {
    BadConfig { file: Some(file), env: &[], overrides: Overrides::default() }
}

fn flags_only(overrides: Overrides) -> BadConfig {
    BadConfig { file: None, env: &[], overrides }
}

/// The message `vramd` prints (after its `invalid configuration:` prefix)
/// for `bad`, with the temporary file's directory written as `$DIR`.
fn config_error(bad: &BadConfig) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config_path = bad.file.map(|text| {
        let path = dir.path().join("vramd.toml");
        std::fs::write(&path, text).unwrap();
        path
    });
    let options = LoadOptions {
        config_path,
        search_paths: Vec::new(),
        env: bad.env.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect(),
        overrides: bad.overrides.entries(),
    };
    let message = match vramd::app::load(&options) {
        Ok(_) => "(accepted)".to_owned(),
        Err(error) => error.to_string(),
    };
    message.replace(&dir.path().display().to_string(), "$DIR").replace('\n', "\n    ")
}

/// The configuration errors users see, word for word: each names the key,
/// the value, the layer it came from and the reason. A change to the
/// configuration machinery must leave these unchanged unless a message is
/// meant to improve (then regenerate and review the diff).
#[test]
fn configuration_errors_match_the_golden_file() {
    let cases: Vec<(&str, BadConfig)> = vec![
        ("unknown key, suggested", env_only(&[("VRAMD_SAMPLER__FAST_INTERVALL", "1s")])),
        ("unknown rule table", env_only(&[("VRAMD_ALERTS__MEMORY_HGH__THRESHOLD", "0.9")])),
        ("unknown key, nothing near", env_only(&[("VRAMD_COMPLETELY__DIFFERENT", "1")])),
        ("section as a value", env_only(&[("VRAMD_SAMPLER", "1")])),
        ("rule table as a value", env_only(&[("VRAMD_ALERTS__MEMORY_HIGH", "1")])),
        (
            "same key from two variables",
            env_only(&[
                ("VRAMD_SAMPLER__FAST_INTERVAL", "1s"),
                ("VRAMD_SAMPLER__fast_interval", "2s"),
            ]),
        ),
        ("duration without unit", env_only(&[("VRAMD_SAMPLER__FAST_INTERVAL", "1")])),
        ("duration empty", env_only(&[("VRAMD_SAMPLER__FAST_INTERVAL", "")])),
        ("duration above its bound", env_only(&[("VRAMD_HISTORY__RETENTION", "30d")])),
        ("duration below its bound", env_only(&[("VRAMD_PROBE__TIMEOUT", "1ms")])),
        ("count of zero", env_only(&[("VRAMD_SIMULATOR__GPUS", "0")])),
        ("count not a number", env_only(&[("VRAMD_SIMULATOR__GPUS", "two")])),
        ("count from a flag", flags_only(Overrides { gpus: Some(99), ..Overrides::default() })),
        ("size with a bad unit", env_only(&[("VRAMD_SOURCE__MAX_TRACE_SIZE", "12XB")])),
        ("size above its bound", env_only(&[("VRAMD_SOURCE__MAX_TRACE_LINE", "1TiB")])),
        ("boolean spelled yes", env_only(&[("VRAMD_NVML__XID_EVENTS", "yes")])),
        ("address with a host name", env_only(&[("VRAMD_SERVER__LISTEN", "localhost:9477")])),
        ("threshold not a number", env_only(&[("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "abc")])),
        ("ratio above 1", env_only(&[("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "1.5")])),
        ("severity unknown", env_only(&[("VRAMD_ALERTS__MEMORY_HIGH__SEVERITY", "page")])),
        ("min_fit above 1", env_only(&[("VRAMD_ALERTS__EXHAUSTION_FORECAST__MIN_FIT", "2")])),
        ("record mode unknown", env_only(&[("VRAMD_SOURCE__RECORD_MODE", "append")])),
        ("url scheme", env_only(&[("VRAMD_NOTIFY__WEBHOOK_URL", "ftp://hooks")])),
        ("log filter", env_only(&[("VRAMD_LOG__LEVEL", "info,vramd=loud")])),
        (
            "log format from a flag",
            flags_only(Overrides { log_format: Some("xml".into()), ..Overrides::default() }),
        ),
        ("speed of zero", flags_only(Overrides { speed: Some(0.0), ..Overrides::default() })),
        (
            "clear above threshold",
            file_only("[alerts.memory_high]\nthreshold = 0.8\nclear = 0.9\n"),
        ),
        ("unknown key in the file", file_only("[sampler]\nfast_intervall = \"1s\"\n")),
        ("unknown section in the file", file_only("[samplr]\nfast_interval = \"1s\"\n")),
        ("list where a value belongs", file_only("[sampler]\nfast_interval = [\"1s\"]\n")),
        ("date where a duration belongs", file_only("[history]\nretention = 1979-05-27\n")),
        ("duration as a number", file_only("[sampler]\nfast_interval = 250\n")),
        ("size as a fraction of a byte", file_only("[source]\nmax_trace_line = 1024.5\n")),
        ("negative size", file_only("[source]\nmax_trace_line = -1\n")),
        ("not TOML", file_only("[sampler\nfast_interval = \"1s\"\n")),
        (
            "headroom budget not below the probe timeout",
            env_only(&[
                ("VRAMD_PROBE__TIMEOUT", "5s"),
                ("VRAMD_PROBE__HEADROOM_TIME_BUDGET", "5s"),
            ]),
        ),
        (
            "slow interval below the fast one",
            file_only("[sampler]\nfast_interval = \"2s\"\nslow_interval = \"1s\"\n"),
        ),
        (
            "too many samples per device",
            env_only(&[
                ("VRAMD_SAMPLER__FAST_INTERVAL", "10ms"),
                ("VRAMD_HISTORY__RETENTION", "7d"),
            ]),
        ),
        (
            "simulate and replay",
            BadConfig {
                file: None,
                env: &[("VRAMD_SOURCE__REPLAY", "/tmp/trace.ndjson")],
                overrides: Overrides { simulate: Some("leak".into()), ..Overrides::default() },
            },
        ),
        (
            "recording into the replayed trace",
            BadConfig {
                file: Some("[source]\nreplay = \"/tmp/trace.ndjson\"\n"),
                env: &[],
                overrides: Overrides {
                    record: Some(PathBuf::from("/tmp/trace.ndjson")),
                    ..Overrides::default()
                },
            },
        ),
    ];
    let mut out = String::new();
    for (name, bad) in &cases {
        out.push_str(&format!("# {name}\n{}\n", config_error(bad)));
    }
    check_golden("config-errors.txt", &out);
}
