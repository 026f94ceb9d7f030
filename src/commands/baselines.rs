//! `tally demo --baselines`: the same records as the demo, applied on the same backend the two
//! ways tally is measured against, with what each costs by DynamoDB's published rules.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value};
use tally_core::event::decode;
use tally_core::ports::BaselineWriters;
use tally_producer::generate::{Generator, Truth};
use tokio::task::JoinSet;

use super::gen_config;
use crate::backend::Backend;
use crate::settings::Settings;

/// Calls in flight at once: a producer fleet's parallelism, bounded.
const IN_FLIGHT: usize = 16;

/// The two patterns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// One UpdateItem per like: 1 unit (the item is under 1 KB), not exactly-once.
    UpdatePerLike,
    /// One TransactWriteItems per like of two items (idempotency item and total): 2 × 2 units,
    /// charged whether the condition holds or not.
    TransactionPerLike,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::UpdatePerLike => "update_per_like",
            Pattern::TransactionPerLike => "transaction_per_like",
        }
    }

    fn units_per_call(self) -> u64 {
        match self {
            Pattern::UpdatePerLike => 1,
            Pattern::TransactionPerLike => 4,
        }
    }

    fn items_per_call(self) -> u64 {
        match self {
            Pattern::UpdatePerLike => 1,
            Pattern::TransactionPerLike => 2,
        }
    }
}

/// Runs both patterns over the demo's records (regenerated from its seed) and reports each.
pub async fn run(
    settings: &Settings,
    backend: &Backend,
    events: u64,
    truth: &Truth,
) -> Result<Value> {
    // Every decodable record, retries included, as a producer would send them.
    let records: Vec<(String, String, i64)> = Generator::new(gen_config(settings, events))
        .filter_map(|(_, e)| decode(&e.data).ok())
        .map(|e| (e.event_id, e.post_id, e.action.delta()))
        .collect();
    let mut out = serde_json::Map::new();
    for pattern in [Pattern::UpdatePerLike, Pattern::TransactionPerLike] {
        out.insert(
            pattern.name().to_owned(),
            run_pattern(backend.baselines.clone(), pattern, &records, truth).await?,
        );
    }
    Ok(Value::Object(out))
}

async fn run_pattern(
    store: Arc<dyn BaselineWriters>,
    pattern: Pattern,
    records: &[(String, String, i64)],
    truth: &Truth,
) -> Result<Value> {
    let run = format!("{}-{}", pattern.name(), std::process::id());
    let started = Instant::now();
    let mut calls = 0u64;
    let mut refused = 0u64;
    for batch in records.chunks(IN_FLIGHT) {
        let mut set = JoinSet::new();
        for (id, post, delta) in batch.iter().cloned() {
            let (store, run) = (store.clone(), run.clone());
            set.spawn(async move {
                match pattern {
                    Pattern::UpdatePerLike => store
                        .update_per_like(&run, &post, delta)
                        .await
                        .map(|()| true),
                    Pattern::TransactionPerLike => {
                        store.transaction_per_like(&run, &id, &post, delta).await
                    }
                }
            });
        }
        while let Some(r) = set.join_next().await {
            calls += 1;
            if !r?? {
                refused += 1;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    // Exactness over the most liked posts (all of them on a small run).
    let mut posts: Vec<(&String, &i64)> = truth.counts.iter().collect();
    posts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut wrong = 0;
    let mut counted: HashMap<&str, i64> = HashMap::new();
    for (post, expected) in posts.iter().take(1_000) {
        let got = store.baseline_count(&run, post).await?;
        counted.insert(post, got);
        if got != **expected {
            wrong += 1;
        }
    }
    let likes = truth.events.max(1) as f64;
    Ok(json!({
        "calls": calls,
        "refused_as_duplicates": refused,
        "write_units_per_event": (calls * pattern.units_per_call()) as f64 / likes,
        "items_per_event": (calls * pattern.items_per_call()) as f64 / likes,
        "events_per_sec": calls as f64 / secs.max(1e-9),
        "posts_checked": counted.len(),
        "posts_wrong": wrong,
        "exact": wrong == 0,
    }))
}
