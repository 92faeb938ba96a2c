//! The simulator's answer to the CUDA probe, consistent with its NVML-side
//! readings at the same instant.
//!
//! The probe's own context takes 300–550 MiB (fixed per device and seed,
//! like a workload's), so NVML free at the probe is the fast tier's free
//! minus that context. CUDA free is NVML free less 0–4 MiB (the driver's
//! bookkeeping differs slightly; real devices agree to a few MiB). The
//! largest allocatable block is CUDA free minus the margin, rounded down to
//! the 2 MiB allocation granularity. Latencies are typical of an H100:
//! context creation 180–320 ms, a 64 MiB `cuMemAlloc` 60–140 µs (scaling
//! gently with size), `cuMemFree` 25–60 µs. A lost device fails the probe
//! as a real one would (`context_failed`).

use crate::model::{
    DeviceInfo, HeadroomSearch, HeadroomStop, ProbeFailure, ProbeFailureKind, ProbeReading,
};
use crate::source::probe::{ProbeRequest, Prober};

use super::Simulator;
use super::devices::MIB;
use super::noise::Stream;

/// Allocation granularity of large `cuMemAlloc` blocks.
const GRANULARITY: u64 = 2 * MIB;
/// Process slot whose context size the probe's own context takes.
const PROBE_SLOT: u32 = 1_000;

impl Prober for Simulator {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn probe(
        &self,
        device: &DeviceInfo,
        request: &ProbeRequest,
    ) -> Result<ProbeReading, ProbeFailure> {
        let failed = |message: String| ProbeFailure::new(ProbeFailureKind::ContextFailed, message);
        let at = self.clock.now();
        let index = device.index;
        let fast =
            self.fast_at(index, at).map_err(|error| failed(format!("cuCtxCreate_v2: {error}")))?;
        let gpu = self.live_gpu(index, at).map_err(|error| failed(error.to_string()))?;
        let Some(memory) = fast.memory else {
            return Err(failed("no memory reading".to_owned()));
        };
        let context_bytes = gpu.context_bytes(PROBE_SLOT);
        if memory.free_bytes < context_bytes {
            return Err(failed("cuCtxCreate_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)".to_owned()));
        }
        let step = gpu.second();
        let unit = |slot: u32| gpu.unit(Stream::Probe, slot, step);
        let nvml_free = memory.free_bytes - context_bytes;
        let driver_difference = (unit(0) * 4.0 * MIB as f64) as u64;
        let cuda_free = nvml_free.saturating_sub(driver_difference);
        let context_create_seconds = 0.18 + 0.14 * unit(1);
        let fits = cuda_free.saturating_sub(request.margin_bytes) >= request.block_bytes;
        let size_factor = (request.block_bytes as f64 / (64 * MIB) as f64).max(1.0).log2() + 1.0;
        let alloc = fits.then(|| (60e-6 + 80e-6 * unit(2)) * size_factor);
        let release = fits.then(|| 25e-6 + 35e-6 * unit(3));
        let samples = if fits { request.samples } else { 0 };
        let headroom = request.headroom_time_budget.map(|_| {
            let largest =
                cuda_free.saturating_sub(request.margin_bytes) / GRANULARITY * GRANULARITY;
            HeadroomSearch {
                largest_block_bytes: largest,
                margin_bytes: request.margin_bytes,
                attempts: 1,
                stopped: if largest == 0 { HeadroomStop::Converged } else { HeadroomStop::Margin },
                seconds: 0.002 + 0.003 * unit(4),
            }
        });
        let pairs = f64::from(samples) * (alloc.unwrap_or(0.0) + release.unwrap_or(0.0));
        let searching = headroom.as_ref().map_or(0.0, |search| search.seconds);
        Ok(ProbeReading {
            at,
            cuda_free_bytes: cuda_free,
            cuda_total_bytes: memory.total_bytes,
            nvml_free_bytes: Some(nvml_free),
            context_create_seconds,
            context_bytes: Some(context_bytes),
            alloc_block_bytes: request.block_bytes,
            alloc_latency_seconds: alloc,
            free_latency_seconds: release,
            alloc_samples: samples,
            headroom,
            duration_seconds: 0.04 + context_create_seconds + pairs + searching,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ScaledClock;
    use crate::model::Timestamp;
    use crate::source::DeviceSource;
    use crate::source::simulator::{GOLDEN_ORIGIN, ScenarioKind, SimulatorSpec};

    fn request(headroom: bool) -> ProbeRequest {
        ProbeRequest {
            block_bytes: 64 * MIB,
            samples: 5,
            margin_bytes: 1 << 30,
            headroom_time_budget: headroom.then_some(Duration::from_secs(10)),
            timeout: Duration::from_secs(60),
            cuda_library: None,
            nvml_library: None,
        }
    }

    fn simulator(scenario: ScenarioKind, at_seconds: i64) -> Simulator {
        let origin = GOLDEN_ORIGIN;
        let now = Timestamp::from_unix_millis(origin.unix_millis() + at_seconds * 1000);
        let spec = SimulatorSpec { scenario, gpus: 2, seed: 7 };
        // A clock frozen in effect: speed so small it stays on `now`.
        Simulator::with_origin(spec, ScaledClock::starting_at(now, 1e-9), origin).unwrap()
    }

    #[test]
    fn simulated_probe_agrees_with_the_nvml_side_at_the_same_instant() {
        let sim = simulator(ScenarioKind::SteadyInference, 90);
        let device = &sim.devices().unwrap()[0];
        let reading = sim.probe(device, &request(true)).unwrap();
        let fast = sim.read_fast(0).unwrap();
        let memory = fast.memory.unwrap();
        let context = reading.context_bytes.unwrap();
        assert!((300 * MIB..=550 * MIB).contains(&context), "{context}");
        assert_eq!(reading.nvml_free_bytes, Some(memory.free_bytes - context));
        let difference = reading.free_difference_bytes().unwrap();
        assert!((0..=4 * MIB as i64).contains(&difference), "{difference}");
        assert_eq!(reading.cuda_total_bytes, memory.total_bytes);
        let headroom = reading.headroom_bytes().unwrap();
        assert!(headroom <= reading.cuda_free_bytes - (1 << 30));
        assert!(headroom + GRANULARITY > reading.cuda_free_bytes - (1 << 30));
        assert_eq!(headroom % GRANULARITY, 0);
        let alloc = reading.alloc_latency_seconds.unwrap();
        assert!((60e-6..=140e-6).contains(&alloc), "{alloc}");
        assert!((0.18..=0.32).contains(&reading.context_create_seconds));
        assert_eq!(reading.alloc_samples, 5);
        // Same instant, same answer.
        assert_eq!(sim.probe(device, &request(true)).unwrap(), reading);
    }

    #[test]
    fn simulated_probe_leaves_headroom_out_unless_asked_and_skips_a_block_that_does_not_fit() {
        let sim = simulator(ScenarioKind::SteadyInference, 90);
        let device = &sim.devices().unwrap()[0];
        assert_eq!(sim.probe(device, &request(false)).unwrap().headroom, None);
        let huge = ProbeRequest { margin_bytes: 200 << 30, ..request(true) };
        let reading = sim.probe(device, &huge).unwrap();
        assert_eq!(reading.alloc_latency_seconds, None);
        assert_eq!(reading.alloc_samples, 0);
        assert_eq!(reading.headroom_bytes(), Some(0));
    }

    #[test]
    fn simulated_probe_of_a_lost_device_fails_like_a_real_one() {
        let sim = simulator(ScenarioKind::DeviceLost, 3600);
        let devices = sim.devices().unwrap();
        let failure = sim.probe(&devices[1], &request(false)).unwrap_err();
        assert_eq!(failure.kind, ProbeFailureKind::ContextFailed);
        assert!(failure.message.contains("lost"), "{}", failure.message);
        assert!(sim.probe(&devices[0], &request(false)).is_ok());
    }
}
