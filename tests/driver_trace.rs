//! The driver trace end to end: the real daemon on the fake NVML, tracing
//! with eBPF uprobes the fake libcuda that small CUDA programs
//! (`tests/fixtures/driver-trace/cuda_program.py`) allocate and free
//! through, and the numbers it exports equal, exactly, what the programs
//! did. One program had loaded its libcuda (and allocated) before the
//! daemon started; the other loads its own copy of libcuda (another file)
//! only after the daemon runs, so the daemon must find that file later.
//!
//! Needs root (or CAP_SYS_ADMIN + CAP_SYS_PTRACE), a kernel with BPF and uprobes,
//! and python3; without them each test is skipped, saying why.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_types)]

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cuda_fake::program::{self, CudaProgram};
use serde_json::{Value, json};
use support::{Deadline, Process, SERVE, eventually, get, pause, sample};

const GPU0: &str = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20";
const GPU1: &str = "GPU-8f6a2c1e-0001-4d7b-9a1e-3b5c7d9e1f21";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Why this machine cannot run the trace, if it cannot.
fn unable() -> Option<String> {
    let privileges = driver_trace::privileges();
    if !privileges.sufficient() {
        return Some(format!("not root: missing {}", privileges.missing.join(" + ")));
    }
    if !program::available() {
        return Some("no python3".into());
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
        && !std::path::Path::new("/sys/fs/bpf").exists()
    {
        return Some("no BPF in this kernel".into());
    }
    None
}

/// One copy of the fake libcuda in a directory of its own: a file of its
/// own (device + inode) to probe.
fn libcuda_copy(dir: &std::path::Path, name: &str) -> PathBuf {
    let built = cuda_fake::harness::build_fake_library().unwrap();
    let own = dir.join(name);
    std::fs::create_dir_all(&own).unwrap();
    cuda_fake::harness::install_as_libcuda(&own, &built)
}

fn start_daemon(dir: &std::path::Path, pids: &[u32]) -> (Process, SocketAddr) {
    start_daemon_on(dir, &[GPU0], pids)
}

/// The daemon on fake NVML devices with these UUIDs, each listing `pids`.
fn start_daemon_on(dir: &std::path::Path, uuids: &[&str], pids: &[u32]) -> (Process, SocketAddr) {
    let built = nvidia_ml_fake::harness::build_fake_library(false)
        .unwrap_or_else(|error| panic!("{error}"));
    let library = nvidia_ml_fake::harness::install_as_libnvidia(dir, &built);
    let compute: Vec<Value> =
        pids.iter().map(|pid| json!({ "pid": pid, "used_bytes": GIB })).collect();
    let devices: Vec<Value> = uuids
        .iter()
        .map(|uuid| {
            json!({
                "uuid": uuid,
                "memory": { "total_bytes": 80 * GIB, "reserved_bytes": GIB / 2, "used_bytes": 10 * GIB },
                "processes": { "compute": compute, "graphics": [], "mps": [] },
            })
        })
        .collect();
    let scenario = json!({ "devices": devices });
    let scenario = nvidia_ml_fake::harness::write_scenario(dir, &scenario);
    let env = [
        ("VRAMD_NVML__LIBRARY_PATH", library.to_str().unwrap()),
        (nvidia_ml_fake::harness::SCENARIO_ENV, scenario.to_str().unwrap()),
        ("VRAMD_SAMPLER__FAST_INTERVAL", "100ms"),
        ("VRAMD_SAMPLER__SLOW_INTERVAL", "200ms"),
        ("VRAMD_DRIVER_TRACE__MODE", "on"),
        ("VRAMD_DRIVER_TRACE__DISCOVERY_INTERVAL", "200ms"),
        ("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "250ms"),
    ];
    let mut daemon = Process::spawn(&SERVE, &env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    (daemon, addr)
}

fn series(name: &str, gpu: u32, pid: u32) -> String {
    let uuid = [GPU0, GPU1][gpu as usize];
    format!("{name}{{gpu=\"{gpu}\",uuid=\"{uuid}\",pid=\"{pid}\",process=\"")
}

/// A process's driver series: the value of the first series of `name` for `pid`.
fn process_value(metrics: &str, name: &str, pid: u32) -> Option<f64> {
    device_value(metrics, name, 0, pid)
}

/// A process's driver series on device `gpu`.
fn device_value(metrics: &str, name: &str, gpu: u32, pid: u32) -> Option<f64> {
    let prefix = series(name, gpu, pid);
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(&prefix)?;
        rest.rsplit_once(' ')?.1.parse().ok()
    })
}

#[test]
fn the_daemon_counts_exactly_what_each_process_allocated_and_freed() {
    if let Some(reason) = unable() {
        eprintln!("SKIP: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cuda_scenario = cuda_fake::harness::write_scenario(
        dir.path(),
        &json!({ "devices": [
            { "max_alloc_bytes": GIB },
            { "total_bytes": 4 * GIB, "context_bytes": 0 },
        ] }),
    );
    // Started, with libcuda loaded and one allocation made, before the daemon.
    let mut early = CudaProgram::start(&cuda_scenario).unwrap();
    early.open(&libcuda_copy(dir.path(), "early")).unwrap();
    let before = early.allocate(&format!("alloc {MIB}")).unwrap().unwrap();
    // Running, but with no libcuda until the daemon is up.
    let mut late = CudaProgram::start(&cuda_scenario).unwrap();
    let (daemon, addr) = start_daemon(dir.path(), &[early.pid, late.pid]);
    let metrics = || get(addr, "/metrics").text();
    eventually(Duration::from_secs(20), "the early process's libcuda is probed", || {
        sample(&metrics(), "vramd_driver_trace_libraries") == Some(1.0)
    });
    assert_eq!(sample(&metrics(), "vramd_driver_trace_up"), Some(1.0));

    // early: 3 allocations (one of each kind), 1 failure, 2 frees (one of
    // the allocation made before the trace: unmatched).
    let first = early.allocate("alloc 1000").unwrap().unwrap();
    assert_eq!(early.allocate(&format!("alloc {}", 2 * GIB)).unwrap(), Err(2), "OOM");
    early.allocate("alloc_async 4096").unwrap().unwrap();
    early.allocate(&format!("create 0 {}", 2 * MIB)).unwrap().unwrap();
    assert_eq!(early.call(&format!("free {first}")).unwrap(), "ok");
    assert_eq!(early.call(&format!("free {before}")).unwrap(), "ok");

    late.open(&libcuda_copy(dir.path(), "late")).unwrap();
    eventually(Duration::from_secs(20), "the late process's libcuda is probed", || {
        sample(&metrics(), "vramd_driver_trace_libraries") == Some(2.0)
    });
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(late.allocate(&format!("alloc_async {MIB}")).unwrap().unwrap());
    }
    assert_eq!(late.call(&format!("free_async {}", held[0])).unwrap(), "ok");
    // Then, like a caching allocator on a full 4 GiB device: fails, frees
    // its cache, retries the same size, and succeeds.
    assert_eq!(late.call("context 1").unwrap(), "ok");
    let cache = late.allocate(&format!("alloc {}", 3 * GIB)).unwrap().unwrap();
    assert_eq!(late.allocate(&format!("alloc {}", 2 * GIB)).unwrap(), Err(2), "1 GiB free");
    assert_eq!(late.call(&format!("free {cache}")).unwrap(), "ok");
    late.allocate(&format!("alloc {}", 2 * GIB)).unwrap().unwrap();

    let expected = [
        (early.pid, [4096.0 + 2.0 * MIB as f64, 2.0, 3.0, 2.0, 1.0, 1.0, 0.0]),
        (late.pid, [(2 * MIB + 2 * GIB) as f64, 3.0, 5.0, 2.0, 1.0, 1.0, 1.0]),
    ];
    let names = [
        "vramd_process_driver_allocated_bytes",
        "vramd_process_driver_live_allocations",
        "vramd_process_driver_allocations_total",
        "vramd_process_driver_frees_total",
        "vramd_process_driver_allocation_failures_total",
        "vramd_process_driver_out_of_memory_total",
        "vramd_process_driver_allocation_retries_total",
    ];
    let exported = |pid: u32| -> Vec<Option<f64>> {
        let text = metrics();
        names.iter().map(|name| process_value(&text, name, pid)).collect()
    };
    for (pid, values) in expected {
        let wanted: Vec<Option<f64>> = values.iter().copied().map(Some).collect();
        let deadline = Deadline::after(Duration::from_secs(20));
        while exported(pid) != wanted && !deadline.passed() {
            pause();
        }
        assert_eq!(exported(pid), wanted, "pid {pid}: {names:?}");
    }

    let detail = get(addr, "/api/v1/devices/0").json();
    let process = |pid: u32| -> Value {
        let processes = detail["processes"].as_array().unwrap();
        processes.iter().find(|p| p["pid"] == pid).unwrap()["driver"].clone()
    };
    let early_driver = process(early.pid);
    assert_eq!(early_driver["allocated_bytes"], 4096 + 2 * MIB, "{early_driver}");
    assert_eq!(early_driver["unmatched_frees"], 1, "freed what was allocated before the trace");
    assert_eq!(early_driver["size_buckets"], json!([2, 0, 1, 0, 0, 0, 0, 0, 0]));
    assert_eq!(process(late.pid)["allocations"], 5);
    // No reporter speaks for either: the accounting takes the driver view.
    let held = 4096 + 2 * MIB + 2 * MIB + 2 * GIB;
    assert_eq!(detail["accounting"]["driver_held_bytes"], held, "{}", detail["accounting"]);

    // The early process's failure was never retried: an OOM event for it,
    // raised by the trace; the late one's was retried: none.
    let events = get(addr, "/api/v1/oom-events").json()["events"].as_array().unwrap().clone();
    let of = |pid: u32| events.iter().filter(|event| event["pid"] == pid).count();
    assert_eq!((of(early.pid), of(late.pid)), (1, 0), "{events:?}");
    let oom = events.iter().find(|event| event["pid"] == early.pid).unwrap();
    assert_eq!(oom["hostname"], "driver-trace");
    assert_eq!(oom["requested_bytes"], 2 * GIB);
    assert!(oom["device_free_bytes"].is_u64(), "{oom}");
    // What it held when it failed: the 1000 bytes allocated under the
    // trace (the MiB from before the trace is unseen); and what the other
    // process on the device held, by NVML's count.
    assert_eq!(oom["driver"]["held_bytes"], 1000, "{oom}");
    let others = oom["driver"]["others"].as_array().unwrap();
    assert_eq!(others.len(), 1, "{oom}");
    assert_eq!(
        (others[0]["pid"].clone(), others[0]["used_bytes"].clone()),
        (json!(late.pid), json!(GIB))
    );

    // The late one's retry, which no reporter told: allocator_retries
    // fires for it, from the driver's evidence, and for it alone.
    let retries_firing = || -> Vec<Value> {
        let alerts = get(addr, "/api/v1/alerts").json();
        let alerts = alerts["alerts"].as_array().cloned().unwrap_or_default();
        alerts
            .into_iter()
            .filter(|alert| alert["rule"] == "allocator_retries" && alert["state"] == "firing")
            .collect()
    };
    eventually(Duration::from_secs(20), "allocator_retries fires for the late process", || {
        !retries_firing().is_empty()
    });
    let fired = retries_firing();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0]["value"], 1.0, "{fired:?}");
    let description = fired[0]["description"].as_str().unwrap();
    assert!(description.contains("driver trace"), "{description}");
    assert_eq!(fired[0]["pid"], late.pid, "{fired:?}");
    drop(daemon);
}

#[test]
fn a_process_on_two_devices_has_each_devices_bytes_counted_on_that_device() {
    if let Some(reason) = unable() {
        eprintln!("SKIP: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cuda_scenario =
        cuda_fake::harness::write_scenario(dir.path(), &json!({ "devices": [{}, {}] }));
    let mut cuda = CudaProgram::start(&cuda_scenario).unwrap();
    cuda.load(&libcuda_copy(dir.path(), "two")).unwrap();
    let (daemon, addr) = start_daemon_on(dir.path(), &[GPU0, GPU1], &[cuda.pid]);
    let metrics = || get(addr, "/metrics").text();
    eventually(Duration::from_secs(20), "the libcuda is probed", || {
        sample(&metrics(), "vramd_driver_trace_libraries") == Some(1.0)
    });
    // Like a program using the driver API: a context of its own on device
    // 0, current; device 1's primary context, pushed over it and popped;
    // then set current in its place.
    assert_eq!(cuda.call("context 0").unwrap(), "ok");
    let primary = cuda.allocate("primary 1").unwrap().unwrap();
    cuda.allocate(&format!("alloc {MIB}")).unwrap().unwrap();
    assert_eq!(cuda.call(&format!("push {primary}")).unwrap(), "ok");
    let freed = cuda.allocate(&format!("alloc {}", 3 * MIB)).unwrap().unwrap();
    cuda.allocate(&format!("alloc_async {}", 5 * MIB)).unwrap().unwrap();
    assert_eq!(cuda.call("pop").unwrap(), format!("ok {primary}"));
    cuda.allocate(&format!("alloc {}", 7 * MIB)).unwrap().unwrap();
    assert_eq!(cuda.call(&format!("set {primary}")).unwrap(), "ok");
    // A physical allocation names its device, whatever is current.
    cuda.allocate(&format!("create 0 {}", 2 * MIB)).unwrap().unwrap();
    cuda.allocate(&format!("alloc {}", 11 * MIB)).unwrap().unwrap();
    // Freed while device 1 is current: it was on device 1.
    assert_eq!(cuda.call(&format!("free {freed}")).unwrap(), "ok");

    let wanted = [Some((10 * MIB) as f64), Some((16 * MIB) as f64)];
    let held = || {
        let text = metrics();
        [0, 1].map(|gpu| device_value(&text, "vramd_process_driver_allocated_bytes", gpu, cuda.pid))
    };
    let deadline = Deadline::after(Duration::from_secs(20));
    while held() != wanted && !deadline.passed() {
        pause();
    }
    assert_eq!(held(), wanted, "device 0: 1 + 7 + 2 MiB; device 1: 3 + 5 + 11 - 3 MiB");
    let text = metrics();
    let allocations = [0, 1]
        .map(|gpu| device_value(&text, "vramd_process_driver_allocations_total", gpu, cuda.pid));
    assert_eq!(allocations, [Some(3.0), Some(3.0)]);
    let frees =
        [0, 1].map(|gpu| device_value(&text, "vramd_process_driver_frees_total", gpu, cuda.pid));
    assert_eq!(frees, [Some(0.0), Some(1.0)]);
    drop(daemon);
}

#[test]
fn a_process_whose_reporter_speaks_is_judged_by_its_reporter_alone() {
    if let Some(reason) = unable() {
        eprintln!("SKIP: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cuda_scenario = cuda_fake::harness::write_scenario(
        dir.path(),
        &json!({ "devices": [ { "total_bytes": 4 * GIB, "context_bytes": 0 } ] }),
    );
    let mut cuda = CudaProgram::start(&cuda_scenario).unwrap();
    cuda.load(&libcuda_copy(dir.path(), "reported")).unwrap();
    let (daemon, addr) = start_daemon(dir.path(), &[cuda.pid]);
    let metrics = || get(addr, "/metrics").text();
    eventually(Duration::from_secs(20), "the libcuda is probed", || {
        sample(&metrics(), "vramd_driver_trace_libraries") == Some(1.0)
    });
    // Its reporter speaks: no retry, no OOM, by its own count.
    let report = json!({
        "version": 1,
        "reporter": { "pid": cuda.pid, "hostname": "e2e" },
        "at": vramd::clock::wall_now().to_rfc3339(),
        "devices": [ { "uuid": GPU0, "index": 0, "memory_stats": {
            "allocated_bytes.all.current": GIB, "reserved_bytes.all.current": 3 * GIB,
            "active_bytes.all.current": GIB, "inactive_split_bytes.all.current": 0,
            "num_alloc_retries": 0, "num_ooms": 0 } } ],
    });
    let posted = support::http::post(addr, "/api/v1/allocator-reports", &report.to_string());
    assert_eq!(posted.unwrap().status, 202);
    let reported =
        format!("vramd_allocator_reserved_bytes{{gpu=\"0\",uuid=\"{GPU0}\",pid=\"{}\"", cuda.pid);
    eventually(Duration::from_secs(10), "the report joins the process", || {
        metrics().contains(&reported)
    });
    // What the driver sees meanwhile: a retry after a flush, then an
    // out-of-memory failure never retried.
    assert_eq!(cuda.call("context 0").unwrap(), "ok");
    let cache = cuda.allocate(&format!("alloc {}", 3 * GIB)).unwrap().unwrap();
    assert_eq!(cuda.allocate(&format!("alloc {}", 2 * GIB)).unwrap(), Err(2));
    assert_eq!(cuda.call(&format!("free {cache}")).unwrap(), "ok");
    cuda.allocate(&format!("alloc {}", 2 * GIB)).unwrap().unwrap();
    assert_eq!(cuda.allocate(&format!("alloc {}", 8 * GIB)).unwrap(), Err(2));
    eventually(Duration::from_secs(20), "the trace saw both failures", || {
        let text = metrics();
        process_value(&text, "vramd_process_driver_out_of_memory_total", cuda.pid) == Some(2.0)
            && process_value(&text, "vramd_process_driver_allocation_retries_total", cuda.pid)
                == Some(1.0)
    });
    // Past the retry window and several evaluations: the reporter's
    // evidence stands alone, the driver's is not added to it.
    std::thread::sleep(Duration::from_secs(2));
    let events = get(addr, "/api/v1/oom-events").json();
    let raised =
        events["events"].as_array().unwrap().iter().filter(|e| e["pid"] == cuda.pid).count();
    assert_eq!(raised, 0, "the reporter posts its own OOM events: {events}");
    let alerts = get(addr, "/api/v1/alerts").json();
    let retries = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|alert| alert["rule"] == "allocator_retries" && alert["pid"] == cuda.pid)
        .count();
    assert_eq!(retries, 0, "num_alloc_retries says 0: {alerts}");
    drop(daemon);
}

#[test]
fn mode_on_without_the_privilege_fails_start_up_naming_what_is_missing() {
    let env = [("VRAMD_DRIVER_TRACE__MODE", "on"), ("VRAMD_SOURCE__SIMULATE", "idle")];
    let mut command = std::process::Command::new(support::BIN);
    if driver_trace::privileges().sufficient() {
        // As root: drop every capability with setpriv (util-linux).
        if std::process::Command::new("setpriv").arg("--help").output().is_err() {
            eprintln!("SKIP: root, and no setpriv to drop the capabilities");
            return;
        }
        command = std::process::Command::new("setpriv");
        command.args(["--inh-caps=-all", "--bounding-set=-all", "--"]).arg(support::BIN);
    }
    command.args(SERVE);
    let output = Process::spawn_command(&mut command, &env).finish(Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(1), "{}", output.stderr);
    assert!(
        output.stderr.contains("lacks CAP_SYS_ADMIN and CAP_SYS_PTRACE"),
        "names what is missing: {}",
        output.stderr
    );
}

#[test]
fn a_libcuda_that_cannot_be_probed_never_stops_sampling_or_readiness() {
    if let Some(reason) = unable() {
        eprintln!("SKIP: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A process that maps a "libcuda.so.1" that is no ELF file at all.
    let bogus = dir.path().join("bogus/libcuda.so.1");
    std::fs::create_dir_all(bogus.parent().unwrap()).unwrap();
    std::fs::write(&bogus, b"not a shared object\n".repeat(256)).unwrap();
    let script = "import mmap, sys, time\n\
                  f = open(sys.argv[1], 'rb')\n\
                  m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n\
                  print('mapped', flush=True)\n\
                  time.sleep(600)\n";
    let mut mapper = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&bogus)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(mapper.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "mapped");
    let (daemon, addr) = start_daemon(dir.path(), &[mapper.id()]);
    eventually(Duration::from_secs(20), "the probe is tried and refused", || {
        daemon.stderr().contains("driver trace: cannot probe libcuda")
    });
    let metrics = get(addr, "/metrics").text();
    assert_eq!(sample(&metrics, "vramd_driver_trace_up"), Some(1.0), "the trace itself runs");
    assert_eq!(sample(&metrics, "vramd_driver_trace_libraries"), Some(0.0));
    assert_eq!(get(addr, "/readyz").status, 200, "readiness is not the trace's business");
    std::thread::sleep(Duration::from_secs(1));
    let refusals = daemon.stderr().matches("driver trace: cannot probe libcuda").count();
    assert_eq!(refusals, 1, "tried once, not at every discovery");
    let used = format!(
        "vramd_process_memory_used_bytes{{gpu=\"0\",uuid=\"{GPU0}\",pid=\"{}\"",
        mapper.id()
    );
    assert!(metrics.contains(&used), "the process is still sampled");
    drop(daemon);
    let _ = mapper.kill();
    let _ = mapper.wait();
}
