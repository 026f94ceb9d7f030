//! The rows of an edges part's `change_log` (`edges.sql`): an edge write's changes packed into
//! rows of at most [`CHANGES_PER_ROW`], each change its length (u32, little-endian) and its
//! `tally_core::edge::EdgeChange` encoding, written in the edge write's own transaction.

use rusqlite::{params, Connection};
use tally_core::edge::EdgeChange;
use tally_core::ports::{PortError, PortResult};

use crate::sql_err;

/// The changes one `change_log` row holds at most.
pub(crate) const CHANGES_PER_ROW: i64 = 1 << 12;

/// The changes of one edge write, packed into `change_log` rows as it makes them, written in the
/// write's transaction ([`ChangePacker::write`]).
#[derive(Default)]
pub(crate) struct ChangePacker {
    rows: Vec<Vec<u8>>,
    in_last: i64,
    change: Vec<u8>,
}

impl ChangePacker {
    /// Logs `c` after the changes logged before it.
    pub(crate) fn push(&mut self, c: &EdgeChange) {
        if self.rows.is_empty() || self.in_last == CHANGES_PER_ROW {
            self.rows.push(Vec::new());
            self.in_last = 0;
        }
        c.encode_into(&mut self.change);
        let row = self.rows.last_mut().expect("a row was pushed");
        let n = u32::try_from(self.change.len()).expect("an edge change is a few hundred bytes");
        row.extend_from_slice(&n.to_le_bytes());
        row.extend_from_slice(&self.change);
        self.in_last += 1;
    }

    /// Writes the rows on `c` (the edge write's transaction), made at `now`.
    pub(crate) fn write(self, c: &Connection, now: i64) -> PortResult<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let mut st = c
            .prepare_cached("INSERT INTO change_log (written_ms, changes) VALUES (?1, ?2)")
            .map_err(sql_err)?;
        for row in &self.rows {
            st.execute(params![now, row]).map_err(sql_err)?;
        }
        Ok(())
    }
}

/// The changes a `change_log` row packs, in order, each its encoding; `Err` names what is wrong.
pub(crate) fn unpack(row: &[u8]) -> impl Iterator<Item = Result<&[u8], String>> {
    let mut rest = row;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            rest = &[];
            return Some(Err("a change's length is cut short".into()));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if tail.len() < len {
            rest = &[];
            return Some(Err(format!("a change of {len} bytes is cut short")));
        }
        let (change, tail) = tail.split_at(len);
        rest = tail;
        Some(Ok(change))
    })
}

/// Every change part `c`'s log holds, in order (tests read a part's log with it).
pub fn changes_in(c: &Connection) -> PortResult<Vec<EdgeChange>> {
    let mut st = c
        .prepare("SELECT changes FROM change_log ORDER BY seq")
        .map_err(sql_err)?;
    let rows = st
        .query_map([], |r| r.get::<_, Vec<u8>>(0))
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    let mut out = Vec::new();
    for row in &rows {
        for change in unpack(row) {
            out.push(
                change
                    .and_then(EdgeChange::decode)
                    .map_err(PortError::Other)?,
            );
        }
    }
    Ok(out)
}
