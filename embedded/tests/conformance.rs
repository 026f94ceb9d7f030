//! The port conformance suite on the embedded backend.
#![allow(clippy::unwrap_used)]

use tally_embedded::Embedded;

fn store(shards: usize) -> (tempfile::TempDir, Embedded) {
    let dir = tempfile::tempdir().unwrap();
    let e = Embedded::open(dir.path(), shards).unwrap();
    (dir, e)
}

async fn fresh(_name: &str, shards: usize) -> (tempfile::TempDir, Embedded) {
    let (dir, e) = store(shards);
    // As the AWS suite's tables: with the recent index (likers most recent first).
    assert!(e.add_recent_index().unwrap());
    (dir, e)
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

/// A new store's file has pages of `PAGE_SIZE`; a store made with SQLite's 4 KiB pages keeps
/// them, and a connection checkpoints either after the same bytes of WAL (40 MiB), counted in
/// the file's own pages.
#[test]
fn a_store_keeps_the_page_size_it_was_made_with() {
    let pragma = |c: &rusqlite::Connection, p: &str| -> i64 {
        c.pragma_query_value(None, p, |r| r.get(0)).unwrap()
    };
    let new = tempfile::tempdir().unwrap();
    drop(Embedded::open(new.path(), 2).unwrap());
    let c = rusqlite::Connection::open(new.path().join(tally_embedded::DB_FILE)).unwrap();
    tally_embedded::journal(&c).unwrap();
    assert_eq!(pragma(&c, "page_size"), tally_embedded::PAGE_SIZE);
    assert_eq!(
        pragma(&c, "wal_autocheckpoint"),
        (40 << 20) / tally_embedded::PAGE_SIZE
    );

    let old = tempfile::tempdir().unwrap();
    let path = old.path().join(tally_embedded::DB_FILE);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (x);")
            .unwrap();
    }
    let e = Embedded::open(old.path(), 2).unwrap();
    assert_eq!(e.shard_count().unwrap(), 2, "the old file became a store");
    let c = rusqlite::Connection::open(&path).unwrap();
    tally_embedded::journal(&c).unwrap();
    assert_eq!(pragma(&c, "page_size"), 4096);
    assert_eq!(pragma(&c, "wal_autocheckpoint"), (40 << 20) / 4096);
}

/// Why edges kept in a file of their own would need a connection of their own (BENCHMARKS,
/// "Where the likers counter waits"): on a connection with a second file attached, a write
/// transaction (`BEGIN IMMEDIATE`, as every store call that writes begins) takes the write lock of
/// both files, so edge writes through `ATTACH` would still hold the lock the stream's puts take.
#[test]
fn a_write_transaction_locks_every_attached_file() {
    let dir = tempfile::tempdir().unwrap();
    let (main, second) = (dir.path().join("main.db"), dir.path().join("second.db"));
    for path in [&main, &second] {
        let c = rusqlite::Connection::open(path).unwrap();
        tally_embedded::journal(&c).unwrap();
        c.execute_batch("CREATE TABLE t (x)").unwrap();
    }
    let c = rusqlite::Connection::open(&main).unwrap();
    c.execute("ATTACH DATABASE ?1 AS e", [second.display().to_string()])
        .unwrap();
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    // No busy wait: the lock is asked for once.
    let other = rusqlite::Connection::open(&second).unwrap();
    other.busy_timeout(std::time::Duration::ZERO).unwrap();
    let refused = other.execute_batch("BEGIN IMMEDIATE").unwrap_err();
    assert_eq!(
        refused.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy),
        "{refused}"
    );
    c.execute_batch("ROLLBACK").unwrap();
    other.execute_batch("BEGIN IMMEDIATE; ROLLBACK").unwrap();
}

/// A reading command opens a store while another process holds its write lock (a writer paused
/// mid-transaction, as the stale-writer harness pauses one): it reads at once instead of waiting
/// for the lock (which it would for as long as the writer holds it: 30 s a try, and retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_waits_for_a_paused_writer() {
    use tally_core::ports::LeaseReader;
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

/// The stream appends a put's records per shard as one batch: a reader with a small limit, or
/// opened after a sequence number inside a batch, resumes exactly after its position.
#[tokio::test]
async fn reads_resume_inside_a_batch() {
    use tally_core::ports::{PutEntry, PutOutcome, StartPosition, Stream};
    let (_d, e) = store(1);
    let entries: Vec<PutEntry> = (0..10)
        .map(|i| PutEntry {
            partition_key: format!("k{i}"),
            data: format!("r{i}").into_bytes(),
        })
        .collect();
    let put = e.put_records(&entries).await.unwrap();
    let seqs: Vec<String> = put
        .iter()
        .map(|o| match o {
            PutOutcome::Ok { seq, .. } => seq.as_str().to_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    let mut r = e
        .open("shardId-000000000000", StartPosition::TrimHorizon)
        .await
        .unwrap();
    let mut read = Vec::new();
    loop {
        let b = r.next_batch(3).await.unwrap();
        if b.records.is_empty() {
            break;
        }
        assert!(b.records.len() <= 3);
        read.extend(b.records);
    }
    let data: Vec<String> = read
        .iter()
        .map(|r| String::from_utf8(r.data.clone()).unwrap())
        .collect();
    assert_eq!(data, (0..10).map(|i| format!("r{i}")).collect::<Vec<_>>());
    let got: Vec<String> = read.iter().map(|r| r.seq.as_str().to_owned()).collect();
    assert_eq!(got, seqs, "the sequence numbers the put answered");
    assert_eq!(read[4].partition_key, "k4");
    let after = tally_core::SeqNo::parse(&seqs[5]).unwrap();
    let mut r = e
        .open("shardId-000000000000", StartPosition::AfterSequence(after))
        .await
        .unwrap();
    let rest = r.next_batch(100).await.unwrap().records;
    assert_eq!(rest.len(), 4);
    assert_eq!(rest[0].data, b"r6");
    // A later put's numbers come after.
    let more = e.put_records(&entries[..1]).await.unwrap();
    match &more[0] {
        PutOutcome::Ok { seq, .. } => {
            assert!(seq.as_str().parse::<i64>().unwrap() > seqs[9].parse::<i64>().unwrap())
        }
        other => panic!("{other:?}"),
    }
}

/// A lease row written behind the store's back with a string where tally keeps a list, a
/// number or a position: read as an error naming the row and the field, never a default.
#[tokio::test]
async fn a_corrupt_lease_row_is_named() {
    let (dir, e) = store(1);
    let db = dir.path().join(tally_embedded::DB_FILE);
    tally_conformance::a_corrupt_lease_row_is_named(&e, "embedded", |c| {
        let db = db.clone();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            // Column names are the codec's field names; the value a string no field holds.
            conn.execute(
                &format!(
                    "UPDATE leases SET {} = 'not-what-tally-writes' WHERE app = ?1 AND shard_id = ?2",
                    c.field
                ),
                rusqlite::params![c.app, c.shard],
            )
            .unwrap();
        }
    })
    .await;
}

/// A lease row's request written behind the store's back as bytes: the holder's renewal names
/// the row and `wanted_by`, never reads it as no request.
#[tokio::test]
async fn a_corrupt_handoff_ask_is_named() {
    let (dir, e) = store(1);
    let db = dir.path().join(tally_embedded::DB_FILE);
    tally_conformance::a_corrupt_handoff_ask_is_named(&e, "embedded", |app, shard| {
        let db = db.clone();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            conn.execute(
                "UPDATE leases SET wanted_by = x'07' WHERE app = ?1 AND shard_id = ?2",
                rusqlite::params![app, shard],
            )
            .unwrap();
        }
    })
    .await;
}

/// A summary item or a dedup record written behind the store's back with values tally never
/// writes: each read is an error naming the item, never a 0 or an empty record.
#[tokio::test]
async fn corrupt_summary_and_dedup_are_named() {
    use tally_conformance::Corruption;
    let (dir, e) = store(1);
    let db = dir.path().join(tally_embedded::DB_FILE);
    tally_conformance::corrupt_summary_and_dedup_are_named(&e, "embedded", |c| {
        let db = db.clone();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            let set_n = "UPDATE items SET attrs = json_set(attrs, '$.n', 'three') \
                         WHERE pk = ?1 AND sk = ?2";
            let n = match c {
                Corruption::LiveTotal { post, sk } => {
                    conn.execute(set_n, rusqlite::params![post, sk]).unwrap()
                }
                Corruption::GlobalTotal { sk } => conn
                    .execute(set_n, rusqlite::params![tally_core::summary::GLOBAL_PK, sk])
                    .unwrap(),
                Corruption::DedupIds { app, shard } => conn
                    .execute(
                        "UPDATE dedup SET ids = x'010203' WHERE app = ?1 AND shard_id = ?2",
                        rusqlite::params![app, shard],
                    )
                    .unwrap(),
            };
            assert_eq!(n, 1);
        }
    })
    .await;
}

/// An edge row written behind the store's back with an event id tally never writes: read as an
/// error naming the post and the user, never as an absent or unliked edge.
#[tokio::test]
async fn a_corrupt_edge_is_named() {
    let (dir, e) = store(1);
    let dir = dir.path().to_owned();
    tally_conformance::a_corrupt_edge_is_named(&e, "embedded", |post, user| {
        let db = tally_embedded::edge_file_of(&dir, &post).unwrap();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            let n = conn
                .execute(
                    "UPDATE edges SET event_id = x'09' WHERE post = ?1 AND user = ?2",
                    rusqlite::params![post, user],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    })
    .await;
}

/// An edge event of `p1` (the conformance suite's `like`).
fn edge_event(user: &str, liked: bool, at_ms: i64, id: &str) -> tally_core::edge::EdgeEvent {
    tally_conformance::like("p1", user, liked, at_ms, id)
}

/// Removes the file at `path` with its WAL and shared memory.
fn remove_with_wal(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// An `edges.db` whose `tally.db` is gone is never taken into a new store: opening one there is
/// an error naming the file, and nothing is created.
#[test]
fn an_edges_file_without_its_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Embedded::open(dir.path(), 1).unwrap());
    std::fs::remove_file(dir.path().join(tally_embedded::DB_FILE)).unwrap();
    let err = Embedded::open(dir.path(), 1).err().expect("refused");
    assert!(
        err.to_string()
            .contains("edges.db is left from a store whose tally.db is gone"),
        "{err}"
    );
    assert!(!dir.path().join(tally_embedded::DB_FILE).exists());
}

/// An `edges.db` SQLite cannot read as a database is named as what it is not, never read as a
/// store without edges.
#[test]
fn a_corrupt_edges_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    drop(Embedded::open(dir.path(), 1).unwrap());
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("edges.db{suffix}")));
    }
    std::fs::write(
        dir.path().join(tally_embedded::EDGES_FILE),
        vec![b'x'; 8192],
    )
    .unwrap();
    let err = Embedded::open_existing(dir.path()).err().expect("refused");
    assert!(
        err.to_string().contains("edges.db is not a tally store"),
        "{err}"
    );
}

/// Edge writes take no lock of `tally.db`, where the stream's puts, the counts and the leases
/// are written: with another connection holding `tally.db`'s write lock, they are written at
/// once (a wait for that lock would fail the call after 30 s, or the assertion).
#[tokio::test]
async fn edge_writes_take_no_lock_of_tally_db() {
    use tally_core::ports::EdgeWriter;
    let (dir, store) = store(1);
    let other = rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    let wrote = store
        .write_edges(&[edge_event("u1", true, 1_796_000_000_000, "a")])
        .await
        .unwrap();
    assert_eq!(wrote.applied.written, 1);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the edge write waited {:?} for tally.db's lock",
        started.elapsed()
    );
    other.execute_batch("ROLLBACK").unwrap();
}

/// A trending row written behind the store's back with a string where tally keeps its time:
/// read as an error naming the row and the field, never as a sketch taken at the epoch.
#[tokio::test]
async fn a_corrupt_trending_sketch_is_named() {
    let (dir, e) = store(1);
    let db = dir.path().join(tally_embedded::DB_FILE);
    tally_conformance::a_corrupt_trending_sketch_is_named(&e, "embedded", |app, shard| {
        let db = db.clone();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            let n = conn
                .execute(
                    "UPDATE trending SET at_ms = 'soon' WHERE app = ?1 AND shard_id = ?2",
                    rusqlite::params![app, shard],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    })
    .await;
}

/// The edges' files commit at `synchronous = NORMAL`, and nothing that depends on their edges is
/// durable in `tally.db` before they are (`edge_file`, "Durable in order"): a checkpoint first
/// syncs every edge commit the handle made (one synced commit of each part, seen here as its
/// `user_version` moving), and syncs nothing when none was made since; the change log's reader
/// syncs a part before it hands out rows past its last sync — whoever wrote them (another
/// handle here) — and not again for rows it synced.
#[tokio::test]
async fn edges_are_synced_before_what_depends_on_them() {
    use tally_core::ports::{EdgeWriter, ShardTally, StartPosition, WindowWriter};
    use tally_core::Position;
    let (dir, e) = store(1);
    let parts = tally_embedded::edge_files(dir.path()).unwrap();
    assert_eq!(parts.len(), tally_embedded::NEW_STORE_PARTS);
    // Each part's syncs so far.
    let syncs = || -> Vec<i64> {
        parts
            .iter()
            .map(|p| {
                rusqlite::Connection::open(p)
                    .unwrap()
                    .pragma_query_value(None, "user_version", |r| r.get(0))
                    .unwrap()
            })
            .collect()
    };
    let fence = tally_conformance::held_lease(&e, "counter", "shardId-000000000000").await;
    let mut checkpoint: Option<Position> = None;
    let mut seen = Vec::new();
    for (n, edges) in [vec![edge_event("u1", true, 10, "e1")], vec![]]
        .into_iter()
        .enumerate()
    {
        let end = Position::parse(&format!("{}", 10 * (n + 1))).unwrap();
        e.begin_window(&fence, checkpoint.as_ref(), &end.seq, &end, 1_000.into())
            .await
            .unwrap();
        if !edges.is_empty() {
            e.write_edges(&edges).await.unwrap();
            seen.push(("edges", syncs()));
        }
        e.finish_window(&fence, &end, 1_000, false, &ShardTally::default(), None)
            .await
            .unwrap();
        seen.push(("checkpoint", syncs()));
        checkpoint = Some(end);
    }
    assert_eq!(
        seen,
        vec![
            ("edges", vec![0, 0]),
            ("checkpoint", vec![1, 1]),
            ("checkpoint", vec![1, 1]),
        ],
        "edges are synced by the checkpoint that passes them, and only then"
    );
    // Another handle writes an edge of p1; this handle's log reader syncs p1's part before it
    // hands the change out, once.
    let other = Embedded::open_existing(dir.path()).unwrap();
    other
        .write_edges(&[edge_event("u2", true, 20, "e2")])
        .await
        .unwrap();
    let part = parts
        .iter()
        .position(|p| *p == tally_embedded::edge_file_of(dir.path(), "p1").unwrap())
        .unwrap();
    let before = syncs();
    let log = e.change_log().unwrap();
    let shard = format!("edges-{part}");
    let mut r = log.open(&shard, StartPosition::TrimHorizon).await.unwrap();
    let batch = r.next_batch(100).await.unwrap();
    assert_eq!(batch.records.len(), 2, "u1's and u2's likes");
    let after = syncs();
    assert_eq!(
        after[part],
        before[part] + 1,
        "synced before they were handed out"
    );
    assert!(r.next_batch(100).await.unwrap().records.is_empty());
    assert_eq!(syncs(), after, "nothing new: no sync");
}

/// The change log drops the rows of changes the counter released (applied for good), and only
/// those: a reader from the start then begins after them. (An edge write's changes are packed in
/// rows; the row holding the last change released stays until a later one is released.)
#[tokio::test]
async fn the_change_log_drops_what_was_released() {
    use tally_core::ports::{EdgeWriter, StartPosition};
    let (dir, e) = store(1);
    for i in 0..5 {
        let edge = edge_event(&format!("u{i}"), true, 10 + i, &format!("e{i}"));
        e.write_edges(&[edge]).await.unwrap();
    }
    let log = e.change_log().unwrap();
    let files = tally_embedded::edge_files(dir.path()).unwrap();
    let p1 = tally_embedded::edge_file_of(dir.path(), "p1").unwrap();
    let shard = format!("edges-{}", files.iter().position(|f| *f == p1).unwrap());
    let mut r = log.open(&shard, StartPosition::TrimHorizon).await.unwrap();
    let all = r.next_batch(100).await.unwrap().records;
    assert_eq!(all.len(), 5);
    log.release(&shard, &all[2].seq).await.unwrap();
    let mut r = log.open(&shard, StartPosition::TrimHorizon).await.unwrap();
    let left = r.next_batch(100).await.unwrap().records;
    assert_eq!(
        left.iter().map(|r| r.seq.clone()).collect::<Vec<_>>(),
        all[2..].iter().map(|r| r.seq.clone()).collect::<Vec<_>>()
    );
    // Read after the release, as a counter reads from its checkpoint: nothing released again.
    let mut r = log
        .open(&shard, StartPosition::AfterSequence(all[2].seq.clone()))
        .await
        .unwrap();
    let next = r.next_batch(100).await.unwrap().records;
    assert_eq!(
        next.iter().map(|r| r.seq.clone()).collect::<Vec<_>>(),
        all[3..].iter().map(|r| r.seq.clone()).collect::<Vec<_>>()
    );
}

/// An edge write of more changes than a log row packs: every change read once, in order, in
/// batches that end inside a row, and a reader from the middle of a row resumes after it.
#[tokio::test]
async fn a_write_of_many_changes_is_read_once_in_order() {
    use tally_core::ports::{EdgeWriter, StartPosition};
    let (_dir, e) = store(1);
    let edges: Vec<_> = (0..5_000)
        .map(|i| edge_event(&format!("u{i:05}"), true, 10, &format!("e{i}")))
        .collect();
    e.write_edges(&edges).await.unwrap();
    let log = e.change_log().unwrap();
    let shard = log.list_shards().await.unwrap().remove(0).shard_id;
    let mut r = log.open(&shard, StartPosition::TrimHorizon).await.unwrap();
    let mut all = Vec::new();
    loop {
        let b = r.next_batch(999).await.unwrap().records;
        if b.is_empty() {
            break;
        }
        all.extend(b);
    }
    let users: Vec<String> = all
        .iter()
        .map(|r| {
            tally_core::edge::EdgeChange::decode(&r.data)
                .unwrap()
                .user_id
                .to_string()
        })
        .collect();
    let want: Vec<String> = (0..5_000).map(|i| format!("u{i:05}")).collect();
    assert_eq!(users, want, "each change once, in the write's order");
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    let mut r = log
        .open(&shard, StartPosition::AfterSequence(all[4_499].seq.clone()))
        .await
        .unwrap();
    let rest = r.next_batch(1_000).await.unwrap().records;
    assert_eq!(rest.len(), 500);
    assert_eq!(rest[0].seq, all[4_500].seq);
}

/// A store an earlier build of tally made — `tally.db` with a table only such a build made, an
/// edges' part with no change log, or a first part with no record of its parts — is refused with
/// what to do, never read as if its edges' history (or its other parts) were not there.
#[test]
fn a_store_an_earlier_build_made_is_refused() {
    use tally_embedded::{DB_FILE, EDGES_FILE};
    for (file, change, refused) in [
        (DB_FILE, "CREATE TABLE window_edges (app TEXT)", "tally.db"),
        (EDGES_FILE, "DROP TABLE change_log", "edges.db"),
        // Its edges in one file, before parts: no record of its parts (in WAL mode or not).
        (EDGES_FILE, "DROP TABLE edge_parts", "edges.db"),
        (
            EDGES_FILE,
            "DROP TABLE edge_parts; PRAGMA journal_mode = DELETE",
            "edges.db",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        drop(Embedded::open(dir.path(), 1).unwrap());
        let c = rusqlite::Connection::open(dir.path().join(file)).unwrap();
        c.execute_batch(change).unwrap();
        for err in [
            Embedded::open_existing(dir.path()).err(),
            Embedded::open(dir.path(), 1).err(),
        ] {
            let err = err.expect("refused").to_string();
            let said = format!("{refused} was made by an earlier build of tally");
            assert!(err.contains(&said), "{change}: {err}");
            assert!(err.contains("fresh --data-dir"), "{change}: {err}");
        }
    }
}

/// A store made now parts its likers' edges by post over `NEW_STORE_PARTS` files, written at
/// once: each post's edges all in the file `edge_file_of` names, every file holding some — and
/// the store reads as one: each post's likers, each edge, and a scan of every edge in pages of
/// a few (each edge once, in (post, user) order, across the files).
#[tokio::test]
async fn edges_are_parted_by_post_and_read_as_one_store() {
    use std::collections::BTreeMap;
    use tally_core::ports::{Consistency, EdgeWriter, LikersReader};
    let (dir, e) = store(1);
    // Post p<n> liked by n % 5 + 1 users, in key order (as a window writes them).
    let mut edges = Vec::new();
    let mut likers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in 0..20 {
        let post = format!("p{p:02}");
        for u in 0..(p % 5 + 1) {
            let user = format!("u{u}");
            let at = 1_796_000_000_000 + u;
            edges.push(tally_conformance::like(
                &post,
                &user,
                true,
                at,
                &format!("e{p}-{u}"),
            ));
            likers.entry(post.clone()).or_default().push(user);
        }
    }
    let wrote = e.write_edges(&edges).await.unwrap();
    assert_eq!(wrote.applied.written as usize, edges.len());
    assert_eq!(wrote.changed as usize, edges.len());
    assert!(wrote.retry.is_empty());

    // Where they are: each post's edges in its file, every file holding some.
    let files = tally_embedded::edge_files(dir.path()).unwrap();
    assert_eq!(files.len(), tally_embedded::NEW_STORE_PARTS);
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let conn = rusqlite::Connection::open(file).unwrap();
        let rows = |sql: &str| -> Vec<(String, String)> {
            let mut st = conn.prepare(sql).unwrap();
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let mut logged: Vec<(String, String)> = tally_embedded::logged_changes(&conn)
            .unwrap()
            .into_iter()
            .map(|c| (c.post_id.to_string(), c.user_id.to_string()))
            .collect();
        logged.sort();
        let edges = rows("SELECT post, user FROM edges ORDER BY post, user");
        assert_eq!(edges, logged, "each edge's change logged in its own part");
        let rows = edges;
        assert!(!rows.is_empty(), "{} holds no edge", file.display());
        for (post, user) in rows {
            assert_eq!(
                &tally_embedded::edge_file_of(dir.path(), &post).unwrap(),
                file,
                "{post}'s edges are in its own part"
            );
            found.entry(post).or_default().push(user);
        }
    }
    for users in found.values_mut() {
        users.sort();
    }
    assert_eq!(found, likers);

    // Read as one store.
    let mut pairs = Vec::new();
    for (post, users) in &likers {
        assert_eq!(&e.likers(post, None, 10).await.unwrap().users, users);
        pairs.extend(users.iter().map(|u| (post.clone(), u.clone())));
    }
    let (states, _) = e.edges(&pairs, Consistency::Strong).await.unwrap();
    assert!(states.iter().all(|s| s.as_ref().is_some_and(|s| s.liked)));
    let mut scanned = Vec::new();
    let mut cursor = None;
    loop {
        let page = e.scan_edges(cursor.as_ref(), 7).await.unwrap();
        assert!(page.edges.len() <= 7);
        scanned.extend(page.edges.into_iter().map(|(p, u, _)| (p, u)));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(scanned, pairs, "every edge once, in (post, user) order");
}

/// A part's file of the edges left from another store is never taken into a store: beside a new
/// store (its `tally.db` gone), or beside a store whose first part is gone (which would set its
/// edges up anew), opening is an error naming the file.
#[test]
fn a_part_left_from_another_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Embedded::open(dir.path(), 1).unwrap());
    let parts = tally_embedded::edge_files(dir.path()).unwrap();
    assert_eq!(parts.len(), tally_embedded::NEW_STORE_PARTS);
    assert!(parts
        .iter()
        .all(|p| tally_embedded::is_edge_file(&p.file_name().unwrap().to_string_lossy())));
    // Its tally.db and first part gone, the second left: refused at the first part's setup.
    for f in [tally_embedded::DB_FILE, tally_embedded::EDGES_FILE] {
        remove_with_wal(&dir.path().join(f));
    }
    let err = Embedded::open(dir.path(), 1).err().expect("refused");
    assert!(
        err.to_string()
            .contains("edges-1.db is left from a store whose tally.db is gone"),
        "{err}"
    );
}

/// A store missing a part of its edges is refused by every open, reading or writing, with the
/// missing file named — and the file is not made anew (an empty part would read as half the
/// edges gone).
#[test]
fn a_missing_part_is_refused_and_never_made() {
    for gone in [tally_embedded::EDGES_FILE, "edges-1.db"] {
        let dir = tempfile::tempdir().unwrap();
        drop(Embedded::open(dir.path(), 1).unwrap());
        let path = dir.path().join(gone);
        remove_with_wal(&path);
        let reading = Embedded::open_existing(dir.path()).err().expect("refused");
        let writing = Embedded::open(dir.path(), 1).err().expect("refused");
        for err in [reading, writing] {
            assert!(
                err.to_string().contains(&format!("{} ", path.display()))
                    && err.to_string().contains("is missing"),
                "{gone}: {err}"
            );
        }
        assert!(!path.exists(), "{gone} was made anew");
    }
}

/// A dead letter written behind the store's back with a string where tally keeps its arrival:
/// read as an error naming it, never skipped or read as arriving in 1970.
#[tokio::test]
async fn a_corrupt_dead_letter_is_named() {
    let (dir, e) = store(1);
    let db = dir.path().join(tally_embedded::DB_FILE);
    tally_conformance::a_corrupt_dead_letter_is_named(&e, "embedded", |shard, key| {
        let db = db.clone();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            let n = conn
                .execute(
                    "UPDATE dead_letters SET arrival_ms = 'soon' WHERE shard_id = ?1 AND seq = ?2",
                    rusqlite::params![shard, key],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    })
    .await;
}

/// The embedded stream's shard row with `parents` that are not a list: listing the shards is an
/// error naming the shard, never a shard read as having no parents (read before them).
#[tokio::test]
async fn a_shard_with_corrupt_parents_is_named() {
    use tally_core::ports::{PortError, Stream};
    let (dir, e) = store(2);
    let conn = rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE)).unwrap();
    let shards = e.list_shards().await.unwrap();
    let shard = shards[1].shard_id.clone();
    conn.execute(
        "UPDATE shards SET parents = '[shardId-0' WHERE shard_id = ?1",
        [&shard],
    )
    .unwrap();
    let err = e.list_shards().await.expect_err("corrupt parents");
    assert!(
        matches!(err, PortError::Corrupt { .. }) && err.to_string().contains(&shard),
        "{err}"
    );
}

/// A fleet row whose asks are not a list of asks: the fleet's listing is an error naming it.
#[tokio::test]
async fn a_corrupt_fleet_row_is_named() {
    let (dir, e) = store(1);
    let db = dir.path().join(tally_embedded::DB_FILE);
    tally_conformance::a_corrupt_fleet_row_is_named(&e, "embedded", |app, worker| {
        let db = db.clone();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            let n = conn
                .execute(
                    "UPDATE leases SET wanted_by = '[{\"shard_id\":' WHERE app = ?1 AND shard_id = ?2",
                    rusqlite::params![app, worker],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    })
    .await;
}

/// A `#meta` item whose value is not text: the store's mode, stream or rebuild is an error
/// naming the item and the attribute.
#[tokio::test]
async fn a_corrupt_meta_row_is_named() {
    let (dir, e) = store(1);
    let db = dir.path().join(tally_embedded::DB_FILE);
    tally_conformance::a_corrupt_meta_row_is_named(&e, |sk, attr| {
        let db = db.clone();
        async move {
            let conn = rusqlite::Connection::open(db).unwrap();
            let n = conn
                .execute(
                    "UPDATE items SET attrs = json_set(attrs, '$.' || ?1, 3) WHERE pk = '#meta' AND sk = ?2",
                    rusqlite::params![attr, sk],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    })
    .await;
}

/// A stream batch whose records are cut short: a read of its shard is an error naming the
/// batch and `records`, never the batch's records skipped (AWS: Kinesis keeps the records).
#[tokio::test]
async fn a_corrupt_stream_batch_is_named() {
    use tally_core::ports::{PortError, PutEntry, StartPosition, Stream};
    let (dir, e) = store(1);
    let put = PutEntry {
        partition_key: "p".into(),
        data: b"record".to_vec(),
    };
    e.put_records(&[put.clone(), put]).await.unwrap();
    let shard = e.list_shards().await.unwrap()[0].shard_id.clone();
    let mut r = e.open(&shard, StartPosition::TrimHorizon).await.unwrap();
    assert_eq!(r.next_batch(10).await.unwrap().records.len(), 2);
    let conn = rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE)).unwrap();
    let n = conn
        .execute(
            "UPDATE batches SET records = substr(records, 1, length(records) - 1)",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    let mut r = e.open(&shard, StartPosition::TrimHorizon).await.unwrap();
    let err = r.next_batch(10).await.expect_err("a corrupt batch");
    let text = err.to_string();
    assert!(
        matches!(err, PortError::Corrupt { .. })
            && text.contains(&format!("batches {shard}/2"))
            && text.contains("`records`"),
        "{text}"
    );
}

/// A lease row whose checkpoint is not a position: what a trim would drop unapplied is an error
/// naming the row, never "nothing applied" read from it.
#[tokio::test]
async fn a_corrupt_checkpoint_is_named_before_a_trim() {
    use tally_core::ports::{LeaseStore, PortError, PutEntry, Stream};
    let (dir, e) = store(1);
    let put = PutEntry {
        partition_key: "p".into(),
        data: b"record".to_vec(),
    };
    e.put_records(&[put]).await.unwrap();
    let shards = e.list_shards().await.unwrap();
    e.ensure_leases("counter", &shards).await.unwrap();
    assert_eq!(e.unapplied_before(i64::MAX).unwrap()[0].records, 1);
    let conn = rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE)).unwrap();
    let n = conn
        .execute(
            "UPDATE leases SET checkpoint = 'x' WHERE app = 'counter'",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    let err = e
        .unapplied_before(i64::MAX)
        .expect_err("a corrupt checkpoint");
    let text = err.to_string();
    assert!(
        matches!(err, PortError::Corrupt { .. })
            && text.contains("leases counter/")
            && text.contains("`checkpoint`"),
        "{text}"
    );
}
