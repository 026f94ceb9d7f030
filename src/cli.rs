//! The command line: global flags and subcommands (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::settings::{BackendKind, Override};

/// tally: exact like counts and live analytics from a stream of like events.
#[derive(Parser, Debug)]
#[command(name = "tally", version, about, propagate_version = true)]
pub struct Cli {
    /// Where the embedded backend keeps its data [default: ./data].
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A TOML config file [default: ./tally.toml if present].
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Which engines to run on [default: embedded].
    #[arg(long, global = true, value_enum)]
    pub backend: Option<BackendKind>,
    /// The Kinesis stream's name [default: tally-likes].
    #[arg(long, global = true, value_name = "NAME")]
    pub stream: Option<String>,
    /// Prefix of the DynamoDB tables [default: tally].
    #[arg(long, global = true, value_name = "PREFIX")]
    pub table_prefix: Option<String>,
    /// Kinesis endpoint override, e.g. a local API peer.
    #[arg(long, global = true, value_name = "URL")]
    pub kinesis_endpoint_url: Option<String>,
    /// DynamoDB endpoint override, e.g. a local API peer.
    #[arg(long, global = true, value_name = "URL")]
    pub dynamodb_endpoint_url: Option<String>,
    /// Log as JSON lines (for CloudWatch Logs).
    #[arg(long, global = true)]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run producer, counter and analytics together on a fresh data dir and check every count.
    Demo(DemoArgs),
    /// Put synthetic like events to the stream.
    Produce(ProduceArgs),
    /// Put each line of an NDJSON file (.gz too) as one record, valid or not.
    Replay(ReplayArgs),
    /// Write every record of the stream to an NDJSON file, shard by shard.
    Record(RecordArgs),
    /// Run the exactly-once counter consumer.
    Count(ConsumeArgs),
    /// Run the analytics consumer (trending, latency).
    Analytics(ConsumeArgs),
    /// A post's total and its count since a time, from the summary buckets.
    Query(QueryArgs),
    /// The global total of likes.
    Total(JsonArgs),
    /// The trending posts.
    Top(TopArgs),
    /// Latency percentiles.
    Latency(LatencyArgs),
    /// Dead-lettered (malformed) records.
    DeadLetters(DeadLetterArgs),
    /// Each shard's lease owner and checkpoint.
    Leases(LeasesArgs),
    /// Serve the read side over HTTP: a JSON API, Prometheus /metrics, health checks, a dashboard.
    Serve(ServeArgs),
    /// Create the stream and tables if missing and wait until they are active.
    Setup(SetupArgs),
    /// Delete the stream and tables (or the embedded store): development and tests only.
    Teardown(TeardownArgs),
    /// Split a shard in two (development and tests; production reshards with UpdateShardCount).
    Reshard(ReshardArgs),
    /// Drop old records from the embedded stream, as a Kinesis retention period does.
    ///
    /// A closed shard left without records is dropped too. On AWS the stream's retention does it.
    Trim(TrimArgs),
    /// Print the effective configuration (defaults, file, environment and flags) as TOML.
    Config,
}

#[derive(Args, Debug)]
pub struct TrimArgs {
    /// Drop records that arrived longer ago than this (e.g. `24h`, `7d`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: std::time::Duration,
}

#[derive(Args, Debug)]
pub struct ReshardArgs {
    /// The open shard to split at the middle of its hash-key range.
    #[arg(long, value_name = "SHARD_ID")]
    pub split: String,
}

#[derive(Args, Debug)]
pub struct JsonArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Default)]
pub struct GenArgs {
    /// Distinct posts, Zipf-distributed.
    #[arg(long)]
    pub posts: Option<u64>,
    /// Zipf exponent of post popularity.
    #[arg(long)]
    pub zipf: Option<f64>,
    /// Distinct users, uniform.
    #[arg(long)]
    pub users: Option<u64>,
    /// Share of events that are unlikes.
    #[arg(long)]
    pub unlike_ratio: Option<f64>,
    /// Share of extra records that resend a recent event (producer retries).
    #[arg(long)]
    pub duplicate_ratio: Option<f64>,
    /// Share of extra records that are malformed.
    #[arg(long)]
    pub malformed_ratio: Option<f64>,
    /// Seed for a reproducible run.
    #[arg(long)]
    pub seed: Option<u64>,
}

impl GenArgs {
    pub fn overrides(&self) -> Vec<Override> {
        let mut o: Vec<Override> = Vec::new();
        if let Some(v) = self.posts {
            o.push(("producer.posts", v.into()));
        }
        if let Some(v) = self.zipf {
            o.push(("producer.zipf_exponent", v.into()));
        }
        if let Some(v) = self.users {
            o.push(("producer.users", v.into()));
        }
        if let Some(v) = self.unlike_ratio {
            o.push(("producer.unlike_ratio", v.into()));
        }
        if let Some(v) = self.duplicate_ratio {
            o.push(("producer.duplicate_ratio", v.into()));
        }
        if let Some(v) = self.malformed_ratio {
            o.push(("producer.malformed_ratio", v.into()));
        }
        if let Some(v) = self.seed {
            o.push(("producer.seed", v.into()));
        }
        o
    }
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Distinct like events to produce.
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// Shards of the demo stream.
    #[arg(long)]
    pub shards: Option<usize>,
    #[command(flatten)]
    pub gen: GenArgs,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,
    /// On AWS, keep the demo's own stream and tables instead of deleting them afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Afterwards, apply the same records on the same backend the two ways tally is measured
    /// against — one UpdateItem per like, and one transaction per like with an idempotency
    /// item — and report write units, items and throughput side by side.
    #[arg(long)]
    pub baselines: bool,
    /// Afterwards, keep producing a trickle of likes, counting and analysing them, and serve the
    /// dashboard and API on this address (default 127.0.0.1:8080) until Ctrl-C.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8080")]
    pub serve: Option<std::net::SocketAddr>,
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// Distinct like events to produce.
    #[arg(long)]
    pub events: u64,
    /// Records per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    #[command(flatten)]
    pub gen: GenArgs,
    /// Write the expected count of every post to this JSON file.
    #[arg(long, value_name = "FILE")]
    pub truth: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// NDJSON file, optionally gzip-compressed.
    pub file: PathBuf,
    /// Records per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Output NDJSON file (.gz compresses).
    pub file: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Exit once every shard is caught up and everything is flushed and checkpointed.
    #[arg(long)]
    pub until_idle: bool,
    /// This worker's identity in lease rows.
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Print a JSON summary on exit.
    #[arg(long)]
    pub json: bool,
    /// Serve this worker's /metrics (Prometheus), /healthz and /readyz on this address.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub addr: std::net::SocketAddr,
}

#[derive(Args, Debug)]
pub struct QueryArgs {
    pub post_id: String,
    /// Also count likes created in this last duration (e.g. 15m, 2h, 7d).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<std::time::Duration>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Only windows taken in this last duration (default: all).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<std::time::Duration>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DeadLetterArgs {
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LeasesArgs {
    /// Which application's leases.
    #[arg(long, default_value = "counter")]
    pub app: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TeardownArgs {
    /// Confirm: every count, lease and checkpoint of this stream is deleted.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub struct SetupArgs {
    /// Shards of a stream created now.
    #[arg(long)]
    pub shards: Option<usize>,
}

impl Cli {
    /// Global flags as configuration overrides.
    pub fn overrides(&self) -> Vec<Override> {
        let mut o: Vec<Override> = Vec::new();
        if let Some(d) = &self.data_dir {
            o.push(("data_dir", d.display().to_string().into()));
        }
        if let Some(b) = self.backend {
            o.push((
                "backend",
                (if b == BackendKind::Aws {
                    "aws"
                } else {
                    "embedded"
                })
                .into(),
            ));
        }
        if let Some(s) = &self.stream {
            o.push(("stream", s.clone().into()));
        }
        if let Some(s) = &self.table_prefix {
            o.push(("table_prefix", s.clone().into()));
        }
        if let Some(s) = &self.kinesis_endpoint_url {
            o.push(("kinesis_endpoint_url", s.clone().into()));
        }
        if let Some(s) = &self.dynamodb_endpoint_url {
            o.push(("dynamodb_endpoint_url", s.clone().into()));
        }
        match &self.command {
            Command::Demo(a) => {
                o.extend(a.gen.overrides());
                if let Some(s) = a.shards {
                    o.push(("shards", (s as u64).into()));
                }
            }
            Command::Produce(a) => {
                o.extend(a.gen.overrides());
                if let Some(r) = a.rate {
                    o.push(("producer.rate", r.into()));
                }
            }
            Command::Replay(a) => {
                if let Some(r) = a.rate {
                    o.push(("producer.rate", r.into()));
                }
            }
            Command::Setup(a) => {
                if let Some(s) = a.shards {
                    o.push(("shards", (s as u64).into()));
                }
            }
            Command::Count(a) | Command::Analytics(a) => {
                if let Some(w) = &a.worker_id {
                    o.push(("lease.worker_id", w.clone().into()));
                }
            }
            _ => {}
        }
        o
    }
}
