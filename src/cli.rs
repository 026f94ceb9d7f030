//! The command line: global flags and subcommands (clap).

mod values;
pub use values::{
    input_format, log_filter, memory_size, replay_speed, since_time, socket_addr, timeout_duration,
    Since,
};

use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::settings::{BackendKind, Settings};
use tally_producer::generate::GenConfig;

/// The flags that set a setting whose default is tally's own, by argument id and setting key:
/// their help ends with the setting's default as `tally config` prints it, so help and behaviour
/// cannot drift apart. (Flags whose default is not one setting's — a demo's ratios, `--rate`,
/// the worker id — say theirs in words.)
const SETTING_FLAGS: &[(&str, &str)] = &[
    ("data_dir", "data_dir"),
    ("backend", "backend"),
    ("stream", "stream"),
    ("table_prefix", "table_prefix"),
    ("shards", "shards"),
    ("posts", "producer.posts"),
    ("zipf", "producer.zipf_exponent"),
    ("users", "producer.users"),
    ("unlike_ratio", "producer.unlike_ratio"),
    ("seed", "producer.seed"),
];

/// The command line as clap parses and prints it: the derived one, with each setting flag's
/// default taken from [`Settings::default`].
pub fn command() -> clap::Command {
    let defaults = serde_json::to_value(Settings::default()).expect("settings serialize");
    with_defaults(Cli::command(), &defaults)
}

fn with_defaults(cmd: clap::Command, defaults: &serde_json::Value) -> clap::Command {
    let ids: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    let mut cmd = cmd;
    for id in ids {
        let Some((_, key)) = SETTING_FLAGS.iter().find(|(flag, _)| *flag == id) else {
            continue;
        };
        let value = key
            .split('.')
            .try_fold(defaults, |v, k| v.get(k))
            .unwrap_or_else(|| panic!("`{key}` is no setting"));
        let shown = match value {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        cmd = cmd.mut_arg(id, |a| {
            let with = |h: Option<&clap::builder::StyledStr>| {
                let h = h.map(|h| h.to_string()).unwrap_or_default();
                format!("{} [default: {shown}]", h.trim_end_matches('.'))
                    .trim_start()
                    .to_owned()
            };
            let long = a.get_long_help().map(|_| with(a.get_long_help()));
            let short = with(a.get_help());
            let a = a.help(short);
            match long {
                Some(l) => a.long_help(l),
                None => a,
            }
        });
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    for sub in subs {
        cmd = cmd.mut_subcommand(sub, |c| with_defaults(c, defaults));
    }
    cmd
}

impl Cli {
    /// Parses the process's arguments (exiting with usage on an error), with [`command`]'s help.
    pub fn parse_args() -> Cli {
        let matches = command().get_matches();
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// The heading of the flags every subcommand takes.
const GLOBAL: &str = "Global options";

const EXAMPLES: &str = "\
Examples:
  tally demo                               produce, count and check 100,000 events (a temp dir)
  tally replay likes.ndjson                put each line of a file as one record (- reads stdin)
  tally count --until-idle                 count everything in the stream, then exit
  tally query p123 --since 1h              a post's total and its net change since an hour ago
  tally serve                              dashboard, JSON API and /metrics on 127.0.0.1:8080
  tally --backend aws --stream likes count run the counter on Kinesis and DynamoDB

Configuration: defaults < tally.toml (or --config) < TALLY_* variables < flags; `tally config`
prints the result. Logging: --log-level, else RUST_LOG or TALLY_LOG (e.g. debug); NO_COLOR.";

/// Exact like counts and live analytics from a stream of like events.
///
/// Runs embedded on one machine by default (SQLite under --data-dir, no AWS account needed), or
/// on Amazon Kinesis and DynamoDB with --backend aws.
#[derive(Parser, Debug)]
#[command(
    name = "tally",
    version,
    propagate_version = true,
    after_help = EXAMPLES,
    max_term_width = 100
)]
pub struct Cli {
    /// Where the embedded backend keeps its data.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A TOML config file [default: ./tally.toml if present].
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Which engines to run on.
    #[arg(long, global = true, help_heading = GLOBAL, value_enum)]
    pub backend: Option<BackendKind>,
    /// The Kinesis stream's name.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "NAME")]
    pub stream: Option<String>,
    /// Prefix of the DynamoDB tables.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "PREFIX")]
    pub table_prefix: Option<String>,
    /// Kinesis endpoint override, e.g. a local API peer.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "URL")]
    pub kinesis_endpoint_url: Option<String>,
    /// DynamoDB endpoint override, e.g. a local API peer.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "URL")]
    pub dynamodb_endpoint_url: Option<String>,
    /// Log as JSON lines (for CloudWatch Logs).
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub log_json: bool,
    /// How much to log: error, warn, info, debug, trace, or a filter such as
    /// `tally_consumer=debug` [default: info for count and analytics, warn otherwise; RUST_LOG or
    /// TALLY_LOG when set].
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "LEVEL", value_parser = log_filter)]
    pub log_level: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run producer, counter and analytics together on a fresh data dir and check every count.
    #[command(
        after_help = "Examples:\n  tally demo\n  tally demo --events 1000000 --shards 8 --json\n  tally demo --serve                   then watch http://127.0.0.1:8080/"
    )]
    Demo(DemoArgs),
    /// Put synthetic like events to the stream.
    #[command(
        after_help = "Examples:\n  tally produce --events 100000 --rate 5000\n  tally produce --events 10000 --truth truth.json   the counts it should come to\n  tally produce --events 1000 --duplicate-ratio 0.05 --malformed-ratio 0.01"
    )]
    Produce(ProduceArgs),
    /// Put a DynamoDB table's like items to the stream as change records, once the table's
    /// changes stream there (`input.format = "dynamodb"`): the likes it held before.
    #[command(
        after_help = "Examples:\n  tally backfill --table app   after enabling the table's Kinesis streaming destination\n\nEach item is put as it is now, as of just before the scan began: a change the stream delivers\nfrom then on is later and wins, an older one loses to the state the scan read."
    )]
    Backfill(BackfillArgs),
    /// Copy the likers' edges of another store, with the stream's checkpoints and the dead
    /// letters, into the configured one, which must be fresh; its `tally count` then counts them:
    /// the way back from a bad day.
    #[command(
        after_help = "Examples:\n  tally --backend aws --table-prefix tally-rebuilt rebuild --from-table-prefix tally-restored\n  tally --data-dir ./rebuilt rebuild --from-data-dir ./data\n\nThe source may be counted meanwhile: its checkpoints are copied before its edges, and what\ncame after them is read again from the stream. Counters refuse the destination until the\nrebuild is done; stopped at any point, run it again and it resumes. Then run `tally count`\nthere (it counts the copied edges from their change log) and `tally verify`.\ndocs/RUNBOOK.md, \"A way back\"."
    )]
    Rebuild(RebuildArgs),
    /// Put each line of an NDJSON file (.gz too) as one record, valid or not.
    #[command(
        after_help = "Examples:\n  tally replay likes.ndjson\n  tally replay likes.ndjson.gz --rate 500\n  tally replay recorded.ndjson --speed 10   the recorded gaps, ten times faster\n  zcat export-*.gz | tally replay -"
    )]
    Replay(ReplayArgs),
    /// Write every record of the stream to a recording: each record with its shard, sequence
    /// number, partition key and arrival time, shard by shard.
    #[command(
        after_help = "Examples:\n  tally record likes.ndjson.gz\n  tally record - | tally --data-dir fresh replay -\n  tally replay likes.ndjson.gz --speed 1   into another stack, as it arrived"
    )]
    Record(RecordArgs),
    /// Recount the stream (or a recording) independently and compare every count with the store.
    ///
    /// Read-only: takes no lease and writes nothing, so it runs beside the counter. Each shard is
    /// recounted up to the counter's checkpoint; a post the counter moved on while verifying is
    /// compared with the windows its summary says it holds. Exits 1 when anything is off.
    #[command(
        after_help = "Examples:\n  tally verify\n  tally verify --json > drift.json\n  tally verify --from recorded.ndjson.gz --since 2026-12-01T00:00:00Z\n  tally --backend aws --stream likes verify"
    )]
    Verify(VerifyArgs),
    /// Run the exactly-once counter consumer.
    #[command(
        after_help = "Examples:\n  tally count                          until SIGTERM or Ctrl-C\n  tally count --until-idle --timeout 5m\n  tally count --http 127.0.0.1:9101   with /metrics, /healthz and /readyz"
    )]
    Count(ConsumeArgs),
    /// Several regions: put the records of posts homed in other regions to their home's stream
    /// (`[regions]`; docs/REGIONS.md), with leases and checkpoints of its own.
    #[command(
        after_help = "Examples:\n  tally route                 run until stopped\n  tally route --until-idle    route what the stream holds, then exit"
    )]
    Route(ConsumeArgs),
    /// Run the analytics consumer (trending, latency).
    #[command(
        after_help = "Examples:\n  tally analytics                      until SIGTERM or Ctrl-C\n  tally analytics --until-idle\n  tally analytics --http 127.0.0.1:9102   with /metrics, /healthz and /readyz"
    )]
    Analytics(ConsumeArgs),
    /// A post's total, and its net change since a time, from the summary items.
    #[command(
        after_help = "Examples:\n  tally query p123\n  tally query p123 --since 15m --json\n  tally --backend aws --stream likes query p123 --since 7d"
    )]
    Query(QueryArgs),
    /// The global total of likes.
    #[command(after_help = "Examples:\n  tally total\n  tally total --json")]
    Total(JsonArgs),
    /// The trending posts.
    #[command(after_help = "Examples:\n  tally top\n  tally top -k 20 --json")]
    Top(TopArgs),
    /// Latency percentiles.
    #[command(after_help = "Examples:\n  tally latency\n  tally latency --json")]
    Latency(LatencyArgs),
    /// Dead-lettered (malformed) records.
    #[command(after_help = "Examples:\n  tally dead-letters\n  tally dead-letters --json")]
    DeadLetters(DeadLetterArgs),
    /// Each shard's lease owner and checkpoint.
    #[command(
        after_help = "Examples:\n  tally leases\n  tally leases --all        every row, however many shards\n  tally leases --json"
    )]
    Leases(LeasesArgs),
    /// Take records over HTTP into the embedded stream, in the Kinesis API's own shape
    /// (PutRecord, PutRecords): an app's producer code, only an endpoint URL apart.
    ///
    /// With a token (--auth-token-file), only puts signed (AWS Signature Version 4) with it as
    /// the secret access key are taken; the access key id may be anything.
    #[command(
        after_help = "Examples:\n  tally ingest                         http://127.0.0.1:4567/\n  tally ingest --auth-token-file token   sign with the token as the secret access key\n  aws kinesis put-record --endpoint-url http://127.0.0.1:4567 --stream-name tally-likes \\\n      --partition-key p1 --cli-binary-format raw-in-base64-out --data '{...}'"
    )]
    Ingest(IngestArgs),
    /// Run the embedded default as an app develops against it, in one process: the ingest
    /// endpoint (the Kinesis API's shape), the counter, analytics, and the read API and dashboard.
    ///
    /// With a token (--auth-token-file), both ask for it, as `tally ingest` and `tally serve` do.
    #[command(
        after_help = "Examples:\n  tally up                                  ingest on http://127.0.0.1:4567, API on http://127.0.0.1:8080\n  tally up --auth-token-file token          both ask for the token (a put: signed with it as the secret key)"
    )]
    Up(UpArgs),
    /// Serve the read side over HTTP: a JSON API, Prometheus /metrics, health checks, a dashboard.
    ///
    /// With a token (--auth-token-file), every request is asked for `Authorization: Bearer
    /// <token>`; /healthz, /readyz, /api/openapi.json and the dashboard's page stay open (open it
    /// as /#token=<token>).
    #[command(
        after_help = "Examples:\n  tally serve                          http://127.0.0.1:8080/\n  tally serve --addr 0.0.0.0:8080     every interface (behind a proxy or in a task)\n  curl 127.0.0.1:8080/api/posts/p123?since=1h"
    )]
    Serve(ServeArgs),
    /// Create the stream and tables if missing and wait until they are active.
    #[command(
        after_help = "Examples:\n  tally setup --shards 4\n  tally --backend aws --stream likes setup --shards 8"
    )]
    Setup(SetupArgs),
    /// Delete the stream and tables (or the embedded store): development and tests only.
    #[command(
        after_help = "Examples:\n  tally teardown --yes\n  tally --data-dir /tmp/try teardown --yes"
    )]
    Teardown(TeardownArgs),
    /// Split a shard in two (development and tests; production reshards with UpdateShardCount).
    #[command(
        after_help = "Examples:\n  tally reshard --split shardId-000000000000\n  tally leases                 the parent finishes, its children take over"
    )]
    Reshard(ReshardArgs),
    /// Drop old records from the embedded stream, as a Kinesis retention period does.
    ///
    /// A closed shard left without records is dropped too. On AWS the stream's retention does it.
    #[command(
        after_help = "Examples:\n  tally trim --older-than 7d\n  tally trim --older-than 1h --yes   also records an app has not applied (each a gap)"
    )]
    Trim(TrimArgs),
    /// Print the effective configuration (defaults, file, environment and flags) as TOML.
    #[command(
        after_help = "Examples:\n  tally config\n  TALLY_COUNTER__WINDOW_MS=500 tally config --json"
    )]
    Config(JsonArgs),
    /// Exit 0 if an http:// URL answers 200 within 3 s, else 1: the container health check
    /// (`tally probe http://127.0.0.1:9100/healthz`; images carry no curl).
    #[command(
        after_help = "Examples:\n  tally probe http://127.0.0.1:9100/healthz\n  tally probe http://127.0.0.1:8080/readyz"
    )]
    Probe(ProbeArgs),
    /// Print a shell completion script (e.g. `tally completions bash > ~/.local/share/bash-completion/completions/tally`).
    #[command(
        after_help = "Examples:\n  tally completions bash > ~/.local/share/bash-completion/completions/tally\n  tally completions zsh > ~/.zfunc/_tally"
    )]
    Completions(CompletionsArgs),
    /// Print the manual page (roff), e.g. `tally man | man -l -`.
    #[command(
        after_help = "Examples:\n  tally man | man -l -\n  tally man > /usr/local/share/man/man1/tally.1"
    )]
    Man,
}

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// The URL to ask (plain http://, e.g. a worker's --http address).
    pub url: String,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct TrimArgs {
    /// Drop records that arrived longer ago than this (e.g. `24h`, `7d`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: std::time::Duration,
    /// Confirm dropping records an application has not applied yet: each records them as a gap.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub struct ReshardArgs {
    /// The open shard to split at the middle of its hash-key range.
    #[arg(long, value_name = "SHARD_ID")]
    pub split: String,
}

#[derive(Args, Debug)]
pub struct JsonArgs {
    /// Print one JSON object instead of text.
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
    /// Share of extra records that resend a recent event (producer retries) [default: 0; demo:
    /// 0.02].
    #[arg(long)]
    pub duplicate_ratio: Option<f64>,
    /// Share of extra records that are malformed [default: 0; demo: 0.001].
    #[arg(long)]
    pub malformed_ratio: Option<f64>,
    /// Seed for a reproducible run.
    #[arg(long)]
    pub seed: Option<u64>,
    /// What to write: like `events`, or `dynamodb` change records of a likes table (with copies
    /// and late records, as AWS delivers them) [setting: input.format].
    #[arg(long, value_name = "events|dynamodb", value_parser = input_format)]
    pub format: Option<tally_core::input::Format>,
}

impl GenArgs {
    /// Sets the generator's settings these flags give.
    pub fn apply(&self, p: &mut GenConfig, input: &mut tally_core::input::InputConfig) {
        set(&mut input.format, self.format);
        set(&mut p.posts, self.posts);
        set(&mut p.zipf_exponent, self.zipf);
        set(&mut p.users, self.users);
        set(&mut p.unlike_ratio, self.unlike_ratio);
        set(&mut p.duplicate_ratio, self.duplicate_ratio);
        set(&mut p.malformed_ratio, self.malformed_ratio);
        set(&mut p.seed, self.seed);
    }
}

/// A flag given overrides its setting.
fn set<T>(setting: &mut T, flag: Option<T>) {
    if let Some(v) = flag {
        *setting = v;
    }
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Like and unlike events to produce (retries and malformed records come on top).
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
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = tally_serve::DEFAULT_ADDR)]
    pub serve: Option<std::net::SocketAddr>,
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// Like and unlike events to produce (retries and malformed records come on top).
    #[arg(long)]
    pub events: u64,
    /// Records per second [default: as fast as possible].
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
pub struct BackfillArgs {
    /// The DynamoDB table whose items to put (through `dynamodb_endpoint_url`, if set).
    #[arg(long)]
    pub table: String,
    /// Go on when the endpoint cannot say whether the table streams to the stream (DynamoDB
    /// Local): you have made sure its changes reach the stream already.
    #[arg(long)]
    pub assume_streaming: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RebuildArgs {
    /// The embedded store whose edges to read (the destination is `--data-dir`).
    #[arg(
        long,
        required_unless_present = "from_table_prefix",
        conflicts_with = "from_table_prefix"
    )]
    pub from_data_dir: Option<PathBuf>,
    /// The DynamoDB tables whose edges to read, by prefix (a point-in-time restore of the
    /// tables, say; the destination is `--table-prefix`).
    #[arg(long)]
    pub from_table_prefix: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// NDJSON file, gzip-compressed or not; `-` reads standard input.
    pub file: PathBuf,
    /// Records per second [default: as fast as possible].
    #[arg(long)]
    pub rate: Option<f64>,
    /// A recording's pace: its recorded gaps between records divided by this (1: as recorded,
    /// 10: ten times faster), keys and each shard's order kept; `max` puts as fast as it can.
    /// Holds the recording in memory to put it in arrival order. With --rate, the slower wins.
    #[arg(long, value_name = "X|max", value_parser = replay_speed)]
    pub speed: Option<f64>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Recount a recording (`tally record`) instead of the stream; `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
    /// Compare each post's likes since this time (repeatable; a duration, an RFC 3339 time or
    /// epoch ms, taken at its minute), instead of the default times [default: the last minute,
    /// hour and day boundaries and the day boundary a week ago].
    #[arg(long, value_name = "WHEN", value_parser = since_time)]
    pub since: Vec<Since>,
    /// How many drifts the text summary lists (--json lists every one).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub show: usize,
    /// The memory the recount may hold (`512MiB`, `2GiB`, `64KiB`): a stream whose recount
    /// needs more is read in passes over a partition of the posts, each within it (a post's
    /// likers are split between passes by user; counting events, a post's events are not split).
    #[arg(long, default_value = "512MiB", value_name = "SIZE", value_parser = memory_size)]
    pub memory: u64,
    /// Print every drift as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Output NDJSON file (a name ending in .gz compresses it; `-`: standard output).
    pub file: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    /// Exit once every shard is caught up and everything is flushed and checkpointed.
    #[arg(long)]
    pub until_idle: bool,
    /// With --until-idle: give up after this long (e.g. 30s, 5m) — what was read is still
    /// applied and checkpointed — and exit with status 2, naming the shards not caught up.
    #[arg(long, value_name = "DURATION", value_parser = timeout_duration, requires = "until_idle")]
    pub timeout: Option<std::time::Duration>,
    /// This worker's identity in lease rows [default: the ECS task id, else host name and pid].
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Print a JSON summary on exit.
    #[arg(long)]
    pub json: bool,
    /// Serve this worker's /metrics (Prometheus), /healthz and /readyz on this address — and,
    /// for `tally count`, its open windows (/api/open), which `tally serve` adds to counts.
    #[arg(long, value_name = "ADDR", value_parser = socket_addr)]
    pub http: Option<std::net::SocketAddr>,
    /// Where the read side reaches this worker's --http (HOST:PORT), reported with its leases
    /// [default: the --http address; on every interface, the ECS task's IP, else the host name].
    #[arg(long, value_name = "HOST:PORT", requires = "http")]
    pub advertise: Option<String>,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = tally_serve::DEFAULT_ADDR, value_parser = socket_addr)]
    pub addr: std::net::SocketAddr,
    /// How long a count waits for the counter's workers' open windows (what they read and have
    /// not written yet); a worker slower than this is named in the answer. 0: stored counts only.
    #[arg(long, value_name = "DURATION", default_value = tally_serve::pending::TIMEOUT_TEXT, value_parser = humantime::parse_duration)]
    pub pending_timeout: std::time::Duration,
    #[command(flatten)]
    pub auth: AuthArgs,
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Where the ingest endpoint listens (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = tally_ingest::DEFAULT_ADDR, value_parser = socket_addr)]
    pub ingest_addr: std::net::SocketAddr,
    /// Where the read API and the dashboard listen.
    #[arg(long, value_name = "ADDR", default_value = tally_serve::DEFAULT_ADDR, value_parser = socket_addr)]
    pub addr: std::net::SocketAddr,
    #[command(flatten)]
    pub auth: AuthArgs,
}

#[derive(Args, Debug)]
pub struct IngestArgs {
    /// Where to listen (port 0: any free port; the address is printed).
    #[arg(long, value_name = "ADDR", default_value = tally_ingest::DEFAULT_ADDR, value_parser = socket_addr)]
    pub addr: std::net::SocketAddr,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// The token a read or a put is asked for: `tally serve` asks for it as a bearer token
/// (`Authorization: Bearer <token>`), `tally ingest` as the secret access key a put is signed
/// with, `tally up` both.
#[derive(Args, Debug)]
pub struct AuthArgs {
    /// Ask for the token this file holds (at least 16 printable characters; two, one per line,
    /// while a rotation overlaps).
    #[arg(long, value_name = "PATH", conflicts_with = "auth_token_env")]
    pub auth_token_file: Option<std::path::PathBuf>,
    /// As --auth-token-file, the token in this environment variable (how ECS hands a secret over).
    #[arg(long, value_name = "NAME")]
    pub auth_token_env: Option<String>,
}

impl AuthArgs {
    /// The tokens the flags name (`None`: neither flag).
    pub fn token(&self) -> anyhow::Result<Option<tally_serve::auth::Token>> {
        let (file, env) = (
            self.auth_token_file.as_deref(),
            self.auth_token_env.as_deref(),
        );
        tally_serve::auth::Token::from_flags(file, env)
    }
}

#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The post's id (1–128 characters of A-Z a-z 0-9 _ . : -); several ids (at most 100) are
    /// read side by side, one answer each.
    #[arg(value_name = "POST_ID", required = true, num_args = 1..)]
    pub post_ids: Vec<String>,
    /// Read eventually consistent (half the read units on DynamoDB; a write of the last second
    /// may not be seen yet).
    #[arg(long)]
    pub eventual: bool,
    /// Also the net change from likes and unlikes created since then: a duration (15m, 2h, 7d),
    /// an RFC 3339 time (2026-12-01T08:00:00Z) or epoch milliseconds; counted from the start of
    /// that minute.
    #[arg(long, value_parser = since_time)]
    pub since: Option<Since>,
    /// Also whether this user likes each post (read in one batch; likers mode only).
    #[arg(long, value_name = "USER_ID")]
    pub viewer: Option<String>,
    /// The stored count only: do not ask the counter's workers for what they have read and not
    /// yet written (what the API's `pending=false` answers).
    #[arg(long)]
    pub stored: bool,
    /// Print JSON (with the bound used, read units and how fresh the count is).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// How many posts to list (1–1000).
    #[arg(short, long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub k: u16,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Only windows taken since then: a duration (5m), an RFC 3339 time or epoch milliseconds
    /// [default: all].
    #[arg(long, value_parser = since_time)]
    pub since: Option<Since>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DeadLetterArgs {
    /// Show at most this many (the total is always shown), in the store's key order: the
    /// embedded store's by shard, DynamoDB's its table's (not oldest first).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Print JSON: every field, the total, and whether the list was cut at --limit.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LeasesArgs {
    /// Every lease row, one line each (by default: one line per row up to 20 rows, else a
    /// summary per worker and state).
    #[arg(long)]
    pub all: bool,
    /// Which application's leases.
    #[arg(long, default_value = "counter", value_parser = [tally_core::apps::COUNTER, tally_core::apps::CHANGES, tally_core::apps::ANALYTICS, tally_core::apps::ROUTER])]
    pub app: String,
    /// Print JSON (with a window applied in part, `pending`).
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
    /// Shards of a stream created now; an existing stream must already have as many open shards.
    #[arg(long)]
    pub shards: Option<usize>,
}

impl Cli {
    /// Sets the settings the flags give: they take precedence over the file and the
    /// environment, and are checked with them ([`Settings::validate`]).
    pub fn apply(&self, s: &mut Settings) {
        set(&mut s.data_dir, self.data_dir.clone());
        set(&mut s.backend, self.backend);
        set(&mut s.stream, self.stream.clone());
        set(&mut s.table_prefix, self.table_prefix.clone());
        set(
            &mut s.kinesis_endpoint_url,
            self.kinesis_endpoint_url.clone(),
        );
        set(
            &mut s.dynamodb_endpoint_url,
            self.dynamodb_endpoint_url.clone(),
        );
        match &self.command {
            Command::Demo(a) => {
                a.gen.apply(&mut s.producer, &mut s.input);
                set(&mut s.shards, a.shards);
            }
            Command::Produce(a) => {
                a.gen.apply(&mut s.producer, &mut s.input);
                set(&mut s.producer.rate, a.rate);
            }
            Command::Replay(a) => set(&mut s.producer.rate, a.rate),
            Command::Setup(a) => set(&mut s.shards, a.shards),
            Command::Count(a) | Command::Analytics(a) | Command::Route(a) => {
                set(&mut s.lease.worker_id, a.worker_id.clone())
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every help text of an argument with this id, in every subcommand.
    fn helps(cmd: &clap::Command, id: &str, out: &mut Vec<String>) {
        for a in cmd.get_arguments().filter(|a| a.get_id() == id) {
            out.extend(a.get_help().map(|h| h.to_string()));
            out.extend(a.get_long_help().map(|h| h.to_string()));
        }
        for sub in cmd.get_subcommands() {
            helps(sub, id, out);
        }
    }

    /// Help says each setting flag's default as `tally config` has it, once, and the derived
    /// help types none by hand (a default changed in the settings shows in help at once).
    #[test]
    fn help_defaults_are_the_settings_defaults() {
        let defaults = toml::Value::try_from(Settings::default()).unwrap();
        for (id, key) in SETTING_FLAGS {
            let value = key.split('.').try_fold(&defaults, |v, k| v.get(k)).unwrap();
            let shown = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            let mut derived = Vec::new();
            helps(&Cli::command(), id, &mut derived);
            assert!(!derived.is_empty(), "no flag {id}");
            assert!(
                derived.iter().all(|h| !h.contains("[default:")),
                "{id}'s help types a default by hand: {derived:?}"
            );
            if *id == "stream" {
                // What a person reads, spelled out once.
                let mut h = Vec::new();
                helps(&command(), id, &mut h);
                assert_eq!(h[0], "The Kinesis stream's name [default: tally-likes]");
            }
            let mut shown_help = Vec::new();
            helps(&command(), id, &mut shown_help);
            for h in &shown_help {
                assert_eq!(h.matches("[default: ").count(), 1, "{id}: {h}");
                assert!(h.ends_with(&format!("[default: {shown}]")), "{id}: {h}");
            }
        }
    }
}
