//! Generating and putting together: what `tally produce` and the demo run.

use std::sync::atomic::AtomicBool;

use tally_core::ports::{PutEntry, Stream};

use crate::change::{ChangeConfig, Changes};
use crate::generate::{Generation, Generator, Kind, Truth};
use crate::keys::HotPosts;
use crate::put::{put_all, PutStats};
use crate::ProducerError;

/// What to generate and how to put it.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The events: how many, over which posts and users, with which retries and garbage.
    pub gen: Generation,
    /// Put as a table's change records (DynamoDB's records in Kinesis) rather than as events.
    pub changes: Option<ChangeConfig>,
    /// The hot posts' keys fanned out.
    pub hot: HotPosts,
    /// Records per second (0: as fast as the stream takes them).
    pub rate: f64,
}

/// Generates `plan`'s events and puts them (as a table's changes if it says so) until done or
/// `stop` is raised; `on_event` is told of each event taken (retries and malformed records come
/// on top). Returns the truth — every post's expected count — of everything generated, which is
/// everything put: a stop comes between batches.
pub async fn produce(
    stream: &dyn Stream,
    plan: &Plan,
    on_event: &(dyn Fn() + Sync),
    stop: &AtomicBool,
) -> Result<(Truth, PutStats), ProducerError> {
    let mut gen = Generator::new(plan.gen.clone());
    let events_only = |(kind, e): (Kind, PutEntry)| {
        if kind == Kind::Event {
            on_event();
        }
        e
    };
    let (hot, rate, no_count) = (&plan.hot, plan.rate, &|_| {});
    let (stats, changed) = match &plan.changes {
        None => {
            let records = gen.by_ref().map(events_only);
            (
                put_all(stream, hot, records, rate, no_count, stop).await,
                None,
            )
        }
        Some(cfg) => {
            let mut changes = Changes::new(gen.by_ref(), cfg.clone());
            let records = changes.by_ref().map(events_only);
            let stats = put_all(stream, hot, records, rate, no_count, stop).await;
            (stats, Some(changes.stats().clone()))
        }
    };
    let mut truth = gen.truth();
    if let Some(c) = changed {
        // The records put are the table's: its copies and malformed records.
        truth.duplicates = c.duplicates;
        truth.malformed = c.malformed;
    }
    Ok((truth, stats?))
}
