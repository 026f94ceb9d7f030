//! The demo's baselines (`tally demo --baselines`): the same records as the demo, applied on the same backend the two
//! ways tally is measured against, with what each costs by DynamoDB's published rules.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value};
use tally_core::baselines::BaselineWriters;
use tally_core::event::decode;
use tally_producer::generate::{Generator, Truth};
use tokio::task::JoinSet;

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
    /// Counting likers: one TransactWriteItems per action of the (post, user) edge item (put if
    /// absent, or deleted if present) and the total: 2 × 2 units, exact only in order.
    EdgeTransaction,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::UpdatePerLike => "update_per_like",
            Pattern::TransactionPerLike => "transaction_per_like",
            Pattern::EdgeTransaction => "edge_transaction_per_like",
        }
    }

    /// Why its counts are off, when they are.
    fn why_off(self, likers: bool) -> &'static str {
        match (self, likers) {
            (Pattern::UpdatePerLike, false) => {
                "a producer retry is written again: nothing remembers it was applied"
            }
            (Pattern::UpdatePerLike, true) => {
                "every action and every retry is written: a double tap counts twice, an unlike of nothing goes below zero"
            }
            (Pattern::TransactionPerLike, _) => {
                "it counts events: a double tap counts twice, an unlike of nothing goes below zero"
            }
            (Pattern::EdgeTransaction, _) => {
                "a retried like that lands after its user's unlike likes again: the edge keeps no order"
            }
        }
    }

    fn units_per_call(self) -> u64 {
        match self {
            Pattern::UpdatePerLike => 1,
            Pattern::TransactionPerLike | Pattern::EdgeTransaction => 4,
        }
    }

    fn items_per_call(self) -> u64 {
        match self {
            Pattern::UpdatePerLike => 1,
            Pattern::TransactionPerLike | Pattern::EdgeTransaction => 2,
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
    let records: Vec<Action> = Generator::new(settings.gen_config(events))
        .filter_map(|(_, e)| decode(&e.data).ok())
        .map(|e| Action {
            delta: e.action.delta(),
            id: e.event_id,
            post: e.post_id,
            user: e.user_id,
        })
        .collect();
    let mut out = serde_json::Map::new();
    // Counting likers, the pattern a likers count replaces is the edge's; counting events, the
    // two events' patterns.
    let patterns: &[Pattern] = match settings.counter.count {
        tally_core::edge::CountMode::Likers => &[
            Pattern::UpdatePerLike,
            Pattern::TransactionPerLike,
            Pattern::EdgeTransaction,
        ],
        tally_core::edge::CountMode::Events => {
            &[Pattern::UpdatePerLike, Pattern::TransactionPerLike]
        }
    };
    let likers = settings.counter.count == tally_core::edge::CountMode::Likers;
    for &pattern in patterns {
        let mut v = run_pattern(backend.baselines.clone(), pattern, &records, truth).await?;
        v["why_off"] = pattern.why_off(likers).into();
        out.insert(pattern.name().to_owned(), v);
    }
    Ok(Value::Object(out))
}

/// One action as a baseline applies it.
#[derive(Clone)]
struct Action {
    id: String,
    post: String,
    user: String,
    delta: i64,
}

async fn run_pattern(
    store: Arc<dyn BaselineWriters>,
    pattern: Pattern,
    records: &[Action],
    truth: &Truth,
) -> Result<Value> {
    let run = format!("{}-{}", pattern.name(), std::process::id());
    let started = Instant::now();
    let mut calls = 0u64;
    let mut refused = 0u64;
    for batch in records.chunks(IN_FLIGHT) {
        let mut set = JoinSet::new();
        for a in batch.iter().cloned() {
            let (store, run) = (store.clone(), run.clone());
            set.spawn(async move {
                match pattern {
                    Pattern::UpdatePerLike => store
                        .update_per_like(&run, &a.post, a.delta)
                        .await
                        .map(|()| true),
                    Pattern::TransactionPerLike => {
                        store
                            .transaction_per_like(&run, &a.id, &a.post, a.delta)
                            .await
                    }
                    Pattern::EdgeTransaction => {
                        store
                            .edge_per_like(&run, &a.post, &a.user, a.delta > 0)
                            .await
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
