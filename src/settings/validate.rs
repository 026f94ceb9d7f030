//! Each section's ranges, beside its keys: a bad value is refused before anything runs, naming
//! the key and what was expected.

use anyhow::{bail, Result};

use super::{
    AnalyticsSettings, CounterSettings, LeaseSettings, MetricsSettings, ProducerSettings, Settings,
};

/// `key` (a dotted path) must be within `lo..=hi`.
fn range<T: PartialOrd + std::fmt::Display>(key: &str, v: T, lo: T, hi: T) -> Result<()> {
    if v < lo || v > hi {
        bail!("invalid configuration: `{key}` must be between {lo} and {hi}, got {v}");
    }
    Ok(())
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

impl CounterSettings {
    /// `[counter]`.
    pub(super) fn validate(&self) -> Result<()> {
        range("counter.posts_per_batch", self.posts_per_batch, 1, 100_000)?;
        range(
            "counter.window_records",
            self.window_records,
            1,
            tally_core::window::MAX_WINDOW_RECORDS,
        )?;
        range("counter.window_ms", self.window_ms, 1, 600_000)?;
        range(
            "counter.dedup_horizon_secs",
            self.dedup_horizon_secs,
            1,
            86_400,
        )?;
        range(
            "counter.max_clock_skew_secs",
            self.max_clock_skew_secs,
            0,
            7 * 86_400,
        )
    }
}

impl AnalyticsSettings {
    /// `[analytics]`.
    pub(super) fn validate(&self) -> Result<()> {
        range(
            "analytics.sketch_capacity",
            self.sketch_capacity,
            1,
            // The sketch is stored as one DynamoDB item (≤ 400 KB) per shard.
            5_000,
        )?;
        range(
            "analytics.half_life_secs",
            self.half_life_secs,
            1,
            30 * 86_400,
        )?;
        // A window's first-seen ids are one store item, as the counter's are.
        range(
            "analytics.window_records",
            self.window_records,
            1,
            tally_core::window::MAX_WINDOW_RECORDS,
        )?;
        range("analytics.window_ms", self.window_ms, 1, 600_000)
    }
}

impl LeaseSettings {
    /// `[lease]`.
    pub(super) fn validate(&self) -> Result<()> {
        range("lease.duration_ms", self.duration_ms, 100, 3_600_000)?;
        range("lease.renew_ms", self.renew_ms, 10, self.duration_ms / 2)?;
        range("lease.poll_ms", self.poll_ms, 10, 600_000)?;
        range("lease.discovery_ms", self.discovery_ms, 10, 3_600_000)?;
        range("lease.idle_poll_ms", self.idle_poll_ms, 1, 60_000)?;
        range("lease.batch_limit", self.batch_limit, 1, 10_000)
    }
}

impl ProducerSettings {
    /// `[producer]`.
    pub(super) fn validate(&self) -> Result<()> {
        range("producer.posts", self.posts, 1, u64::MAX)?;
        range("producer.users", self.users, 1, u64::MAX)?;
        range("producer.zipf_exponent", self.zipf_exponent, 0.01, 10.0)?;
        range("producer.unlike_ratio", self.unlike_ratio, 0.0, 1.0)?;
        range("producer.duplicate_ratio", self.duplicate_ratio, 0.0, 0.5)?;
        range("producer.malformed_ratio", self.malformed_ratio, 0.0, 0.5)?;
        range("producer.rate", self.rate, 0.0, 1e9)?;
        range("producer.hot_post_keys", self.hot_post_keys, 1, 1_024)
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
