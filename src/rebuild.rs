//! Rebuilding the counts from the edges (`tally rebuild`): the edges of another table set (a
//! point-in-time restore of the tables, or the tables of a bad day) copied, with the stream's
//! checkpoints, into the configured one, which must be fresh (`tally_counter::rebuild`); its
//! counter then counts them. On the embedded backend the fresh store first takes the source's
//! stream (it lives in the store's file), so that its counter reads on from where the source's
//! stopped. The destination is made with the source's store settings (its recent index).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use tally_core::apps;
use tally_counter::rebuild::Rebuilt;

use crate::backend::{self, Backend};
use crate::settings::{BackendKind, Settings};

/// Where the edges come from: the same backend as the settings, another store of it.
#[derive(Clone, Debug)]
pub enum RebuildSource {
    /// Another embedded store.
    DataDir(PathBuf),
    /// Another set of DynamoDB tables (same endpoint and region).
    TablePrefix(String),
}

/// Copies `source`'s edges and checkpoints into the configured store (created if missing), whose
/// counter then counts them; refuses a destination with counts of its own, or a rebuild of
/// another source under way there.
pub async fn rebuild(settings: &Settings, source: &RebuildSource) -> Result<Rebuilt> {
    let mut from = settings.clone();
    match (source, &settings.backend) {
        (RebuildSource::DataDir(d), BackendKind::Embedded) => from.data_dir = d.clone(),
        (RebuildSource::TablePrefix(p), BackendKind::Aws) => from.table_prefix = p.clone(),
        (RebuildSource::DataDir(_), BackendKind::Aws) => {
            bail!("--from-data-dir names an embedded store; with --backend aws give --from-table-prefix")
        }
        (RebuildSource::TablePrefix(_), BackendKind::Embedded) => {
            bail!("--from-table-prefix names DynamoDB tables; on the embedded backend give --from-data-dir")
        }
    }
    if (from.backend == BackendKind::Embedded && from.data_dir == settings.data_dir)
        || (from.backend == BackendKind::Aws && from.table_prefix == settings.table_prefix)
    {
        bail!("the source is the configured store itself: rebuild into fresh tables (another --data-dir or --table-prefix)");
    }
    let source_store = Backend::open_existing(&from)
        .await
        .context("opening the source of the rebuild")?;
    // The destination is made with the source's store settings: its recent index, if it has one.
    let mut settings = settings.clone();
    settings.recent_likers_index |= has_recent_index(source_store.counter.as_ref()).await?;
    let settings = &settings;
    backend::create(settings).await?;
    backend::share_stream(&from, settings)?;
    let into = Backend::open(settings).await?;
    let name = match source {
        RebuildSource::DataDir(d) => d.display().to_string(),
        RebuildSource::TablePrefix(p) => p.clone(),
    };
    let with = tally_counter::rebuild::RebuildFrom {
        source: &name,
        apps: &[apps::COUNTER, apps::ANALYTICS],
        backoff: &tally_core::retry::Backoff::default(),
        crash_after_pages: settings.counter_context().crash_after_batches,
    };
    Ok(
        tally_counter::rebuild::rebuild(source_store.counter.as_ref(), into.counter.as_ref(), with)
            .await?,
    )
}

/// Whether `store` has the recent index (likers most recent first): asked as a reader asks it,
/// whose answer without the index is `NotFound`.
async fn has_recent_index(store: &dyn tally_core::ports::CounterStore) -> Result<bool> {
    match store.recent_likers("p", None, 1).await {
        Ok(_) => Ok(true),
        Err(tally_core::ports::PortError::NotFound { .. }) => Ok(false),
        Err(e) => Err(e).context("asking the source whether it has the recent likers index"),
    }
}
