//! Likers' edges on DynamoDB: items `E#<user>` in the post's partition of the counts table, each
//! written by one conditional `UpdateItem` that keeps the state it replaced and answers the item
//! ([`tally_core::edge::apply`] is the reference); the store's count mode (`#meta`/`count`); and
//! the reads: a feed page's viewer likes in one `BatchGetItem`, a post's likers by `Query`.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use tally_core::clock::now_ms;
use tally_core::cost::Purpose;
use tally_core::edge::{self, CountMode, EdgeEvent, EdgeState, Resolved, Transition};
use tally_core::ports::{
    Applied, Consistency, EdgesApplied, LikersPage, PortError, PortResult, WindowRef,
};
use tally_core::summary::{self, Attrs};

use super::counter::to_attrs;
use super::{get_s, n, s, side_by_side, Call, DynamoStore, Expr, DEDUP_TTL_MARGIN_SECS};

/// The partition of a shard's window edge records in the dedup table.
fn window_edges_pk(app: &str, shard: &str) -> String {
    format!("edges#{app}#{shard}")
}

/// A window's edge record chunks put at once.
const RECORD_PUTS_IN_FLIGHT: usize = 8;

/// Edge writes in flight at once (each its own request).
const EDGES_IN_FLIGHT: usize = 32;

/// Keys one `BatchGetItem` may ask for.
const BATCH_GET_KEYS: usize = 100;

/// Items a `BatchGetItem` found, by (pk, sk).
type Found = HashMap<(String, String), Attrs>;

/// `BatchGetItem`s in flight at once (a window's edges: up to 200 of them).
const BATCH_GETS_IN_FLIGHT: usize = 8;

/// What one edge write did.
enum Edge {
    /// Written; `true`: over another shard's write.
    Wrote(Transition, u64, bool),
    Mine(Transition, u64),
    /// Refused as no change (the units of the write remembering its lost clamped events beside);
    /// `true`: the edge no longer remembers whether this window wrote it.
    Superseded(u64, u64, bool),
}

fn state_of(
    post: &str,
    user: &str,
    item: Option<&HashMap<String, AttributeValue>>,
) -> PortResult<Option<EdgeState>> {
    item.map(|i| tally_core::rows::edge_state(&to_attrs(i)?, post, user))
        .transpose()
}

fn units_of(post: &str, sk: &str, item: Option<&HashMap<String, AttributeValue>>) -> u64 {
    // A refused write is charged the stored item's size; one DynamoDB cannot size is charged a unit.
    item.and_then(|i| to_attrs(i).ok())
        .map_or(1, |a| summary::write_units(post, sk, &a))
}

impl DynamoStore {
    /// One edge's conditional write: only if the stored event is older, is not the same event
    /// (a copy ordered at another time) and no write the item remembers is this window's;
    /// keeping the event it replaces and shifting the remembered writes one older
    /// ([`edge::written`] is the reference). A refusal is resolved against the item as it was
    /// ([`edge::resolve`]): this window's earlier write, or no change.
    async fn write_edge(&self, e: &EdgeEvent, window: &str) -> PortResult<Edge> {
        let sk = edge::edge_sk(&e.user_id);
        let mut x = Expr::default();
        let (l, t, ev) = (x.name("l"), x.name("t"), x.name("e"));
        let (vt, ve, vw) = (
            x.val(n(e.at_ms)),
            x.val(s(e.event_id.as_str())),
            x.val(s(window)),
        );
        let (zero, nil) = (x.val(n(0)), x.val(s("")));
        let gens: Vec<[String; 4]> = (0..edge::EDGE_HISTORY)
            .map(|g| edge::write_attrs(g).map(|a| x.name(a)))
            .collect();
        let mut cond = format!(
            "(attribute_not_exists({t}) OR {t} < {vt} OR ({t} = {vt} AND {ev} < {ve})) AND (attribute_not_exists({ev}) OR {ev} <> {ve})"
        );
        for [w, _, _, pe] in &gens {
            cond += &format!(
                " AND (attribute_not_exists({w}) OR {w} <> {vw}) AND (attribute_not_exists({pe}) OR {pe} <> {ve})"
            );
        }
        // Nor a copy of a clamped event that took no effect on it.
        let lost: Vec<String> = edge::LOST_ATTRS.iter().map(|c| x.name(c)).collect();
        for c in &lost {
            cond += &format!(" AND (attribute_not_exists({c}) OR {c} <> {ve})");
        }
        // The oldest remembered write's window kept as the one pushed out (`edge::DROPPED_ATTR`;
        // empty while the history is not full), each remembered write one older, then the
        // newest: this one. Every operand is the item as it was.
        let (dropped, oldest) = (x.name(edge::DROPPED_ATTR), &gens[edge::EDGE_HISTORY - 1][0]);
        let mut sets = vec![format!("{dropped} = if_not_exists({oldest}, {nil})")];
        for g in (1..edge::EDGE_HISTORY).rev() {
            let ([w, pl, pt, pe], [w0, pl0, pt0, pe0]) = (&gens[g], &gens[g - 1]);
            sets.push(format!(
                "{w} = if_not_exists({w0}, {nil}), {pl} = if_not_exists({pl0}, {zero}), {pt} = if_not_exists({pt0}, {zero}), {pe} = if_not_exists({pe0}, {nil})"
            ));
        }
        let [w, pl, pt, pe] = &gens[0];
        sets.push(format!(
            "{pl} = if_not_exists({l}, {zero}), {pt} = if_not_exists({t}, {zero}), {pe} = if_not_exists({ev}, {nil}), {l} = {}, {t} = {vt}, {ev} = {ve}, {w} = {vw}",
            x.val(n(i64::from(e.liked))),
        ));
        // The window's lost clamped events, newest first, before those the item kept.
        let new: Vec<&String> = e.lost.iter().rev().collect();
        sets.extend(lost_shift(&mut x, &lost, &new, &nil));
        // A liked edge keeps its like's time where the recent index reads it; an unliked one
        // leaves that index.
        let lt = x.name(edge::LIKED_AT_ATTR);
        let update = if e.liked {
            sets.push(format!("{lt} = {vt}"));
            format!("SET {}", sets.join(", "))
        } else {
            format!("SET {} REMOVE {lt}", sets.join(", "))
        };
        let r = self
            .edge_update(e, &x, cond, update)
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match r {
            Ok(out) => {
                let st = state_of(&e.post_id, &e.user_id, out.attributes())?
                    .ok_or_else(|| PortError::Other("an edge write answered no item".into()))?;
                let units = units_of(&e.post_id, &sk, out.attributes());
                Ok(Edge::Wrote(st.transition(&e.post_id), units, st.crossed()))
            }
            Err(SdkError::ServiceError(se))
                if matches!(
                    se.err(),
                    UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(f) = se.err() else {
                    unreachable!()
                };
                let units = units_of(&e.post_id, &sk, f.item());
                let old = state_of(&e.post_id, &e.user_id, f.item())?;
                let forgotten = match edge::resolve(old.as_ref(), e, window) {
                    Resolved::Mine(t) => return Ok(Edge::Mine(t, units)),
                    Resolved::Superseded => false,
                    Resolved::Forgotten => true,
                    Resolved::Writes(_) => {
                        return Err(PortError::Other(format!(
                            "an edge write of {}/{sk} was refused by an item it should replace: {old:?}",
                            e.post_id
                        )))
                    }
                };
                let remembered = match &old {
                    Some(o) => self.remember_lost(e, o).await?,
                    None => 0,
                };
                Ok(Edge::Superseded(units, remembered, forgotten))
            }
            Err(err) => Err(self.err("UpdateItem", "counts", err)),
        }
    }

    /// A conditional `UpdateItem` of `e`'s edge item.
    fn edge_update(
        &self,
        e: &EdgeEvent,
        x: &Expr,
        cond: String,
        update: String,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(self.table("counts"))
            .key("pk", s(e.post_id.as_str()))
            .key("sk", s(edge::edge_sk(&e.user_id)))
            .condition_expression(cond)
            .update_expression(update)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
    }

    /// Remembers on the edge `old` the clamped events of a refused write of `e` that took no
    /// effect ([`edge::lost_to_remember`]); conditioned on the edge being as read, and refused
    /// as a conflict (the edge is sent again) if another write came between. Its write units.
    async fn remember_lost(&self, e: &EdgeEvent, old: &edge::EdgeState) -> PortResult<u64> {
        let new = edge::lost_to_remember(old, e);
        if new.is_empty() {
            return Ok(0);
        }
        let sk = edge::edge_sk(&e.user_id);
        let mut x = Expr::default();
        let (ev, w) = (x.name("e"), x.name("w"));
        let (vold, vw) = (
            x.val(s(&old.event_id)),
            x.val(s(old.writes.first().map_or("", |w| w.window.as_str()))),
        );
        let nil = x.val(s(""));
        let lost: Vec<String> = edge::LOST_ATTRS.iter().map(|c| x.name(c)).collect();
        let new: Vec<&String> = new.iter().collect();
        let sets = lost_shift(&mut x, &lost, &new, &nil);
        let r = self
            .edge_update(
                e,
                &x,
                format!("{ev} = {vold} AND {w} = {vw}"),
                format!("SET {}", sets.join(", ")),
            )
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match r {
            Ok(out) => Ok(units_of(&e.post_id, &sk, out.attributes())),
            Err(SdkError::ServiceError(se))
                if matches!(
                    se.err(),
                    UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                Err(PortError::Conflict(format!(
                    "the edge {}/{sk} changed while its lost clamped events were remembered",
                    e.post_id
                )))
            }
            Err(err) => Err(self.err("UpdateItem", "counts", err)),
        }
    }

    /// A window's edges, side by side; only those that failed for a passing reason are named
    /// for a retry.
    pub(super) async fn write_edges(
        &self,
        window: &str,
        edges: &[EdgeEvent],
    ) -> PortResult<EdgesApplied> {
        let writes: Vec<Call<'_, PortResult<Edge>>> = edges
            .iter()
            .map(|e| Box::pin(self.write_edge(e, window)) as Call<'_, _>)
            .collect();
        let results = side_by_side(writes, EDGES_IN_FLIGHT).await;
        let mut out = EdgesApplied::default();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(Edge::Wrote(t, u, crossed)) => {
                    out.applied.wrote(Purpose::Edges, u);
                    out.crossed += u64::from(crossed);
                    out.transitions.push(t);
                }
                Ok(Edge::Mine(t, u)) => {
                    out.applied.was_refused(u);
                    out.transitions.push(t);
                }
                Ok(Edge::Superseded(u, remembered, forgotten)) => {
                    out.applied.was_refused(u);
                    if remembered > 0 {
                        out.applied.wrote(Purpose::Edges, remembered);
                    }
                    out.forgotten += u64::from(forgotten);
                }
                Err(e) if e.is_retryable() => {
                    out.retry.push(i);
                    out.error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// A window's edge record, in the dedup table beside the shard's dedup records (its own
    /// partition, `edges#<app>#<shard>`; sort key the window's marker and the chunk), each chunk
    /// one `PutItem`, expiring by TTL (free) once the stream no longer holds the window's
    /// records — after which it cannot be given up any more.
    pub(super) async fn put_window_edges(
        &self,
        w: WindowRef<'_>,
        pairs: &[(&str, &str)],
    ) -> PortResult<Applied> {
        let chunks = edge::encode_pairs(pairs);
        let marker = summary::marker(w.end);
        let expires = now_ms() / 1000 + self.retention_secs + DEDUP_TTL_MARGIN_SECS;
        let n_chunks = chunks.len();
        let puts: Vec<Call<'_, PortResult<u64>>> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, chunk)| {
                let units =
                    tally_core::cost::write_units(chunk.len() + edge::WINDOW_EDGES_KEY_BYTES);
                let call = self
                    .client
                    .put_item()
                    .table_name(self.table("dedup"))
                    .item("pk", s(window_edges_pk(w.app, w.shard_id)))
                    .item("sk", s(format!("{marker}#{i:05}")))
                    .item("chunks", n(n_chunks as i64))
                    .item("pairs", AttributeValue::B(Blob::new(chunk)))
                    .item("expires_at", n(expires))
                    .send();
                Box::pin(async move {
                    call.await
                        .map(|_| units)
                        .map_err(|e| self.err("PutItem", "dedup", e))
                }) as Call<'_, _>
            })
            .collect();
        let mut out = Applied::default();
        for r in side_by_side(puts, RECORD_PUTS_IN_FLIGHT).await {
            out.wrote(Purpose::Edges, r?);
        }
        Ok(out)
    }

    /// A window's edge record, if every chunk of it is stored (strongly consistent).
    pub(super) async fn read_window_edges(
        &self,
        w: WindowRef<'_>,
    ) -> PortResult<Option<Vec<(String, String)>>> {
        let marker = summary::marker(w.end);
        let values = HashMap::from([
            (":p".to_owned(), s(window_edges_pk(w.app, w.shard_id))),
            (":m".to_owned(), s(format!("{marker}#"))),
        ]);
        let items = self
            .query_all(
                "dedup",
                "pk = :p AND begins_with(sk, :m)",
                values,
                None,
                None,
            )
            .await?;
        let whole = !items.is_empty()
            && items
                .iter()
                .all(|i| super::get_n(i, "chunks") == Some(items.len() as i64));
        if !whole {
            return Ok(None);
        }
        let mut pairs = Vec::new();
        for i in &items {
            let chunk = i.get("pairs").and_then(|v| v.as_b().ok()).ok_or_else(|| {
                PortError::Other(format!(
                    "a window's edge record of {}/{} at {} has no pairs",
                    w.app, w.shard_id, w.end
                ))
            })?;
            pairs.extend(edge::decode_pairs(chunk.as_ref()).map_err(|e| {
                PortError::Other(format!("{}/{} at {}: {e}", w.app, w.shard_id, w.end))
            })?);
        }
        Ok(Some(pairs))
    }

    /// The stored count mode; with `claim`, set first if unset.
    pub(super) async fn mode(&self, claim: Option<CountMode>) -> PortResult<Option<CountMode>> {
        let key = HashMap::from([
            ("pk".to_owned(), s(edge::MODE_PK)),
            ("sk".to_owned(), s(edge::MODE_SK)),
        ]);
        if let Some(item) = self.get("counts", key.clone()).await? {
            return mode_of(&item).map(Some);
        }
        let Some(want) = claim else { return Ok(None) };
        // A store with global totals and no mode was counted by a tally from before modes: events.
        let counted_before = !self
            .client
            .query()
            .table_name(self.table("counts"))
            .key_condition_expression("pk = :k")
            .expression_attribute_values(":k", s(summary::GLOBAL_PK))
            .limit(1)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err("Query", "counts", e))?
            .items()
            .is_empty();
        let m = if counted_before {
            CountMode::Events
        } else {
            want
        };
        let r = self
            .meta_put(&key, "mode", m.as_str())
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match r {
            Ok(_) => Ok(Some(m)),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                // Another process claimed it first: its claim stands.
                let item = self.get("counts", key).await?;
                item.as_ref().map(mode_of).transpose()
            }
            Err(e) => Err(self.err("PutItem", "counts", e)),
        }
    }

    /// A `PutItem` of the `#meta` item `key` holding `name` = `value`.
    fn meta_put(
        &self,
        key: &HashMap<String, AttributeValue>,
        name: &str,
        value: &str,
    ) -> aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder {
        let item = key.clone().into_iter().chain([(name.to_owned(), s(value))]);
        self.client
            .put_item()
            .table_name(self.table("counts"))
            .set_item(Some(item.collect()))
    }

    /// The clock skews the store was counted with; with `record`, added first if new (a put
    /// conditioned on the list read, tried again if another process changed it meanwhile).
    /// The stream the store is counted from; with `claim`, set to it when none is named yet
    /// (a conditional put: the first claim wins, and is what is answered).
    pub(super) async fn stream_claim(&self, claim: Option<&str>) -> PortResult<Option<String>> {
        let key = HashMap::from([
            ("pk".to_owned(), s(edge::MODE_PK)),
            ("sk".to_owned(), s(edge::STREAM_SK)),
        ]);
        let named = |item: &HashMap<String, AttributeValue>| {
            get_s(item, "v").ok_or_else(|| PortError::Corrupt {
                item: format!(
                    "{} {}/{}",
                    self.table("counts"),
                    edge::MODE_PK,
                    edge::STREAM_SK
                ),
                detail: "`v` is not the stream's name".into(),
            })
        };
        if let Some(item) = self.get("counts", key.clone()).await? {
            return named(&item).map(Some);
        }
        let Some(want) = claim else { return Ok(None) };
        let r = self
            .meta_put(&key, "v", want)
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match r {
            Ok(_) => Ok(Some(want.to_owned())),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                // Another process claimed it first: its claim stands.
                let item = self.get("counts", key).await?;
                item.as_ref().map(named).transpose()
            }
            Err(e) => Err(self.err("PutItem", "counts", e)),
        }
    }

    /// The regions the tables are replicated to (a global table's replicas), by `DescribeTable`
    /// of each of the counter's tables.
    pub(super) async fn replicas(&self) -> PortResult<Vec<String>> {
        let mut regions = Vec::new();
        for t in ["counts", "leases", "dedup"] {
            let d = self
                .client
                .describe_table()
                .table_name(self.table(t))
                .send()
                .await
                .map_err(|e| self.err("DescribeTable", t, e))?;
            for r in d.table().map(replica_regions).unwrap_or_default() {
                if !regions.contains(&r) {
                    regions.push(r);
                }
            }
        }
        Ok(regions)
    }

    pub(super) async fn skews(&self, record: Option<i64>) -> PortResult<Vec<i64>> {
        let key = HashMap::from([
            ("pk".to_owned(), s(edge::MODE_PK)),
            ("sk".to_owned(), s(edge::SKEWS_SK)),
        ]);
        loop {
            let stored = self.get("counts", key.clone()).await?;
            let text = stored.as_ref().and_then(|i| get_s(i, "v"));
            let mut skews = match (&stored, &text) {
                (None, _) => Vec::new(),
                (Some(_), Some(t)) => edge::skews_from_text(t).map_err(PortError::Other)?,
                (Some(i), None) => {
                    return Err(PortError::Other(format!(
                        "a corrupt clock skew item in {}: {i:?}",
                        self.table("counts")
                    )))
                }
            };
            let Some(v) = record.filter(|v| !skews.contains(v)) else {
                return Ok(skews);
            };
            skews.push(v);
            let mut put = self.meta_put(&key, "v", &edge::skews_to_text(&skews));
            put = match &text {
                None => put.condition_expression("attribute_not_exists(pk)"),
                Some(t) => put
                    .condition_expression("v = :old")
                    .expression_attribute_values(":old", s(t)),
            };
            match put.send().await {
                Ok(_) => return Ok(skews),
                Err(SdkError::ServiceError(se))
                    if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
                {
                    // Another worker recorded one meanwhile: read the list again.
                    continue;
                }
                Err(e) => return Err(self.err("PutItem", "counts", e)),
            }
        }
    }

    /// The stored edges of these (post, user) pairs, in order: `BatchGetItem`s of up to 100
    /// distinct keys side by side, each one's unprocessed keys sent again.
    pub(super) async fn edge_states(
        &self,
        pairs: &[(String, String)],
        c: Consistency,
    ) -> PortResult<(Vec<Option<EdgeState>>, u64)> {
        let keyed: Vec<(&str, String)> = pairs
            .iter()
            .map(|(p, u)| (p.as_str(), edge::edge_sk(u)))
            .collect();
        let mut distinct: Vec<(&str, &str)> = keyed.iter().map(|(p, k)| (*p, k.as_str())).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let calls: Vec<Call<'_, PortResult<Found>>> = distinct
            .chunks(BATCH_GET_KEYS)
            .map(|chunk| Box::pin(self.batch_get(chunk, c)) as Call<'_, _>)
            .collect();
        let mut found = HashMap::new();
        for part in side_by_side(calls, BATCH_GETS_IN_FLIGHT).await {
            found.extend(part?);
        }
        let mut units = 0;
        // An item that is there and is not an edge is an error naming it, never "absent".
        let states = keyed
            .iter()
            .zip(pairs)
            .map(|((p, sk), (_, user))| {
                let a = found.get(&((*p).to_owned(), sk.clone()));
                units += summary::read_units(a.iter().map(|a| summary::item_size(p, sk, a)));
                a.map(|a| tally_core::rows::edge_state(a, p, user))
                    .transpose()
            })
            .collect::<PortResult<Vec<_>>>()?;
        Ok((states, units))
    }

    /// One `BatchGetItem` of the counts table's items at these distinct keys (at most 100),
    /// its unprocessed keys sent again: the items found, by (pk, sk).
    async fn batch_get(&self, keys: &[(&str, &str)], c: Consistency) -> PortResult<Found> {
        let mut found = HashMap::new();
        let table = self.table("counts");
        let keys: Vec<HashMap<String, AttributeValue>> = keys
            .iter()
            .map(|(p, k)| HashMap::from([("pk".to_owned(), s(*p)), ("sk".to_owned(), s(*k))]))
            .collect();
        let mut todo = Some(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(c == Consistency::Strong)
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?,
        );
        let mut rounds = 0;
        while let Some(ka) = todo.take() {
            rounds += 1;
            let resp = self
                .client
                .batch_get_item()
                .request_items(&table, ka)
                .send()
                .await
                .map_err(|e| self.err("BatchGetItem", "counts", e))?;
            for item in resp
                .responses()
                .and_then(|r| r.get(&table))
                .into_iter()
                .flatten()
            {
                if let (Some(pk), Some(sk)) = (get_s(item, "pk"), get_s(item, "sk")) {
                    found.insert((pk, sk), to_attrs(item)?);
                }
            }
            todo = resp
                .unprocessed_keys()
                .and_then(|u| u.get(&table))
                .filter(|k| !k.keys().is_empty())
                .cloned();
            if todo.is_some() {
                if rounds >= 10 {
                    return Err(PortError::Throttled(format!(
                        "BatchGetItem on {table} left keys unprocessed {rounds} times"
                    )));
                }
                tokio::time::sleep(std::time::Duration::from_millis(20 << rounds.min(5))).await;
            }
        }
        Ok(found)
    }

    /// A page of a post's likers, by `Query` of its edges from after `after`.
    pub(super) async fn likers_page(
        &self,
        post: &str,
        after: Option<&str>,
        limit: usize,
    ) -> PortResult<LikersPage> {
        let limit = limit.clamp(1, tally_core::ports::MAX_LIKERS_PER_PAGE);
        let mut page = LikersPage::default();
        let mut start = after.map(|a| {
            HashMap::from([
                ("pk".to_owned(), s(post)),
                ("sk".to_owned(), s(edge::edge_sk(a))),
            ])
        });
        loop {
            let resp = self
                .client
                .query()
                .table_name(self.table("counts"))
                .key_condition_expression("pk = :p AND begins_with(sk, :e)")
                .expression_attribute_values(":p", s(post))
                .expression_attribute_values(":e", s(edge::EDGE_PREFIX))
                .consistent_read(true)
                .limit(limit as i32)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Query", "counts", e))?;
            let items: Vec<(String, Attrs)> = resp
                .items()
                .iter()
                .map(|i| Ok((get_s(i, "sk").unwrap_or_default(), to_attrs(i)?)))
                .collect::<PortResult<_>>()?;
            page.read_units += summary::query_units(post, &items);
            for (sk, a) in &items {
                let user = &sk[edge::EDGE_PREFIX.len()..];
                if page.users.len() < limit && tally_core::rows::edge_state(a, post, user)?.liked {
                    page.users.push(user.to_owned());
                }
            }
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() && page.users.len() < limit => start = Some(k.clone()),
                _ => {
                    page.next = (page.users.len() == limit).then(|| page.users[limit - 1].clone());
                    return Ok(page);
                }
            }
        }
    }
}

fn mode_of(item: &HashMap<String, AttributeValue>) -> PortResult<CountMode> {
    get_s(item, "mode")
        .as_deref()
        .and_then(CountMode::parse)
        .ok_or_else(|| PortError::Other(format!("a corrupt count mode item: {item:?}")))
}

/// The SET clauses that put `new` (newest first) at the head of the remembered lost clamped
/// events `lost` (their attribute names), shifting those kept one place older per new id (the
/// oldest past [`edge::EDGE_LOST`] dropped): [`edge::written`]'s rule in one expression.
fn lost_shift(x: &mut Expr, lost: &[String], new: &[&String], nil: &str) -> Vec<String> {
    if new.is_empty() {
        return Vec::new();
    }
    let k = new.len();
    (0..lost.len())
        .map(|i| match new.get(i) {
            Some(id) => format!("{} = {}", lost[i], x.val(s(id.as_str()))),
            None => format!("{} = if_not_exists({}, {nil})", lost[i], lost[i - k]),
        })
        .collect()
}

/// The regions a table description names as replicas (a global table; none otherwise).
pub(super) fn replica_regions(t: &aws_sdk_dynamodb::types::TableDescription) -> Vec<String> {
    t.replicas()
        .iter()
        .filter_map(|r| r.region_name().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod replica_tests {
    use aws_sdk_dynamodb::types::{ReplicaDescription, TableDescription};

    /// A global table's description names its replicas' regions; a table of one region none.
    #[test]
    fn a_global_table_s_replicas_are_named() {
        let global = TableDescription::builder()
            .replicas(
                ReplicaDescription::builder()
                    .region_name("eu-west-1")
                    .build(),
            )
            .replicas(
                ReplicaDescription::builder()
                    .region_name("ap-south-1")
                    .build(),
            )
            .build();
        assert_eq!(super::replica_regions(&global), ["eu-west-1", "ap-south-1"]);
        let single = TableDescription::builder().build();
        assert!(super::replica_regions(&single).is_empty());
    }
}
