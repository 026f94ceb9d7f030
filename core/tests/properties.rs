//! Properties of what comes in, over generated input: arbitrary bytes never panic the decoder and
//! always end as an event or a dead letter within the store's limits; and the same records after
//! the same checkpoint always make the same window — the same items in the same chunks — including
//! when the consumer restarts with other settings (ARCHITECTURE.md's invariant).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tally_core::dedup::{Dedup, DedupRecord};
use tally_core::event::decode;
use tally_core::ports::{StreamRecord, WindowShape};
use tally_core::window::{
    plan_chunks, ClosedWindow, WindowBuilder, WriteItem, DEAD_LETTER_MAX_BYTES,
    DEAD_LETTER_MAX_REASON,
};
use tally_core::SeqNo;

fn record(i: usize, arrival_ms: i64, data: Vec<u8>) -> StreamRecord {
    StreamRecord {
        // Kinesis-like: long decimal strings, compared by length then bytes.
        seq: SeqNo::parse(&format!("4960{:020}", i + 1)).unwrap(),
        arrival_ms,
        partition_key: "k".into(),
        data,
    }
}

/// Records that look like events more often than not: valid ones with repeated ids (producer
/// retries), broken ones of every kind, and raw bytes.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    let id = 0u32..40;
    let post = prop::sample::select(vec!["p1", "p2", "p3", "p 4", ""]);
    let action = prop::sample::select(vec!["like", "unlike", "love"]);
    let created = prop_oneof![
        Just("1796000000000".to_owned()),
        Just("-5".to_owned()),
        Just("\"x\"".to_owned()),
        (0i64..4_000_000_000_000).prop_map(|v| v.to_string())
    ];
    let event = (id, post, action, created).prop_map(|(id, post, action, created)| {
        format!(r#"{{"event_id":"e{id}","post_id":"{post}","user_id":"u","action":"{action}","created_at":{created}}}"#).into_bytes()
    });
    prop_oneof![
        6 => event,
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => "\\PC{0,40}".prop_map(String::into_bytes),
    ]
}

/// A stream: payloads with arrival times that mostly rise, sometimes jump, sometimes go back.
fn stream() -> impl Strategy<Value = Vec<StreamRecord>> {
    prop::collection::vec((payload(), -50i64..3_000), 1..120).prop_map(|v| {
        let mut t = 1_796_000_000_000i64;
        v.into_iter()
            .enumerate()
            .map(|(i, (data, step))| {
                t += step;
                record(i, t, data)
            })
            .collect()
    })
}

/// Folds `records` into windows of `size` records with a filter of `horizon_ms`, as a counter
/// would, storing each sealed dedup record; returns the windows and what was stored.
fn fold(
    records: &[StreamRecord],
    size: usize,
    mut dedup: Dedup,
    start_after: Option<SeqNo>,
) -> (Vec<ClosedWindow>, Vec<DedupRecord>) {
    let (mut windows, mut stored) = (Vec::new(), Vec::new());
    let mut checkpoint = start_after;
    for chunk in records.chunks(size) {
        let mut w = WindowBuilder::new(checkpoint.clone(), 0);
        for r in chunk {
            w.push("shard-0", r, &mut dedup);
        }
        let closed = w.close(&mut dedup);
        stored.push(closed.dedup.clone());
        checkpoint = closed.end.clone();
        windows.push(closed);
    }
    (windows, stored)
}

/// What a restart at a checkpoint restores: the stored records whose clock is within the
/// horizon of the checkpoint's clock (as both stores' `load_dedup` select them).
fn restore(horizon_ms: i64, stored: &[DedupRecord]) -> Dedup {
    let clock = stored.last().map_or(i64::MIN, |r| r.max_arrival);
    let min = Dedup::min_arrival_to_restore(horizon_ms, clock);
    let kept = stored
        .iter()
        .filter(|r| r.max_arrival >= min)
        .cloned()
        .collect();
    Dedup::restore(horizon_ms, clock, kept)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_and_end_as_an_event_or_a_dead_letter(
        data in prop::collection::vec(any::<u8>(), 0..2_000),
        records in stream(),
    ) {
        let _ = decode(&data);
        let mut dedup = Dedup::new(600_000);
        let mut w = WindowBuilder::new(None, 0);
        let mut all = records.clone();
        all.push(record(records.len(), 0, data));
        for r in &all {
            w.push("shard-0", r, &mut dedup);
        }
        let closed = w.close(&mut dedup);
        let s = closed.stats;
        prop_assert_eq!(s.records, all.len() as u64);
        prop_assert_eq!(s.counted + s.duplicates + s.malformed, s.records);
        let dead: Vec<_> = closed.items.iter().filter_map(|i| match i {
            WriteItem::DeadLetter(d) => Some(d),
            WriteItem::Summary(_) => None,
        }).collect();
        prop_assert_eq!(dead.len() as u64, s.malformed);
        for d in dead {
            prop_assert!(d.data.len() <= DEAD_LETTER_MAX_BYTES);
            prop_assert!(d.reason.len() <= DEAD_LETTER_MAX_REASON);
            prop_assert!(d.data.len() as u64 <= d.size);
        }
        prop_assert_eq!(closed.dedup.ids.len() as u64, s.counted);
    }

    #[test]
    fn the_same_records_after_the_same_checkpoint_make_the_same_window(
        records in stream(),
        size in 1usize..40,
        horizon_ms in 1i64..20_000,
        crash_at in 0usize..8,
        max_items in 1u32..12,
    ) {
        // The first run: every window, each cut into chunks by the shape of its time.
        let (windows, stored) = fold(&records, size, Dedup::new(horizon_ms), None);
        let k = crash_at.min(windows.len() - 1);
        let pending = &windows[k];
        let shape = WindowShape { max_items, horizon_ms };
        // The restart, whatever its settings now: it restores what was stored up to the checkpoint
        // before window k with the window's recorded horizon, and rebuilds up to its recorded
        // end (not to its own window size), cut by the recorded chunk size.
        let mut dedup = restore(shape.horizon_ms, &stored[..k]);
        let start = pending.start_after.clone();
        let mut w = WindowBuilder::new(start, 0);
        let from = records
            .iter()
            .position(|r| pending.start_after.as_ref().is_none_or(|c| &r.seq > c))
            .unwrap();
        for r in &records[from..] {
            w.push("shard-0", r, &mut dedup);
            if Some(&r.seq) == pending.end.as_ref() {
                break;
            }
        }
        let rebuilt = w.close(&mut dedup);
        prop_assert_eq!(&rebuilt.items, &pending.items);
        prop_assert_eq!(rebuilt.total_delta, pending.total_delta);
        prop_assert_eq!(&rebuilt.dedup, &pending.dedup);
        prop_assert_eq!(
            plan_chunks(rebuilt.items.len(), shape.max_items as usize),
            plan_chunks(pending.items.len(), shape.max_items as usize)
        );
        // Nothing counted twice or lost across the restart.
        let counted_before: u64 = windows[..=k].iter().map(|w| w.stats.counted).sum();
        let counted_again: u64 = windows[..k].iter().map(|w| w.stats.counted).sum::<u64>()
            + rebuilt.stats.counted;
        prop_assert_eq!(counted_before, counted_again);
    }
}
