//! Series from the analyzer and the alert engine: growth, time to
//! exhaustion, pressure level, allocator cache and fragments per device,
//! and `vramd_alert_active` per pending or firing alert.

use crate::alerts::AlertState;
use crate::alerts::board::AlertBoard;
use crate::analysis::snapshot::AnalysisSnapshot;
use crate::analysis::summary::DeviceAnalysis;

use super::text::{Family, FamilyWriter, Labels, family};
use super::{DeviceView, per_device};

family!(
    GROWTH,
    "vramd_memory_growth_bytes_per_second",
    Gauge,
    "Growth of used memory over analysis.trend_window (Theil-Sen estimate); absent with too few samples."
);
family!(
    GROWTH_FIT,
    "vramd_memory_growth_fit_ratio",
    Gauge,
    "How well a straight line explains used memory over the trend window, 0-1."
);
family!(
    EXHAUSTION,
    "vramd_memory_time_to_exhaustion_seconds",
    Gauge,
    "Free memory divided by the growth rate; only for positive growth with a good fit, otherwise absent."
);
family!(
    PRESSURE,
    "vramd_memory_pressure_level",
    Gauge,
    "Memory pressure: 0 ok, 1 elevated, 2 high, 3 critical (see docs/alerts.md for the rules)."
);
family!(
    CACHE,
    "vramd_allocator_cache_bytes",
    Gauge,
    "Memory held as PyTorch allocator cache (reserved minus allocated) across the device's processes."
);
family!(
    FRAGMENTED,
    "vramd_allocator_fragmented_bytes",
    Gauge,
    "Allocator cache in free pieces of split segments across the device's processes (inactive_split)."
);
family!(
    ALERT_ACTIVE,
    "vramd_alert_active",
    Gauge,
    "1 for each pending or firing vramd alert (alertstate says which)."
);

pub(super) fn render(
    views: &[DeviceView<'_>],
    analyses: &AnalysisSnapshot,
    board: &AlertBoard,
    out: &mut Vec<u8>,
) {
    let analysis = |out: &mut Vec<u8>,
                    family: &Family,
                    value: fn(&DeviceAnalysis) -> Option<f64>| {
        per_device(out, views, family, |view| analyses.analysis(&view.info.uuid).and_then(value));
    };
    analysis(out, &GROWTH, |a| a.growth_bytes_per_second);
    analysis(out, &GROWTH_FIT, |a| a.growth_fit);
    analysis(out, &EXHAUSTION, |a| a.time_to_exhaustion_seconds);
    analysis(out, &PRESSURE, |a| (a.pressure != "unknown").then_some(f64::from(a.pressure_level)));
    analysis(out, &CACHE, |a| Some(a.allocator_cache_bytes as f64));
    analysis(out, &FRAGMENTED, |a| Some(a.allocator_fragmented_bytes as f64));

    let alerts = board.alerts();
    let mut writer = FamilyWriter::new(out, &ALERT_ACTIVE);
    for alert in alerts.iter().filter(|alert| alert.state != AlertState::Resolved) {
        let mut labels = Labels::default()
            .with("alertname", &alert.alertname())
            .with("alertstate", alert.state.as_str())
            .with("severity", alert.severity.as_str())
            .with("rule", alert.key.rule.as_str())
            .with_uint("gpu", u64::from(alert.gpu))
            .with("uuid", &alert.key.uuid);
        if let Some(pid) = alert.key.pid {
            labels = labels.with_uint("pid", u64::from(pid));
        }
        if let Some(process) = &alert.process {
            labels.push("process", process);
        }
        writer.int(labels.as_str(), 1);
    }
}
