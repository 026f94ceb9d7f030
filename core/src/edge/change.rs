//! A change of an edge as the edge store's log holds it: the post and user, and the like before
//! and after it (each the like's `created_at`, or none). What the counter's second stage counts
//! ([`super::moves`]); one codec, strict, for every log (SQLite's change rows, DynamoDB Streams'
//! images turned into it by the adapter).

use smol_str::SmolStr;

use super::EdgeState;

/// The version byte an encoded change starts with.
pub const CHANGE_V1: u8 = 1;

/// One change of one edge: what it was liked at before (`None`: not liked, or absent) and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeChange {
    /// The post.
    pub post_id: SmolStr,
    /// The user.
    pub user_id: SmolStr,
    /// When the like it replaced was made (ms; `None`: the user did not like the post).
    pub before: Option<i64>,
    /// When the like it is now was made (ms; `None`: the user does not like the post).
    pub after: Option<i64>,
}

impl EdgeChange {
    /// The change from `old` (`None`: absent) to `new` of the edge of (`post`, `user`).
    pub fn between(post: &str, user: &str, old: Option<&EdgeState>, new: &EdgeState) -> EdgeChange {
        EdgeChange {
            post_id: post.into(),
            user_id: user.into(),
            before: old.and_then(EdgeState::like),
            after: new.like(),
        }
    }

    /// Whether it moves a count (a like made, undone, or made again at another time).
    pub fn counts(&self) -> bool {
        self.before != self.after
    }

    /// The change as bytes: the version, a flags byte (1: a like before, 2: a like after), each
    /// like's time present (8 bytes, little-endian), the post's length (2 bytes, little-endian),
    /// the post, then the user.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + self.post_id.len() + self.user_id.len());
        self.encode_into(&mut out);
        out
    }

    /// [`EdgeChange::encode`] into `out`, cleared first.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(CHANGE_V1);
        out.push(u8::from(self.before.is_some()) | (u8::from(self.after.is_some()) << 1));
        for at in self.before.iter().chain(&self.after) {
            out.extend_from_slice(&at.to_le_bytes());
        }
        let n = u16::try_from(self.post_id.len()).expect("a post id is at most 256 bytes");
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(self.post_id.as_bytes());
        out.extend_from_slice(self.user_id.as_bytes());
    }

    /// Reads [`EdgeChange::encode`]'s bytes; an error says what is wrong with them.
    pub fn decode(b: &[u8]) -> Result<EdgeChange, String> {
        let mut r = b;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if r.len() < n {
                return Err(format!("an edge change ends {} bytes early", n - r.len()));
            }
            let (head, rest) = r.split_at(n);
            r = rest;
            Ok(head)
        };
        let version = take(1)?[0];
        if version != CHANGE_V1 {
            return Err(format!("an edge change of unknown version {version}"));
        }
        let flags = take(1)?[0];
        if flags > 3 {
            return Err(format!("an edge change with unknown flags {flags:#x}"));
        }
        let mut time = |on: bool| -> Result<Option<i64>, String> {
            on.then(|| {
                Ok(i64::from_le_bytes(
                    take(8)?.try_into().expect("eight bytes"),
                ))
            })
            .transpose()
        };
        let before = time(flags & 1 != 0)?;
        let after = time(flags & 2 != 0)?;
        let n = u16::from_le_bytes(take(2)?.try_into().expect("two bytes")) as usize;
        let post =
            std::str::from_utf8(take(n)?).map_err(|_| "an edge change's post is not UTF-8")?;
        let user = std::str::from_utf8(r).map_err(|_| "an edge change's user is not UTF-8")?;
        if post.is_empty() || user.is_empty() {
            return Err("an edge change without its post or user".into());
        }
        Ok(EdgeChange {
            post_id: post.into(),
            user_id: user.into(),
            before,
            after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_reads_back_and_a_bad_one_is_named() {
        for (before, after) in [
            (None, None),
            (Some(5), None),
            (None, Some(-7)),
            (Some(1), Some(2)),
        ] {
            let c = EdgeChange {
                post_id: "p1".into(),
                user_id: "ü".into(),
                before,
                after,
            };
            assert_eq!(EdgeChange::decode(&c.encode()), Ok(c.clone()));
            let bytes = c.encode();
            for cut in 0..bytes.len() - 1 {
                assert!(EdgeChange::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(EdgeChange::decode(&[2, 0, 1, 0, b'p', b'u'])
            .unwrap_err()
            .contains("version"));
        assert!(EdgeChange::decode(&[1, 9, 1, 0, b'p', b'u'])
            .unwrap_err()
            .contains("flags"));
    }
}
