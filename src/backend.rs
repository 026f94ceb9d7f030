//! The one place that names the adapters: it wires them behind the ports, and provisions what
//! they run on (`setup`, `teardown`, `reshard`, the embedded stream's `trim`). No other module of
//! the binary names `tally_aws` or `tally_embedded` (`tests/e2e/structure.rs` holds it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
/// An application's own table, read by `tally backfill`.
pub use tally_aws::source::SourceTable;

use anyhow::{bail, Context, Result};
use tally_baselines::BaselineWriters;
use tally_core::ports::{
    AnalyticsStore, Counted, CounterStore, LeaseReader, LeaseStore, PortError, Readers,
    StoreReader, Stream,
};

use crate::settings::{BackendKind, ReadMode, Settings};
use tally_serve::homed::HomedCounts;

/// The ports, wired to one backend.
#[derive(Clone)]
pub struct Backend {
    pub stream: Arc<dyn Stream>,
    pub counter: Arc<dyn CounterStore>,
    pub analytics: Arc<dyn AnalyticsStore>,
    pub leases: Arc<dyn LeaseStore>,
    /// The patterns tally is measured against (`demo --baselines`).
    pub baselines: Arc<dyn BaselineWriters>,
    /// The Kinesis stream itself, on AWS (enhanced fan-out registers consumers on it).
    kinesis: Option<tally_aws::KinesisStream>,
    /// What the store records it is counted from: `kinesis:<region>:<name>` on AWS,
    /// `embedded:<name>` on the embedded store.
    pub stream_identity: String,
}

impl Backend {
    /// Opens the configured backend; an embedded store is created if missing.
    pub async fn open(s: &Settings) -> Result<Backend> {
        match s.backend {
            BackendKind::Embedded => {
                let e =
                    tally_embedded::Embedded::open(&s.data_dir, s.shards).with_context(|| {
                        format!("opening the embedded store in {}", s.data_dir.display())
                    })?;
                if s.recent_likers_index {
                    e.add_recent_index()?;
                }
                Ok(Backend::embedded(e, s))
            }
            BackendKind::Aws => Backend::aws(s).await,
        }
    }

    /// Opens the configured backend to read it: nothing is created (a missing embedded store is
    /// an error naming its path), and a read-only store can be read.
    pub async fn open_existing(s: &Settings) -> Result<Backend> {
        match s.backend {
            BackendKind::Embedded => Ok(Backend::embedded(
                tally_embedded::Embedded::open_existing(&s.data_dir)?,
                s,
            )),
            BackendKind::Aws => Backend::aws(s).await,
        }
    }

    /// A handle on the same backend with connections of its own: on the embedded store another
    /// SQLite connection, so that a producer, a counter and analytics in one process read and
    /// write side by side as separate processes do (one connection runs one statement at a
    /// time); on AWS the same clients, which pool their connections already.
    pub async fn another(&self, s: &Settings) -> Result<Backend> {
        match s.backend {
            BackendKind::Embedded => Backend::open_existing(s).await,
            BackendKind::Aws => Ok(self.clone()),
        }
    }

    fn embedded(e: tally_embedded::Embedded, s: &Settings) -> Backend {
        Backend {
            stream_identity: format!("embedded:{}", s.stream),
            stream: Arc::new(e.clone()),
            counter: Arc::new(e.clone()),
            analytics: Arc::new(e.clone()),
            leases: Arc::new(e.clone()),
            baselines: Arc::new(e),
            kinesis: None,
        }
    }

    async fn aws(s: &Settings) -> Result<Backend> {
        let aws = tally_aws::Aws::connect(&aws_settings(s)).await?;
        Ok(Backend {
            stream_identity: aws.stream.identity(),
            stream: Arc::new(aws.stream.clone()),
            counter: Arc::new(aws.tables.clone()),
            analytics: Arc::new(aws.tables.clone()),
            leases: Arc::new(aws.tables.clone()),
            baselines: Arc::new(aws.tables),
            kinesis: Some(aws.stream),
        })
    }

    /// The read side's ports, with what the store counts resolved once: what it says it
    /// counts, else what `counter.count` sets (the mode its first counter will claim).
    pub async fn readers(&self, s: &Settings) -> Result<Readers> {
        let counted = Counted::of(self.counted_mode(s).await?, self.counter.clone());
        Ok(Readers {
            counts: self.counter.clone(),
            counted,
            letters: self.counter.clone(),
            leases: self.leases.clone(),
            analytics: self.analytics.clone(),
            homes: BTreeMap::new(),
        })
    }

    /// What the store counts: what it says, else what the settings set (the mode its first
    /// counter will claim). The read side and `tally verify` both take it from here.
    pub async fn counted_mode(&self, s: &Settings) -> Result<tally_core::edge::CountMode> {
        Ok(self
            .counter
            .stored_mode()
            .await
            .context("reading what the store counts")?
            .unwrap_or(s.counter.count))
    }

    /// The read side's ports across regions (docs/REGIONS.md, "Reads everywhere"): each post
    /// read from its home — this store, or the home's store as `[regions.peers]` names it —
    /// with each other home's lease rows for its freshness. One region: [`Backend::readers`].
    pub async fn readers_across_regions(&self, s: &Settings) -> Result<Readers> {
        let mut readers = self.readers(s).await?;
        let Some(homes) = s.regions.homes()? else {
            return Ok(readers);
        };
        let mut counts: BTreeMap<String, Arc<dyn StoreReader>> = BTreeMap::new();
        for (region, peer) in &s.regions.peers {
            let (c, l): (Arc<dyn StoreReader>, Arc<dyn LeaseReader>) = match s.backend {
                BackendKind::Embedded if !peer.data_dir.as_os_str().is_empty() => {
                    let e = tally_embedded::Embedded::open_existing(&peer.data_dir)
                        .with_context(|| format!("opening region {region}'s store"))?;
                    (Arc::new(e.clone()), Arc::new(e))
                }
                BackendKind::Aws if !peer.table_prefix.is_empty() => {
                    let mut a = aws_settings(s);
                    a.table_prefix = peer.table_prefix.clone();
                    let t = tally_aws::peer_tables(&a).await.with_context(|| {
                        format!("region {region}'s tables (`regions.peers.{region}.table_prefix`)")
                    })?;
                    (Arc::new(t.clone()), Arc::new(t))
                }
                _ => continue,
            };
            counts.insert(region.clone(), c);
            readers.homes.insert(region.clone(), l);
        }
        let homed = Arc::new(
            HomedCounts::new(homes, self.counter.clone(), counts)
                .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?,
        );
        readers.counted = Counted::of(readers.counted.mode(), homed.clone());
        readers.counts = homed;
        Ok(readers)
    }

    /// The stream as `app` reads it: polled, or through its enhanced fan-out consumer when
    /// `read_mode = "efo"` on Kinesis. When the account or the stream refuses fan-out (no
    /// permission, the consumer limit reached, a peer without it), the app reads by polling and
    /// says so in one log line; an endpoint that does not answer is an error as for any call.
    pub async fn stream_for(&self, s: &Settings, app: &str) -> Result<Arc<dyn Stream>> {
        if s.read_mode(app) == ReadMode::Polling {
            return Ok(self.stream.clone());
        }
        let Some(kinesis) = &self.kinesis else {
            tracing::info!(
                app,
                "read_mode = \"efo\" is for Kinesis; the embedded stream is read directly"
            );
            return Ok(self.stream.clone());
        };
        let name = consumer_name(s, app);
        let wait = s.lease.idle_poll;
        match tally_aws::fan_out::FanOut::register(kinesis, &name, wait).await {
            Ok(f) => Ok(Arc::new(f)),
            Err(e @ (PortError::Unavailable { .. } | PortError::Timeout(_))) => {
                Err(anyhow::Error::new(e).context(format!("registering consumer {name}")))
            }
            Err(e) => {
                tracing::warn!(
                    app,
                    consumer = %name,
                    "enhanced fan-out is not available ({e}); reading stream {} by polling GetRecords instead",
                    s.stream
                );
                Ok(self.stream.clone())
            }
        }
    }
}

/// The AWS adapter's settings from ours.
pub(crate) fn aws_settings(s: &Settings) -> tally_aws::AwsSettings {
    let opt = |u: &str| (!u.is_empty()).then(|| u.to_owned());
    tally_aws::AwsSettings {
        stream: s.stream.clone(),
        table_prefix: s.table_prefix.clone(),
        kinesis_endpoint_url: opt(&s.kinesis_endpoint_url),
        dynamodb_endpoint_url: opt(&s.dynamodb_endpoint_url),
        stream_retention_hours: s.stream_retention_hours,
        recent_likers_index: s.recent_likers_index,
    }
}

/// The enhanced fan-out consumer of `app`: one per deployment (table prefix) and application,
/// the name Terraform registers too.
pub fn consumer_name(s: &Settings, app: &str) -> String {
    tally_aws::fan_out::consumer_name(&s.table_prefix, app)
}

/// The embedded store's file under the data dir.
pub fn store_file(s: &Settings) -> PathBuf {
    s.data_dir.join(tally_embedded::DB_FILE)
}

/// Whether the embedded store exists and holds data (`false` when there is none).
pub fn holds_data(s: &Settings) -> Result<bool> {
    if !store_file(s).exists() {
        return Ok(false);
    }
    Ok(tally_embedded::Embedded::open_existing(&s.data_dir)?.holds_data()?)
}

/// The stream's open shards, `None` when there is no stream yet.
pub async fn open_shard_count(s: &Settings) -> Result<Option<usize>> {
    Ok(match s.backend {
        BackendKind::Embedded => match tally_embedded::Embedded::open_existing(&s.data_dir) {
            Ok(e) => Some(e.open_shard_count()?),
            Err(PortError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        },
        BackendKind::Aws => tally_aws::setup::open_shard_count(&aws_settings(s)).await?,
    })
}

/// Creates the stream and the tables (or the embedded store) if missing, with `s.shards` shards
/// for a new stream, and waits until they are active; what is ready, in words.
pub async fn create(s: &Settings) -> Result<String> {
    match s.backend {
        BackendKind::Embedded => {
            let e = tally_embedded::Embedded::open(&s.data_dir, s.shards)?;
            let index = if s.recent_likers_index && e.add_recent_index()? {
                format!(" (index {} added)", tally_core::edge::RECENT_INDEX)
            } else {
                String::new()
            };
            Ok(format!(
                "embedded store ready at {} with {} open shards{index}",
                e.path().display(),
                e.open_shard_count()?
            ))
        }
        BackendKind::Aws => Ok(tally_aws::setup::setup(&aws_settings(s), s.shards).await?),
    }
}

/// Before a rebuild from the store `from` into `into` (created already): on the embedded backend
/// the stream lives in the store's file, so `into` takes `from`'s stream when it has no record
/// yet (or took it before), and its counter reads on from the checkpoints the rebuild writes;
/// one with records of its own is refused. On AWS both read the same Kinesis stream: nothing.
pub fn share_stream(from: &Settings, into: &Settings) -> Result<()> {
    if into.backend == BackendKind::Aws {
        return Ok(());
    }
    let taken = tally_embedded::Embedded::open_existing(&into.data_dir)?
        .take_stream_from(&from.data_dir)?;
    if taken.is_none() {
        // Checkpoints of the source's stream over other records would skip or misread them.
        bail!(
            "the destination is not a fresh table set: its store {} holds records of its own. Rebuild into a new data dir",
            into.data_dir.display()
        );
    }
    Ok(())
}

/// The streams of the other regions (`[regions.peers]`), by region: where the router puts the
/// records of posts homed there.
pub async fn peer_streams(s: &Settings) -> Result<BTreeMap<String, Arc<dyn Stream>>> {
    let mut out: BTreeMap<String, Arc<dyn Stream>> = BTreeMap::new();
    for (region, peer) in &s.regions.peers {
        let stream: Arc<dyn Stream> = match s.backend {
            BackendKind::Embedded => {
                if peer.data_dir.as_os_str().is_empty() {
                    bail!("invalid configuration: `regions.peers.{region}.data_dir` must name region {region}'s store on the embedded backend");
                }
                Arc::new(
                    tally_embedded::Embedded::open_existing(&peer.data_dir)
                        .with_context(|| format!("opening region {region}'s store"))?,
                )
            }
            BackendKind::Aws => {
                let name = if peer.stream.is_empty() {
                    &s.stream
                } else {
                    &peer.stream
                };
                let aws_region = if peer.aws_region.is_empty() {
                    region
                } else {
                    &peer.aws_region
                };
                let endpoint = (!peer.kinesis_endpoint_url.is_empty())
                    .then(|| peer.kinesis_endpoint_url.clone());
                Arc::new(tally_aws::peer_stream(name, aws_region, endpoint).await?)
            }
        };
        out.insert(region.clone(), stream);
    }
    Ok(out)
}

/// Deletes the stream and the tables (or the embedded store's files); what went, in words.
pub async fn delete(s: &Settings) -> Result<String> {
    match s.backend {
        BackendKind::Embedded => {
            let mut deleted = Vec::new();
            // tally.db, and every part of the likers' edges (edges.db, edges-1.db…).
            let mut files: Vec<String> = ["", "-wal", "-shm"]
                .iter()
                .map(|suffix| format!("{}{suffix}", tally_embedded::DB_FILE))
                .collect();
            files.extend(tally_embedded::edge_files_present(&s.data_dir));
            for file in files {
                let f = s.data_dir.join(file);
                match std::fs::remove_file(&f) {
                    Ok(()) => deleted.push(f.display().to_string()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => anyhow::bail!("cannot delete {}: {e}", f.display()),
                }
            }
            Ok(if deleted.is_empty() {
                "nothing to delete".to_owned()
            } else {
                format!("deleted: {}", deleted.join(", "))
            })
        }
        BackendKind::Aws => Ok(tally_aws::setup::teardown(&aws_settings(s)).await?),
    }
}

/// Splits an open shard in two; the children's ids.
pub async fn split_shard(s: &Settings, shard_id: &str) -> Result<Vec<String>> {
    Ok(match s.backend {
        BackendKind::Embedded => {
            let (a, b) =
                tally_embedded::Embedded::open_existing(&s.data_dir)?.split_shard(shard_id)?;
            vec![a, b]
        }
        BackendKind::Aws => tally_aws::setup::split_shard(&aws_settings(s), shard_id).await?,
    })
}

/// Records an application has not applied that arrived before `cutoff` (ms), per app and shard
/// (the embedded stream: what a `trim` to it would take).
pub fn unapplied_before(s: &Settings, cutoff: i64) -> Result<Vec<(String, String, u64)>> {
    Ok(tally_embedded::Embedded::open_existing(&s.data_dir)?
        .unapplied_before(cutoff)?
        .into_iter()
        .map(|u| (u.app, u.shard_id, u.records))
        .collect())
}

/// Drops the embedded stream's records that arrived before `cutoff` (ms); the records and empty
/// closed shards dropped.
pub fn trim(s: &Settings, cutoff: i64) -> Result<(u64, u64)> {
    let (records, shards) = tally_embedded::Embedded::open_existing(&s.data_dir)?.trim(cutoff)?;
    Ok((records as u64, shards as u64))
}
