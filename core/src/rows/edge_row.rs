//! The embedded store's typed edge row (its `edges` table): the edge's columns, its event's id
//! packed ([`super::event_id_into`]), read back strictly: a row that does not decode is named as
//! the edge it is.

use crate::edge::EdgeState;
use crate::ports::{PortError, PortResult};

use super::packed::event_id_from;

/// An edge as a store that keeps edges typed holds it (the embedded store's `edges` table):
/// whether the user likes the post, and the time and id of the event that set it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeRow {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The `created_at` of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id, packed ([`super::event_id_into`]).
    pub event_id: Vec<u8>,
}

/// A typed edge row of `post` for `user`, decoded: an id that does not decode is an error naming
/// the edge.
pub fn edge_from_row(post: &str, user: &str, row: EdgeRow) -> PortResult<EdgeState> {
    let event_id = event_id_from(&row.event_id).map_err(|detail| PortError::Corrupt {
        item: format!("edges {post}/{user}"),
        detail: format!("`event_id` {detail}"),
    })?;
    Ok(EdgeState {
        liked: row.liked,
        at_ms: row.at_ms,
        event_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::event_id_into;
    use crate::rows::packed::tests::packed;

    #[test]
    fn an_edge_row_reads_back_and_a_bad_id_is_named() {
        let row = EdgeRow {
            liked: true,
            at_ms: 7,
            event_id: packed(event_id_into, "ab01"),
        };
        let s = edge_from_row("p", "u", row).unwrap();
        assert_eq!((s.liked, s.at_ms, s.event_id.as_str()), (true, 7, "ab01"));
        let bad = EdgeRow {
            liked: false,
            at_ms: 1,
            event_id: vec![9],
        };
        let e = edge_from_row("p", "u", bad).unwrap_err().to_string();
        assert!(e.contains("edges p/u") && e.contains("event_id"), "{e}");
    }
}
