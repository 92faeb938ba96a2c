//! The analysis stage: one pass over every device's history window
//! (growth trend and time to exhaustion, pressure, allocator counters,
//! leaks, fragmentation, Xid errors) into an [`AnalysisSnapshot`]. The
//! same code serves the daemon (on a timer) and `vramd analyze` (as fast as
//! the CPU allows).
//!
//! Time is the newest sample timestamp, never the wall clock. Depends on:
//! `history` (read-only), `model` and the pure functions beside it; knows
//! nothing of alert rules, configuration or HTTP.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::history::{DeviceHistory, HistoryStore};
use crate::model::Timestamp;

use super::AnalysisConfig;
use super::counters::{CounterTrack, add, xid_increase};
use super::driver_retries::DriverRetries;
use super::floor::FloorScratch;
use super::leak::{Curve, LeakCheck, LeakFinding, LeakParams, Prior, detect_held_leak};
use super::pressure::{PressureInput, PressureThresholds, pressure};
use super::process_growth::ProcessGrowth;
use super::series;
use super::snapshot::{AnalysisSnapshot, DeviceFacts, DeviceSnapshot, ProcessFacts};
use super::summary::{DeviceAnalysis, ProcessLeak};
use super::trend::exhaustion::{projected_peak, seconds_to_full};
use super::trend::{ForecastParams, Trend};

/// The windows and thresholds the analysis uses: `[analysis]` itself
/// (through `Deref`), and what the wiring derives from the rules the
/// analysis serves (`[alerts.<rule>]` windows and thresholds).
#[derive(Clone, Debug, PartialEq)]
pub struct AnalysisSettings {
    /// `[analysis]`.
    pub config: AnalysisConfig,
    /// Least fit of the growth trend for a time to exhaustion.
    pub exhaustion_min_fit: f64,
    /// Windows over which allocator retries and OOMs are counted.
    pub retries_window: Duration,
    pub oom_window: Duration,
    /// Window over which new Xid errors are counted.
    pub xid_window: Duration,
    /// Leak assessment over this window with these criteria; `None` turns
    /// it off (the leak rule is disabled).
    pub leak: Option<(Duration, LeakParams)>,
    /// A probe reading older than this is no longer a fact.
    pub probe_stale_after: Duration,
    pub pressure: PressureThresholds,
    /// How the growth trend of the used-memory floor is forecast.
    pub forecast: ForecastParams,
}

impl std::ops::Deref for AnalysisSettings {
    type Target = AnalysisConfig;
    fn deref(&self) -> &AnalysisConfig {
        &self.config
    }
}

pub struct Analyzer {
    settings: AnalysisSettings,
    scratch: FloorScratch,
    /// Reused between leak checks: one process's leak window as points.
    process_buffer: series::PidSeries,
    /// Reused between trend checks: a device's used memory without the
    /// processes that do not grow (`analysis::process_growth`).
    cleaned_buffer: Vec<(Timestamp, u64)>,
    /// What each listed device carries from pass to pass, by UUID.
    memos: HashMap<String, DeviceMemo>,
    /// The process whose leak checks are recorded, and its checks so far
    /// (`trace_leaks_of`); `None`, the daemon's case, records nothing.
    leak_trace: Option<(u32, Vec<LeakCheck>)>,
}

/// When the trend was estimated, the trend and whether its growth is
/// sustained, the recent peak of used memory, and the saturating curve the
/// floor follows where its rate keeps falling (`trend::saturation`).
type TrendMemo = (Timestamp, Option<(Trend, bool)>, Option<(Timestamp, f64)>, Option<(f64, f64)>);

/// One device's state between passes.
#[derive(Default)]
struct DeviceMemo {
    /// When the growth was last estimated, the trend of the used floor and
    /// whether it keeps rising, and the peak of used memory just before.
    trend: Option<TrendMemo>,
    /// When leaks were last assessed, and the findings by PID.
    leaks: Option<(Timestamp, HashMap<u32, LeakFinding>)>,
    /// Processes the last leak check found warming up (rule 6), with the
    /// curve last fitted to their floor: held as warm-ups while their rate
    /// keeps falling or their floor follows that curve (`leak::Prior`).
    warming: HashMap<u32, Option<Curve>>,
    /// The device's used memory over the trend window, slid check by check.
    used: series::UsedWindow,
    /// Every process's usage over the trend window, slid check by check,
    /// for the growth read process by process.
    process_growth: ProcessGrowth,
    /// Every process's series over the leak window, slid check by check.
    process_windows: series::ProcessWindows,
    /// Allocator counter steps, kept up to date from the samples that
    /// arrived since the previous pass.
    counters: CounterTrack,
    /// The driver trace's retries of processes no reporter speaks for.
    driver_retries: DriverRetries,
    /// (at, cumulative Xid count), to count new ones.
    xid_totals: VecDeque<(Timestamp, u64)>,
}

impl Analyzer {
    pub fn new(settings: AnalysisSettings) -> Self {
        Self {
            settings,
            scratch: FloorScratch::default(),
            process_buffer: series::PidSeries::default(),
            cleaned_buffer: Vec::new(),
            memos: HashMap::new(),
            leak_trace: None,
        }
    }

    /// Records every leak check of `pid` from now on (on whichever device
    /// lists it), for [`Analyzer::take_leak_trace`]: why a leak was (not)
    /// called when it was, from the checks the alerts followed. Each
    /// check keeps a copy of the series it read until taken: for the
    /// benchmark and tests, never turned on by the daemon.
    pub fn trace_leaks_of(&mut self, pid: u32) {
        self.leak_trace = Some((pid, Vec::new()));
    }

    /// The checks recorded since [`Analyzer::trace_leaks_of`] (or the last
    /// take), oldest first.
    pub fn take_leak_trace(&mut self) -> Vec<LeakCheck> {
        self.leak_trace.as_mut().map(|(_, checks)| std::mem::take(checks)).unwrap_or_default()
    }

    /// Takes new settings (a configuration reload) and keeps what each
    /// device carries, so alerts do not start over: the trend is estimated
    /// afresh at the next pass (its window may have changed), and the leak
    /// series and findings are rebuilt from history only when the leak
    /// criteria changed, since they were judged against the old ones.
    pub fn reconfigure(&mut self, settings: AnalysisSettings) {
        let leaks_changed = settings.leak != self.settings.leak;
        for memo in self.memos.values_mut() {
            memo.trend = None;
            memo.process_growth = ProcessGrowth::default();
            if leaks_changed {
                memo.leaks = None;
                memo.warming.clear();
                memo.process_windows = series::ProcessWindows::default();
            }
        }
        self.settings = settings;
    }

    /// The newest sample time over all devices, the clock of a pass.
    pub fn newest(store: &HistoryStore) -> Option<Timestamp> {
        store.devices().iter().filter_map(|device| device.newest_at()).max()
    }

    /// Analyses every listed device at `now`, in the store's order.
    pub fn analyse(&mut self, store: &HistoryStore, now: Timestamp) -> AnalysisSnapshot {
        let devices = store.devices();
        // A device no longer listed leaves nothing behind.
        self.memos.retain(|uuid, _| devices.iter().any(|device| device.info().uuid == *uuid));
        let devices = devices.iter().map(|device| self.analyse_device(device, now)).collect();
        AnalysisSnapshot { at: Some(now), devices }
    }

    fn analyse_device(&mut self, device: &DeviceHistory, now: Timestamp) -> DeviceSnapshot {
        // Taken out and put back with its key, so a known device costs no
        // key allocation per pass.
        let (uuid, mut memo) = self
            .memos
            .remove_entry(&device.info().uuid)
            .unwrap_or_else(|| (device.info().uuid.clone(), DeviceMemo::default()));
        let result = self.analyse_with(device, &mut memo, now);
        self.memos.insert(uuid, memo);
        result
    }

    fn analyse_with(
        &mut self,
        device: &DeviceHistory,
        memo: &mut DeviceMemo,
        now: Timestamp,
    ) -> DeviceSnapshot {
        let settings = &self.settings;
        let live = device.live();
        let memory = live.fast.as_ref().and_then(|fast| fast.memory);
        let trend_due = memo.trend.is_none_or(|(estimated, _, _, _)| {
            now.duration_since(estimated).is_none_or(|age| age >= settings.trend_check_interval)
        });
        if trend_due {
            // Snapshots copy the open chunk of a ring: only taken when due.
            let fast = device.fast_snapshot();
            let window_start = now.saturating_sub(settings.trend_window);
            memo.used.slide(&fast, window_start, now);
            let used = memo.used.points();
            let floor = settings.forecast.trend(&mut self.scratch, used);
            // Read process by process where that may apply.
            let processes = &mut memo.process_growth;
            let by_process = ProcessGrowth::worth_reading(device, &settings.forecast, floor)
                .then(|| {
                    processes.gather(device, window_start, now);
                    let (scratch, cleaned) = (&mut self.scratch, &mut self.cleaned_buffer);
                    processes.rate(&settings.forecast, scratch, cleaned, used, floor)
                })
                .flatten();
            let estimate = by_process.unwrap_or(floor);
            let slope = estimate.map_or(0.0, |(trend, _)| trend.slope_per_second);
            let window = settings.forecast.peak_window;
            let peak = projected_peak(used, window, slope);
            // Only growth that would be forecast is followed along a curve.
            let curve = estimate
                .is_some_and(|(_, sustained)| sustained)
                .then(|| settings.forecast.plateau(&mut self.scratch, used))
                .flatten();
            memo.trend = Some((now, estimate, peak, curve));
        }
        let trend = memo.trend.and_then(|(_, trend, _, _)| trend.map(|(trend, _)| trend));
        // Only growth that goes on is forecast: a warm-up levelling off or a
        // second job's step is no deadline.
        let sustained = memo.trend.is_some_and(|(_, trend, _, _)| trend.is_some_and(|(_, on)| on));
        let exhaustion = match (memory, trend.as_ref()) {
            (Some(memory), Some(trend)) if sustained => {
                // Memory runs out at the top of a step, not at a random
                // sample: count from the recent peak, carried on to now.
                let peak = memo
                    .trend
                    .and_then(|(_, _, peak, _)| peak)
                    .unwrap_or((now, memory.used_bytes as f64));
                let capacity = memory.used_bytes.saturating_add(memory.free_bytes);
                let curve = memo.trend.and_then(|(_, _, _, curve)| curve);
                let fit = settings.exhaustion_min_fit;
                seconds_to_full(capacity, peak, trend, curve, now, fit)
            }
            _ => None,
        };

        // Processes seen in the counter windows; leak assessment (below)
        // looks at its own, longer window only when it is due.
        memo.counters.update(device, now, settings.retries_window.max(settings.oom_window));
        let counters = memo.counters.increases(now, settings.retries_window, settings.oom_window);
        memo.driver_retries.update(live.slow.as_deref(), settings.retries_window);
        // Borrowed from the shared latest reading: cloning every process's
        // strings on every pass was a tenth of an offline run.
        let latest_processes: &[crate::model::ProcessInfo] =
            live.slow.as_deref().and_then(|slow| slow.processes.as_deref()).unwrap_or(&[]);
        let mut processes = Vec::new();
        let (mut retries_total, mut ooms_total) = (None::<u64>, None::<u64>);
        let mut leaks = Vec::new();
        let stale = memo.leaks.as_ref().is_none_or(|(checked, _)| {
            now.duration_since(*checked).is_none_or(|age| age >= settings.leak_check_interval)
        });
        if stale {
            let findings: HashMap<u32, LeakFinding> = match &settings.leak {
                Some((window, params)) => {
                    let from = now.saturating_sub(*window);
                    // Only the samples that arrived since the last check,
                    // read under the ring's lock: no snapshot copy, and no
                    // search of the whole window per process.
                    let windows = &mut memo.process_windows;
                    let resume = windows.resume_at(from);
                    device.visit_recent_slow_figures(resume, now, series::LEAK_FIGURES, |sample| {
                        windows.add_figures(sample)
                    });
                    windows.trim(from);
                    // A leak already suspected is held until it stops.
                    let previous =
                        memo.leaks.take().map(|(_, findings)| findings).unwrap_or_default();
                    let scratch = &mut self.scratch;
                    let leak_trace = &mut self.leak_trace;
                    let mut findings = HashMap::new();
                    let warming = &mut memo.warming;
                    let mut still_warming = HashMap::new();
                    windows.visit_processes(&mut self.process_buffer, |process| {
                        let held = previous.get(&process.pid);
                        let mut prior = if held.is_some() {
                            Prior::Held
                        } else if let Some(&curve) = warming.get(&process.pid) {
                            Prior::WarmingUp(curve)
                        } else {
                            Prior::Nothing
                        };
                        let traced = leak_trace
                            .as_mut()
                            .filter(|(pid, _)| *pid == process.pid)
                            .map(|(_, checks)| checks);
                        let mut judged = traced.is_some().then(Vec::new);
                        let handed = prior;
                        let verdict = detect_held_leak(
                            scratch,
                            process,
                            from,
                            held,
                            &mut prior,
                            params,
                            judged.as_mut(),
                        )
                        .map(|finding| finding.after(held));
                        if let Prior::WarmingUp(curve) = prior {
                            still_warming.insert(process.pid, curve);
                        }
                        if let Some(checks) = traced {
                            checks.push(LeakCheck {
                                at: now,
                                prior: handed,
                                series: process.preferred().map(|(m, v)| (m, v.to_vec())),
                                windows: judged.unwrap_or_default(),
                                verdict,
                            });
                        }
                        if let Ok(finding) = verdict {
                            findings.insert(process.pid, finding);
                        }
                    });
                    *warming = still_warming;
                    findings
                }
                None => HashMap::new(),
            };
            memo.leaks = Some((now, findings));
        }
        let cached_leaks = memo.leaks.as_ref().map(|(_, findings)| findings);
        for &(pid, retries, ooms) in &counters {
            // A reporter's counter, else the driver's: never both.
            let driver_retries = match retries {
                Some(_) => None,
                None => memo.driver_retries.in_window(pid, now, settings.retries_window),
            };
            let retries = retries.or(driver_retries);
            retries_total = add(retries_total, retries);
            ooms_total = add(ooms_total, ooms);
            let leak = cached_leaks.and_then(|findings| findings.get(&pid)).cloned();
            if let Some(finding) = &leak {
                leaks.push(ProcessLeak {
                    pid,
                    slope_bytes_per_second: finding.evidence.slope_bytes_per_second,
                    fit: finding.evidence.fit,
                    window_seconds: finding.evidence.window_seconds,
                    growth_bytes: finding.evidence.growth_bytes,
                    metric: finding.metric.as_str(),
                });
            }
            let latest = latest_processes.iter().find(|process| process.pid == pid);
            processes.push(ProcessFacts {
                pid,
                name: latest.and_then(|process| process.name.clone()),
                allocator: latest.and_then(|process| process.allocator),
                snapshot: latest.and_then(|process| process.details.snapshot),
                pool_limit_bytes: latest.and_then(|process| process.details.pool_limit_bytes),
                retries_in_window: retries,
                retries_from_driver: driver_retries.is_some(),
                ooms_in_window: ooms,
                leak,
            });
        }

        // An OOM event is the OOM itself, seconds before the reporter's next
        // `num_ooms` step: the pressure counts whichever says more.
        let oom_events = device.oom_events_between(now.saturating_sub(settings.oom_window), now);
        if !oom_events.is_empty() {
            let events = oom_events.len() as u64;
            ooms_total = Some(ooms_total.map_or(events, |counted| counted.max(events)));
        }
        // A preallocated pool's unused part is free to its process: NVML
        // counts it used, pressure does not.
        let pool_free = super::accounting::preallocated_free_bytes(&processes);
        let level = memory.map(|memory| {
            pressure(
                &PressureInput {
                    total_bytes: memory.total_bytes,
                    used_bytes: memory.used_bytes.saturating_sub(pool_free),
                    free_bytes: memory.free_bytes.saturating_add(pool_free),
                    time_to_exhaustion_seconds: exhaustion,
                    retries_in_window: retries_total,
                    ooms_in_window: ooms_total,
                },
                &settings.pressure,
            )
        });
        let breakdown = memory.map(|memory| {
            super::accounting::device_breakdown(
                &memory,
                Some(latest_processes),
                live.processes_dropped == 0,
            )
        });
        let xid_in_window = xid_increase(
            &mut memo.xid_totals,
            &live,
            now,
            settings.xid_window,
            settings.max_xid_history.get(),
        );
        let analysis = DeviceAnalysis {
            at: now,
            growth_bytes_per_second: trend.as_ref().map(|trend| trend.slope_per_second),
            growth_fit: trend.as_ref().map(|trend| trend.fit),
            trend_window_seconds: settings.trend_window.as_secs_f64(),
            time_to_exhaustion_seconds: exhaustion,
            pressure_level: level.as_ref().map_or(0, |p| p.level.as_u8()),
            pressure: level.as_ref().map_or("unknown", |p| p.level.as_str()),
            pressure_reasons: level.map(|p| p.reasons).unwrap_or_default(),
            allocator_cache_bytes: breakdown.map_or(0, |b| b.allocator_cache_bytes),
            allocator_fragmented_bytes: breakdown.map_or(0, |b| b.fragmented_bytes),
            leaks,
        };
        let stale_after = settings.probe_stale_after;
        let facts = DeviceFacts {
            info: device.info().clone(),
            up: !live.is_lost(),
            failure: live.fast_failure.as_ref().map(|failure| failure.message.clone()),
            memory,
            processes,
            xid_in_window,
            // Only a current reading: one older than twice the probe
            // interval means the device has been skipped or failing since.
            // Read in place: the rest of the probe state is not needed.
            probe: device.read_probe(|state| {
                state
                    .latest
                    .as_ref()
                    .filter(|reading| {
                        now.duration_since(reading.at).is_none_or(|age| age <= stale_after)
                    })
                    .cloned()
            }),
            oom_events,
        };
        DeviceSnapshot { facts, analysis }
    }
}
