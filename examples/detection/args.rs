//! The benchmark's command line: flags into [`Args`], `--help`, and a
//! refusal (message, exit status 2) for anything it cannot read, as the
//! daemon refuses a bad flag, instead of a panic.

use std::time::Duration;

pub const USAGE: &str = "\
usage: detection [FLAGS]
  --runs N                 corpus runs per seed (default 200; about 3 benign per leak)
  --growth-runs N          linear-growth runs per seed for the forecast (default 24)
  --warmup-runs N          benign runs per seed warming up for 1-10 min (default 24)
  --stepped-runs N         runs per seed stepping every 0.5, 1 or 2 s at a fixed phase,
                           every other one leaking (default 0)
  --dipping-runs N         leak runs per seed with evaluation dips every 15-20 min (default 0)
  --running-max-runs N     benign NVML-only runs whose cache steps up to each largest
                           batch (default 0)
  --seed S                 the corpus seed (default 1)
  --seeds LIST             pooled figures over several seeds: 1-6, 7,8,9 or 1-3,9
  --jobs N                 seeds played side by side (default 1)
  --leak-threshold B/S     alerts.leak_suspected.threshold (bytes per second)
  --leak-for SECONDS       alerts.leak_suspected.for
  --keep-firing-for D      alerts.leak_suspected.keep_firing_for and
                           alerts.reserved_growth.keep_firing_for (10m, 0s, ...)
  --fast-interval D        sampler.fast_interval (250ms, 1s, ...)
  --slow-interval D        sampler.slow_interval
  --evaluation-interval D  analysis.evaluation_interval
  --report-interval D      allocator reports this often, not at every slow sample
  --param NAME=VALUE       an analysis constant, for tuning (seconds, bytes)
  --explain RUN            one run's leak or forecast checks, then stop
  --point-reports          reporters send point figures only, no interval range
                           (as reporters before 0.3 did)
  --pid P                  with --explain: this process's checks from the run's start
  --verbose                every run's figures
  --help                   this text
The configuration keys are read and refused as the daemon reads them.
Figures and their reading: docs/alerts.md, \"Detection benchmark\".";

pub struct Args {
    pub runs: usize,
    pub growth_runs: usize,
    /// `--warmup-runs`: benign runs with slow warm-ups (`corpus::warmup_runs`).
    pub warmup_runs: usize,
    /// `--stepped-runs`: runs whose steps are commensurate with the
    /// sampling (`corpus::stepped_runs`).
    pub stepped_runs: usize,
    /// `--point-reports`: reporters send no interval range
    /// (`CorpusRun::point_reports`).
    pub point_reports: bool,
    /// `--dipping-runs`: leaks through evaluation dips (`corpus::dipping_runs`).
    pub dipping_runs: usize,
    /// `--running-max-runs`: NVML-only cache steps (`corpus::running_max_runs`).
    pub running_max_runs: usize,
    pub seed: u64,
    /// `--seeds`: pooled figures over these seeds instead of one `--seed`.
    pub seeds: Option<Vec<u64>>,
    /// `--jobs`: seeds played side by side.
    pub jobs: usize,
    /// Configuration keys the flags set, as `(flag, key, text)`: read by
    /// the configuration's own loader (`sampling::config`), so bounds and
    /// checks across keys are the daemon's, not restated here.
    pub keys: Vec<(&'static str, &'static str, String)>,
    /// `--param NAME=VALUE`: analysis constants, for tuning.
    pub params: Vec<(String, f64)>,
    /// `--explain RUN`: the leak checks of one run, then stop.
    pub explain: Option<usize>,
    /// `--pid P`: with `--explain`, the process whose leak checks to show
    /// from the run's start (a false alarm, on any run).
    pub explain_pid: Option<u32>,
    /// `--report-interval`: allocator reports this often, not per slow sample.
    pub report_interval: Option<Duration>,
    pub verbose: bool,
}

/// Ends the benchmark with `message` and exit status 2 (a usage error).
pub fn refuse(message: &str) -> ! {
    eprintln!("detection: {message}\n(detection --help lists the flags)");
    std::process::exit(2)
}

pub fn parse() -> Args {
    let mut args = Args {
        runs: 200,
        growth_runs: 24,
        warmup_runs: 24,
        stepped_runs: 0,
        point_reports: false,
        dipping_runs: 0,
        running_max_runs: 0,
        seed: 1,
        seeds: None,
        jobs: 1,
        keys: Vec::new(),
        params: Vec::new(),
        explain: None,
        explain_pid: None,
        report_interval: None,
        verbose: false,
    };
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        match flag.as_str() {
            "--verbose" => {
                args.verbose = true;
                continue;
            }
            "--point-reports" => {
                args.point_reports = true;
                continue;
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => {}
        }
        let Some(value) = words.next() else { refuse(&format!("{flag} needs a value")) };
        match flag.as_str() {
            "--runs" => args.runs = number(&flag, &value),
            "--growth-runs" => args.growth_runs = number(&flag, &value),
            "--warmup-runs" => args.warmup_runs = number(&flag, &value),
            "--stepped-runs" => args.stepped_runs = number(&flag, &value),
            "--dipping-runs" => args.dipping_runs = number(&flag, &value),
            "--running-max-runs" => args.running_max_runs = number(&flag, &value),
            "--seed" => args.seed = number(&flag, &value),
            "--seeds" => args.seeds = Some(seed_list(&value)),
            "--jobs" => args.jobs = number::<usize>(&flag, &value).max(1),
            "--leak-for" => {
                // Whole seconds, as the figures' heading prints them.
                let seconds: u64 = number(&flag, &value);
                args.keys.push(("--leak-for", "alerts.leak_suspected.for", format!("{seconds}s")));
            }
            "--leak-threshold" => {
                args.keys.push(("--leak-threshold", "alerts.leak_suspected.threshold", value))
            }
            "--fast-interval" => {
                args.keys.push(("--fast-interval", "sampler.fast_interval", value))
            }
            "--slow-interval" => {
                args.keys.push(("--slow-interval", "sampler.slow_interval", value))
            }
            "--keep-firing-for" => {
                for key in [
                    "alerts.leak_suspected.keep_firing_for",
                    "alerts.reserved_growth.keep_firing_for",
                ] {
                    args.keys.push(("--keep-firing-for", key, value.clone()));
                }
            }
            "--evaluation-interval" => {
                args.keys.push(("--evaluation-interval", "analysis.evaluation_interval", value))
            }
            "--explain" => args.explain = Some(number(&flag, &value)),
            "--pid" => args.explain_pid = Some(number(&flag, &value)),
            "--report-interval" => {
                let every = vramd::setting::parse_duration(&value)
                    .unwrap_or_else(|error| refuse(&format!("--report-interval {value}: {error}")));
                args.report_interval = Some(every);
            }
            "--param" => {
                let Some((name, number_text)) = value.split_once('=') else {
                    refuse(&format!("--param takes NAME=VALUE, not {value}"))
                };
                args.params.push((name.to_owned(), number(&flag, number_text)));
            }
            _ => refuse(&format!("unknown flag {flag}")),
        }
    }
    args
}

pub fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value.parse().unwrap_or_else(|_| refuse(&format!("{flag} takes a number, not {value:?}")))
}

/// `1-6`, `7,8,9` or a mix (`1-3,9`), in the order given.
fn seed_list(text: &str) -> Vec<u64> {
    let mut seeds = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((first, last)) => {
                seeds.extend(number::<u64>("--seeds", first)..=number("--seeds", last));
            }
            None => seeds.push(number("--seeds", part)),
        }
    }
    if seeds.is_empty() {
        refuse(&format!("--seeds names no seed: {text}"));
    }
    seeds
}
