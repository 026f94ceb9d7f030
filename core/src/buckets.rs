//! Time buckets by `created_at` (UTC): minute, hour and day keys, and the summary-item layout
//! that both backends store.
//!
//! Layout, per post: one *total* item; one *hour* item per hour that has likes, holding the
//! hour's total and a count per minute (`m00`…`m59`); one *day* item per day, holding the day's
//! total and a count per hour (`h00`…`h23`). A window therefore writes, per touched post, one total
//! item plus one hour item and one day item per distinct hour and day of its events, and a "likes
//! since T" query reads at most one hour item, one day item and the day items after T — never a
//! scan. Keeping minutes inside hour items keeps every item far below 1 KB (one write unit).

use std::collections::BTreeMap;

/// Milliseconds in a minute.
pub const MINUTE_MS: i64 = 60_000;
/// Milliseconds in an hour.
pub const HOUR_MS: i64 = 3_600_000;
/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// A civil UTC date from days since 1970-01-01 (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The day key `YYYYMMDD` of a time in milliseconds.
pub fn day_key(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(DAY_MS));
    format!("{y:04}{m:02}{d:02}")
}

/// The hour key `YYYYMMDDHH` of a time in milliseconds.
pub fn hour_key(ms: i64) -> String {
    format!("{}{:02}", day_key(ms), hour_of_day(ms))
}

/// The hour of the day, 0–23.
pub fn hour_of_day(ms: i64) -> u8 {
    (ms.rem_euclid(DAY_MS) / HOUR_MS) as u8
}

/// The minute of the hour, 0–59.
pub fn minute_of_hour(ms: i64) -> u8 {
    (ms.rem_euclid(HOUR_MS) / MINUTE_MS) as u8
}

/// One summary item of a post, as a window writes it: `n` is added to the item's total and each
/// `(slot, n)` to the slot's count (minutes in an hour item, hours in a day item).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryItem {
    /// The post the item belongs to.
    pub post_id: String,
    /// Which item of the post.
    pub kind: ItemKind,
    /// What the window adds to the item's total.
    pub n: i64,
    /// What the window adds to each sub-bucket, sorted by slot; empty for the total item.
    pub slots: Vec<(u8, i64)>,
}

/// The three kinds of summary item of a post.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ItemKind {
    Total,
    /// Hour key `YYYYMMDDHH`; slots are minutes.
    Hour(String),
    /// Day key `YYYYMMDD`; slots are hours.
    Day(String),
}

impl ItemKind {
    /// The sort key both backends use for the item within its post: `T`, `H<hour>`, `D<day>`.
    pub fn sort_key(&self) -> String {
        match self {
            ItemKind::Total => "T".to_owned(),
            ItemKind::Hour(h) => format!("H{h}"),
            ItemKind::Day(d) => format!("D{d}"),
        }
    }

    /// Parses a sort key written by [`ItemKind::sort_key`].
    pub fn from_sort_key(s: &str) -> Option<ItemKind> {
        match s.split_at_checked(1)? {
            ("T", "") => Some(ItemKind::Total),
            ("H", h) if h.len() == 10 => Some(ItemKind::Hour(h.to_owned())),
            ("D", d) if d.len() == 8 => Some(ItemKind::Day(d.to_owned())),
            _ => None,
        }
    }
}

/// The per-post net change of one window, by minute of `created_at`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostDelta {
    /// Net change, by the start of the minute (ms) the events were created in.
    pub by_minute: BTreeMap<i64, i64>,
}

impl PostDelta {
    /// Adds one distinct event.
    pub fn add(&mut self, created_at: i64, delta: i64) {
        *self
            .by_minute
            .entry(created_at - created_at.rem_euclid(MINUTE_MS))
            .or_default() += delta;
    }

    /// Net change over all minutes.
    pub fn total(&self) -> i64 {
        self.by_minute.values().sum()
    }

    /// The summary items this delta writes, in a fixed order: total, hours, days.
    pub fn items(&self, post_id: &str) -> Vec<SummaryItem> {
        let mut hours: BTreeMap<String, BTreeMap<u8, i64>> = BTreeMap::new();
        let mut days: BTreeMap<String, BTreeMap<u8, i64>> = BTreeMap::new();
        for (&minute, &n) in &self.by_minute {
            *hours
                .entry(hour_key(minute))
                .or_default()
                .entry(minute_of_hour(minute))
                .or_default() += n;
            *days
                .entry(day_key(minute))
                .or_default()
                .entry(hour_of_day(minute))
                .or_default() += n;
        }
        let item = |kind, slots: BTreeMap<u8, i64>| SummaryItem {
            post_id: post_id.to_owned(),
            kind,
            n: slots.values().sum(),
            slots: slots.into_iter().collect(),
        };
        let mut out = vec![SummaryItem {
            post_id: post_id.to_owned(),
            kind: ItemKind::Total,
            n: self.total(),
            slots: vec![],
        }];
        out.extend(hours.into_iter().map(|(h, s)| item(ItemKind::Hour(h), s)));
        out.extend(days.into_iter().map(|(d, s)| item(ItemKind::Day(d), s)));
        out
    }
}

/// What a "since T" query needs to read, computed from T alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SincePlan {
    /// The hour item of T's hour: count its minutes `>= first_minute`.
    pub hour_key: String,
    pub first_minute: u8,
    /// The day item of T's day: count its hours `> hour`... expressed as `>= first_hour`.
    pub day_key: String,
    pub first_hour: u8,
    /// Day items with a key `>= first_full_day` count whole.
    pub first_full_day: String,
}

/// Plans "likes since T" at minute granularity: every like created in T's minute or later.
pub fn since_plan(t_ms: i64) -> SincePlan {
    SincePlan {
        hour_key: hour_key(t_ms),
        first_minute: minute_of_hour(t_ms),
        day_key: day_key(t_ms),
        first_hour: hour_of_day(t_ms) + 1,
        first_full_day: day_key(t_ms - t_ms.rem_euclid(DAY_MS) + DAY_MS),
    }
}

/// Stored summary items of one post, as read back for a query.
#[derive(Clone, Debug, Default)]
pub struct StoredItems {
    pub total: i64,
    /// The hour item of T's hour, if any: its minute slots.
    pub hour_slots: Vec<(u8, i64)>,
    /// The day item of T's day, if any: its hour slots.
    pub day_slots: Vec<(u8, i64)>,
    /// The totals of the day items after T's day.
    pub later_days: Vec<i64>,
}

/// Adds up a since-T answer from the items the plan named.
pub fn since_count(plan: &SincePlan, items: &StoredItems) -> i64 {
    let minutes: i64 = items
        .hour_slots
        .iter()
        .filter(|(m, _)| *m >= plan.first_minute)
        .map(|(_, n)| n)
        .sum();
    let hours: i64 = items
        .day_slots
        .iter()
        .filter(|(h, _)| *h >= plan.first_hour)
        .map(|(_, n)| n)
        .sum();
    minutes + hours + items.later_days.iter().sum::<i64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        // 2026-11-30T06:44:18.123Z
        let t = 1_796_021_058_123;
        assert_eq!(day_key(t), "20261130");
        assert_eq!(hour_key(t), "2026113006");
        assert_eq!(minute_of_hour(t), 44);
        assert_eq!(day_key(0), "19700101");
        assert_eq!(day_key(951_782_400_000), "20000229");
    }

    #[test]
    fn items_split_by_hour_and_day() {
        let mut d = PostDelta::default();
        let h = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS + 23 * HOUR_MS; // 23:00 of a day
        d.add(h + 59 * MINUTE_MS + 1, 1);
        d.add(h + 59 * MINUTE_MS + 2, 1);
        d.add(h + HOUR_MS + 5, -1); // 00:00 next day
        let items = d.items("p");
        assert_eq!(items.len(), 5);
        assert_eq!(
            items[0],
            SummaryItem {
                post_id: "p".into(),
                kind: ItemKind::Total,
                n: 1,
                slots: vec![]
            }
        );
        assert_eq!(items[1].slots, vec![(59, 2)]);
        assert_eq!(items[2].slots, vec![(0, -1)]);
        assert_eq!((items[3].n, items[3].slots.clone()), (2, vec![(23, 2)]));
        assert_eq!((items[4].n, items[4].slots.clone()), (-1, vec![(0, -1)]));
    }

    #[test]
    fn since_adds_minutes_hours_and_days() {
        let day = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;
        let t = day + 10 * HOUR_MS + 30 * MINUTE_MS + 15_000;
        let plan = since_plan(t);
        assert_eq!(plan.first_minute, 30);
        assert_eq!(plan.first_hour, 11);
        let items = StoredItems {
            total: 100,
            hour_slots: vec![(29, 5), (30, 1), (59, 2)],
            day_slots: vec![(9, 7), (10, 8), (11, 3), (23, 4)],
            later_days: vec![10, 20],
        };
        assert_eq!(since_count(&plan, &items), 1 + 2 + 3 + 4 + 10 + 20);
        assert_eq!(
            ItemKind::from_sort_key(&ItemKind::Hour("2026113006".into()).sort_key()),
            Some(ItemKind::Hour("2026113006".into()))
        );
        assert_eq!(ItemKind::from_sort_key("T"), Some(ItemKind::Total));
    }
}
