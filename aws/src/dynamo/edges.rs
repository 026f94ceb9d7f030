//! Likers' edges on DynamoDB: items `E#<user>` in the post's partition of the counts table, each
//! written by one conditional `UpdateItem` that keeps the state it replaced and answers the item
//! ([`tally_core::edge::apply`] is the reference). A window's edge record is `window_edges`'s,
//! the store's meta items `meta`'s, the reads of edges `likers`'s.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use tally_core::cost::Purpose;
use tally_core::edge::{self, EdgeEvent, EdgeState, Resolved, Transition};
use tally_core::ports::{EdgesApplied, PortError, PortResult};
use tally_core::summary;

use super::counter::to_attrs;
use super::{n, s, side_by_side, Call, DynamoStore, Expr};

/// Edge writes in flight at once (each its own request).
const EDGES_IN_FLIGHT: usize = 32;

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
