//! `cargo bench --bench verify [-- RECORDS...]` (`VERIFY_BUDGETS=none,512,128`, MiB): the memory and time of `tally verify`'s recount
//! at 1,000,000 and 10,000,000 records (issue 42, item 6), beside its baselines in the same run:
//! the recount in one pass with no budget (what verify held before it had one) and the bare
//! decode of the same records (the floor of any pass).
//!
//! The records are the demo's (its generator counting likers: Zipf posts, no-op taps, unlikes,
//! producer retries, malformed records) over four shards, written once to a file and read from
//! it by each pass, as `verify --from` reads a recording. Memory is the recount's peak heap,
//! measured by a counting allocator around each run (the file's reader and the generator are
//! not in it), beside the budget it was given. Run: `cargo bench --bench verify` (a test build of
//! it exits at once).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tally::settings::Settings;
use tally_core::ports::ShardInfo;
use tally_core::seq::{Position, SeqNo};
use tally_producer::generate::Generator;
use tally_verify::partition::Part;
use tally_verify::recount::{Recount, Row};

/// Counts the heap in use and its peak since the last reset.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout is passed through to the system allocator unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const SHARDS: usize = 4;
const MIB: usize = 1 << 20;

fn main() {
    // `cargo test --all-targets` builds and runs benches as tests: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000_000, 10_000_000]
    } else {
        sizes
    };
    let dir = tempfile::tempdir().expect("temp dir");
    println!(
        "{:>10} {:>9} {:>6} {:>8} {:>9} {:>10} {:>10} {:>12}",
        "records", "budget", "passes", "secs", "per pass", "decode s", "peak MiB", "global total"
    );
    for n in sizes {
        let file = dir.path().join(format!("records-{n}.bin"));
        let written = write_records(&file, n);
        let decode = bare_decode(&file);
        let mut totals = Vec::new();
        for budget in budgets() {
            let run = recount(&file, budget);
            totals.push(run.total);
            println!(
                "{:>10} {:>9} {:>6} {:>8.1} {:>9.1} {:>10.1} {:>10.0} {:>12}",
                written,
                budget.map_or("none".to_owned(), |b| format!("{}MiB", b / MIB)),
                run.passes,
                run.secs,
                run.secs / run.passes as f64,
                decode,
                run.peak as f64 / MIB as f64,
                run.total
            );
        }
        assert!(
            totals.windows(2).all(|w| w[0] == w[1]),
            "the passes recounted another total: {totals:?}"
        );
    }
}

/// The budgets to run with (MiB; `none`: one pass, no budget), from `VERIFY_BUDGETS`.
fn budgets() -> Vec<Option<usize>> {
    std::env::var("VERIFY_BUDGETS")
        .unwrap_or_else(|_| "none,512,128".into())
        .split(',')
        .map(|b| match b.trim() {
            "none" => None,
            n => Some(n.parse::<usize>().expect("VERIFY_BUDGETS: MiB or none") * MIB),
        })
        .collect()
}

/// The demo's records (counting likers) for `n` events, each with its shard, sequence number and
/// arrival, written to `path`; how many records.
fn write_records(path: &Path, n: u64) -> u64 {
    let settings = Settings::default().for_demo(false, false);
    let mut clock = 1_700_000_000_000i64;
    let gen = Generator::new(settings.gen_config(n)).with_clock(move || {
        clock += 3;
        clock
    });
    let mut out = BufWriter::new(std::fs::File::create(path).expect("records file"));
    let mut seq = [0u64; SHARDS];
    let mut written = 0;
    for (_, e) in gen {
        // As Kinesis routes it: four even hash ranges of the key's MD5.
        let shard = (tally_core::hashing::hash_key(&e.partition_key) >> 126) as u8;
        seq[shard as usize] += 1;
        // Arrival about when created (every fifth a little later).
        let arrival = 1_700_000_000_000i64 + written as i64 * 3 + (written % 5) as i64 * 40;
        out.write_all(&[shard]).expect("write");
        out.write_all(&seq[shard as usize].to_le_bytes())
            .expect("write");
        out.write_all(&arrival.to_le_bytes()).expect("write");
        out.write_all(&(e.data.len() as u32).to_le_bytes())
            .expect("write");
        out.write_all(&e.data).expect("write");
        written += 1;
    }
    out.flush().expect("flush");
    written
}

/// Each record of the file: its shard, sequence number, arrival and bytes.
fn each_record(path: &Path, mut f: impl FnMut(usize, u64, i64, &[u8])) {
    let mut r = BufReader::with_capacity(1 << 20, std::fs::File::open(path).expect("open"));
    let mut head = [0u8; 21];
    let mut data = Vec::new();
    loop {
        match r.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return,
            Err(e) => panic!("reading records: {e}"),
        }
        let shard = head[0] as usize;
        let seq = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
        let arrival = i64::from_le_bytes(head[9..17].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(head[17..21].try_into().expect("4 bytes")) as usize;
        data.resize(len, 0);
        r.read_exact(&mut data).expect("a record's bytes");
        f(shard, seq, arrival, &data);
    }
}

/// The floor: one read of the file, each record decoded (seconds).
fn bare_decode(path: &Path) -> f64 {
    let started = Instant::now();
    let mut decoded = 0u64;
    each_record(path, |_, _, _, d| {
        if serde_json::from_slice::<tally_core::event::LikeEvent>(d).is_ok() {
            decoded += 1;
        }
    });
    std::hint::black_box(decoded);
    started.elapsed().as_secs_f64()
}

struct Run {
    passes: usize,
    secs: f64,
    peak: usize,
    total: i64,
}

/// The recount of every record (all applied), in as many passes as `budget` needs.
fn recount(path: &Path, budget: Option<usize>) -> Run {
    let names: Vec<String> = (0..SHARDS).map(|i| format!("shardId-{i:012}")).collect();
    let shards: Vec<ShardInfo> = names
        .iter()
        .map(|s| ShardInfo {
            shard_id: s.clone(),
            parents: Vec::new(),
            closed: false,
        })
        .collect();
    let rows: HashMap<String, Row> = names
        .iter()
        .map(|s| {
            let row = Row {
                checkpoint: Some(Position::whole(SeqNo::parse("99999999999").expect("seq"))),
                finished: false,
            };
            (s.clone(), row)
        })
        .collect();
    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let started = Instant::now();
    let (mut part, mut passes, mut total) = (Part::ALL, 0, 0);
    loop {
        let mut r = Recount::of(tally_core::edge::CountMode::Likers, 0, &shards, &rows).within(
            part,
            budget.unwrap_or(usize::MAX),
            passes == 0,
        );
        each_record(path, |shard, seq, arrival, data| {
            let seq = SeqNo::parse(&seq.to_string()).expect("seq");
            r.record(&names[shard], &seq, arrival, data);
        });
        r.finish();
        passes += 1;
        total += r.total();
        let next = r.part().next();
        drop(r);
        match next {
            Some(p) => part = p,
            None => break,
        }
    }
    Run {
        passes,
        secs: started.elapsed().as_secs_f64(),
        peak: PEAK.load(Ordering::Relaxed) - base,
        total,
    }
}
