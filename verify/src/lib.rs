//! `tally verify`: recount the stream (or a recording) with [`recount`] and compare every post's
//! count, its counts since a few times, the global total and the dead letters with the store.
//! Read-only: no lease is taken and nothing is written, so it runs beside the counter.
//!
//! Like is compared with like: each shard is recounted up to the counter's checkpoint as listed
//! before reading. A record after it that the counter applies while the check runs shows in the
//! post's summary marker (its live item names the last window applied, per shard), so a post is
//! compared with the records its summary says it holds. What cannot be compared is said: a post
//! the counter applied records to that this check did not read, shards that moved while the
//! global total was read, records the stream no longer has, gaps.
//!
//! Memory is bounded whatever the stream's size (`--memory-mb`): the recount reads the records
//! in passes over a partition of the posts ([`partition`]), each compared as it ends.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod partition;
mod posts;
pub mod recount;
mod rest;
mod source;
mod tail;

use posts::{check_posts, moved, settle, InFlight, OffPost};
use rest::{compare_edges, compare_letters, compare_total, Moves};

use std::collections::{BTreeSet, HashMap, HashSet};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;
use tally_core::apps;
use tally_core::buckets::MINUTE_MS;
use tally_core::edge::CountMode;
use tally_core::ports::{
    Consistency, CountReader, CounterStore, DeadLetterReader, LeaseReader, PostCount, ShardInfo,
    ShardState, Stream, MAX_POSTS_PER_CALL,
};
use tally_core::progress::Progress;
use tally_core::seq::{Position, SeqNo};
use tally_core::summary::marker;

use self::partition::Part;
use self::recount::{Minute, Recount, Row};
use tally_recording::rfc3339;

/// What a verify reads: the stream, the store and the counter's checkpoints. Nothing is
/// written.
#[derive(Clone, Copy)]
pub struct Ports<'a> {
    pub stream: &'a dyn Stream,
    pub counter: &'a dyn CounterStore,
    pub leases: &'a dyn LeaseReader,
}

/// A drift: the store's count beside the recount's (a range when late copies leave it open).
#[derive(Clone, Debug, Serialize)]
pub struct Drift {
    pub post_id: String,
    /// `null` for the total, else the minute (ms) "since" starts at.
    pub since_ms: Option<i64>,
    pub store: i64,
    pub recount: i64,
    /// The recount's upper bound, when late copies leave it open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recount_up_to: Option<i64>,
    pub off_by: i64,
}

/// A dead letter that should be there and is not, or one that should not be there.
#[derive(Clone, Debug, Serialize)]
pub struct LetterDrift {
    pub shard_id: String,
    pub position: String,
}

/// What a verify found: the store beside the recount, and what it could not check.
#[derive(Default, Serialize)]
pub struct Report {
    source: String,
    shards: usize,
    records_read: u64,
    recount: recount::Tally,
    posts_checked: usize,
    posts_off: usize,
    since_ms: Vec<i64>,
    drifts: Vec<Drift>,
    global_total: serde_json::Value,
    dead_letters: serde_json::Value,
    /// Likers: a sample of edges, the store's state beside the recount's.
    edges: serde_json::Value,
    /// What this check could not compare, and why.
    not_checked: Vec<String>,
    /// DynamoDB read units of the count reads (strongly consistent).
    read_units: u64,
    store_calls: u64,
    /// The passes the recount read the records in, and the memory each may hold.
    passes: usize,
    memory_budget: String,
    /// One post's likers (counting events, its events) alone held more than the budget.
    over_budget: bool,
    /// The global total, the dead letters or a sampled edge is off (the posts' drifts are in
    /// `posts_off`).
    #[serde(skip)]
    rest_off: bool,
}

/// What a verify recounts and how much memory it may hold: what `tally verify`'s flags say.
#[derive(Clone, Debug, Default)]
pub struct VerifyConfig {
    /// A recording to recount instead of the stream.
    pub from: Option<std::path::PathBuf>,
    /// "Since" times to compare beside the totals (ms since the epoch), each at its minute.
    pub since: Vec<i64>,
    /// The most memory the recount holds (bytes): past it, it reads the records again in passes.
    pub memory: u64,
    /// What the store was counted by.
    pub rule: Rule,
}

/// A verify's outcome: its report, and whether anything is off.
pub struct Verified {
    /// What it found.
    pub report: Report,
    /// A post, the global total, a dead letter or a sampled edge is off.
    pub off: bool,
}

impl Verified {
    /// Prints the report (JSON, or text with up to `show` drifts) and fails with [`Drifted`]
    /// when something is off: `tally verify`'s exit status.
    pub fn print(&self, json: bool, show: usize) -> Result<()> {
        if json {
            println!("{}", serde_json::to_string_pretty(&self.report)?);
        } else {
            print_text(&self.report, show);
        }
        if self.off {
            return Err(Drifted.into());
        }
        Ok(())
    }
}

/// Recounts the stream (or a recording) apart from the counter and compares the store with it:
/// what `tally verify` runs, callable from a program or a test.
pub async fn check(b: Ports<'_>, a: &VerifyConfig, pb: &dyn Progress) -> Result<Verified> {
    let app = apps::COUNTER;
    let before = states(b, app).await?;
    let rows: HashMap<String, Row> = before
        .iter()
        .map(|(k, v)| {
            let row = Row {
                checkpoint: v.lease.checkpoint.clone(),
                finished: v.lease.finished,
            };
            (k.clone(), row)
        })
        .collect();
    let mut report = Report {
        memory_budget: bytesize::ByteSize(a.memory).to_string(),
        ..Report::default()
    };
    // What the store claimed it counts decides; the caller's mode only where it claimed none.
    let stored = b.counter.stored_mode().await?;
    let rule = &Rule {
        mode: stored.unwrap_or(a.rule.mode),
        ..a.rule.clone()
    };
    // Counting likers, the changes of the edges not counted yet (the counter's second stage
    // reads them after its checkpoints): what the counts lag the edges by.
    let tail = match rule.mode.keeps_edges() {
        true => Some(tail::LogTail::read(b).await?),
        false => None,
    };
    if let Some(t) = &tail {
        if t.changes > 0 {
            report.not_checked.push(format!(
                "{} changes of the edges were not counted yet (the counter's second stage is \
                 behind): each post is compared with them added",
                t.changes
            ));
        }
    }
    let source = match &a.from {
        Some(f) => {
            report.source = f.display().to_string();
            Source::Recording(source::Recording::open(f)?)
        }
        None => {
            report.source = "the stream".into();
            Source::Stream
        }
    };
    let since = since_times(tally_core::clock::now_ms(), &a.since);
    report.since_ms = since.clone();

    let pending: HashSet<String> = before
        .iter()
        .filter(|(_, s)| s.pending.is_some())
        .map(|(shard, _)| shard.clone())
        .collect();
    let recounted = Checked {
        tail: tail.as_ref(),
        pending: &pending,
        rule,
        source: &source,
        rows: &rows,
        before: &before,
        since: &since,
        budget: usize::try_from(a.memory).unwrap_or(usize::MAX),
    }
    .passes(b, pb, &mut report)
    .await?;
    // Read between two listings: a window that adds to it moves a checkpoint (or leaves one
    // pending) that the second listing then shows.
    let total = b
        .counter
        .global_total()
        .await
        .context("reading the global total")?;
    report.store_calls += 1;
    let after = states(b, app).await?;
    // The changes not counted yet were read before the total: a window of the second stage
    // applied meanwhile (or pending) would be in both.
    let second_stage_moved = match &tail {
        Some(t) => {
            let now = states(b, apps::CHANGES).await?;
            t.states
                .keys()
                .chain(now.keys())
                .any(|s| moved(&t.states, &now, s))
        }
        None => false,
    };
    let total = total + tail.as_ref().map_or(0, |t| t.total);
    compare_total(
        total,
        &recounted,
        Moves {
            before: &before,
            after: &after,
            second_stage_moved,
        },
        &mut report,
    );
    report
        .drifts
        .sort_by_key(|d| std::cmp::Reverse(d.off_by.abs()));

    let off = report.posts_off > 0 || report.rest_off;
    Ok(Verified { report, off })
}

/// Where the records are read from, once per pass.
enum Source {
    Stream,
    Recording(source::Recording),
}

/// The keys one pass recounts, the memory it may hold, and whether it is the first (which also
/// keeps what is not partitioned by post: the malformed records, the sampled edges).
#[derive(Clone, Copy, Debug)]
pub struct Pass {
    pub part: Part,
    pub budget: usize,
    pub first: bool,
}

/// What the passes together recounted, for the global total.
#[derive(Default)]
struct Recounted {
    total: i64,
    late_copies: u64,
    /// The first and last position read per shard (by the last pass).
    read: HashMap<String, (Position, Position)>,
}

/// One verify's recount, read in passes and compared pass by pass.
struct Checked<'a> {
    tail: Option<&'a tail::LogTail>,
    /// The shards with a window being applied as the check began.
    pending: &'a HashSet<String>,
    rule: &'a Rule,
    source: &'a Source,
    rows: &'a HashMap<String, Row>,
    before: &'a HashMap<String, ShardState>,
    since: &'a [i64],
    budget: usize,
}

impl Checked<'_> {
    /// Reads the records once per pass until the passes cover every post, comparing each
    /// pass's posts with the store as it ends.
    async fn passes(
        &self,
        b: Ports<'_>,
        pb: &dyn Progress,
        report: &mut Report,
    ) -> Result<Recounted> {
        let mut split = HashMap::new();
        let mut first_read = None;
        let mut out = Recounted::default();
        let mut pass = Pass {
            part: Part::ALL,
            budget: self.budget,
            first: true,
        };
        loop {
            let mut r = self.read(b, pass, pb, report).await?;
            r.finish();
            report.passes += 1;
            report.over_budget |= r.over_budget;
            failpoint_pause(report.passes).await;
            let in_flight = self.tail.map(|tail| InFlight {
                tail,
                pending: self.pending,
            });
            let drifted =
                check_posts(b.counter, &r, in_flight, self.since, &mut split, report).await?;
            let after = states(b, apps::COUNTER).await?;
            // Counting likers, a count's markers are the change log's, not the stream's: a post
            // drifted by a record the counter applied that no pass read is told apart by reading
            // on from where the first pass stopped (each pass reads further) to how far the
            // counter can have applied.
            let first_read = first_read.get_or_insert_with(|| r.read.clone());
            let unread = match (self.tail, drifted.is_empty()) {
                (Some(_), false) => {
                    let posts: HashSet<&str> = drifted.iter().map(OffPost::post).collect();
                    let (input, bounds) = (&self.rule.input, applied_bounds(&after));
                    let range = (&*first_read, &bounds);
                    source::records_read_after(b.stream, input, range, &posts).await?
                }
                _ => HashMap::new(),
            };
            settle(drifted, (self.before, &after), &unread, report);
            if pass.first {
                report.recount = r.tally.clone();
                report.shards = r.read.len();
                report.records_read = r.tally.records;
                compare_letters(b.counter, &r, report).await?;
            } else {
                let (t, p) = (&mut report.recount, &r.tally);
                t.counted += p.counted;
                t.duplicates += p.duplicates;
                t.late_copies += p.late_copies;
                t.beyond_checkpoint += p.beyond_checkpoint;
            }
            let recording = matches!(self.source, Source::Recording(_));
            compare_edges(b, (&r, recording), self.before, &after, report).await?;
            out.total += r.total();
            out.late_copies += r.tally.late_copies;
            out.read = std::mem::take(&mut r.read);
            match r.part().next() {
                Some(part) => {
                    pass = Pass {
                        part,
                        budget: self.budget,
                        first: false,
                    }
                }
                None => return Ok(out),
            }
        }
    }

    /// One pass over the records.
    async fn read(
        &self,
        b: Ports<'_>,
        pass: Pass,
        pb: &dyn Progress,
        report: &mut Report,
    ) -> Result<Recount> {
        match self.source {
            Source::Recording(f) => {
                let (r, anchors) = source::read_recording(f, self.rule, pass, self.rows, pb)?;
                if pass.first {
                    anchors.check(&f.name, b.stream, self.rows, &r.read).await?;
                }
                Ok(r)
            }
            Source::Stream => {
                let (r, notes) =
                    source::read_stream(b.stream, self.rule, pass, self.rows, pb).await?;
                if pass.first {
                    report.not_checked.extend(notes);
                }
                Ok(r)
            }
        }
    }
}

/// Tests only: each pass waits, between reading the records and reading the counts, until the
/// file this names exists, so that a test can put and count a like in between. Not a setting.
pub const PAUSE_VAR: &str = "TALLY_FAILPOINT_VERIFY_WAIT_FOR";

async fn failpoint_pause(pass: usize) {
    let Some(file) = std::env::var_os(PAUSE_VAR) else {
        return;
    };
    eprintln!("failpoint: verify paused after reading pass {pass}");
    while !std::path::Path::new(&file).exists() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The store does not hold what the stream says: exit status 1, after the report.
#[derive(Debug, thiserror::Error)]
#[error("the store's counts are not the recount's (above)")]
pub struct Drifted;

/// Per shard, the last record the counter can have applied: its checkpoint, or the end of the
/// window it is applying.
fn applied_bounds(states: &HashMap<String, ShardState>) -> HashMap<String, SeqNo> {
    let bound = |s: &ShardState| {
        let pending = s.pending.as_ref().map(|p| &p.end);
        Some(s.lease.checkpoint.as_ref().max(pending)?.seq.clone())
    };
    states
        .iter()
        .filter_map(|(shard, s)| Some((shard.clone(), bound(s)?)))
        .collect()
}

async fn states(b: Ports<'_>, app: &str) -> Result<HashMap<String, ShardState>> {
    Ok(b.leases
        .list_states(app)
        .await
        .context("listing the counter's checkpoints")?
        .into_iter()
        .map(|s| (s.lease.shard_id.clone(), s))
        .collect())
}

/// What the recount counts by, and what the records are.
#[derive(Clone, Debug, Default)]
pub struct Rule {
    /// What the store counts where it has claimed nothing yet (`counter.count`); a mode it
    /// claimed decides.
    pub mode: CountMode,
    /// Counting events, a copy is recognised within this dedup horizon (ms:
    /// `counter.dedup_horizon`).
    pub horizon_ms: i64,
    /// What the records are (`input`, `regions`).
    pub input: tally_core::input::Input,
}

impl Rule {
    pub(crate) fn recount(
        &self,
        shards: &[ShardInfo],
        rows: &HashMap<String, Row>,
        pass: Pass,
    ) -> Recount {
        Recount::of(self.mode, self.horizon_ms, shards, rows)
            .input(self.input.clone())
            .within(pass.part, pass.budget, pass.first)
    }
}

/// The minutes "since" is compared at: the ones asked for, else the last minute, hour and day
/// boundaries and the day boundary a week ago.
fn since_times(now: i64, asked: &[i64]) -> Vec<i64> {
    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;
    let mut t: Vec<i64> = if asked.is_empty() {
        vec![
            now - now.rem_euclid(MINUTE_MS),
            now - now.rem_euclid(HOUR),
            now - now.rem_euclid(DAY),
            now - now.rem_euclid(DAY) - 7 * DAY,
        ]
    } else {
        asked.iter().map(|t| t - t.rem_euclid(MINUTE_MS)).collect()
    };
    t.sort_unstable();
    t.dedup();
    t
}

fn print_text(r: &Report, show: usize) {
    println!(
        "recounted {} records of {} shards from {} (to the counter's checkpoints): {} counted, {} duplicates, {} malformed",
        r.records_read, r.shards, r.source, r.recount.counted, r.recount.duplicates, r.recount.malformed
    );
    let times: Vec<String> = r.since_ms.iter().map(|t| rfc3339(*t)).collect();
    println!(
        "posts: {} checked (total and since {}), {} off",
        r.posts_checked,
        times.join(", "),
        r.posts_off
    );
    for d in r.drifts.iter().take(show) {
        let what = d
            .since_ms
            .map_or_else(|| "total".to_owned(), |t| format!("since {}", rfc3339(t)));
        let recount = match d.recount_up_to {
            Some(hi) => format!("{}..{hi}", d.recount),
            None => d.recount.to_string(),
        };
        println!(
            "  {} {what}: store {}, recount {recount} ({:+})",
            d.post_id, d.store, d.off_by
        );
    }
    if r.drifts.len() > show {
        println!(
            "  … {} more (--json lists every one)",
            r.drifts.len() - show
        );
    }
    let g = &r.global_total;
    if g["checked"] == true {
        println!(
            "global total: store {}, recount {}{}",
            g["store"],
            g["recount"],
            if g["off_by"] == 0 {
                String::new()
            } else {
                format!(" ({:+})", g["off_by"].as_i64().unwrap_or(0))
            }
        );
    }
    if let Some(off) = r.edges["off"].as_array() {
        println!(
            "likers: {} edges sampled, {} off",
            r.edges["checked"],
            off.len()
        );
        for e in off.iter().take(show) {
            println!(
                "  {} by {}: store {}, recount {}",
                e["post_id"].as_str().unwrap_or_default(),
                e["user_id"].as_str().unwrap_or_default(),
                if e["store_liked"] == true {
                    "liked"
                } else {
                    "not liked"
                },
                if e["recount_liked"] == true {
                    "liked"
                } else {
                    "not liked"
                }
            );
        }
    }
    let l = &r.dead_letters;
    println!("dead letters: {} of {} found", l["found"], l["expected"]);
    for (k, what) in [("missing", "missing"), ("unexpected", "not malformed")] {
        for d in l[k].as_array().into_iter().flatten().take(show) {
            println!(
                "  {what}: {} at {}",
                d["shard_id"].as_str().unwrap_or(""),
                d["position"].as_str().unwrap_or("")
            );
        }
    }
    for n in &r.not_checked {
        println!("not checked: {n}");
    }
    println!(
        "read {} records{}; {} store calls, {} read units for counts",
        r.records_read,
        if r.passes > 1 {
            format!(
                " in {} passes of at most {} each",
                r.passes, r.memory_budget
            )
        } else {
            String::new()
        },
        r.store_calls,
        r.read_units
    );
    if r.over_budget {
        println!(
            "memory: one post alone held more than --memory {} (its events, counting events; a \
             post's likers are split by user)",
            r.memory_budget
        );
    }
}
