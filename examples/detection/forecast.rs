//! `--explain RUN` on a growth run: why the exhaustion forecast of one
//! labelled run fires when it does and says what it says. Replays the
//! device's used memory at the fast tier's rate, re-estimates the trend as
//! the analyzer does (every `trend_check_interval`), and prints, from a
//! minute before the onset until the device is full, the chosen window's
//! span, slope and intercept, whether growth counts as sustained, the
//! forecast, the time actually left and, beside it, what the corpus says
//! the device must hold at the top of every step (the figure "full" is
//! measured on) against what the forecast counted from.

use std::time::Duration;

use vramd::analysis::floor::FloorScratch;
use vramd::analysis::process_growth::ProcessGrowth;
use vramd::analysis::trend::exhaustion::{projected_peak, seconds_to_full};
use vramd::analyze::AnalyzeSettings;
use vramd::history::DeviceHistory;
use vramd::source::simulator::GOLDEN_ORIGIN;
use vramd_corpus::{CorpusRun, Label};

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;

pub fn explain(run: &CorpusRun, analyze: &AnalyzeSettings, fired: Option<f64>) {
    let (settings, fast) = (&analyze.analysis, analyze.fast_interval);
    println!("{run:?}");
    // A benign run the forecast fired on: the six minutes before it fired
    // (its onset and "full" are that span's ends, its rate 0).
    let (onset, bytes_per_second, full) = match (run.label, fired) {
        (Label::Growth { onset, bytes_per_second, full }, _) => (onset, bytes_per_second, full),
        (_, Some(fired)) => (
            Duration::from_secs_f64((fired - 300.0).max(60.0)),
            0.0,
            Duration::from_secs_f64(fired + 30.0),
        ),
        (label, None) => {
            println!("not a growth run and no forecast fired: {label:?}");
            return;
        }
    };
    let (onset_s, full_s) = (onset.as_secs_f64(), full.as_secs_f64());
    println!(
        "rate {:.1} MiB/s, onset {:.1} min, full {:.1} min ({:.1} min after onset), fired {}",
        bytes_per_second / MIB,
        onset_s / 60.0,
        full_s / 60.0,
        (full_s - onset_s) / 60.0,
        fired.map_or("never".to_owned(), |s| format!(
            "{:.1} min ({:.1} after onset, lead {:.1})",
            s / 60.0,
            (s - onset_s) / 60.0,
            (full_s - s) / 60.0
        ))
    );
    println!(
        "   t-onset  span  slope  fit  sust by | full-window slope/rising | half slope/rising | \
         quarter slope/rising fit | used  peak  demand  free→peak  cap-demand | TTE  left  err"
    );
    println!(
        "   (by: `proc` where the analyzer read the growth process by process, \
         analysis::process_growth; the window columns are the device floor's)"
    );
    let params = settings.forecast;
    let mut scratch = FloorScratch::default();
    let mut series: Vec<(vramd::model::Timestamp, u64)> = Vec::new();
    let step = fast.as_millis().max(1) as u64;
    let check = settings.trend_check_interval.as_millis().max(1) as u64;
    let end_ms = full.as_millis() as u64;
    let mut marked = false;
    // The analyzer's process-by-process reading needs the process lists as
    // history holds them.
    let history = DeviceHistory::new(run.device_info(), analyze.sizing);
    let mut processes = ProcessGrowth::default();
    let mut cleaned = Vec::new();
    let slow = analyze.slow_interval.as_millis().max(1) as u64;
    for at_ms in (0..=end_ms).step_by(step as usize) {
        let at = GOLDEN_ORIGIN.saturating_add(Duration::from_millis(at_ms));
        let reading = run.fast_at(at);
        let Some(memory) = reading.memory else { continue };
        series.push((at, memory.used_bytes));
        let _ = history.record_fast(reading.clone());
        if at_ms % slow == 0 {
            // Capped as the sampler and `vramd analyze` cap it.
            let mut listed = run.slow_at(at);
            let dropped = listed.cap_processes(analyze.max_processes_per_device);
            let _ = history.record_slow(listed, dropped);
        }
        let t_s = at_ms as f64 / 1000.0;
        if at_ms % check == 0 && t_s >= onset_s - 60.0 {
            let from = at.saturating_sub(settings.trend_window);
            series.drain(..series.partition_point(|&(t, _)| t < from));
            let floor = params.trend(&mut scratch, &series);
            // As `Analyzer` does.
            let by_process = ProcessGrowth::worth_reading(&history, &params, floor)
                .then(|| {
                    processes.gather(&history, from, at);
                    processes.rate(&params, &mut scratch, &mut cleaned, &series, floor)
                })
                .flatten();
            let chosen = by_process.unwrap_or(floor);
            let whole = scratch.trend(&series, params.buckets, params.keep_rising_share);
            let half_from = series.first().map(|&(first, _)| {
                first.saturating_add(Duration::from_secs_f64(
                    at.duration_since(first).unwrap_or_default().as_secs_f64() / 2.0,
                ))
            });
            let half = half_from.and_then(|from| {
                let start = series.partition_point(|&(t, _)| t < from);
                scratch.trend(
                    series.get(start..).unwrap_or(&[]),
                    params.buckets,
                    params.keep_rising_share,
                )
            });
            let quarter = series.first().and_then(|&(first, _)| {
                let from = first.saturating_add(Duration::from_secs_f64(
                    at.duration_since(first).unwrap_or_default().as_secs_f64() * 0.75,
                ));
                let start = series.partition_point(|&(t, _)| t < from);
                scratch.trend(
                    series.get(start..).unwrap_or(&[]),
                    params.buckets,
                    params.keep_rising_share,
                )
            });
            let slope = chosen.map_or(0.0, |(trend, _)| trend.slope_per_second);
            let projected = projected_peak(&series, params.peak_window, slope)
                .unwrap_or((at, memory.used_bytes as f64));
            let peak = projected.1 as u64;
            let capacity = memory.used_bytes + memory.free_bytes;
            let free = capacity.saturating_sub(peak);
            let reserved = memory.reserved_bytes.unwrap_or(0);
            let demand = run.peak_demand(t_s);
            let headroom = (memory.total_bytes - reserved) as f64 - demand as f64;
            let curve = params.plateau(&mut scratch, &series);
            let tte = chosen.and_then(|(trend, on)| {
                let fit = settings.exhaustion_min_fit;
                on.then(|| seconds_to_full(capacity, projected, &trend, curve, at, fit)).flatten()
            });
            let left = full_s - t_s;
            let fmt = |part: Option<(vramd::analysis::trend::Trend, bool)>| {
                part.map_or("—".to_owned(), |(trend, on)| {
                    format!("{:6.1}/{}", trend.slope_per_second / MIB, if on { "y" } else { "n" })
                })
            };
            let (span, slope, fit, on) = chosen.map_or((0.0, 0.0, 0.0, false), |(trend, on)| {
                (trend.span_seconds, trend.slope_per_second / MIB, trend.fit, on)
            });
            println!(
                "{:7.2} {:5.0}s {:6.1} {:4.2} {} {} | {:>10} | {:>10} | {:>10} {:4.2} | {:5.1} {:5.1} {:6.1} {:6.2} {:6.2} | {} {:5.1} {}{}",
                (t_s - onset_s) / 60.0,
                span,
                slope,
                fit,
                if on { "y" } else { "n" },
                if by_process.is_some() { "proc" } else { " dev" },
                fmt(whole),
                fmt(half),
                fmt(quarter),
                quarter.map_or(0.0, |(trend, _)| trend.fit),
                memory.used_bytes as f64 / GIB,
                peak as f64 / GIB,
                demand as f64 / GIB,
                free as f64 / GIB,
                headroom / GIB,
                tte.map_or("   —".to_owned(), |s| format!("{:5.1}", s / 60.0)),
                left / 60.0,
                tte.map_or("".to_owned(), |s| format!(
                    "{:+.1} %",
                    (s - left) / left.max(1.0) * 100.0
                )),
                if !marked && fired.is_some_and(|f| f <= t_s) {
                    marked = true;
                    "  <- fired"
                } else {
                    ""
                },
            );
        }
    }
}
