//! A post's likers on SQLite, read in pages off the `edges` table: in user order, most recent
//! like first (the partial index `edges_recent`), and every edge in key order (a scan).

use rusqlite::{params, Connection};
use tally_core::edge;
use tally_core::ports::{
    EdgeScan, LikersPage, PortError, PortResult, RecentCursor, RecentLiker, RecentPage, ScanCursor,
};
use tally_core::rows;
use tally_core::summary;

use super::edges::edge_row_at;
use crate::edge_parts::EdgeParts;
use crate::sql_err;

/// The partial index likers most recent first read (`tally_core::edge::RECENT_INDEX`): the liked
/// edges by post and like time.
pub(crate) const RECENT_INDEX_SQL: &str =
    "CREATE INDEX IF NOT EXISTS edges_recent ON edges (post, at_ms, user) WHERE liked = 1";

/// Whether the store has its recent index.
pub(crate) fn has_recent_index(c: &Connection) -> PortResult<bool> {
    c.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'edges_recent'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(sql_err)
}

/// A page of a post's likers, most recent like first, after `after`, read off the partial index
/// `edges_recent` (the same transaction as the edges: nothing to check); a store without it is
/// `NotFound`, naming the setting that adds it. Read units as DynamoDB
/// charges the same page: the index entries (eventually consistent) and the check of each
/// liker's edge (strongly consistent).
pub(super) fn recent_likers(
    c: &Connection,
    post: &str,
    after: Option<&RecentCursor>,
    limit: usize,
) -> PortResult<RecentPage> {
    let limit = limit.clamp(1, tally_core::ports::MAX_LIKERS_PER_PAGE);
    if !has_recent_index(c)? {
        return Err(PortError::NotFound {
            what: format!("the index `{}` of the embedded store", edge::RECENT_INDEX),
            hint: ": likers most recent first read it. Set `recent_likers_index = true` and run \
                   `tally setup` (or any command that writes: it is added on opening)"
                .into(),
        });
    }
    let (at, user) = after.map_or((i64::MAX, ""), |a| (a.at_ms, a.user.as_str()));
    let mut st = c
        .prepare_cached(
            "SELECT user, liked, at_ms, event_id FROM edges INDEXED BY edges_recent \
             WHERE post = ?1 AND liked = 1 AND (at_ms, user) < (?2, ?3) \
             ORDER BY at_ms DESC, user DESC LIMIT ?4",
        )
        .map_err(sql_err)?;
    let rows = st
        .query_map(params![post, at, user, limit as i64], |r| {
            Ok((r.get::<_, String>(0)?, edge_row_at(r, 1)?))
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    let mut page = RecentPage::default();
    for (user, row) in rows {
        let s = rows::edge_from_row(post, &user, row)?;
        page.read_units += summary::read_units([s.item_size(post, &user)]);
        page.likers.push(RecentLiker {
            user,
            at_ms: s.at_ms,
        });
    }
    page.read_units +=
        edge::recent_index_units(page.likers.iter().map(|l| (post, l.user.as_str(), l.at_ms)));
    page.next = (page.likers.len() == limit).then(|| {
        let last = &page.likers[limit - 1];
        RecentCursor {
            at_ms: last.at_ms,
            user: last.user.clone(),
        }
    });
    Ok(page)
}

/// A page of every edge in (post, user) order after `after`, over every part (`edge_parts`):
/// each part's page read, merged in that order, the first `limit` kept; read units as
/// DynamoDB's Scan of the same items would cost.
pub(super) fn scan_edges(
    parts: &EdgeParts,
    after: Option<&ScanCursor>,
    limit: usize,
) -> PortResult<EdgeScan> {
    if parts.len() == 1 {
        return parts.with(0, |c| scan_part(c, after, limit));
    }
    let pages = parts.each(|c| scan_part(c, after, limit))?;
    // A part's full page may have more after it: the merged page then ends where it does.
    let mut more = pages.iter().any(|p| p.next.is_some());
    let mut all: Vec<_> = pages.into_iter().flat_map(|p| p.edges).collect();
    all.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let limit = limit.max(1);
    more |= all.len() > limit;
    all.truncate(limit);
    let mut page = EdgeScan {
        read_units: summary::read_units(all.iter().map(|(p, u, s)| s.item_size(p, u))),
        ..EdgeScan::default()
    };
    page.next = all.last().filter(|_| more).map(|(p, u, _)| ScanCursor {
        pk: p.clone(),
        sk: u.clone(),
    });
    page.edges = all;
    Ok(page)
}

/// A page of one part's edges in (post, user) order after `after`.
fn scan_part(c: &Connection, after: Option<&ScanCursor>, limit: usize) -> PortResult<EdgeScan> {
    let (post, user) = after.map_or(("", ""), |a| (a.pk.as_str(), a.sk.as_str()));
    let mut st = c
        .prepare_cached(
            "SELECT post, user, liked, at_ms, event_id FROM edges \
             WHERE (post, user) > (?1, ?2) ORDER BY post, user LIMIT ?3",
        )
        .map_err(sql_err)?;
    let rows = st
        .query_map(params![post, user, limit.max(1) as i64], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                edge_row_at(r, 2)?,
            ))
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    let full = rows.len() == limit.max(1);
    let mut page = EdgeScan::default();
    let mut sizes = Vec::new();
    for (post, user, row) in rows {
        let s = rows::edge_from_row(&post, &user, row)?;
        sizes.push(s.item_size(&post, &user));
        page.edges.push((post, user, s));
    }
    page.read_units = summary::read_units(sizes);
    page.next = page
        .edges
        .last()
        .filter(|_| full)
        .map(|(p, u, _)| ScanCursor {
            pk: p.clone(),
            sk: u.clone(),
        });
    Ok(page)
}

/// A page of a post's likers, in user order after `after`; read units as DynamoDB's Query of the
/// post's edge items would cost (the edges it passes over, liked or not).
pub(super) fn likers(
    c: &Connection,
    post: &str,
    after: Option<&str>,
    limit: usize,
) -> PortResult<LikersPage> {
    let limit = limit.clamp(1, tally_core::ports::MAX_LIKERS_PER_PAGE);
    let mut from = after.map(|a| format!("{a}\0")).unwrap_or_default();
    let mut page = LikersPage::default();
    let mut st = c
        .prepare_cached(
            "SELECT user, liked, at_ms, event_id FROM edges \
             WHERE post = ?1 AND user >= ?2 ORDER BY user LIMIT ?3",
        )
        .map_err(sql_err)?;
    loop {
        let rows = st
            .query_map(params![post, from, limit as i64], |r| {
                Ok((r.get::<_, String>(0)?, edge_row_at(r, 1)?))
            })
            .map_err(sql_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql_err)?;
        let full = rows.len() == limit;
        let mut sizes = Vec::new();
        let last = rows.last().map(|(u, _)| u.clone());
        for (user, row) in rows {
            let s = rows::edge_from_row(post, &user, row)?;
            sizes.push(s.item_size(post, &user));
            if s.liked && page.users.len() < limit {
                page.users.push(user);
            }
        }
        page.read_units += summary::read_units(sizes);
        match last {
            Some(u) if full && page.users.len() < limit => from = format!("{u}\0"),
            _ => {
                page.next = (page.users.len() == limit).then(|| page.users[limit - 1].clone());
                return Ok(page);
            }
        }
    }
}
