//! Metrics as CloudWatch embedded metric format (EMF) lines: one JSON object per line on stderr,
//! which CloudWatch Logs (the ECS `awslogs` driver) turns into metrics without an API call.
//! Format: <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>

use std::io::Write;

use serde_json::{json, Map, Value};

/// A metric's CloudWatch unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A number of things (records, leases).
    Count,
    /// A rate (records per second).
    CountPerSecond,
    /// A duration or an age.
    Milliseconds,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::CountPerSecond => "Count/Second",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// Where EMF lines go, if anywhere.
#[derive(Clone, Debug, Default)]
pub struct Emf {
    /// The CloudWatch namespace; `None`: metrics are only logged.
    pub namespace: Option<String>,
}

impl Emf {
    /// Writes one EMF line for these dimensions and metrics to stderr (nothing when off).
    /// `rollups` lists the dimension sets to aggregate by, each a subset of `dimensions`' names.
    pub fn emit(
        &self,
        timestamp_ms: i64,
        dimensions: &[(&str, &str)],
        rollups: &[&[&str]],
        metrics: &[(&str, Unit, f64)],
    ) {
        let Some(ns) = &self.namespace else {
            return;
        };
        let mut line = record(ns, timestamp_ms, dimensions, rollups, metrics).to_string();
        line.push('\n');
        // One write per line, so that log lines of other threads cannot split it.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// The EMF object: the `_aws` metadata plus one member per dimension and metric.
pub fn record(
    namespace: &str,
    timestamp_ms: i64,
    dimensions: &[(&str, &str)],
    rollups: &[&[&str]],
    metrics: &[(&str, Unit, f64)],
) -> Value {
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": rollups,
                "Metrics": metrics
                    .iter()
                    .map(|(name, unit, _)| json!({"Name": name, "Unit": unit.as_str()}))
                    .collect::<Vec<_>>(),
            }],
        }),
    );
    for (k, v) in dimensions {
        root.insert((*k).into(), json!(v));
    }
    for (name, _, v) in metrics {
        root.insert((*name).into(), json!(v));
    }
    Value::Object(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_follows_the_specification() {
        let v = record(
            "tally",
            1_764_480_000_123,
            &[("App", "counter"), ("ShardId", "shardId-000000000001")],
            &[&["App"], &["App", "ShardId"]],
            &[
                ("Records", Unit::Count, 42.0),
                ("IteratorAgeMs", Unit::Milliseconds, 7.0),
            ],
        );
        let meta = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(v["_aws"]["Timestamp"], 1_764_480_000_123_i64);
        assert_eq!(meta["Namespace"], "tally");
        assert_eq!(meta["Dimensions"], json!([["App"], ["App", "ShardId"]]));
        assert_eq!(
            meta["Metrics"],
            json!([
                {"Name": "Records", "Unit": "Count"},
                {"Name": "IteratorAgeMs", "Unit": "Milliseconds"}
            ])
        );
        // Every dimension and metric named in the metadata is a top-level member.
        assert_eq!(v["App"], "counter");
        assert_eq!(v["ShardId"], "shardId-000000000001");
        assert_eq!(v["Records"], 42.0);
        assert_eq!(v["IteratorAgeMs"], 7.0);
    }
}
