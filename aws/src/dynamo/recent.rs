//! Likers most recent first on DynamoDB: the counts table's recent index (`edge::RECENT_INDEX`,
//! a global secondary index of liked edges by post and like time, keys only), read eventually
//! consistently and checked against the edges themselves.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use tally_core::edge;
use tally_core::ports::{
    Consistency, PortError, PortResult, RecentCursor, RecentLiker, RecentPage,
};

use super::{get_s, n, s, DynamoStore};

impl DynamoStore {
    /// A page of a post's likers most recent first: `Query`s of the counts table's recent index
    /// (a global secondary index, read eventually consistently), each one's likers' edges then
    /// read strongly and kept only while they hold that like (an entry the index still holds
    /// for a like since undone or made again later is passed over).
    pub(super) async fn recent_page(
        &self,
        post: &str,
        after: Option<&RecentCursor>,
        limit: usize,
    ) -> PortResult<RecentPage> {
        let limit = limit.clamp(1, tally_core::ports::MAX_LIKERS_PER_PAGE);
        let mut page = RecentPage::default();
        let mut start = after.map(|a| recent_key(post, &a.user, a.at_ms));
        loop {
            let resp = self
                .client
                .query()
                .table_name(self.table("counts"))
                .index_name(edge::RECENT_INDEX)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", s(post))
                .scan_index_forward(false)
                .limit((limit - page.likers.len()) as i32)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.recent_err(self.err("Query", "counts", e)))?;
            let entries = resp
                .items()
                .iter()
                .map(|i| recent_entry(post, i))
                .collect::<PortResult<Vec<(String, i64)>>>()?;
            page.read_units +=
                edge::recent_index_units(entries.iter().map(|(u, t)| (post, u.as_str(), *t)));
            if !entries.is_empty() {
                let pairs: Vec<(String, String)> = entries
                    .iter()
                    .map(|(u, _)| (post.to_owned(), u.clone()))
                    .collect();
                let (states, units) = self.edge_states(&pairs, Consistency::Strong).await?;
                page.read_units += units;
                for ((user, at_ms), st) in entries.iter().zip(states) {
                    if st.is_some_and(|s| s.liked && s.at_ms == *at_ms) {
                        page.likers.push(RecentLiker {
                            user: user.clone(),
                            at_ms: *at_ms,
                        });
                    }
                }
            }
            let more = resp.last_evaluated_key().is_some_and(|k| !k.is_empty());
            match entries.last() {
                Some((user, at_ms)) if more && page.likers.len() < limit => {
                    start = Some(recent_key(post, user, *at_ms));
                }
                Some((user, at_ms)) if more => {
                    page.next = Some(RecentCursor {
                        at_ms: *at_ms,
                        user: user.clone(),
                    });
                    return Ok(page);
                }
                _ => return Ok(page),
            }
        }
    }

    /// A Query of the recent index refused: a table without it is named with what creates it.
    fn recent_err(&self, e: PortError) -> PortError {
        if !e.to_string().contains("specified index") {
            return e;
        }
        PortError::NotFound {
            what: format!(
                "the index `{}` of table {}",
                edge::RECENT_INDEX,
                self.table("counts")
            ),
            hint: ": likers most recent first read it. Set `recent_likers_index = true` and \
                   run `tally setup`, or set Terraform's `recent_likers_index = true` (a \
                   write unit more per like: BENCHMARKS)"
                .into(),
        }
    }
}

/// The key a Query of the recent index starts after: the table's keys and the like's time.
fn recent_key(post: &str, user: &str, at_ms: i64) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), s(post)),
        ("sk".to_owned(), s(edge::edge_sk(user))),
        (edge::LIKED_AT_ATTR.to_owned(), n(at_ms)),
    ])
}

/// An entry of the recent index: its user and like time, or an error naming the item.
fn recent_entry(post: &str, i: &HashMap<String, AttributeValue>) -> PortResult<(String, i64)> {
    let sk = get_s(i, "sk").unwrap_or_default();
    let user = sk.strip_prefix(edge::EDGE_PREFIX);
    let at = i
        .get(edge::LIKED_AT_ATTR)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok());
    match (user, at) {
        (Some(u), Some(t)) => Ok((u.to_owned(), t)),
        _ => Err(PortError::Corrupt {
            item: format!("{post}/{sk}"),
            detail: format!(
                "its entry in the index `{}` is not an edge's like time",
                edge::RECENT_INDEX
            ),
        }),
    }
}
