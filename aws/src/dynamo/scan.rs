//! Every stored edge, page by page: a `Scan` of the counts table filtered to edge items (what a
//! rebuild of the counts from the edges reads; its read units are every item passed over).

use std::collections::HashMap;

use tally_core::edge;
use tally_core::ports::{EdgeScan, PortResult, ScanCursor};
use tally_core::summary;

use super::counter::to_attrs;
use super::{get_s, s, DynamoStore};

impl DynamoStore {
    /// One `Scan` page of the counts table from after `after`, at most `limit` items read: its
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
            .table_name(self.table("counts"))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .limit(limit.clamp(1, i32::MAX as usize) as i32)
            .send()
            .await
            .map_err(|e| self.err("Scan", "counts", e))?;
        let mut page = EdgeScan::default();
        let mut bytes = 0;
        for i in resp.items() {
            let (pk, sk) = (
                get_s(i, "pk").unwrap_or_default(),
                get_s(i, "sk").unwrap_or_default(),
            );
            let a = to_attrs(i)?;
            bytes += summary::item_size(&pk, &sk, &a);
            if let Some(user) = sk.strip_prefix(edge::EDGE_PREFIX) {
                let st = tally_core::rows::edge_state(&a, &pk, user)?;
                page.edges.push((pk.clone(), user.to_owned(), st));
            }
        }
        page.read_units = tally_core::cost::read_units(bytes);
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
