//! [`CounterStore`]'s window protocol, reads and store records on the leases, counts, dedup and
//! dead-letters tables: a window is its pending end in the lease row, then one plain conditional
//! `UpdateItem` per summary item (see [`tally_core::summary`]), then the checkpoint — no
//! transaction on the way. The edges' writes are `edges`'s, their reads `likers`'s, `recent`'s
//! and `scan`'s.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValue, ReturnValuesOnConditionCheckFailure, Select,
};
use futures_util::stream::{self, StreamExt};
use tally_core::buckets::PostDelta;
use tally_core::cost::{self, Purpose};
use tally_core::dead_letter::DeadLetter;
use tally_core::edge::CountMode;
use tally_core::ports::{
    Applied, Consistency, CountReader, DeadLetterReader, Decided, DedupStore, Fence, LetterCursor,
    PortError, PortResult, PostCount, PostsApplied, Renewal, ShardTally, StoredDedup, WindowRef,
    WindowRest, WindowWriter,
};
use tally_core::summary::{self, Attrs, Cond, Known, Plan, Val, Write};
use tally_core::{Position, SeqNo};

use super::{arrival_key, get_n, get_s, n, s, side_by_side, Call, DynamoStore, Expr};

/// Summary items written at once (each its own request).
const WRITES_IN_FLIGHT: usize = 32;
/// Live items whose hour a store remembers from its own writes; past it, it forgets them all
/// (a forgotten hour costs a refused write or a read, never a miscount).
const MAX_KNOWN_HOURS: usize = 1_000_000;

/// The hour of each live item this process last wrote: `(shard, post)` → hour.
#[derive(Default)]
pub(crate) struct KnownHours(Mutex<HashMap<(String, String), i64>>);

impl KnownHours {
    fn get(&self, shard: &str, post: &str) -> Known {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(shard.to_owned(), post.to_owned()))
            .map_or(Known::Unknown, |h| Known::Hour(*h))
    }

    fn set(&self, shard: &str, post: &str, hour: i64) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_KNOWN_HOURS {
            m.clear();
        }
        m.insert((shard.to_owned(), post.to_owned()), hour);
    }
}

/// An item of the `counts` table (a summary item) or the `edges` table (an edge) as the core
/// reads it: its numbers and strings. An attribute of another type, or a number that is not a
/// whole one, is not what tally writes: [`PortError::Corrupt`] naming the item and the
/// attribute, never left out.
pub(super) fn to_attrs(item: &HashMap<String, AttributeValue>) -> PortResult<Attrs> {
    let corrupt = |k: &str, what: &str| PortError::Corrupt {
        item: format!(
            "{}/{}",
            get_s(item, "pk").unwrap_or_default(),
            get_s(item, "sk").unwrap_or_default()
        ),
        detail: format!("`{k}` is {what}, where tally keeps a whole number or a string"),
    };
    item.iter()
        .filter(|(k, _)| k.as_str() != "pk" && k.as_str() != "sk")
        .map(|(k, v)| {
            let v = match v {
                AttributeValue::N(n) => Val::N(
                    n.parse()
                        .map_err(|_| corrupt(k, &format!("the number {n}")))?,
                ),
                AttributeValue::S(s) => Val::S(s.clone()),
                other => return Err(corrupt(k, &format!("{other:?}"))),
            };
            Ok((k.clone(), v))
        })
        .collect()
}

fn val(v: &Val) -> AttributeValue {
    match v {
        Val::N(x) => n(*x),
        Val::S(x) => s(x),
    }
}

/// The live item as a failed write returned it.
fn known_from(item: Option<&HashMap<String, AttributeValue>>) -> PortResult<Known> {
    match item {
        None => Ok(Known::Absent),
        Some(i) => {
            let (pk, sk) = (get_s(i, "pk"), get_s(i, "sk"));
            let (pk, sk) = (pk.unwrap_or_default(), sk.unwrap_or_default());
            summary::live_state(&pk, &sk, &to_attrs(i)?).map(Known::Item)
        }
    }
}

/// What became of one write.
enum Outcome {
    Written,
    /// Refused: its effect is there already.
    Applied,
    /// Refused: the live item is not what the plan assumed; here it is.
    Stale(Known),
}

impl DynamoStore {
    /// One conditional `UpdateItem` of a summary item of partition `pk`.
    async fn write_summary(&self, pk: &str, w: &Write, end: &str) -> PortResult<Outcome> {
        let mut x = Expr::default();
        let cond = match &w.cond {
            Cond::Absent => "attribute_not_exists(pk)".to_owned(),
            Cond::MarkerBelow => {
                let wn = x.name("w");
                format!("attribute_not_exists({wn}) OR {wn} < {}", x.val(s(end)))
            }
            Cond::Live { hour: None, .. } => format!("attribute_not_exists({})", x.name("w")),
            Cond::Live {
                hour: Some(h),
                or_absent,
            } => {
                let (wn, hk) = (x.name("w"), x.name("hk"));
                let c = format!("({wn} < {} AND {hk} = {})", x.val(s(end)), x.val(n(*h)));
                if *or_absent {
                    format!("attribute_not_exists({wn}) OR {c}")
                } else {
                    c
                }
            }
        };
        let mut parts = Vec::new();
        if !w.set.is_empty() {
            let sets: Vec<String> = w
                .set
                .iter()
                .map(|(k, v)| format!("{} = {}", x.name(k), x.val(val(v))))
                .collect();
            parts.push(format!("SET {}", sets.join(", ")));
        }
        if !w.add.is_empty() {
            let adds: Vec<String> = w
                .add
                .iter()
                .map(|(k, v)| format!("{} {}", x.name(k), x.val(n(*v))))
                .collect();
            parts.push(format!("ADD {}", adds.join(", ")));
        }
        if !w.remove.is_empty() {
            let rm: Vec<String> = w.remove.iter().map(|k| x.name(k)).collect();
            parts.push(format!("REMOVE {}", rm.join(", ")));
        }
        let r = self
            .client
            .update_item()
            .table_name(self.table("counts"))
            .key("pk", s(pk))
            .key("sk", s(&w.sk))
            .condition_expression(cond)
            .update_expression(parts.join(" "))
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match r {
            Ok(_) => Ok(Outcome::Written),
            Err(SdkError::ServiceError(se))
                if matches!(
                    se.err(),
                    UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(e) = se.err() else {
                    unreachable!()
                };
                match &w.cond {
                    Cond::Absent | Cond::MarkerBelow => Ok(Outcome::Applied),
                    Cond::Live { .. } => match known_from(e.item())? {
                        Known::Item(st) if st.marker.as_str() >= end => Ok(Outcome::Applied),
                        k => Ok(Outcome::Stale(k)),
                    },
                }
            }
            Err(e) => Err(self.err("UpdateItem", "counts", e)),
        }
    }

    /// Applies one post's delta: plan, write, and on a stale assumption read and plan again.
    async fn apply_post(
        &self,
        shard: &str,
        post: &str,
        delta: &PostDelta,
        end: &str,
    ) -> PortResult<Applied> {
        let mut out = Applied::default();
        let mut known = self.known_hours.get(shard, post);
        for _ in 0..summary::PLAN_ATTEMPTS {
            let writes = match summary::plan(shard, delta, end, &known) {
                Plan::Skip => return Ok(out),
                Plan::NeedItem => {
                    let item = self
                        .get(
                            "counts",
                            HashMap::from([
                                ("pk".to_owned(), s(post)),
                                ("sk".to_owned(), s(summary::live_sk(shard))),
                            ]),
                        )
                        .await?;
                    out.reads += 1;
                    known = known_from(item.as_ref())?;
                    continue;
                }
                Plan::Writes(ws) => ws,
            };
            let mut stale = None;
            for w in &writes {
                match self.write_summary(post, w, end).await? {
                    Outcome::Written => {
                        out.wrote(w.purpose, 1);
                        if let Some((_, Val::N(h))) = w.set.iter().find(|(k, _)| k == "hk") {
                            self.known_hours.set(shard, post, *h);
                        }
                    }
                    Outcome::Applied => {
                        out.was_refused(1);
                    }
                    Outcome::Stale(k) => {
                        out.was_refused(1);
                        stale = Some(k);
                    }
                }
            }
            match stale {
                None => return Ok(out),
                Some(k) => known = k,
            }
        }
        Err(PortError::Other(format!(
            "the live item {post}/{} in {} kept changing while being written",
            summary::live_sk(shard),
            self.table("counts")
        )))
    }

    pub(super) fn dead_letter_put(&self, d: &DeadLetter) -> PortResult<Put> {
        Put::builder()
            .table_name(self.table("dead-letters"))
            .item("shard_id", s(&d.shard_id))
            .item("seq", s(d.key()))
            .item("arrival_ms", n(d.arrival_ms))
            .item("reason", s(&d.reason))
            .item("data", AttributeValue::B(Blob::new(d.data.clone())))
            .item("size", n(d.size as i64))
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))
    }
}

#[async_trait]
impl WindowWriter for DynamoStore {
    async fn begin_window(
        &self,
        fence: &Fence,
        start_after: Option<&Position>,
        first: &SeqNo,
        end: &Position,
        decided: Decided,
    ) -> PortResult<()> {
        let mut x = Expr::default();
        let (cp, pe) = (x.name("checkpoint"), x.name("pending_end"));
        let mut extra = x.seq_is(&cp, start_after);
        extra.push_str(&format!(" AND attribute_not_exists({pe})"));
        let update = format!(
            "SET {pe} = {}, {} = {}, {} = {}",
            x.val(s(end.to_string())),
            x.name("pending_horizon_ms"),
            x.val(n(decided.horizon_ms)),
            x.name("pending_first"),
            x.val(s(first.as_str()))
        );
        self.lease_write(fence, x, &extra, update, ReturnValue::None)
            .await
            .map(drop)
    }

    async fn apply_posts(
        &self,
        w: WindowRef<'_>,
        posts: &[(String, PostDelta)],
    ) -> PortResult<PostsApplied> {
        let end = summary::marker_of(&w);
        let writes: Vec<Call<'_, PortResult<Applied>>> = posts
            .iter()
            .map(|(post, delta)| {
                Box::pin(self.apply_post(w.shard_id, post, delta, &end)) as Call<'_, _>
            })
            .collect();
        let results = side_by_side(writes, WRITES_IN_FLIGHT).await;
        // Each post's writes stand on their own (a marker per item): what landed is kept, and
        // only the posts that failed for a passing reason are sent again.
        let mut out = PostsApplied::default();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(a) => out.applied.merge(&a),
                Err(e) if e.is_retryable() => {
                    out.retry.push(i);
                    out.error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn apply_rest(&self, w: WindowRef<'_>, rest: WindowRest<'_>) -> PortResult<Applied> {
        let mut out = Applied::default();
        for d in rest.dead_letters {
            // Keyed by shard and position: a second write is the same item again.
            let p = self.dead_letter_put(d)?;
            self.client
                .put_item()
                .table_name(self.table("dead-letters"))
                .set_item(Some(p.item().clone()))
                .send()
                .await
                .map_err(|e| self.err("PutItem", "dead-letters", e))?;
            out.wrote(Purpose::DeadLetters, cost::dead_letter_units(d));
        }
        let end = summary::marker_of(&w);
        let total = summary::global_total_write(w.app, w.shard_id, rest.total_delta, &end);
        match self.write_summary(summary::GLOBAL_PK, &total, &end).await? {
            Outcome::Written => {
                out.wrote(Purpose::Counts, 1);
            }
            _ => {
                out.was_refused(1);
            }
        }
        if !rest.dedup.ids.is_empty() {
            let units = cost::dedup_units(rest.dedup);
            // Written once: an overwrite by a late writer could replace it with other content.
            let put = self.dedup_put(w.app, w.shard_id, w.end, rest.dedup, rest.horizon_ms)?;
            let r = self
                .client
                .put_item()
                .table_name(self.table("dedup"))
                .set_item(Some(put.item().clone()))
                .condition_expression("attribute_not_exists(pk)")
                .send()
                .await;
            match r.map_err(|e| self.err("PutItem", "dedup", e)) {
                Ok(_) => {
                    out.wrote(Purpose::Dedup, units);
                }
                Err(PortError::Fenced { .. }) => {
                    out.was_refused(units);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn finish_window(
        &self,
        fence: &Fence,
        end: &Position,
        max_arrival: i64,
        shard_finished: bool,
        spent: &ShardTally,
        renewal: Option<&Renewal>,
    ) -> PortResult<Option<String>> {
        let mut x = Expr::default();
        let (cp, pe, ph, pf) = (
            x.name("checkpoint"),
            x.name("pending_end"),
            x.name("pending_horizon_ms"),
            x.name("pending_first"),
        );
        let extra = x.seq_is(&pe, Some(end));
        let mut adds = vec![format!(
            "{} {}",
            x.name("counted"),
            x.val(n(spent.counted as i64))
        )];
        for p in Purpose::ALL {
            adds.push(format!(
                "{} {}",
                x.name(&format!("wu_{}", p.name())),
                x.val(n(spent.units.get(p) as i64))
            ));
        }
        // The counter passes the shard's latest creation time so far (a maximum DynamoDB cannot
        // take itself); only the lease holder's finish lands.
        let renew = renewal.map_or_else(String::new, |r| {
            format!(", {}", super::leases::renewal_set(&mut x, r))
        });
        let update = format!(
            "SET {cp} = {}, {} = {}, {} = {}, {} = {}{renew} REMOVE {pe}, {ph}, {pf} ADD {}",
            x.val(s(end.to_string())),
            x.name("max_arrival"),
            x.val(n(max_arrival)),
            x.name("finished"),
            x.val(AttributeValue::Bool(shard_finished)),
            x.name("latest_created"),
            x.val(n(spent.latest_created_ms)),
            adds.join(", ")
        );
        // Renewing, the row as written answers who asked for the lease (no extra units).
        let returns = if renewal.is_some() {
            ReturnValue::AllNew
        } else {
            ReturnValue::None
        };
        let row = self.lease_write(fence, x, &extra, update, returns).await?;
        match renewal {
            Some(_) => {
                tally_core::rows::handoff_ask(&super::row_of(&row), &self.table("leases"), fence)
            }
            None => Ok(None),
        }
    }
}

#[async_trait]
impl CountReader for DynamoStore {
    async fn stored_mode(&self) -> PortResult<Option<CountMode>> {
        tally_core::meta::Claims::count_mode(self, None).await
    }

    async fn post_counts(
        &self,
        post_ids: &[String],
        since_ms: Option<i64>,
        consistency: Consistency,
    ) -> PortResult<Vec<PostCount>> {
        // Side by side, in order: a feed page costs about one round trip, not one per post.
        type Fut<'a> =
            std::pin::Pin<Box<dyn std::future::Future<Output = PortResult<PostCount>> + Send + 'a>>;
        let reads: Vec<Fut<'_>> = post_ids
            .iter()
            .map(|id| Box::pin(self.one_count(id, since_ms, consistency)) as Fut<'_>)
            .collect();
        let counts: Vec<PortResult<PostCount>> = stream::iter(reads)
            .buffered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        counts.into_iter().collect()
    }

    async fn global_total(&self) -> PortResult<i64> {
        let items = self.partition("counts", "pk", summary::GLOBAL_PK).await?;
        let items: Vec<(String, Attrs)> = items
            .iter()
            .map(|i| Ok((get_s(i, "sk").unwrap_or_default(), to_attrs(i)?)))
            .collect::<PortResult<_>>()?;
        summary::total_of(&items)
    }
}

#[async_trait]
impl DeadLetterReader for DynamoStore {
    /// One Scan page (in the table's order), of at most `limit` letters: fewer where DynamoDB's
    /// page of 1 MB ends first.
    async fn dead_letter_page(
        &self,
        after: Option<&LetterCursor>,
        limit: usize,
    ) -> PortResult<(Vec<DeadLetter>, Option<LetterCursor>)> {
        let start = after.map(|c| {
            HashMap::from([
                ("shard_id".to_owned(), s(&c.shard_id)),
                ("seq".to_owned(), s(&c.key)),
            ])
        });
        let resp = self
            .client
            .scan()
            .table_name(self.table("dead-letters"))
            .set_exclusive_start_key(start)
            .limit(limit.min(i32::MAX as usize) as i32)
            .send()
            .await
            .map_err(|e| self.err("Scan", "dead-letters", e))?;
        // Each item decoded strictly (`tally_core::rows::dead_letter`): a corrupt one is an
        // error naming it, never skipped or read with defaults.
        let out = resp
            .items()
            .iter()
            .map(|i| tally_core::rows::dead_letter(&super::row_of(i), &self.table("dead-letters")))
            .collect::<PortResult<Vec<DeadLetter>>>()?;
        let next = resp
            .last_evaluated_key()
            .filter(|k| !k.is_empty())
            .and_then(|k| {
                Some(LetterCursor {
                    shard_id: get_s(k, "shard_id")?,
                    key: get_s(k, "seq")?,
                })
            });
        Ok((out, next))
    }

    async fn dead_letter_count(&self) -> PortResult<u64> {
        let mut total = 0u64;
        let mut start = None;
        loop {
            let resp = self
                .client
                .scan()
                .table_name(self.table("dead-letters"))
                .select(Select::Count)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Scan", "dead-letters", e))?;
            total += resp.count().max(0) as u64;
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(total),
            }
        }
    }
}

/// How many times a "since" read is read while an archive is ahead of its live item.
const SINCE_READS: u32 = 3;

impl DynamoStore {
    /// A post's count: its live items, and for "since T" then the hour and day archives (two
    /// Queries at once). The live items first: a window writes a post's archives before its live
    /// item, so archives read after it are never behind it; one found ahead (a window landed
    /// between the reads, maybe two) is read again, live items first, up to [`SINCE_READS`]
    /// times — then it is a window stopped between its writes, read as before it
    /// ([`summary::archive_ahead`]).
    async fn one_count(
        &self,
        post: &str,
        since_ms: Option<i64>,
        c: Consistency,
    ) -> PortResult<PostCount> {
        let (mut spent, mut read) = (0, 0);
        loop {
            read += 1;
            let live_prefix = [summary::LIVE_PREFIX];
            let live = self
                .post_items(post, "begins_with(sk, :a)", &live_prefix, c)
                .await?;
            let Some(since) = since_ms else {
                return summary::post_count(post, live, None);
            };
            let (hour_prefix, (lo, hi)) = summary::since_reads(since);
            let (hour_args, day_args) = ([hour_prefix.as_str()], [lo.as_str(), hi.as_str()]);
            let hours = self.post_items(post, "begins_with(sk, :a)", &hour_args, c);
            let days = self.post_items(post, "sk BETWEEN :a AND :b", &day_args, c);
            let (hours, days) = futures_util::future::try_join(hours, days).await?;
            let ahead =
                summary::archive_ahead(&live, &hours) || summary::archive_ahead(&live, &days);
            let mut count = summary::post_count(post, live, Some((since, hours, days)))?;
            if ahead && read < SINCE_READS {
                spent += count.read_units;
                continue;
            }
            count.read_units += spent;
            return Ok(count);
        }
    }

    /// The items of a post's partition matching a sort-key condition on `:a` (and `:b`).
    async fn post_items(
        &self,
        post: &str,
        sk_cond: &str,
        args: &[&str],
        c: Consistency,
    ) -> PortResult<Vec<(String, Attrs)>> {
        let mut values = HashMap::from([(":p".to_owned(), s(post))]);
        for (name, v) in [":a", ":b"].iter().zip(args) {
            values.insert((*name).to_owned(), s(*v));
        }
        let cond = format!("pk = :p AND {sk_cond}");
        let strong = c == Consistency::Strong;
        let items = self
            .query_all("counts", &cond, values, None, strong)
            .await?;
        items
            .iter()
            .map(|i| Ok((get_s(i, "sk").unwrap_or_default(), to_attrs(i)?)))
            .collect()
    }
}

#[async_trait]
impl DedupStore for DynamoStore {
    async fn expire_dedup(&self, _app: &str, _shard_id: &str, _before: i64) -> PortResult<()> {
        // The records' TTL removes them, for nothing; a delete would cost their size again.
        Ok(())
    }

    async fn load_dedup(
        &self,
        app: &str,
        shard_ids: &[String],
        min_arrival: i64,
    ) -> PortResult<Vec<StoredDedup>> {
        let mut out = Vec::new();
        for shard in shard_ids {
            // The key range reads only records within the horizon of the clock.
            let values = HashMap::from([
                (":p".to_owned(), s(format!("{app}#{shard}"))),
                (":lo".to_owned(), s(arrival_key(min_arrival))),
            ]);
            let items = self
                .query_all("dedup", "pk = :p AND sk >= :lo", values, None, true)
                .await?;
            for i in items {
                let sk = get_s(&i, "sk").unwrap_or_default();
                let item = format!("{} {app}#{shard}/{sk}", self.table("dedup"));
                let end = sk.split_once('#').map(|(_, e)| e);
                let ids = i.get("ids").and_then(|v| v.as_b().ok()).map(|b| b.as_ref());
                let (end, record) =
                    tally_core::rows::dedup_row(&item, end, get_n(&i, "max_arrival"), ids)?;
                out.push(StoredDedup {
                    shard_id: shard.clone(),
                    end,
                    record,
                });
            }
        }
        Ok(out)
    }
}
