//! The viewer's own likes beside the counts (a feed page asks both), and a post's likers: read
//! from the likers' edges, one batch per call.

use serde_json::{json, Value};
use tally_core::ports::{Consistency, Counted, LikersReader, PortError};

use crate::answers;

/// Why the viewer's likes or a post's likers cannot be answered: the request (a bad user id, a
/// store that counts events), or the store (unreachable, throttled: not the caller's fault).
#[derive(Debug)]
pub enum Refused {
    Request(String),
    Store(PortError),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Request(m) => f.write_str(m),
            Refused::Store(e) => write!(f, "{e}"),
        }
    }
}

impl From<Refused> for super::ApiError {
    fn from(r: Refused) -> super::ApiError {
        match r {
            Refused::Request(m) => super::bad_request(m),
            Refused::Store(e) => e.into(),
        }
    }
}

/// Whether `viewer` likes each of `ids`, and the read units (strongly consistent) it cost.
pub async fn liked(
    counted: &Counted,
    viewer: &str,
    ids: &[String],
    c: Consistency,
) -> Result<(Vec<bool>, u64), Refused> {
    check_viewer(viewer)?;
    likers_of(counted)?
        .viewer_likes(viewer, ids, c)
        .await
        .map_err(Refused::Store)
}

/// Refuses a viewer that is no user id (before it is asked of the workers or the store).
pub fn check_viewer(viewer: &str) -> Result<(), Refused> {
    tally_core::event::check_id("user_id", viewer)
        .map_err(|e| Refused::Request(format!("`viewer`: {e}")))
}

/// The users of a `likers/among` question: 1 to [`tally_core::ports::MAX_POSTS_PER_CALL`] user
/// ids, comma-separated (a bad one named with its place), each once, in the order given.
pub fn check_among(among: &str) -> Result<Vec<String>, String> {
    let max = tally_core::ports::MAX_POSTS_PER_CALL;
    // At most `max` given, a user repeated counted each time (the document's pattern).
    let given = among.split(',').count();
    if given > max {
        return Err(format!(
            "`users`: at most {max} users per call (one batch read), got {given}"
        ));
    }
    let mut users: Vec<String> = Vec::new();
    for (i, u) in among.split(',').enumerate() {
        tally_core::event::check_id("user_id", u)
            .map_err(|e| format!("`users`: user {} ({u:?}): {e}", i + 1))?;
        if !users.iter().any(|x| x == u) {
            users.push(u.to_owned());
        }
    }
    Ok(users)
}

/// Who likes what, on the routes a store counting likers mounts (an extension of theirs only).
#[derive(Clone)]
pub struct Edges(pub std::sync::Arc<dyn LikersReader>);

/// Who likes what, or the refusal of a store that counts events: it keeps no edges, so it cannot
/// say who liked a post.
pub fn likers_of(counted: &Counted) -> Result<&dyn LikersReader, Refused> {
    counted
        .likers()
        .map(|l| l.as_ref())
        .ok_or_else(|| Refused::Request(NO_LIKERS.into()))
}

/// Why a store counting events cannot say who likes what.
pub const NO_LIKERS: &str = "this store counts events (counter.count = \"events\"): it keeps no \
     likers, so it cannot say who liked a post";

/// Refuses `param` unless the store counts events: counting likers, a count as it stood at a past
/// time needs each user's actions since, which the store does not keep (an edge holds the latest
/// only). `total − since(T)` is not it: a user who unliked after T, or liked again after an
/// unlike, drops out of both.
pub fn check_events(counted: &Counted, param: &str) -> Result<(), Refused> {
    match counted.likers() {
        None => Ok(()),
        Some(_) => Err(Refused::Request(format!(
            "`{param}`: this store counts likers (each user's latest action), and a count as it \
             stood at a past time needs every user's actions since, which it does not keep; \
             `since` answers the likes made since a time that still stand, and a store that \
             counts events (counter.count = \"events\") answers `{param}`"
        ))),
    }
}

/// Adds `viewer_liked` to each post's entry of a counts answer (in order), and the read units.
pub fn add_to_counts(v: &mut Value, viewer: &str, liked: &[bool], units: u64, c: Consistency) {
    if let Some(items) = v["counts"].as_array_mut() {
        for (item, l) in items.iter_mut().zip(liked) {
            item["viewer_liked"] = json!(l);
        }
    }
    v["viewer"] = json!(viewer);
    v["viewer_read_units"] = answers::read_units(units, c);
}

/// Adds `viewer` and `viewer_liked` to one post's answer, and the read units to its own.
pub fn add_to_post(v: &mut Value, viewer: &str, liked: bool, units: u64) {
    v["viewer"] = json!(viewer);
    v["viewer_liked"] = json!(liked);
    if let Some(n) = v["read_units"].as_u64() {
        v["read_units"] = json!(n + units);
    }
}
