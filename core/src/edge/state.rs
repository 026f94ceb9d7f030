//! An edge as stored: the event that set it, as a DynamoDB item's attributes and typed
//! ([`EdgeState`]), and its size as DynamoDB charges it.

use crate::item::{Attrs, Val};

use super::EDGE_PREFIX;

/// The attribute a liked edge keeps its like's time in (a number; absent when not liked): the
/// sort key of the edges table's [`RECENT_INDEX`](super::RECENT_INDEX), which holds liked edges
/// only.
pub const LIKED_AT_ATTR: &str = "lt";

/// An edge as stored: the latest event of its user on its post.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EdgeState {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The `created_at` of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id.
    pub event_id: String,
}

impl EdgeState {
    /// The like it is, if it is one: its time.
    pub fn like(&self) -> Option<i64> {
        self.liked.then_some(self.at_ms)
    }

    /// Reads an edge item's attributes (`l`, `t`, `e`); an error names what is missing or
    /// mistyped (never a default in place of what was stored).
    pub fn from_attrs(a: &Attrs) -> Result<EdgeState, String> {
        let num = |k: &str| match a.get(k) {
            Some(Val::N(n)) => Ok(*n),
            Some(Val::S(_)) => Err(format!("`{k}` is not a number")),
            None => Err(format!("`{k}` is missing")),
        };
        let liked = match num("l")? {
            0 => false,
            1 => true,
            other => return Err(format!("`l` is {other}, not 0 or 1")),
        };
        let event_id = match a.get("e") {
            Some(Val::S(s)) => s.clone(),
            Some(Val::N(_)) => return Err("`e` is not a string".into()),
            None => return Err("`e` is missing".into()),
        };
        Ok(EdgeState {
            liked,
            at_ms: num("t")?,
            event_id,
        })
    }

    /// The edge as an item's attributes: what [`EdgeState::from_attrs`] reads back, and the
    /// like's time for the recent index when it is liked.
    pub fn to_attrs(&self) -> Attrs {
        let mut a = Attrs::from([
            ("l".to_owned(), Val::N(i64::from(self.liked))),
            ("t".to_owned(), Val::N(self.at_ms)),
            ("e".to_owned(), Val::S(self.event_id.clone())),
        ]);
        if self.liked {
            a.insert(LIKED_AT_ATTR.to_owned(), Val::N(self.at_ms));
        }
        a
    }

    /// DynamoDB's size of the edge as an item of `post` for `user` (`crate::item::item_size`
    /// of [`EdgeState::to_attrs`], without building it): what a write of it is charged.
    pub fn item_size(&self, post: &str, user: &str) -> usize {
        use crate::item::number_size as n;
        let mut size = 2 + post.len() + 2 + EDGE_PREFIX.len() + user.len();
        size += 1 + n(i64::from(self.liked)) + 1 + n(self.at_ms) + 1 + self.event_id.len();
        if self.liked {
            size += LIKED_AT_ATTR.len() + n(self.at_ms);
        }
        size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edge_reads_back_and_a_mistyped_one_is_named() {
        for liked in [false, true] {
            let s = EdgeState {
                liked,
                at_ms: 1_796_000_000_000,
                event_id: "e1".into(),
            };
            let a = s.to_attrs();
            assert_eq!(EdgeState::from_attrs(&a), Ok(s.clone()));
            assert_eq!(
                s.item_size("p", "u"),
                crate::item::item_size("p", "E#u", &a)
            );
        }
        let mut a = EdgeState::default().to_attrs();
        a.insert("t".into(), Val::S("x".into()));
        assert_eq!(EdgeState::from_attrs(&a), Err("`t` is not a number".into()));
        a.remove("t");
        assert_eq!(EdgeState::from_attrs(&a), Err("`t` is missing".into()));
        let mut a = EdgeState::default().to_attrs();
        a.insert("l".into(), Val::N(2));
        assert!(EdgeState::from_attrs(&a)
            .unwrap_err()
            .contains("not 0 or 1"));
    }
}
