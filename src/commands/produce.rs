//! `tally produce` and `tally replay`: their flags as the producer's plan and a
//! [`ReplayConfig`], what was put printed.

use anyhow::{Context, Result};
use serde_json::json;
use tally_producer::produce::produce;

use crate::backend::Backend;
use crate::cli::{ProduceArgs, ReplayArgs};
use crate::output::print_json;
use crate::progress;
use crate::settings::Settings;
use crate::signal::Interrupted;
use tally_recording::replay::{replay, ReplayConfig, Replayed};

pub async fn run_produce(settings: &Settings, backend: &Backend, args: &ProduceArgs) -> Result<()> {
    let stop = crate::signal::stop_flag();
    // The bar follows the events (retries and malformed records come on top).
    let pb = progress::start(Some(args.events), "events", args.json);
    let put = produce(
        backend.stream.as_ref(),
        &settings.produce_plan(args.events),
        &|| pb.inc(1),
        &stop,
    )
    .await;
    progress::finish(&pb);
    // Interrupted between batches, everything generated was put: the truth covers it.
    let (truth, stats) = put?;
    let interrupted = stop.load(std::sync::atomic::Ordering::Relaxed);
    if let Some(path) = &args.truth {
        let counts: std::collections::BTreeMap<&String, &i64> = truth.counts.iter().collect();
        let body = json!({"events": truth.events, "duplicates": truth.duplicates, "malformed": truth.malformed, "total": truth.total(), "counts": counts});
        std::fs::write(path, serde_json::to_vec_pretty(&body)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        print_json(
            &json!({"records": stats.records, "events": truth.events, "duplicates": truth.duplicates, "malformed": truth.malformed, "expected_total": truth.total(), "put_calls": stats.calls, "resent": stats.resent}),
        );
    } else {
        println!(
            "put {} records ({} events, {} duplicates, {} malformed) in {} calls; expected total {}",
            stats.records,
            truth.events,
            truth.duplicates,
            truth.malformed,
            stats.calls,
            truth.total()
        );
    }
    if interrupted {
        return Err(Interrupted(format!(
            "put {} records of {} events asked{}",
            stats.records,
            args.events,
            if args.truth.is_some() {
                "; the truth file covers them"
            } else {
                ""
            }
        ))
        .into());
    }
    Ok(())
}

pub async fn run_replay(settings: &Settings, backend: &Backend, args: &ReplayArgs) -> Result<()> {
    let cfg = ReplayConfig {
        file: args.file.clone(),
        speed: args.speed,
        rate: settings.producer.rate,
        hot: settings.hot_posts(),
    };
    // A file is read once first: for the progress bar's length, and so that a file that cannot
    // be read fails before anything is put. Standard input is read once.
    let pb = progress::start(cfg.records()?, "records", args.json);
    let stop = crate::signal::stop_flag();
    let shown = progress::Bar(&pb);
    let replayed = replay(backend.stream.as_ref(), &cfg, &shown, &stop).await;
    progress::finish(&pb);
    let Replayed { stats, blank } = replayed?;
    let name = cfg.source();
    if args.json {
        print_json(
            &json!({"records": stats.records, "blank_lines": blank, "put_calls": stats.calls, "resent": stats.resent}),
        );
    } else {
        println!(
            "replayed {} records from {name} in {} calls{}",
            stats.records,
            stats.calls,
            if blank > 0 {
                format!(" ({blank} blank lines skipped)")
            } else {
                String::new()
            }
        );
    }
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Interrupted(format!(
            "put the first {} records of {name}; replaying the rest would put them again",
            stats.records
        ))
        .into());
    }
    Ok(())
}
