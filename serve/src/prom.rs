//! Prometheus text for `/metrics`: the store's view (`tally serve`) and a worker's own counters
//! (`tally count --http`, `tally analytics --http`), encoded by `prometheus-client`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tally_analytics::AnalyticsMetrics;
use tally_consumer::worker::LeaseMetrics;
use tally_core::apps;
use tally_core::clock::now_ms;
use tally_counter::app::CounterRun;
use tally_counter::CounterMetrics;

use super::Ctx;

/// The content type of Prometheus text exposition format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A `/metrics` answer.
pub fn text(r: anyhow::Result<String>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match r {
        Ok(t) => ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], t).into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("{e:#}\n"),
        )
            .into_response(),
    }
}

type Labels = Vec<(String, String)>;

fn gauge(reg: &mut Registry, name: &str, help: &str, v: i64) {
    let g = Gauge::<i64, AtomicI64>::default();
    g.set(v);
    reg.register(name, help, g);
}

fn render(reg: &Registry) -> anyhow::Result<String> {
    let mut out = String::new();
    encode(&mut out, reg)?;
    Ok(out)
}

/// What the store says: totals, dead letters, per-shard progress and lag, leases per worker,
/// latency percentiles and histograms.
pub async fn store_metrics(c: &Ctx) -> anyhow::Result<String> {
    let b = &c.read;
    let mut reg = Registry::with_prefix("tally");
    gauge(
        &mut reg,
        "likes",
        "The global total of likes counted",
        b.counts.global_total().await?,
    );
    gauge(
        &mut reg,
        "dead_letters",
        "Records dead-lettered (malformed, or lost to retention as gaps)",
        b.letters.dead_letter_count().await? as i64,
    );
    let now = now_ms();
    shard_metrics(&mut reg, c, now);
    let hist =
        tally_analytics::latency_windows(b.analytics.as_ref(), apps::ANALYTICS, now - 3_600_000)
            .await?;
    latency_quantiles(&mut reg, &hist.report());
    let mut text = render(&reg)?;
    // The merged histograms themselves, written after the registry's metrics because
    // prometheus-client builds histograms from observations only.
    if let Some(body) = text.strip_suffix("# EOF\n") {
        text = body.to_owned();
    }
    latency_histograms(&mut text, &hist.merged);
    text.push_str("# EOF\n");
    Ok(text)
}

/// Per shard, from the background listing (a scrape costs no store call per shard): the latest
/// record applied, the reader's lag, the time since the last record; leases held per worker and
/// shards by state.
fn shard_metrics(reg: &mut Registry, c: &Ctx, now: i64) {
    let applied = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let lag = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let quiet = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let held = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let shards = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    for app in [apps::COUNTER, apps::ANALYTICS] {
        let listing = c.listings.get(app);
        for st in &listing.states {
            let l = &st.lease;
            let shard = vec![
                ("app".to_owned(), app.to_owned()),
                ("shard".to_owned(), l.shard_id.clone()),
            ];
            let state = if l.finished {
                "finished"
            } else if l.is_held(now) {
                "held"
            } else {
                "free"
            };
            shards
                .get_or_create(&vec![
                    ("app".to_owned(), app.to_owned()),
                    ("state".to_owned(), state.to_owned()),
                ])
                .inc();
            if let Some(owner) = l.owner.as_ref().filter(|_| l.is_held(now)) {
                held.get_or_create(&vec![
                    ("app".to_owned(), app.to_owned()),
                    ("owner".to_owned(), owner.clone()),
                ])
                .inc();
            }
            if l.max_arrival != i64::MIN {
                applied.get_or_create(&shard).set(l.max_arrival);
                if !l.finished {
                    quiet
                        .get_or_create(&shard)
                        .set((now - l.max_arrival).max(0));
                }
            }
            if let (false, Some((behind, _))) = (l.finished, super::freshness::lag(st, now)) {
                lag.get_or_create(&shard).set(behind);
            }
        }
    }
    reg.register(
        "shard_applied_arrival_ms",
        "Arrival time of the latest record a shard has applied (ms since the epoch)",
        applied,
    );
    reg.register(
        "shard_lag_ms",
        "How far behind its shard's tip the reader is, as its last lease renewal reported, plus the time since when no worker holds the shard (ms; 0: read to the tip)",
        lag,
    );
    reg.register(
        "shard_since_last_record_ms",
        "How long ago the latest record a shard has applied arrived (ms; grows on an idle stream)",
        quiet,
    );
    reg.register("leases_held", "Leases held, by app and worker", held);
    reg.register(
        "shards",
        "Shards by app and state (held, free, finished)",
        shards,
    );
}

/// The last hour's latency quantiles, by kind; a kind without values has none (a 0 would read
/// as a latency of 0).
fn latency_quantiles(reg: &mut Registry, lat: &tally_analytics::LatencyReport) {
    let q = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    for (kind, p) in [
        ("creation", lat.creation_ms),
        ("arrival", lat.arrival_ms),
        ("iterator_age", lat.iterator_age_ms),
    ] {
        if p.count == 0 {
            continue;
        }
        for (quantile, v) in [
            ("0.5", p.p50),
            ("0.9", p.p90),
            ("0.99", p.p99),
            ("0.999", p.p999),
            ("1", p.max),
        ] {
            q.get_or_create(&vec![
                ("kind".to_owned(), kind.to_owned()),
                ("quantile".to_owned(), quantile.to_owned()),
            ])
            .set(v as i64);
        }
    }
    reg.register(
        "latency_ms",
        "Latency over the last hour's analytics windows (HdrHistogram quantiles): creation → processing, arrival → processing, iterator age",
        q,
    );
    gauge(
        reg,
        "latency_windows",
        "Analytics windows merged into latency_ms",
        lat.windows as i64,
    );
}

/// The merged histograms as a Prometheus histogram (cumulative buckets) in the text format.
fn latency_histograms(text: &mut String, merged: &tally_core::latency::Latency) {
    text.push_str("# HELP tally_latency_histogram_ms Latency over the last hour's analytics windows, merged HdrHistograms.\n");
    text.push_str("# TYPE tally_latency_histogram_ms histogram\n");
    for (kind, h) in [
        ("creation", &merged.creation),
        ("arrival", &merged.arrival),
        ("iterator_age", &merged.iterator_age),
    ] {
        let (b, count, sum) = tally_core::latency::buckets(h);
        for (le, n) in b {
            text.push_str(&format!(
                "tally_latency_histogram_ms_bucket{{kind=\"{kind}\",le=\"{le}\"}} {n}\n"
            ));
        }
        text.push_str(&format!(
            "tally_latency_histogram_ms_bucket{{kind=\"{kind}\",le=\"+Inf\"}} {count}\n"
        ));
        text.push_str(&format!(
            "tally_latency_histogram_ms_sum{{kind=\"{kind}\"}} {sum}\n"
        ));
        text.push_str(&format!(
            "tally_latency_histogram_ms_count{{kind=\"{kind}\"}} {count}\n"
        ));
    }
}

/// One counter family, registered once, with a sample per label set: a name may appear once in
/// the text, whichever of a worker's stages the samples are of.
fn counters(reg: &mut Registry, name: &str, help: &str, samples: &[(Labels, u64)]) {
    let f = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (labels, v) in samples {
        f.get_or_create(labels).inc_by(*v);
    }
    reg.register(name, help, f);
}

/// One gauge family, registered once, with a sample per label set.
fn gauges(reg: &mut Registry, name: &str, help: &str, samples: &[(Labels, i64)]) {
    let f = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    for (labels, v) in samples {
        f.get_or_create(labels).set(*v);
    }
    reg.register(name, help, f);
}

fn app_label(app: &str) -> Labels {
    vec![("app".to_owned(), app.to_owned())]
}

/// A worker's leases, of each of its apps (`tally count`: the stream's and the change log's),
/// each family once with a sample per app; and the process's retries, once, under its first app
/// (the worker's: its stages share one retry count).
fn lease_metrics(reg: &mut Registry, stages: &[(&str, &LeaseMetrics)]) {
    if let Some((app, _)) = stages.first() {
        counters(
            reg,
            "retries",
            "Throttled, failed or unanswered store and stream calls tried again",
            &[(app_label(app), tally_consumer::retry::retries())],
        );
    }
    let of = |f: fn(&LeaseMetrics) -> &AtomicU64| -> Vec<(Labels, u64)> {
        stages
            .iter()
            .map(|(app, l)| (app_label(app), f(l).load(Ordering::Relaxed)))
            .collect()
    };
    for (name, help, v) in [
        (
            "leases_taken",
            "Leases taken",
            of(|l: &LeaseMetrics| &l.taken),
        ),
        (
            "leases_stolen",
            "Leases stolen from a more loaded worker",
            of(|l: &LeaseMetrics| &l.stolen),
        ),
        (
            "leases_released",
            "Leases released",
            of(|l: &LeaseMetrics| &l.released),
        ),
        (
            "leases_lost",
            "Leases lost to another worker",
            of(|l: &LeaseMetrics| &l.lost),
        ),
        (
            "leases_renewed",
            "Lease renewals",
            of(|l: &LeaseMetrics| &l.renewed),
        ),
        (
            "shards_finished",
            "Shards read to their end and finished",
            of(|l: &LeaseMetrics| &l.finished),
        ),
    ] {
        counters(reg, name, help, &v);
    }
    let held: Vec<(Labels, i64)> = stages
        .iter()
        .map(|(app, l)| (app_label(app), l.held.load(Ordering::Relaxed) as i64))
        .collect();
    gauges(reg, "leases_held", "Leases this worker holds", &held);
}

/// A counter worker's own metrics: each of its two stages' (the stream's, app `counter`; the
/// edges' change log's, app `changes`, idle counting events) as samples of one family, by `app`.
pub fn counter_metrics(run: &CounterRun) -> anyhow::Result<String> {
    let stages = run.stages();
    let mut reg = Registry::with_prefix("tally");
    let of = |f: fn(&CounterMetrics) -> &AtomicU64| -> Vec<(Labels, u64)> {
        stages
            .iter()
            .map(|(app, m, _)| (app_label(app), f(m).load(Ordering::Relaxed)))
            .collect()
    };
    for (name, help, v) in [
        (
            "records",
            "Records read",
            of(|m: &CounterMetrics| &m.records),
        ),
        (
            "counted",
            "Events counted (first seen)",
            of(|m: &CounterMetrics| &m.counted),
        ),
        (
            "duplicates",
            "Producer retries recognised and dropped",
            of(|m: &CounterMetrics| &m.duplicates),
        ),
        (
            "malformed",
            "Records dead-lettered as malformed",
            of(|m: &CounterMetrics| &m.malformed),
        ),
        (
            "skipped",
            "Change records of items that are no likes, skipped",
            of(|m: &CounterMetrics| &m.skipped),
        ),
        (
            "windows",
            "Windows applied",
            of(|m: &CounterMetrics| &m.windows),
        ),
        (
            "edges_changed",
            "Likers: edge writes that changed an edge (each logged once)",
            of(|m: &CounterMetrics| &m.edges_changed),
        ),
        (
            "items_written",
            "Store items written",
            of(|m: &CounterMetrics| &m.items_written),
        ),
        (
            "writes_refused",
            "Writes refused as already applied",
            of(|m: &CounterMetrics| &m.writes_refused),
        ),
    ] {
        counters(&mut reg, name, help, &v);
    }
    let mut units = Vec::new();
    for (app, m, l) in stages {
        let u = tally_counter::app::stage_units(m, l);
        for p in tally_core::cost::Purpose::ALL {
            let mut labels = app_label(app);
            labels.push(("purpose".to_owned(), p.name().to_owned()));
            units.push((labels, u.get(p)));
        }
    }
    counters(
        &mut reg,
        "write_units",
        "DynamoDB write units spent, by app and purpose (by DynamoDB's rules)",
        &units,
    );
    let ages: Vec<(Labels, i64)> = stages
        .iter()
        .map(|(app, m, _)| {
            (
                app_label(app),
                m.max_iterator_age_ms.load(Ordering::Relaxed) as i64,
            )
        })
        .collect();
    gauges(
        &mut reg,
        "iterator_age_max_ms",
        "The largest iterator age seen (ms)",
        &ages,
    );
    let leases: Vec<(&str, &LeaseMetrics)> = stages.iter().map(|(app, _, l)| (*app, *l)).collect();
    lease_metrics(&mut reg, &leases);
    render(&reg)
}

/// An analytics worker's own metrics.
pub fn analytics_metrics(m: &AnalyticsMetrics, l: &LeaseMetrics) -> anyhow::Result<String> {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let likes = "Like events folded into trending and latency";
    worker_metrics(
        apps::ANALYTICS,
        &[
            ("records", "Records read", load(&m.records)),
            ("likes", likes, load(&m.likes)),
            (
                "snapshots",
                "Analytics snapshots stored",
                load(&m.snapshots),
            ),
        ],
        l,
    )
}

/// The router's metrics (`tally route --http`): records read and put to other regions, and its
/// leases.
pub fn router_metrics(records: u64, routed: u64, l: &LeaseMetrics) -> anyhow::Result<String> {
    let routed_help =
        "Records put to another region's stream (once per region they have likes for)";
    worker_metrics(
        apps::ROUTER,
        &[
            ("records", "Records read", records),
            ("routed", routed_help, routed),
        ],
        l,
    )
}

/// A one-stage worker's metrics: its counters (name, help, value) and its leases.
fn worker_metrics(
    app: &str,
    samples: &[(&str, &str, u64)],
    l: &LeaseMetrics,
) -> anyhow::Result<String> {
    let mut reg = Registry::with_prefix("tally");
    for (name, help, v) in samples {
        counters(&mut reg, name, help, &[(app_label(app), *v)]);
    }
    lease_metrics(&mut reg, &[(app, l)]);
    render(&reg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-stage workers' metrics: each counter once, labelled with the app, beside the
    /// leases' families and the retries.
    #[test]
    fn analytics_and_router_metrics_name_their_app() {
        let m = AnalyticsMetrics::default();
        m.likes.store(7, Ordering::Relaxed);
        let text = analytics_metrics(&m, &LeaseMetrics::default()).unwrap();
        for line in [
            "tally_records_total{app=\"analytics\"} 0",
            "tally_likes_total{app=\"analytics\"} 7",
            "tally_snapshots_total{app=\"analytics\"} 0",
            "tally_leases_taken_total{app=\"analytics\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE tally_retries counter").count(), 1);
        let text = router_metrics(3, 2, &LeaseMetrics::default()).unwrap();
        for line in [
            "tally_records_total{app=\"router\"} 3",
            "tally_routed_total{app=\"router\"} 2",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
