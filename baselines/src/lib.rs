//! Benchmark scaffolding, not a port the applications use: the ways of counting likes tally is
//! measured against (`tally demo --baselines`), [`BaselineWriters`], which each store implements
//! under keys of its own (`embedded/src/stores/baselines.rs`, `aws/src/dynamo/baselines.rs`),
//! and [`run`], which applies a demo's records each way and reports what each costs by DynamoDB's
//! published rules and whether its counts are exact. Nothing that counts, reads or serves takes
//! it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use async_trait::async_trait;
use serde_json::{json, Value};
use tally_core::ports::PortResult;
use tokio::task::JoinSet;

/// A baseline count item's number (`n`) as stored (absent: 0). Not a whole number is an error
/// naming the item, never a 0.
pub fn count_of(row: &tally_core::rows::Row, item: &str) -> PortResult<i64> {
    use tally_core::rows::Field;
    match row.get("n") {
        None => Ok(0),
        Some(Field::N(n)) => Ok(*n),
        Some(other) => Err(tally_core::ports::PortError::Corrupt {
            item: item.to_owned(),
            detail: format!("`n` is not a number: {other:?}"),
        }),
    }
}

/// The two ways of counting likes that tally is measured against (`tally demo --baselines`), on
/// the same backend: one `UpdateItem` per like (cheap, not exactly-once: a retry counts twice),
/// and one transaction per like with an idempotency item (exact, at 4 write units a like). For
/// benchmarks only; `run` keeps their items apart from everything else.
#[async_trait]
pub trait BaselineWriters: Send + Sync {
    /// Adds `delta` to the post's total with one plain update.
    async fn update_per_like(&self, run: &str, post_id: &str, delta: i64) -> PortResult<()>;
    /// Writes the event's idempotency item (condition: absent) and adds `delta` to the post's
    /// total, atomically; `Ok(false)` when the event was applied before.
    async fn transaction_per_like(
        &self,
        run: &str,
        event_id: &str,
        post_id: &str,
        delta: i64,
    ) -> PortResult<bool>;
    /// The likers pattern a likers count replaces: a like puts the (post, user) edge item if it
    /// is absent and adds 1 to the post's total, an unlike deletes it if present and adds −1, each
    /// one transaction; `Ok(false)` when the condition refused it (liked already, or not liked).
    /// Exact only when a user's actions arrive in order.
    async fn edge_per_like(
        &self,
        run: &str,
        post_id: &str,
        user_id: &str,
        like: bool,
    ) -> PortResult<bool>;
    /// The post's total under `run`.
    async fn baseline_count(&self, run: &str, post_id: &str) -> PortResult<i64>;
}

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

/// Applies `records` (every decodable record, retries included, as a producer sends them) each
/// way tally is measured against, under a run of its own, and reports each beside `truth`'s
/// counts (`likes`: how many events the truth holds): counting likers, the edge's pattern too.
pub async fn run(
    writers: Arc<dyn BaselineWriters>,
    records: &[Action],
    counts_likers: bool,
    truth: &HashMap<String, i64>,
    likes: u64,
) -> Result<Value> {
    let mut out = serde_json::Map::new();
    // Counting likers, the pattern a likers count replaces is the edge's; counting events, the
    // two events' patterns.
    let patterns: &[Pattern] = if counts_likers {
        &[
            Pattern::UpdatePerLike,
            Pattern::TransactionPerLike,
            Pattern::EdgeTransaction,
        ]
    } else {
        &[Pattern::UpdatePerLike, Pattern::TransactionPerLike]
    };
    for &pattern in patterns {
        let mut v = run_pattern(writers.clone(), pattern, records, truth, likes).await?;
        v["why_off"] = pattern.why_off(counts_likers).into();
        out.insert(pattern.name().to_owned(), v);
    }
    Ok(Value::Object(out))
}

/// One action as a baseline applies it: the event's id, its post and user, and +1 (a like) or
/// −1 (an unlike).
#[derive(Clone, Debug)]
pub struct Action {
    pub id: String,
    pub post: String,
    pub user: String,
    pub delta: i64,
}

async fn run_pattern(
    store: Arc<dyn BaselineWriters>,
    pattern: Pattern,
    records: &[Action],
    truth: &HashMap<String, i64>,
    likes: u64,
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
    let mut posts: Vec<(&String, &i64)> = truth.iter().collect();
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
    let likes = likes.max(1) as f64;
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
