//! NVML source benchmarks: what one fast-tier and one slow-tier read of a
//! device costs in vramd, against the fake driver library
//! (`tests/fake-nvml`), next to the bare `nvml-wrapper` calls the read makes.
//! The difference is vramd's own overhead; the fake's answers are cheap, so
//! the absolute figures are not a real driver's (~12 µs for memory info v2,
//! ~4.5 ms for a process list, see DESIGN.md).
//!
//! `cargo bench --bench nvml` builds the fake library in debug mode through
//! the test harness. For the recorded figures it was built in release:
//! `cargo build -p fake-nvml --release --lib` and
//! `FAKE_NVML_LIBRARY=target/release/libnvidia_ml_fake.so cargo bench --bench nvml`.
//! Figures and the machine are in docs/performance.md ("NVML source").
//!
//! The slow tier lists 64 compute processes whose PIDs are real: 64 `sleep`
//! children of this benchmark (killed at the end), each with a
//! training-job-like command line, so the /proc reads vramd makes per PID
//! (comm, cmdline, cgroup, status) are part of the cost.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::Criterion;
use nvidia_ml_fake::harness;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::{MemoryInfo, Utilization};
use nvml_wrapper::structs::device::FieldId;
use serde_json::{Value, json};
use tempfile::TempDir;

use vramd::source::DeviceSource;
use vramd::source::nvml::{NvmlSettings, NvmlSource};
use vramd::source::procfs::ProcReader;

const GIB: u64 = 1 << 30;
const PROCESSES: usize = 64;

/// Child processes that stand in for GPU workloads; killed on drop.
struct Workloads(Vec<Child>);

impl Workloads {
    fn spawn(count: usize) -> Result<Self, String> {
        let mut workloads = Self(Vec::with_capacity(count));
        for rank in 0..count {
            // argv[0] is what /proc/<pid>/cmdline starts with: a command line
            // as long as a real launcher's, so the 256-byte cut applies.
            let argv0 = format!(
                "python3 -m torch.distributed.run --nnodes 4 --nproc-per-node 8 \
                 --rdzv-backend c10d --rdzv-endpoint trainer-0:29400 \
                 train.py --config configs/llm-70b.yaml --rank {rank}"
            );
            let child = Command::new("bash")
                .args(["-c", "exec -a \"$0\" sleep 3600", &argv0])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|error| format!("cannot start a sleep child: {error}"))?;
            workloads.0.push(child);
        }
        Ok(workloads)
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }
}

impl Drop for Workloads {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One device as an H100 answers: memory, utilization, every health value
/// the slow tier reads, and `pids` as compute processes.
fn scenario(pids: &[u32]) -> Value {
    let compute: Vec<Value> = pids
        .iter()
        .enumerate()
        .map(|(slot, pid)| json!({ "pid": pid, "used_bytes": (slot as u64 + 1) * (GIB / 2) }))
        .collect();
    json!({
        "devices": [{
            "uuid": "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20",
            "name": "NVIDIA H100 80GB HBM3",
            "memory": {
                "total_bytes": 80 * GIB,
                "reserved_bytes": GIB / 2,
                "used_bytes": 40 * GIB
            },
            "utilization": { "gpu": 87, "memory": 41 },
            "processes": { "compute": compute, "graphics": [], "mps": [] },
            "temperature_c": 64,
            "power_usage_mw": 412_000,
            "power_limit_mw": 700_000,
            "clocks": {
                "graphics_mhz": 1980, "sm_mhz": 1980, "memory_mhz": 2619, "video_mhz": 1755
            },
            "throttle_reasons": 4,
            "ecc": {
                "enabled": true, "pending": false,
                "volatile_corrected": 0, "volatile_uncorrected": 0,
                "aggregate_corrected": 3, "aggregate_uncorrected": 0
            },
            "retired_pages": { "multiple_single_bit": [], "double_bit": [], "pending": false },
            "remapped_rows": {
                "correctable": 0, "uncorrectable": 0, "pending": false, "failure": false
            },
            "persistence_mode": true,
            "compute_mode": "default",
            "bar1": { "total_bytes": 128 * GIB, "used_bytes": 8 << 20 }
        }]
    })
}

/// The fake library: `FAKE_NVML_LIBRARY` if set (e.g. a release build),
/// else the harness's debug build.
fn fake_library() -> Result<PathBuf, String> {
    match std::env::var_os("FAKE_NVML_LIBRARY") {
        Some(path) => {
            let path = PathBuf::from(path);
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!("FAKE_NVML_LIBRARY={} is not a file", path.display()))
            }
        }
        None => harness::build_fake_library(false),
    }
}

struct Setup {
    // Field order is drop order: the sources go before the library's
    // directory and the children.
    nvml: Nvml,
    sources: Vec<(&'static str, NvmlSource)>,
    procfs: Vec<(&'static str, ProcReader)>,
    pids: Vec<u32>,
    _dir: TempDir,
    _workloads: Workloads,
}

fn source(library: &Path, max_cmdline_bytes: usize, proc_root: PathBuf) -> NvmlSource {
    NvmlSource::new(NvmlSettings {
        library_path: Some(library.to_path_buf()),
        xid_events: false,
        max_cmdline_bytes,
        proc_root,
        ..NvmlSettings::default()
    })
}

impl Setup {
    fn new() -> Result<Self, String> {
        let built = fake_library()?;
        let workloads = Workloads::spawn(PROCESSES)?;
        let pids = workloads.pids();
        let dir = TempDir::new().map_err(|error| error.to_string())?;
        let library = harness::install_as_libnvidia(dir.path(), &built);
        let scenario = harness::write_scenario(dir.path(), &scenario(&pids));
        harness::set_scenario_path(&library, &scenario)?;
        let empty_proc = dir.path().join("empty-proc");
        std::fs::create_dir(&empty_proc).map_err(|error| error.to_string())?;
        let defaults = NvmlSettings::default();
        let sources = vec![
            ("cmdline_256", source(&library, defaults.max_cmdline_bytes, defaults.proc_root)),
            ("cmdline_off", source(&library, 0, PathBuf::from("/proc"))),
            ("no_proc", source(&library, 0, empty_proc.clone())),
        ];
        for (name, source) in &sources {
            let devices = source.devices().map_err(|error| format!("{name}: {error}"))?;
            if devices.len() != 1 {
                return Err(format!("{name}: expected 1 device, found {}", devices.len()));
            }
            let slow =
                source.read_slow(0, PROCESSES).map_err(|error| format!("{name}: {error}"))?;
            let listed = slow.processes.as_ref().map_or(0, Vec::len);
            if listed != PROCESSES {
                return Err(format!("{name}: {listed} processes listed, expected {PROCESSES}"));
            }
        }
        // The same library copy: NVML init is reference-counted.
        let nvml = Nvml::builder()
            .lib_path(library.as_os_str())
            .init()
            .map_err(|error| format!("Nvml::init: {error}"))?;
        // The baselines must make every call, not stop at an error.
        fast_wrapper_calls(&nvml).map_err(|error| format!("fast wrapper calls: {error}"))?;
        match slow_wrapper_calls(&nvml) {
            Ok(PROCESSES) => {}
            other => return Err(format!("slow wrapper calls: {other:?}")),
        }
        let procfs = ProcReader::new("/proc", NvmlSettings::default().max_cmdline_bytes);
        let identity = procfs.identify(pids[0]);
        if identity.comm.as_deref() != Some("sleep") || identity.cmdline.is_none() {
            return Err(format!("unexpected identity of a workload: {identity:?}"));
        }
        let procfs = vec![("proc", procfs), ("empty_root", ProcReader::new(empty_proc, 0))];
        Ok(Self { nvml, sources, procfs, pids, _dir: dir, _workloads: workloads })
    }

    fn source(&self, name: &str) -> Option<&NvmlSource> {
        self.sources.iter().find(|(known, _)| *known == name).map(|(_, source)| source)
    }
}

fn fast(c: &mut Criterion, setup: &Setup) {
    let mut group = c.benchmark_group("nvml/fast");
    if let Some(source) = setup.source("cmdline_256") {
        group.bench_function("vramd_read_fast", |b| b.iter(|| black_box(source.read_fast(0))));
    }
    let nvml = &setup.nvml;
    group.bench_function("wrapper_calls", |b| b.iter(|| black_box(fast_wrapper_calls(nvml))));
    group.finish();
}

/// What read_fast asks the driver, through nvml-wrapper and nothing else.
fn fast_wrapper_calls(nvml: &Nvml) -> Result<(MemoryInfo, Utilization), NvmlError> {
    let device = nvml.device_by_index(black_box(0))?;
    Ok((device.memory_info()?, device.utilization_rates()?))
}

/// Every driver call read_slow makes on this device, through nvml-wrapper.
fn slow_wrapper_calls(nvml: &Nvml) -> Result<usize, NvmlError> {
    let device = nvml.device_by_index(0)?;
    let processes = device.running_compute_processes()?.len()
        + device.running_graphics_processes()?.len()
        + device.mps_running_compute_processes()?.len();
    black_box(device.temperature(TemperatureSensor::Gpu)?);
    black_box(device.power_usage()?);
    black_box(device.enforced_power_limit()?);
    black_box(device.is_ecc_enabled()?);
    for error in [MemoryError::Corrected, MemoryError::Uncorrected] {
        for counter in [EccCounter::Volatile, EccCounter::Aggregate] {
            black_box(device.total_ecc_errors(error, counter)?);
        }
    }
    black_box(device.bar1_memory_info()?);
    black_box(device.clock_info(Clock::SM)?);
    black_box(device.clock_info(Clock::Memory)?);
    black_box(device.current_throttle_reasons()?);
    black_box(device.retired_pages(RetirementCause::MultipleSingleBitEccErrors)?);
    black_box(device.retired_pages(RetirementCause::DoubleBitEccError)?);
    black_box(device.are_pages_pending_retired()?);
    // The fake exports no nvmlDeviceGetFieldValues: an error, as for vramd.
    let _ = black_box(device.field_values_for(&[142, 143, 144, 145].map(FieldId)));
    black_box(device.is_in_persistent_mode()?);
    black_box(device.compute_mode()?);
    let _ = black_box(device.mig_mode());
    Ok(processes)
}

fn slow(c: &mut Criterion, setup: &Setup) {
    let mut group = c.benchmark_group("nvml/slow_64_processes");
    for (name, source) in &setup.sources {
        group.bench_function(format!("vramd_read_slow/{name}"), |b| {
            b.iter(|| black_box(source.read_slow(0, PROCESSES)))
        });
    }
    let nvml = &setup.nvml;
    group.bench_function("wrapper_calls", |b| b.iter(|| black_box(slow_wrapper_calls(nvml))));
    // The /proc part of read_slow alone; with an empty root every open fails.
    let pids = &setup.pids;
    for (name, procfs) in &setup.procfs {
        group.bench_function(format!("procfs_identify_64/{name}"), |b| {
            b.iter(|| {
                for pid in pids {
                    black_box(procfs.identify(*pid));
                }
            })
        });
    }
    group.finish();
}

fn main() {
    let setup = match Setup::new() {
        Ok(setup) => setup,
        Err(error) => {
            eprintln!("nvml bench setup failed: {error}");
            std::process::exit(1);
        }
    };
    // Short runs: the benchmark machine has 2 cores shared with builds.
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .sample_size(100)
        .configure_from_args();
    fast(&mut criterion, &setup);
    slow(&mut criterion, &setup);
    criterion.final_summary();
}
