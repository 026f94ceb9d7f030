//! Enhanced fan-out: a stream consumer registered per application, each shard read by
//! `SubscribeToShard`, which pushes records over one long-lived response instead of the
//! application polling `GetRecords` (2 MB/s per shard per consumer of its own, and records pushed
//! as they arrive rather than at the next poll). Over TLS the SDK's client negotiates HTTP/2, as
//! Kinesis requires; a plain-http local peer is spoken to in HTTP/1.1 (chunked), which
//! kinesis-local accepts.
//!
//! A subscription lasts at most 5 minutes, or ends early on an error; the reader then subscribes
//! again after the last record it received (the continuation sequence number), at most once a
//! second per shard (Kinesis' limit for a consumer). Records flow through a small bounded channel
//! from the subscription task to the worker's reads, so a slow worker holds the subscription back
//! (HTTP/2 flow control) rather than buffering without bound.
//!
//! A shard's end arrives as an event without a continuation sequence number, naming the child
//! shards. Not every peer sends that event (kinesis-local keeps sending empty events), so a reader
//! that has been caught up for `END_PROBE_EVERY` also asks `GetRecords` once whether the shard
//! has ended after its position: an answer without a next iterator is the end.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::types::{
    ConsumerStatus, StartingPosition, SubscribeToShardEvent, SubscribeToShardEventStream,
};
use tally_core::ports::{
    PortError, PortResult, PutEntry, PutOutcome, ReadBatch, ShardInfo, ShardReader, StartPosition,
    Stream, StreamRecord,
};
use tally_core::retry::Backoff;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::kinesis::{record, seq, KinesisStream};

/// Kinesis accepts one `SubscribeToShard` per second per shard and consumer.
const SUBSCRIBE_EVERY: Duration = Duration::from_secs(1);
/// How long a caught-up reader waits between asking `GetRecords` whether its shard has ended.
const END_PROBE_EVERY: Duration = Duration::from_secs(5);
/// A subscription that delivers no event for this long is presumed broken and replaced (Kinesis
/// sends an event at least every 5 seconds, even an empty one).
const SILENT_FOR: Duration = Duration::from_secs(30);
/// A shard no subscription could be made to for this long is read by polling for the rest of
/// its lease.
const POLL_AFTER: Duration = Duration::from_secs(20);
/// Throttled registrations are tried again (after 0.5, 1, 2, 4 s) before fan-out is given up.
const REGISTER_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(500),
    cap: Duration::from_secs(4),
    max_retries: 4,
};
/// Refused subscriptions are tried again after 1, 2, 4, 8, then every 10 s (never more often
/// than [`SUBSCRIBE_EVERY`]).
const SUBSCRIBE_BACKOFF: Backoff = Backoff {
    base: SUBSCRIBE_EVERY,
    cap: Duration::from_secs(10),
    max_retries: u32::MAX,
};
/// How long registration may take before it is an error (it takes seconds on Kinesis).
const REGISTER_WITHIN: Duration = Duration::from_secs(120);

/// The enhanced fan-out consumer of an application: one per deployment (its table prefix) and
/// application, the name Terraform registers too.
pub fn consumer_name(table_prefix: &str, app: &str) -> String {
    format!("{table_prefix}-{app}")
}

/// A stream read through a registered consumer: reads subscribe, puts and listings go to the
/// stream as usual.
#[derive(Clone)]
pub struct FanOut {
    stream: KinesisStream,
    consumer_name: String,
    consumer_arn: String,
    /// How long a read waits for an event before answering with no records.
    wait: Duration,
}

impl FanOut {
    /// Registers the consumer `consumer_name` on the stream, or finds it registered (another
    /// worker of the application, or Terraform, registered it), and waits until it is active.
    /// Reads then wait up to `wait` for records before answering with none.
    pub async fn register(
        stream: &KinesisStream,
        consumer_name: &str,
        wait: Duration,
    ) -> PortResult<FanOut> {
        let stream_arn = stream.arn().await?;
        let resource = format!("consumer {consumer_name} of stream {}", stream.name());
        let (arn, status) =
            register_consumer(stream, &stream_arn, consumer_name, &resource).await?;
        let arn =
            wait_until_active(stream, &stream_arn, consumer_name, &resource, arn, status).await?;
        info!(consumer = consumer_name, consumer_arn = %arn, "reading by enhanced fan-out");
        Ok(FanOut {
            stream: stream.clone(),
            consumer_name: consumer_name.to_owned(),
            consumer_arn: arn,
            wait,
        })
    }

    /// The registered consumer's ARN.
    pub fn consumer_arn(&self) -> &str {
        &self.consumer_arn
    }
}

/// RegisterStreamConsumer, tried again while throttled (5 calls a second per stream: a fleet
/// starting together is throttled; the 20-consumer limit answers the same way, and stays): the
/// consumer's ARN and status, or none yet when it was registered already (another worker,
/// Terraform) and must be described.
async fn register_consumer(
    stream: &KinesisStream,
    stream_arn: &str,
    consumer_name: &str,
    resource: &str,
) -> PortResult<(String, ConsumerStatus)> {
    let mut attempt = 0u32;
    loop {
        let registered = stream
            .client()
            .register_stream_consumer()
            .stream_arn(stream_arn)
            .consumer_name(consumer_name)
            .send()
            .await;
        match registered {
            Ok(r) => match r.consumer() {
                Some(c) => return Ok((c.consumer_arn().to_owned(), c.consumer_status().clone())),
                None => return Ok((String::new(), ConsumerStatus::Creating)),
            },
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_in_use_exception()) =>
            {
                // Registered already (another worker, Terraform): find it.
                return Ok((String::new(), ConsumerStatus::Creating));
            }
            Err(e) => match stream.err_on("RegisterStreamConsumer", resource, e) {
                PortError::Throttled(_) if attempt < REGISTER_BACKOFF.max_retries => {
                    tokio::time::sleep(REGISTER_BACKOFF.ceiling(attempt)).await;
                    attempt += 1;
                }
                e => return Err(e),
            },
        }
    }
}

/// DescribeStreamConsumer until the consumer is active (Kinesis takes a few seconds after a
/// registration), within `REGISTER_WITHIN`; its ARN.
async fn wait_until_active(
    stream: &KinesisStream,
    stream_arn: &str,
    consumer_name: &str,
    resource: &str,
    mut arn: String,
    mut status: ConsumerStatus,
) -> PortResult<String> {
    let deadline = Instant::now() + REGISTER_WITHIN;
    let mut pause = Duration::from_millis(50);
    while status != ConsumerStatus::Active || arn.is_empty() {
        if !arn.is_empty() {
            // Registered just now: Kinesis takes a few seconds to make it active.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        let d = match stream
            .client()
            .describe_stream_consumer()
            .stream_arn(stream_arn)
            .consumer_name(consumer_name)
            .send()
            .await
            .map_err(|e| stream.err_on("DescribeStreamConsumer", resource, e))
        {
            Ok(d) => d,
            // 20 calls a second per stream: a fleet starting together waits its turn.
            Err(PortError::Throttled(_)) if Instant::now() < deadline => {
                arn = String::new();
                tokio::time::sleep(pause).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let c = d.consumer_description().ok_or_else(|| {
            PortError::Other(format!(
                "DescribeStreamConsumer on {resource} returned no description"
            ))
        })?;
        arn = c.consumer_arn().to_owned();
        status = c.consumer_status().clone();
        if status == ConsumerStatus::Deleting {
            return Err(PortError::Other(format!(
                "{resource} is being deregistered (a teardown?); start again once it is gone"
            )));
        }
        if Instant::now() > deadline {
            return Err(PortError::Timeout(format!(
                "{resource} still {status:?} after {}s",
                REGISTER_WITHIN.as_secs()
            )));
        }
    }
    Ok(arn)
}

#[async_trait]
impl Stream for FanOut {
    async fn list_shards(&self) -> PortResult<Vec<ShardInfo>> {
        self.stream.list_shards().await
    }

    async fn open(&self, shard_id: &str, from: StartPosition) -> PortResult<Box<dyn ShardReader>> {
        let (tx, rx) = mpsc::channel(2);
        let sub = Subscription {
            fan_out: self.clone(),
            shard_id: shard_id.to_owned(),
            position: from,
            tx,
        };
        let mut reader = FanOutReader {
            rx,
            held: VecDeque::new(),
            held_batch: None,
            wait: self.wait,
            behind: None,
            task: tokio::spawn(sub.run()),
        };
        // Open means subscribed: until the first event, nobody can say whether the shard is
        // caught up (an empty read before it would look like idleness).
        match tokio::time::timeout(SILENT_FOR, reader.rx.recv()).await {
            Ok(Some(first)) => reader.hold(first?),
            Ok(None) => {
                return Err(PortError::Other(
                    "the enhanced fan-out subscription task ended".into(),
                ))
            }
            Err(_) => {
                return Err(PortError::Timeout(format!(
                    "no event from SubscribeToShard on shard {shard_id} within {}s",
                    SILENT_FOR.as_secs()
                )))
            }
        }
        Ok(Box::new(reader))
    }

    async fn put_records(&self, entries: &[PutEntry]) -> PortResult<Vec<PutOutcome>> {
        self.stream.put_records(entries).await
    }
}

/// A worker's reader of one shard: hands out what the subscription task received.
struct FanOutReader {
    rx: mpsc::Receiver<PortResult<ReadBatch>>,
    /// Records of the last event not yet handed out (an event may hold more than a read's limit).
    held: VecDeque<StreamRecord>,
    /// The rest of the event being handed out (lag, shard end, children), handed out with its
    /// last records; `None` when no event is held.
    held_batch: Option<ReadBatch>,
    wait: Duration,
    /// The lag the last event reported.
    behind: Option<i64>,
    task: JoinHandle<()>,
}

impl FanOutReader {
    /// Keeps an event's records to hand out.
    fn hold(&mut self, mut b: ReadBatch) {
        self.behind = b.millis_behind_latest;
        self.held = std::mem::take(&mut b.records).into();
        self.held_batch = Some(b);
    }
}

impl Drop for FanOutReader {
    fn drop(&mut self) {
        // The lease moved on or the worker stopped: end the subscription with the reader.
        self.task.abort();
    }
}

#[async_trait]
impl ShardReader for FanOutReader {
    async fn next_batch(&mut self, limit: usize) -> PortResult<ReadBatch> {
        if self.held_batch.is_none() {
            match tokio::time::timeout(self.wait, self.rx.recv()).await {
                // Nothing pushed for a while: caught up, as far as the last event said.
                Err(_) => {
                    return Ok(ReadBatch {
                        millis_behind_latest: self.behind.or(Some(0)),
                        ..ReadBatch::default()
                    })
                }
                Ok(None) => {
                    return Err(PortError::Other(
                        "the enhanced fan-out subscription task ended".into(),
                    ))
                }
                Ok(Some(Err(e))) => return Err(e),
                Ok(Some(Ok(b))) => self.hold(b),
            }
        }
        let n = limit.max(1).min(self.held.len());
        let records: Vec<StreamRecord> = self.held.drain(..n).collect();
        match self.held_batch.take() {
            Some(mut b) if self.held.is_empty() => {
                b.records = records;
                Ok(b)
            }
            held => {
                // More of this event to come: behind by at least those records.
                self.held_batch = held;
                Ok(ReadBatch {
                    records,
                    millis_behind_latest: self.behind,
                    ..ReadBatch::default()
                })
            }
        }
    }

    fn waits_for_records(&self) -> bool {
        true
    }
}

/// The task that keeps one shard subscribed and forwards its events.
struct Subscription {
    fan_out: FanOut,
    shard_id: String,
    /// Where the next subscription starts: after the last record received, once there is one.
    position: StartPosition,
    tx: mpsc::Sender<PortResult<ReadBatch>>,
}

/// One subscription's events.
type Events = aws_sdk_kinesis::primitives::event_stream::EventReceiver<
    SubscribeToShardEventStream,
    aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError,
>;

/// Why a subscription stopped.
enum Ended {
    /// Subscribe again from the position (the 5 minutes are up, or the connection failed);
    /// whether it delivered any event first.
    Resubscribe { delivered: bool },
    /// The shard ended, or the reader is gone, or an error was handed to it.
    Done,
}

impl Subscription {
    async fn run(mut self) {
        let mut last_subscribe: Option<Instant> = None;
        let mut failures = 0u32;
        // Since when no subscription has delivered an event (refused, or ended at once).
        let mut refused_since: Option<Instant> = None;
        loop {
            if refused_since.is_some_and(|t| t.elapsed() >= POLL_AFTER) {
                return self.poll().await;
            }
            if let Some(t) = last_subscribe {
                tokio::time::sleep_until(t + SUBSCRIBE_EVERY).await;
            }
            last_subscribe = Some(Instant::now());
            let events = match self.subscribe().await {
                Ok(ev) => ev,
                Err(e) if e.is_retryable() => {
                    // Another subscription still active (a lease that just moved), a limit,
                    // a network error: try again, slower each time.
                    failures += 1;
                    refused_since.get_or_insert_with(Instant::now);
                    if failures >= 5 {
                        warn!(shard_id = %self.shard_id, error = %e, failures, "SubscribeToShard keeps failing; retrying");
                    } else {
                        debug!(shard_id = %self.shard_id, error = %e, "SubscribeToShard failed; retrying");
                    }
                    tokio::time::sleep(SUBSCRIBE_BACKOFF.ceiling(failures - 1)).await;
                    continue;
                }
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return;
                }
            };
            match self.forward(events).await {
                Ended::Resubscribe { delivered: true } => {
                    failures = 0;
                    refused_since = None;
                }
                Ended::Resubscribe { delivered: false } => {
                    refused_since.get_or_insert_with(Instant::now);
                }
                Ended::Done => return,
            }
        }
    }

    /// Reads the shard by `GetRecords` for as long as this reader lives: the subscription has
    /// been refused for [`POLL_AFTER`], which on Kinesis means something is wrong for longer
    /// than a lease handover (a new subscription takes an old one over after 5 seconds); on
    /// kinesis-local, which never takes over, a stopped worker's open subscription blocks its
    /// shard for up to 5 minutes. The lease's next holder tries fan-out again.
    async fn poll(self) {
        warn!(
            shard_id = %self.shard_id,
            "no subscription to the shard for {}s (another still active: a stopped worker?); reading it by polling GetRecords while this lease lasts",
            POLL_AFTER.as_secs()
        );
        let mut reader = match self
            .fan_out
            .stream
            .open(&self.shard_id, self.position.clone())
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let _ = self.tx.send(Err(e)).await;
                return;
            }
        };
        loop {
            match reader.next_batch(10_000).await {
                Ok(b) => {
                    let (idle, end) = (b.is_caught_up(), b.shard_end);
                    if self.tx.send(Ok(b)).await.is_err() || end {
                        return;
                    }
                    if idle {
                        tokio::time::sleep(self.fan_out.wait).await;
                    }
                }
                Err(e) if e.is_retryable() => tokio::time::sleep(SUBSCRIBE_EVERY).await,
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return;
                }
            }
        }
    }

    async fn subscribe(&self) -> PortResult<Events> {
        let f = &self.fan_out;
        let (kind, seq, at) = crate::kinesis::iterator_start(&self.position);
        let start = StartingPosition::builder()
            .r#type(kind)
            .set_sequence_number(seq)
            .set_timestamp(at)
            .build()
            .map_err(|e| PortError::Invalid(format!("SubscribeToShard starting position: {e}")))?;
        let resource = format!(
            "shard {} of stream {} (consumer {})",
            self.shard_id,
            f.stream.name(),
            f.consumer_name
        );
        let out = f
            .stream
            .client()
            .subscribe_to_shard()
            .consumer_arn(&f.consumer_arn)
            .shard_id(&self.shard_id)
            .starting_position(start)
            .send()
            .await
            .map_err(|e| f.stream.err_on("SubscribeToShard", &resource, e))?;
        Ok(out.event_stream)
    }

    /// Forwards one subscription's events until it ends.
    async fn forward(&mut self, mut events: Events) -> Ended {
        let mut caught_up_since: Option<Instant> = None;
        let mut delivered = false;
        loop {
            let event = match tokio::time::timeout(SILENT_FOR, events.recv()).await {
                Ok(Ok(Some(SubscribeToShardEventStream::SubscribeToShardEvent(e)))) => e,
                Ok(Ok(Some(_))) => continue,
                // The subscription's 5 minutes are up.
                Ok(Ok(None)) => return Ended::Resubscribe { delivered },
                Ok(Err(e)) => {
                    debug!(shard_id = %self.shard_id, error = %crate::errors::root_cause(&e), "subscription ended with an error; subscribing again");
                    return Ended::Resubscribe { delivered };
                }
                Err(_) => {
                    warn!(shard_id = %self.shard_id, "no event for {}s; subscribing again", SILENT_FOR.as_secs());
                    return Ended::Resubscribe { delivered };
                }
            };
            let mut batch = match self.batch(&event) {
                Ok(b) => b,
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return Ended::Done;
                }
            };
            if batch.records.is_empty() && batch.is_caught_up() && !batch.shard_end {
                let since = *caught_up_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= END_PROBE_EVERY {
                    caught_up_since = Some(Instant::now());
                    match self.ended_after_position().await {
                        Ok(Some(children)) => {
                            batch.shard_end = true;
                            batch.child_shards = children;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            debug!(shard_id = %self.shard_id, error = %e, "asking whether the shard ended failed")
                        }
                    }
                }
            } else {
                caught_up_since = None;
            }
            let end = batch.shard_end;
            delivered = true;
            if self.tx.send(Ok(batch)).await.is_err() || end {
                return Ended::Done;
            }
        }
    }

    /// An event as a read, and the position moved past it.
    fn batch(&mut self, e: &SubscribeToShardEvent) -> PortResult<ReadBatch> {
        let records = e
            .records()
            .iter()
            .map(record)
            .collect::<PortResult<Vec<_>>>()?;
        if let Some(last) = records.last() {
            self.position = StartPosition::AfterSequence(last.seq.clone());
        }
        let continuation = e.continuation_sequence_number();
        if !continuation.is_empty() {
            self.position = StartPosition::AfterSequence(seq(continuation)?);
        }
        Ok(ReadBatch {
            records,
            millis_behind_latest: Some(e.millis_behind_latest()),
            // At a shard's end Kinesis sends no continuation and names the children.
            shard_end: continuation.is_empty(),
            child_shards: e
                .child_shards()
                .iter()
                .map(|c| c.shard_id().to_owned())
                .collect(),
            // Kinesis sequence numbers have holes: a trimmed record cannot be told from none.
            trimmed_through: None,
        })
    }

    /// Whether the shard has ended after the position (then its children), by one `GetRecords`.
    async fn ended_after_position(&self) -> PortResult<Option<Vec<String>>> {
        let mut probe = self
            .fan_out
            .stream
            .open(&self.shard_id, self.position.clone())
            .await?;
        let b = probe.next_batch(1).await?;
        Ok((b.shard_end && b.records.is_empty()).then_some(b.child_shards))
    }
}
