//! The embedded store's typed edge row (its `edges` table): the columns borrowed from an edge to
//! write it (the ids in them packed: [`super::packed`]) and the binary `history` beside them;
//! read back strictly, a row that does not decode named as the edge it is.

use crate::edge::EdgeState;
use crate::ports::{PortError, PortResult};

use super::packed::{edge_window_from, event_id_from, StoredText};

/// An edge as a store that keeps edges typed holds it (the embedded store's `edges` table): its
/// state in columns — whether the user likes the post, the ordering time and id of the event
/// that set it, the window that wrote it — and the rest of what it remembers (the event that
/// write replaced, the older writes, the clamped events that took no effect, the window pushed
/// out of the history) in `history`, [`edge_history_into`]'s encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeRow {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The ordering time of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id, as the column holds it ([`super::event_id_into`]).
    pub event_id: StoredText,
    /// The window that wrote it ([`crate::edge::window_id`]), as the column holds it
    /// ([`super::edge_window_into`]).
    pub window: StoredText,
    /// The rest, [`edge_history_into`].
    pub history: Vec<u8>,
}

/// The version byte [`edge_history_into`] starts with.
const HISTORY_V1: u8 = 1;

/// An [`EdgeRow`]'s columns but `history`, borrowed from the edge: what a store writing an
/// edge binds, with its history from [`edge_history_into`] (one buffer for many edges, nothing
/// else copied per edge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeColumns<'a> {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The ordering time of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id.
    pub event_id: &'a str,
    /// The window that wrote it.
    pub window: &'a str,
}

/// The edge's columns ([`EdgeColumns`]).
///
/// # Panics
/// If the edge has no write (an [`EdgeState`] always has one: its state was written).
pub fn edge_columns(s: &EdgeState) -> EdgeColumns<'_> {
    EdgeColumns {
        liked: s.liked,
        at_ms: s.at_ms,
        event_id: &s.event_id,
        window: &s.writes[0].window,
    }
}

/// The encoding of what an edge remembers beside its columns: a version byte (1); the first
/// write's `before`; the count of older writes, each its window and `before`; the count of lost
/// clamped events, each an id; the dropped window or none. A `before` is a tag (0 absent, 1 an
/// unlike, 2 a like), then for 1 and 2 its time (8 bytes, little-endian) and id; a string is
/// its length (2 bytes, little-endian) and its UTF-8 bytes; "none" is an empty string. An edge
/// that remembers nothing — one write, of an edge that was not there, nothing lost or dropped:
/// most edges — has no bytes at all (six fewer a row; BENCHMARKS, "Edge rows packed").
///
/// Written into `out`, cleared first: a writer of many edges keeps one buffer.
pub fn edge_history_into(s: &EdgeState, out: &mut Vec<u8>) {
    fn text(out: &mut Vec<u8>, t: &str) {
        let n = u16::try_from(t.len()).expect("ids and windows are shorter than 64 KiB");
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(t.as_bytes());
    }
    fn stamp(out: &mut Vec<u8>, b: Option<&crate::edge::Stamp>) {
        match b {
            None => out.push(0),
            Some(b) => {
                out.push(1 + u8::from(b.liked));
                out.extend_from_slice(&b.at_ms.to_le_bytes());
                text(out, &b.event_id);
            }
        }
    }
    out.clear();
    let remembers = s.writes.len() > 1
        || s.writes[0].before.is_some()
        || !s.lost.is_empty()
        || s.dropped.is_some();
    if !remembers {
        return;
    }
    out.push(HISTORY_V1);
    stamp(out, s.writes[0].before.as_ref());
    out.push(s.writes.len() as u8 - 1);
    for w in &s.writes[1..] {
        text(out, &w.window);
        stamp(out, w.before.as_ref());
    }
    out.push(s.lost.len() as u8);
    for id in &s.lost {
        text(out, id);
    }
    text(out, s.dropped.as_deref().unwrap_or_default());
}

/// A typed edge row of `post` for `user`, decoded: a history that does not decode, or more
/// writes or lost events than an edge keeps, is an error naming the edge.
pub fn edge_from_row(post: &str, user: &str, row: EdgeRow) -> PortResult<EdgeState> {
    use crate::edge::{EdgeWrite, Stamp, EDGE_HISTORY, EDGE_LOST};
    let corrupt = |detail: String| PortError::Corrupt {
        item: format!("edges {post}/{user}"),
        detail,
    };
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Result<&[u8], String> {
            if self.0.len() < n {
                return Err(format!("its history ends {} bytes early", n - self.0.len()));
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Ok(head)
        }
        fn byte(&mut self) -> Result<u8, String> {
            Ok(self.take(1)?[0])
        }
        fn text(&mut self) -> Result<String, String> {
            let n = u16::from_le_bytes(self.take(2)?.try_into().expect("two bytes"));
            String::from_utf8(self.take(n as usize)?.to_vec())
                .map_err(|_| "its history holds a string that is not UTF-8".to_owned())
        }
        fn stamp(&mut self) -> Result<Option<Stamp>, String> {
            let tag = self.byte()?;
            if tag == 0 {
                return Ok(None);
            }
            if tag > 2 {
                return Err(format!(
                    "its history holds an event tagged {tag} (0, 1 or 2)"
                ));
            }
            let at_ms = i64::from_le_bytes(self.take(8)?.try_into().expect("eight bytes"));
            Ok(Some(Stamp {
                liked: tag == 2,
                at_ms,
                event_id: self.text()?,
            }))
        }
    }
    /// The writes, lost events and dropped window a version 1 history holds, the first write
    /// `window`'s.
    type Remembered = (Vec<EdgeWrite>, Vec<String>, Option<String>);
    fn remembered(r: &mut Reader<'_>, window: String) -> Result<Remembered, String> {
        match r.byte()? {
            HISTORY_V1 => {}
            v => return Err(format!("its history is version {v}, not {HISTORY_V1}")),
        }
        let mut writes = vec![EdgeWrite {
            window,
            before: r.stamp()?,
        }];
        let older = r.byte()? as usize;
        if older >= EDGE_HISTORY {
            return Err(format!(
                "it remembers {} writes (at most {EDGE_HISTORY})",
                older + 1
            ));
        }
        for _ in 0..older {
            let window = r.text()?;
            writes.push(EdgeWrite {
                window,
                before: r.stamp()?,
            });
        }
        let lost_n = r.byte()? as usize;
        if lost_n > EDGE_LOST {
            return Err(format!(
                "it remembers {lost_n} lost events (at most {EDGE_LOST})"
            ));
        }
        let lost = (0..lost_n).map(|_| r.text()).collect::<Result<_, _>>()?;
        let dropped = Some(r.text()?).filter(|w| !w.is_empty());
        if !r.0.is_empty() {
            return Err(format!("its history has {} bytes past its end", r.0.len()));
        }
        Ok((writes, lost, dropped))
    }
    let mut r = Reader(&row.history);
    let decode = |r: &mut Reader<'_>| -> Result<EdgeState, String> {
        let window = row.window.read(edge_window_from)?;
        if window.is_empty() {
            return Err("it names no window that wrote it".into());
        }
        let event_id = row.event_id.read(event_id_from)?;
        // No history: the edge remembers nothing (`edge_history_into`).
        let (writes, lost, dropped) = if r.0.is_empty() {
            let first = EdgeWrite {
                window,
                before: None,
            };
            (vec![first], Vec::new(), None)
        } else {
            remembered(r, window)?
        };
        Ok(EdgeState {
            liked: row.liked,
            at_ms: row.at_ms,
            event_id,
            writes,
            lost,
            dropped,
        })
    };
    decode(&mut r).map_err(corrupt)
}

#[cfg(test)]
mod tests {
    use super::super::packed::tests::packed;
    use super::super::packed::{edge_window_into, event_id_into};
    use super::*;

    #[test]
    fn a_typed_edge_row_reads_back_and_a_bad_history_is_named() {
        use crate::edge::{written_state, EdgeEvent};
        let e = |liked, at, id: &str, lost: &[&str]| EdgeEvent {
            post_id: "p".into(),
            user_id: "u".into(),
            liked,
            at_ms: at,
            event_id: id.into(),
            clamped: false,
            lost: lost.iter().map(|s| (*s).to_owned()).collect(),
        };
        let mut s = written_state(&e(true, 1, "a", &[]), "m1@s0", None);
        for (i, w) in ["m2@s1", "m3@s0", "m4@s1"].iter().enumerate() {
            s = written_state(&e(i % 2 == 1, 10 + i as i64, "b", &["x", "y"]), w, Some(&s));
        }
        assert_eq!(s.writes.len(), 3);
        assert!(s.dropped.is_some() && !s.lost.is_empty());
        // The row as a store writes it: the columns borrowed from the state, the history
        // encoded into a buffer that held another edge's.
        let c = edge_columns(&s);
        let mut history = vec![7; 300];
        edge_history_into(&s, &mut history);
        let row = EdgeRow {
            liked: c.liked,
            at_ms: c.at_ms,
            event_id: StoredText::Packed(packed(event_id_into, c.event_id)),
            window: StoredText::Packed(packed(edge_window_into, c.window)),
            history,
        };
        assert_eq!(edge_from_row("p", "u", row.clone()).unwrap(), s);
        // Cut anywhere but to nothing (an edge that remembers nothing: below).
        for cut in 1..row.history.len() {
            let mut bad = row.clone();
            bad.history.truncate(cut);
            let err = edge_from_row("p", "u", bad).unwrap_err().to_string();
            assert!(err.contains("edges p/u"), "{err}");
        }
        let mut bad = row.clone();
        bad.history[0] = 9;
        let err = edge_from_row("p", "u", bad).unwrap_err().to_string();
        assert!(err.contains("version 9"), "{err}");
        let mut bad = row;
        bad.history.push(0);
        assert!(edge_from_row("p", "u", bad).is_err());
    }

    #[test]
    fn a_row_a_build_before_packing_wrote_reads_back() {
        let e = crate::edge::EdgeEvent {
            post_id: "p".into(),
            user_id: "u".into(),
            liked: true,
            at_ms: 5,
            event_id: "ab12".into(),
            clamped: false,
            lost: Vec::new(),
        };
        let s = crate::edge::written_state(&e, "007.0000001@shardId-000000000000", None);
        // An edge that remembers nothing is written with no history at all ...
        let mut history = vec![1];
        edge_history_into(&s, &mut history);
        assert!(history.is_empty());
        let row = |event_id, window, history| EdgeRow {
            liked: true,
            at_ms: 5,
            event_id,
            window,
            history,
        };
        let window = &s.writes[0].window;
        let packed_row = row(
            StoredText::Packed(packed(event_id_into, "ab12")),
            StoredText::Packed(packed(edge_window_into, window)),
            history,
        );
        assert_eq!(edge_from_row("p", "u", packed_row).unwrap(), s);
        // ... and reads back as the row an earlier build wrote of it: its ids as text, its
        // history version 1 with nothing in it.
        let v1 = vec![HISTORY_V1, 0, 0, 0, 0, 0];
        let text = row(
            StoredText::Text("ab12".into()),
            StoredText::Text(window.clone()),
            v1,
        );
        assert_eq!(edge_from_row("p", "u", text).unwrap(), s);
        for (id, w) in [
            (vec![7], packed(edge_window_into, window)),
            (packed(event_id_into, "ab12"), vec![7]),
        ] {
            let bad = row(StoredText::Packed(id), StoredText::Packed(w), Vec::new());
            let err = edge_from_row("p", "u", bad).unwrap_err();
            assert!(err.to_string().contains("edges p/u"), "{err}");
        }
    }
}
