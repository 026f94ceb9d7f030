//! What a store says of itself, read and claimed once for both stores over the `#meta` items
//! each moves ([`StoreMeta`]): the mode it counts, the one stream it counts, a rebuild into it
//! under way.

use async_trait::async_trait;

use crate::edge::{CountMode, MetaItem, MODE_PK};
use crate::ports::{PortResult, StoreMeta};
use crate::rows::{self, Row};

/// The claims on a store's `#meta` items: every [`StoreMeta`] has them.
#[async_trait]
pub trait Claims: StoreMeta {
    /// What the store counts. With `claim`, a store that says nothing yet is set to it (one
    /// conditional write; a store that has global totals and no mode was made by an earlier
    /// build of tally, and is refused, saying so); answers what it holds after (`None`: unset,
    /// when not claimed).
    async fn count_mode(&self, claim: Option<CountMode>) -> PortResult<Option<CountMode>> {
        let read = |row: Row| rows::count_mode(&row, &item(self, MetaItem::Mode));
        if let Some(row) = self.meta_item(MetaItem::Mode).await? {
            return read(row).map(Some);
        }
        if self.has_counted().await? {
            // Claimed and counted since the read? The mode is written before any total and
            // never deleted, so a store with totals and still no mode never claimed one.
            return match self.meta_item(MetaItem::Mode).await? {
                Some(row) => read(row).map(Some),
                None => Err(rows::counted_without_mode(&self.store_name())),
            };
        }
        let Some(m) = claim else { return Ok(None) };
        if self.put_meta_item(MetaItem::Mode, m.as_str(), true).await? {
            return Ok(Some(m));
        }
        // Another process claimed it first: its claim stands.
        self.meta_item(MetaItem::Mode).await?.map(read).transpose()
    }

    /// The one stream the store is counted from ([`MetaItem::Stream`]). With `claim`, a store that
    /// names none yet is set to it (one conditional write; the first claim wins); answers what
    /// it holds after (`None`: unset, when not claimed).
    async fn counted_stream(&self, claim: Option<&str>) -> PortResult<Option<String>> {
        let read = |row: Row| rows::meta_value(&row, &item(self, MetaItem::Stream));
        if let Some(row) = self.meta_item(MetaItem::Stream).await? {
            return read(row).map(Some);
        }
        let Some(want) = claim else { return Ok(None) };
        if self.put_meta_item(MetaItem::Stream, want, true).await? {
            return Ok(Some(want.to_owned()));
        }
        // Another process claimed it first: its claim stands.
        self.meta_item(MetaItem::Stream)
            .await?
            .map(read)
            .transpose()
    }

    /// The source a `tally rebuild` into this store copies from, while one has begun and not
    /// finished ([`MetaItem::Rebuilding`]); `None`: no rebuild under way.
    async fn rebuilding(&self) -> PortResult<Option<String>> {
        let row = self.meta_item(MetaItem::Rebuilding).await?;
        row.map(|r| rows::meta_value(&r, &item(self, MetaItem::Rebuilding)))
            .transpose()
    }

    /// Records that a rebuild from `source` has begun (`Some`; a rerun writes the same again),
    /// or that it finished (`None`).
    async fn set_rebuilding(&self, source: Option<&str>) -> PortResult<()> {
        match source {
            Some(v) => self
                .put_meta_item(MetaItem::Rebuilding, v, false)
                .await
                .map(drop),
            None => self.delete_rebuilding().await,
        }
    }
}

impl<S: StoreMeta + ?Sized> Claims for S {}

/// The `#meta` item `it` of `store`, as errors name it.
fn item<S: StoreMeta + ?Sized>(store: &S, it: MetaItem) -> String {
    format!("{} {MODE_PK}/{}", store.store_name(), it.sk())
}
