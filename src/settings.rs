//! Configuration: defaults → `tally.toml` (or `--config FILE`) → `TALLY_*` environment → flags,
//! through the `config` crate into serde structs that reject unknown keys. [`Settings::validate`]
//! runs once at start-up and names the key of any bad value.

mod runtime;
mod validate;
pub use runtime::{DEMO_DUPLICATE_RATIO, DEMO_MALFORMED_RATIO, NO_OP_RATIO};

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tally_analytics::AnalyticsConfig;
use tally_consumer::worker::WorkerConfig;
use tally_core::apps;
use tally_counter::CounterConfig;
use tally_producer::generate::GenConfig;

/// Which engines the ports run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// SQLite under the data dir: no AWS account needed.
    Embedded,
    /// Amazon Kinesis and DynamoDB (or local API peers).
    Aws,
}

impl std::fmt::Display for BackendKind {
    /// As the setting is written: `embedded`, `aws`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Embedded => "embedded",
            BackendKind::Aws => "aws",
        })
    }
}

impl<'de> Deserialize<'de> for BackendKind {
    /// By name, and an unknown name is answered with the valid ones.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        <BackendKind as clap::ValueEnum>::from_str(&name, false).map_err(|_| {
            serde::de::Error::custom(format!("expected one of `embedded`, `aws`, got `{name}`"))
        })
    }
}

/// How an application reads Kinesis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReadMode {
    /// GetRecords: 5 reads/s and 2 MB/s per shard, shared by every application on the stream.
    #[default]
    Polling,
    /// Enhanced fan-out: a consumer registered for the application, records pushed over
    /// SubscribeToShard (2 MB/s per shard of its own).
    Efo,
}

impl<'de> Deserialize<'de> for ReadMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        <ReadMode as clap::ValueEnum>::from_str(&name, false).map_err(|_| {
            serde::de::Error::custom(format!("expected one of `polling`, `efo`, got `{name}`"))
        })
    }
}

/// Everything configurable.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Where the embedded backend keeps its data.
    pub data_dir: PathBuf,
    pub backend: BackendKind,
    /// The Kinesis stream's name.
    pub stream: String,
    /// Prefix of the DynamoDB tables' names.
    pub table_prefix: String,
    /// Optional endpoint overrides (local API peers); empty: the AWS default.
    pub kinesis_endpoint_url: String,
    pub dynamodb_endpoint_url: String,
    /// Shards of a stream created by `setup` (and of a new embedded store).
    pub shards: usize,
    /// The stream's retention in hours (as Terraform sets it): how long DynamoDB keeps a dedup
    /// record past its horizon before its TTL removes it.
    pub stream_retention_hours: u32,
    pub counter: CounterSettings,
    pub analytics: AnalyticsSettings,
    pub lease: LeaseSettings,
    pub producer: ProducerSettings,
    pub metrics: MetricsSettings,
}

/// Lease and shard metrics of the consumers.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// How often leases held/taken/stolen/released/lost and per-shard records and iterator age
    /// are reported.
    pub interval_ms: u64,
    /// Also write them as CloudWatch embedded metric format lines (on stderr, with the logs).
    pub emf: bool,
    /// The CloudWatch namespace of the EMF metrics.
    pub namespace: String,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            interval_ms: WorkerConfig::new("", "").stats_interval.as_millis() as u64,
            emf: false,
            namespace: "tally".into(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CounterSettings {
    /// A window closes after this many records…
    pub window_records: usize,
    /// …or this many milliseconds after it opened.
    pub window_ms: u64,
    /// …or as soon as a read reaches the shard's tip (fresher counts at low rates, more windows).
    pub close_when_caught_up: bool,
    /// How the counter reads Kinesis: `polling` (GetRecords) or `efo` (enhanced fan-out).
    pub read_mode: ReadMode,
    /// What a post's count is: `likers` (the users whose latest action is a like) or `events`
    /// (distinct like events minus distinct unlike events, for counters that are events). A
    /// store counted in one refuses the other.
    pub count: tally_core::edge::CountMode,
    /// Likers: a `created_at` more than this many seconds after its record's arrival is taken
    /// as the arrival (a device clock far ahead must not pin a user's like).
    pub max_clock_skew_secs: u64,
    /// A producer retry is recognised for this long after the original arrived (events mode;
    /// also analytics' horizon and the lineage's).
    pub dedup_horizon_secs: u64,
    /// Posts whose summary items one store call writes (embedded: one SQLite transaction;
    /// DynamoDB: that many conditional writes, 32 in flight at a time).
    pub posts_per_batch: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnalyticsSettings {
    /// Posts kept per shard by the trending sketch (bounds memory).
    pub sketch_capacity: usize,
    /// Half-life of the decayed like rate, in seconds.
    pub half_life_secs: u64,
    pub window_records: usize,
    pub window_ms: u64,
    /// How analytics reads Kinesis: `polling` (GetRecords) or `efo` (enhanced fan-out).
    pub read_mode: ReadMode,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseSettings {
    /// A lease not renewed for this long may be taken by another worker.
    pub duration_ms: u64,
    /// How often a held lease is renewed.
    pub renew_ms: u64,
    /// How often a worker looks for leases to take or steal.
    pub poll_ms: u64,
    /// How often a worker lists the stream's shards.
    pub discovery_ms: u64,
    /// Most leases per worker (0: no limit).
    pub max_per_worker: usize,
    /// How long a graceful shutdown waits for shards to flush.
    pub shutdown_timeout_ms: u64,
    /// A finished shard's lease row is deleted this long after its children finished.
    pub finished_grace_secs: u64,
    /// Pause between reads of a caught-up shard.
    pub idle_poll_ms: u64,
    /// Most records per read.
    pub batch_limit: usize,
    /// This worker's identity (empty: the ECS task id, else host name and pid).
    pub worker_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProducerSettings {
    pub posts: u64,
    pub zipf_exponent: f64,
    pub users: u64,
    pub unlike_ratio: f64,
    pub duplicate_ratio: f64,
    pub malformed_ratio: f64,
    pub seed: u64,
    /// Records per second (0: as fast as possible).
    pub rate: f64,
    /// Posts whose likes are fanned out over several partition keys (so over several shards).
    pub hot_posts: Vec<String>,
    /// Keys per hot post.
    pub hot_post_keys: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            data_dir: PathBuf::from("./data"),
            backend: BackendKind::Embedded,
            stream: "tally-likes".into(),
            table_prefix: "tally".into(),
            kinesis_endpoint_url: String::new(),
            dynamodb_endpoint_url: String::new(),
            shards: 4,
            stream_retention_hours: 24,
            counter: CounterSettings::default(),
            analytics: AnalyticsSettings::default(),
            lease: LeaseSettings::default(),
            producer: ProducerSettings::default(),
            metrics: MetricsSettings::default(),
        }
    }
}

// The defaults are the libraries' own, so that the two cannot drift apart.

impl Default for CounterSettings {
    fn default() -> Self {
        let c = CounterConfig::new(apps::COUNTER);
        CounterSettings {
            window_records: c.window_records,
            window_ms: c.window_time.as_millis() as u64,
            close_when_caught_up: c.close_when_caught_up,
            read_mode: ReadMode::Polling,
            count: c.count,
            max_clock_skew_secs: c.max_clock_skew.as_secs(),
            dedup_horizon_secs: c.dedup_horizon.as_secs(),
            posts_per_batch: c.posts_per_batch,
        }
    }
}

impl Default for AnalyticsSettings {
    fn default() -> Self {
        let a = AnalyticsConfig::new(apps::ANALYTICS);
        AnalyticsSettings {
            sketch_capacity: a.sketch_capacity,
            half_life_secs: a.half_life.as_secs(),
            window_records: a.window_records,
            window_ms: a.window_time.as_millis() as u64,
            read_mode: ReadMode::Polling,
        }
    }
}

impl Default for LeaseSettings {
    fn default() -> Self {
        let w = WorkerConfig::new("", "");
        LeaseSettings {
            duration_ms: w.lease_duration.as_millis() as u64,
            renew_ms: w.renew_interval.as_millis() as u64,
            poll_ms: w.lease_poll_interval.as_millis() as u64,
            discovery_ms: w.discovery_interval.as_millis() as u64,
            max_per_worker: w.max_leases_per_worker,
            shutdown_timeout_ms: w.shutdown_timeout.as_millis() as u64,
            finished_grace_secs: w.finished_lease_grace.as_secs(),
            idle_poll_ms: w.idle_poll.as_millis() as u64,
            batch_limit: w.batch_limit,
            worker_id: String::new(),
        }
    }
}

impl Default for ProducerSettings {
    fn default() -> Self {
        let g = GenConfig::default();
        ProducerSettings {
            posts: g.posts,
            zipf_exponent: g.zipf_exponent,
            users: g.users,
            unlike_ratio: g.unlike_ratio,
            duplicate_ratio: g.duplicate_ratio,
            malformed_ratio: g.malformed_ratio,
            seed: g.seed,
            rate: 0.0,
            hot_posts: Vec::new(),
            hot_post_keys: 8,
        }
    }
}

/// The variable that sets the log filter when `RUST_LOG` is not set (not a setting).
pub const LOG_VAR: &str = "TALLY_LOG";

/// The tests' failpoint: the counter aborts the process after this many batches of post writes
/// (a crash at a chosen moment). Not a setting: no configuration file, flag or `tally config`
/// knows it.
pub const FAILPOINT_VAR: &str = "TALLY_FAILPOINT_CRASH_AFTER_BATCHES";

/// The tests' other failpoint: `tally serve` pauses a counts call this many milliseconds between
/// asking the workers and reading the store (a window lands in between). Not a setting either.
pub const SERVE_PAUSE_VAR: &str = "TALLY_FAILPOINT_SERVE_PAUSE_MS";

/// The `TALLY_*` environment variables that are settings. One that names no setting is an error
/// that names it (`TALLY_LOG` aside: it sets the log filter), instead of an unknown-field error.
fn settings_env() -> Result<std::collections::HashMap<String, String>> {
    let defaults = serde_json::to_value(Settings::default()).unwrap_or_default();
    let keys: Vec<String> = defaults
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let mut out = std::collections::HashMap::new();
    for (name, value) in std::env::vars() {
        let Some(rest) = name.strip_prefix("TALLY_") else {
            continue;
        };
        if name == LOG_VAR || name == FAILPOINT_VAR || name == SERVE_PAUSE_VAR {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(str::to_lowercase).collect();
        let top = path[0].clone();
        if keys.contains(&top) && !is_setting(&defaults, &path) {
            bail!(
                "environment variable {name} is not a tally setting: `{}` has no key `{}` (see \
                 `tally config` for every key)",
                path[..path.len() - 1].join("."),
                path[path.len() - 1]
            );
        }
        if !keys.contains(&top) {
            let mut known: Vec<String> = keys
                .iter()
                .map(|k| format!("TALLY_{}", k.to_uppercase()))
                .collect();
            known.sort();
            bail!(
                "environment variable {name} is not a tally setting: settings variables are \
                 TALLY_<KEY> with `__` between levels (e.g. TALLY_COUNTER__WINDOW_MS); top-level \
                 keys: {}; {LOG_VAR} sets the log filter",
                known.join(", ")
            );
        }
        out.insert(name, value);
    }
    Ok(out)
}

/// Whether a dotted path (lower case, from a `TALLY_A__B` variable) names a setting of
/// `defaults` (the default settings as JSON).
fn is_setting(defaults: &serde_json::Value, path: &[String]) -> bool {
    let mut v = defaults;
    for k in path {
        match v.get(k.as_str()) {
            Some(next) => v = next,
            None => return false,
        }
    }
    true
}

/// Serde's words for our types, in the user's: `expected struct CounterSettings` is a table.
fn plain(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("expected struct ") {
        out.push_str(&rest[..i]);
        out.push_str("expected a table");
        rest = &rest[i + "expected struct ".len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    for (rust, words) in [
        ("expected usize", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected f64", "expected a number"),
    ] {
        out = out.replace(rust, words);
    }
    out
}

/// A flag's override: the dotted key and its value.
pub type Override = (&'static str, config::Value);

/// Reads a config file alone, so that an unknown key or a bad value is reported with the file's
/// name, line and column.
/// Returns the file's text, which is what the settings are then read from (so that any readable
/// file works, `/dev/null` included: no settings).
fn check_file(f: &Path) -> Result<String> {
    if !f.exists() {
        bail!("config file {} does not exist", f.display());
    }
    if f.is_dir() {
        bail!(
            "config file {} is a directory: expected a TOML file",
            f.display()
        );
    }
    let text = std::fs::read_to_string(f)
        .with_context(|| format!("reading config file {} (expected a TOML file)", f.display()))?;
    if let Err(e) = toml::from_str::<Settings>(&text) {
        let msg = e.to_string();
        let msg = msg.trim_end().replacen("TOML parse error at ", "at ", 1);
        bail!("invalid configuration in {} {}", f.display(), plain(&msg));
    }
    Ok(text)
}

impl Settings {
    /// How `app` reads Kinesis.
    pub fn read_mode(&self, app: &str) -> ReadMode {
        if app == tally_core::apps::ANALYTICS {
            self.analytics.read_mode
        } else {
            self.counter.read_mode
        }
    }

    /// Loads the layers. `file`: an explicit `--config` (must exist) or `None` for `./tally.toml`
    /// if present.
    pub fn load(file: Option<&Path>, overrides: Vec<Override>) -> Result<Settings> {
        let mut b = config::Config::builder().add_source(
            config::Config::try_from(&Settings::default()).context("default settings")?,
        );
        let default_file = Path::new("tally.toml");
        if let Some(f) = file.or(default_file.exists().then_some(default_file)) {
            let text = check_file(f)?;
            b = b.add_source(config::File::from_str(&text, config::FileFormat::Toml));
        }
        b = b.add_source(
            config::Environment::with_prefix("TALLY")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .source(Some(settings_env()?)),
        );
        for (k, v) in overrides {
            b = b
                .set_override(k, v)
                .with_context(|| format!("flag for {k}"))?;
        }
        let cfg = b.build().context("reading configuration")?;
        let s: Settings = cfg
            .try_deserialize()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {}", plain(&e.to_string())))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks every value's range, by section, naming the key and what was expected.
    pub fn validate(&self) -> Result<()> {
        self.validate_top()?;
        self.counter.validate()?;
        self.analytics.validate()?;
        self.lease.validate()?;
        self.producer.validate()?;
        self.metrics.validate()
    }

    pub fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
}
