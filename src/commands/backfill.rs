//! `tally backfill`: its flags and the settings as a [`BackfillConfig`], the table reached
//! through the AWS settings, what was put printed.

use anyhow::Result;
use serde_json::json;
use tally_producer::backfill::{backfill, BackfillConfig, BackfillError};

use crate::backend::{aws_settings, Backend, SourceTable};
use crate::cli::BackfillArgs;
use crate::output::print_json;
use crate::settings::Settings;
use crate::signal::Interrupted;

pub async fn run_backfill(
    settings: &Settings,
    backend: &Backend,
    args: &BackfillArgs,
) -> Result<()> {
    let cfg = BackfillConfig {
        table: args.table.clone(),
        stream: settings.stream.clone(),
        assume_streaming: args.assume_streaming,
        input: settings.input.clone(),
        rate: settings.producer.rate,
    };
    cfg.check()?;
    let table = SourceTable::new(&aws_settings(settings), &args.table).await?;
    let stop = crate::signal::stop_flag();
    let pb = crate::progress::start(None, "items", args.json);
    let stream = backend.stream.as_ref();
    let done = backfill(&table, stream, &cfg, &crate::progress::Bar(&pb), &stop).await;
    crate::progress::finish(&pb);
    let done = match done {
        Err(e @ BackfillError::Stopped { .. }) => return Err(Interrupted(e.to_string()).into()),
        done => done?,
    };
    let at_ms = done.as_of_ms;
    if args.json {
        print_json(&json!({
            "table": args.table, "items": done.items, "likes": done.likes,
            "skipped": done.skipped, "unfit": done.unfit, "as_of_ms": at_ms,
        }));
    } else {
        println!(
            "backfilled table {}: {} items, {} likes put to {} as of {}, {} other items skipped, \
             {} like items that do not fit (dead-lettered by the counter)",
            args.table,
            done.items,
            done.likes,
            settings.stream,
            crate::output::rfc3339(at_ms),
            done.skipped,
            done.unfit
        );
    }
    Ok(())
}
