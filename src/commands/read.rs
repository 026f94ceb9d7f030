//! The reading commands: `query`, `total`, `top`, `latency`, `dead-letters`, `leases`, `record`.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;
use tally_consumer::worker::now_ms;
use tally_core::apps;
use tally_core::ports::{StartPosition, Stream};

use super::print_json;
use crate::backend::Backend;
use crate::cli::{
    DeadLetterArgs, JsonArgs, LatencyArgs, LeasesArgs, QueryArgs, RecordArgs, TopArgs,
};
use crate::serve::applied_through;
use crate::settings::Settings;

pub async fn query(b: &Backend, a: &QueryArgs) -> Result<()> {
    let since_ms = a.since.map(|d| now_ms() - d.as_millis() as i64);
    let c = b.counter.post_count(&a.post_id, since_ms).await?;
    if a.json {
        let fresh = applied_through(b.leases.as_ref(), apps::COUNTER).await?;
        let mut v = json!({"post_id": a.post_id, "count": c.total, "read_units": c.read_units, "applied_through": fresh});
        if let (Some(since), Some(n)) = (since_ms, c.since) {
            v["since_ms"] = json!(since);
            v["count_since"] = json!(n);
        }
        print_json(&v);
    } else {
        match (a.since, c.since) {
            (Some(d), Some(n)) => println!(
                "{}: {} likes ({} in the last {})",
                a.post_id,
                c.total,
                n,
                humantime::format_duration(d)
            ),
            _ => println!("{}: {} likes", a.post_id, c.total),
        }
        let fresh = applied_through(b.leases.as_ref(), apps::COUNTER).await?;
        println!("{}", freshness_line("counted", &fresh));
    }
    Ok(())
}

/// How fresh an answer is, in words: `counted through records that arrived 3.2s ago`.
fn freshness_line(what: &str, f: &serde_json::Value) -> String {
    match f["lag_ms"].as_i64() {
        Some(lag) => format!(
            "({what} through records that arrived {} ago)",
            humantime::format_duration(Duration::from_millis(lag as u64 / 100 * 100))
        ),
        None => format!("({what}: some shards have applied nothing yet)"),
    }
}

pub async fn total(b: &Backend, a: &JsonArgs) -> Result<()> {
    let t = b.counter.global_total().await?;
    if a.json {
        let fresh = applied_through(b.leases.as_ref(), apps::COUNTER).await?;
        print_json(&json!({"total": t, "applied_through": fresh}));
    } else {
        println!("{t} likes in total");
    }
    Ok(())
}

pub async fn top(s: &Settings, b: &Backend, a: &TopArgs) -> Result<()> {
    let top = tally_analytics::top(
        b.analytics.as_ref(),
        apps::ANALYTICS,
        Duration::from_secs(s.analytics.half_life_secs),
        a.k,
    )
    .await?;
    if a.json {
        let fresh = applied_through(b.leases.as_ref(), apps::ANALYTICS).await?;
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
        let fresh = applied_through(b.leases.as_ref(), apps::ANALYTICS).await?;
        println!("{}", freshness_line("analytics", &fresh));
    }
    Ok(())
}

pub async fn latency(b: &Backend, a: &LatencyArgs) -> Result<()> {
    let since = a.since.map_or(0, |d| now_ms() - d.as_millis() as i64);
    let r = tally_analytics::latency(b.analytics.as_ref(), apps::ANALYTICS, since).await?;
    if a.json {
        print_json(&serde_json::to_value(r)?);
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

pub async fn dead_letters(b: &Backend, a: &DeadLetterArgs) -> Result<()> {
    let n = b.counter.dead_letter_count().await?;
    let dl = b.counter.dead_letters(a.limit).await?;
    if a.json {
        let items: Vec<_> = dl
            .iter()
            .map(|d| json!({"shard_id": d.shard_id, "sequence_number": d.seq.as_str(), "arrival_ms": d.arrival_ms, "reason": d.reason, "size": d.size, "truncated": (d.data.len() as u64) < d.size, "data": String::from_utf8_lossy(&d.data)}))
            .collect();
        print_json(&json!({"count": n, "dead_letters": items}));
    } else {
        println!("{n} dead letters");
        for d in &dl {
            println!(
                "{} {} {}: {}",
                d.shard_id,
                d.seq,
                d.reason,
                String::from_utf8_lossy(&d.data[..d.data.len().min(120)])
            );
        }
    }
    Ok(())
}

pub async fn leases(b: &Backend, a: &LeasesArgs) -> Result<()> {
    let ls = b.leases.list_leases(&a.app).await?;
    let now = now_ms();
    if a.json {
        let mut items = Vec::with_capacity(ls.len());
        for l in &ls {
            // A window applied in part (a crash or a lease move between its atomic writes).
            let pending = match b.leases.shard_state(&a.app, &l.shard_id).await {
                Ok(st) => st
                    .pending
                    .map(|p| json!({"end": p.end.as_str(), "horizon_ms": p.horizon_ms})),
                Err(_) => None,
            };
            items.push(json!({"shard_id": l.shard_id, "owner": l.owner, "held": l.is_held(now), "epoch": l.epoch, "expires_ms": l.expires_ms,
                   "checkpoint": l.checkpoint.as_ref().map(|c| c.as_str()), "pending": pending, "finished": l.finished, "parents": l.parents}));
        }
        print_json(&json!(items));
    } else {
        println!(
            "{:<22} {:<28} {:<6} {:<9} checkpoint",
            "shard", "owner", "held", "finished"
        );
        for l in &ls {
            println!(
                "{:<22} {:<28} {:<6} {:<9} {}",
                l.shard_id,
                l.owner.as_deref().unwrap_or("-"),
                l.is_held(now),
                l.finished,
                l.checkpoint.as_ref().map_or("-", |c| c.as_str())
            );
        }
    }
    Ok(())
}

/// Writes every record of the stream, parents before children, one line per record.
pub async fn record(b: &Backend, a: &RecordArgs) -> Result<()> {
    let shards = b.stream.list_shards().await?;
    let file =
        std::fs::File::create(&a.file).with_context(|| format!("creating {}", a.file.display()))?;
    let gz = a.file.extension().is_some_and(|e| e == "gz");
    let mut out: Box<dyn Write> = if gz {
        Box::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::default(),
        ))
    } else {
        Box::new(std::io::BufWriter::new(file))
    };
    let mut n = 0u64;
    // Parents first: a shard is written after every shard it lists as a parent.
    let mut done: Vec<String> = Vec::new();
    let mut todo = shards.clone();
    while !todo.is_empty() {
        let before = todo.len();
        let mut i = 0;
        while i < todo.len() {
            let ready = todo[i]
                .parents
                .iter()
                .all(|p| done.contains(p) || !shards.iter().any(|s| &s.shard_id == p));
            if ready {
                let s = todo.remove(i);
                n += dump_shard(b.stream.as_ref(), &s.shard_id, &mut out).await?;
                done.push(s.shard_id);
            } else {
                i += 1;
            }
        }
        if todo.len() == before {
            anyhow::bail!(
                "shard parents form a cycle: {:?}",
                todo.iter().map(|s| &s.shard_id).collect::<Vec<_>>()
            );
        }
    }
    out.flush()?;
    drop(out);
    if a.json {
        print_json(&json!({"records": n, "file": a.file}));
    } else {
        println!("recorded {n} records to {}", a.file.display());
    }
    Ok(())
}

async fn dump_shard(stream: &dyn Stream, shard_id: &str, out: &mut dyn Write) -> Result<u64> {
    let mut reader = stream.open(shard_id, StartPosition::TrimHorizon).await?;
    let mut n = 0;
    loop {
        let batch = reader.next_batch(1_000).await?;
        for r in &batch.records {
            out.write_all(&r.data)?;
            out.write_all(b"\n")?;
            n += 1;
        }
        if batch.shard_end
            || (batch.records.is_empty() && batch.millis_behind_latest.unwrap_or(0) == 0)
        {
            return Ok(n);
        }
    }
}
