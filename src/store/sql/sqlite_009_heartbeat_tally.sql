-- sluice schema v9 (SQLite): each heartbeat names its dispatcher's host and carries its counts
-- since it started (deliveries answered 2xx, failed attempts, sheds), so the operator console
-- on any process takes fleet-wide rates from two readings of the heartbeats. Rows written
-- before this version read with no host and counts of 0, as a dispatcher that has just started.
ALTER TABLE dispatchers ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE dispatchers ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dispatchers ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dispatchers ADD COLUMN shed INTEGER NOT NULL DEFAULT 0;
