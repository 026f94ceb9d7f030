//! tally as a library: what the `tally` binary (`src/main.rs`) runs — it parses flags
//! ([`cli`]), loads configuration ([`settings`]), wires a backend ([`backend`]) and runs a
//! subcommand ([`commands`], over the crates that do the work: `tally_serve`, `tally_verify`…). A
//! library so that the settings and the wiring are tested in process (`tests/e2e/in_process.rs`),
//! not only through the binary.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod apps;
pub mod backend;
pub mod cli;
pub mod commands;
pub mod demo;
pub mod man;
pub mod output;
pub mod progress;
pub mod rebuild;
pub mod settings;
pub mod signal;
pub mod up;

use anyhow::Result;

use crate::backend::Backend;
use crate::cli::{Cli, Command};
use crate::settings::Settings;

/// Logs to stderr as the flags, RUST_LOG or TALLY_LOG say (see [`cli::Cli::log_level`]).
pub fn init_logging(cli: &Cli) {
    // The SDK's credential and region providers warn at length when one of their sources is
    // absent (IMDS off EC2); tally reports what is missing in one line instead.
    let default = match cli.command {
        Command::Count(_) | Command::Analytics(_) => "info,aws_config=error",
        _ => "warn,aws_config=error",
    };
    // --log-level, else RUST_LOG, else TALLY_LOG, else the command's default.
    let filter = match &cli.log_level {
        Some(level) => tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|e| {
            eprintln!(
                "error: --log-level {level:?} is not a level (error, warn, info, debug, trace) \
                 or a filter such as tally_consumer=debug: {e}"
            );
            std::process::exit(2);
        }),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .or_else(|_| tracing_subscriber::EnvFilter::try_from_env(settings::LOG_VAR))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
    };
    // Colours only for a terminal (and never with NO_COLOR): logs piped to a file or a collector
    // stay plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(|| progress::LogWriter);
    if cli.log_json {
        builder.json().init();
    } else {
        // A person reads these: the module path adds nothing to the sentence.
        builder.with_target(false).init();
    }
}

/// The exit status for an error `run` returned: 130 when a signal stopped a command, the
/// timed-out status of `--until-idle --timeout`, else 1.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if e.is::<commands::consume::TimedOut>() {
        commands::consume::TimedOut::EXIT
    } else if e.is::<signal::Interrupted>() {
        signal::Interrupted::EXIT
    } else {
        1
    }
}

/// Runs the command line's subcommand: one match, each command taking what it needs — nothing,
/// the settings, or the settings and the store opened for reading (never created) or for writing
/// (created if missing).
pub async fn run(cli: Cli) -> Result<()> {
    let settings = || Settings::load(cli.config.as_deref(), |s| cli.apply(s));
    let store = |access: Access| async move {
        let s = settings()?;
        let b = open_store(&s, access).await?;
        anyhow::Ok((s, b))
    };
    match &cli.command {
        Command::Completions(a) => {
            let mut cmd = cli::command();
            clap_complete::generate(a.shell, &mut cmd, "tally", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => man::print(),
        Command::Probe(a) => tally_serve::client::probe(&a.url).await,
        Command::Config(a) => print_config(&settings()?, a.json),
        Command::Demo(a) => commands::demo::demo(&settings()?, a, cli.data_dir.is_some()).await,
        Command::Setup(a) => commands::setup::setup(&settings()?, a).await,
        Command::Teardown(a) => commands::setup::teardown(&settings()?, a).await,
        Command::Reshard(a) => commands::setup::reshard(&settings()?, a).await,
        Command::Trim(a) => commands::setup::trim(&settings()?, a),
        Command::Produce(a) => {
            let (s, b) = store(Access::Write).await?;
            commands::produce::run_produce(&s, &b, a).await
        }
        Command::Replay(a) => {
            // Before anything is created: a mistyped file name leaves no new store behind.
            tally_recording::replay::check_replay_file(&a.file)?;
            let (s, b) = store(Access::Write).await?;
            commands::produce::run_replay(&s, &b, a).await
        }
        Command::Rebuild(a) => commands::rebuild::run_rebuild(&settings()?, a).await,
        Command::Backfill(a) => {
            let (s, b) = store(Access::Write).await?;
            commands::backfill::run_backfill(&s, &b, a).await
        }
        Command::Count(a) => {
            let (s, b) = store(Access::Write).await?;
            commands::consume::count(&s, &b, a).await
        }
        Command::Route(a) => {
            let (s, b) = store(Access::Write).await?;
            commands::consume::route(&s, &b, a).await
        }
        Command::Analytics(a) => {
            let (s, b) = store(Access::Write).await?;
            commands::consume::analytics(&s, &b, a).await
        }
        Command::Record(a) => commands::read::record(&store(Access::Read).await?.1, a).await,
        Command::Verify(a) => {
            let (s, b) = store(Access::Read).await?;
            commands::verify::verify(&s, &b, a).await
        }
        Command::Query(a) => {
            let (s, b) = store(Access::Read).await?;
            commands::read::query(&commands::read::read_side(&s, &b).await?, a).await
        }
        Command::Total(a) => {
            let (s, b) = store(Access::Read).await?;
            commands::read::total(&s, &b, a).await
        }
        Command::Top(a) => {
            let (s, b) = store(Access::Read).await?;
            commands::read::top(&s, &b, a).await
        }
        Command::Latency(a) => commands::read::latency(&store(Access::Read).await?.1, a).await,
        Command::DeadLetters(a) => {
            commands::read::dead_letters(&store(Access::Read).await?.1, a).await
        }
        Command::Leases(a) => commands::read::leases(&store(Access::Read).await?.1, a).await,
        Command::Up(a) => commands::up::up(&settings()?, a).await,
        Command::Ingest(a) => {
            let (s, b) = store(Access::Write).await?;
            commands::ingest::ingest(&s, &b, a).await
        }
        Command::Serve(a) => {
            let (s, b) = store(Access::Read).await?;
            commands::serve::serve(&s, b.readers_across_regions(&s).await?, a).await
        }
    }
}

/// How a command uses the store.
#[derive(Clone, Copy)]
enum Access {
    /// It only reads: a store that does not exist is an error, never created.
    Read,
    /// It writes (producers, consumers): a missing embedded store is created, and said so.
    Write,
}

async fn open_store(settings: &Settings, access: Access) -> Result<Backend> {
    match access {
        Access::Read => Backend::open_existing(settings).await,
        Access::Write => {
            let creates = settings.backend == settings::BackendKind::Embedded
                && !backend::store_file(settings).exists();
            let b = Backend::open(settings).await?;
            if creates {
                // A mistyped --data-dir should not look like the store that was meant.
                eprintln!(
                    "created a new store at {}",
                    backend::store_file(settings).display()
                );
            }
            Ok(b)
        }
    }
}

/// `tally config`: the settings in effect, as TOML (or JSON).
fn print_config(settings: &Settings, json: bool) -> Result<()> {
    if json {
        output::print_json(&serde_json::to_value(settings)?);
    } else {
        print!("{}", toml::to_string_pretty(settings)?);
    }
    Ok(())
}
