//! Series from the analyzer and the alert engine: growth, time to
//! exhaustion, pressure level, allocator cache and fragments per device,
//! and `vramd_alert_active` per pending or firing alert.

use crate::alerts::AlertState;
use crate::alerts::board::AlertBoard;

use super::DeviceView;
use super::text::{Family, FamilyWriter, Labels, family};

family!(
    GROWTH,
    "vramd_memory_growth_bytes_per_second",
    Gauge,
    "Growth of used memory over alerts.trend_window (Theil-Sen estimate); absent with too few samples."
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

pub(super) fn render(views: &[DeviceView], board: &AlertBoard, out: &mut Vec<u8>) {
    let analyses = board.analyses();
    let per_device =
        |family: &Family,
         out: &mut Vec<u8>,
         value: &dyn Fn(&crate::analysis::summary::DeviceAnalysis) -> Option<f64>| {
            let mut writer = FamilyWriter::new(out, family);
            for view in views {
                if let Some(value) = analyses.get(&view.info.uuid).and_then(value) {
                    writer.float(view.labels.as_str(), value);
                }
            }
        };
    per_device(&GROWTH, out, &|a| a.growth_bytes_per_second);
    per_device(&GROWTH_FIT, out, &|a| a.growth_fit);
    per_device(&EXHAUSTION, out, &|a| a.time_to_exhaustion_seconds);
    per_device(&PRESSURE, out, &|a| {
        (a.pressure != "unknown").then_some(f64::from(a.pressure_level))
    });
    per_device(&CACHE, out, &|a| Some(a.allocator_cache_bytes as f64));
    per_device(&FRAGMENTED, out, &|a| Some(a.allocator_fragmented_bytes as f64));

    let alerts = board.alerts();
    let mut writer = FamilyWriter::new(out, &ALERT_ACTIVE);
    for alert in alerts.iter().filter(|alert| alert.state != AlertState::Resolved) {
        let mut labels = Labels::default()
            .with("alertname", &alert.alertname())
            .with("alertstate", alert.state.as_str())
            .with("severity", alert.severity.as_str())
            .with("rule", &alert.key.rule)
            .with("gpu", &alert.gpu.to_string())
            .with("uuid", &alert.key.uuid);
        if let Some(pid) = alert.key.pid {
            labels.push("pid", &pid.to_string());
        }
        if let Some(process) = &alert.process {
            labels.push("process", process);
        }
        writer.int(labels.as_str(), 1);
    }
}
