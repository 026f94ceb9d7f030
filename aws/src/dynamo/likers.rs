//! Likers' edges read back from the edges table: a feed page's viewer likes (and any set of
//! edges) in `BatchGetItem`s, a post's likers by `Query` of its partition. Every item is decoded
//! strictly ([`tally_core::rows::edge_state`]): one that is not an edge as tally writes it is an
//! error naming it, never "absent" or "not liked". The store's `LikersReader` is here; its most
//! recent first and scan reads are `recent`'s and `scan`'s.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use tally_core::edge::{self, EdgeState};
use tally_core::ports::{
    Consistency, EdgeScan, LikersPage, LikersReader, PortError, PortResult, RecentCursor,
    RecentPage, ScanCursor,
};
use tally_core::summary::{self, Attrs};

use super::counter::to_attrs;
use super::{get_s, s, side_by_side, Call, DynamoStore};

/// Keys one `BatchGetItem` may ask for.
const BATCH_GET_KEYS: usize = 100;

/// Items a `BatchGetItem` found, by (pk, sk).
type Found = HashMap<(String, String), Attrs>;

/// `BatchGetItem`s in flight at once (a window's edges: up to 200 of them).
const BATCH_GETS_IN_FLIGHT: usize = 8;

impl DynamoStore {
    /// One `BatchGetItem` of the edges table's items at these distinct keys (at most 100),
    /// its unprocessed keys sent again: the items found, by (pk, sk).
    async fn batch_get(&self, keys: &[(&str, &str)], c: Consistency) -> PortResult<Found> {
        let mut found = HashMap::new();
        let table = self.table("edges");
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
                .map_err(|e| self.err("BatchGetItem", "edges", e))?;
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
}

#[async_trait]
impl LikersReader for DynamoStore {
    /// The stored edges of these (post, user) pairs, in order: `BatchGetItem`s of up to 100
    /// distinct keys side by side, each one's unprocessed keys sent again.
    async fn edges(
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

    /// A page of a post's likers, by `Query` of its partition of the edges table from after
    /// `after`.
    async fn likers(
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
                .table_name(self.table("edges"))
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", s(post))
                .consistent_read(true)
                .limit(limit as i32)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Query", "edges", e))?;
            let edges = resp
                .items()
                .iter()
                .map(EdgeItem::of)
                .collect::<PortResult<Vec<_>>>()?;
            page.read_units += summary::read_units(edges.iter().map(EdgeItem::size));
            for e in edges {
                if page.users.len() < limit && e.state.liked {
                    page.users.push(e.user);
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

    async fn recent_likers(
        &self,
        post_id: &str,
        after: Option<&RecentCursor>,
        limit: usize,
    ) -> PortResult<RecentPage> {
        self.recent_page(post_id, after, limit).await
    }

    async fn scan_edges(&self, after: Option<&ScanCursor>, limit: usize) -> PortResult<EdgeScan> {
        self.edge_scan_page(after, limit).await
    }
}

/// An item of the edges table, checked to be an edge as tally writes it (`E#<user>`, read by
/// [`tally_core::rows::edge_state`]): one that is not is an error naming it.
pub(super) struct EdgeItem {
    /// The post (`pk`).
    pub(super) post: String,
    /// The user (`sk` without its `E#`).
    pub(super) user: String,
    /// Its attributes as stored: what its size, and so its read, is.
    attrs: Attrs,
    /// The edge.
    pub(super) state: EdgeState,
}

impl EdgeItem {
    /// The edge an item of the edges table is.
    pub(super) fn of(item: &HashMap<String, AttributeValue>) -> PortResult<EdgeItem> {
        let (post, sk) = (
            get_s(item, "pk").unwrap_or_default(),
            get_s(item, "sk").unwrap_or_default(),
        );
        let Some(user) = sk.strip_prefix(edge::EDGE_PREFIX) else {
            return Err(PortError::Corrupt {
                item: format!("{post}/{sk}"),
                detail: format!(
                    "its sort key is not an edge's (`{}<user>`)",
                    edge::EDGE_PREFIX
                ),
            });
        };
        let attrs = to_attrs(item)?;
        let state = tally_core::rows::edge_state(&attrs, &post, user)?;
        Ok(EdgeItem {
            user: user.to_owned(),
            post,
            attrs,
            state,
        })
    }

    /// DynamoDB's size of the item: what reading it is charged.
    pub(super) fn size(&self) -> usize {
        summary::item_size(&self.post, &edge::edge_sk(&self.user), &self.attrs)
    }
}
