//! The port conformance suite on the embedded backend.
#![allow(clippy::unwrap_used)]

use tally_embedded::Embedded;

fn store(shards: usize) -> (tempfile::TempDir, Embedded) {
    let dir = tempfile::tempdir().unwrap();
    let e = Embedded::open(dir.path(), shards).unwrap();
    (dir, e)
}

async fn fresh(_name: &str, shards: usize) -> (tempfile::TempDir, Embedded) {
    store(shards)
}

/// One store serves every port.
fn ports(b: &(tempfile::TempDir, Embedded)) -> &Embedded {
    &b.1
}

tally_conformance::suite! {
    backend: "embedded",
    fresh: fresh,
    stream: ports,
    stores: ports,
}

#[tokio::test]
async fn split_shard_routes_to_children_and_ends_the_parent() {
    use tally_core::ports::{PutEntry, StartPosition, Stream};
    let (_d, e) = store(1);
    let put = |k: &str| PutEntry {
        partition_key: k.into(),
        data: k.as_bytes().to_vec(),
    };
    e.put_records(&[put("a"), put("b")]).await.unwrap();
    let (c1, c2) = e.split_shard("shardId-000000000000").unwrap();
    e.put_records(&[put("c"), put("d"), put("e")])
        .await
        .unwrap();
    let shards = e.list_shards().await.unwrap();
    assert_eq!(shards.len(), 3);
    assert!(shards[0].closed);
    assert_eq!(shards[1].parents, vec!["shardId-000000000000".to_string()]);
    let mut r = e
        .open("shardId-000000000000", StartPosition::TrimHorizon)
        .await
        .unwrap();
    let b = r.next_batch(10).await.unwrap();
    assert_eq!(b.records.len(), 2);
    assert!(b.shard_end);
    assert_eq!(b.child_shards, vec![c1.clone(), c2.clone()]);
    let mut n = 0;
    for c in [c1, c2] {
        n += e
            .open(&c, StartPosition::TrimHorizon)
            .await
            .unwrap()
            .next_batch(10)
            .await
            .unwrap()
            .records
            .len();
    }
    assert_eq!(n, 3);
}

/// Several processes (here: connections) opening a fresh store at once all succeed, and the
/// stream gets its shards once.
#[test]
fn a_fresh_store_opened_at_once_by_many() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let opened: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| {
                    s.spawn(|| {
                        Embedded::open(dir.path(), 4)
                            .unwrap()
                            .shard_count()
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(opened, vec![4; 6]);
    }
}

/// A reading command opens a store while another process holds its write lock (a writer paused
/// mid-transaction, as the stale-writer harness pauses one): it reads at once instead of waiting
/// for the lock (which it would for as long as the writer holds it: 30 s a try, and retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_waits_for_a_paused_writer() {
    use tally_core::ports::LeaseStore;
    let (dir, _writer) = store(2);
    let holder = rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE)).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let path = dir.path().to_owned();
    std::thread::spawn(move || {
        let _ = tx.send(Embedded::open_existing(&path).map(|_| ()));
    });
    let opened = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("opening for reads waited for the write lock");
    opened.unwrap();
    let reader = Embedded::open_existing(dir.path()).unwrap();
    assert!(reader.list_states("counter").await.unwrap().is_empty());
    holder.execute_batch("ROLLBACK").unwrap();
}
