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
-- The part's change log (tally_core::edge::EdgeChange): one row per change of an edge, written
-- in the edge write's own transaction, in the order of the writes; what the counter's second
-- stage reads (as DynamoDB Streams on the edges table), deleted once it has counted them.
CREATE TABLE IF NOT EXISTS changes (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    written_ms INTEGER NOT NULL,        -- when the change was made (its record's arrival)
    post       TEXT NOT NULL,
    user       TEXT NOT NULL,
    before_ms  INTEGER,                 -- the like it replaced (NULL: not liked, or no edge)
    after_ms   INTEGER                  -- the like it is now (NULL: not liked)
);
