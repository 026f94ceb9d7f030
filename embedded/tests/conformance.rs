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

/// A store written by a tally from before batches (one `records` row per record) is migrated
/// when opened: every record is read with its sequence number, and new ones come after.
#[tokio::test]
async fn an_old_per_record_store_is_read_after_migrating() {
    use tally_core::ports::{PutEntry, PutOutcome, StartPosition, Stream};
    let dir = tempfile::tempdir().unwrap();
    drop(Embedded::open(dir.path(), 2).unwrap());
    {
        let c = rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE)).unwrap();
        c.execute_batch(
            "DROP TABLE batches;
             CREATE TABLE records (seq INTEGER PRIMARY KEY AUTOINCREMENT, shard_id TEXT NOT NULL,
               arrival_ms INTEGER NOT NULL, partition_key TEXT NOT NULL, data BLOB NOT NULL);
             CREATE INDEX records_by_shard ON records(shard_id, seq);
             INSERT INTO records (shard_id, arrival_ms, partition_key, data) VALUES
               ('shardId-000000000000', 1, 'a', x'6131'), ('shardId-000000000001', 1, 'b', x'6231'),
               ('shardId-000000000000', 2, 'a', x'6132'), ('shardId-000000000000', 3, 'a', x'6133');
             DELETE FROM records WHERE seq = 4; -- the AUTOINCREMENT counter stays at 4",
        )
        .unwrap();
    }
    let e = Embedded::open(dir.path(), 2).unwrap();
    let mut r = e
        .open("shardId-000000000000", StartPosition::TrimHorizon)
        .await
        .unwrap();
    let b = r.next_batch(10).await.unwrap();
    let got: Vec<(String, Vec<u8>)> = b
        .records
        .iter()
        .map(|r| (r.seq.as_str().to_owned(), r.data.clone()))
        .collect();
    assert_eq!(
        got,
        vec![("1".into(), b"a1".to_vec()), ("3".into(), b"a2".to_vec())]
    );
    let put = e
        .put_records(&[PutEntry {
            partition_key: "z".into(),
            data: b"z".to_vec(),
        }])
        .await
        .unwrap();
    match &put[0] {
        PutOutcome::Ok { seq, .. } => assert_eq!(seq.as_str(), "5", "never a number given before"),
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

/// An edge row written behind the store's back with a history tally never writes: read as an
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
                    "UPDATE edges SET history = x'09' WHERE post = ?1 AND user = ?2",
                    rusqlite::params![post, user],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
    })
    .await;
}

/// A store from before the typed `edges` table kept each edge as a JSON item (`E#<user>` in the
/// post's partition of `items`): opened by this version, its edges move into `edges` in the
/// schema's transaction and read as they were — a liker is still one, a window's own write is
/// still found — and no edge item is left behind.
#[tokio::test]
async fn an_old_store_s_edge_items_are_moved_to_the_edges_table() {
    use tally_core::edge;
    use tally_core::ports::{Consistency, CountReader};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(tally_embedded::DB_FILE);
    drop(Embedded::open(dir.path(), 1).unwrap());
    // The old layout: an edge item written as the old store wrote it, no `edges` table, and no
    // edges' file.
    remove_edge_files(dir.path());
    let e = edge_event("u1", true, 1_796_000_000_000, "a");
    let old = edge::written(&e, "0010@shard-0", None);
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("DROP TABLE edges").unwrap();
        conn.execute(
            "INSERT INTO items (pk, sk, attrs) VALUES ('p1', 'E#u1', ?1)",
            [serde_json::to_string(&old).unwrap()],
        )
        .unwrap();
    }
    let store = Embedded::open_existing(dir.path()).unwrap();
    assert_eq!(store.likers("p1", None, 10).await.unwrap().users, ["u1"]);
    let (states, _) = store
        .edges(&[("p1".into(), "u1".into())], Consistency::Strong)
        .await
        .unwrap();
    let state = states[0].clone().expect("the edge moved");
    assert_eq!(state.to_attrs(), old);
    assert!(state.written_by("0010@shard-0", "p1").is_some());
    let conn = rusqlite::Connection::open(&db).unwrap();
    let left: i64 = conn
        .query_row("SELECT COUNT(*) FROM items WHERE sk LIKE 'E#%'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(left, 0, "no edge item is left in items");
}

/// An edge row as a build before packed rows wrote it — its event id and window as text, its
/// history version 1 with nothing in it — reads as the edge it is, a write of the same window is found its own,
/// and a later window's write over it is packed.
#[tokio::test]
async fn an_edge_row_written_before_packing_reads_and_is_written_over() {
    use tally_core::ports::WindowWriter;
    let (dir, e) = store(1);
    assert!(e.add_recent_index().unwrap());
    let fence = tally_conformance::held_lease(&e, "counter", "shardId-000000000000").await;
    // The window ending at `end` writes `edges`.
    let apply = |end: &str, edges: Vec<tally_core::edge::EdgeEvent>| {
        let (e, fence) = (&e, &fence);
        let end = tally_core::Position::parse(end).unwrap();
        async move {
            e.apply_edges(tally_conformance::window_at(fence, &end), &edges)
                .await
                .unwrap()
        }
    };
    let like = || vec![edge_event("u1", true, 1_796_000_000_000, "a")];
    assert_eq!(apply("10", like()).await.transitions.len(), 1);
    let (_, _, before) = edges_of_p1(&e, &["u1"]).await;
    let window = before[0].clone().expect("the like").writes[0]
        .window
        .clone();
    let db = tally_embedded::edge_file_of(dir.path(), "p1").unwrap();
    let column = |sql: &str| -> String {
        rusqlite::Connection::open(&db)
            .unwrap()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    };
    let types = "SELECT typeof(event_id) || ' ' || typeof(window) FROM edges";
    assert_eq!(column(types), "blob blob");
    assert_eq!(column("SELECT hex(history) FROM edges"), "");
    let n = rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE edges SET event_id = 'a', window = ?1, history = x'010000000000'",
            [&window],
        )
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(column(types), "text text");
    assert_eq!(
        edges_of_p1(&e, &["u1"]).await,
        (vec!["u1".into()], vec!["u1".into()], before)
    );
    // The same window again: its own write, found (no count moves twice).
    let again = apply("10", like()).await;
    assert_eq!(again.applied.written, 0, "found its own, not written again");
    assert_eq!(again.transitions.len(), 1);
    // A later window's unlike: written over, packed.
    let unlike = vec![edge_event("u1", false, 1_796_000_000_001, "b")];
    let wrote = apply("20", unlike).await;
    assert_eq!(wrote.transitions.len(), 1);
    assert_eq!(wrote.transitions[0].before, Some(1_796_000_000_000));
    assert_eq!(wrote.transitions[0].after, None);
    let (likers, recent, states) = edges_of_p1(&e, &["u1"]).await;
    assert!(likers.is_empty() && recent.is_empty());
    assert!(!states[0].as_ref().expect("the unlike").liked);
    assert_eq!(column(types), "blob blob");
}

/// An edge event of `p1` (the conformance suite's `like`).
fn edge_event(user: &str, liked: bool, at_ms: i64, id: &str) -> tally_core::edge::EdgeEvent {
    tally_conformance::like("p1", user, liked, at_ms, id)
}

/// What a store's edges of `p1` read as: its likers in user order, most recent first, and the
/// edge of each of `users`.
async fn edges_of_p1(
    store: &Embedded,
    users: &[&str],
) -> (
    Vec<String>,
    Vec<String>,
    Vec<Option<tally_core::edge::EdgeState>>,
) {
    use tally_core::ports::{Consistency, CountReader};
    let likers = store.likers("p1", None, 10).await.unwrap().users;
    let recent = store.recent_likers("p1", None, 10).await.unwrap();
    let pairs: Vec<(String, String)> = users
        .iter()
        .map(|u| ("p1".to_owned(), (*u).to_owned()))
        .collect();
    let (states, _) = store.edges(&pairs, Consistency::Strong).await.unwrap();
    (
        likers,
        recent.likers.into_iter().map(|l| l.user).collect(),
        states,
    )
}

/// The rows of `tally.db`'s own `edges` table (where a store made before `edges.db` kept them).
fn edges_in_main(dir: &std::path::Path) -> i64 {
    rusqlite::Connection::open(dir.join(tally_embedded::DB_FILE))
        .unwrap()
        .query_row("SELECT COUNT(*) FROM main.edges", [], |r| r.get(0))
        .unwrap()
}

/// Removes the file at `path` with its WAL and shared memory.
fn remove_with_wal(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// Removes the files of every part of the edges (with their WALs and shared memory).
fn remove_edge_files(dir: &std::path::Path) {
    for part in tally_embedded::edge_files(dir).unwrap() {
        remove_with_wal(&part);
    }
}

/// Copies the edges of every part (and the recent index) into `tally.db`'s own `edges` table,
/// as a store made before `edges.db` kept them, or as a move a crash cut after its copy left
/// them.
fn copy_edges_into_main(dir: &std::path::Path) {
    let conn = rusqlite::Connection::open(dir.join(tally_embedded::DB_FILE)).unwrap();
    let parts = tally_embedded::edge_files(dir).unwrap();
    for part in &parts {
        conn.execute("ATTACH DATABASE ?1 AS e", [part.display().to_string()])
            .unwrap();
        conn.execute_batch(
            "INSERT INTO main.edges SELECT * FROM e.edges; \
             CREATE INDEX IF NOT EXISTS main.edges_recent ON edges (post, at_ms, user) WHERE liked = 1; \
             DETACH DATABASE e",
        )
        .unwrap();
    }
}

/// A store made before `edges.db` kept its edges (and its recent index) in `tally.db`: the
/// first handle that may write moves them into `edges.db` — each edge read as it was, a liker
/// still one, most recent first still in order, a window's own write still found — and leaves
/// none in `tally.db`. A move a crash cut between its two commits (the edges copied into
/// `edges.db`, not yet deleted from `tally.db`) is finished by the next open, which adds none:
/// an edge written in `edges.db` since is kept, not put back as it was.
#[tokio::test]
async fn a_store_s_edges_move_out_of_tally_db_into_their_own_file() {
    use tally_core::ports::{WindowRef, WindowWriter};
    use tally_core::seq::{Position, SeqNo};
    let dir = tempfile::tempdir().unwrap();
    let store = Embedded::open(dir.path(), 1).unwrap();
    assert!(store.add_recent_index().unwrap());
    let t = 1_796_000_000_000;
    let (end1, end2) = (
        Position::whole(SeqNo::of_number(10)),
        Position::whole(SeqNo::of_number(20)),
    );
    let at = |end| WindowRef {
        app: "counter",
        shard_id: "shard-0",
        end,
        held: false,
    };
    let w1 = vec![
        edge_event("u1", true, t, "a"),
        edge_event("u2", true, t + 2, "b"),
        edge_event("u3", false, t + 3, "d"),
    ];
    let written = store.apply_edges(at(&end1), &w1).await.unwrap();
    let users = ["u1", "u2", "u3"];
    let before = edges_of_p1(&store, &users).await;
    assert_eq!(before.0, ["u1", "u2"]);
    assert_eq!(before.1, ["u2", "u1"]);
    drop(store);
    // The layout before: the edges in tally.db, no edges' file.
    copy_edges_into_main(dir.path());
    remove_edge_files(dir.path());
    let store = Embedded::open_existing(dir.path()).unwrap();
    assert_eq!(edges_of_p1(&store, &users).await, before);
    assert_eq!(edges_in_main(dir.path()), 0, "no edge is left in tally.db");
    let again = store.apply_edges(at(&end1), &w1).await.unwrap();
    assert_eq!(
        again.transitions, written.transitions,
        "the window finds its own writes where they moved"
    );
    assert_eq!(again.applied.written, 0);
    // A move cut after its copy: the edges in both files. Meanwhile u1 unlikes p1 in edges.db.
    copy_edges_into_main(dir.path());
    store
        .apply_edges(at(&end2), &[edge_event("u1", false, t + 10, "e")])
        .await
        .unwrap();
    let now = edges_of_p1(&store, &users).await;
    assert_eq!(now.0, ["u2"]);
    drop(store);
    let store = Embedded::open_existing(dir.path()).unwrap();
    assert_eq!(
        edges_of_p1(&store, &users).await,
        now,
        "the unlike written in edges.db is kept"
    );
    assert_eq!(edges_in_main(dir.path()), 0);
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

/// A window's edge writes take no lock of `tally.db`, where the stream's puts, the counts and
/// the leases are written: with another connection holding `tally.db`'s write lock, they are
/// written at once (a wait for that lock would fail the call after 30 s, or the assertion).
#[tokio::test]
async fn edge_writes_take_no_lock_of_tally_db() {
    use tally_core::ports::{WindowRef, WindowWriter};
    use tally_core::seq::{Position, SeqNo};
    let (dir, store) = store(1);
    let other = rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let end = Position::whole(SeqNo::of_number(10));
    let w = WindowRef {
        app: "counter",
        shard_id: "shard-0",
        end: &end,
        held: false,
    };
    let started = std::time::Instant::now();
    let wrote = store
        .apply_edges(w, &[edge_event("u1", true, 1_796_000_000_000, "a")])
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

/// The edges' file commits at `synchronous = NORMAL`, and what depends on its edges is written
/// in `tally.db` only once they are durable (`edge_file`, "Durable in order"): a window's posts,
/// its rest and its checkpoint each first sync every edge commit made before them (each is
/// checked here as the first write after edges) — one synced
/// commit of `edges.db`, seen here as its `user_version` moving — and sync nothing when no edge
/// of their shard was written since (another shard's window syncs for its own). A handle's first
/// such write syncs once anyway: edges of a process before it may not be synced.
#[tokio::test]
async fn edges_are_synced_before_the_writes_that_depend_on_them() {
    use tally_conformance::window_at;
    use tally_core::dedup::DedupRecord;
    use tally_core::ports::{CountReader, Fence, ShardTally, WindowRest, WindowWriter};
    use tally_core::Position;
    /// Records the window of `fence`'s shard after `after` up to `end` as pending.
    async fn begin(e: &Embedded, fence: &Fence, after: Option<&Position>, end: &Position) {
        e.begin_window(fence, after, &end.seq, end, 1_000.into())
            .await
            .unwrap();
    }
    let (dir, e) = store(1);
    // The syncs of every part of the edges: each is synced at once.
    let parts = tally_embedded::edge_files(dir.path()).unwrap();
    assert_eq!(parts.len(), tally_embedded::NEW_STORE_PARTS);
    let syncs = || -> i64 {
        let each: Vec<i64> = parts
            .iter()
            .map(|p| {
                rusqlite::Connection::open(p)
                    .unwrap()
                    .pragma_query_value(None, "user_version", |r| r.get(0))
                    .unwrap()
            })
            .collect();
        assert!(
            each.iter().all(|v| *v == each[0]),
            "every part synced: {each:?}"
        );
        each[0]
    };
    let fence = tally_conformance::held_lease(&e, "counter", "shardId-000000000000").await;
    let dedup = DedupRecord {
        max_arrival: 1_000,
        ids: vec![],
    };
    let rest = WindowRest {
        dead_letters: &[],
        total_delta: 0,
        dedup: &dedup,
        horizon_ms: 1_000,
    };
    let mut checkpoint: Option<Position> = None;
    let mut seen = Vec::new();
    for (n, edges) in [
        // Edges, then posts (the handle's first sync), the rest, more edges, the checkpoint.
        vec![edge_event("u1", true, 10, "e1")],
        // No edge: nothing to sync.
        vec![],
        // Edges, then the checkpoint at once.
        vec![edge_event("u2", true, 20, "e2")],
    ]
    .into_iter()
    .enumerate()
    {
        let end = Position::parse(&format!("{}", 10 * (n + 1))).unwrap();
        begin(&e, &fence, checkpoint.as_ref(), &end).await;
        let at = window_at(&fence, &end);
        let mut step = Vec::new();
        if !edges.is_empty() {
            e.apply_edges(at, &edges).await.unwrap();
            step.push(("edges", syncs()));
        }
        if n == 0 {
            e.apply_posts(at, &[]).await.unwrap();
            step.push(("posts", syncs()));
            e.apply_edges(at, &[edge_event("u3", true, 30, "e3")])
                .await
                .unwrap();
            step.push(("more edges", syncs()));
        }
        if n < 2 {
            e.apply_rest(at, rest).await.unwrap();
            step.push(("rest", syncs()));
        }
        e.finish_window(&fence, &end, 1_000, false, &ShardTally::default(), None)
            .await
            .unwrap();
        step.push(("checkpoint", syncs()));
        checkpoint = Some(end);
        seen.push(step);
    }
    assert_eq!(
        seen,
        vec![
            vec![
                ("edges", 0),
                ("posts", 1),
                ("more edges", 1),
                ("rest", 2),
                ("checkpoint", 2)
            ],
            vec![("rest", 2), ("checkpoint", 2)],
            vec![("edges", 2), ("checkpoint", 3)],
        ],
        "edges are synced by the first write that depends on them, and only then"
    );
    assert_eq!(
        e.likers("p1", None, 10).await.unwrap().users,
        ["u1", "u2", "u3"]
    );
    // A window waits for its own shard's edges, not another's: shard 1's rest after shard 0's
    // edges syncs nothing, shard 0's own rest does.
    let other = tally_conformance::held_lease(&e, "counter", "shardId-000000000001").await;
    let (end, other_end) = (
        Position::parse("40").unwrap(),
        Position::parse("45").unwrap(),
    );
    begin(&e, &fence, checkpoint.as_ref(), &end).await;
    begin(&e, &other, None, &other_end).await;
    let at = window_at(&fence, &end);
    let other_at = window_at(&other, &other_end);
    e.apply_edges(at, &[edge_event("u4", true, 40, "e4")])
        .await
        .unwrap();
    e.apply_rest(other_at, rest).await.unwrap();
    assert_eq!(
        syncs(),
        3,
        "another shard's window does not wait for these edges"
    );
    e.apply_rest(at, rest).await.unwrap();
    assert_eq!(syncs(), 4, "their own window does");
    for (f, end) in [(&fence, &end), (&other, &other_end)] {
        e.finish_window(f, end, 1_000, false, &ShardTally::default(), None)
            .await
            .unwrap();
    }
    checkpoint = Some(end);
    // Another handle (another process, say) syncs before its first write of counts, though it
    // wrote no edge: one made before it may not be synced.
    let again = Embedded::open_existing(dir.path()).unwrap();
    let end = Position::parse("50").unwrap();
    begin(&again, &fence, checkpoint.as_ref(), &end).await;
    let at = window_at(&fence, &end);
    again.apply_rest(at, rest).await.unwrap();
    assert_eq!(syncs(), 5, "a handle's first write of counts syncs");
    again
        .finish_window(&fence, &end, 1_000, false, &ShardTally::default(), None)
        .await
        .unwrap();
    assert_eq!(syncs(), 5, "and only the first");
}

/// A store made now parts its likers' edges by post over `NEW_STORE_PARTS` files, written at
/// once: each post's edges all in the file `edge_file_of` names, every file holding some — and
/// the store reads as one: each post's likers, each edge, and a scan of every edge in pages of
/// a few (each edge once, in (post, user) order, across the files).
#[tokio::test]
async fn edges_are_parted_by_post_and_read_as_one_store() {
    use std::collections::BTreeMap;
    use tally_core::ports::{Consistency, CountReader, WindowWriter};
    use tally_core::Position;
    let (dir, e) = store(1);
    let fence = tally_conformance::held_lease(&e, "counter", "shardId-000000000000").await;
    let end = Position::parse("10").unwrap();
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
    let wrote = e
        .apply_edges(tally_conformance::window_at(&fence, &end), &edges)
        .await
        .unwrap();
    assert_eq!(wrote.applied.written as usize, edges.len());
    assert_eq!(wrote.transitions.len(), edges.len());
    assert!(wrote.retry.is_empty());

    // Where they are: each post's edges in its file, every file holding some.
    let files = tally_embedded::edge_files(dir.path()).unwrap();
    assert_eq!(files.len(), tally_embedded::NEW_STORE_PARTS);
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let conn = rusqlite::Connection::open(file).unwrap();
        let mut st = conn.prepare("SELECT post, user FROM edges").unwrap();
        let rows: Vec<(String, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
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
    // A store whose first part is gone, its second left.
    let dir = tempfile::tempdir().unwrap();
    drop(Embedded::open(dir.path(), 1).unwrap());
    remove_with_wal(&dir.path().join(tally_embedded::EDGES_FILE));
    let err = Embedded::open_existing(dir.path()).err().expect("refused");
    assert!(
        err.to_string()
            .contains("edges-1.db is left from another store's likers' edges"),
        "{err}"
    );
}

/// Edges in `tally.db` beside a store whose edges are parted (which only a version before parts
/// could write there) are refused, naming the file: moved into the first part they would be read
/// from the wrong part.
#[test]
fn edges_in_tally_db_beside_parted_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Embedded::open(dir.path(), 1).unwrap());
    rusqlite::Connection::open(dir.path().join(tally_embedded::DB_FILE))
        .unwrap()
        .execute(
            "INSERT INTO main.edges (post, user, liked, at_ms, event_id, window, history) \
             VALUES ('p1', 'u1', 1, 10, 'e1', '10@shard-0', x'')",
            [],
        )
        .unwrap();
    let err = Embedded::open_existing(dir.path()).err().expect("refused");
    assert!(
        err.to_string()
            .contains("tally.db holds likers' edges although its edges are parted over 2 files"),
        "{err}"
    );
}
