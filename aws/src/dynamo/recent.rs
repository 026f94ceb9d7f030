//! Likers most recent first on DynamoDB: the edges table's recent index (`edge::RECENT_INDEX`,
//! a global secondary index of liked edges by post and like time, keys only), read eventually
//! consistently and checked against the edges themselves.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, IndexStatus};
use tally_core::edge;
use tally_core::ports::{
    Consistency, LikersReader, PortError, PortResult, RecentCursor, RecentLiker, RecentPage,
};

use super::{get_s, n, s, DynamoStore};

impl DynamoStore {
    /// A page of a post's likers most recent first: `Query`s of the edges table's recent index
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
                .table_name(self.table("edges"))
                .index_name(edge::RECENT_INDEX)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", s(post))
                .scan_index_forward(false)
                .limit((limit - page.likers.len()) as i32)
                .set_exclusive_start_key(start.take())
                .send()
                .await;
            let resp = match resp {
                Ok(r) => r,
                Err(e) => return Err(self.recent_err(self.err("Query", "edges", e)).await),
            };
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
                let (states, units) = self.edges(&pairs, Consistency::Strong).await?;
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

    /// A Query of the recent index refused as invalid: the table's description (not the
    /// refusal's wording) says why ([`refusal`]); any other error stands as it was.
    async fn recent_err(&self, e: PortError) -> PortError {
        if !matches!(e, PortError::Invalid(_)) {
            return e;
        }
        let status = self.recent_index_status().await;
        refusal(&self.target, &self.table("edges"), e, status)
    }

    /// The recent index's status by `DescribeTable` of the edges table; `None`: it has none.
    async fn recent_index_status(&self) -> PortResult<Option<IndexStatus>> {
        let d = self
            .client
            .describe_table()
            .table_name(self.table("edges"))
            .send()
            .await
            .map_err(|e| self.err("DescribeTable", "edges", e))?;
        Ok(d.table().and_then(|t| {
            t.global_secondary_indexes()
                .iter()
                .find(|i| i.index_name() == Some(edge::RECENT_INDEX))
                .map(|i| i.index_status().cloned().unwrap_or(IndexStatus::Active))
        }))
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

/// Why a Query of the recent index of `table` was refused (`e`), by the index's status as the
/// table describes it: no such index — named with what creates it; one still being built — a
/// passing reason, asked again later; else (active, or the table could not be described) the
/// refusal as it was.
fn refusal(
    target: &crate::errors::Target,
    table: &str,
    e: PortError,
    status: PortResult<Option<IndexStatus>>,
) -> PortError {
    let index = format!("the index `{}` of table {table}", edge::RECENT_INDEX);
    match status {
        Ok(None) => PortError::NotFound {
            what: index,
            hint: ": likers most recent first read it. Set `recent_likers_index = true` and run \
                   `tally setup`, or set Terraform's `recent_likers_index = true` (a write unit \
                   more per like: BENCHMARKS)"
                .into(),
        },
        Ok(Some(status)) if status != IndexStatus::Active => PortError::Unavailable {
            endpoint: target.endpoint_of("Query"),
            detail: format!(
                "{index} is {} (DynamoDB fills a new index from the items already stored); ask \
                 again once it is ACTIVE ({e})",
                status.as_str()
            ),
        },
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_query_of_the_recent_index_is_explained_by_the_index_s_status() {
        let target = crate::errors::Target {
            service: "DynamoDB",
            endpoint: "http://127.0.0.1:8000".into(),
        };
        let refused =
            || PortError::Invalid("Query on table t-edges: ValidationException: x".into());
        let missing = refusal(&target, "t-edges", refused(), Ok(None));
        assert!(matches!(missing, PortError::NotFound { .. }), "{missing}");
        let text = missing.to_string();
        assert!(
            text.contains("index `recent` of table t-edges") && text.contains("tally setup"),
            "{text}"
        );
        let building = refusal(
            &target,
            "t-edges",
            refused(),
            Ok(Some(IndexStatus::Creating)),
        );
        assert!(building.is_retryable(), "{building}");
        assert!(building.to_string().contains("is CREATING"), "{building}");
        for status in [
            Ok(Some(IndexStatus::Active)),
            Err(PortError::Timeout("d".into())),
        ] {
            let stands = refusal(&target, "t-edges", refused(), status);
            assert_eq!(stands.to_string(), refused().to_string());
        }
    }
}
