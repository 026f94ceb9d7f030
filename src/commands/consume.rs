//! `tally count` and `tally analytics`: the long-running consumers.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::Result;
use serde_json::json;
use tally_analytics::{Analytics, AnalyticsMetrics};
use tally_consumer::counter::{Counter, CounterMetrics};
use tally_consumer::worker::{self, IdleExit, LeaseMetrics, ProcessorFactory, WorkerDeps};
use tally_core::apps;

use super::{analytics_config, counter_config, print_json, shutdown_signal, worker_config};
use crate::backend::Backend;
use crate::cli::ConsumeArgs;
use crate::settings::Settings;

/// Runs a worker of `app` with this processor factory until `shutdown`, or until idle once
/// `idle` is armed; returns its lease metrics.
async fn run_app(
    s: &Settings,
    b: &Backend,
    app: &str,
    factory: Arc<dyn ProcessorFactory>,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
) -> Result<Arc<LeaseMetrics>> {
    let leases = Arc::new(LeaseMetrics::default());
    let deps = WorkerDeps {
        stream: b.stream.clone(),
        leases: b.leases.clone(),
        factory,
    };
    worker::run(deps, worker_config(s, app), idle, leases.clone(), shutdown).await?;
    Ok(leases)
}

/// Runs a counter worker until `shutdown`, or until idle once `idle` is armed.
pub async fn run_counter(
    s: &Settings,
    b: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
) -> Result<(Arc<CounterMetrics>, Arc<LeaseMetrics>)> {
    let metrics = Arc::new(CounterMetrics::default());
    let factory = Counter::new(b.counter.clone(), counter_config(s), metrics.clone());
    let leases = run_app(s, b, apps::COUNTER, Arc::new(factory), idle, shutdown).await?;
    Ok((metrics, leases))
}

/// Runs an analytics worker until `shutdown`, or until idle once `idle` is armed.
pub async fn run_analytics(
    s: &Settings,
    b: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
) -> Result<(Arc<AnalyticsMetrics>, Arc<LeaseMetrics>)> {
    let metrics = Arc::new(AnalyticsMetrics::default());
    let factory = Analytics::new(b.analytics.clone(), analytics_config(s), metrics.clone());
    let leases = run_app(s, b, apps::ANALYTICS, Arc::new(factory), idle, shutdown).await?;
    Ok((metrics, leases))
}

fn idle_for(a: &ConsumeArgs) -> Arc<IdleExit> {
    let idle = Arc::new(IdleExit::default());
    if a.until_idle {
        idle.arm();
    }
    idle
}

/// Write units by purpose, as DynamoDB would charge the counter's writes (the lease writes
/// included), with their total.
pub fn cost(m: &CounterMetrics, l: &LeaseMetrics) -> tally_core::cost::Units {
    let mut u = m.cost.snapshot();
    u.add(tally_core::cost::Purpose::Leases, l.write_units());
    u
}

/// [`cost`] as JSON: `{"counts": N, …, "total": N}`.
pub fn cost_json(u: &tally_core::cost::Units) -> serde_json::Value {
    let mut o = serde_json::Map::new();
    for p in tally_core::cost::Purpose::ALL {
        o.insert(p.name().to_owned(), u.get(p).into());
    }
    o.insert("total".to_owned(), u.total().into());
    serde_json::Value::Object(o)
}

fn lease_json(l: &LeaseMetrics) -> serde_json::Value {
    json!({
        "taken": l.taken.load(Ordering::Relaxed),
        "stolen": l.stolen.load(Ordering::Relaxed),
        "released": l.released.load(Ordering::Relaxed),
        "lost": l.lost.load(Ordering::Relaxed),
        "finished": l.finished.load(Ordering::Relaxed),
    })
}

pub async fn count(s: &Settings, b: &Backend, a: &ConsumeArgs) -> Result<()> {
    let (m, l) = run_counter(s, b, idle_for(a), shutdown_signal()).await?;
    let v = json!({
        "records": m.records.load(Ordering::Relaxed),
        "counted": m.counted.load(Ordering::Relaxed),
        "duplicates": m.duplicates.load(Ordering::Relaxed),
        "malformed": m.malformed.load(Ordering::Relaxed),
        "windows": m.windows.load(Ordering::Relaxed),
        "items_written": m.items_written.load(Ordering::Relaxed),
        "writes_refused": m.writes_refused.load(Ordering::Relaxed),
        "items_read": m.items_read.load(Ordering::Relaxed),
        "write_units": cost_json(&cost(&m, &l)),
        "leases": lease_json(&l),
    });
    if a.json {
        print_json(&v);
    } else {
        eprintln!(
            "counter stopped: {} records, {} counted, {} duplicates, {} malformed, {} windows",
            v["records"], v["counted"], v["duplicates"], v["malformed"], v["windows"]
        );
    }
    Ok(())
}

pub async fn analytics(s: &Settings, b: &Backend, a: &ConsumeArgs) -> Result<()> {
    let (m, l) = run_analytics(s, b, idle_for(a), shutdown_signal()).await?;
    let v = json!({
        "records": m.records.load(Ordering::Relaxed),
        "likes": m.likes.load(Ordering::Relaxed),
        "snapshots": m.snapshots.load(Ordering::Relaxed),
        "leases": lease_json(&l),
    });
    if a.json {
        print_json(&v);
    } else {
        eprintln!(
            "analytics stopped: {} records, {} likes, {} snapshots",
            v["records"], v["likes"], v["snapshots"]
        );
    }
    Ok(())
}
