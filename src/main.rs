//! The `vramd` executable: parses the command line, loads configuration,
//! sets up logging and the runtime, and turns errors into exit statuses
//! (0 clean exit, 1 runtime failure, 2 invalid command line, configuration
//! or input file). The only place `anyhow`-style top-level handling lives.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

use vramd::alerts::AlertState;
use vramd::analyze as offline_analysis;
use vramd::cli::{AnalyzeArgs, Cli, Command, FailOn, ProbeCommand, scenario_lines};
use vramd::config::SourceSelection;
use vramd::config::{self, Config, LoadOptions, LogFormat};
use vramd::logging::{LogGuard, LogSink};
use vramd::source::cuda::{ProbeAnswer, ProbeArgs, render_text};
use vramd::source::trace::Replay;

/// How long the runtime waits for blocking source calls at exit; a call
/// stuck in the driver must not keep the process alive.
const BLOCKING_GRACE: Duration = Duration::from_millis(200);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version go to stdout with status 0; usage errors to
            // stderr with status 2.
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    match cli.subcommand() {
        Command::Scenarios => {
            for line in scenario_lines() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Command::CheckConfig => match load(&cli) {
            Ok(config) => match vramd::app::read_token_file(&config)
                .and_then(|_| vramd::app::load_web_config(&config))
            {
                Ok(_) => {
                    print!("{}", config::render_effective(&config));
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("vramd: invalid configuration: {error}");
                    ExitCode::from(2)
                }
            },
            Err(code) => code,
        },
        Command::Probe(args) => probe(&args),
        Command::Analyze(args) => match load(&cli) {
            Ok(config) => analyze(&config, args),
            Err(code) => code,
        },
        Command::Run => match load(&cli) {
            Ok(config) => run(config),
            Err(code) => code,
        },
    }
}

fn load(cli: &Cli) -> Result<Config, ExitCode> {
    let options = LoadOptions {
        config_path: cli.config_path().map(Into::into),
        env: config::process_environment(),
        overrides: cli.overrides(),
        ..LoadOptions::default()
    };
    config::load(&options).map_err(|error| {
        eprintln!("vramd: invalid configuration: {error}");
        ExitCode::from(2)
    })
}

/// `vramd probe`: one CUDA driver probe of one device, then exit. Its
/// answer goes to stdout (JSON with --json); notes go to stderr.
fn probe(args: &ProbeCommand) -> ExitCode {
    let request = ProbeArgs {
        device_uuid: args.device.clone(),
        block_bytes: args.block_size,
        samples: args.samples,
        margin_bytes: args.margin,
        headroom_time_budget: args.headroom.then_some(args.time_budget),
        cuda_library: args.cuda_library.clone(),
        nvml_library: args.nvml_library.clone(),
        nvml_timeout: args.nvml_timeout,
    };
    let answer = ProbeAnswer::new(&args.device, vramd::source::cuda::child::run(&request));
    if args.json {
        match serde_json::to_string(&answer) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                eprintln!("vramd probe: cannot encode the answer: {error}");
                return ExitCode::from(5);
            }
        }
    } else {
        print!("{}", render_text(&answer));
    }
    ExitCode::from(answer.exit_status())
}

/// `vramd analyze`: offline pipeline, timeline on stdout.
fn analyze(config: &Config, args: AnalyzeArgs) -> ExitCode {
    let settings = vramd::app::analyze_settings(config);
    let report = match &config.source.selection {
        SourceSelection::Simulate(simulator) => {
            offline_analysis::simulate(&settings, simulator, args.duration)
        }
        SourceSelection::Replay { path } => {
            match Replay::open_bounded(
                path,
                config.source.max_trace_line_bytes,
                config.source.max_trace_bytes,
            ) {
                Ok(trace) => offline_analysis::replay(&settings, &trace),
                Err(error) => {
                    eprintln!("vramd: {error}");
                    return ExitCode::from(2);
                }
            }
        }
        SourceSelection::Driver => Err(offline_analysis::AnalyzeError::NoInput),
    };
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            eprintln!("vramd: {error}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                eprintln!("vramd: cannot encode the report: {error}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", offline_analysis::render_table(&report));
    }
    let failed = match args.fail_on {
        FailOn::Never => false,
        FailOn::Pending => report.reached(AlertState::Pending),
        FailOn::Firing => report.reached(AlertState::Firing),
    };
    if failed { ExitCode::from(3) } else { ExitCode::SUCCESS }
}

/// Sets up logging through the lossy sink (`vramd::logging`): a closed or
/// full stderr drops lines and counts them, and never stops sampling.
fn init_logging(config: &Config) -> anyhow::Result<LogGuard> {
    let filter = EnvFilter::try_new(&config.log.level)?;
    // Colour only on a terminal: journald and `kubectl logs` show escapes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (sink, guard) = LogSink::stderr(config.log.queue_lines.get())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(sink)
        .log_internal_errors(false)
        .with_ansi(ansi);
    match config.log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    }
    .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok(guard)
}

fn run(config: Config) -> ExitCode {
    let _log_guard = match init_logging(&config) {
        Ok(guard) => guard,
        Err(error) => {
            // stderr may be the very thing that is broken: never panic here.
            let _ = writeln!(std::io::stderr(), "vramd: cannot set up logging: {error:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(config.sampler.max_blocking_threads.get())
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            error!(error = %error, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    let shutdown = {
        let _entered = runtime.enter();
        vramd::signals::install()
    };
    let shutdown = match shutdown {
        Ok(shutdown) => shutdown,
        Err(error) => {
            error!(error = %error, "cannot install the signal handlers");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(vramd::app::run(config, shutdown));
    runtime.shutdown_timeout(BLOCKING_GRACE);
    match result {
        Ok(()) => {
            info!("stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            error!(error = %error, "vramd failed");
            ExitCode::from(error.exit_code())
        }
    }
}
