-- Likers' edges (tally_core::edge), one row per (post, user): a last-writer-wins register, on
-- DynamoDB the item E#<user> of the post's partition of the edges table.
CREATE TABLE IF NOT EXISTS edges (
    post      TEXT NOT NULL,
    user      TEXT NOT NULL,
    liked     INTEGER NOT NULL,         -- 1: the user likes the post
    at_ms     INTEGER NOT NULL,         -- the created_at of the event that set it
    event_id  BLOB NOT NULL,            -- that event's id, packed (tally_core::rows::event_id_into)
    PRIMARY KEY (post, user)
) WITHOUT ROWID;
-- The part's change log (tally_core::edge::EdgeChange, edge_log.rs): the changes of each edge
-- write, in the order it made them, packed into rows of at most CHANGES_PER_ROW, written in the
-- edge write's own transaction; what the counter's second stage reads (as DynamoDB Streams on the
-- edges table), deleted once it has counted them. A change's sequence number is its row's `seq`
-- times CHANGES_PER_ROW plus its place in the row.
CREATE TABLE IF NOT EXISTS change_log (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    written_ms INTEGER NOT NULL,        -- when the changes were made (their records' arrival)
    changes    BLOB NOT NULL            -- each change: its length (4 bytes, little-endian), then
                                        -- its EdgeChange encoding
);
