//! `tally count`, `tally analytics` and `tally route`: the long-running consumers.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
use serde_json::json;
use tally_analytics::AnalyticsMetrics;
use tally_consumer::worker::{IdleExit, Run};
use tally_core::apps;
use tally_counter::board::Board;

use crate::apps::{run_analytics, run_counter, CounterRun, Shown};
use crate::backend::Backend;
use crate::cli::ConsumeArgs;
use crate::output::print_json;
use crate::settings::Settings;
use tally_serve::answers;
use tally_serve::worker::{advertise_addr, WorkerHttp};

/// SIGINT/SIGTERM, or `--timeout` running out (then `timed_out` is set).
fn stop_on(args: &ConsumeArgs, timed_out: Arc<AtomicBool>) -> impl Future<Output = ()> {
    let timeout = args.timeout;
    async move {
        match timeout {
            Some(t) => {
                tokio::select! {
                    _ = crate::signal::shutdown() => {}
                    _ = tokio::time::sleep(t) => {
                        timed_out.store(true, Ordering::Relaxed);
                        tracing::info!("--timeout reached: finishing open windows, checkpointing and releasing leases");
                    }
                }
            }
            None => crate::signal::shutdown().await,
        }
    }
}

/// After `--timeout` ran out: which shards were not caught up, and why, as the error.
async fn timed_out_error(
    settings: &Settings,
    backend: &Backend,
    app: &str,
    args: &ConsumeArgs,
) -> TimedOut {
    let t = humantime::format_duration(args.timeout.unwrap_or_default());
    let me = settings.worker_config().worker_id;
    let now = tally_core::clock::now_ms();
    let held: Vec<String> = match backend.leases.list_leases(app).await {
        Ok(ls) => ls
            .iter()
            .filter(|l| !l.finished && l.is_held(now) && l.owner.as_deref() != Some(&me))
            .map(|l| {
                format!(
                    "{} (held by {})",
                    l.shard_id,
                    l.owner.as_deref().unwrap_or("?")
                )
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    TimedOut(if held.is_empty() {
        format!(
            "not caught up after {t} (--timeout): the shards were still being read; what was read \
             is applied and checkpointed"
        )
    } else {
        format!(
            "not caught up after {t} (--timeout): other workers hold the leases of {}; what this \
             worker read is applied and checkpointed",
            held.join(", ")
        )
    })
}

/// `--until-idle` cut short by `--timeout`: the process exits with [`TimedOut::EXIT`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TimedOut(String);

impl TimedOut {
    pub const EXIT: i32 = 2;
}

/// While `--until-idle` runs: a counter of the records read, on a terminal.
struct IdleProgress(Option<(indicatif::ProgressBar, tokio::task::JoinHandle<()>)>);

impl IdleProgress {
    fn start(args: &ConsumeArgs, records: impl Fn() -> u64 + Send + 'static) -> IdleProgress {
        if !args.until_idle || args.json {
            return IdleProgress(None);
        }
        let pb = crate::progress::start(None, "records read", false);
        pb.set_message("until every shard is caught up");
        let ticker = {
            let pb = pb.clone();
            tokio::spawn(async move {
                loop {
                    pb.set_position(records());
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            })
        };
        IdleProgress(Some((pb, ticker)))
    }
}

impl Drop for IdleProgress {
    fn drop(&mut self) {
        if let Some((pb, ticker)) = self.0.take() {
            ticker.abort();
            crate::progress::finish(&pb);
        }
    }
}

/// A worker command's run, watched: its `--http` endpoint, how it stops (a signal, or
/// `--timeout`: then `timed_out`) and its progress line until idle.
struct Watch {
    app: &'static str,
    timed_out: Arc<AtomicBool>,
    progress: IdleProgress,
    _http: WorkerHttp,
    /// Where `--http` listens.
    bound: Option<SocketAddr>,
}

impl Watch {
    /// Watches `app`'s run: serves `--http` (`render`: its metrics; `open`: the counter's open
    /// windows, and its worker id), and says where; the watch, and the future that stops the
    /// run (`records`: how many it has read, for the progress line).
    async fn start(
        app: &'static str,
        (args, backend): (&ConsumeArgs, &Backend),
        render: impl Fn() -> anyhow::Result<String> + Clone + Send + Sync + 'static,
        open: Option<(Arc<Board>, String)>,
        records: impl Fn() -> u64 + Send + 'static,
    ) -> Result<(Watch, impl Future<Output = ()>)> {
        let leases = backend.leases.clone();
        let (http, bound) = WorkerHttp::start(args.http, leases, app, render, open).await?;
        if let Some(at) = bound {
            tally_serve::say_serving(at);
        }
        let timed_out = Arc::new(AtomicBool::new(false));
        let stop = stop_on(args, timed_out.clone());
        let progress = IdleProgress::start(args, records);
        let watch = Watch {
            app,
            timed_out,
            progress,
            _http: http,
            bound,
        };
        Ok((watch, stop))
    }

    /// After the run: prints the report (`--json`: the object `v`; else `line`, on stderr),
    /// then, if `--timeout` stopped it, answers which shards were not caught up as the error.
    async fn report(
        self,
        settings: &Settings,
        backend: &Backend,
        args: &ConsumeArgs,
        v: &serde_json::Value,
        line: String,
    ) -> Result<()> {
        drop(self.progress);
        if args.json {
            print_json(v);
        } else {
            eprintln!("{line}");
        }
        if self.timed_out.load(Ordering::Relaxed) {
            return Err(timed_out_error(settings, backend, self.app, args)
                .await
                .into());
        }
        Ok(())
    }
}

fn idle_for(args: &ConsumeArgs) -> Arc<IdleExit> {
    let idle = Arc::new(IdleExit::default());
    if args.until_idle {
        idle.arm();
    }
    idle
}

pub async fn count(settings: &Settings, backend: &Backend, args: &ConsumeArgs) -> Result<()> {
    let run = CounterRun::default();
    let board = Arc::new(Board::default());
    let open = Some((board.clone(), settings.worker_config().worker_id));
    let render = {
        let run = run.clone();
        move || tally_serve::prom::counter_metrics(&run)
    };
    let records = {
        let m = run.metrics.clone();
        move || m.records.load(Ordering::Relaxed)
    };
    let (watch, stop) = Watch::start(apps::COUNTER, (args, backend), render, open, records).await?;
    let shown = match watch.bound {
        Some(at) => Some(Shown {
            board,
            advertise: advertise_addr(args.advertise.as_deref(), at).await,
        }),
        None => None,
    };
    let run = run_counter(settings, backend, idle_for(args), stop, run, shown).await?;
    let (m, l) = (&run.metrics, &run.leases);
    let records = m.records.load(Ordering::Relaxed);
    let applied = m.applied_records.load(Ordering::Relaxed);
    let v = json!({
        "records": records,
        "applied_records": applied,
        "not_applied_here": records.saturating_sub(applied),
        "counted": m.counted.load(Ordering::Relaxed),
        "duplicates": m.duplicates.load(Ordering::Relaxed),
        "malformed": m.malformed.load(Ordering::Relaxed),
        "skipped": m.skipped.load(Ordering::Relaxed),
        "windows": m.windows.load(Ordering::Relaxed),
        "edges_changed": m.edges_changed.load(Ordering::Relaxed),
        "items_written": m.items_written.load(Ordering::Relaxed) + run.changes.items_written.load(Ordering::Relaxed),
        "writes_refused": m.writes_refused.load(Ordering::Relaxed) + run.changes.writes_refused.load(Ordering::Relaxed),
        "items_read": m.items_read.load(Ordering::Relaxed) + run.changes.items_read.load(Ordering::Relaxed),
        "changes": changes_json(&run),
        "write_units": answers::write_units(&run.units()),
        "leases": json!(l.as_ref()),
    });
    let line = stopped_summary(&v);
    watch.report(settings, backend, args, &v, line).await
}

/// Counting likers, what the second stage (the edges' change log) did: changes read and
/// counted, windows, its leases.
fn changes_json(run: &CounterRun) -> serde_json::Value {
    let c = &run.changes;
    json!({
        "records": c.records.load(Ordering::Relaxed),
        "counted": c.counted.load(Ordering::Relaxed),
        "windows": c.windows.load(Ordering::Relaxed),
        "malformed": c.malformed.load(Ordering::Relaxed),
        "leases": json!(run.change_leases.as_ref()),
    })
}

/// The counter's last words, adding up: the records it read are those in the windows it applied
/// (their user records counted, duplicates or malformed) and those it did not apply itself.
fn stopped_summary(v: &serde_json::Value) -> String {
    let mut line = format!(
        "counter stopped: {} records read, {} of them in the {} windows it applied ({} counted, {} duplicates, {} malformed)",
        v["records"], v["applied_records"], v["windows"], v["counted"], v["duplicates"], v["malformed"]
    );
    if v["not_applied_here"].as_u64().is_some_and(|n| n > 0) {
        line += &format!(
            "; {} read again by the shard's next holder (a lease moved before their window was written) or applied already",
            v["not_applied_here"]
        );
    }
    let changes = &v["changes"];
    if changes["records"].as_u64().is_some_and(|n| n > 0) {
        line += &format!(
            "; its change log: {} changes read, {} windows applied",
            changes["records"], changes["windows"]
        );
    }
    line
}

/// `tally route`: the router until stopped or idle; what it read and put to other regions.
pub async fn route(settings: &Settings, backend: &Backend, args: &ConsumeArgs) -> Result<()> {
    let run = Run::<tally_router::RouterMetrics>::default();
    let render = {
        let r = run.clone();
        move || {
            let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            let m = &r.metrics;
            tally_serve::prom::router_metrics(load(&m.records), load(&m.routed), &r.leases)
        }
    };
    let records = {
        let m = run.metrics.clone();
        move || m.records.load(Ordering::Relaxed)
    };
    let (watch, stop) = Watch::start(apps::ROUTER, (args, backend), render, None, records).await?;
    let run = crate::apps::run_router(settings, backend, idle_for(args), stop, run).await?;
    let v = run.json();
    let line = format!(
        "router stopped: {} records read, {} put to other regions",
        v["records"], v["routed"]
    );
    watch.report(settings, backend, args, &v, line).await
}

pub async fn analytics(settings: &Settings, backend: &Backend, args: &ConsumeArgs) -> Result<()> {
    let run = Run::<AnalyticsMetrics>::default();
    let render = {
        let r = run.clone();
        move || tally_serve::prom::analytics_metrics(&r.metrics, &r.leases)
    };
    let records = {
        let m = run.metrics.clone();
        move || m.records.load(Ordering::Relaxed)
    };
    let (watch, stop) =
        Watch::start(apps::ANALYTICS, (args, backend), render, None, records).await?;
    let run = run_analytics(settings, backend, idle_for(args), stop, run).await?;
    let v = run.json();
    let line = format!(
        "analytics stopped: {} records, {} likes, {} snapshots",
        v["records"], v["likes"], v["snapshots"]
    );
    watch.report(settings, backend, args, &v, line).await
}
