//! `vramd_probe_*`: what the CUDA driver probe last measured on each device,
//! and how its attempts ended. Series appear only for devices the probe
//! scheduler covers; measurement series only after a successful probe,
//! and they keep the last successful values (`..._last_success_timestamp_seconds`
//! says how old they are).

use crate::model::{ProbeFailureKind, ProbeReading, ProbeSkipReason};

use super::text::{Family, FamilyWriter, family};
use super::{DeviceView, per_device};

family!(
    CUDA_FREE,
    "vramd_probe_cuda_free_bytes",
    Gauge,
    "Free device memory per the CUDA driver (cuMemGetInfo) at the latest successful probe, with the probe's own context alive."
);
family!(
    CUDA_TOTAL,
    "vramd_probe_cuda_total_bytes",
    Gauge,
    "Total device memory per the CUDA driver at the latest successful probe."
);
family!(
    NVML_FREE,
    "vramd_probe_nvml_free_bytes",
    Gauge,
    "Free device memory per NVML, read by the probe right after cuMemGetInfo."
);
family!(
    FREE_DIFFERENCE,
    "vramd_probe_free_difference_bytes",
    Gauge,
    "NVML free minus CUDA free at the latest successful probe; may be negative."
);
family!(
    HEADROOM,
    "vramd_probe_headroom_bytes",
    Gauge,
    "Largest block the CUDA driver allocated in the probe's bounded search (probe.headroom); a lower bound unless the search converged."
);
family!(
    ALLOC_LATENCY,
    "vramd_probe_alloc_latency_seconds",
    Gauge,
    "Median cuMemAlloc time of a probe.block_size block at the latest successful probe."
);
family!(
    FREE_LATENCY,
    "vramd_probe_free_latency_seconds",
    Gauge,
    "Median cuMemFree time of that block at the latest successful probe."
);
family!(
    CONTEXT_CREATE,
    "vramd_probe_context_create_seconds",
    Gauge,
    "Time cuCtxCreate took at the latest successful probe."
);
family!(
    CONTEXT_BYTES,
    "vramd_probe_context_bytes",
    Gauge,
    "Device memory the probe's own CUDA context took (what a context costs on this device)."
);
family!(
    DURATION,
    "vramd_probe_duration_seconds",
    Gauge,
    "Time the latest successful probe took, from loading the driver to releasing the context."
);
family!(
    LAST_SUCCESS,
    "vramd_probe_last_success_timestamp_seconds",
    Gauge,
    "When the latest successful probe read the device (Unix time)."
);
family!(
    RUNS,
    "vramd_probe_runs_total",
    Counter,
    "CUDA probes started on the device (succeeded or failed; skips are not runs)."
);
family!(
    FAILURES,
    "vramd_probe_failures_total",
    Counter,
    "CUDA probes that produced no reading, by kind of failure."
);
family!(
    SKIPPED,
    "vramd_probe_skipped_total",
    Counter,
    "Probe turns skipped because probing could hurt a workload or could not be judged safe, by reason."
);

pub(super) fn render(views: &[DeviceView<'_>], out: &mut Vec<u8>) {
    let scheduled: Vec<&DeviceView<'_>> =
        views.iter().filter(|view| view.probe.scheduled).collect();
    let reading = |out: &mut Vec<u8>, family: &Family, value: fn(&ProbeReading) -> Option<f64>| {
        per_device(out, scheduled.iter().copied(), family, |view| {
            view.probe.latest.as_ref().and_then(value)
        });
    };
    reading(out, &CUDA_FREE, |r| Some(r.cuda_free_bytes as f64));
    reading(out, &CUDA_TOTAL, |r| Some(r.cuda_total_bytes as f64));
    reading(out, &NVML_FREE, |r| r.nvml_free_bytes.map(|bytes| bytes as f64));
    reading(out, &FREE_DIFFERENCE, |r| r.free_difference_bytes().map(|bytes| bytes as f64));
    reading(out, &HEADROOM, |r| r.headroom_bytes().map(|bytes| bytes as f64));
    reading(out, &ALLOC_LATENCY, |r| r.alloc_latency_seconds);
    reading(out, &FREE_LATENCY, |r| r.free_latency_seconds);
    reading(out, &CONTEXT_CREATE, |r| Some(r.context_create_seconds));
    reading(out, &CONTEXT_BYTES, |r| r.context_bytes.map(|bytes| bytes as f64));
    reading(out, &DURATION, |r| Some(r.duration_seconds));
    reading(out, &LAST_SUCCESS, |r| Some(r.at.unix_seconds_f64()));
    counters(&scheduled, out);
}

fn counters(scheduled: &[&DeviceView<'_>], out: &mut Vec<u8>) {
    {
        let mut writer = FamilyWriter::new(out, &RUNS);
        for view in scheduled {
            writer.int(view.labels.as_str(), view.probe.runs);
        }
    }
    {
        let mut writer = FamilyWriter::new(out, &FAILURES);
        for view in scheduled {
            for &kind in ProbeFailureKind::ALL {
                let labels = view.labels.clone().with("kind", kind.as_str());
                writer.int(labels.as_str(), view.probe.failures_of(kind));
            }
        }
    }
    let mut writer = FamilyWriter::new(out, &SKIPPED);
    for view in scheduled {
        for &reason in ProbeSkipReason::ALL {
            let labels = view.labels.clone().with("reason", reason.as_str());
            writer.int(labels.as_str(), view.probe.skipped_for(reason));
        }
    }
}
