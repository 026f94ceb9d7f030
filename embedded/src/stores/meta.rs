//! What a store says of how it was counted, as items beside its counts (`#meta`): the items
//! moved, for the claims on them (`tally_core::meta::Claims`: its count mode, the one stream it
//! counts, a rebuild into it under way).

use async_trait::async_trait;
use rusqlite::params;
use tally_core::edge;
use tally_core::ports::{PortError, PortResult, StoreMeta};
use tally_core::rows::{self, Row};
use tally_core::summary::{Attrs, Val, GLOBAL_PK};

use super::items::{get_item, put_item, query};
use crate::{sql_err, Embedded};

#[async_trait]
impl StoreMeta for Embedded {
    async fn meta_item(&self, sk: &str) -> PortResult<Option<Row>> {
        let sk = sk.to_owned();
        let item = move |c: &mut rusqlite::Connection| get_item(c, edge::MODE_PK, &sk);
        Ok(self.run(item).await?.map(|a| rows::attrs_row(&a)))
    }

    async fn put_meta_item(
        &self,
        sk: &str,
        field: &str,
        value: &str,
        if_absent: bool,
    ) -> PortResult<bool> {
        let a = Attrs::from([(field.to_owned(), Val::S(value.to_owned()))]);
        let sk = sk.to_owned();
        if !if_absent {
            return self
                .run(move |c| put_item(c, edge::MODE_PK, &sk, &a))
                .await
                .map(|()| true);
        }
        let json = serde_json::to_string(&a).map_err(|e| PortError::Other(e.to_string()))?;
        self.run(move |c| {
            c.prepare_cached(
                "INSERT INTO items (pk, sk, attrs) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            )
            .map_err(sql_err)?
            .execute(params![edge::MODE_PK, sk, json])
            .map(|n| n == 1)
            .map_err(sql_err)
        })
        .await
    }

    async fn delete_meta_item(&self, sk: &str) -> PortResult<()> {
        let sk = sk.to_owned();
        self.run(move |c| {
            c.execute(
                "DELETE FROM items WHERE pk = ?1 AND sk = ?2",
                [edge::MODE_PK, &sk],
            )
            .map(drop)
            .map_err(sql_err)
        })
        .await
    }

    async fn has_counted(&self) -> PortResult<bool> {
        self.run(|c| Ok(!query(c, GLOBAL_PK, "", "\u{10ffff}")?.is_empty()))
            .await
    }

    fn store_name(&self) -> String {
        self.path().display().to_string()
    }

    async fn replica_regions(&self) -> PortResult<Vec<String>> {
        // One file on one machine.
        Ok(Vec::new())
    }
}
