//! Why a counter cannot claim its store: a store's counts mean one thing, so the first counter
//! claims the count mode it is configured with and every later one must match it (the claim is
//! `counting::claim`, made by [`crate::Counter::open`], so that no caller of the library can count
//! without it); and a store's counts come from one stream, in one region ([`one_stream`]).

use tally_core::edge::CountMode;
use tally_core::meta::Claims;
use tally_core::ports::PortError;

/// Why a counter cannot count a store.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The store was claimed by another count mode.
    #[error(
        "this store counts {stored}, and `counter.count` is `{wanted}`: a store's counts mean \
         one thing. Set counter.count = \"{stored}\" (or TALLY_COUNTER__COUNT={stored}) to go on \
         counting it, or start a new store (another --data-dir, or another table_prefix) to \
         count {wanted}"
    )]
    Mismatch {
        /// What the store counts.
        stored: CountMode,
        /// What the counter was configured to count.
        wanted: CountMode,
    },
    /// The store is counted from another stream.
    #[error(
        "this store is counted from stream {stored}, and this counter reads {wanted}: one table \
         set takes one stream's counts — two streams' counters (two regions' on shared or global \
         tables) would write per-shard items under shard ids every stream has, and overwrite each \
         other's counts (docs/REGIONS.md). Point this counter at its own table_prefix"
    )]
    OtherStream {
        /// The stream the store is counted from.
        stored: String,
        /// The stream this counter reads.
        wanted: String,
    },
    /// The store's tables are replicated to other regions.
    #[error(
        "the store's tables are replicated to {regions} (a DynamoDB global table): tally's counter \
         does not run on replicated tables — each region's counter would write items keyed by \
         shard ids every stream has, and replication resolves concurrent writes last-writer-wins, \
         so one region's counts overwrite the other's (docs/REGIONS.md). Count each region into \
         tables of its own; with `[regions]` set, each post is counted in its home only, and a \
         home's tables may be replicated to the other regions for their reads"
    )]
    Replicated {
        /// The replicas' regions, comma-separated.
        regions: String,
    },
    /// A rebuild is writing into the store.
    #[error(
        "a `tally rebuild` from {from} into this store has begun and not finished: its counts \
         are not whole yet, and a counter must not write beside it. Run the rebuild again (it \
         resumes where it stopped; RUNBOOK, \"Counts rebuilt from the edges\"), then count"
    )]
    Rebuilding {
        /// What the rebuild copies from.
        from: String,
    },
    /// Reading or writing the claim failed.
    #[error("claiming the store for this counter: {0}")]
    Store(#[from] PortError),
}

/// Claims `store` for `stream` (the first claim wins; a store counted from another stream is
/// refused), and refuses a store whose tables are replicated to other regions — unless `homed`:
/// with `[regions]` each post is counted in its home alone, and its home's tables are replicated
/// to the other regions for reads (docs/REGIONS.md); the claim still refuses another region's
/// counter on them, as it reads another stream.
pub(crate) async fn one_stream(
    store: &dyn tally_core::ports::StoreMeta,
    stream: &str,
    homed: bool,
) -> Result<(), ClaimError> {
    let regions = store.replica_regions().await?;
    if !regions.is_empty() && !homed {
        return Err(ClaimError::Replicated {
            regions: regions.join(", "),
        });
    }
    match store.counted_stream(Some(stream)).await? {
        Some(stored) if stored != stream => Err(ClaimError::OtherStream {
            stored,
            wanted: stream.to_owned(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::edge::MetaItem;
    use tally_core::ports::{PortResult, StoreMeta};

    /// What a store says of itself: its `#meta` items, its tables' replicas.
    struct Meta {
        items: std::sync::Mutex<std::collections::HashMap<&'static str, tally_core::rows::Row>>,
        replicas: Vec<String>,
    }

    #[async_trait::async_trait]
    impl StoreMeta for Meta {
        async fn meta_item(&self, it: MetaItem) -> PortResult<Option<tally_core::rows::Row>> {
            Ok(self.items.lock().unwrap().get(it.sk()).cloned())
        }
        async fn put_meta_item(&self, it: MetaItem, v: &str, if_absent: bool) -> PortResult<bool> {
            let mut items = self.items.lock().unwrap();
            if if_absent && items.contains_key(it.sk()) {
                return Ok(false);
            }
            let row = [(it.field().to_owned(), tally_core::rows::Field::S(v.into()))];
            items.insert(it.sk(), row.into_iter().collect());
            Ok(true)
        }
        async fn delete_rebuilding(&self) -> PortResult<()> {
            self.items.lock().unwrap().remove(MetaItem::Rebuilding.sk());
            Ok(())
        }
        async fn has_counted(&self) -> PortResult<bool> {
            Ok(false)
        }
        fn store_name(&self) -> String {
            "the store".into()
        }
        async fn replica_regions(&self) -> PortResult<Vec<String>> {
            Ok(self.replicas.clone())
        }
    }

    fn meta(replicas: &[&str]) -> Meta {
        Meta {
            items: Default::default(),
            replicas: replicas.iter().map(|r| r.to_string()).collect(),
        }
    }

    /// The decision, apart from any store (the claim itself is held on both adapters by the
    /// conformance suite's `one_stream`): the first claim wins, another stream is refused naming
    /// both, and replicated tables are refused naming the regions — before any claim is made.
    #[tokio::test]
    async fn a_store_of_another_stream_or_of_several_regions_is_refused() {
        let fresh = meta(&[]);
        one_stream(&fresh, "kinesis:us-east-1:likes", false)
            .await
            .unwrap();
        one_stream(&fresh, "kinesis:us-east-1:likes", false)
            .await
            .unwrap();
        let e = one_stream(&fresh, "kinesis:eu-west-1:likes", false)
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, ClaimError::OtherStream { .. })
                && text.contains("kinesis:us-east-1:likes")
                && text.contains("kinesis:eu-west-1:likes"),
            "{text}"
        );
        let global = meta(&["eu-west-1", "ap-south-1"]);
        let e = one_stream(&global, "kinesis:us-east-1:likes", false)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("eu-west-1, ap-south-1"), "{e}");
        assert_eq!(
            global.counted_stream(None).await.unwrap(),
            None,
            "refused before claiming"
        );
        // With each post counted in its home, the home's tables are replicated for reads; the
        // claim still holds the store to one stream.
        one_stream(&global, "kinesis:us-east-1:likes", true)
            .await
            .unwrap();
        let e = one_stream(&global, "kinesis:eu-west-1:likes", true)
            .await
            .unwrap_err();
        assert!(matches!(e, ClaimError::OtherStream { .. }), "{e}");
    }

    /// A store another counter claims and counts between this one's first read and its check
    /// of the totals: the mode appears at the second read of it.
    struct ClaimedMeanwhile {
        reads: std::sync::atomic::AtomicU32,
    }

    #[async_trait::async_trait]
    impl StoreMeta for ClaimedMeanwhile {
        async fn meta_item(&self, _: MetaItem) -> PortResult<Option<tally_core::rows::Row>> {
            let first = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            let row = [(
                "mode".to_owned(),
                tally_core::rows::Field::S("likers".into()),
            )];
            Ok((!first).then(|| row.into_iter().collect()))
        }
        async fn put_meta_item(&self, _: MetaItem, _: &str, _: bool) -> PortResult<bool> {
            Ok(false)
        }
        async fn delete_rebuilding(&self) -> PortResult<()> {
            Ok(())
        }
        async fn has_counted(&self) -> PortResult<bool> {
            Ok(true)
        }
        fn store_name(&self) -> String {
            "the store".into()
        }
        async fn replica_regions(&self) -> PortResult<Vec<String>> {
            Ok(Vec::new())
        }
    }

    /// A store claimed and counted while it was being read is answered with its claim, never
    /// refused as made by an earlier build (which counted with no claim at all).
    #[tokio::test]
    async fn a_store_claimed_and_counted_meanwhile_is_not_an_earlier_build_s() {
        for claim in [None, Some(CountMode::Events)] {
            let store = ClaimedMeanwhile {
                reads: std::sync::atomic::AtomicU32::new(0),
            };
            let mode = store.count_mode(claim).await.unwrap();
            assert_eq!(mode, Some(CountMode::Likers));
        }
    }
}
