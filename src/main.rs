//! The `vramd` executable: parses the command line, loads configuration,
//! sets up logging and the runtime, and turns errors into exit statuses
//! (0 clean exit, 1 runtime failure, 2 invalid command line, configuration
//! or input file). The only place `anyhow`-style top-level handling lives.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

use vramd::cli::{Cli, Command, scenario_lines};
use vramd::config::{self, Config, LoadOptions, LogFormat};

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
            Ok(config) => {
                print!("{}", config::render_effective(&config));
                ExitCode::SUCCESS
            }
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

fn init_logging(config: &Config) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log.level)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match config.log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    }
    .map_err(|error| anyhow::anyhow!("{error}"))
}

fn run(config: Config) -> ExitCode {
    if let Err(error) = init_logging(&config) {
        eprintln!("vramd: cannot set up logging: {error:#}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            error!(error = %error, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(vramd::app::run(config, shutdown_signal()));
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

/// Completes on SIGTERM or SIGINT, logging which.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                error!(error = %error, "cannot listen for SIGTERM; stop with SIGINT");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = terminate => info!(signal = "SIGTERM", "shutting down"),
        result = tokio::signal::ctrl_c() => match result {
            Ok(()) => info!(signal = "SIGINT", "shutting down"),
            Err(error) => error!(error = %error, "cannot listen for SIGINT"),
        },
    }
}
