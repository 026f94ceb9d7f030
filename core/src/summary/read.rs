//! Reading a post's summary items: its total, "since T", and what the reads cost — the one
//! reader both stores answer through.

use std::collections::BTreeMap;

use super::*;

/// Read units of one strongly consistent Query or GetItem that returned items of these sizes
/// (`cost::read_units` of their sum).
pub fn read_units(sizes: impl IntoIterator<Item = usize>) -> u64 {
    cost::read_units(sizes.into_iter().sum())
}

/// A post's stored items, as the count reads them: sort key and attributes.
pub type Items = [(String, Attrs)];

/// The items one Query returned.
pub type Queried = Vec<(String, Attrs)>;

/// The read units of one Query of partition `pk` that returned `items`, by the published rules.
pub fn query_units(pk: &str, items: &Items) -> u64 {
    read_units(items.iter().map(|(sk, a)| item_size(pk, sk, a)))
}

/// A post's count from what its Queries returned — `live`: the live items; `since`: for "since
/// T", T with the hour archives and the day archives [`since_reads`] names — and what the Queries
/// cost in read units. Every backend reads the same items and answers through this.
pub fn post_count(
    post_id: &str,
    mut live: Queried,
    since: Option<(i64, Queried, Queried)>,
) -> PortResult<crate::ports::PostCount> {
    check_items(post_id, &live)?;
    if let Some((_, hours, days)) = &since {
        check_items(post_id, hours)?;
        check_items(post_id, days)?;
    }
    let mut units = query_units(post_id, &live);
    let total = total(&live);
    let marks = live_markers(&live)
        .into_iter()
        .map(|(shard, w)| (shard.to_owned(), w.to_owned()))
        .collect();
    let since = since.map(|(t, hours, days)| {
        units += query_units(post_id, &hours) + query_units(post_id, &days);
        live.extend(hours);
        live.extend(days);
        self::since(&live, t)
    });
    Ok(crate::ports::PostCount {
        total,
        since,
        read_units: units,
        marks,
    })
}

/// Whether a window of `shard` after the checkpoint marked `after` ([`marker`] of it; `None`: the
/// shard's first window) is still to be applied to a post whose count read these live-item
/// `marks`: its live item is absent, or marked at or below the checkpoint (a window's writes mark
/// the item with the window's end, which is above it). A provisional count adds a window's delta
/// only then, so a window that lands between reading it from its worker and reading the count is
/// counted once, by the count.
pub fn pending_applies(marks: &[(String, String)], shard: &str, after: Option<&str>) -> bool {
    match marks.iter().find(|(s, _)| s == shard) {
        None => true,
        Some((_, w)) => after.is_some_and(|a| w.as_str() <= a),
    }
}

/// The post's total: the sum of its live items (one per shard that wrote it).
pub fn total(live: &Items) -> i64 {
    live.iter()
        .filter(|(sk, _)| sk.starts_with(LIVE_PREFIX))
        .filter_map(|(_, a)| num(a, "n"))
        .sum()
}

/// What "likes since T" reads besides the live items: the hour archives of T's hour
/// (`begins_with` this prefix) and the day archives from T's day on (between these keys).
pub fn since_reads(t_ms: i64) -> (String, (String, String)) {
    let hour = t_ms.div_euclid(HOUR_MS);
    (
        hour_prefix(hour),
        (day_prefix(day_of(hour)), DAY_KEYS_END.to_owned()),
    )
}

/// Each shard's live marker, from a post's items.
fn live_markers(items: &Items) -> BTreeMap<&str, &str> {
    items
        .iter()
        .filter_map(|(sk, a)| match a.get("w") {
            Some(Val::S(w)) => Some((sk.strip_prefix(LIVE_PREFIX)?, w.as_str())),
            _ => None,
        })
        .collect()
}

/// Whether an archive of `archives` was written by a window that its shard's live item in `live`
/// does not hold yet. Read in two steps (the live items, then the archives), archives ahead may
/// be ahead by more than the one window `archive_as_read` takes back (another window landing
/// between the reads): such a read is read again; one still ahead is a window stopped between
/// its writes, one window ahead.
pub fn archive_ahead(live: &Items, archives: &Items) -> bool {
    let markers = live_markers(live);
    archives.iter().any(|(sk, a)| {
        let shard = sk.split_once('#').map_or("", |(_, s)| s);
        let live = markers.get(shard).copied().unwrap_or("");
        matches!(a.get("w"), Some(Val::S(w)) if w.as_str() > live)
    })
}

/// Likes created at or after the minute of `t_ms`, from the post's live items, the hour
/// archives of T's hour and the day archives from T's day on (as [`since_reads`] names them).
pub fn since(items: &Items, t_ms: i64) -> i64 {
    let t_hour = t_ms.div_euclid(HOUR_MS);
    let t_minute = minute_of_hour(t_ms);
    let t_day = day_of(t_hour);
    let t_slot = hour_of_day(t_hour);
    let hour_pre = hour_prefix(t_hour);
    let day_pre = day_prefix(t_day);
    let minutes_from = |a: &Attrs| -> i64 { slots(a, 'm').range(t_minute..).map(|(_, n)| n).sum() };
    let hours_after = |a: &Attrs| -> i64 {
        slots(a, 'h')
            .range(t_slot.saturating_add(1)..)
            .map(|(_, n)| n)
            .sum()
    };
    // Each shard's live marker: an archive written by a window its live item does not hold yet
    // is read as before that window.
    let live_markers = live_markers(items);
    let mut out = 0;
    for (sk, a) in items {
        let a = if sk.starts_with(LIVE_PREFIX) {
            std::borrow::Cow::Borrowed(a)
        } else {
            let shard = sk.split_once('#').map_or("", |(_, s)| s);
            let live = live_markers.get(shard).copied().unwrap_or("");
            match archive_as_read(a, live) {
                Some(a) => a,
                None => continue,
            }
        };
        let a = a.as_ref();
        if sk.starts_with(LIVE_PREFIX) {
            let Some(hour) = num(a, "hk") else { continue };
            if hour == t_hour {
                out += minutes_from(a);
            }
            match day_of(hour).cmp(&t_day) {
                std::cmp::Ordering::Equal => out += hours_after(a),
                std::cmp::Ordering::Greater => out += sum(&slots(a, 'h')),
                std::cmp::Ordering::Less => {}
            }
        } else if sk.starts_with(&hour_pre) {
            // Shards whose live item has moved past T's hour.
            out += minutes_from(a);
        } else if sk.starts_with(&day_pre) {
            out += hours_after(a);
        } else if sk.starts_with('D') && sk.as_str() > day_pre.as_str() {
            out += num(a, "n").unwrap_or(0);
        }
    }
    out
}

/// An archive as a reader may count it, given the marker of its shard's live item (`""`: none):
/// whole when the live item holds the window that last wrote it; without that window's add
/// when it is ahead (a window between its archive writes and its live write, or crashed there);
/// not at all when it is ahead and was put by a roll (the live item still holds what it holds).
fn archive_as_read<'a>(a: &'a Attrs, live_marker: &str) -> Option<std::borrow::Cow<'a, Attrs>> {
    let written_by = match a.get("w") {
        Some(Val::S(w)) => w.as_str(),
        _ => "",
    };
    if written_by <= live_marker {
        return Some(std::borrow::Cow::Borrowed(a));
    }
    let Some(Val::S(last)) = a.get(LAST_ADD) else {
        return None;
    };
    let mut out = a.clone();
    for part in last.split(',') {
        let Some((k, v)) = part.split_once(':') else {
            continue;
        };
        if let (Ok(v), Some(Val::N(n))) = (v.parse::<i64>(), out.get_mut(k)) {
            *n -= v;
        }
    }
    Some(std::borrow::Cow::Owned(out))
}
