//! The subcommands. Each takes the loaded settings and the wired backend.

pub mod baselines;
pub mod consume;
pub mod demo;
pub mod produce;
pub mod read;
pub mod setup;

use std::time::Duration;

use tally_analytics::AnalyticsConfig;
use tally_consumer::worker::{default_worker_id, WorkerConfig};
use tally_core::apps;
use tally_counter::CounterConfig;
use tally_producer::generate::GenConfig;

use crate::settings::Settings;

/// The runtime settings of a worker of `app`.
pub fn worker_config(settings: &Settings, app: &str) -> WorkerConfig {
    let l = &settings.lease;
    let id = if l.worker_id.is_empty() {
        default_worker_id()
    } else {
        l.worker_id.clone()
    };
    let mut w = WorkerConfig::new(app, &id);
    w.lease_duration = Settings::ms(l.duration_ms);
    w.renew_interval = Settings::ms(l.renew_ms);
    w.lease_poll_interval = Settings::ms(l.poll_ms);
    w.discovery_interval = Settings::ms(l.discovery_ms);
    w.idle_poll = Settings::ms(l.idle_poll_ms);
    w.batch_limit = l.batch_limit;
    w.max_leases_per_worker = l.max_per_worker;
    w.shutdown_timeout = Settings::ms(l.shutdown_timeout_ms);
    w.finished_lease_grace = Duration::from_secs(l.finished_grace_secs);
    w.lineage_horizon = Duration::from_secs(settings.counter.dedup_horizon_secs);
    w.stats_interval = Settings::ms(settings.metrics.interval_ms);
    w.emf = emf(settings);
    w
}

/// The counter's settings.
pub fn counter_config(settings: &Settings) -> CounterConfig {
    let mut c = CounterConfig::new(apps::COUNTER);
    c.window_records = settings.counter.window_records;
    c.window_time = Settings::ms(settings.counter.window_ms);
    c.close_when_caught_up = settings.counter.close_when_caught_up;
    c.dedup_horizon = Duration::from_secs(settings.counter.dedup_horizon_secs);
    c.count = settings.counter.count;
    c.max_clock_skew = Duration::from_secs(settings.counter.max_clock_skew_secs);
    c.posts_per_batch = settings.counter.posts_per_batch;
    c.crash_after_batches = std::env::var(crate::settings::FAILPOINT_VAR)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n > 0);
    c.emf = emf(settings);
    c
}

/// The analytics settings.
pub fn analytics_config(settings: &Settings) -> AnalyticsConfig {
    let mut a = AnalyticsConfig::new(apps::ANALYTICS);
    a.sketch_capacity = settings.analytics.sketch_capacity;
    a.half_life = Duration::from_secs(settings.analytics.half_life_secs);
    a.window_records = settings.analytics.window_records;
    a.window_time = Settings::ms(settings.analytics.window_ms);
    a.emf = emf(settings);
    a.dedup_horizon = Duration::from_secs(settings.counter.dedup_horizon_secs);
    a.likers = settings.counter.count == tally_core::edge::CountMode::Likers;
    a
}

/// Where the consumers' EMF metrics go.
fn emf(settings: &Settings) -> tally_consumer::emf::Emf {
    tally_consumer::emf::Emf {
        namespace: settings
            .metrics
            .emf
            .then(|| settings.metrics.namespace.clone()),
    }
}

/// Counting likers, the share of generated events that change no liker: a liker's second tap, an
/// unlike of a post the user does not like.
pub const NO_OP_RATIO: f64 = 0.05;

/// The generator's settings.
pub fn gen_config(settings: &Settings, events: u64) -> GenConfig {
    let p = &settings.producer;
    GenConfig {
        events,
        posts: p.posts,
        zipf_exponent: p.zipf_exponent,
        users: p.users,
        unlike_ratio: p.unlike_ratio,
        // Counting likers, what users do includes actions that change nothing.
        no_op_ratio: match settings.counter.count {
            tally_core::edge::CountMode::Likers => NO_OP_RATIO,
            tally_core::edge::CountMode::Events => 0.0,
        },
        duplicate_ratio: p.duplicate_ratio,
        malformed_ratio: p.malformed_ratio,
        seed: p.seed,
    }
}

/// Shared handle to print JSON.
/// Epoch milliseconds as an RFC 3339 time, to the second (a time before 1970 shows as 1970).
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

pub fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
