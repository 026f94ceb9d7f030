CREATE TABLE IF NOT EXISTS shards (
    shard_id   TEXT PRIMARY KEY,
    parents    TEXT NOT NULL,           -- JSON array of parent shard ids
    hash_start TEXT NOT NULL,           -- decimal u128
    hash_end   TEXT NOT NULL,
    closed     INTEGER NOT NULL DEFAULT 0,
    trimmed_through INTEGER             -- the shard's last record `trim` dropped (the stream's retention)
);
-- What outlives the stream's rows: `next_shard`, the number a split gives its first child (`trim`
-- deletes closed shards' rows, and a shard id is never given twice).
CREATE TABLE IF NOT EXISTS stream_meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
-- The stream's records: each put's records for one shard are one row, a batch, appended as
-- Kafka's and Redpanda's logs append a producer's batch: the index grows per batch, not per
-- record. Sequence numbers come from `stream_meta.next_seq`, one contiguous range per batch
-- (record i of a batch is first_seq + i), increasing across the whole stream in put order.
CREATE TABLE IF NOT EXISTS batches (
    shard_id   TEXT NOT NULL,
    last_seq   INTEGER NOT NULL,
    first_seq  INTEGER NOT NULL,
    arrival_ms INTEGER NOT NULL,
    records    BLOB NOT NULL,               -- per record: partition key, then data, each u32-LE-length-prefixed
    PRIMARY KEY (shard_id, last_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    app           TEXT NOT NULL,
    shard_id      TEXT NOT NULL,
    owner         TEXT,
    epoch         INTEGER NOT NULL DEFAULT 0,
    expires_ms    INTEGER NOT NULL DEFAULT 0,
    checkpoint    TEXT,
    max_arrival   INTEGER NOT NULL DEFAULT -9223372036854775808,
    pending_end   TEXT,                 -- the window being applied (recorded before its writes)
    pending_horizon_ms INTEGER,         -- the dedup horizon it was built with
    pending_first TEXT,                 -- the record its first user record is in
    behind_ms     INTEGER,              -- how far behind the tip the holder read, at its last renewal
    behind_at_ms  INTEGER,              -- when that was reported
    holder_addr   TEXT,                 -- where the holder serves its open windows (host:port)
    wanted_by     TEXT,                 -- a worker short of its share asks the holder to hand the lease over
    spent         TEXT,                 -- JSON: the counter's write units by purpose, and events counted
    finished      INTEGER NOT NULL DEFAULT 0,
    parents       TEXT NOT NULL,
    PRIMARY KEY (app, shard_id)
);
-- The counter's summary items (tally_core::summary), as on DynamoDB: a post's live items
-- (sk L#<shard>) and archives (H<hour>#<shard>, D<day>#<shard>); global totals under pk '#global'.
CREATE TABLE IF NOT EXISTS items (
    pk    TEXT NOT NULL,
    sk    TEXT NOT NULL,
    attrs TEXT NOT NULL,                -- JSON object: n, w (marker), hk, m00..m59, h00..h23
    PRIMARY KEY (pk, sk)
) WITHOUT ROWID;
-- Likers' edges and their change log live in files of their own (`edges.sql`, `edge_file.rs`).
CREATE TABLE IF NOT EXISTS dedup (
    app         TEXT NOT NULL,
    shard_id    TEXT NOT NULL,
    end_seq     TEXT NOT NULL,          -- the window's end: restores take records up to the checkpoint
    max_arrival INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    ids         BLOB NOT NULL,
    PRIMARY KEY (app, shard_id, end_seq)
);
CREATE TABLE IF NOT EXISTS dead_letters (
    shard_id   TEXT NOT NULL,
    seq        TEXT NOT NULL,               -- the letter's key (tally_core::dead_letter): a position, or a gap's range
    arrival_ms INTEGER NOT NULL,
    reason     TEXT NOT NULL,
    data       BLOB NOT NULL,
    size       INTEGER NOT NULL DEFAULT 0,  -- the record's full size (data is its first 4 KiB)
    PRIMARY KEY (shard_id, seq)
);
CREATE TABLE IF NOT EXISTS analytics_snapshots (
    app         TEXT NOT NULL,
    shard_id    TEXT NOT NULL,
    end_seq     TEXT NOT NULL,
    taken_at_ms INTEGER NOT NULL,
    latency     BLOB NOT NULL,
    PRIMARY KEY (app, shard_id, end_seq)
);
CREATE INDEX IF NOT EXISTS snapshots_by_time ON analytics_snapshots(app, taken_at_ms);
-- `tally demo --baselines`: the patterns tally is measured against.
CREATE TABLE IF NOT EXISTS baseline_counts (
    run     TEXT NOT NULL,
    post_id TEXT NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (run, post_id)
);
CREATE TABLE IF NOT EXISTS baseline_ids (
    run      TEXT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (run, event_id)
);
CREATE TABLE IF NOT EXISTS trending (
    app      TEXT NOT NULL,
    shard_id TEXT NOT NULL,
    at_ms    INTEGER NOT NULL,
    entries  TEXT NOT NULL,             -- JSON [[post_id, score, error], ...]
    PRIMARY KEY (app, shard_id)
);
