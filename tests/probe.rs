//! The real CUDA probe path (`vramd probe` → `cuda-driver` →
//! `libcuda.so.1`) against the fake driver library built from
//! `tests/fake-cuda`: the probe command on its own (success, missing
//! library, missing symbol, init failure, allocation failure, unknown
//! device, the headroom search), and the daemon scheduling it against the
//! fake NVML and fake CUDA together (readings in /metrics and REST, a hung
//! probe killed at its deadline).

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_types)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cuda_fake::harness as cuda;
use nvidia_ml_fake::harness as nvml;
use serde_json::{Value, json};
use tempfile::TempDir;

use support::{Deadline, Process, SERVE, eventually, get, pause, sample};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const UUID: &str = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20";

/// A directory with the fake libcuda.so.1, a scenario and a call log.
struct FakeCuda {
    _dir: TempDir,
    library: PathBuf,
    scenario: PathBuf,
    log: PathBuf,
}

impl FakeCuda {
    fn new(scenario: &Value) -> Self {
        let built = cuda::build_fake_library().unwrap_or_else(|error| panic!("{error}"));
        let dir = TempDir::new().unwrap();
        let library = cuda::install_as_libcuda(dir.path(), &built);
        let scenario = cuda::write_scenario(dir.path(), scenario);
        let log = dir.path().join("calls.log");
        Self { _dir: dir, library, scenario, log }
    }

    fn calls(&self) -> Vec<String> {
        cuda::read_log(&self.log)
    }
}

fn device(extra: Value) -> Value {
    let mut device = json!({
        "uuid": UUID,
        "name": "NVIDIA H100 80GB HBM3",
        "total_bytes": 80 * GIB,
        "free_bytes": 60 * GIB,
        "context_bytes": 500 * MIB,
    });
    for (key, value) in extra.as_object().unwrap() {
        device[key] = value.clone();
    }
    device
}

/// Runs `vramd probe --json` with extra arguments; returns the exit
/// status and the answer.
fn probe(fake: &FakeCuda, library: &Path, extra: &[&str]) -> (i32, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_vramd"))
        .args(["probe", "--json", "--device", UUID, "--cuda-library"])
        .arg(library)
        .args(["--nvml-library", "/nonexistent/libnvidia-ml.so.1"])
        .args(extra)
        .env(cuda::SCENARIO_ENV, &fake.scenario)
        .env(cuda::LOG_ENV, &fake.log)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("not JSON ({error}): {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr))
    });
    (output.status.code().unwrap_or(-1), answer)
}

fn failure_kind(answer: &Value) -> &str {
    answer["failure"]["kind"].as_str().unwrap_or_else(|| panic!("no failure in {answer}"))
}

#[test]
fn probe_reads_the_driver_and_releases_everything() {
    let fake = FakeCuda::new(&json!({ "devices": [device(json!({}))] }));
    let (status, answer) = probe(&fake, &fake.library, &["--samples", "3"]);
    assert_eq!(status, 0, "{answer}");
    let reading = &answer["reading"];
    // The probe's own context is alive while it reads cuMemGetInfo.
    assert_eq!(reading["cuda_free_bytes"], 60 * GIB - 500 * MIB);
    assert_eq!(reading["cuda_total_bytes"], 80 * GIB);
    assert_eq!(reading["alloc_block_bytes"], 64 * MIB);
    assert_eq!(reading["alloc_samples"], 3);
    assert!(reading["alloc_latency_seconds"].as_f64().unwrap() >= 0.0);
    assert!(reading["context_create_seconds"].as_f64().unwrap() >= 0.0);
    // NVML was not available: its values are absent, not zero.
    assert!(reading.get("nvml_free_bytes").is_none() && reading.get("context_bytes").is_none());
    assert!(reading.get("headroom").is_none());
    let calls = fake.calls();
    let count = |prefix: &str| calls.iter().filter(|line| line.starts_with(prefix)).count();
    assert_eq!(count("cuCtxCreate_v2 ok"), 1, "{calls:?}");
    assert_eq!(count("cuCtxDestroy_v2 ok"), 1, "{calls:?}");
    assert_eq!(count("cuMemAlloc_v2 ok"), 3, "{calls:?}");
    assert_eq!(count("cuMemFree_v2 ok"), 3, "{calls:?}");
}

#[test]
fn probe_headroom_search_finds_the_driver_limit_above_the_margin() {
    let limited = device(json!({ "max_alloc_bytes": 13 * GIB + 100 * MIB }));
    let fake = FakeCuda::new(&json!({ "devices": [limited] }));
    let (status, answer) = probe(&fake, &fake.library, &["--headroom", "--margin", "2GiB"]);
    assert_eq!(status, 0, "{answer}");
    let search = &answer["reading"]["headroom"];
    assert_eq!(search["stopped"], "converged", "{search}");
    let largest = search["largest_block_bytes"].as_u64().unwrap();
    assert!(
        largest <= 13 * GIB + 100 * MIB && largest + 2 * MIB > 13 * GIB + 100 * MIB,
        "{largest}"
    );
    assert_eq!(search["margin_bytes"], 2 * GIB);
    // Every block was released: as many frees as successful allocations.
    let calls = fake.calls();
    let ok = |call: &str| calls.iter().filter(|line| *line == &format!("{call} ok")).count();
    assert_eq!(ok("cuMemAlloc_v2"), ok("cuMemFree_v2"), "{calls:?}");

    // Free memory within the margin: nothing is tried, the answer is 0.
    let tight =
        FakeCuda::new(&json!({ "devices": [device(json!({ "free_bytes": GIB + 400 * MIB }))] }));
    let (status, answer) = probe(&tight, &tight.library, &["--headroom", "--margin", "1GiB"]);
    assert_eq!(status, 0, "{answer}");
    assert_eq!(answer["reading"]["headroom"]["largest_block_bytes"], 0);
    assert!(answer["reading"].get("alloc_latency_seconds").is_none(), "{answer}");
    assert!(!tight.calls().iter().any(|line| line.starts_with("cuMemAlloc_v2")));
}

#[test]
fn probe_failures_have_a_kind_and_an_exit_status() {
    let fake = FakeCuda::new(&json!({ "devices": [device(json!({}))] }));
    let (status, answer) = probe(&fake, Path::new("/nonexistent/libcuda.so.1"), &[]);
    assert_eq!((status, failure_kind(&answer)), (4, "library_missing"), "{answer}");
    let not_cuda = nvml::build_fake_library(false).unwrap();
    let (status, answer) = probe(&fake, &not_cuda, &[]);
    assert_eq!((status, failure_kind(&answer)), (4, "symbol_missing"), "{answer}");
    assert!(answer["failure"]["message"].as_str().unwrap().contains("cuInit"), "{answer}");

    let no_gpu = FakeCuda::new(&json!({ "init_error": 100, "devices": [device(json!({}))] }));
    let (status, answer) = probe(&no_gpu, &no_gpu.library, &[]);
    assert_eq!((status, failure_kind(&answer)), (5, "init_failed"), "{answer}");
    assert!(answer["failure"]["message"].as_str().unwrap().contains("100"), "{answer}");

    let other = FakeCuda::new(
        &json!({ "devices": [device(json!({ "uuid": "GPU-11111111-2222-3333-4444-555555555555" }))] }),
    );
    let (status, answer) = probe(&other, &other.library, &[]);
    assert_eq!((status, failure_kind(&answer)), (5, "device_not_found"), "{answer}");

    let broken = FakeCuda::new(&json!({ "devices": [device(json!({ "alloc_error": 999 }))] }));
    let (status, answer) = probe(&broken, &broken.library, &[]);
    assert_eq!((status, failure_kind(&answer)), (5, "alloc_failed"), "{answer}");
    // Even a failed probe destroys its context.
    assert!(broken.calls().contains(&"cuCtxDestroy_v2 ok".to_owned()), "{:?}", broken.calls());

    let full = FakeCuda::new(&json!({ "devices": [device(json!({ "free_bytes": 300 * MIB }))] }));
    let (status, answer) = probe(&full, &full.library, &[]);
    assert_eq!((status, failure_kind(&answer)), (5, "context_failed"), "{answer}");
}

#[test]
fn probe_measures_through_cuda_when_nvml_hangs_and_reads_nvml_when_it_answers() {
    let fake = FakeCuda::new(&json!({ "devices": [device(json!({}))] }));
    let nvml_dir = TempDir::new().unwrap();
    let nvml_library =
        nvml::install_as_libnvidia(nvml_dir.path(), &nvml::build_fake_library(false).unwrap());
    let nvml_device = json!({
        "uuid": UUID,
        "name": "NVIDIA H100 80GB HBM3",
        "memory": { "total_bytes": 80 * GIB, "reserved_bytes": GIB / 2, "used_bytes": 20 * GIB },
    });
    let run = |scenario: &Value| {
        let scenario = nvml::write_scenario(nvml_dir.path(), scenario);
        let output = Command::new(env!("CARGO_BIN_EXE_vramd"))
            .args([
                "probe",
                "--json",
                "--device",
                UUID,
                "--nvml-timeout",
                "300ms",
                "--cuda-library",
            ])
            .arg(&fake.library)
            .arg("--nvml-library")
            .arg(&nvml_library)
            .env(cuda::SCENARIO_ENV, &fake.scenario)
            .env(nvml::SCENARIO_ENV, &scenario)
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
        (output.status.code(), answer, String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (status, answer, _) = run(&json!({ "devices": [nvml_device.clone()] }));
    assert_eq!(status, Some(0), "{answer}");
    assert_eq!(answer["reading"]["nvml_free_bytes"], 59 * GIB + GIB / 2, "{answer}");
    // nvmlInit that never returns (60 s here) costs only the NVML values.
    let (status, answer, stderr) =
        run(&json!({ "init": { "sleep_ms": 60_000 }, "devices": [nvml_device] }));
    assert_eq!(status, Some(0), "{answer}");
    assert_eq!(answer["reading"]["cuda_free_bytes"], 60 * GIB - 500 * MIB, "{answer}");
    assert!(answer["reading"].get("nvml_free_bytes").is_none(), "{answer}");
    assert!(stderr.contains("nvmlInit did not return within 300ms"), "{stderr}");
}

#[test]
fn probe_accepts_a_legacy_mig_name_only_when_cuda_visible_devices_selects_it() {
    let fake = FakeCuda::new(&json!({ "devices": [device(json!({}))] }));
    let legacy = "MIG-GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20/1/0";
    let run = |visible: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_vramd"));
        command
            .args(["probe", "--json", "--device", legacy, "--cuda-library"])
            .arg(&fake.library)
            .args(["--nvml-library", "/nonexistent/libnvidia-ml.so.1"])
            .env(cuda::SCENARIO_ENV, &fake.scenario)
            .env_remove("CUDA_VISIBLE_DEVICES");
        if let Some(visible) = visible {
            command.env("CUDA_VISIBLE_DEVICES", visible);
        }
        let output = command.output().unwrap();
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
        (output.status.code(), answer)
    };
    let (status, answer) = run(Some(legacy));
    assert_eq!(status, Some(0), "{answer}");
    assert_eq!(answer["device"], legacy);
    let (status, answer) = run(None);
    assert_eq!((status, failure_kind(&answer)), (Some(5), "device_not_found"), "{answer}");
}

/// Starts the daemon on the fake NVML and fake CUDA with one device.
fn daemon(fake: &FakeCuda, extra_env: &[(&str, &str)]) -> (Process, std::net::SocketAddr, TempDir) {
    let nvml_dir = TempDir::new().unwrap();
    let built = nvml::build_fake_library(false).unwrap();
    let nvml_library = nvml::install_as_libnvidia(nvml_dir.path(), &built);
    let nvml_scenario = nvml::write_scenario(
        nvml_dir.path(),
        &json!({ "devices": [ {
            "uuid": UUID,
            "name": "NVIDIA H100 80GB HBM3",
            "memory": { "total_bytes": 80 * GIB, "reserved_bytes": GIB / 2, "used_bytes": 20 * GIB },
            "compute_mode": "default",
        } ] }),
    );
    let nvml_library = nvml_library.to_str().unwrap().to_owned();
    let nvml_scenario = nvml_scenario.to_str().unwrap().to_owned();
    let cuda_library = fake.library.to_str().unwrap().to_owned();
    let cuda_scenario = fake.scenario.to_str().unwrap().to_owned();
    let cuda_log = fake.log.to_str().unwrap().to_owned();
    let mut env = vec![
        ("VRAMD_NVML__LIBRARY_PATH", nvml_library.as_str()),
        (nvml::SCENARIO_ENV, nvml_scenario.as_str()),
        ("VRAMD_PROBE__CUDA_LIBRARY", cuda_library.as_str()),
        (cuda::SCENARIO_ENV, cuda_scenario.as_str()),
        (cuda::LOG_ENV, cuda_log.as_str()),
        ("VRAMD_SAMPLER__FAST_INTERVAL", "100ms"),
        ("VRAMD_SAMPLER__SLOW_INTERVAL", "200ms"),
    ];
    env.extend_from_slice(extra_env);
    let mut process = Process::spawn(&SERVE, &env);
    let addr = process.listening();
    process.wait_ready(addr);
    (process, addr, nvml_dir)
}

#[test]
fn daemon_probes_the_device_and_serves_the_readings() {
    let fake = FakeCuda::new(&json!({ "devices": [device(json!({}))] }));
    let (daemon, addr, _nvml) = daemon(&fake, &[("VRAMD_PROBE__HEADROOM", "true")]);
    let labels = format!("{{gpu=\"0\",uuid=\"{UUID}\"}}");
    eventually(Duration::from_secs(30), "a probe reading in /metrics", || {
        sample(&get(addr, "/metrics").text(), &format!("vramd_probe_cuda_free_bytes{labels}"))
            .is_some()
    });
    let metrics = get(addr, "/metrics").text();
    let value = |name: &str| sample(&metrics, &format!("{name}{labels}"));
    assert_eq!(value("vramd_probe_cuda_free_bytes"), Some((60 * GIB - 500 * MIB) as f64));
    assert_eq!(value("vramd_probe_cuda_total_bytes"), Some((80 * GIB) as f64));
    // The child read the fake NVML too: 80 − 0.5 − 20 GiB free.
    assert_eq!(value("vramd_probe_nvml_free_bytes"), Some((59 * GIB + GIB / 2) as f64));
    assert!(value("vramd_probe_headroom_bytes").unwrap() > (50 * GIB) as f64);
    assert_eq!(value("vramd_probe_runs_total"), Some(1.0));
    let failures =
        format!("vramd_probe_failures_total{{gpu=\"0\",uuid=\"{UUID}\",kind=\"timeout\"}}");
    assert_eq!(sample(&metrics, &failures), Some(0.0));
    let detail = get(addr, &format!("/api/v1/devices/{UUID}")).json();
    let probe = &detail["probe"];
    assert_eq!(probe["latest"]["cuda_free_bytes"], 60 * GIB - 500 * MIB, "{probe}");
    assert_eq!(probe["last_attempt"]["outcome"], "succeeded", "{probe}");
    assert_eq!(
        probe["free_difference_bytes"],
        (59 * GIB + GIB / 2) as i64 - (60 * GIB - 500 * MIB) as i64
    );
    let listed = get(addr, "/api/v1/devices").json();
    assert_eq!(listed["devices"][0]["probe"]["runs"], 1, "{listed}");
    daemon.signal("TERM");
    daemon.finish(Duration::from_secs(10));
    assert!(fake.calls().contains(&"cuCtxDestroy_v2 ok".to_owned()));
}

#[test]
fn daemon_kills_a_hung_probe_at_its_deadline() {
    let fake = FakeCuda::new(&json!({ "devices": [device(json!({ "hang": "cuCtxCreate_v2" }))] }));
    let (daemon, addr, _nvml) = daemon(
        &fake,
        &[("VRAMD_PROBE__TIMEOUT", "1s"), ("VRAMD_PROBE__HEADROOM_TIME_BUDGET", "500ms")],
    );
    let timeout =
        format!("vramd_probe_failures_total{{gpu=\"0\",uuid=\"{UUID}\",kind=\"timeout\"}}");
    eventually(Duration::from_secs(30), "the hung probe counted as a timeout", || {
        sample(&get(addr, "/metrics").text(), &timeout) == Some(1.0)
    });
    assert!(fake.calls().contains(&"cuCtxCreate_v2 hang".to_owned()), "{:?}", fake.calls());
    // The child is gone: no process still runs `vramd probe` for this device.
    eventually(Duration::from_secs(10), "the probe child reaped", || {
        !probe_child_running(daemon.pid())
    });
    let detail = get(addr, &format!("/api/v1/devices/{UUID}")).json();
    assert_eq!(detail["probe"]["last_attempt"]["kind"], "timeout", "{detail}");
    assert!(detail["probe"].get("latest").is_none());
    // The daemon itself is unaffected.
    assert_eq!(get(addr, "/healthz").status, 200);
    daemon.signal("TERM");
    daemon.finish(Duration::from_secs(10));
}

#[test]
fn the_probe_child_shows_as_vramd_probe_in_process_lists() {
    let fake = FakeCuda::new(&json!({ "devices": [device(json!({ "hang": "cuCtxCreate_v2" }))] }));
    let (daemon, _addr, _nvml) = daemon(
        &fake,
        &[("VRAMD_PROBE__TIMEOUT", "5s"), ("VRAMD_PROBE__HEADROOM_TIME_BUDGET", "500ms")],
    );
    // While it hangs in the driver, the child is what `ps` and NVML-based
    // tools would show: its comm and argv[0]. Between its exec (of
    // `/proc/self/exe`) and its first lines the kernel's comm is still
    // `exe`, so a loaded machine can show that for a moment; the name must
    // come while the child waits on the driver (5 s here, and again at each
    // retry), never stay `exe`.
    let deadline = Deadline::after(Duration::from_secs(30));
    let cmdline = loop {
        let seen = probe_child(daemon.pid());
        match seen {
            Some((comm, cmdline)) if comm == "vramd-probe" => break cmdline,
            _ => assert!(
                !deadline.passed(),
                "no child named vramd-probe in 30 s; last seen {seen:?}"
            ),
        }
        pause();
    };
    assert!(cmdline.starts_with("vramd-probe\0probe\0"), "{cmdline:?}");
    eventually(Duration::from_secs(15), "the probe child reaped", || {
        !probe_child_running(daemon.pid())
    });
    daemon.signal("TERM");
    daemon.finish(Duration::from_secs(10));
}

/// The comm and raw command line of a child of `parent` that was started
/// as the probe.
fn probe_child(parent: u32) -> Option<(String, String)> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries.flatten().find_map(|entry| {
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).into_owned();
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        (ppid == Some(&parent.to_string()) && cmdline.contains("probe"))
            .then(|| (comm.trim().to_owned(), cmdline))
    })
}

/// Whether a child of `parent` is still a `vramd probe`.
fn probe_child_running(parent: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        ppid == Some(&parent.to_string()) && String::from_utf8_lossy(&cmdline).contains("probe")
    })
}

#[test]
fn recorded_probe_outcomes_replay_in_order() {
    let dir = TempDir::new().unwrap();
    let trace = dir.path().join("probe.ndjson");
    let trace_arg = trace.to_str().unwrap();
    let fast_probes = [("VRAMD_PROBE__INTERVAL", "1m"), ("VRAMD_PROBE__MAX_BACKOFF", "1m")];
    let recording = [
        &["--simulate", "steady-inference", "--gpus", "1", "--speed", "60", "--record", trace_arg]
            [..],
        &SERVE,
    ]
    .concat();
    let mut recorder = Process::spawn(&recording, &fast_probes);
    let addr = recorder.listening();
    recorder.wait_ready(addr);
    let runs = |addr| {
        get(addr, "/metrics").text().lines().find_map(|line| {
            line.strip_prefix("vramd_probe_runs_total{")?.split_once("} ")?.1.parse::<f64>().ok()
        })
    };
    eventually(Duration::from_secs(30), "two recorded probes", || runs(addr) >= Some(2.0));
    recorder.signal("TERM");
    recorder.finish(Duration::from_secs(10));

    let text = std::fs::read_to_string(&trace).unwrap();
    let probes: Vec<Value> = text
        .lines()
        .filter(|line| line.contains("\"record\":\"probe\""))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(probes.len() >= 2, "{} probe records", probes.len());
    let first_free = probes[0]["reading"]["cuda_free_bytes"].as_u64().unwrap();
    assert!(probes[0]["reading"]["at"].is_u64(), "integer milliseconds like every record");

    let replaying = [&["--replay", trace_arg, "--speed", "60"][..], &SERVE].concat();
    let mut replay = Process::spawn(&replaying, &fast_probes);
    let addr = replay.listening();
    replay.wait_ready(addr);
    eventually(Duration::from_secs(30), "a replayed probe reading", || {
        get(addr, "/api/v1/devices").json()["devices"][0]["probe"]["latest"].is_object()
    });
    let device = get(addr, "/api/v1/devices").json();
    let runs_seen = device["devices"][0]["probe"]["runs"].as_u64().unwrap();
    // The first replayed turn answers the first recorded outcome.
    if runs_seen == 1 {
        assert_eq!(device["devices"][0]["probe"]["latest"]["cuda_free_bytes"], first_free);
    }
    replay.signal("TERM");
    replay.finish(Duration::from_secs(10));

    let analyzed = Command::new(env!("CARGO_BIN_EXE_vramd"))
        .args(["analyze", "--replay", trace_arg, "--json"])
        .output()
        .unwrap();
    assert_eq!(analyzed.status.code(), Some(0), "{}", String::from_utf8_lossy(&analyzed.stderr));
}
