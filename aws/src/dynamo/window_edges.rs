//! A window's edge record on DynamoDB: the (post, user) pairs a pending likers window writes,
//! in chunks in the dedup table beside the shard's dedup records, put before its first edge
//! write.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tally_core::clock::now_ms;
use tally_core::cost::Purpose;
use tally_core::edge;
use tally_core::ports::{Applied, PortError, PortResult, WindowRef};
use tally_core::summary;

use super::{n, s, side_by_side, Call, DynamoStore, DEDUP_TTL_MARGIN_SECS};

/// The partition of a shard's window edge records in the dedup table.
fn window_edges_pk(app: &str, shard: &str) -> String {
    format!("edges#{app}#{shard}")
}

/// A window's edge record chunks put at once.
const RECORD_PUTS_IN_FLIGHT: usize = 8;

impl DynamoStore {
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
}
