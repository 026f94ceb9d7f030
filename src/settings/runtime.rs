//! The settings as each part of the pipeline takes them: a worker's, the counter's, analytics'
//! and the generator's configuration, from the one loaded, validated [`Settings`].

use std::time::Duration;

use tally_analytics::AnalyticsContext;
use tally_consumer::worker::{default_worker_id, WorkerConfig, WorkerContext};
use tally_core::apps;
use tally_core::input::Format;
use tally_counter::CounterContext;
use tally_producer::change::ChangeConfig;
use tally_producer::generate::Generation;
use tally_producer::keys::HotPosts;
use tally_producer::produce::Plan;

use super::Settings;

/// Counting likers, the share of generated events that change no liker: a liker's second tap, an
/// unlike of a post the user does not like.
pub const NO_OP_RATIO: f64 = 0.05;

/// A generated change stream's share of actions followed by a change to another item of the
/// post (its metadata, a comment): records the counter skips.
pub const OTHER_ITEMS_RATIO: f64 = 0.05;

/// The demo's producer retries and malformed records, unless configured: some of each, so the
/// report shows them handled (`cargo bench --bench demo` puts the same for its floor).
pub const DEMO_DUPLICATE_RATIO: f64 = 0.02;
/// See [`DEMO_DUPLICATE_RATIO`].
pub const DEMO_MALFORMED_RATIO: f64 = 0.001;

impl Settings {
    /// A worker's settings: the `[lease]` section, with an identity when none is configured.
    pub fn worker_config(&self) -> WorkerConfig {
        let mut w = self.lease.clone();
        if w.worker_id.is_empty() {
            w.worker_id = default_worker_id();
        }
        w
    }

    /// What a worker of `app` runs with beside them: the application, the lineage's horizon
    /// (the counter's dedup horizon) and the metrics' interval and sink.
    pub fn worker_context(&self, app: &str) -> WorkerContext {
        WorkerContext {
            lineage_horizon: self.counter.dedup_horizon,
            stats_interval: Duration::from_millis(self.metrics.interval_ms),
            emf: self.emf(),
            ..WorkerContext::new(app)
        }
    }

    /// What the process adds to the counter's settings (`[counter]`): the tests' failpoint, the metrics, what the records are.
    pub fn counter_context(&self) -> CounterContext {
        CounterContext {
            crash_after_batches: std::env::var(crate::settings::FAILPOINT_VAR)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|n| *n > 0),
            emf: self.emf(),
            input: self.record_input(),
            ..CounterContext::default()
        }
    }

    /// What analytics runs with beside its settings (`[analytics]`): its application, the metrics, and the counter's
    /// horizon and count mode and the input's format.
    pub fn analytics_context(&self) -> AnalyticsContext {
        AnalyticsContext {
            app: apps::ANALYTICS.to_owned(),
            emf: self.emf(),
            dedup_horizon: self.counter.dedup_horizon,
            count: self.counter.count,
            input: self.record_input(),
        }
    }

    /// What the stream's records are, decided once from `[input]`.
    pub fn record_input(&self) -> tally_core::input::Input {
        // Validated when the settings were read.
        let homes = self.regions.homes().unwrap_or(None);
        tally_core::input::Input::of(&self.input).homed(homes)
    }

    /// Where the consumers' EMF metrics go.
    fn emf(&self) -> tally_consumer::emf::Emf {
        tally_consumer::emf::Emf {
            namespace: self.metrics.emf.then(|| self.metrics.namespace.clone()),
        }
    }

    /// The generator's run: the `[producer]` section, for `events` events and, counting
    /// likers, some actions that change no liker.
    pub fn gen_config(&self, events: u64) -> Generation {
        Generation {
            no_op_ratio: match self.counter.count.keeps_edges() {
                true => NO_OP_RATIO,
                false => 0.0,
            },
            ..Generation::of(self.producer.clone(), events)
        }
    }

    /// The hot posts the `[producer]` section names, with their keys fanned out.
    pub fn hot_posts(&self) -> HotPosts {
        HotPosts::new(
            self.producer.hot_posts.iter().cloned(),
            self.producer.hot_post_keys,
        )
    }

    /// What `tally produce` and the demo generate and put: `events` events
    /// ([`Settings::gen_config`]), as a table's change records when the input is one, with the
    /// hot posts' keys fanned out, at the `[producer]` rate.
    pub fn produce_plan(&self, events: u64) -> Plan {
        let changes = (self.input.format == Format::Dynamodb).then(|| ChangeConfig {
            input: self.input.clone(),
            late_ratio: self.producer.duplicate_ratio,
            other_ratio: OTHER_ITEMS_RATIO,
            seed: self.producer.seed,
        });
        Plan {
            gen: self.gen_config(events),
            changes,
            hot: self.hot_posts(),
            rate: self.producer.rate,
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
