-- sluice schema v5 (SQLite): one heartbeat row per running dispatcher, rewritten every
-- heartbeat interval with its load, so any process (an API-only one included) can compute the
-- fleet's scale signal without Redis. Readers ignore rows older than three intervals; a
-- dispatcher deletes its own row when it drains, and rows of crashed ones are purged.
CREATE TABLE dispatchers (
    id                TEXT PRIMARY KEY,
    started_at_ms     INTEGER NOT NULL,
    beat_at_ms        INTEGER NOT NULL,
    in_flight         INTEGER NOT NULL,
    concurrency       INTEGER NOT NULL,
    capacity          INTEGER NOT NULL,
    arrivals_per_s    REAL NOT NULL,
    mean_service_s    REAL NOT NULL,
    draining          INTEGER NOT NULL
);
CREATE INDEX dispatchers_beat ON dispatchers (beat_at_ms);
