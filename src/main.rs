//! The `tally` binary: parses flags, loads configuration, wires a backend, runs a subcommand.

mod backend;
mod cli;
mod commands;
mod serve;
mod settings;

use anyhow::Result;
use clap::Parser;

use crate::backend::Backend;
use crate::cli::{Cli, Command};
use crate::settings::Settings;

fn init_logging(cli: &Cli) {
    let default = match cli.command {
        Command::Count(_) | Command::Analytics(_) => "info",
        _ => "warn",
    };
    // RUST_LOG, else TALLY_LOG, else the command's default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_env(settings::LOG_VAR))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only for a terminal (and never with NO_COLOR): logs piped to a file or a collector
    // stay plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if cli.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() {
    // Output into a closed pipe (`tally dead-letters | head -1`) ends the process quietly, as
    // it does for other Unix tools, instead of a panic.
    sigpipe::reset();
    let cli = Cli::parse();
    init_logging(&cli);
    if let Err(e) = run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> Result<()> {
    let settings = Settings::load(cli.config.as_deref(), cli.overrides())?;
    if let Command::Demo(a) = &cli.command {
        return commands::demo::demo(&settings, a, cli.data_dir.is_some()).await;
    }
    if let Command::Setup(_) = &cli.command {
        return commands::setup::setup(&settings).await;
    }
    if let Command::Teardown(a) = &cli.command {
        return commands::setup::teardown(&settings, a).await;
    }
    if let Command::Config = &cli.command {
        print!("{}", toml::to_string_pretty(&settings)?);
        return Ok(());
    }
    if let Command::Reshard(a) = &cli.command {
        return commands::setup::reshard(&settings, a).await;
    }
    if let Command::Trim(a) = &cli.command {
        return commands::setup::trim(&settings, a);
    }
    let b = Backend::open(&settings).await?;
    match &cli.command {
        Command::Produce(a) => commands::produce::run_produce(&settings, &b, a).await,
        Command::Replay(a) => commands::produce::run_replay(&settings, &b, a).await,
        Command::Record(a) => commands::read::record(&b, a).await,
        Command::Count(a) => commands::consume::count(&settings, &b, a).await,
        Command::Analytics(a) => commands::consume::analytics(&settings, &b, a).await,
        Command::Query(a) => commands::read::query(&b, a).await,
        Command::Total(a) => commands::read::total(&b, a).await,
        Command::Top(a) => commands::read::top(&settings, &b, a).await,
        Command::Latency(a) => commands::read::latency(&b, a).await,
        Command::DeadLetters(a) => commands::read::dead_letters(&b, a).await,
        Command::Leases(a) => commands::read::leases(&b, a).await,
        Command::Serve(a) => serve::serve(&settings, b, a.addr).await,
        Command::Demo(_)
        | Command::Setup(_)
        | Command::Teardown(_)
        | Command::Reshard(_)
        | Command::Trim(_)
        | Command::Config => {
            unreachable!("handled above")
        }
    }
}
