//! `/metrics`: the Prometheus exposition of every device's live state and
//! of vramd's own health.
//!
//! Owns: metric names, help texts and labels (DESIGN.md's naming contract).
//! A scrape only reads the live state the sampler left in history; it never
//! calls a device source. Absent values are left out, never written as 0.
//! Depends on: `history`, `analysis` (accounting, the published
//! snapshot), `alerts::board`, `telemetry`, `model`.
//!
//! Layout: this file takes one copy of each device's state per scrape
//! (`DeviceView`) and writes the device series; `processes` (per-process
//! series, kubelet allocations), `health`, `probe` and `alerts` write
//! theirs from the same views; `text` is the format writer.

mod alerts;
mod config;
mod health;
mod probe;
mod processes;
mod text;

pub use config::MetricsConfig;

use std::sync::Arc;

use crate::alerts::board::AlertBoard;
use crate::analysis::accounting;
use crate::analysis::snapshot::AnalysisSnapshot;
use crate::history::{DeviceHistory, HistoryStore, LiveState, ProbeState};
use crate::model::DeviceInfo;
use crate::telemetry::{Telemetry, TelemetryError};

use text::{Family, FamilyWriter, Labels, family};

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders the full exposition: device series, the latest analysis and
/// alerts, then self metrics.
pub fn render(
    store: &HistoryStore,
    telemetry: &Telemetry,
    analyses: &AnalysisSnapshot,
    board: &AlertBoard,
    config: &MetricsConfig,
) -> Result<Vec<u8>, TelemetryError> {
    let devices = store.devices();
    let views = collect(&devices, config);
    let mut out = device_series(&views);
    alerts::render(&views, analyses, board, &mut out);
    telemetry.encode_into(&mut out)?;
    Ok(out)
}

/// Renders only the device and process series (deterministic for a given
/// state; what the golden test pins down).
pub fn render_devices(store: &HistoryStore, config: &MetricsConfig) -> Vec<u8> {
    device_series(&collect(&store.devices(), config))
}

/// One device as a scrape sees it: its static facts borrowed from history,
/// copies of its live and probe state (taken once, so the locks are held
/// only for the copy), and its labels.
struct DeviceView<'a> {
    info: &'a DeviceInfo,
    /// `gpu`, `uuid` (and a MIG device's instance IDs): what names the
    /// device, and what series that carry their own pod labels start with.
    identity: Labels,
    /// The labels of the device's own series: its identity, and with
    /// `metrics.device_pod_labels` the one pod holding it.
    labels: Labels,
    live: LiveState,
    probe: ProbeState,
    fast_len: usize,
    slow_len: usize,
    /// OOM events ever received for the device.
    oom_events: u64,
    /// Wall time of each tier's last stored reading, fast then slow.
    last_success: [Option<crate::model::Timestamp>; 2],
}

fn collect<'a>(devices: &'a [Arc<DeviceHistory>], config: &MetricsConfig) -> Vec<DeviceView<'a>> {
    devices
        .iter()
        .map(|device| {
            let info = device.info();
            let mut identity = Labels::default()
                .with_uint("gpu", u64::from(info.gpu_index()))
                .with("uuid", &info.uuid);
            // dcgm-exporter's GPU_I_ID/GPU_I_PROFILE users filter MIG
            // series by instance; constant for a MIG device's UUID, so
            // they add no series.
            if let Some(mig) = &info.mig {
                if let Some(id) = mig.gpu_instance_id {
                    identity = identity.with_uint("gpu_instance_id", u64::from(id));
                }
                if let Some(id) = mig.compute_instance_id {
                    identity = identity.with_uint("compute_instance_id", u64::from(id));
                }
            }
            let live = device.live();
            let holder = config.device_pod_labels.then(|| only_holder(&live)).flatten();
            let labels = match holder {
                Some(holder) => holder.label(identity.clone()),
                None => identity.clone(),
            };
            DeviceView {
                info,
                identity,
                labels,
                live,
                probe: device.probe(),
                fast_len: device.fast_len(),
                slow_len: device.slow_len(),
                oom_events: device.oom_total(),
                last_success: crate::model::Tier::ALL
                    .map(|tier| device.progress().last_success(tier)),
            }
        })
        .collect()
}

/// The one pod the kubelet lists as holding a device, and its container
/// where that is one too.
struct Holder<'l> {
    pod: &'l str,
    namespace: &'l str,
    container: Option<&'l str>,
}

impl Holder<'_> {
    fn label(&self, identity: Labels) -> Labels {
        let labels = identity.with("pod", self.pod).with("namespace", self.namespace);
        match self.container {
            Some(container) => labels.with("container", container),
            None => labels,
        }
    }
}

/// The pod holding the device, when exactly one does: a GPU time-sliced
/// or shared between pods gets none, so pod labels never multiply a
/// device's series.
fn only_holder(live: &LiveState) -> Option<Holder<'_>> {
    let allocations = live.slow.as_ref()?.allocations.as_deref()?;
    let (first, rest) = allocations.split_first()?;
    let same_pod =
        |a: &crate::model::PodAllocation| a.pod == first.pod && a.namespace == first.namespace;
    if !rest.iter().all(same_pod) {
        return None;
    }
    let one_container = rest.iter().all(|a| a.container == first.container);
    Some(Holder {
        pod: &first.pod,
        namespace: &first.namespace,
        container: one_container.then_some(&*first.container),
    })
}

fn estimate_size(views: &[DeviceView<'_>]) -> usize {
    let processes: usize = views
        .iter()
        .filter_map(|view| view.live.slow.as_ref()?.processes.as_ref().map(Vec::len))
        .sum();
    8_192 + views.len() * 4_096 + processes * 1_600
}

family!(DEVICE_INFO, "vramd_device_info", Gauge, "Static facts about a monitored GPU; always 1.");
family!(
    SAMPLER_LAST_SUCCESS,
    "vramd_sampler_last_success_timestamp_seconds",
    Gauge,
    "Wall-clock time the sampler last stored a reading of this device and tier; with time(), how long a GPU has gone unseen (VramdSamplerStalled)."
);
family!(
    DEVICE_UP,
    "vramd_device_up",
    Gauge,
    "1 when the GPU answered its latest memory read, else 0."
);
family!(
    MEMORY_TOTAL,
    "vramd_memory_total_bytes",
    Gauge,
    "Total device memory (NVML memory info v2)."
);
family!(
    MEMORY_USED,
    "vramd_memory_used_bytes",
    Gauge,
    "Device memory in use by processes and contexts, excluding driver-reserved memory."
);
family!(MEMORY_FREE, "vramd_memory_free_bytes", Gauge, "Device memory free for allocation.");
family!(
    MEMORY_RESERVED,
    "vramd_memory_reserved_bytes",
    Gauge,
    "Device memory reserved by the driver (total = reserved + used + free)."
);
family!(
    MEMORY_PEAK,
    "vramd_memory_used_peak_bytes",
    Gauge,
    "Largest used memory over the configured peak window (metrics.peak_window), so spikes between scrapes show."
);
family!(
    GPU_UTIL,
    "vramd_gpu_utilization_ratio",
    Gauge,
    "Fraction of the last sample period during which a kernel ran."
);
family!(
    BANDWIDTH_UTIL,
    "vramd_memory_bandwidth_utilization_ratio",
    Gauge,
    "Fraction of the last sample period during which device memory was read or written."
);
family!(TEMPERATURE, "vramd_temperature_celsius", Gauge, "GPU core temperature.");
family!(POWER_USAGE, "vramd_power_usage_watts", Gauge, "Power drawn by the GPU.");
family!(POWER_LIMIT, "vramd_power_limit_watts", Gauge, "Power management limit of the GPU.");
family!(
    PROCESSES,
    "vramd_processes",
    Gauge,
    "Processes holding memory on the GPU, including any left out by the per-device cap."
);
family!(
    PROCESSES_DROPPED,
    "vramd_processes_dropped",
    Gauge,
    "Processes left out of per-process series by sampler.max_processes_per_device (smallest users first)."
);
family!(
    UNATTRIBUTED,
    "vramd_memory_unattributed_bytes",
    Gauge,
    "Used memory not attributed to any listed process (used minus the sum of per-process usage)."
);
family!(
    HISTORY_SAMPLES,
    "vramd_history_samples",
    Gauge,
    "Samples held in the device's history ring, by tier."
);

family!(
    ALLOC_OOM_EVENTS,
    "vramd_allocator_oom_events_total",
    Counter,
    "Allocator out-of-memory events received from workloads (POST /api/v1/oom-events)."
);

fn device_series(views: &[DeviceView<'_>]) -> Vec<u8> {
    let mut series = Vec::with_capacity(estimate_size(views));
    let out = &mut series;
    {
        let mut writer = FamilyWriter::new(out, &DEVICE_INFO);
        for view in views {
            let mut labels = view.labels.clone().with("name", &view.info.name);
            if let Some(bus) = &view.info.pci_bus_id {
                labels.push("pci_bus_id", bus);
            }
            if let Some(driver) = &view.info.driver_version {
                labels.push("driver_version", driver);
            }
            if let Some(mig) = &view.info.mig {
                labels.push("parent_uuid", &mig.parent_uuid);
                if let Some(profile) = &mig.profile {
                    labels.push("mig_profile", profile);
                }
            }
            writer.int(labels.as_str(), 1);
        }
    }
    device_family(out, views, &DEVICE_UP, |live| Some(u64::from(live.is_up()) as f64));
    {
        let mut writer = FamilyWriter::new(out, &SAMPLER_LAST_SUCCESS);
        for view in views {
            for (tier, at) in crate::model::Tier::ALL.into_iter().zip(view.last_success) {
                if let Some(at) = at {
                    let labels = view.labels.clone().with("tier", tier.as_str());
                    writer.float(labels.as_str(), at.unix_seconds_f64());
                }
            }
        }
    }
    let memory = |live: &LiveState| live.fast.as_ref().and_then(|fast| fast.memory);
    device_family(out, views, &MEMORY_TOTAL, |live| memory(live).map(|m| m.total_bytes as f64));
    device_family(out, views, &MEMORY_USED, |live| memory(live).map(|m| m.used_bytes as f64));
    device_family(out, views, &MEMORY_FREE, |live| memory(live).map(|m| m.free_bytes as f64));
    device_family(out, views, &MEMORY_RESERVED, |live| {
        memory(live).and_then(|m| m.reserved_bytes).map(|b| b as f64)
    });
    device_family(out, views, &MEMORY_PEAK, |live| live.peak_used_bytes.map(|b| b as f64));
    device_family(out, views, &GPU_UTIL, |live| live.fast.as_ref()?.gpu_utilization);
    device_family(out, views, &BANDWIDTH_UTIL, |live| {
        live.fast.as_ref()?.memory_bandwidth_utilization
    });
    device_family(out, views, &TEMPERATURE, |live| live.slow.as_ref()?.temperature_celsius);
    device_family(out, views, &POWER_USAGE, |live| live.slow.as_ref()?.power_usage_watts);
    device_family(out, views, &POWER_LIMIT, |live| live.slow.as_ref()?.power_limit_watts);
    device_family(out, views, &PROCESSES, |live| {
        let listed = live.slow.as_ref()?.processes.as_ref()?.len();
        Some((listed + live.processes_dropped) as f64)
    });
    device_family(out, views, &PROCESSES_DROPPED, |live| {
        live.slow.as_ref()?.processes.as_ref()?;
        Some(live.processes_dropped as f64)
    });
    device_family(out, views, &UNATTRIBUTED, |live| {
        // The accounting model's definition: absent unless every process is
        // listed with its usage.
        let processes = live.slow.as_ref()?.processes.as_deref()?;
        let breakdown = accounting::device_breakdown(
            &memory(live)?,
            Some(processes),
            live.processes_dropped == 0,
        );
        breakdown.unattributed_bytes.map(|bytes| bytes as f64)
    });
    {
        let mut writer = FamilyWriter::new(out, &HISTORY_SAMPLES);
        for view in views {
            writer.int(view.labels.clone().with("tier", "fast").as_str(), view.fast_len as u64);
            writer.int(view.labels.clone().with("tier", "slow").as_str(), view.slow_len as u64);
        }
    }
    {
        let mut writer = FamilyWriter::new(out, &ALLOC_OOM_EVENTS);
        for view in views {
            writer.int(view.labels.as_str(), view.oom_events);
        }
    }
    health::render(views, out);
    probe::render(views, out);
    processes::render(views, out);
    series
}

/// A family with at most one sample per device, which `value` picks from
/// the device's view (`None`: no sample).
fn per_device<'v, 'a: 'v>(
    out: &mut Vec<u8>,
    views: impl IntoIterator<Item = &'v DeviceView<'a>>,
    family: &Family,
    value: impl Fn(&DeviceView<'a>) -> Option<f64>,
) {
    let mut writer = FamilyWriter::new(out, family);
    for view in views {
        if let Some(value) = value(view) {
            writer.float(view.labels.as_str(), value);
        }
    }
}

/// [`per_device`] with a value from the device's live state.
fn device_family(
    out: &mut Vec<u8>,
    views: &[DeviceView<'_>],
    family: &Family,
    value: impl Fn(&LiveState) -> Option<f64>,
) {
    per_device(out, views, family, |view| value(&view.live));
}
