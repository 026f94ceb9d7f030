//! [`BaselineWriters`]: the patterns tally is measured against, in tables of their own.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use tally_baselines::BaselineWriters;
use tally_core::ports::PortResult;

use crate::{sql_err, Embedded};

#[async_trait]
impl BaselineWriters for Embedded {
    async fn update_per_like(&self, run: &str, post_id: &str, delta: i64) -> PortResult<()> {
        let (run, post) = (run.to_owned(), post_id.to_owned());
        self.run(move |c| {
            c.prepare_cached("INSERT INTO baseline_counts (run, post_id, n) VALUES (?1, ?2, ?3) ON CONFLICT (run, post_id) DO UPDATE SET n = n + excluded.n")
                .map_err(sql_err)?
                .execute(params![run, post, delta])
                .map(|_| ())
                .map_err(sql_err)
        })
        .await
    }

    async fn transaction_per_like(
        &self,
        run: &str,
        event_id: &str,
        post_id: &str,
        delta: i64,
    ) -> PortResult<bool> {
        let (run, id, post) = (run.to_owned(), event_id.to_owned(), post_id.to_owned());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let fresh = tx
                .prepare_cached("INSERT OR IGNORE INTO baseline_ids (run, event_id) VALUES (?1, ?2)")
                .map_err(sql_err)?
                .execute(params![run, id])
                .map_err(sql_err)?
                == 1;
            if fresh {
                tx.prepare_cached("INSERT INTO baseline_counts (run, post_id, n) VALUES (?1, ?2, ?3) ON CONFLICT (run, post_id) DO UPDATE SET n = n + excluded.n")
                    .map_err(sql_err)?
                    .execute(params![run, post, delta])
                    .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)?;
            Ok(fresh)
        })
        .await
    }

    async fn edge_per_like(
        &self,
        run: &str,
        post_id: &str,
        user_id: &str,
        like: bool,
    ) -> PortResult<bool> {
        // The edge is a row of `baseline_ids`, keyed apart from every event id.
        let (run, post, edge) = (
            run.to_owned(),
            post_id.to_owned(),
            format!("E#{post_id}#{user_id}"),
        );
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let sql = if like {
                "INSERT OR IGNORE INTO baseline_ids (run, event_id) VALUES (?1, ?2)"
            } else {
                "DELETE FROM baseline_ids WHERE run = ?1 AND event_id = ?2"
            };
            let changed = tx.prepare_cached(sql).map_err(sql_err)?.execute(params![run, edge]).map_err(sql_err)? == 1;
            if changed {
                tx.prepare_cached("INSERT INTO baseline_counts (run, post_id, n) VALUES (?1, ?2, ?3) ON CONFLICT (run, post_id) DO UPDATE SET n = n + excluded.n")
                    .map_err(sql_err)?
                    .execute(params![run, post, if like { 1 } else { -1 }])
                    .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)?;
            Ok(changed)
        })
        .await
    }

    async fn baseline_count(&self, run: &str, post_id: &str) -> PortResult<i64> {
        let (run, post) = (run.to_owned(), post_id.to_owned());
        self.run(move |c| {
            c.query_row(
                "SELECT n FROM baseline_counts WHERE run = ?1 AND post_id = ?2",
                params![run, post],
                |r| r.get(0),
            )
            .optional()
            .map(|n| n.unwrap_or(0))
            .map_err(sql_err)
        })
        .await
    }
}
