//! The leak detector's parameters ([`LeakParams`]) and their defaults,
//! tuned on the simulator's randomised corpus. Owns no logic; must not
//! depend on anything but `model` (the rule table's defaults).

use std::time::Duration;

use serde::Serialize;

const MIB: f64 = 1_048_576.0;
/// The rule whose threshold and clear are the slopes' defaults.
const RULE: crate::model::RuleSpec = crate::model::RuleId::LeakSuspected.spec();

/// What counts as a leak. Defaults were tuned on the simulator's randomised
/// corpus (`examples/detection.rs`, docs/alerts.md "Detection benchmark").
///
/// The threshold, clear, window, shortest window and warm-up are
/// configuration keys: they say how fast, how soon and after how long a
/// start, which an operator knows of their jobs. The rest (buckets,
/// significance, the shares, the noise floor) are the statistical shape of
/// the test, tuned together on the corpus: moving one alone trades false
/// alarms for latency in ways only the benchmark shows, so they stay code.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LeakParams {
    /// Least floor slope to call a leak; the `leak_suspected` threshold
    /// (default 128 KiB/s, from the rule table).
    pub min_slope_bytes_per_second: f64,
    /// Least floor slope to keep a suspected leak; the rule's `clear`
    /// (default 64 KiB/s, from the rule table).
    pub hold_slope_bytes_per_second: f64,
    /// The longest window judged; `alerts.leak_suspected.window` (30 min).
    pub window: Duration,
    /// The shortest window judged (`analysis.leak_shortest_window`, 2 min):
    /// short enough to call a fast leak within minutes, long enough to span
    /// many training steps. It alone cannot call a process whose floor came
    /// back before (`return_evidence_share`).
    pub shortest_window: Duration,
    /// Floor buckets per window (24): a 4-minute window gets 10 s buckets,
    /// several iterations of a training loop each. (12 on the shorter
    /// windows only was tried: slow leaks sooner, but one benign alarm at
    /// each of seeds 1–3; 12 everywhere hid a per-epoch climb's returns
    /// from the history-of-returns check.)
    pub buckets: usize,
    /// Least rise over the window, in floor spreads (5): under a sawtooth
    /// of gigabytes, bucket minima still scatter by tens of MiB. (8 with a
    /// 4-minute shortest window was the default before the
    /// history-of-returns check made a 2-minute one safe.)
    pub min_significance: f64,
    /// Share of the slope each of the last two quarters must rise by (0.4).
    pub keep_rising_share: f64,
    /// Share of the growth the second half's floor must stay above (0.25).
    pub return_share: f64,
    /// Share of the shortest window's rise that the floor before it must
    /// once have fallen back by for the shortest window not to count
    /// (1.5): the process's own history of returns is evidence against a
    /// leak, which never returns. What lets the shortest window be short.
    pub return_evidence_share: f64,
    /// Grace after a process's first sample before it is judged
    /// (`analysis.leak_warmup`, 3 min):
    /// model load, optimizer state and the allocator's cache filling.
    pub warmup: Duration,
    /// Spread below which the floor counts as this noisy anyway (2 MiB), so
    /// a perfectly quiet floor does not make a few KiB significant.
    pub noise_floor_bytes: f64,
    /// Rule 5: a floor of at most this many distinct values is steps, not
    /// a leak (6, a quarter of the buckets).
    pub staircase_levels: usize,
    /// Rule 2's second way: on any window but the shortest, a rise also
    /// stands out of the scatter when the CUSUM of the floor's levels above
    /// the window's first-quarter floor, in spreads less
    /// `sequential_allowance` per bucket, reaches this (`leak::sequential`).
    /// Infinite turns the sequential test off.
    pub sequential_bound: f64,
    /// Spreads each floor point must stand above the window's starting
    /// floor to add to the CUSUM.
    pub sequential_allowance: f64,
    /// Least rise of the window's line, in spreads, for the CUSUM to count
    /// at all (4; rule 2 itself asks `min_significance`). Bucket minima of
    /// a few samples under a sawtooth of gigabytes scatter one-sidedly: the
    /// spread (a median deviation) understates their upper tail, so on a
    /// flat floor each point's standing above the first quarter's median,
    /// less the allowance, averages about zero and the CUSUM wanders like a
    /// random walk. On 4- and 8-minute windows such a walk reached the
    /// bound with the line's rise at 2.7–3.3 spreads (three benign alarms
    /// at seeds 22, 27 and 30; docs/detection-history.md, tenth pass).
    pub sequential_min_significance: f64,
    /// Multiple of `sequential_bound` (3) past which the CUSUM stands in
    /// for rule 3's last-quarter step on its window, provided the third
    /// quarter rose, the last is still above it and the rise does not
    /// decelerate: under a sawtooth of gigabytes a steep climb's quarter
    /// medians pause for a quarter. Infinite turns it off.
    pub sequential_override: f64,
    /// Least fall of the floor that, stepping back within `dip_longest`
    /// to where it was, is left out of the full window's second judgement
    /// as a dip (`floor::Dips`): an evaluation phase (256 MiB: above a
    /// bucket minimum's ~150 MiB scatter under an 8 GiB sawtooth; the
    /// corpus's phases drop the floor by a sixteenth of the job, 256 MiB to
    /// 2.5 GiB, and at 512 MiB those of jobs under 8 GiB were read as
    /// returns). Infinite turns it off.
    pub dip_depth_bytes: f64,
    /// Longest dip left out of the floor (8 min: evaluation phases of the
    /// corpus last 1–6 min; a longer "dip" is a phase of its own).
    pub dip_longest: Duration,
    /// How far, in the shorter window's own floor spreads (at least
    /// `noise_floor_bytes`), its line must end above the highest floor the
    /// longest window held before it for its rise to be new ground (2). A
    /// shorter window's buckets hold fewer samples, so under a sawtooth its
    /// minima sit higher than the longest window's by about their own
    /// scatter: a floor back from an evaluation dip to where it stood read
    /// as new ground by chance (a benign alarm at seed 44). 1 silenced it
    /// at no cost over seeds 1–48; 2 for margin, costing 0.3 min at one
    /// group's p95.
    pub new_ground_spreads: f64,
    /// Shortest window also judged again with dips left out where it fails
    /// (half of `window`: the 16- and 30-minute windows at the defaults).
    /// A 16-minute window under evaluation phases every 10–30 min holds
    /// one, whose low broke rules 3 and 4 until the 30-minute window was
    /// covered: 1 MiB/s under `empty_cache()` p95 15.9 → 15.4 min at seeds
    /// 1–30. On 4- and 8-minute windows the few buckets left between long
    /// dips lined up by chance (benign alarms at seeds 2 and 4, an earlier
    /// pass); at 8 minutes now it moved nothing.
    pub dips_shortest_window: Duration,
    /// Rule 6: how far, in the floor's noise over a half window, the
    /// newer half's growth must fall short of the older half's for the
    /// floor to be slowing, a warm-up levelling off (4; 5, rule 2's
    /// `min_significance`, let a 10-minute warm-up of 10 GiB under a
    /// 3 GiB sawtooth through at minute 8, tests/trace_shapes.rs). The
    /// forecast's `slowing_significance` is the same evidence.
    pub slowing_significance: f64,
}

impl LeakParams {
    /// Defaults with the longest window `window`.
    pub fn for_window(window: Duration) -> Self {
        Self {
            min_slope_bytes_per_second: RULE.threshold,
            hold_slope_bytes_per_second: RULE.clear,
            window,
            shortest_window: Duration::from_secs(2 * 60).min(window),
            buckets: 24,
            min_significance: 5.0,
            keep_rising_share: 0.4,
            return_share: 0.25,
            return_evidence_share: 1.5,
            warmup: Duration::from_secs(3 * 60),
            noise_floor_bytes: 2.0 * MIB,
            staircase_levels: 6,
            sequential_bound: 12.0,
            sequential_allowance: 0.5,
            sequential_min_significance: 4.0,
            sequential_override: 3.0,
            dip_depth_bytes: 256.0 * MIB,
            dip_longest: Duration::from_secs(8 * 60),
            dips_shortest_window: window / 2,
            new_ground_spreads: 2.0,
            slowing_significance: 4.0,
        }
    }
}

impl Default for LeakParams {
    /// For the default 30-minute `leak_window`.
    fn default() -> Self {
        Self::for_window(Duration::from_secs(30 * 60))
    }
}
