//! `tally demo`: producer, counter and analytics together in one process, then a check of every
//! count against the generator's truth.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;
use tally_analytics::AnalyticsMetrics;
use tally_consumer::worker::{IdleExit, LeaseMetrics};
use tally_core::apps;
use tally_core::clock::now_ms;
use tally_counter::CounterMetrics;
use tally_producer::generate::Truth;

use super::consume::{run_analytics, run_counter};
use super::produce::produce;
use crate::backend::{self, Backend};
use crate::cli::DemoArgs;
use crate::output::print_json;
use crate::settings::{BackendKind, Settings};

pub async fn demo(settings: &Settings, args: &DemoArgs, explicit_data_dir: bool) -> Result<()> {
    // Demo defaults: some retries and some garbage, so the report shows them handled.
    let mut settings = settings.for_demo(
        args.gen.duplicate_ratio.is_some(),
        args.gen.malformed_ratio.is_some(),
    );
    match settings.backend {
        BackendKind::Embedded => {
            let _tmp;
            if explicit_data_dir {
                refuse_a_store_with_data(&settings)?;
            } else {
                let t = tempfile::Builder::new().prefix("tally-demo-").tempdir()?;
                settings.data_dir = t.path().to_owned();
                _tmp = t;
            }
            run(&settings, args).await
        }
        BackendKind::Aws => {
            // A fresh stream and fresh tables of its own: the check needs an empty stream, and
            // nothing of the user's is touched.
            let unique = format!("demo-{}-{}", std::process::id(), now_ms() % 1_000_000_000);
            settings.stream = format!("{}-{unique}", settings.stream);
            settings.table_prefix = format!("{}-{unique}", settings.table_prefix);
            if !args.json {
                eprintln!(
                    "demo: creating stream {} and tables {}-* (deleted afterwards{})",
                    settings.stream,
                    settings.table_prefix,
                    if args.keep {
                        " unless --keep: kept"
                    } else {
                        ""
                    }
                );
            }
            backend::create(&settings).await?;
            let result = run(&settings, args).await;
            if !args.keep {
                if let Err(e) = backend::delete(&settings).await {
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
fn refuse_a_store_with_data(settings: &Settings) -> Result<()> {
    if backend::holds_data(settings)? {
        bail!(
            "{} already holds a tally store with data; the demo needs an empty one (it puts its \
             own events and checks every count). Leave out --data-dir (the demo then uses a fresh \
             temporary directory) or name a new directory",
            settings.data_dir.display()
        );
    }
    Ok(())
}

/// Runs the demo on a store that holds nothing yet: the pipeline to idle, the check of every
/// count, the baselines if asked, the report; then `--serve` if asked.
async fn run(settings: &Settings, args: &DemoArgs) -> Result<()> {
    let backend = Backend::open(settings).await?;
    if !args.json {
        eprintln!(
            "demo: {} events over {} posts on {} shards ({} backend)",
            args.events, settings.producer.posts, settings.shards, settings.backend
        );
    }
    let ran = run_pipeline(settings, &backend, args).await?;
    let check = Check::of(&backend, &ran.truth).await?;
    let baselines = if args.baselines {
        if !args.json {
            eprintln!(
                "demo: applying the same records one UpdateItem, then one transaction, per like"
            );
        }
        Some(super::baselines::run(settings, &backend, args.events, &ran.truth).await?)
    } else {
        None
    };
    let report = report(settings, &backend, &ran, &check, baselines).await?;
    if args.json {
        print_json(&report);
    } else {
        print_text(&report, &check.wrong);
    }
    if !check.exact(&ran.truth) {
        bail!(
            "counts are off: {} posts wrong, total {} vs expected {}, dead letters {} vs {}",
            check.wrong.len(),
            check.counted_total,
            ran.truth.total(),
            check.dead,
            ran.truth.malformed
        );
    }
    if let Some(addr) = args.serve {
        watch(settings, &backend, addr).await?;
    }
    Ok(())
}

/// What running producer, counter and analytics to idle left.
struct Ran {
    truth: Truth,
    records: u64,
    counter: Arc<CounterMetrics>,
    leases: Arc<LeaseMetrics>,
    analytics: Arc<AnalyticsMetrics>,
    produced_in: Duration,
    elapsed: Duration,
}

/// The counter and analytics on their own tasks while the producer puts `--events`; both run
/// until idle once everything is put.
async fn run_pipeline(settings: &Settings, backend: &Backend, args: &DemoArgs) -> Result<Ran> {
    let started = Instant::now();
    let (counter_idle, analytics_idle) =
        (Arc::new(IdleExit::default()), Arc::new(IdleExit::default()));
    let never = std::future::pending::<()>;
    // Each application on its own connections, as in separate processes.
    let counter = {
        let (s, b, idle) = (
            settings.clone(),
            backend.another(settings).await?,
            counter_idle.clone(),
        );
        tokio::spawn(async move { run_counter(&s, &b, idle, never()).await })
    };
    let analytics = {
        let (s, b, idle) = (
            settings.clone(),
            backend.another(settings).await?,
            analytics_idle.clone(),
        );
        tokio::spawn(async move { run_analytics(&s, &b, idle, never()).await })
    };
    let (truth, put) = produce(
        settings,
        backend,
        args.events,
        args.json,
        &Default::default(),
    )
    .await?;
    let produced_in = started.elapsed();
    counter_idle.arm();
    analytics_idle.arm();
    let (counter, leases) = counter.await??;
    let (analytics, _) = analytics.await??;
    Ok(Ran {
        truth,
        records: put.records,
        counter,
        leases,
        analytics,
        produced_in,
        elapsed: started.elapsed(),
    })
}

/// Every post the generator touched, the global total and the dead letters, read back.
struct Check {
    /// Posts whose count is off: expected, counted.
    wrong: Vec<(String, i64, i64)>,
    counted_total: i64,
    dead: u64,
}

impl Check {
    async fn of(backend: &Backend, truth: &Truth) -> Result<Check> {
        let mut wrong = Vec::new();
        for (post, expected) in &truth.counts {
            let got = backend.counter.post_count(post, None).await?.total;
            if got != *expected {
                wrong.push((post.clone(), *expected, got));
            }
        }
        wrong.sort();
        Ok(Check {
            wrong,
            counted_total: backend.counter.global_total().await?,
            dead: backend.counter.dead_letter_count().await?,
        })
    }

    fn exact(&self, truth: &Truth) -> bool {
        self.wrong.is_empty() && self.counted_total == truth.total() && self.dead == truth.malformed
    }
}

/// The demo's report (what `--json` prints, and what the text is read from).
async fn report(
    settings: &Settings,
    backend: &Backend,
    ran: &Ran,
    check: &Check,
    baselines: Option<serde_json::Value>,
) -> Result<serde_json::Value> {
    let trending = tally_analytics::top(
        backend.analytics.as_ref(),
        apps::ANALYTICS,
        settings.analytics.half_life,
        10,
    )
    .await?;
    let lat = tally_analytics::latency(backend.analytics.as_ref(), apps::ANALYTICS, 0).await?;
    let (truth, cm) = (&ran.truth, &ran.counter);
    let events = truth.events.max(1) as f64;
    let items = cm.items_written.load(Ordering::Relaxed);
    let units = crate::answers::counter_units(cm, &ran.leases);
    Ok(json!({
        "backend": format!("{:?}", settings.backend).to_lowercase(),
        "stream": settings.stream,
        "events": truth.events,
        "records": ran.records,
        "duplicates_injected": truth.duplicates,
        "malformed_injected": truth.malformed,
        "other_items_skipped": cm.skipped.load(Ordering::Relaxed),
        "expected_total": truth.total(),
        "counted_total": check.counted_total,
        "posts_checked": truth.counts.len(),
        "posts_wrong": check.wrong.len(),
        "dead_letters": check.dead,
        "exact": check.exact(truth),
        "duplicates_dropped": cm.duplicates.load(Ordering::Relaxed),
        "windows": cm.windows.load(Ordering::Relaxed),
        "store_writes": items,
        "writes_refused": cm.writes_refused.load(Ordering::Relaxed),
        "items_read": cm.items_read.load(Ordering::Relaxed),
        "writes_per_event": items as f64 / events,
        "dynamodb_wcu_per_event": units.total() as f64 / events,
        "write_units": crate::answers::write_units(&units),
        "events_per_sec": ran.records as f64 / ran.elapsed.as_secs_f64(),
        "elapsed_secs": ran.elapsed.as_secs_f64(),
        "produce_secs": ran.produced_in.as_secs_f64(),
        "analytics_likes": ran.analytics.likes.load(Ordering::Relaxed),
        "trending": trending.iter().map(|e| json!({"post_id": e.post_id, "score": e.score})).collect::<Vec<_>>(),
        "latency_ms": {"p50": lat.creation_ms.p50, "p90": lat.creation_ms.p90, "p99": lat.creation_ms.p99, "p999": lat.creation_ms.p999, "max": lat.creation_ms.max},
        "arrival_latency_ms": lat.arrival_ms,
        "iterator_age_ms": lat.iterator_age_ms,
        "finished_at_ms": now_ms(),
        "baselines": baselines,
    }))
}

/// The report for a person, read from the report itself (so the text says what `--json` says).
fn print_text(r: &serde_json::Value, wrong: &[(String, i64, i64)]) {
    let yes = |v: &serde_json::Value| if v == true { "yes" } else { "NO" };
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    if r["other_items_skipped"].as_u64().unwrap_or(0) > 0 {
        // A table's change stream: an unlike of an item that does not exist writes no record.
        println!(
            "events produced       {} as a table's changes (+{} duplicates, +{} malformed, +{} of other items, skipped) in {} records",
            r["events"], r["duplicates_injected"], r["malformed_injected"], r["other_items_skipped"], r["records"]
        );
    } else {
        println!(
            "events produced       {} (+{} duplicates, +{} malformed) = {} records",
            r["events"], r["duplicates_injected"], r["malformed_injected"], r["records"]
        );
    }
    println!("expected total        {}", r["expected_total"]);
    println!("counted total         {}", r["counted_total"]);
    println!(
        "posts checked         {} ({} wrong)",
        r["posts_checked"], r["posts_wrong"]
    );
    println!(
        "dead letters          {} (injected {})",
        r["dead_letters"], r["malformed_injected"]
    );
    println!("every count exact     {}", yes(&r["exact"]));
    println!(
        "store writes / event  {:.3} ({} item writes in {} windows; one UpdateItem per like would be 1.000)",
        f("writes_per_event"), r["store_writes"], r["windows"]
    );
    println!("DynamoDB WCU / event  {:.3} (by DynamoDB's rules: 1 KB units, refused conditions charged too; one UpdateItem per like: 1.000)", f("dynamodb_wcu_per_event"));
    let events = f("events").max(1.0);
    let by_purpose: Vec<String> = tally_core::cost::Purpose::ALL
        .iter()
        .map(|p| {
            let n = r["write_units"][p.name()].as_f64().unwrap_or(0.0);
            format!("{} {:.3}", p.name(), n / events)
        })
        .collect();
    println!("  of which / event    {}", by_purpose.join(", "));
    println!(
        "throughput            {:.0} records/s ({:.2}s end to end)",
        f("events_per_sec"),
        f("elapsed_secs")
    );
    let lat = &r["latency_ms"];
    println!(
        "latency (creation→processing)  p50={}ms p90={}ms p99={}ms p99.9={}ms max={}ms",
        lat["p50"], lat["p90"], lat["p99"], lat["p999"], lat["max"]
    );
    if let Some(bl) = r["baselines"].as_object() {
        println!("side by side (write units / items per event, records/s, exact):");
        println!(
            "  tally                     {:.3} / {:.3}, {:.0}/s, {}",
            f("dynamodb_wcu_per_event"),
            f("writes_per_event"),
            f("events_per_sec"),
            yes(&r["exact"])
        );
        for (name, v) in bl {
            println!(
                "  {name:<25} {:.3} / {:.3}, {:.0}/s, {}",
                v["write_units_per_event"].as_f64().unwrap_or(0.0),
                v["items_per_event"].as_f64().unwrap_or(0.0),
                v["events_per_sec"].as_f64().unwrap_or(0.0),
                if v["exact"] == true {
                    "yes".to_owned()
                } else {
                    format!(
                        "no: {} of {} posts off ({})",
                        v["posts_wrong"],
                        v["posts_checked"],
                        v["why_off"].as_str().unwrap_or_default()
                    )
                }
            );
        }
    }
    println!("top 10 trending:");
    for (i, e) in r["trending"].as_array().into_iter().flatten().enumerate() {
        let post = e["post_id"].as_str().unwrap_or("");
        println!(
            "  {:>2}. {post:<12} {:>10.1}",
            i + 1,
            e["score"].as_f64().unwrap_or(0.0)
        );
    }
    for (post, expected, got) in wrong.iter().take(10) {
        println!("  WRONG {post}: expected {expected}, counted {got}");
    }
}

/// `--serve`: after the check, keeps the pipeline going on the demo's store — a trickle of new
/// likes (the `--rate`, or 200 a second), the counter and analytics — and serves the dashboard
/// and API until Ctrl-C or SIGTERM.
async fn watch(settings: &Settings, backend: &Backend, addr: std::net::SocketAddr) -> Result<()> {
    let mut settings = settings.clone();
    // New event ids (another seed), at a pace a person can watch.
    settings.producer.seed = settings.producer.seed.wrapping_add(1);
    if settings.producer.rate <= 0.0 {
        settings.producer.rate = 200.0;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let counter = {
        let (settings, backend, rx) = (settings.clone(), backend.clone(), stopped.clone());
        tokio::spawn(async move {
            run_counter(&settings, &backend, Default::default(), until(rx)).await
        })
    };
    let analytics = {
        let (settings, backend, rx) = (settings.clone(), backend.clone(), stopped.clone());
        tokio::spawn(async move {
            run_analytics(&settings, &backend, Default::default(), until(rx)).await
        })
    };
    let producer = {
        let (settings, backend) = (settings.clone(), backend.clone());
        tokio::spawn(async move {
            produce(&settings, &backend, u64::MAX / 2, true, &Default::default()).await
        })
    };
    eprintln!(
        "demo: still producing {} likes a second, counting and analysing; Ctrl-C to stop",
        settings.producer.rate
    );
    let (ctx, refresher) = crate::serve::Ctx::start(backend.readers(), &settings).await?;
    let served =
        crate::serve::listen(addr, crate::serve::router(ctx), crate::signal::shutdown()).await;
    refresher.abort();
    producer.abort();
    let _ = stop.send(true);
    counter.await??;
    analytics.await??;
    served
}
