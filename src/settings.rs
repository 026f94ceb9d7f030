//! Configuration: defaults → `tally.toml` (or `--config FILE`) → `TALLY_*` environment → flags,
//! through the `config` crate into serde structs that reject unknown keys. [`Settings::validate`]
//! runs once at start-up and names the key of any bad value.

mod runtime;
mod validate;
pub use runtime::{DEMO_DUPLICATE_RATIO, DEMO_MALFORMED_RATIO, NO_OP_RATIO};
pub use tally_core::config::ReadMode;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tally_analytics::AnalyticsConfig;
use tally_consumer::worker::WorkerConfig;
use tally_core::input::InputConfig;
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
    /// DynamoDB: whether `setup` gives the counts table its recent index, which likers most
    /// recent first read (a write unit more per like; Terraform's `recent_likers_index`). The
    /// embedded store always has it.
    pub recent_likers_index: bool,
    /// `[input]`: what the stream's records are (like events, or a DynamoDB table's change
    /// records and where a like is in its items).
    pub input: InputConfig,
    /// `[counter]`: the counter's own configuration type, with its defaults and ranges.
    pub counter: CounterConfig,
    /// `[analytics]`: analytics' configuration type.
    pub analytics: AnalyticsConfig,
    /// `[lease]`: a worker's configuration type (both applications').
    pub lease: WorkerConfig,
    /// `[producer]`: the generator's and putter's configuration type.
    pub producer: GenConfig,
    pub metrics: MetricsSettings,
    /// `[regions]`: several regions, each post counted in its home (docs/REGIONS.md).
    pub regions: RegionsSettings,
}

/// Several regions (docs/REGIONS.md): which this one is, every region in the order posts are
/// hashed to their home, and where the router puts the records of posts homed elsewhere.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegionsSettings {
    /// This deployment's region ("": one region — every post counted here, no router).
    pub this: String,
    /// Every region, in the same order everywhere.
    pub homes: Vec<String>,
    /// Each other region's stream, by region name: what `tally route` puts to.
    pub peers: std::collections::BTreeMap<String, PeerRegion>,
}

/// Another region: its stream, as the router reaches it, and its tables, as the read side reads them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeerRegion {
    /// AWS: the region's Kinesis stream ("": the same name as this region's `stream`).
    pub stream: String,
    /// AWS: an endpoint instead of the region's own (a local API peer).
    pub kinesis_endpoint_url: String,
    /// AWS: the region its stream is in ("": the peer's name).
    pub aws_region: String,
    /// Embedded: the region's store (its data dir): the stream the router puts to, and the
    /// store the read side reads that region's posts from.
    pub data_dir: PathBuf,
    /// AWS: the prefix of that region's tables as they are replicated to this one (a global
    /// table's replica here): the read side reads the posts homed there from them ("": this
    /// region answers its own posts only).
    pub table_prefix: String,
}

impl RegionsSettings {
    /// Where each post is counted (`None`: one region), checked.
    pub fn homes(&self) -> Result<Option<tally_core::regions::Homes>> {
        let homes = tally_core::regions::Homes::of(&self.this, &self.homes)
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        for name in self.peers.keys() {
            if !self.homes.contains(name) || *name == self.this {
                bail!(
                    "invalid configuration: `regions.peers.{name}` must name another region of `regions.homes` ({:?}, this one {:?})",
                    self.homes,
                    self.this
                );
            }
        }
        Ok(homes)
    }
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
            interval_ms: tally_core::config::millis(
                tally_consumer::worker::WorkerContext::new("").stats_interval,
            ),
            emf: false,
            namespace: "tally".into(),
        }
    }
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
            recent_likers_index: false,
            input: InputConfig::default(),
            counter: CounterConfig::default(),
            analytics: AnalyticsConfig::default(),
            lease: WorkerConfig::default(),
            producer: GenConfig::default(),
            metrics: MetricsSettings::default(),
            regions: RegionsSettings::default(),
        }
    }
}

/// The variable that sets the log filter when `RUST_LOG` is not set (not a setting).
pub const LOG_VAR: &str = "TALLY_LOG";

/// The tests' failpoint: the counter aborts the process after this many batches of post writes
/// (a crash at a chosen moment). Not a setting: no configuration file, flag or `tally config`
/// knows it.
pub const FAILPOINT_VAR: &str = "TALLY_FAILPOINT_CRASH_AFTER_BATCHES";

/// The tests' other failpoint: a counts answer (`tally serve`'s, `tally query`'s) pauses this many
/// milliseconds between asking the workers and reading the store (a window lands in between).
/// Not a setting either.
pub use tally_serve::counts::SERVE_PAUSE_VAR;

/// The tests' third: each pass of `tally verify` pauses between reading the records and reading
/// the counts. Not a setting.
pub use tally_verify::PAUSE_VAR as VERIFY_PAUSE_VAR;

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
        if [LOG_VAR, FAILPOINT_VAR, SERVE_PAUSE_VAR, VERIFY_PAUSE_VAR].contains(&name.as_str()) {
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
    // A map keyed by the user's names: `regions.peers.<region>.<field>`.
    if let [r, p, _region, field] = path {
        if r == "regions" && p == "peers" {
            let peer = serde_json::to_value(PeerRegion::default()).unwrap_or_default();
            return peer.get(field.as_str()).is_some();
        }
    }
    let mut v = defaults;
    for k in path {
        match v.get(k.as_str()) {
            Some(next) => v = next,
            None => return false,
        }
    }
    true
}

/// Serde's words for our types, in the user's: `expected struct CounterConfig` is a table.
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
    /// if present; `flags` sets what the command line gives, last, before the ranges are checked.
    pub fn load(file: Option<&Path>, flags: impl FnOnce(&mut Settings)) -> Result<Settings> {
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
                // The one list a deployment sets by its environment: `TALLY_REGIONS__HOMES=a,b`.
                .list_separator(",")
                .with_list_parse_key("regions.homes")
                .source(Some(settings_env()?)),
        );
        let cfg = b.build().context("reading configuration")?;
        let mut s: Settings = cfg
            .try_deserialize()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {}", plain(&e.to_string())))?;
        flags(&mut s);
        s.validate()?;
        Ok(s)
    }

    /// Checks every value's range, by section, naming the key and what was expected: each
    /// section's type checks its own.
    pub fn validate(&self) -> Result<()> {
        let sections = [
            ("input", self.input.validate()),
            ("counter", self.counter.validate()),
            ("analytics", self.analytics.validate()),
            ("lease", self.lease.validate()),
            ("producer", self.producer.validate()),
        ];
        self.validate_top()?;
        self.regions.homes()?;
        for (section, checked) in sections {
            if let Err(e) = checked {
                bail!("invalid configuration: {}", e.in_section(section));
            }
        }
        self.metrics.validate()
    }
}
