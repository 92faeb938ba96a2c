//! The `vramd` executable: parses the command line, loads configuration,
//! sets up logging and the runtime, and turns errors into exit statuses
//! (0 clean exit, 1 runtime failure, 2 invalid command line, configuration
//! or input file). The only place `anyhow`-style top-level handling lives.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tracing::{error, info};
use tracing_subscriber::layer::{Layer, Layered, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

use vramd::alerts::AlertState;
use vramd::analyze as offline_analysis;
use vramd::app::Config;
use vramd::cli::{AnalyzeArgs, Cli, Command, FailOn, ProbeCommand, scenario_lines};
use vramd::config::{self, LoadOptions};
use vramd::logging::LogFormat;
use vramd::logging::{LevelControl, LogGuard, LogSink};
use vramd::source::SourceSelection;
use vramd::source::cuda::{ProbeAnswer, ProbeArgs, render_text};
use vramd::source::trace::{StreamOptions, TraceStream};

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
    if let Some(refused) = ignored_options(&cli) {
        let _ = writeln!(std::io::stderr(), "vramd: {refused}");
        return ExitCode::from(2);
    }
    match cli.subcommand() {
        Command::Scenarios => {
            for line in scenario_lines() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Command::CheckConfig => {
            let checked = load(&load_options(&cli)).and_then(|config| {
                vramd::app::read_token_file(&config)
                    .and_then(|_| vramd::app::load_web_config(&config))
                    .map_err(invalid_configuration)?;
                print!("{}", config::render_effective(&config));
                Ok(ExitCode::SUCCESS)
            });
            checked.unwrap_or_else(|code| code)
        }
        Command::Probe(args) => probe(&args),
        Command::Analyze(args) => match load(&load_options(&cli)) {
            Ok(config) => analyze(&config, args),
            Err(code) => code,
        },
        Command::Run => {
            let options = pinned(load_options(&cli));
            match load(&options) {
                Ok(config) => run(config, options),
                Err(code) => code,
            }
        }
    }
}

/// Options the subcommand would ignore, named: an option that silently
/// does nothing (`analyze --record`, which records nothing) is refused
/// like a bad one.
fn ignored_options(cli: &Cli) -> Option<String> {
    // `None`: every option that sets a key, and `--config`.
    let (name, ignored): (&str, Option<&[&str]>) = match cli.subcommand() {
        Command::Scenarios => ("scenarios", None),
        Command::Probe(_) => ("probe", None),
        Command::Analyze(_) => {
            ("analyze", Some(&["--listen", "--record", "--web.config.file", "--require-gpu"]))
        }
        Command::CheckConfig | Command::Run => return None,
    };
    let flags = cli.overrides.entries().into_iter().map(|entry| entry.flag);
    let config = cli.config.as_ref().map(|_| "--config");
    let given: Vec<&str> = match ignored {
        None => flags.chain(config).collect(),
        Some(ignored) => flags.filter(|flag| ignored.contains(flag)).collect(),
    };
    (!given.is_empty())
        .then(|| format!("`vramd {name}` does not use {}; leave it out", given.join(", ")))
}

/// The layers as given at start: a reload reads them again (the same file,
/// the environment as it was at start, the same command-line options).
fn load_options(cli: &Cli) -> LoadOptions {
    LoadOptions {
        config_path: cli.config.clone(),
        env: config::process_environment(),
        overrides: cli.overrides.entries(),
        ..LoadOptions::default()
    }
}

/// The options with the configuration file chosen once: a reload reads the
/// file the daemon started with, and never one that appeared on a search
/// path since.
fn pinned(mut options: LoadOptions) -> LoadOptions {
    if options.config_path.is_none() {
        options.config_path = options.search_paths.iter().find(|path| path.is_file()).cloned();
        options.search_paths.clear();
    }
    options
}

/// The configuration, each key read under a moved spelling warned about
/// once on stderr (logging is not set up yet: its format is a key).
fn load(options: &LoadOptions) -> Result<Config, ExitCode> {
    let (config, deprecated) = config::load_noting(options).map_err(invalid_configuration)?;
    for note in deprecated {
        let _ = writeln!(std::io::stderr(), "vramd: warning: {note}");
    }
    Ok(config)
}

fn invalid_configuration(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("vramd: invalid configuration: {error}");
    ExitCode::from(2)
}

/// `vramd probe`: one CUDA driver probe of one device, then exit. Its
/// answer goes to stdout (JSON with --json); notes go to stderr.
fn probe(args: &ProbeCommand) -> ExitCode {
    // Cosmetic (how `ps` shows the child): a failure changes nothing else.
    let _ = vramd::source::cuda::role::name_this_process();
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
    let report = match &config.selection() {
        SourceSelection::Simulate(simulator) => {
            offline_analysis::simulate(&settings, simulator, args.duration)
        }
        SourceSelection::Replay { path } => {
            let options = StreamOptions {
                max_line_bytes: config.source.max_trace_line_bytes.as_usize(),
                reorder_records: config.source.replay_reorder_records.get(),
            };
            TraceStream::open(path, options)
                .map_err(offline_analysis::AnalyzeError::Trace)
                .and_then(|trace| offline_analysis::replay_stream(&settings, trace))
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
/// full stderr drops lines and counts them, and never stops sampling. The
/// filter can be changed while running (`log.level` on SIGHUP); the format
/// cannot.
fn init_logging(config: &Config) -> anyhow::Result<(LogGuard, LevelControl)> {
    let (filter, control) = vramd::logging::reloadable_filter(&config.log.level)?;
    // Colour only on a terminal: journald and `kubectl logs` show escapes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (sink, guard) = LogSink::spawn(config.log.queue_lines.get(), std::io::stderr)?;
    type Filtered = Layered<reload::Layer<EnvFilter, Registry>, Registry>;
    let layer = tracing_subscriber::fmt::layer().log_internal_errors(false).with_ansi(ansi);
    let output: Box<dyn Layer<Filtered> + Send + Sync> = match config.log.format {
        LogFormat::Text => Box::new(layer.with_writer(sink)),
        LogFormat::Json => Box::new(layer.json().flatten_event(true).with_writer(sink)),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .try_init()
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok((guard, control))
}

fn run(config: Config, options: LoadOptions) -> ExitCode {
    let (_log_guard, log_level) = match init_logging(&config) {
        Ok(logging) => logging,
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
    let (shutdown, hangups) = match shutdown {
        Ok(installed) => installed,
        Err(error) => {
            error!(error = %error, "cannot install the signal handlers");
            return ExitCode::from(1);
        }
    };
    let reload = vramd::app::Reload { hangups, options, log_level: Some(log_level) };
    let result = runtime.block_on(vramd::app::run(config, shutdown, reload));
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
