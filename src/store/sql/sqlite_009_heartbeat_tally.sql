-- sluice schema v9 (SQLite): each heartbeat carries its dispatcher's counts since it started
-- (deliveries answered 2xx, failed attempts, sheds), so the operator console on any process
-- takes fleet-wide rates from two readings of the heartbeats. Rows written before this version
-- read as 0, which a reader takes for a dispatcher that has just started.
ALTER TABLE dispatchers ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dispatchers ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dispatchers ADD COLUMN shed INTEGER NOT NULL DEFAULT 0;
