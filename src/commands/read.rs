//! The reading commands: `query`, `total`, `top`, `latency`, `dead-letters`, `leases`, `record`.

use std::time::Duration;

use anyhow::Result;
use serde_json::json;
use tally_core::apps;
use tally_core::buckets::minute_start;
use tally_core::clock::now_ms;
use tally_core::ports::Consistency;

use crate::backend::Backend;
use crate::cli::{
    DeadLetterArgs, JsonArgs, LatencyArgs, LeasesArgs, QueryArgs, RecordArgs, TopArgs,
};
use crate::output::print_json;
use crate::settings::Settings;
use tally_serve::answers;
use tally_serve::counts::{check_ids, CountsQuery};
use tally_serve::viewer::Refused;
use tally_serve::{applied_through, Ctx, Listing};

/// A post's count as the API answers it (`GET /api/posts/{id}`, `/api/counts`): the stored count
/// plus what the counter's workers have read and not yet written (asked first, as the read side
/// does; `--stored`: the stored count only), whether the viewer likes each post, and how fresh.
pub async fn query(ctx: &Ctx, args: &QueryArgs) -> Result<()> {
    check_ids(&args.post_ids)
        .map_err(|e| anyhow::anyhow!("{}", e.replacen("`ids`", "POST_ID", 1)))?;
    if let Some(u) = &args.viewer {
        tally_serve::viewer::check_viewer(u).map_err(|e| anyhow::anyhow!("--viewer: {e}"))?;
    }
    let requested = args.since.map(|s| s.ms);
    let q = CountsQuery {
        ids: &args.post_ids,
        since_ms: requested,
        consistency: if args.eventual {
            Consistency::Eventual
        } else {
            Consistency::Strong
        },
        viewer: args.viewer.as_deref(),
    };
    let answer = ctx
        .counts_answer(&q, !args.stored)
        .await
        .map_err(|e| match e {
            Refused::Request(m) => anyhow::anyhow!("--viewer: {m}"),
            Refused::Store(e) => anyhow::Error::from(e),
        })?;
    // Counts are kept per minute: "since T" counts from the start of T's minute.
    let bound = requested.map(minute_start);
    let fresh = ctx.fresh(apps::COUNTER);
    if args.json {
        // One shape for one post or many: `POST /api/counts`'s (and, asked "since", the time
        // asked, as `GET /api/posts/{id}` gives it).
        let mut v = answer.json(&args.post_ids, q.viewer);
        if let Some(t) = requested {
            v["since_requested_ms"] = json!(t);
        }
        v["applied_through"] = fresh;
        print_json(&v);
    } else {
        for (i, (id, c)) in args.post_ids.iter().zip(&answer.counts).enumerate() {
            let by_viewer = match (q.viewer, &answer.liked) {
                (Some(u), Some((liked, _))) if liked[i] => format!(" ({u} likes it)"),
                (Some(u), _) => format!(" ({u} does not)"),
                _ => String::new(),
            };
            let p = answer.provisional(&args.post_ids, i);
            let unwritten = match p.total {
                0 => String::new(),
                n => format!(" ({n:+} of them read by the counter, not yet written)"),
            };
            let total = c.total + p.total;
            match (bound, c.since) {
                (Some(t), Some(n)) => println!(
                    "{id}: {}{by_viewer}{unwritten} ({:+} net from likes and unlikes created since {}, the start of the minute {} ago)",
                    crate::output::likes(total),
                    n + p.since,
                    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(t.max(0) as u64)),
                    humantime::format_duration(args.since.map(|s| s.ago).unwrap_or_default()),
                ),
                _ => println!("{id}: {}{by_viewer}{unwritten}", crate::output::likes(total)),
            }
        }
        // Shards a live worker holds that did not answer (those nobody holds are in the
        // freshness line).
        let (now, holders) = (now_ms(), ctx.holders());
        let silent = answer.asked.as_ref().map_or(0, |a| {
            a.unanswered
                .iter()
                .filter(|s| {
                    holders
                        .states
                        .iter()
                        .any(|st| st.lease.shard_id == **s && st.lease.is_held(now))
                })
                .count()
        });
        if silent > 0 {
            println!(
                "(the workers holding {silent} shards did not answer in time: what they read and \
                 have not written is not shown)"
            );
        }
        println!("{}", freshness_line("counted", &fresh));
    }
    Ok(())
}

/// A span of milliseconds in words, to the second (`3s`, `11m 2s`).
fn ago(ms: i64) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(ms.max(0) as u64 / 1000 * 1000))
}

/// How fresh an answer is, in words, each figure saying what it is about: how far behind the
/// stream's tip its readers were when they last reported (and how long ago that was: a record
/// put since is not in it), and the arrival time up to which every record is counted on every
/// shard (a watermark: on an idle shard, its last record's — nothing newer is missing).
fn freshness_line(what: &str, f: &serde_json::Value) -> String {
    let now = f["at_ms"].as_i64().unwrap_or_else(now_ms);
    let reported = f["lag_reported_ms"]
        .as_i64()
        .map(|t| format!(" as the readers reported {} ago", ago(now - t)))
        .unwrap_or_default();
    let watermark = f["since_last_record_ms"]
        .as_i64()
        .map(|ms| {
            format!(
                "; every record that arrived {} ago or earlier is {what}",
                ago(ms)
            )
        })
        .unwrap_or_default();
    let unread = f["unread_shards"].as_u64().unwrap_or(0);
    if unread > 0 {
        let lag = f["lag_ms"]
            .as_i64()
            .map(|lag| format!(", up to {} behind the stream's tip", ago(lag)))
            .unwrap_or_default();
        return format!(
            "({what}: no worker is reading {unread} shard{s}{lag}{watermark})",
            s = if unread == 1 { "" } else { "s" }
        );
    }
    match f["lag_ms"].as_i64() {
        Some(0) => format!("({what} to the stream's tip on every shard{reported})"),
        Some(lag) => format!(
            "({what} up to {} behind the stream's tip{reported}{watermark})",
            ago(lag)
        ),
        None => format!("({what}: some shards have not been read yet{watermark})"),
    }
}

/// The read side as `tally serve` answers counts from it, the counter's lease rows listed once.
pub async fn read_side(settings: &Settings, backend: &Backend) -> Result<Ctx> {
    let read = backend.readers_across_regions(settings).await?;
    Ctx::once(read, settings.analytics.half_life).await
}

/// `tally total`: every post's count added up (across regions, every home's).
pub async fn total(settings: &Settings, backend: &Backend, args: &JsonArgs) -> Result<()> {
    let read = backend.readers_across_regions(settings).await?;
    let t = read.counts.global_total().await?;
    if args.json {
        let ctx = Ctx::once(read, settings.analytics.half_life).await?;
        print_json(&json!({"total": t, "applied_through": ctx.fresh(apps::COUNTER)}));
    } else {
        println!("{} in total", crate::output::likes(t));
    }
    Ok(())
}

pub async fn top(settings: &Settings, backend: &Backend, args: &TopArgs) -> Result<()> {
    let top = tally_analytics::top(
        backend.analytics.as_ref(),
        apps::ANALYTICS,
        settings.analytics.half_life,
        usize::from(args.k),
    )
    .await?;
    let fresh = applied_through(&Listing::fetch(backend.leases.as_ref(), apps::ANALYTICS).await?);
    if args.json {
        print_json(&json!({
            "trending": top
                .iter()
                .map(|e| json!({"post_id": e.post_id, "score": e.score, "error": e.error}))
                .collect::<Vec<_>>(),
            "applied_through": fresh,
        }));
    } else if top.is_empty() {
        println!("no trending data yet: run `tally analytics`");
    } else {
        println!("{:>4}  {:<24} {:>12}", "rank", "post", "score");
        for (i, e) in top.iter().enumerate() {
            println!("{:>4}  {:<24} {:>12.2}", i + 1, e.post_id, e.score);
        }
        println!("{}", freshness_line("analytics", &fresh));
    }
    Ok(())
}

pub async fn latency(backend: &Backend, args: &LatencyArgs) -> Result<()> {
    let since = args.since.map_or(0, |s| s.ms);
    let r = tally_analytics::latency(backend.analytics.as_ref(), apps::ANALYTICS, since).await?;
    if args.json {
        print_json(&serde_json::to_value(r)?);
    } else if r.windows == 0 {
        println!(
            "no latency data yet{}: run `tally analytics` (it stores one window of percentiles per \
             shard every analytics.window_ms)",
            if args.since.is_some() { " in that time" } else { "" }
        );
    } else {
        println!("{} windows", r.windows);
        for (name, p) in [
            ("creation → processing", r.creation_ms),
            ("arrival → processing", r.arrival_ms),
            ("iterator age", r.iterator_age_ms),
        ] {
            println!(
                "{name:<24} n={:<9} p50={}ms p90={}ms p99={}ms p99.9={}ms max={}ms",
                p.count, p.p50, p.p90, p.p99, p.p999, p.max
            );
        }
    }
    Ok(())
}

/// `tally dead-letters`: each malformed record with its shard and sequence number, and how far
/// the counter has written (a dead letter is written with the window that read its record).
pub async fn dead_letters(backend: &Backend, args: &DeadLetterArgs) -> Result<()> {
    let n = backend.counter.dead_letter_count().await?;
    let dl = backend.counter.dead_letters(args.limit).await?;
    let listing = Listing::fetch(backend.leases.as_ref(), apps::COUNTER).await?;
    let fresh = applied_through(&listing);
    if args.json {
        let items: Vec<_> = dl.iter().map(answers::dead_letter).collect();
        print_json(
            &json!({"total": n, "shown": items.len(), "truncated": (items.len() as u64) < n, "dead_letters": items, "applied_through": fresh}),
        );
    } else {
        println!("{n} dead letters");
        println!("{}", written_line(&fresh));
        for d in &dl {
            let at = match &d.gap {
                None => d.seq.to_string(),
                Some(g) => format!(
                    "{}: after {} through {}",
                    g.app,
                    d.seq,
                    g.through
                        .as_ref()
                        .map_or_else(|| "the shard's end".to_owned(), |t| t.to_string())
                ),
            };
            println!(
                "{} {at} {}: {}",
                d.shard_id,
                printable(d.reason.as_bytes(), usize::MAX),
                printable(&d.data, 120)
            );
        }
        if (dl.len() as u64) < n {
            println!(
                "… {} more (--limit N shows more, --json for every field)",
                n - dl.len() as u64
            );
        }
    }
    Ok(())
}

/// What the dead letters shown cover: each is written with the counter's window that read its
/// record, so a record read and not yet written may add one.
fn written_line(f: &serde_json::Value) -> String {
    match f["since_last_record_ms"].as_i64() {
        Some(ms) => format!(
            "(each is written with the counter's window that read it: every record that arrived \
             {} ago or earlier is written; a record read since may add one)",
            ago(ms)
        ),
        None => "(each is written with the counter's window that read it: some shards have not \
                 been written yet, and records there may add one)"
            .to_owned(),
    }
}

/// A payload for a terminal: at most `max` bytes, as UTF-8 (invalid bytes replaced), with every
/// control character escaped — a record's bytes never move the cursor or recolour the screen.
pub fn printable(bytes: &[u8], max: usize) -> String {
    let cut = &bytes[..bytes.len().min(max)];
    let mut out = String::with_capacity(cut.len());
    for c in String::from_utf8_lossy(cut).chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if cut.len() < bytes.len() {
        out.push('…');
    }
    out
}

/// Up to this many lease rows are listed one per line; more are summarized (`--all` lists them).
const LEASE_ROWS_SHOWN: usize = 20;

/// Leases per state, and held leases per worker (a fleet of a thousand shards on a screen).
fn print_lease_summary(ls: &[tally_core::lease::Lease], now: i64) {
    let finished = ls.iter().filter(|l| l.finished).count();
    let held: Vec<&tally_core::lease::Lease> = ls
        .iter()
        .filter(|l| !l.finished && l.is_held(now))
        .collect();
    let free = ls.len() - finished - held.len();
    println!(
        "{} leases: {} held, {} free or expired, {} finished (--all lists every row)",
        ls.len(),
        held.len(),
        free,
        finished
    );
    let mut per: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for l in &held {
        *per.entry(l.owner.as_deref().unwrap_or("-")).or_default() += 1;
    }
    println!("{:<40} held", "worker");
    for (w, n) in per {
        println!("{w:<40} {n}");
    }
}

pub async fn leases(backend: &Backend, args: &LeasesArgs) -> Result<()> {
    let ls = backend.leases.list_leases(&args.app).await?;
    let now = now_ms();
    if args.json {
        let listing = Listing::fetch(backend.leases.as_ref(), &args.app).await?;
        print_json(&tally_serve::freshness::lease_rows(&listing));
    } else if !args.all && ls.len() > LEASE_ROWS_SHOWN {
        print_lease_summary(&ls, now);
    } else {
        lease_table(&ls, now).iter().for_each(|l| println!("{l}"));
    }
    Ok(())
}

/// The most characters of a checkpoint the table shows: a Kinesis sequence number has 56 digits;
/// its last ones tell records apart (`--json` has it whole).
const CHECKPOINT_SHOWN: usize = 20;

/// One line per lease under a header, each column as wide as its widest value.
fn lease_table(ls: &[tally_core::lease::Lease], now: i64) -> Vec<String> {
    let mut shortened = false;
    let rows: Vec<[String; 5]> = ls
        .iter()
        .map(|l| {
            let cp = l
                .checkpoint
                .as_ref()
                .map_or_else(|| "-".to_owned(), |c| c.to_string());
            let cp = match cp.char_indices().rev().nth(CHECKPOINT_SHOWN - 2) {
                Some((i, _)) if cp.chars().count() > CHECKPOINT_SHOWN => {
                    shortened = true;
                    format!("…{}", &cp[i..])
                }
                _ => cp,
            };
            [
                l.shard_id.clone(),
                l.owner.clone().unwrap_or_else(|| "-".into()),
                l.is_held(now).to_string(),
                l.finished.to_string(),
                cp,
            ]
        })
        .collect();
    let head = ["shard", "owner", "held", "finished", "checkpoint"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..4).map(width).collect();
    let line = |r: [&str; 5]| {
        format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        )
    };
    let mut out = vec![line(head)];
    out.extend(
        rows.iter()
            .map(|r| line([&r[0], &r[1], &r[2], &r[3], &r[4]])),
    );
    if shortened {
        out.push(format!(
            "(checkpoints shortened to their last {} digits: --json for them whole)",
            CHECKPOINT_SHOWN - 1
        ));
    }
    out
}

/// `tally record`: every record of the stream written as a recording
/// ([`tally_recording::record`]), and what was written said.
pub async fn record(backend: &Backend, args: &RecordArgs) -> Result<()> {
    let pb = crate::progress::start(None, "records", args.json);
    let w = tally_recording::record(backend.stream.as_ref(), &args.file, &|| pb.inc(1)).await?;
    crate::progress::finish(&pb);
    let (n, k) = (w.records, w.shards);
    // `-` is standard output (`tally record - | tally replay -`); the summary goes to stderr then.
    if args.file.as_os_str() == "-" {
        eprintln!("recorded {n} records of {k} shards to standard output");
    } else if args.json {
        print_json(&json!({"records": n, "shards": k, "file": args.file}));
    } else {
        println!(
            "recorded {n} records of {k} shards to {}",
            args.file.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kinesis's 56-digit sequence numbers as checkpoints, and a Fargate task's worker id: the
    /// table still fits a 100-column terminal, and says what it shortened.
    #[test]
    fn the_lease_table_fits_a_terminal_with_kinesis_checkpoints() {
        let seq = "49659841223508823649281775133591936212436542066744066050";
        let lease = |shard: &str| tally_core::lease::Lease {
            app: "counter".into(),
            shard_id: shard.into(),
            owner: Some("ip-10-0-1-23.ec2.internal-7f3a9c21".into()),
            epoch: 3,
            expires_ms: i64::MAX,
            checkpoint: Some(tally_core::Position::whole(
                tally_core::SeqNo::parse(seq).unwrap(),
            )),
            finished: false,
            parents: vec![],
            max_arrival: 0,
        };
        let lines = lease_table(
            &[lease("shardId-000000000000"), lease("shardId-000000000001")],
            0,
        );
        assert_eq!(lines.len(), 4, "{lines:#?}");
        for l in &lines {
            assert!(
                l.chars().count() <= 100,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        assert!(lines[1].ends_with(&seq[seq.len() - 19..]), "{}", lines[1]);
        assert!(lines[3].contains("--json"), "{}", lines[3]);
    }
}
