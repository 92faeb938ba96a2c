//! One evaluation pass: analyse every device's history window, run the
//! rules, advance the state machine. The same code serves the daemon (on a
//! timer) and `vramd analyze` (as fast as the CPU allows).
//!
//! Time is the newest sample timestamp, never the wall clock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use crate::analysis::leak::{LeakFinding, LeakParams, detect_process_leak};
use crate::analysis::pressure::{PressureInput, PressureThresholds, pressure};
use crate::analysis::series;
use crate::analysis::summary::{DeviceAnalysis, ProcessLeak};
use crate::analysis::trend::{TrendScratch, time_to_exhaustion};
use crate::config::AlertsConfig;
use crate::history::{DeviceHistory, HistoryStore};
use crate::model::Timestamp;

use super::engine::{Engine, EngineLimits, Observation};
use super::model::{Alert, Transition};
use super::rules::{self, DeviceFacts, ProcessFacts};

/// Points the growth estimate reduces a window to (cost is quadratic).
const TREND_POINTS: usize = 30;
/// Xid totals remembered per device for the window count.
const XID_HISTORY: usize = 1_024;
/// How often (source time) leaks are re-assessed. A leak is judged over a
/// 30-minute window, so a minute changes little, and it is by far the
/// costliest analysis (every process's whole window).
const LEAK_CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// What one pass produced.
pub struct Evaluation {
    pub at: Timestamp,
    pub transitions: Vec<Transition>,
    pub alerts: Vec<Alert>,
    pub analyses: BTreeMap<String, DeviceAnalysis>,
}

pub struct Evaluator {
    config: AlertsConfig,
    engine: Engine,
    scratch: TrendScratch,
    pressure_thresholds: PressureThresholds,
    /// (at, cumulative Xid count) per device UUID, to count new ones.
    xid_totals: HashMap<String, VecDeque<(Timestamp, u64)>>,
    /// Per device UUID: when leaks were last assessed, and the findings.
    leak_cache: HashMap<String, (Timestamp, HashMap<u32, LeakFinding>)>,
    /// Reused between passes: the used-memory window of one device.
    used_buffer: Vec<(Timestamp, u64)>,
}

impl Evaluator {
    pub fn new(config: &AlertsConfig) -> Self {
        Self {
            engine: Engine::new(EngineLimits {
                resolved_retention: config.resolved_retention,
                max_alerts: config.max_alerts.get(),
            }),
            config: config.clone(),
            scratch: TrendScratch::new(),
            pressure_thresholds: PressureThresholds::default(),
            xid_totals: HashMap::new(),
            leak_cache: HashMap::new(),
            used_buffer: Vec::new(),
        }
    }

    pub fn dropped_alerts(&self) -> u64 {
        self.engine.dropped()
    }

    pub fn firing(&self) -> Vec<Alert> {
        self.engine.firing().cloned().collect()
    }

    /// The newest sample time over all devices, the clock of a pass.
    pub fn newest(store: &HistoryStore) -> Option<Timestamp> {
        store.devices().iter().filter_map(|device| device.live().newest_at()).max()
    }

    /// Runs every rule at `now`. `source_up` is false while the device
    /// source cannot list devices (NVML down).
    pub fn evaluate(
        &mut self,
        store: &HistoryStore,
        source_up: bool,
        now: Timestamp,
    ) -> Evaluation {
        let mut observations = Vec::new();
        let mut analyses = BTreeMap::new();
        let devices = store.devices();
        if !source_up {
            observations.push(rules::source_down(&self.config.rules));
        }
        for device in &devices {
            let (facts, analysis) = self.analyse(device, now);
            rules::observe(&self.config.rules, &facts, &mut observations);
            analyses.insert(device.info().uuid.clone(), analysis);
        }
        let transitions = self.engine.evaluate(now, observations);
        Evaluation {
            at: now,
            transitions,
            alerts: self.engine.alerts().cloned().collect(),
            analyses,
        }
    }

    fn analyse(&mut self, device: &DeviceHistory, now: Timestamp) -> (DeviceFacts, DeviceAnalysis) {
        let rules = &self.config.rules;
        let live = device.live();
        let memory = live.fast.as_ref().and_then(|fast| fast.memory);
        let fast = device.fast_snapshot();
        let slow = device.slow_snapshot();

        let window_start = now.saturating_sub(self.config.trend_window);
        series::device_used_into(&fast, window_start, now, &mut self.used_buffer);
        let trend = self.scratch.theil_sen_with(&self.used_buffer, TREND_POINTS);
        let exhaustion = match (memory, trend.as_ref()) {
            (Some(memory), Some(trend)) => {
                time_to_exhaustion(memory.free_bytes, trend, self.config.rules.exhaustion_min_fit)
            }
            _ => None,
        };

        // Processes seen in the counter windows; leak assessment (below)
        // looks at its own, longer window only when it is due.
        let counters = counter_increases(&slow, now, rules.retries_window, rules.oom_window);
        let latest_processes =
            live.slow.as_ref().and_then(|slow| slow.processes.clone()).unwrap_or_default();
        let leak_params = LeakParams {
            min_slope_bytes_per_second: rules.leak_suspected.threshold,
            ..LeakParams::for_window(rules.leak_window)
        };
        let mut processes = Vec::new();
        let (mut retries_total, mut ooms_total) = (None::<u64>, None::<u64>);
        let mut leaks = Vec::new();
        let uuid = device.info().uuid.clone();
        let stale = self.leak_cache.get(&uuid).is_none_or(|(checked, _)| {
            now.duration_since(*checked).is_none_or(|age| age >= LEAK_CHECK_INTERVAL)
        });
        if stale {
            let findings: HashMap<u32, LeakFinding> = if rules.leak_suspected.enabled {
                let leak_pids = pids_in(&slow, now.saturating_sub(rules.leak_window), now);
                leak_pids
                    .iter()
                    .filter_map(|&pid| {
                        detect_process_leak(
                            &slow,
                            pid,
                            now.saturating_sub(rules.leak_window),
                            now,
                            &leak_params,
                        )
                        .map(|finding| (pid, finding))
                    })
                    .collect()
            } else {
                HashMap::new()
            };
            self.leak_cache.insert(uuid.clone(), (now, findings));
        }
        let cached_leaks = self.leak_cache.get(&uuid).map(|(_, findings)| findings);
        for &(pid, retries, ooms) in &counters {
            retries_total = add(retries_total, retries);
            ooms_total = add(ooms_total, ooms);
            let leak = cached_leaks.and_then(|findings| findings.get(&pid)).cloned();
            if let Some(finding) = &leak {
                leaks.push(ProcessLeak {
                    pid,
                    slope_bytes_per_second: finding.slope_bytes_per_second,
                    fit: finding.fit,
                    window_seconds: finding.window_seconds,
                    growth_bytes: finding.growth_bytes,
                    metric: finding.metric.as_str(),
                });
            }
            let latest = latest_processes.iter().find(|process| process.pid == pid);
            processes.push(ProcessFacts {
                pid,
                name: latest.and_then(|process| process.name.clone()),
                allocator: latest.and_then(|process| process.allocator),
                retries_in_window: retries,
                ooms_in_window: ooms,
                leak,
            });
        }

        let level = memory.map(|memory| {
            pressure(
                &PressureInput {
                    total_bytes: memory.total_bytes,
                    used_bytes: memory.used_bytes,
                    free_bytes: memory.free_bytes,
                    time_to_exhaustion_seconds: exhaustion,
                    retries_in_window: retries_total,
                    ooms_in_window: ooms_total,
                },
                &self.pressure_thresholds,
            )
        });
        let breakdown = memory.map(|memory| {
            crate::analysis::accounting::device_breakdown(
                &memory,
                Some(&latest_processes),
                live.processes_dropped == 0,
            )
        });
        let xid_in_window = self.xid_increase(device, &live, now);
        let analysis = DeviceAnalysis {
            at: now,
            growth_bytes_per_second: trend.as_ref().map(|trend| trend.slope_per_second),
            growth_fit: trend.as_ref().map(|trend| trend.fit),
            trend_window_seconds: self.config.trend_window.as_secs_f64(),
            time_to_exhaustion_seconds: exhaustion,
            pressure_level: level.as_ref().map_or(0, |p| p.level.as_u8()),
            pressure: level.as_ref().map_or("unknown", |p| p.level.as_str()),
            pressure_reasons: level.as_ref().map(|p| p.reasons.clone()).unwrap_or_default(),
            allocator_cache_bytes: breakdown.map_or(0, |b| b.allocator_cache_bytes),
            allocator_fragmented_bytes: breakdown.map_or(0, |b| b.fragmented_bytes),
            leaks,
        };
        let facts = DeviceFacts {
            info: device.info().clone(),
            up: live.is_up(),
            failure: live.fast_failure.as_ref().map(|failure| failure.message.clone()),
            memory,
            trend,
            time_to_exhaustion_seconds: exhaustion,
            trend_window: self.config.trend_window,
            processes,
            xid_in_window,
        };
        (facts, analysis)
    }

    /// New Xid errors of a device within the window, from the cumulative
    /// counts its slow readings carry.
    fn xid_increase(
        &mut self,
        device: &DeviceHistory,
        live: &crate::history::LiveState,
        now: Timestamp,
    ) -> Option<u64> {
        let total: u64 = live.slow.as_ref()?.details.xid_errors.values().sum();
        let history = self.xid_totals.entry(device.info().uuid.clone()).or_default();
        if history.back().is_none_or(|&(_, last)| last != total) {
            history.push_back((now, total));
        }
        let oldest_kept = now.saturating_sub(self.config.rules.xid_window);
        while history.len() > XID_HISTORY
            || history.get(1).is_some_and(|&(at, _)| at <= oldest_kept)
        {
            history.pop_front();
        }
        let baseline =
            history.front().map_or(total, |&(at, count)| if at <= oldest_kept { count } else { 0 });
        Some(total.saturating_sub(baseline))
    }
}

/// The PIDs present in the longer of the two counter windows (first-seen
/// order), each with the allocator retries and OOMs gained within its own
/// window, in one pass (a drop means the process restarted: the new value
/// counts in full, as `series::counter_increase` does). A handful of PIDs
/// per device: a linear search beats hashing on every evaluation.
fn counter_increases(
    slow: &crate::history::Snapshot<crate::history::SlowPoint>,
    now: Timestamp,
    retries_window: Duration,
    oom_window: Duration,
) -> Vec<(u32, Option<u64>, Option<u64>)> {
    #[derive(Default)]
    struct Counter {
        last: Option<u64>,
        gained: Option<u64>,
    }
    impl Counter {
        fn see(&mut self, value: u64) {
            if let Some(last) = self.last {
                let step = if value >= last { value - last } else { value };
                self.gained = Some(self.gained.unwrap_or(0).saturating_add(step));
            }
            self.last = Some(value);
        }
    }
    let retries_from = now.saturating_sub(retries_window);
    let oom_from = now.saturating_sub(oom_window);
    let mut state: Vec<(u32, Counter, Counter)> = Vec::new();
    for point in slow.range(retries_from.min(oom_from), now) {
        let at = crate::history::Stamped::at(point);
        for process in point.processes().into_iter().flatten() {
            let slot = match state.iter().position(|(pid, _, _)| *pid == process.pid) {
                Some(slot) => slot,
                None => {
                    state.push((process.pid, Counter::default(), Counter::default()));
                    state.len() - 1
                }
            };
            let (Some(stats), Some((_, retries, ooms))) =
                (process.allocator(), state.get_mut(slot))
            else {
                continue;
            };
            if at >= retries_from {
                retries.see(stats.alloc_retries);
            }
            if at >= oom_from {
                ooms.see(stats.ooms);
            }
        }
    }
    state.into_iter().map(|(pid, retries, ooms)| (pid, retries.gained, ooms.gained)).collect()
}

/// The PIDs present in a window, in first-seen order. A handful per device:
/// a linear `contains` beats building a set on every evaluation.
fn pids_in(
    slow: &crate::history::Snapshot<crate::history::SlowPoint>,
    from: Timestamp,
    to: Timestamp,
) -> Vec<u32> {
    let mut pids: Vec<u32> = Vec::new();
    for point in slow.range(from, to) {
        for process in point.processes().into_iter().flatten() {
            if !pids.contains(&process.pid) {
                pids.push(process.pid);
            }
        }
    }
    pids
}

fn add(sum: Option<u64>, value: Option<u64>) -> Option<u64> {
    match (sum, value) {
        (None, None) => None,
        (sum, value) => Some(sum.unwrap_or(0).saturating_add(value.unwrap_or(0))),
    }
}

/// The observations of one pass, for tests of the rules alone.
pub fn observations_for(
    rules: &crate::config::RulesConfig,
    facts: &DeviceFacts,
) -> Vec<Observation> {
    let mut observations = Vec::new();
    rules::observe(rules, facts, &mut observations);
    observations
}
