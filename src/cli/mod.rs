//! The command line: subcommands and the options that override
//! configuration keys.
//!
//! Owns: [`Cli`] and [`Command`]; the options that set keys are
//! [`Overrides`] (`overrides`), flattened in. Values are passed on as
//! given; `config::load` validates them with the rest of the configuration,
//! so an option and the key it sets are checked by the same code. Environment variables are not
//! read here (they are a configuration layer). Depends only on `config` and
//! `model` (`ScenarioKind`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod overrides;

use crate::model::ScenarioKind;
pub use overrides::Overrides;

const AFTER_HELP: &str = "\
Configuration layers, lowest first: built-in defaults, the configuration file
(--config, else ./config/vramd.toml, else /etc/vramd/vramd.toml), environment
variables VRAMD_<SECTION>__<KEY> (e.g. VRAMD_SAMPLER__FAST_INTERVAL=100ms), then
the options above. `vramd check-config` prints the result.

Exit status:
  0  clean exit, including after SIGTERM or SIGINT
  1  runtime failure, e.g. the listen address cannot be bound, or NVML cannot
     be initialised with --require-gpu
  2  invalid command line, configuration or replayed trace
  3  `vramd analyze --fail-on STATE`: an alert reached that state
  4  `vramd probe`: the CUDA driver library or one of its symbols is missing
  5  `vramd probe`: the probe failed (the message, or --json, says how)";

/// vramd watches NVIDIA GPU memory: where it went, whether it is fragmented
/// or leaking, and when it will run out.
#[derive(Clone, Debug, PartialEq, Parser)]
#[command(name = "vramd", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Read this configuration file (it must exist) instead of searching
    /// ./config/vramd.toml and /etc/vramd/vramd.toml.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// The options that set configuration keys.
    #[command(flatten)]
    pub overrides: Overrides,
}

/// The subcommands.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Run the daemon (the default).
    Run,
    /// Validate the configuration and print the effective configuration.
    CheckConfig,
    /// List the simulated scenarios, one per line.
    Scenarios,
    /// Run the analysis and alert pipeline over --simulate or --replay as
    /// fast as the CPU allows and print the alert timeline.
    Analyze(AnalyzeArgs),
    /// Probe one device through the CUDA driver and exit: free memory per
    /// CUDA and NVML, context creation time, allocation latency, and with
    /// --headroom the largest allocatable block. The daemon runs this in a
    /// child process; it creates a CUDA context (100-550 MiB of GPU memory)
    /// for its duration. Exit status 4: the CUDA driver library or a symbol
    /// is missing; 5: the probe failed.
    Probe(ProbeCommand),
}

/// Options of `vramd probe`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct ProbeCommand {
    /// UUID of the device, as NVML and nvidia-smi print it (GPU-… or MIG-…).
    #[arg(long, value_name = "UUID")]
    pub device: String,
    /// Also search for the largest block the driver will allocate (briefly
    /// takes free memory down to --margin).
    #[arg(long)]
    pub headroom: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Size of the block whose allocation and release are timed.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_probe_size)]
    pub block_size: u64,
    /// Allocation/release pairs timed (the median is reported), 1 to 100.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub samples: u32,
    /// Free memory no allocation may take the device below.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_probe_size)]
    pub margin: u64,
    /// The largest-block search stops after this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_time_budget)]
    pub time_budget: std::time::Duration,
    /// Load the CUDA driver from this file instead of libcuda.so.1.
    #[arg(long, value_name = "PATH")]
    pub cuda_library: Option<PathBuf>,
    /// Load NVML (for the comparison values) from this file.
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// Go on without NVML's comparison values when NVML does not initialise
    /// within this (100ms to 5m).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_time_budget)]
    pub nvml_timeout: std::time::Duration,
}

fn parse_probe_size(text: &str) -> Result<u64, String> {
    let bytes = crate::setting::parse_size(text).map_err(|error| error.to_string())?;
    if bytes == 0 {
        return Err("must be more than 0".to_owned());
    }
    Ok(bytes)
}

fn parse_time_budget(text: &str) -> Result<std::time::Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if duration < std::time::Duration::from_millis(100)
        || duration > std::time::Duration::from_secs(300)
    {
        return Err("must be 100ms to 5m".to_owned());
    }
    Ok(duration)
}

/// Options of `vramd analyze`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::Args)]
pub struct AnalyzeArgs {
    /// Simulated time to play with --simulate (ignored with --replay).
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = parse_analyze_duration)]
    pub duration: std::time::Duration,
    /// Print the timeline as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 3 when any alert reached this state (for CI).
    #[arg(long, value_name = "STATE", value_enum, default_value_t = FailOn::Never)]
    pub fail_on: FailOn,
}

/// `--fail-on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    Never,
    Pending,
    Firing,
}

fn parse_analyze_duration(text: &str) -> Result<std::time::Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if duration.is_zero() || duration > std::time::Duration::from_secs(7 * 24 * 3600) {
        return Err("must be more than 0 and at most 7d".to_owned());
    }
    Ok(duration)
}

impl Cli {
    /// The subcommand, `run` when none was given.
    pub fn subcommand(&self) -> Command {
        self.command.clone().unwrap_or(Command::Run)
    }
}

/// One line per scenario for `vramd scenarios`: name, padding, description.
pub fn scenario_lines() -> Vec<String> {
    let width = ScenarioKind::ALL.iter().map(|kind| kind.name().len()).max().unwrap_or(0);
    ScenarioKind::ALL
        .iter()
        .map(|kind| format!("{:width$}  {}", kind.name(), kind.description()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("vramd").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_consistent() {
        <Cli as CommandFactory>::command().debug_assert();
    }

    #[test]
    fn cli_without_arguments_runs_the_daemon_with_no_overrides() {
        let cli = parse(&[]).unwrap();
        assert_eq!(cli.command, None);
        assert_eq!(cli.subcommand(), Command::Run);
        assert_eq!(cli.overrides, Overrides::default());
        assert_eq!(cli.config, None);
    }

    #[test]
    fn cli_parses_every_subcommand() {
        assert_eq!(parse(&["run"]).unwrap().command, Some(Command::Run));
        assert_eq!(parse(&["check-config"]).unwrap().subcommand(), Command::CheckConfig);
        assert_eq!(parse(&["scenarios"]).unwrap().subcommand(), Command::Scenarios);
        assert_eq!(parse(&["frobnicate"]).unwrap_err().kind(), ErrorKind::InvalidSubcommand);
    }

    #[test]
    fn cli_parses_every_flag_into_overrides() {
        let cli = parse(&[
            "--config",
            "/tmp/v.toml",
            "--listen",
            "0.0.0.0:9000",
            "--simulate",
            "leak",
            "--gpus",
            "4",
            "--seed",
            "18446744073709551615",
            "--speed",
            "2.5",
            "--replay",
            "in.ndjson",
            "--record",
            "out.ndjson",
            "--log-format",
            "json",
            "--log-level",
            "info,vramd=debug",
            "--require-gpu",
            "--web.config.file",
            "web.yml",
        ])
        .unwrap();
        assert_eq!(cli.config.as_deref(), Some(Path::new("/tmp/v.toml")));
        assert_eq!(
            cli.overrides,
            Overrides {
                listen: Some("0.0.0.0:9000".into()),
                simulate: Some("leak".into()),
                gpus: Some(4),
                seed: Some(u64::MAX),
                speed: Some(2.5),
                replay: Some("in.ndjson".into()),
                record: Some("out.ndjson".into()),
                log_format: Some("json".into()),
                log_level: Some("info,vramd=debug".into()),
                require_gpu: true,
                web_config: Some("web.yml".into()),
            }
        );
    }

    #[test]
    fn cli_require_gpu_is_a_global_switch() {
        assert!(!parse(&[]).unwrap().overrides.require_gpu);
        assert!(parse(&["--require-gpu"]).unwrap().overrides.require_gpu);
        assert!(parse(&["run", "--require-gpu"]).unwrap().overrides.require_gpu);
        assert!(parse(&["--require-gpu", "check-config"]).unwrap().overrides.require_gpu);
        // A switch, not an option: it takes no value.
        for args in [&["--require-gpu=true"][..], &["--require-gpu", "false"]] {
            let error = parse(args).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
    }

    #[test]
    fn cli_flags_are_global_before_or_after_the_subcommand() {
        let before =
            parse(&["--listen", "127.0.0.1:1", "--config=a.toml", "check-config"]).unwrap();
        let after = parse(&["check-config", "--listen", "127.0.0.1:1", "--config=a.toml"]).unwrap();
        assert_eq!(before, after);
        assert_eq!(after.subcommand(), Command::CheckConfig);
        assert_eq!(after.overrides.listen.as_deref(), Some("127.0.0.1:1"));
        let run = parse(&["run", "--simulate", "idle", "--speed=10"]).unwrap();
        assert_eq!(run.overrides.simulate.as_deref(), Some("idle"));
        assert_eq!(run.overrides.speed, Some(10.0));
    }

    #[test]
    fn cli_rejects_malformed_values_as_usage_errors() {
        for args in [
            &["--gpus", "two"][..],
            &["--gpus", "-1"],
            &["--seed", "18446744073709551616"],
            &["--speed", "fast"],
            &["--log-format", "xml"],
            &["--simulate", "lek"],
            &["--listen"],
            &["--no-such-flag"],
        ] {
            let error = parse(args).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
    }

    #[test]
    fn cli_simulate_accepts_every_scenario() {
        for kind in ScenarioKind::ALL {
            let cli = parse(&["--simulate", kind.name()]).unwrap();
            assert_eq!(cli.overrides.simulate.as_deref(), Some(kind.name()));
        }
    }

    #[test]
    fn cli_help_documents_exit_codes_and_every_flag() {
        let help = <Cli as CommandFactory>::command().render_long_help().to_string();
        for needle in [
            "Exit status",
            "0  clean exit",
            "1  runtime failure",
            "2  invalid command line",
            "--config",
            "--listen",
            "--simulate",
            "--gpus",
            "--seed",
            "--speed",
            "--replay",
            "--record",
            "--log-format",
            "--log-level",
            "--require-gpu",
            "check-config",
            "scenarios",
            "VRAMD_SAMPLER__FAST_INTERVAL",
        ] {
            assert!(help.contains(needle), "{needle} missing from:\n{help}");
        }
    }

    #[test]
    fn cli_probe_takes_a_device_and_bounded_options() {
        let cli = parse(&[
            "probe",
            "--device",
            "GPU-1",
            "--json",
            "--headroom",
            "--block-size",
            "2MiB",
            "--margin=512MiB",
            "--time-budget",
            "2s",
        ])
        .unwrap();
        let Some(Command::Probe(probe)) = cli.command else { panic!("{cli:?}") };
        assert_eq!(probe.device, "GPU-1");
        assert!(probe.json && probe.headroom);
        assert_eq!((probe.block_size, probe.margin, probe.samples), (2 << 20, 512 << 20, 5));
        assert_eq!(probe.time_budget, std::time::Duration::from_secs(2));
        let defaults = parse(&["probe", "--device", "GPU-1"]).unwrap();
        let Some(Command::Probe(probe)) = defaults.command else { panic!("{defaults:?}") };
        assert_eq!((probe.block_size, probe.margin), (64 << 20, 1 << 30));
        assert!(!probe.json && !probe.headroom);
        for args in [
            &["probe"][..],
            &["probe", "--device", "GPU-1", "--samples", "0"],
            &["probe", "--device", "GPU-1", "--block-size", "0"],
            &["probe", "--device", "GPU-1", "--time-budget", "1h"],
        ] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn cli_scenario_lines_name_each_scenario_once() {
        let lines = scenario_lines();
        assert_eq!(lines.len(), ScenarioKind::ALL.len());
        for (line, kind) in lines.iter().zip(ScenarioKind::ALL) {
            assert!(line.starts_with(kind.name()), "{line}");
            assert!(line.ends_with(kind.description()), "{line}");
        }
    }
}
