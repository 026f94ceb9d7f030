//! Reads across regions (docs/REGIONS.md, "Reads everywhere"): each post is read from its home
//! region's items — here, this region's store; a post homed elsewhere, that home's tables as
//! they are replicated to this region — so that every region answers every post, each from the
//! one writer of its items. One [`CountReader`] over the homes' readers: a batch is split by
//! home, read from each side by side, and put back in the order asked.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use tally_core::edge::{CountMode, EdgeState};
use tally_core::ports::{
    Consistency, CountReader, EdgeScan, LikersPage, LikersReader, PortError, PortResult, PostCount,
    RecentCursor, RecentPage, ScanCursor, StoreReader,
};
use tally_core::regions::Homes;

/// Every post read from its home: this region's reader, and each other home's.
pub struct HomedCounts {
    homes: Homes,
    /// The readers by region, this one's included.
    by_home: BTreeMap<String, Arc<dyn StoreReader>>,
}

impl HomedCounts {
    /// `here` reads this region's store; `peers` each other home's (by region). A home of
    /// `homes` with no reader is an error naming it.
    pub fn new(
        homes: Homes,
        here: Arc<dyn StoreReader>,
        peers: BTreeMap<String, Arc<dyn StoreReader>>,
    ) -> Result<HomedCounts, String> {
        let mut by_home = peers;
        by_home.insert(homes.this.clone(), here);
        if let Some(missing) = homes.regions.iter().find(|r| !by_home.contains_key(*r)) {
            return Err(format!(
                "no store to read region {missing}'s posts from: set `regions.peers.{missing}` \
                 (`table_prefix` on AWS, `data_dir` embedded)"
            ));
        }
        Ok(HomedCounts { homes, by_home })
    }

    /// The reader of `post_id`'s home.
    fn of(&self, post_id: &str) -> &dyn StoreReader {
        self.by_home[self.homes.home(post_id)].as_ref()
    }

    /// This region's reader (what is not a post's: the store's mode, a rebuild's scan).
    fn here(&self) -> &dyn StoreReader {
        self.by_home[&self.homes.this].as_ref()
    }

    /// `keys` split by their post's home: per home, the positions and the keys.
    fn split<'k, K>(
        &self,
        keys: &'k [K],
        post: impl Fn(&K) -> &str,
    ) -> BTreeMap<&str, (Vec<usize>, Vec<&'k K>)> {
        let mut out: BTreeMap<&str, (Vec<usize>, Vec<&K>)> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let e = out.entry(self.homes.home(post(k))).or_default();
            e.0.push(i);
            e.1.push(k);
        }
        out
    }

    /// Reads each home's part of `keys` side by side, and puts the answers back in order, with
    /// the read units added up.
    async fn by_home<K, V, F, Fut>(
        &self,
        keys: &[K],
        post: impl Fn(&K) -> &str,
        read: F,
    ) -> PortResult<(Vec<V>, u64)>
    where
        K: Clone,
        V: Clone,
        F: Fn(Arc<dyn StoreReader>, Vec<K>) -> Fut,
        Fut: std::future::Future<Output = PortResult<(Vec<V>, u64)>>,
    {
        let parts = self.split(keys, post);
        let reads = parts.iter().map(|(home, (_, ks))| {
            read(
                self.by_home[*home].clone(),
                ks.iter().map(|k| (*k).clone()).collect(),
            )
        });
        let answers = futures_util::future::try_join_all(reads).await?;
        let mut out: Vec<Option<V>> = vec![None; keys.len()];
        let mut units = 0;
        for ((home, (positions, _)), (values, u)) in parts.iter().zip(answers) {
            if values.len() != positions.len() {
                return Err(PortError::Other(format!(
                    "region {home}'s store answered {} of {} asked",
                    values.len(),
                    positions.len()
                )));
            }
            units += u;
            for (i, v) in positions.iter().zip(values) {
                out[*i] = Some(v);
            }
        }
        Ok((out.into_iter().flatten().collect(), units))
    }
}

#[async_trait]
impl CountReader for HomedCounts {
    async fn post_counts(
        &self,
        post_ids: &[String],
        since_ms: Option<i64>,
        consistency: Consistency,
    ) -> PortResult<Vec<PostCount>> {
        let (counts, _) = self
            .by_home(
                post_ids,
                |p| p,
                |r, ids| async move { Ok((r.post_counts(&ids, since_ms, consistency).await?, 0)) },
            )
            .await?;
        Ok(counts)
    }

    /// Every home's global total added up: each post is counted in one home only.
    async fn global_total(&self) -> PortResult<i64> {
        let totals = self.by_home.values().map(|r| r.global_total());
        Ok(futures_util::future::try_join_all(totals)
            .await?
            .iter()
            .sum())
    }

    async fn stored_mode(&self) -> PortResult<Option<CountMode>> {
        self.here().stored_mode().await
    }
}

#[async_trait]
impl LikersReader for HomedCounts {
    async fn edges(
        &self,
        pairs: &[(String, String)],
        consistency: Consistency,
    ) -> PortResult<(Vec<Option<EdgeState>>, u64)> {
        self.by_home(
            pairs,
            |(p, _)| p,
            |r, ps| async move { r.edges(&ps, consistency).await },
        )
        .await
    }

    async fn likers(
        &self,
        post_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> PortResult<LikersPage> {
        self.of(post_id).likers(post_id, after, limit).await
    }

    async fn recent_likers(
        &self,
        post_id: &str,
        after: Option<&RecentCursor>,
        limit: usize,
    ) -> PortResult<RecentPage> {
        self.of(post_id).recent_likers(post_id, after, limit).await
    }

    /// This region's edges only: a rebuild rebuilds its own store.
    async fn scan_edges(&self, after: Option<&ScanCursor>, limit: usize) -> PortResult<EdgeScan> {
        self.here().scan_edges(after, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that counts every post as `n` and says `liked` for every edge.
    struct Fixed {
        n: i64,
        liked: bool,
    }

    #[async_trait]
    impl CountReader for Fixed {
        async fn post_counts(
            &self,
            ids: &[String],
            _: Option<i64>,
            _: Consistency,
        ) -> PortResult<Vec<PostCount>> {
            Ok(ids
                .iter()
                .map(|_| PostCount {
                    total: self.n,
                    since: None,
                    read_units: 1,
                    marks: Vec::new(),
                })
                .collect())
        }
        async fn global_total(&self) -> PortResult<i64> {
            Ok(self.n * 1000)
        }
        async fn stored_mode(&self) -> PortResult<Option<CountMode>> {
            Ok(Some(CountMode::Likers))
        }
    }

    #[async_trait]
    impl LikersReader for Fixed {
        async fn edges(
            &self,
            pairs: &[(String, String)],
            _: Consistency,
        ) -> PortResult<(Vec<Option<EdgeState>>, u64)> {
            let e = EdgeState {
                liked: self.liked,
                at_ms: 0,
                event_id: "e".into(),
            };
            Ok((vec![Some(e); pairs.len()], pairs.len() as u64))
        }
        async fn likers(&self, _: &str, _: Option<&str>, _: usize) -> PortResult<LikersPage> {
            Err(PortError::Other("not asked".into()))
        }
        async fn recent_likers(
            &self,
            _: &str,
            _: Option<&RecentCursor>,
            _: usize,
        ) -> PortResult<RecentPage> {
            Err(PortError::Other("not asked".into()))
        }
        async fn scan_edges(&self, _: Option<&ScanCursor>, _: usize) -> PortResult<EdgeScan> {
            Err(PortError::Other("not asked".into()))
        }
    }

    fn homed() -> HomedCounts {
        let homes = Homes::of("a", &["a".into(), "b".into()]).unwrap().unwrap();
        let b: Arc<dyn StoreReader> = Arc::new(Fixed { n: 2, liked: false });
        HomedCounts::new(
            homes,
            Arc::new(Fixed { n: 1, liked: true }),
            BTreeMap::from([("b".to_owned(), b)]),
        )
        .unwrap()
    }

    /// A batch is answered in the order asked, each post from its home's reader.
    #[tokio::test]
    async fn each_post_is_read_from_its_home_in_the_order_asked() {
        let h = homed();
        let ids: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
        let counts = h
            .post_counts(&ids, None, Consistency::Strong)
            .await
            .unwrap();
        let (liked, units) = h
            .viewer_likes("v", &ids, Consistency::Strong)
            .await
            .unwrap();
        assert_eq!(units, 40);
        for (i, id) in ids.iter().enumerate() {
            let here = h.homes.home(id) == "a";
            assert_eq!(counts[i].total, if here { 1 } else { 2 }, "{id}");
            assert_eq!(liked[i], here, "{id}");
        }
        assert!(ids.iter().any(|p| h.homes.is_here(p)) && ids.iter().any(|p| !h.homes.is_here(p)));
        assert_eq!(h.global_total().await.unwrap(), 3000, "every home's total");
        assert_eq!(
            h.stored_mode().await.unwrap(),
            Some(CountMode::Likers),
            "this region's"
        );
    }

    /// A home with nothing to read it from is named.
    #[test]
    fn a_home_without_a_reader_is_named() {
        let homes = Homes::of("a", &["a".into(), "b".into()]).unwrap().unwrap();
        let err = HomedCounts::new(
            homes,
            Arc::new(Fixed { n: 1, liked: true }),
            BTreeMap::new(),
        )
        .err()
        .unwrap();
        assert!(err.contains("regions.peers.b"), "{err}");
    }
}
