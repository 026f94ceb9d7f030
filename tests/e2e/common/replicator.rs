//! A replicator that behaves as DynamoDB global tables do, between tables on the local DynamoDB
//! peer: asynchronous (it captures each source item's changes as it finds them, and applies each
//! after a random delay), item by item (no order across items: what it captured is applied
//! shuffled, a later capture of one item often before an earlier capture of another), and
//! last-writer-wins by its own clock (each change is stamped when captured; a change older than
//! the one already applied to its item is dropped, deletes included). It never writes a source.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use rand::prelude::*;

type Item = HashMap<String, AttributeValue>;

/// What the replicator did.
#[derive(Debug, Default)]
pub struct Replicated {
    /// Changes applied to a replica (puts and deletes).
    pub applied: u64,
    /// Changes dropped because a later capture of the same item was applied first (the
    /// reordering last-writer-wins resolves).
    pub superseded: u64,
    /// Changes applied while an earlier-captured change of another item was still waiting.
    pub overtook: u64,
}

/// One captured change: the replica table, the item's key, its new content (`None`: deleted),
/// when it was captured (the replicator's clock), when it may be applied.
struct Change {
    to: String,
    key: String,
    item: Option<Item>,
    key_item: Item,
    stamp: u64,
    due: Instant,
}

/// A running replicator; [`Replicator::settle`] waits for the replicas to catch up.
pub struct Replicator {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Replicated>,
}

impl Replicator {
    /// Replicates each `(source, replica)` table pair until settled, with delays of up to
    /// `max_delay`.
    pub fn start(pairs: Vec<(String, String)>, max_delay: Duration, seed: u64) -> Replicator {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(run(pairs, max_delay, seed, s))
        });
        Replicator { stop, thread }
    }

    /// Asks it to stop once settled — every change applied and a whole pass over the sources
    /// finding nothing new — and waits for that.
    pub fn settle(self) -> Replicated {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("replicator")
    }
}

async fn run(
    pairs: Vec<(String, String)>,
    max_delay: Duration,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Replicated {
    let client = super::dynamodb_client();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut keys: HashMap<String, Vec<String>> = HashMap::new();
    for (from, _) in &pairs {
        let d = client
            .describe_table()
            .table_name(from)
            .send()
            .await
            .unwrap();
        let schema = d.table().unwrap().key_schema();
        keys.insert(
            from.clone(),
            schema
                .iter()
                .map(|k| k.attribute_name().to_owned())
                .collect(),
        );
    }
    // Per source table, the items as last captured; per replica item, the stamp applied.
    let mut seen: HashMap<String, HashMap<String, Item>> = HashMap::new();
    let mut applied_stamp: HashMap<(String, String), u64> = HashMap::new();
    let mut queue: Vec<Change> = Vec::new();
    let mut clock = 0u64;
    let mut out = Replicated::default();
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let mut captured = 0;
        for (from, to) in &pairs {
            let now_items = scan(&client, from).await;
            let key_of = |i: &Item| -> String {
                keys[from]
                    .iter()
                    .map(|k| format!("{:?}", i.get(k)))
                    .collect::<Vec<_>>()
                    .join("|")
            };
            let before = seen.entry(from.clone()).or_default();
            let mut current: HashMap<String, Item> = HashMap::new();
            for item in now_items {
                current.insert(key_of(&item), item);
            }
            let mut capture = |key: &str, item: &Item, deleted: bool| {
                clock += 1;
                captured += 1;
                let key_item = keys[from]
                    .iter()
                    .map(|a| (a.clone(), item[a].clone()))
                    .collect();
                queue.push(Change {
                    to: to.clone(),
                    key: key.to_owned(),
                    item: (!deleted).then(|| item.clone()),
                    key_item,
                    stamp: clock,
                    due: Instant::now() + max_delay.mul_f64(rng.gen::<f64>()),
                });
            };
            for (k, item) in &current {
                if before.get(k) != Some(item) {
                    capture(k, item, false);
                }
            }
            for (k, item) in before.iter() {
                if !current.contains_key(k) {
                    capture(k, item, true);
                }
            }
            *before = current;
        }
        // Apply what is due, shuffled; when settling, everything.
        queue.shuffle(&mut rng);
        let now = Instant::now();
        let (due, waiting): (Vec<Change>, Vec<Change>) =
            queue.drain(..).partition(|c| stopping || c.due <= now);
        queue = waiting;
        let oldest_waiting = queue.iter().map(|c| c.stamp).min();
        for c in due {
            let last = applied_stamp
                .entry((c.to.clone(), c.key.clone()))
                .or_insert(0);
            if c.stamp < *last {
                out.superseded += 1;
                continue;
            }
            *last = c.stamp;
            if oldest_waiting.is_some_and(|w| w < c.stamp) {
                out.overtook += 1;
            }
            match c.item {
                Some(item) => {
                    client
                        .put_item()
                        .table_name(&c.to)
                        .set_item(Some(item))
                        .send()
                        .await
                        .unwrap();
                }
                None => {
                    client
                        .delete_item()
                        .table_name(&c.to)
                        .set_key(Some(c.key_item))
                        .send()
                        .await
                        .unwrap();
                }
            }
            out.applied += 1;
        }
        if stopping && captured == 0 && queue.is_empty() {
            return out;
        }
        // A pass every 100 ms: what it scans is strongly consistent reads of the peer every other
        // test shares, so it asks no more often than its delays need.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every item of `table`, read strongly.
async fn scan(client: &aws_sdk_dynamodb::Client, table: &str) -> Vec<Item> {
    let mut out = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap();
        out.extend(page.items().iter().cloned());
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return out,
        }
    }
}
