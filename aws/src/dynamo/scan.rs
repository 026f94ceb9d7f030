//! Every stored edge, page by page: a `Scan` of the edges table, which holds edges alone (what a
//! rebuild of the counts from the edges reads; its read units are every item read).

use std::collections::HashMap;

use tally_core::ports::{EdgeScan, PortResult, ScanCursor};

use super::likers::EdgeItem;
use super::{get_s, s, DynamoStore};

impl DynamoStore {
    /// One `Scan` page of the edges table from after `after`, at most `limit` items read: its
    /// edges, and where the next page starts.
    pub(super) async fn edge_scan_page(
        &self,
        after: Option<&ScanCursor>,
        limit: usize,
    ) -> PortResult<EdgeScan> {
        let start = after
            .map(|c| HashMap::from([("pk".to_owned(), s(&c.pk)), ("sk".to_owned(), s(&c.sk))]));
        let resp = self
            .client
            .scan()
            .table_name(self.table("edges"))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .limit(limit.clamp(1, i32::MAX as usize) as i32)
            .send()
            .await
            .map_err(|e| self.err("Scan", "edges", e))?;
        let items = resp
            .items()
            .iter()
            .map(EdgeItem::of)
            .collect::<PortResult<Vec<_>>>()?;
        let mut page = EdgeScan {
            read_units: tally_core::cost::read_units(items.iter().map(EdgeItem::size).sum()),
            ..EdgeScan::default()
        };
        page.edges = items
            .into_iter()
            .map(|e| (e.post, e.user, e.state))
            .collect();
        page.next = resp
            .last_evaluated_key()
            .filter(|k| !k.is_empty())
            .and_then(|k| {
                Some(ScanCursor {
                    pk: get_s(k, "pk")?,
                    sk: get_s(k, "sk")?,
                })
            });
        Ok(page)
    }
}
