-- sluice schema v11 (SQLite): each heartbeat carries its dispatcher's attempt seconds per
-- destination host since it started, as JSON text ({"hosts":{"HOST":SECONDS,…},"other":SECONDS}:
-- at most 32 hosts by name, the rest added up in other), so the operator console shows the
-- fleet's occupancy shares from the heartbeats. Rows written before this version read with no
-- seconds, as a dispatcher that has just started.
ALTER TABLE dispatchers ADD COLUMN host_seconds TEXT NOT NULL DEFAULT '{}';
