//! What a store says of how it was counted, as items beside its counts (`#meta`): the items
//! moved, for the claims on them (`tally_core::meta::Claims`: its count mode, the one stream it
//! counts, a rebuild into it under way).

use async_trait::async_trait;
use tally_core::edge::{self, MetaItem};
use tally_core::ports::{PortResult, StoreMeta};
use tally_core::rows::{self, Row};
use tally_core::summary::{Attrs, Val, GLOBAL_PK};

use super::items::{get_item, has_items, put_item, put_new_item};
use crate::{sql_err, Embedded};

#[async_trait]
impl StoreMeta for Embedded {
    async fn meta_item(&self, it: MetaItem) -> PortResult<Option<Row>> {
        let item = move |c: &mut rusqlite::Connection| get_item(c, edge::MODE_PK, it.sk());
        Ok(self.run(item).await?.map(|a| rows::attrs_row(&a)))
    }

    async fn put_meta_item(&self, it: MetaItem, value: &str, if_absent: bool) -> PortResult<bool> {
        let a = Attrs::from([(it.field().to_owned(), Val::S(value.to_owned()))]);
        self.run(move |c| match if_absent {
            true => put_new_item(c, edge::MODE_PK, it.sk(), &a),
            false => put_item(c, edge::MODE_PK, it.sk(), &a).map(|()| true),
        })
        .await
    }

    async fn delete_rebuilding(&self) -> PortResult<()> {
        self.run(move |c| {
            c.execute(
                "DELETE FROM items WHERE pk = ?1 AND sk = ?2",
                [edge::MODE_PK, MetaItem::Rebuilding.sk()],
            )
            .map(drop)
            .map_err(sql_err)
        })
        .await
    }

    async fn has_counted(&self) -> PortResult<bool> {
        self.run(|c| has_items(c, GLOBAL_PK)).await
    }

    fn store_name(&self) -> String {
        self.path().display().to_string()
    }

    async fn replica_regions(&self) -> PortResult<Vec<String>> {
        // One file on one machine.
        Ok(Vec::new())
    }
}
