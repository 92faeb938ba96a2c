//! The daemon's side of the probe: starts `vramd probe` for one device,
//! kills it at the deadline, and reads its answer.
//!
//! The child's output is read on two threads, each keeping at most
//! [`MAX_OUTPUT_BYTES`] and discarding the rest, so a child that writes
//! too much neither blocks on a full pipe nor grows the daemon's memory.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::Stopwatch;
use crate::model::ProbeFailureKind::{BadOutput, Crashed, SpawnFailed, Timeout};
use crate::model::{DeviceInfo, ProbeFailure, ProbeReading};
use crate::source::probe::{ProbeRequest, Prober};

use super::wire::ProbeAnswer;

/// Most bytes kept of the child's stdout or stderr (its answer is ~1 KiB).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// How often the deadline is checked while the child runs.
const POLL: Duration = Duration::from_millis(10);
/// How long a killed child gets to be reaped before it is left behind.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// Runs the probe as a child process of the given executable (normally
/// this very binary, so the probe always matches the daemon).
#[derive(Clone, Debug)]
pub struct ChildProber {
    executable: PathBuf,
}

impl ChildProber {
    pub fn new(executable: PathBuf) -> Self {
        Self { executable }
    }

    /// The running binary: `/proc/self/exe` keeps working after the file
    /// is replaced by an upgrade, unlike the path it was started from.
    pub fn current_binary() -> Self {
        let proc_exe = Some(PathBuf::from("/proc/self/exe")).filter(|path| path.exists());
        let executable = proc_exe.or_else(|| std::env::current_exe().ok());
        Self::new(executable.unwrap_or_else(|| PathBuf::from("vramd")))
    }

    fn command(&self, device: &DeviceInfo, request: &ProbeRequest) -> Command {
        let mut command = Command::new(&self.executable);
        // Process lists would otherwise show `/proc/self/exe probe …`.
        command.arg0(super::role::PROBE_PROCESS_NAME);
        command.args(["probe", "--json", "--device", device.uuid.as_str()]);
        command.args(["--block-size", request.block_bytes.to_string().as_str()]);
        command.args(["--samples", request.samples.to_string().as_str()]);
        command.args(["--margin", request.margin_bytes.to_string().as_str()]);
        if let Some(budget) = request.headroom_time_budget {
            command.arg("--headroom").arg("--time-budget").arg(format!("{}ms", budget.as_millis()));
        }
        if let Some(library) = &request.cuda_library {
            command.arg("--cuda-library").arg(library);
        }
        if let Some(library) = &request.nvml_library {
            command.arg("--nvml-library").arg(library);
        }
        // Only this device is visible to the child's CUDA: initialisation
        // touches no other GPU, and a MIG device is addressed by its UUID.
        // The probe loads no kernels; no JIT cache is ever worth writing
        // (and the file system may be read-only).
        command
            .env("CUDA_VISIBLE_DEVICES", &device.uuid)
            .env("CUDA_CACHE_DISABLE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

fn read_bounded(mut from: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut from).take(MAX_OUTPUT_BYTES as u64).read_to_end(&mut kept);
        // Drain the rest so the child never blocks on a full pipe.
        let _ = std::io::copy(&mut from, &mut std::io::sink());
        kept
    })
}

/// Waits for the child until `timeout`; kills it then. `None` on timeout.
fn wait_with_deadline(mut child: Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let running = Stopwatch::start();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if running.elapsed() >= timeout {
            let _ = child.kill();
            let reaping = Stopwatch::start();
            while reaping.elapsed() < REAP_WAIT {
                if child.try_wait()?.is_some() {
                    return Ok(None);
                }
                std::thread::sleep(POLL);
            }
            // Killed but not gone (stuck in an uninterruptible driver
            // call): a thread waits for it, so it never stays a zombie.
            std::thread::spawn(move || child.wait());
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// The last non-empty line of the child's stderr, for messages.
fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("").trim().to_owned()
}

impl Prober for ChildProber {
    fn name(&self) -> &'static str {
        "cuda-child"
    }

    fn probe(
        &self,
        device: &DeviceInfo,
        request: &ProbeRequest,
    ) -> Result<ProbeReading, ProbeFailure> {
        let mut child = self.command(device, request).spawn().map_err(|error| {
            let message = format!("cannot start {} probe: {error}", self.executable.display());
            ProbeFailure::new(SpawnFailed, message)
        })?;
        let stdout = child.stdout.take().map(read_bounded);
        let stderr = child.stderr.take().map(read_bounded);
        let status = wait_with_deadline(child, request.timeout).map_err(|error| {
            ProbeFailure::new(Crashed, format!("waiting for the probe: {error}"))
        })?;
        let Some(status) = status else {
            let message = format!("killed after probe.timeout ({:?})", request.timeout);
            return Err(ProbeFailure::new(Timeout, message));
        };
        let stdout = stdout.and_then(|reader| reader.join().ok()).unwrap_or_default();
        let stderr = stderr.and_then(|reader| reader.join().ok()).unwrap_or_default();
        if status.code().is_none() {
            use std::os::unix::process::ExitStatusExt;
            let signal =
                status.signal().map_or_else(|| "?".to_owned(), |signal| signal.to_string());
            let message = format!("the probe died by signal {signal}: {}", last_line(&stderr));
            return Err(ProbeFailure::new(Crashed, message));
        }
        match ProbeAnswer::parse(&stdout, &device.uuid) {
            Err(failure) if failure.kind == BadOutput && !status.success() => {
                let stderr = last_line(&stderr);
                let message = format!("the probe exited with {status} without an answer: {stderr}");
                Err(ProbeFailure::new(Crashed, message))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProbeFailureKind;

    fn device() -> DeviceInfo {
        DeviceInfo {
            index: 0,
            uuid: "GPU-01234567-89ab-cdef-0123-456789abcdef".into(),
            name: "fake".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        }
    }

    fn request(timeout: Duration) -> ProbeRequest {
        ProbeRequest {
            block_bytes: 1 << 20,
            samples: 1,
            margin_bytes: 1 << 30,
            headroom_time_budget: Some(Duration::from_millis(1500)),
            timeout,
            cuda_library: Some("/opt/cuda/libcuda.so.1".into()),
            nvml_library: None,
        }
    }

    #[test]
    fn child_prober_passes_the_request_and_shows_only_the_device() {
        let command = ChildProber::new("/bin/vramd".into())
            .command(&device(), &request(Duration::from_secs(1)));
        let args: Vec<String> =
            command.get_args().map(|arg| arg.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "probe",
                "--json",
                "--device",
                "GPU-01234567-89ab-cdef-0123-456789abcdef",
                "--block-size",
                "1048576",
                "--samples",
                "1",
                "--margin",
                "1073741824",
                "--headroom",
                "--time-budget",
                "1500ms",
                "--cuda-library",
                "/opt/cuda/libcuda.so.1",
            ]
        );
        let visible = command.get_envs().find(|(name, _)| *name == "CUDA_VISIBLE_DEVICES");
        assert_eq!(
            visible.and_then(|(_, value)| value).and_then(|v| v.to_str()),
            Some(device().uuid.as_str())
        );
    }

    #[test]
    fn child_prober_classifies_children_that_do_not_answer() {
        // `sh -c` stands in for the probe binary: the arguments land in $0…
        let sh = |script: &str| {
            let path = std::env::temp_dir().join(format!(
                "vramd-probe-{}-{}.sh",
                std::process::id(),
                script.len()
            ));
            std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
            let mut permissions = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
            std::fs::set_permissions(&path, permissions).unwrap();
            path
        };
        let hang = sh("sleep 30");
        let failure = ChildProber::new(hang.clone())
            .probe(&device(), &request(Duration::from_millis(200)))
            .unwrap_err();
        assert_eq!(failure.kind, ProbeFailureKind::Timeout, "{failure}");
        let crash = sh("echo 'cuInit: boom' >&2; kill -SEGV $$");
        let failure = ChildProber::new(crash.clone())
            .probe(&device(), &request(Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(failure.kind, ProbeFailureKind::Crashed, "{failure}");
        assert!(
            failure.message.contains("signal 11") && failure.message.contains("boom"),
            "{failure}"
        );
        let silent = sh("echo 'no driver here' >&2; exit 7");
        let failure = ChildProber::new(silent.clone())
            .probe(&device(), &request(Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(failure.kind, ProbeFailureKind::Crashed, "{failure}");
        assert!(failure.message.contains("no driver here"), "{failure}");
        let chatty = sh("head -c 1000000 /dev/zero; exit 0");
        let failure = ChildProber::new(chatty.clone())
            .probe(&device(), &request(Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(failure.kind, ProbeFailureKind::BadOutput, "{failure}");
        let missing = ChildProber::new("/nonexistent/vramd".into())
            .probe(&device(), &request(Duration::from_secs(1)))
            .unwrap_err();
        assert_eq!(missing.kind, ProbeFailureKind::SpawnFailed);
        for path in [hang, crash, silent, chatty] {
            let _ = std::fs::remove_file(path);
        }
    }
}
