use super::*;
use proptest::prelude::*;

const START_MS: i64 = 1_767_225_600_000;

fn at(seconds: f64) -> Timestamp {
    Timestamp::from_unix_millis(START_MS + (seconds * 1000.0).round() as i64)
}

/// Deterministic noise in `-1.0..1.0` (xorshift), so failures reproduce.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// `count` samples every `step` seconds of `base + slope·t + noise`.
fn line(count: usize, step: f64, base: f64, slope: f64, noise: f64) -> Vec<(Timestamp, u64)> {
    let mut rng = Noise(0x9E37_79B9_7F4A_7C15);
    (0..count)
        .map(|i| {
            let t = i as f64 * step;
            (at(t), (base + slope * t + noise * rng.next()).round() as u64)
        })
        .collect()
}

/// Seconds since `at(0.0)`.
fn seconds(at: Timestamp) -> f64 {
    (at.unix_millis() - START_MS) as f64 / 1000.0
}

/// Slope, intercept and fit of the Theil–Sen line through every sample.
fn fit(series: &[(Timestamp, u64)]) -> (f64, f64, f64) {
    let points: Vec<(f64, f64)> = series.iter().map(|&(t, v)| (seconds(t), v as f64)).collect();
    fit_line(&points, &mut Vec::new()).unwrap()
}

fn least_squares_slope(series: &[(Timestamp, u64)]) -> f64 {
    let n = series.len() as f64;
    let xs: Vec<f64> = series.iter().map(|(t, _)| seconds(*t)).collect();
    let ys: Vec<f64> = series.iter().map(|(_, v)| *v as f64).collect();
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    sxy / sxx
}

fn relative_error(got: f64, want: f64) -> f64 {
    ((got - want) / want).abs()
}

#[test]
fn exact_line_is_recovered() {
    let series = line(50, 2.0, 4.0e9, 1_048_576.0, 0.0);
    assert_eq!(fit(&series), (1_048_576.0, 4.0e9, 1.0));
}

#[test]
fn one_spike_barely_moves_theil_sen_but_drags_least_squares() {
    let slope = 1.0e6;
    let clean = line(100, 1.0, 1.0e9, slope, 1.0e4);
    let mut spiked = clean.clone();
    spiked[95].1 += 1_000_000_000_000;
    let (before, after) = (fit(&clean).0, fit(&spiked).0);
    assert!(relative_error(after, before) < 0.02, "{before} -> {after}");
    assert!(relative_error(after, slope) < 0.02);
    let least_squares = least_squares_slope(&spiked);
    assert!(relative_error(least_squares, slope) > 10.0, "least squares: {least_squares}");
}

#[test]
fn noisy_line_fits_well_and_pure_noise_fits_poorly() {
    let (slope, _, noisy_fit) = fit(&line(600, 1.0, 1.0e9, 1.0e6, 5.0e7));
    assert!(noisy_fit > 0.9, "fit {noisy_fit}");
    assert!(relative_error(slope, 1.0e6) < 0.05);
    let (_, _, noise_fit) = fit(&line(600, 1.0, 1.0e9, 0.0, 5.0e7));
    assert!(noise_fit < 0.3, "fit {noise_fit}");
}

#[test]
fn flat_series_has_zero_slope_and_full_fit() {
    let flat = line(40, 0.5, 7.0e10, 0.0, 0.0);
    assert_eq!(fit(&flat), (0.0, 7.0e10, 1.0));
}

#[test]
fn median_handles_odd_and_even_counts() {
    assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&mut []), None);
}

proptest! {
    #[test]
    fn slope_of_a_noisy_line_is_close_to_the_true_slope(
        slope in 1.0e3f64..1.0e7,
        base in 0.0f64..8.0e10,
        noise_fraction in 0.0f64..0.05,
        count in 20usize..400,
        step_ms in 100i64..5_000,
        seed in 1u64..u64::MAX,
    ) {
        let step = step_ms as f64 / 1000.0;
        let span = step * (count - 1) as f64;
        // Noise bounded by a fraction of the growth over the whole window.
        let noise = noise_fraction * slope * span;
        let mut rng = Noise(seed);
        let series: Vec<(Timestamp, u64)> = (0..count)
            .map(|i| {
                let t = i as f64 * step;
                (at(t), (base + slope * t + noise * rng.next()).max(0.0).round() as u64)
            })
            .collect();
        let (got, _, r2) = fit(&series);
        prop_assert!(relative_error(got, slope) < 0.1, "slope {got} vs {slope}");
        prop_assert!((0.0..=1.0).contains(&r2));
    }
}

const MIB: f64 = 1_048_576.0;

/// 10 minutes at 4 Hz of a training job's used memory: a floor growing at
/// `rate` under a sawtooth of `sawtooth` bytes sampled at random phases,
/// plus a level step of `step` bytes from `step_at` seconds on (a tenant's
/// chunk, a checkpoint's cached buffers).
fn growth_with_step(rate: f64, sawtooth: f64, step: f64, step_at: f64) -> Vec<(Timestamp, u64)> {
    let mut rng = Noise(0x2545_F491_4F6C_DD1D);
    (0..=2_400)
        .map(|i| {
            let t = i as f64 * 0.25;
            let lift = sawtooth * (rng.next() + 1.0) / 2.0;
            let stepped = if t >= step_at { step } else { 0.0 };
            (at(t), (20.0e9 + rate * t + lift + stepped).round() as u64)
        })
        .collect()
}

#[test]
fn a_level_step_inside_the_window_does_not_move_the_forecast_rate() {
    // 22 MiB/s with a 3 GiB step two minutes from the end: the line of all
    // pairs of floor points read about a quarter more.
    let rate = 22.0 * MIB;
    let series = growth_with_step(rate, 2.0e9, 3.0 * 1024.0 * MIB, 480.0);
    let params = ForecastParams::default();
    let mut scratch = super::super::floor::FloorScratch::default();
    let (trend, sustained) = params.trend(&mut scratch, &series).unwrap();
    assert!(sustained);
    assert!(
        relative_error(trend.slope_per_second, rate) < 0.05,
        "local slopes {:.1} MiB/s for {:.1}",
        trend.slope_per_second / MIB,
        rate / MIB
    );
    // The rule this test is for: without it, the step drags the rate.
    let all_pairs = ForecastParams { local_lag_share: 0.0, ..params };
    let (line, _) = all_pairs.trend(&mut scratch, &series).unwrap();
    assert!(
        relative_error(line.slope_per_second, rate) > 0.1,
        "all pairs {:.1} MiB/s",
        line.slope_per_second / MIB
    );
}

#[test]
fn clean_growth_keeps_its_rate_with_local_slopes() {
    for rate in [20.0 * MIB, 50.0 * MIB, 80.0 * MIB] {
        let series = growth_with_step(rate, 6.0e9, 0.0, 0.0);
        let mut scratch = super::super::floor::FloorScratch::default();
        let (trend, sustained) = ForecastParams::default().trend(&mut scratch, &series).unwrap();
        assert!(sustained);
        assert!(relative_error(trend.slope_per_second, rate) < 0.03, "{trend:?}");
    }
}

#[test]
fn the_recent_peak_is_carried_forward_at_the_growth_rate() {
    // A top seen 20 s before the newest sample sat lower by 20 s of growth.
    let rate = 64.0 * MIB;
    let series: Vec<(Timestamp, u64)> = (0..=120)
        .map(|i| {
            let t = f64::from(i) * 0.25;
            let top = if i == 40 { 4.0e9 } else { 0.0 };
            (at(t), (30.0e9 + rate * t + top) as u64)
        })
        .collect();
    let params = ForecastParams::default();
    let (peak_at, peak) = exhaustion::projected_peak(&series, params.peak_window, rate).unwrap();
    assert_eq!(peak_at, at(30.0));
    let top_then = 30.0e9 + rate * 10.0 + 4.0e9;
    assert!((peak - (top_then + rate * 20.0)).abs() < 2.0, "{peak}");
    // Flat memory: the highest sample as it was.
    let flat = exhaustion::projected_peak(&series, params.peak_window, 0.0);
    assert_eq!(flat.map(|(_, p)| p.round()), Some(top_then.round()));
}

#[test]
fn seconds_to_full_counts_from_the_peak_carried_on_to_now() {
    let trend = Trend {
        slope_per_second: 10.0 * MIB,
        intercept: 0.0,
        origin: at(0.0),
        fit: 0.95,
        span_seconds: 600.0,
    };
    let capacity = (80.0 * 1024.0 * MIB) as u64;
    let peak = (at(600.0), 80.0 * 1024.0 * MIB - 6_000.0 * MIB);
    // 6000 MiB of headroom at 10 MiB/s, 15 s after the peak was taken.
    let left = exhaustion::seconds_to_full(capacity, peak, &trend, None, at(615.0), 0.8).unwrap();
    assert!((left - 585.0).abs() < 1e-6, "{left}");
    assert_eq!(
        exhaustion::seconds_to_full(capacity, peak, &trend, None, at(1_300.0), 0.8),
        Some(0.0)
    );
    let poor = Trend { fit: 0.5, ..trend };
    assert_eq!(exhaustion::seconds_to_full(capacity, peak, &poor, None, at(615.0), 0.8), None);
}

#[test]
fn a_warm_up_is_followed_to_its_plateau_and_a_line_is_not() {
    use super::saturation::{halves, seconds_to_rise};
    let mut buffer = Vec::new();
    // 30 GiB approached with a 5-minute time constant, seen for 4 minutes.
    let (gib, tau) = (1_073_741_824.0, 300.0);
    let curve: Vec<(f64, f64)> = (0..24)
        .map(|i| f64::from(i) * 10.0)
        .map(|t| (t, 30.0 * gib * (1.0 - (-t / tau).exp())))
        .collect();
    let split = halves(&curve, &mut buffer).unwrap();
    assert!(split.slowing(4.0, 2.0 * 1_048_576.0), "{split:?}");
    let (fitted_tau, remaining) = split.plateau().unwrap();
    assert!((fitted_tau - tau).abs() < 0.1 * tau, "{fitted_tau}");
    let left = 30.0 * gib * (-230.0 / tau).exp();
    assert!((remaining - left).abs() < 0.1 * left, "{remaining} vs {left}");
    // The plateau is 30 GiB: 50 GiB of headroom is never reached.
    assert_eq!(seconds_to_rise((fitted_tau, remaining), 50.0 * gib), None);
    assert!(seconds_to_rise((fitted_tau, remaining), 0.5 * left).is_some());
    // A line keeps its rate: no curve.
    let line: Vec<(f64, f64)> =
        (0..24).map(|i| (f64::from(i) * 10.0, f64::from(i) * 1e8)).collect();
    let split = halves(&line, &mut buffer).unwrap();
    assert!(!split.slowing(4.0, 2.0 * 1_048_576.0));
}

#[test]
fn a_falling_rate_is_carried_to_the_window_end_and_new_growth_stands_above_it() {
    use super::saturation::Halves;
    // Rates 8 and 4 over 10-minute halves: the curve halves its rate every
    // 10 minutes, so 5 minutes past the newer half's middle it grows at
    // 4 / sqrt(2).
    let halves = Halves {
        first_rate: 8.0,
        second_rate: 4.0,
        half_seconds: 600.0,
        noise: 100.0,
        end_level: 0.0,
        start_level: 0.0,
    };
    assert!((halves.rate_at_end() - 4.0 / 2.0_f64.sqrt()).abs() < 1e-9);
    // Growth at 4 above that rate, over a half of 600 s, stands 24 noises
    // of 100 out; at 0.01 above it does not.
    let window = Halves { first_rate: 4.0, second_rate: 4.0 + 4.0 / 2.0_f64.sqrt(), ..halves };
    assert!(window.rises_above(halves.rate_at_end(), 4.0, 1.0));
    let window = Halves { second_rate: 0.01 + 4.0 / 2.0_f64.sqrt(), ..window };
    assert!(!window.rises_above(halves.rate_at_end(), 4.0, 1.0));
    // A rate fallen to nothing has levelled off; a steady one stays.
    assert_eq!(Halves { second_rate: 0.0, ..halves }.rate_at_end(), 0.0);
    assert_eq!(Halves { first_rate: 4.0, ..halves }.rate_at_end(), 4.0);
}

/// Bit patterns of every kind: both zeros, infinities, NaNs, subnormals.
fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        prop::sample::select(vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE / 2.0,
        ]),
        -1.0e12..1.0e12,
    ]
}

proptest! {
    /// The fit selects its medians on order keys: they must order as
    /// `total_cmp` does, round-trip, and give `median`'s value bit for bit.
    #[test]
    fn order_keys_select_the_same_median(values in prop::collection::vec(any_f64(), 0..64)) {
        for pair in values.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            prop_assert_eq!(order_key(a).cmp(&order_key(b)), a.total_cmp(&b));
            prop_assert_eq!(from_order_key(order_key(a)).to_bits(), a.to_bits());
        }
        let mut keys: Vec<i64> = values.iter().map(|&v| order_key(v)).collect();
        let mut floats = values.clone();
        let by_keys = median_of_keys(&mut keys).map(f64::to_bits);
        let by_floats = median(&mut floats).map(f64::to_bits);
        prop_assert_eq!(by_keys, by_floats);
    }
}

#[test]
fn what_a_falling_rate_rose_by_is_read_off_its_curve_not_its_end_rate() {
    use super::saturation::halves;
    let mut buffer = Vec::new();
    // 11 GiB approached with an 8-minute time constant, its last half hour
    // seen from minute 2 (a warm-up's tail, as the analyzer's series holds
    // it once the process is older than the window).
    let (gib, tau, span) = (1_073_741_824.0, 500.0, 1_800.0);
    let level = |t: f64| 11.0 * gib * (1.0 - (-(t + 120.0) / tau).exp());
    let curve: Vec<(f64, f64)> =
        (0..=60).map(|i| f64::from(i) * 30.0).map(|t| (t, level(t))).collect();
    let split = halves(&curve, &mut buffer).unwrap();
    // A 16-minute window at the end: its first quarter's middle to its last.
    let (from, to) = (0.875 * 960.0, 0.125 * 960.0);
    let rose = level(span - to) - level(span - from);
    let read = split.rise_before_end(from, to);
    assert!((read - rose).abs() < 0.15 * rose, "{read} vs {rose}");
    // The rate at the end times the span reads less than half of it: a
    // warm-up's tail that "outgrew" its own curve.
    assert!(split.rate_at_end() * (from - to) < 0.5 * rose);
    // The rate a quarter window before the end, likewise.
    let rate = (level(span - 230.0) - level(span - 250.0)) / 20.0;
    assert!((split.rate_before_end(240.0) - rate).abs() < 0.15 * rate);
    // A line keeps its rate: rate times span, wherever it is read.
    let line: Vec<(f64, f64)> =
        (0..=60).map(|i| f64::from(i) * 30.0).map(|t| (t, 2e6 * t)).collect();
    let split = halves(&line, &mut buffer).unwrap();
    assert!((split.rise_before_end(from, to) - 2e6 * (from - to)).abs() < 1e-3 * 2e6 * (from - to));
    assert!((split.rate_before_end(240.0) - 2e6).abs() < 1.0);
}
