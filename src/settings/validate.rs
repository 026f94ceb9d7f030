//! The ranges of the settings the binary owns (the top-level keys and `[metrics]`): a bad value
//! is refused before anything runs, naming the key and what was expected. The other sections'
//! types check their own (`CounterConfig::validate`, …).

use anyhow::{bail, Result};

use super::{MetricsSettings, Settings};

/// `key` (a dotted path) must be within `lo..=hi`.
fn range<T: PartialOrd + std::fmt::Display>(key: &str, v: T, lo: T, hi: T) -> Result<()> {
    tally_core::config::range(key, v, lo, hi)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))
}

impl Settings {
    /// The top-level keys.
    pub(super) fn validate_top(&self) -> Result<()> {
        // No cap of ours on AWS: the account's shard limit is the service's to enforce (its error
        // names the call and the stream); a bound only so that a typo cannot ask for billions.
        range("shards", self.shards, 1, 1_000_000)?;
        // Kinesis allows 24 hours to 365 days.
        range(
            "stream_retention_hours",
            self.stream_retention_hours,
            24,
            8_760,
        )?;
        if self.stream.is_empty() {
            bail!("invalid configuration: `stream` must be a stream name, got an empty string");
        }
        if self.table_prefix.is_empty()
            || !self
                .table_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            bail!("invalid configuration: `table_prefix` must be letters, digits, `_`, `.` or `-`, got {:?}", self.table_prefix);
        }
        if self.input.format == tally_core::input::Format::Dynamodb
            && !self.counter.count.keeps_edges()
        {
            bail!(
                "invalid configuration: `input.format = \"dynamodb\"` needs `counter.count = \"likers\"`, got \"{}\": a table's change records are states of (post, user) items, and counted as events a MODIFY or a copy would count again",
                self.counter.count.as_str()
            );
        }
        for (key, url) in [
            ("kinesis_endpoint_url", &self.kinesis_endpoint_url),
            ("dynamodb_endpoint_url", &self.dynamodb_endpoint_url),
        ] {
            if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
                bail!("invalid configuration: `{key}` must be an http:// or https:// URL, got {url:?}");
            }
        }
        Ok(())
    }
}

impl MetricsSettings {
    /// `[metrics]`.
    pub(super) fn validate(&self) -> Result<()> {
        range("metrics.interval_ms", self.interval_ms, 100, 3_600_000)?;
        if self.namespace.is_empty()
            || self.namespace.len() > 255
            || self.namespace.starts_with(':')
        {
            bail!("invalid configuration: `metrics.namespace` must be a CloudWatch namespace (1-255 characters, not starting with `:`), got {:?}", self.namespace);
        }
        Ok(())
    }
}
