//! [`AnalyticsStore`]: a snapshot and its checkpoint in one transaction.

use async_trait::async_trait;
use rusqlite::params;
use tally_core::ports::{
    AnalyticsReader, AnalyticsSnapshot, AnalyticsStore, Fence, PortResult, TrendingEntry,
};

use super::check_fence;
use crate::{sql_err, Embedded};

#[async_trait]
impl AnalyticsReader for Embedded {
    async fn trending_sketches(
        &self,
        app: &str,
    ) -> PortResult<Vec<(String, Vec<TrendingEntry>, i64)>> {
        let app = app.to_owned();
        self.run(move |c| {
            const COLUMNS: &str = "shard_id, entries, at_ms";
            let mut st = c
                .prepare_cached(&format!("SELECT {COLUMNS} FROM trending WHERE app = ?1"))
                .map_err(sql_err)?;
            let rows = st
                .query_map([&app], |r| super::row_of(r, COLUMNS))
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            rows.iter()
                .map(|row| {
                    let shard = match row.get("shard_id") {
                        Some(tally_core::rows::Field::S(s)) => s.clone(),
                        _ => String::new(),
                    };
                    let item = format!("trending {app}/{shard}");
                    let (entries, at) = tally_core::rows::trending_row(row, &item)?;
                    Ok((shard, entries, at))
                })
                .collect()
        })
        .await
    }

    async fn latency_snapshots(&self, app: &str, since_ms: i64) -> PortResult<Vec<(i64, Vec<u8>)>> {
        let app = app.to_owned();
        self.run(move |c| {
            let mut st = c
                .prepare_cached(
                    "SELECT taken_at_ms, latency FROM analytics_snapshots WHERE app = ?1 AND taken_at_ms >= ?2 ORDER BY taken_at_ms",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![app, since_ms], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(sql_err)?
                .collect::<Result<Vec<(i64, Vec<u8>)>, _>>()
                .map_err(sql_err)?;
            Ok(rows)
        })
        .await
    }
}

#[async_trait]
impl AnalyticsStore for Embedded {
    async fn save_snapshot(&self, fence: &Fence, snapshot: &AnalyticsSnapshot) -> PortResult<()> {
        let (fence, s) = (fence.clone(), snapshot.clone());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            check_fence(&tx, &fence)?;
            tx.execute(
                "INSERT OR REPLACE INTO analytics_snapshots (app, shard_id, end_seq, taken_at_ms, latency) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![fence.app, fence.shard_id, s.end.to_string(), s.taken_at_ms, s.latency],
            )
            .map_err(sql_err)?;
            // The window's sketches: the trending one and the all-time one.
            for (app, entries) in [(fence.app.clone(), &s.trending), (tally_core::ports::all_time(&fence.app), &s.top_liked)] {
                tx.execute(
                    "INSERT OR REPLACE INTO trending (app, shard_id, at_ms, entries) VALUES (?1, ?2, ?3, ?4)",
                    params![app, fence.shard_id, s.trending_at_ms, TrendingEntry::encode_all(entries)],
                )
                .map_err(sql_err)?;
            }
            if !s.dedup.ids.is_empty() {
                tx.execute(
                    "INSERT OR REPLACE INTO dedup (app, shard_id, end_seq, max_arrival, expires_ms, ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![fence.app, fence.shard_id, s.end.to_string(), s.dedup.max_arrival, s.dedup.max_arrival.saturating_add(s.horizon_ms), s.dedup.encode_ids()],
                )
                .map_err(sql_err)?;
            }
            tx.execute(
                "UPDATE leases SET checkpoint = ?1, max_arrival = ?2, finished = ?3 WHERE app = ?4 AND shard_id = ?5",
                params![s.end.to_string(), s.max_arrival, s.shard_finished as i64, fence.app, fence.shard_id],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trending row whose entries are not what the store writes is an error naming the row,
    /// not an empty sketch (trending would silently lose the shard's posts).
    #[tokio::test]
    async fn a_corrupt_trending_row_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Embedded::open(dir.path(), 1).unwrap();
        store
            .with(|c| {
                c.execute(
                    "INSERT INTO trending (app, shard_id, at_ms, entries) VALUES ('analytics', 's0', 1, 'not json')",
                    [],
                )
                .map_err(sql_err)
            })
            .unwrap();
        let err = store.trending_sketches("analytics").await.unwrap_err();
        assert!(
            matches!(err, tally_core::ports::PortError::Corrupt { .. })
                && err.to_string().contains("trending analytics/s0")
                && err.to_string().contains("`entries`"),
            "{err}"
        );
    }
}
