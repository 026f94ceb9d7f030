-- Likers' edges (tally_core::edge), one row per (post, user), typed: on DynamoDB the same edge
-- is an item of the post's partition (sk E#<user>). history: tally_core::rows::edge_history_into.
CREATE TABLE IF NOT EXISTS edges (
    post      TEXT NOT NULL,
    user      TEXT NOT NULL,
    liked     INTEGER NOT NULL,         -- 1: the user likes the post
    at_ms     INTEGER NOT NULL,         -- the ordering time of the event that set it
    event_id  BLOB NOT NULL,            -- that event's id, packed (tally_core::rows::
                                        -- event_id_into; text in a file made before)
    window    BLOB NOT NULL,            -- the window that wrote it, packed (edge_window_into;
                                        -- text in a file made before)
    history   BLOB NOT NULL,            -- what that write replaced, the older writes, lost events
    PRIMARY KEY (post, user)
) WITHOUT ROWID;
