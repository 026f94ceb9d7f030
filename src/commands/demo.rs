//! `tally demo`: producer, counter and analytics together in one process, then a check of every
//! count against the generator's truth.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;
use tally_consumer::worker::{now_ms, IdleExit};
use tally_core::apps;

use super::consume::{run_analytics, run_counter};
use super::print_json;
use super::produce::produce;
use crate::backend::{self, Backend};
use crate::cli::DemoArgs;
use crate::settings::{BackendKind, Settings};

pub async fn demo(s: &Settings, a: &DemoArgs, explicit_data_dir: bool) -> Result<()> {
    let mut s = s.clone();
    // Demo defaults: some retries and some garbage, so the report shows them handled.
    if a.gen.duplicate_ratio.is_none() && s.producer.duplicate_ratio == 0.0 {
        s.producer.duplicate_ratio = 0.02;
    }
    if a.gen.malformed_ratio.is_none() && s.producer.malformed_ratio == 0.0 {
        s.producer.malformed_ratio = 0.001;
    }
    s.producer.rate = 0.0;
    match s.backend {
        BackendKind::Embedded => {
            let _tmp;
            if explicit_data_dir {
                refuse_a_store_with_data(&s)?;
            } else {
                let t = tempfile::Builder::new().prefix("tally-demo-").tempdir()?;
                s.data_dir = t.path().to_owned();
                _tmp = t;
            }
            run(&s, a).await
        }
        BackendKind::Aws => {
            // A fresh stream and fresh tables of its own: the check needs an empty stream, and
            // nothing of the user's is touched.
            let unique = format!("demo-{}-{}", std::process::id(), now_ms() % 1_000_000_000);
            s.stream = format!("{}-{unique}", s.stream);
            s.table_prefix = format!("{}-{unique}", s.table_prefix);
            if !a.json {
                eprintln!(
                    "demo: creating stream {} and tables {}-* (deleted afterwards{})",
                    s.stream,
                    s.table_prefix,
                    if a.keep { " unless --keep: kept" } else { "" }
                );
            }
            backend::create(&s).await?;
            let result = run(&s, a).await;
            if !a.keep {
                if let Err(e) = backend::delete(&s).await {
                    eprintln!("demo: deleting the demo's stream and tables failed: {e}");
                }
            }
            result
        }
    }
}

/// The demo puts its own events and then checks every count against them: in a store that
/// already holds data it would both damage the store and report wrong counts. Refused, before
/// anything is written.
fn refuse_a_store_with_data(s: &Settings) -> Result<()> {
    if backend::holds_data(s)? {
        bail!(
            "{} already holds a tally store with data; the demo needs an empty one (it puts its \
             own events and checks every count). Leave out --data-dir (the demo then uses a fresh \
             temporary directory) or name a new directory",
            s.data_dir.display()
        );
    }
    Ok(())
}

/// Runs the demo on a store that holds nothing yet.
async fn run(s: &Settings, a: &DemoArgs) -> Result<()> {
    let b = Backend::open(s).await?;
    if !a.json {
        eprintln!(
            "demo: {} events over {} posts on {} shards ({} backend)",
            a.events, s.producer.posts, s.shards, s.backend
        );
    }

    let started = Instant::now();
    let (counter_idle, analytics_idle) =
        (Arc::new(IdleExit::default()), Arc::new(IdleExit::default()));
    let never = std::future::pending::<()>;
    let counter = {
        let (s, b, idle) = (s.clone(), b.clone(), counter_idle.clone());
        tokio::spawn(async move { run_counter(&s, &b, idle, never()).await })
    };
    let analytics = {
        let (s, b, idle) = (s.clone(), b.clone(), analytics_idle.clone());
        tokio::spawn(async move { run_analytics(&s, &b, idle, never()).await })
    };
    let (truth, put) = produce(s, &b, a.events, a.json, &Default::default()).await?;
    let produced_in = started.elapsed();
    counter_idle.arm();
    analytics_idle.arm();
    let (cm, lm) = counter.await??;
    let (am, _) = analytics.await??;
    let elapsed = started.elapsed();

    // Check every post the generator touched, the global total and the dead letters.
    let mut wrong = Vec::new();
    for (post, expected) in &truth.counts {
        let got = b.counter.post_count(post, None).await?.total;
        if got != *expected {
            wrong.push((post.clone(), *expected, got));
        }
    }
    wrong.sort();
    let counted_total = b.counter.global_total().await?;
    let dead = b.counter.dead_letter_count().await?;
    let exact = wrong.is_empty() && counted_total == truth.total() && dead == truth.malformed;
    let trending = tally_analytics::top(
        b.analytics.as_ref(),
        apps::ANALYTICS,
        Duration::from_secs(s.analytics.half_life_secs),
        10,
    )
    .await?;
    let lat = tally_analytics::latency(b.analytics.as_ref(), apps::ANALYTICS, 0).await?;
    let records = put.records;
    let items = cm.items_written.load(Ordering::Relaxed);
    let writes_per_event = items as f64 / truth.events.max(1) as f64;
    let units = super::consume::cost(&cm, &lm);
    let wcu_per_event = units.total() as f64 / truth.events.max(1) as f64;
    let events_per_sec = records as f64 / elapsed.as_secs_f64();
    let baselines = if a.baselines {
        if !a.json {
            eprintln!(
                "demo: applying the same records one UpdateItem, then one transaction, per like"
            );
        }
        Some(super::baselines::run(s, &b, a.events, &truth).await?)
    } else {
        None
    };
    let report = json!({
        "backend": format!("{:?}", s.backend).to_lowercase(),
        "stream": s.stream,
        "events": truth.events,
        "records": records,
        "duplicates_injected": truth.duplicates,
        "malformed_injected": truth.malformed,
        "expected_total": truth.total(),
        "counted_total": counted_total,
        "posts_checked": truth.counts.len(),
        "posts_wrong": wrong.len(),
        "dead_letters": dead,
        "exact": exact,
        "duplicates_dropped": cm.duplicates.load(Ordering::Relaxed),
        "windows": cm.windows.load(Ordering::Relaxed),
        "store_writes": items,
        "writes_refused": cm.writes_refused.load(Ordering::Relaxed),
        "items_read": cm.items_read.load(Ordering::Relaxed),
        "writes_per_event": writes_per_event,
        "dynamodb_wcu_per_event": wcu_per_event,
        "write_units": super::consume::cost_json(&units),
        "events_per_sec": events_per_sec,
        "elapsed_secs": elapsed.as_secs_f64(),
        "produce_secs": produced_in.as_secs_f64(),
        "analytics_likes": am.likes.load(Ordering::Relaxed),
        "trending": trending.iter().map(|e| json!({"post_id": e.post_id, "score": e.score})).collect::<Vec<_>>(),
        "latency_ms": {"p50": lat.creation_ms.p50, "p90": lat.creation_ms.p90, "p99": lat.creation_ms.p99, "p999": lat.creation_ms.p999, "max": lat.creation_ms.max},
        "arrival_latency_ms": lat.arrival_ms,
        "iterator_age_ms": lat.iterator_age_ms,
        "finished_at_ms": now_ms(),
        "baselines": baselines,
    });
    if a.json {
        print_json(&report);
    } else {
        println!(
            "events produced       {} (+{} duplicates, +{} malformed) = {} records",
            truth.events, truth.duplicates, truth.malformed, records
        );
        println!("expected total        {}", truth.total());
        println!("counted total         {}", counted_total);
        println!(
            "posts checked         {} ({} wrong)",
            truth.counts.len(),
            wrong.len()
        );
        println!(
            "dead letters          {} (injected {})",
            dead, truth.malformed
        );
        println!("every count exact     {}", if exact { "yes" } else { "NO" });
        println!(
            "store writes / event  {writes_per_event:.3} ({items} item writes in {} windows; one UpdateItem per like would be 1.000)",
            cm.windows.load(Ordering::Relaxed)
        );
        println!("DynamoDB WCU / event  {wcu_per_event:.3} (by DynamoDB's rules: 1 KB units, refused conditions charged too; one UpdateItem per like: 1.000)");
        let by_purpose: Vec<String> = tally_core::cost::Purpose::ALL
            .iter()
            .map(|p| {
                format!(
                    "{} {:.3}",
                    p.name(),
                    units.get(*p) as f64 / truth.events.max(1) as f64
                )
            })
            .collect();
        println!("  of which / event    {}", by_purpose.join(", "));
        println!(
            "throughput            {events_per_sec:.0} records/s ({:.2}s end to end)",
            elapsed.as_secs_f64()
        );
        println!(
            "latency (creation→processing)  p50={}ms p90={}ms p99={}ms p99.9={}ms max={}ms",
            lat.creation_ms.p50,
            lat.creation_ms.p90,
            lat.creation_ms.p99,
            lat.creation_ms.p999,
            lat.creation_ms.max
        );
        if let Some(bl) = &baselines {
            println!("side by side (write units / items per event, records/s, exact):");
            println!(
                "  tally                 {wcu_per_event:.3} / {writes_per_event:.3}, {events_per_sec:.0}/s, {}",
                if exact { "yes" } else { "NO" }
            );
            for (name, v) in bl.as_object().into_iter().flatten() {
                println!(
                    "  {name:<21} {:.3} / {:.3}, {:.0}/s, {}",
                    v["write_units_per_event"].as_f64().unwrap_or(0.0),
                    v["items_per_event"].as_f64().unwrap_or(0.0),
                    v["events_per_sec"].as_f64().unwrap_or(0.0),
                    if v["exact"] == true {
                        "yes".to_owned()
                    } else {
                        format!(
                            "no: {} of {} posts off (a producer retry is written again: nothing remembers it was applied)",
                            v["posts_wrong"], v["posts_checked"]
                        )
                    }
                );
            }
        }
        println!("top 10 trending:");
        for (i, e) in trending.iter().enumerate() {
            println!("  {:>2}. {:<12} {:>10.1}", i + 1, e.post_id, e.score);
        }
        for (post, expected, got) in wrong.iter().take(10) {
            println!("  WRONG {post}: expected {expected}, counted {got}");
        }
    }
    if !exact {
        bail!(
            "counts are off: {} posts wrong, total {} vs expected {}, dead letters {} vs {}",
            wrong.len(),
            counted_total,
            truth.total(),
            dead,
            truth.malformed
        );
    }
    if let Some(addr) = a.serve {
        watch(s, &b, addr).await?;
    }
    Ok(())
}

/// `--serve`: after the check, keeps the pipeline going on the demo's store — a trickle of new
/// likes (the `--rate`, or 200 a second), the counter and analytics — and serves the dashboard
/// and API until Ctrl-C or SIGTERM.
async fn watch(s: &Settings, b: &Backend, addr: std::net::SocketAddr) -> Result<()> {
    let mut s = s.clone();
    // New event ids (another seed), at a pace a person can watch.
    s.producer.seed = s.producer.seed.wrapping_add(1);
    if s.producer.rate <= 0.0 {
        s.producer.rate = 200.0;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let counter = {
        let (s, b, rx) = (s.clone(), b.clone(), stopped.clone());
        tokio::spawn(async move { run_counter(&s, &b, Default::default(), until(rx)).await })
    };
    let analytics = {
        let (s, b, rx) = (s.clone(), b.clone(), stopped.clone());
        tokio::spawn(async move { run_analytics(&s, &b, Default::default(), until(rx)).await })
    };
    let producer = {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move { produce(&s, &b, u64::MAX / 2, true, &Default::default()).await })
    };
    eprintln!(
        "demo: still producing {} likes a second, counting and analysing; Ctrl-C to stop",
        s.producer.rate
    );
    let (ctx, refresher) = crate::serve::Ctx::start(b.clone(), &s).await?;
    let served = crate::serve::run(addr, crate::serve::router(ctx), super::shutdown_signal()).await;
    refresher.abort();
    producer.abort();
    let _ = stop.send(true);
    counter.await??;
    analytics.await??;
    served
}
