//! The order a likers window writes its edges in: by post, then user — the order of the
//! embedded store's edge keys, which keeps a window's writes to few pages. Unsorted, the likers counter took 7.6–8.0 s where it takes
//! 4.7–5.1 s (BENCHMARKS). The ids are compared by their first bytes, read once per edge
//! ([`IdHead`]), and whole only where those are equal and longer: most comparisons then read no
//! id, where comparing the strings read two from the heap each.

use std::cmp::Ordering;

use crate::edge::EdgeEvent;

/// An edge's place in the window's order, read off its ids once.
struct SortKey {
    post: IdHead,
    user: IdHead,
    /// Where the edge is.
    at: usize,
}

impl SortKey {
    fn of(e: &EdgeEvent, at: usize) -> SortKey {
        SortKey {
            post: IdHead::of(&e.post_id),
            user: IdHead::of(&e.user_id),
            at,
        }
    }
}

/// An id's first eight bytes (big-endian, zero-padded) and its length: two ids whose heads
/// differ order as their heads do, and two of at most eight bytes order by head, then length
/// (one of equal heads is the other with zero bytes added). Only longer ids of equal heads are
/// compared whole.
#[derive(Clone, Copy, Debug)]
struct IdHead {
    head: u64,
    len: usize,
}

impl IdHead {
    const BYTES: usize = 8;

    fn of(id: &str) -> IdHead {
        let mut b = [0u8; IdHead::BYTES];
        let n = id.len().min(IdHead::BYTES);
        b[..n].copy_from_slice(&id.as_bytes()[..n]);
        IdHead {
            head: u64::from_be_bytes(b),
            len: id.len(),
        }
    }

    /// The order of the ids these are the heads of; `whole`: the ids compared whole.
    fn cmp(&self, other: &IdHead, whole: impl FnOnce() -> Ordering) -> Ordering {
        match self.head.cmp(&other.head) {
            Ordering::Equal if self.len.max(other.len) <= IdHead::BYTES => self.len.cmp(&other.len),
            Ordering::Equal => whole(),
            unequal => unequal,
        }
    }
}

/// `edges` by post, then user (as strings): the order of the store's keys.
pub(super) fn sorted(edges: impl IntoIterator<Item = EdgeEvent>) -> Vec<EdgeEvent> {
    let edges: Vec<EdgeEvent> = edges.into_iter().collect();
    let mut keys: Vec<SortKey> = edges
        .iter()
        .enumerate()
        .map(|(at, e)| SortKey::of(e, at))
        .collect();
    let ids = |k: &SortKey| (edges[k.at].post_id.as_str(), edges[k.at].user_id.as_str());
    keys.sort_unstable_by(|a, b| {
        a.post
            .cmp(&b.post, || ids(a).0.cmp(ids(b).0))
            .then_with(|| a.user.cmp(&b.user, || ids(a).1.cmp(ids(b).1)))
    });
    let mut edges = edges;
    permute(&mut edges, keys.iter().map(|k| k.at).collect());
    edges
}

/// Puts `items` in the order `from` gives (`from[i]`: where the item to go at `i` is now), in
/// place: each cycle of the order followed once, an item swapped at a time. A window's edges
/// gathered into a new vector took fresh pages each window (a fifth of the sort's samples were
/// first touches of that memory).
fn permute<T>(items: &mut [T], mut from: Vec<usize>) {
    for start in 0..items.len() {
        let mut at = start;
        // An item already placed is marked by pointing at itself.
        while from[at] != start && from[at] != at {
            let next = from[at];
            items.swap(at, next);
            from[at] = at;
            at = next;
        }
        from[at] = at;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn edge(post: &str, user: &str) -> EdgeEvent {
        EdgeEvent {
            post_id: post.into(),
            user_id: user.into(),
            liked: true,
            at_ms: 0,
            event_id: crate::edge::EventId::new(),
        }
    }

    /// The distinct pairs, in the order given, as `sorted` orders them.
    fn ordered(pairs: &[(String, String)]) -> Vec<(String, String)> {
        let mut unique = std::collections::HashSet::new();
        let edges = pairs
            .iter()
            .filter(|p| unique.insert(*p))
            .map(|(post, user)| edge(post, user));
        sorted(edges)
            .into_iter()
            .map(|e| (e.post_id.to_string(), e.user_id.to_string()))
            .collect()
    }

    fn by_strings(pairs: &[(String, String)]) -> Vec<(String, String)> {
        let mut want = pairs.to_vec();
        want.sort();
        want.dedup();
        want
    }

    #[test]
    fn ids_order_as_strings_across_the_heads_edge() {
        // Equal heads of up to eight bytes (one a prefix of the other, zero bytes added);
        // heads equal and longer (compared whole); a zero byte against the padding.
        let ids = [
            "",
            "\0",
            "p",
            "p\0",
            "p1",
            "p10",
            "p1\0",
            "p1234567",
            "p12345678",
            "p12345670",
            "p1234567\0",
            "p12345679a",
            "p12345679",
            "é",
            "éa",
            "\u{10ffff}",
        ];
        let pairs: Vec<(String, String)> = ids
            .iter()
            .flat_map(|p| ids.iter().map(|u| ((*p).to_owned(), (*u).to_owned())))
            .collect();
        assert_eq!(ordered(&pairs), by_strings(&pairs));
    }

    proptest! {
        #[test]
        fn close_orders_by_post_then_user(
            pairs in prop::collection::vec(("[p\0é]{0,10}", "[u1\0]{0,10}"), 0..200)
        ) {
            prop_assert_eq!(ordered(&pairs), by_strings(&pairs));
        }

        /// Every item goes where the order says, whatever its cycles (fixed points, one long
        /// cycle, many short ones).
        #[test]
        fn permute_puts_each_item_where_the_order_says(
            from in (0..300usize).prop_flat_map(|n| Just((0..n).collect::<Vec<_>>()).prop_shuffle())
        ) {
            let mut items: Vec<String> = (0..from.len()).map(|i| i.to_string()).collect();
            permute(&mut items, from.clone());
            let want: Vec<String> = from.iter().map(|i| i.to_string()).collect();
            prop_assert_eq!(items, want);
        }
    }
}
