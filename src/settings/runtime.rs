//! The settings as each part of the pipeline takes them: a worker's, the counter's, analytics'
//! and the generator's configuration, from the one loaded, validated [`Settings`].

use std::time::Duration;

use tally_analytics::AnalyticsConfig;
use tally_consumer::worker::{default_worker_id, WorkerConfig};
use tally_core::apps;
use tally_counter::CounterConfig;
use tally_producer::generate::GenConfig;

use super::Settings;

/// Counting likers, the share of generated events that change no liker: a liker's second tap, an
/// unlike of a post the user does not like.
pub const NO_OP_RATIO: f64 = 0.05;

/// The demo's producer retries and malformed records, unless configured: some of each, so the
/// report shows them handled (`cargo bench --bench demo` puts the same for its floor).
pub const DEMO_DUPLICATE_RATIO: f64 = 0.02;
/// See [`DEMO_DUPLICATE_RATIO`].
pub const DEMO_MALFORMED_RATIO: f64 = 0.001;

impl Settings {
    /// The runtime settings of a worker of `app`.
    pub fn worker_config(&self, app: &str) -> WorkerConfig {
        let l = &self.lease;
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
        w.lineage_horizon = Duration::from_secs(self.counter.dedup_horizon_secs);
        w.stats_interval = Settings::ms(self.metrics.interval_ms);
        w.emf = self.emf();
        w
    }

    /// The counter's configuration.
    pub fn counter_config(&self) -> CounterConfig {
        let mut c = CounterConfig::new(apps::COUNTER);
        c.window_records = self.counter.window_records;
        c.window_time = Settings::ms(self.counter.window_ms);
        c.close_when_caught_up = self.counter.close_when_caught_up;
        c.dedup_horizon = Duration::from_secs(self.counter.dedup_horizon_secs);
        c.count = self.counter.count;
        c.max_clock_skew = Duration::from_secs(self.counter.max_clock_skew_secs);
        c.posts_per_batch = self.counter.posts_per_batch;
        c.crash_after_batches = std::env::var(crate::settings::FAILPOINT_VAR)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|n| *n > 0);
        c.emf = self.emf();
        c
    }

    /// The analytics configuration.
    pub fn analytics_config(&self) -> AnalyticsConfig {
        let mut a = AnalyticsConfig::new(apps::ANALYTICS);
        a.sketch_capacity = self.analytics.sketch_capacity;
        a.half_life = Duration::from_secs(self.analytics.half_life_secs);
        a.window_records = self.analytics.window_records;
        a.window_time = Settings::ms(self.analytics.window_ms);
        a.emf = self.emf();
        a.dedup_horizon = Duration::from_secs(self.counter.dedup_horizon_secs);
        a.likers = self.counter.count == tally_core::edge::CountMode::Likers;
        a
    }

    /// Where the consumers' EMF metrics go.
    fn emf(&self) -> tally_consumer::emf::Emf {
        tally_consumer::emf::Emf {
            namespace: self.metrics.emf.then(|| self.metrics.namespace.clone()),
        }
    }

    /// The generator's settings.
    pub fn gen_config(&self, events: u64) -> GenConfig {
        let p = &self.producer;
        GenConfig {
            events,
            posts: p.posts,
            zipf_exponent: p.zipf_exponent,
            users: p.users,
            unlike_ratio: p.unlike_ratio,
            // Counting likers, what users do includes actions that change nothing.
            no_op_ratio: match self.counter.count {
                tally_core::edge::CountMode::Likers => NO_OP_RATIO,
                tally_core::edge::CountMode::Events => 0.0,
            },
            duplicate_ratio: p.duplicate_ratio,
            malformed_ratio: p.malformed_ratio,
            seed: p.seed,
        }
    }

    /// The demo's settings: these, with some producer retries and malformed records unless
    /// they were configured (`duplicate_given`, `malformed_given`: set on the command line), and
    /// no rate limit.
    pub fn for_demo(&self, duplicate_given: bool, malformed_given: bool) -> Settings {
        let mut s = self.clone();
        if !duplicate_given && s.producer.duplicate_ratio == 0.0 {
            s.producer.duplicate_ratio = DEMO_DUPLICATE_RATIO;
        }
        if !malformed_given && s.producer.malformed_ratio == 0.0 {
            s.producer.malformed_ratio = DEMO_MALFORMED_RATIO;
        }
        s.producer.rate = 0.0;
        s
    }
}
