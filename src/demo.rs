//! The demo as a library: producer, counter and analytics together in one process on a store of
//! its own, then a check of every count against the generator's truth. `tally demo` turns its
//! flags into a [`DemoConfig`] and prints the [`Report`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;
use tally_analytics::AnalyticsMetrics;
use tally_consumer::worker::IdleExit;
use tally_core::apps;
use tally_core::clock::now_ms;
use tally_producer::generate::{Generator, Truth};
use tally_producer::produce::produce;

use crate::apps::{run_analytics, run_counter};
use crate::backend::{self, Backend};
use crate::settings::{BackendKind, Settings};

/// The demo's records (regenerated from its seed, retries included, as the producer sent them),
/// applied each way tally is measured against ([`tally_baselines::run`]).
async fn baselines(
    settings: &Settings,
    backend: &Backend,
    events: u64,
    truth: &Truth,
) -> Result<serde_json::Value> {
    let records: Vec<tally_baselines::Action> = Generator::new(settings.gen_config(events))
        .filter_map(|(_, e)| tally_core::event::decode(&e.data).ok())
        .map(|e| tally_baselines::Action {
            delta: e.action.delta(),
            id: e.event_id,
            post: e.post_id,
            user: e.user_id,
        })
        .collect();
    let likers = settings.counter.count.keeps_edges();
    tally_baselines::run(
        backend.baselines.clone(),
        &records,
        likers,
        &truth.counts,
        truth.events,
    )
    .await
}

/// What a demo runs.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Like and unlike events to produce (retries and malformed records come on top).
    pub events: u64,
    /// Afterwards, apply the same records the two ways tally is measured against
    /// ([`tally_baselines::run`]).
    pub baselines: bool,
    /// Say on standard error what it is doing, with a progress bar.
    pub progress: bool,
}

/// A demo's store: embedded, a fresh temporary directory unless one is named (then it must hold
/// no data); on AWS, a stream and tables of its own, deleted by [`Demo::close`] unless kept.
pub struct Demo {
    settings: Settings,
    backend: Backend,
    _dir: Option<tempfile::TempDir>,
    /// AWS: the stream and tables it created, to delete when closed.
    delete: bool,
}

impl Demo {
    /// Opens the demo's store. `named_dir`: the settings' data directory was named by the user
    /// (embedded: used, and refused if it holds data); `keep`: AWS resources outlive the demo.
    pub async fn open(settings: &Settings, named_dir: bool, keep: bool) -> Result<Demo> {
        let mut settings = settings.clone();
        let (mut dir, mut delete) = (None, false);
        match settings.backend {
            BackendKind::Embedded if named_dir => refuse_a_store_with_data(&settings)?,
            BackendKind::Embedded => {
                let t = tempfile::Builder::new().prefix("tally-demo-").tempdir()?;
                settings.data_dir = t.path().to_owned();
                dir = Some(t);
            }
            BackendKind::Aws => {
                // A fresh stream and fresh tables of its own: the check needs an empty stream,
                // and nothing of the user's is touched.
                let unique = format!("demo-{}-{}", std::process::id(), now_ms() % 1_000_000_000);
                settings.stream = format!("{}-{unique}", settings.stream);
                settings.table_prefix = format!("{}-{unique}", settings.table_prefix);
                backend::create(&settings).await?;
                delete = !keep;
            }
        }
        let backend = match Backend::open(&settings).await {
            Ok(b) => b,
            Err(e) => {
                if delete {
                    let _ = backend::delete(&settings).await;
                }
                return Err(e);
            }
        };
        Ok(Demo {
            settings,
            backend,
            _dir: dir,
            delete,
        })
    }

    /// The settings it runs with (its own stream and tables, or directory).
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Runs the pipeline to idle, checks every count, runs the baselines if asked: the report.
    pub async fn run(&self, cfg: &DemoConfig) -> Result<Report> {
        let (settings, backend) = (&self.settings, &self.backend);
        if cfg.progress {
            eprintln!(
                "demo: {} events over {} posts on {} shards ({} backend)",
                cfg.events, settings.producer.posts, settings.shards, settings.backend
            );
        }
        let ran = run_pipeline(settings, backend, cfg).await?;
        let check = Check::of(backend, &ran.truth).await?;
        let baselines = if cfg.baselines {
            if cfg.progress {
                eprintln!(
                    "demo: applying the same records one UpdateItem, then one transaction, per like"
                );
            }
            Some(baselines(settings, backend, cfg.events, &ran.truth).await?)
        } else {
            None
        };
        let json = report(settings, backend, &ran, &check, baselines).await?;
        Ok(Report {
            exact: check.exact(&ran.truth),
            json,
            wrong: check.wrong,
        })
    }

    /// Deletes what it created on AWS (unless kept).
    pub async fn close(self) -> Result<()> {
        if self.delete {
            backend::delete(&self.settings).await?;
        }
        Ok(())
    }
}

/// What a demo found.
#[derive(Clone, Debug)]
pub struct Report {
    /// Every post, the global total and the dead letters as expected.
    pub exact: bool,
    /// The report: what `--json` prints, and what the text is read from.
    pub json: serde_json::Value,
    /// Posts whose count is off: expected, counted.
    pub wrong: Vec<(String, i64, i64)>,
}

impl Report {
    /// The error a demo whose counts are off ends with.
    pub fn off(&self) -> Option<String> {
        let r = &self.json;
        (!self.exact).then(|| {
            format!(
                "counts are off: {} posts wrong, total {} vs expected {}, dead letters {} vs {}",
                self.wrong.len(),
                r["counted_total"],
                r["expected_total"],
                r["dead_letters"],
                r["malformed_injected"]
            )
        })
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

/// What running producer, counter and analytics to idle left.
struct Ran {
    truth: Truth,
    records: u64,
    counter: crate::apps::CounterRun,
    analytics: Arc<AnalyticsMetrics>,
    produced_in: Duration,
    elapsed: Duration,
}

/// The counter and analytics on their own tasks while the producer puts `--events`; both run
/// until idle once everything is put.
async fn run_pipeline(settings: &Settings, backend: &Backend, cfg: &DemoConfig) -> Result<Ran> {
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
        tokio::spawn(
            async move { run_counter(&s, &b, idle, never(), Default::default(), None).await },
        )
    };
    let analytics = {
        let (s, b, idle) = (
            settings.clone(),
            backend.another(settings).await?,
            analytics_idle.clone(),
        );
        tokio::spawn(async move { run_analytics(&s, &b, idle, never(), Default::default()).await })
    };
    // The bar follows the events (retries and malformed records come on top).
    let pb = crate::progress::start(Some(cfg.events), "events", !cfg.progress);
    let put = produce(
        backend.stream.as_ref(),
        &settings.produce_plan(cfg.events),
        &|| pb.inc(1),
        &Default::default(),
    )
    .await;
    crate::progress::finish(&pb);
    let (truth, put) = put?;
    let produced_in = started.elapsed();
    counter_idle.arm();
    analytics_idle.arm();
    let counter = counter.await??;
    let analytics = analytics.await??.metrics;
    Ok(Ran {
        truth,
        records: put.records,
        counter,
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
    let (truth, cm) = (&ran.truth, &ran.counter.metrics);
    let changes = &ran.counter.changes;
    let events = truth.events.max(1) as f64;
    let items =
        cm.items_written.load(Ordering::Relaxed) + changes.items_written.load(Ordering::Relaxed);
    let units = ran.counter.units();
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
        "windows": cm.windows.load(Ordering::Relaxed) + changes.windows.load(Ordering::Relaxed),
        "store_writes": items,
        "writes_refused": cm.writes_refused.load(Ordering::Relaxed)
            + changes.writes_refused.load(Ordering::Relaxed),
        "items_read": cm.items_read.load(Ordering::Relaxed) + changes.items_read.load(Ordering::Relaxed),
        "writes_per_event": items as f64 / events,
        "dynamodb_wcu_per_event": units.total() as f64 / events,
        "write_units": tally_serve::answers::write_units(&units),
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

/// `--serve`: after the check, keeps the pipeline going on the demo's store — a trickle of new
/// likes (the `--rate`, or 200 a second), the counter and analytics — and serves the dashboard
/// and API until Ctrl-C or SIGTERM.
pub async fn watch(demo: &Demo, addr: std::net::SocketAddr) -> Result<()> {
    let backend = &demo.backend;
    let mut settings = demo.settings.clone();
    // New event ids (another seed), at a pace a person can watch.
    settings.producer.seed = settings.producer.seed.wrapping_add(1);
    if settings.producer.rate <= 0.0 {
        settings.producer.rate = 200.0;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until = tally_consumer::worker::until_raised;
    let counter = {
        let (settings, backend, rx) = (settings.clone(), backend.clone(), stopped.clone());
        tokio::spawn(async move {
            run_counter(
                &settings,
                &backend,
                Default::default(),
                until(rx),
                Default::default(),
                None,
            )
            .await
        })
    };
    let analytics = {
        let (settings, backend, rx) = (settings.clone(), backend.clone(), stopped.clone());
        tokio::spawn(async move {
            run_analytics(
                &settings,
                &backend,
                Default::default(),
                until(rx),
                Default::default(),
            )
            .await
        })
    };
    let producer = {
        let (settings, backend) = (settings.clone(), backend.clone());
        tokio::spawn(async move {
            let plan = settings.produce_plan(u64::MAX / 2);
            produce(backend.stream.as_ref(), &plan, &|| {}, &Default::default()).await
        })
    };
    eprintln!(
        "demo: still producing {} likes a second, counting and analysing; Ctrl-C to stop",
        settings.producer.rate
    );
    let (ctx, refresher) = tally_serve::Ctx::start(
        backend.readers(&settings).await?,
        settings.analytics.half_life,
    )
    .await?;
    let served =
        tally_serve::listen(addr, tally_serve::router(ctx), crate::signal::shutdown()).await;
    refresher.abort();
    producer.abort();
    let _ = stop.send(true);
    counter.await??;
    analytics.await??;
    served
}
