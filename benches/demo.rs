//! `cargo bench --bench demo [-- runs]`: `tally demo --events 1000000` beside its floor, in the
//! same run (issue 21, item 4). The floor is a bare loop doing what the demo must at least do to
//! the same SQLite file format: insert the same records (the same generator, seed and settings;
//! PutRecords batches of 500, one transaction each, appended to the embedded stream's `batches`
//! table as it does: one row per shard and put)
//! and write as many summary items as the demo's counter wrote (the demo's `store_writes`, one
//! row of a live item's size each, a window's items per transaction) — no reading, folding,
//! checking or concurrency. The ratio is what tally adds on top of SQLite. `-- stages`: the
//! demo's parts one after another, each alone, to say where its time goes, and the likers
//! counter's edge writes at their floor (`edge_floor`: one SQLite writer, and two over two files).

use std::process::Command;
use std::time::Instant;

use rusqlite::{params, Connection};
use tally::settings::Settings;
use tally_producer::generate::Generator;

const EVENTS: u64 = 1_000_000;

/// What one demo run reported.
struct Demo {
    elapsed: f64,
    records: u64,
    store_writes: u64,
    windows: u64,
    exact: bool,
}

/// Runs `tally ARGS` on the data dir `dir` counting `count`, which must succeed; its stdout.
fn tally(dir: &std::path::Path, count: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_tally"))
        .env("TALLY_COUNTER__COUNT", count)
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("tally runs");
    assert!(
        out.status.success(),
        "tally {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn demo(count: &str) -> Demo {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = tally(
        dir.path(),
        count,
        &["demo", "--events", &EVENTS.to_string(), "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out).expect("demo --json");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in the report"));
    Demo {
        elapsed: v["elapsed_secs"].as_f64().expect("elapsed_secs"),
        records: n("records"),
        store_writes: n("store_writes"),
        windows: n("windows"),
        exact: v["exact"].as_bool() == Some(true),
    }
}

/// The baseline of issue 34: one core decoding the demo's records with serde (`LikeEvent`, as
/// `cargo bench --bench core`'s `bare_serde_decode`), the best of three passes, in seconds.
fn serde_decode(count: &str) -> (f64, usize) {
    let settings = demo_settings(count);
    let records: Vec<Vec<u8>> = Generator::new(settings.gen_config(EVENTS))
        .map(|(_, e)| e.data)
        .collect();
    let mut best = f64::MAX;
    let mut decoded = 0;
    for _ in 0..3 {
        let started = Instant::now();
        decoded = records
            .iter()
            .filter(|d| serde_json::from_slice::<tally_core::event::LikeEvent>(d).is_ok())
            .count();
        best = best.min(started.elapsed().as_secs_f64());
    }
    (best, decoded)
}

/// The layout before (issue 34): the same records appended one SQLite row each, with the index
/// on (shard, sequence number) it had — in the same run, what the batches save. Seconds.
fn per_record_floor(count: &str) -> f64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut conn = Connection::open(dir.path().join("per-record.db")).expect("open");
    tally_embedded::journal(&conn).expect("the store's journal settings");
    conn.execute_batch(
        "CREATE TABLE records (seq INTEGER PRIMARY KEY AUTOINCREMENT, shard_id TEXT NOT NULL,
           arrival_ms INTEGER NOT NULL, partition_key TEXT NOT NULL, data BLOB NOT NULL);
         CREATE INDEX records_by_shard ON records(shard_id, seq);",
    )
    .expect("the old table");
    let shards = ["s0", "s1", "s2", "s3"];
    let started = Instant::now();
    let mut gen = Generator::new(demo_settings(count).gen_config(EVENTS))
        .map(|(_, e)| e)
        .peekable();
    while gen.peek().is_some() {
        let tx = conn.transaction().expect("begin");
        {
            let mut ins = tx
                .prepare_cached("INSERT INTO records (shard_id, arrival_ms, partition_key, data) VALUES (?1, ?2, ?3, ?4)")
                .expect("prepare");
            for e in gen.by_ref().take(500) {
                let shard = shards[e.partition_key.len() % shards.len()];
                ins.execute(params![shard, 0, e.partition_key, e.data])
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    started.elapsed().as_secs_f64()
}

/// The demo's settings: 2 % producer retries, 0.1 % malformed records, counting `count`.
fn demo_settings(count: &str) -> Settings {
    let mut settings = Settings::default().for_demo(false, false);
    if count == "events" {
        settings.counter.count = tally_core::edge::CountMode::Events;
    }
    settings
}

/// The floor's two parts, in seconds: appending the records, writing the items.
fn floor(demo: &Demo, count: &str) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("temp dir");
    // The embedded store's own schema, journal mode, durability and checkpoint interval.
    drop(tally_embedded::Embedded::open(dir.path(), 4).expect("store"));
    let mut conn = Connection::open(dir.path().join(tally_embedded::DB_FILE)).expect("open");
    tally_embedded::journal(&conn).expect("the store's journal settings");
    let settings = demo_settings(count);
    let shards = [
        "shardId-000000000000",
        "shardId-000000000001",
        "shardId-000000000002",
        "shardId-000000000003",
    ];
    let started = Instant::now();
    let mut put = 0u64;
    let mut gen = Generator::new(settings.gen_config(EVENTS))
        .map(|(_, e)| e)
        .peekable();
    let mut next_seq = 1i64;
    while gen.peek().is_some() {
        let tx = conn.transaction().expect("begin");
        {
            let mut ins = tx
                .prepare_cached("INSERT INTO batches (shard_id, last_seq, first_seq, arrival_ms, records) VALUES (?1, ?2, ?3, ?4, ?5)")
                .expect("prepare");
            // A put of 500 records: one batch row per shard, as the embedded stream appends.
            let mut blobs: [(Vec<u8>, i64); 4] = Default::default();
            for e in gen.by_ref().take(500) {
                let s = e.partition_key.len() % shards.len();
                tally_embedded::batch::push(&mut blobs[s].0, &e.partition_key, &e.data);
                blobs[s].1 += 1;
                put += 1;
            }
            for (s, (blob, n)) in blobs.iter().enumerate() {
                if *n > 0 {
                    let first = next_seq;
                    next_seq += n;
                    ins.execute(params![shards[s], next_seq - 1, first, put as i64, blob])
                        .expect("insert");
                }
            }
        }
        tx.commit().expect("commit");
    }
    let records = started.elapsed().as_secs_f64();
    assert_eq!(put, demo.records, "the floor puts the demo's records");
    // A live item as the counter writes it: a total, a marker and a few minute buckets.
    let attrs = r#"{"n":1234,"w":"49624003411233431409471946373117313286371224017011490818","hk":"p123","m00":12,"m01":7,"m02":3}"#;
    let per_window = demo.store_writes.div_ceil(demo.windows.max(1));
    let started = Instant::now();
    let mut written = 0u64;
    while written < demo.store_writes {
        let tx = conn.transaction().expect("begin");
        {
            let mut up = tx
                .prepare_cached("INSERT OR REPLACE INTO items (pk, sk, attrs) VALUES (?1, ?2, ?3)")
                .expect("prepare");
            for _ in 0..per_window.min(demo.store_writes - written) {
                let pk = format!("p{}", written % 1000);
                let sk = format!("L#{}", shards[(written / 1000) as usize % shards.len()]);
                up.execute(params![pk, sk, attrs]).expect("write");
                written += 1;
            }
        }
        tx.commit().expect("commit");
    }
    (records, started.elapsed().as_secs_f64())
}

/// An edge row as `edge_floor` reads and writes it: the `edges` table's columns in order.
type EdgeRowCols = (String, String, i64, i64, Vec<u8>);

/// The likers counter's writing floor: the edge rows the counter left in `counted` (its store
/// after `count --until-idle`), in key order (post, then user, as a window writes them),
/// inserted into a fresh store of the same schema with the store's own statement and batch
/// (`WindowWriter::posts_per_call` rows a transaction) — no change log, no checkpoint, nothing
/// else running. A lower bound for the counter's edge writes: it also reads, folds, decides
/// each edge and logs each change. Timed twice: on one thread into one file (the store's one
/// writer), and parted by post over two files written at once on two threads (what edges in
/// files of their own allow on this machine's two cores). Seconds, seconds, rows.
fn edge_floor(counted: &std::path::Path) -> (f64, f64, usize) {
    let mut rows: Vec<EdgeRowCols> = Vec::new();
    for part in tally_embedded::edge_files(counted).expect("the counted store's edge files") {
        let src = Connection::open(part).expect("the counted store");
        let part_rows = src
            .prepare("SELECT post, user, liked, at_ms, event_id FROM edges")
            .expect("prepare")
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .expect("read the edges")
            .collect::<Result<Vec<EdgeRowCols>, _>>()
            .expect("edges");
        rows.extend(part_rows);
    }
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let one = write_bare(&[rows.iter().collect()]);
    let mut parts: [Vec<&EdgeRowCols>; 2] = [Vec::new(), Vec::new()];
    for r in &rows {
        parts[(tally_core::hashing::hash_key(&r.0) % 2) as usize].push(r);
    }
    let two = write_bare(&parts);
    (one, two, rows.len())
}

/// Writes each part of `parts` into a fresh store of its own, each on a thread of its own, all
/// at once, as `edge_floor` says: the seconds from the first thread's start to the last's end.
fn write_bare(parts: &[Vec<&EdgeRowCols>]) -> f64 {
    use tally_core::ports::WindowWriter;
    let dirs: Vec<_> = parts
        .iter()
        .map(|_| tempfile::tempdir().expect("temp dir"))
        .collect();
    let mut conns = Vec::new();
    let mut per_tx = 0;
    for dir in &dirs {
        let store = tally_embedded::Embedded::open(dir.path(), 4).expect("store");
        per_tx = store.posts_per_call();
        drop(store);
        let conn = Connection::open(dir.path().join(tally_embedded::EDGES_FILE)).expect("open");
        tally_embedded::journal(&conn).expect("the store's journal settings");
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no checkpoints");
        conns.push(conn);
    }
    let started = Instant::now();
    std::thread::scope(|s| {
        for (mut conn, rows) in conns.into_iter().zip(parts) {
            s.spawn(move || {
                for batch in rows.chunks(per_tx) {
                    let tx = conn.transaction().expect("begin");
                    {
                        let mut ins = tx
                            .prepare_cached(tally_embedded::INSERT_EDGE_SQL)
                            .expect("prepare");
                        for r in batch {
                            ins.execute(params![r.0, r.1, r.2, r.3, r.4])
                                .expect("insert");
                        }
                    }
                    tx.commit().expect("commit");
                }
            });
        }
    });
    started.elapsed().as_secs_f64()
}

/// Runs `tally ARGS` on `dir` counting `count`; its wall time in seconds.
fn timed(dir: &std::path::Path, count: &str, args: &[&str]) -> f64 {
    let started = Instant::now();
    tally(dir, count, args);
    started.elapsed().as_secs_f64()
}

/// How many times more each counter counts its produced store alone, after `-- stages`' first
/// run, the two counters taking turns: one run of each is within this machine's noise of the
/// other (the likers counter took 2.28 s and 2.52 s in two runs of one build).
const RECOUNTS: usize = 2;

/// `-- stages`: where the demo's time goes. The demo's three parts run one after another on a
/// fresh data dir, each alone on the machine — `tally produce` (generate, encode, append), `tally
/// count --until-idle` (read, decode, drop retries, fold, write: the edges too, counting likers),
/// `tally analytics --until-idle` (read, decode, sketches) — beside the demo itself (the three at
/// once, then every post checked) and the serde decode, in the same run. Then each counter again
/// on a copy of the store it was given, taking turns ([`RECOUNTS`]), and the two compared by
/// their medians.
fn stages() {
    println!("where `tally demo --events {EVENTS}` spends its time: its parts one after another, each alone, beside the demo and one core's serde decode of the same records");
    println!("| counting | demo | produce | count --until-idle | analytics --until-idle | parts in sequence | serde decode | count / decode |");
    println!("|---|---|---|---|---|---|---|---|");
    let events = EVENTS.to_string();
    let mut produced = Vec::new();
    for count in ["events", "likers"] {
        let d = demo(count);
        let dir = tempfile::tempdir().expect("temp dir");
        timed(dir.path(), count, &["setup", "--shards", "4"]);
        let produce = timed(dir.path(), count, &produce_args(&events));
        let store = tempfile::tempdir().expect("temp dir");
        copy_store(dir.path(), store.path());
        let counted = timed(dir.path(), count, &["count", "--until-idle"]);
        let floor = (count == "likers").then(|| edge_floor(dir.path()));
        let analytics = timed(dir.path(), count, &["analytics", "--until-idle"]);
        let (decode, _) = serde_decode(count);
        println!(
            "| {count} | {:.2} s | {produce:.2} s | {counted:.2} s | {analytics:.2} s | {:.2} s | {decode:.3} s | {:.1}× |",
            d.elapsed,
            produce + counted + analytics,
            counted / decode
        );
        produced.push((count, store, vec![counted], floor));
    }
    for _ in 0..RECOUNTS {
        for (count, store, runs, _) in &mut produced {
            let dir = tempfile::tempdir().expect("temp dir");
            copy_store(store.path(), dir.path());
            runs.push(timed(dir.path(), count, &["count", "--until-idle"]));
        }
    }
    if let [(_, _, events, _), (_, _, likers, Some((floor, floor_two, rows)))] = &produced[..] {
        let (events, likers) = (median(events), median(likers));
        println!();
        println!("each counter alone on a copy of its produced store, {} runs each taking turns: the likers counter's edge writes at their floor (the rows it wrote, inserted bare: the store's statement and batch, no checkpoints) on one thread into one file, and parted by post over two files written at once on two threads", RECOUNTS + 1);
        println!("| events counter (median) | likers counter (median) | likers / events | edge rows | edge rows written bare | bare rows / events counter | two files, two threads | two / one |");
        println!("|---|---|---|---|---|---|---|---|");
        println!(
            "| {events:.2} s ({}) | {likers:.2} s ({}) | {:.1}× | {rows} | {floor:.2} s ({:.2} µs a row) | {:.2}× | {floor_two:.2} s | {:.2}× |",
            runs_of(&produced[0].2),
            runs_of(&produced[1].2),
            likers / events,
            floor * 1e6 / *rows as f64,
            floor / events,
            floor_two / floor
        );
    }
}

/// `tally produce`'s arguments for the demo's records (its generator's settings and seed).
fn produce_args(events: &str) -> Vec<&str> {
    vec![
        "produce",
        "--events",
        events,
        "--posts",
        "1000",
        "--zipf",
        "1.1",
        "--duplicate-ratio",
        "0.02",
        "--malformed-ratio",
        "0.001",
        "--seed",
        "1",
    ]
}

/// Copies a data dir no process has open: its files as they are (a WAL beside its file too).
fn copy_store(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("the store's dir") {
        let entry = entry.expect("a file of the store");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copied");
    }
}

/// The middle of the runs (the mean of the two middle ones for an even number).
fn median(runs: &[f64]) -> f64 {
    let mut sorted = runs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() % 2 {
        0 => (sorted[mid - 1] + sorted[mid]) / 2.0,
        _ => sorted[mid],
    }
}

/// Runs' seconds as a list: "1.21, 1.18, 1.25 s".
fn runs_of(runs: &[f64]) -> String {
    let each: Vec<String> = runs.iter().map(|r| format!("{r:.2}")).collect();
    format!("{} s", each.join(", "))
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::args().any(|a| a == "stages") {
        return stages();
    }
    let runs: usize = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(3);
    println!("tally demo --events {EVENTS} (embedded, defaults) beside one core decoding the same records with serde, and beside the floor: the same records appended and as many items written, bare SQLite, one thread");
    println!(
        "| run | counting | demo | serde decode | demo / decode | floor (records + items) | records one row each | records | items written | exact |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for run in 1..=runs {
        for count in ["events", "likers"] {
            let d = demo(count);
            let (decode, decoded) = serde_decode(count);
            let (records, items) = floor(&d, count);
            let one_row_each = per_record_floor(count);
            let f = records + items;
            println!(
                "| {run} | {count} | {:.2} s | {decode:.3} s ({:.2} M records/s) | **{:.1}×** | {f:.2} s ({records:.2} + {items:.2}) | {one_row_each:.2} s | {} | {} | {} |",
                d.elapsed,
                decoded as f64 / decode / 1e6,
                d.elapsed / decode,
                d.records,
                d.store_writes,
                if d.exact { "yes" } else { "NO" }
            );
        }
    }
}
