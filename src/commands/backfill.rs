//! `tally backfill`: its flags as a [`BackfillConfig`], what was put printed.

use anyhow::Result;
use serde_json::json;

use crate::backend::Backend;
use crate::backfill::{backfill, BackfillConfig};
use crate::cli::BackfillArgs;
use crate::output::print_json;
use crate::settings::Settings;

pub async fn run_backfill(
    settings: &Settings,
    backend: &Backend,
    args: &BackfillArgs,
) -> Result<()> {
    let cfg = BackfillConfig {
        table: args.table.clone(),
        assume_streaming: args.assume_streaming,
    };
    let stop = crate::signal::stop_flag();
    let pb = crate::progress::start(None, "items", args.json);
    let done = backfill(settings, backend.stream.as_ref(), &cfg, &pb, &stop).await;
    crate::progress::finish(&pb);
    let done = done?;
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
