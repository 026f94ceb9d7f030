//! [`EdgeWriter`] on DynamoDB: likers' edges are items of the edges table (`pk` the post, `sk`
//! `E#<user>`; `l`, `t`, `e`, and `lt` while liked: [`EdgeState::to_attrs`]), each written by one
//! conditional `UpdateItem` that takes effect only if the edge is absent or its event orders
//! before the new one ([`edge::apply`] is the reference). DynamoDB Streams logs each change such
//! a write makes, once, with the item before and after, and nothing for a refused one: that
//! stream is the change log ([`crate::edge_log`]). Reads of edges are `likers`'s.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use tally_core::cost::{self, Purpose};
use tally_core::edge::{self, EdgeEvent, EdgeState};
use tally_core::ports::{EdgeWriter, EdgesWritten, PortError, PortResult, Stream};

use super::counter::to_attrs;
use super::{n, s, side_by_side, Call, DynamoStore, Expr};

/// Edge writes in flight at once (each its own request).
const EDGES_IN_FLIGHT: usize = 32;

/// What one edge write did, and its write units.
enum Wrote {
    /// The edge changed (and DynamoDB Streams logged it).
    Changed(u64),
    /// Refused: the stored event is this one or a later one.
    Refused(u64),
}

impl DynamoStore {
    /// One edge's conditional write. Charged as DynamoDB charges it: a write by the item it
    /// leaves, a refused one by the item it found (both as the embedded store counts them).
    async fn write_edge(&self, e: &EdgeEvent) -> PortResult<Wrote> {
        let new = EdgeState {
            liked: e.liked,
            at_ms: e.at_ms,
            event_id: e.event_id.as_str().to_owned(),
        };
        let mut x = Expr::default();
        let (l, t, ev) = (x.name("l"), x.name("t"), x.name("e"));
        let lt = x.name(edge::LIKED_AT_ATTR);
        let (vl, vt, ve) = (
            x.val(n(i64::from(e.liked))),
            x.val(n(e.at_ms)),
            x.val(s(e.event_id.as_str())),
        );
        // DynamoDB orders strings by their UTF-8 bytes, as `EdgeEvent::is_after` does.
        let cond =
            format!("attribute_not_exists({t}) OR {t} < {vt} OR ({t} = {vt} AND {ev} < {ve})");
        // A liked edge keeps its like's time where the recent index reads it; an unliked one
        // leaves that index.
        let set = format!("SET {l} = {vl}, {t} = {vt}, {ev} = {ve}");
        let update = if e.liked {
            format!("{set}, {lt} = {vt}")
        } else {
            format!("{set} REMOVE {lt}")
        };
        let r = self
            .client
            .update_item()
            .table_name(self.table("edges"))
            .key("pk", s(e.post_id.as_str()))
            .key("sk", s(edge::edge_sk(&e.user_id)))
            .condition_expression(cond)
            .update_expression(update)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let units = |st: &EdgeState| cost::write_units(st.item_size(&e.post_id, &e.user_id));
        match r {
            Ok(_) => Ok(Wrote::Changed(units(&new))),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(f)) => {
                    let old = refused_by(e, f.item())?;
                    Ok(Wrote::Refused(units(&old)))
                }
                _ => Err(self.err("UpdateItem", "edges", err)),
            },
        }
    }
}

/// The stored edge that refused a write of `e`, as the refusal returned it. A refusal that
/// [`edge::apply`] would not make — no item, an item that is not an edge, or one older than `e`
/// (an attribute of another type fails every comparison) — is an error naming the item, never
/// taken as "a copy": the edge would never change again.
fn refused_by(
    e: &EdgeEvent,
    item: Option<&std::collections::HashMap<String, AttributeValue>>,
) -> PortResult<EdgeState> {
    let name = || format!("{}/{}", e.post_id, edge::edge_sk(&e.user_id));
    let item = item.ok_or_else(|| {
        PortError::Other(format!(
            "the write of the edge {} was refused, and DynamoDB returned no item",
            name()
        ))
    })?;
    let old = tally_core::rows::edge_state(&to_attrs(item)?, &e.post_id, &e.user_id)?;
    if edge::apply(Some(&old), e).is_some() {
        return Err(PortError::Corrupt {
            item: name(),
            detail: format!(
                "it refused a later event ({}, `{}`) than its own ({}, `{}`)",
                e.at_ms, e.event_id, old.at_ms, old.event_id
            ),
        });
    }
    Ok(old)
}

#[async_trait]
impl EdgeWriter for DynamoStore {
    /// The edges side by side; only those that failed for a passing reason are named for a
    /// retry.
    async fn write_edges(&self, edges: &[EdgeEvent]) -> PortResult<EdgesWritten> {
        let writes: Vec<Call<'_, PortResult<Wrote>>> = edges
            .iter()
            .map(|e| Box::pin(self.write_edge(e)) as Call<'_, _>)
            .collect();
        let mut out = EdgesWritten::default();
        for (i, r) in side_by_side(writes, EDGES_IN_FLIGHT)
            .await
            .into_iter()
            .enumerate()
        {
            match r {
                Ok(Wrote::Changed(u)) => {
                    out.applied.wrote(Purpose::Edges, u);
                    out.changed += 1;
                }
                Ok(Wrote::Refused(u)) => out.applied.was_refused(u),
                Err(e) if e.is_retryable() => {
                    out.retry.push(i);
                    out.error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn change_log(&self) -> PortResult<std::sync::Arc<dyn Stream>> {
        Ok(std::sync::Arc::new(self.edge_log.clone()))
    }
}
