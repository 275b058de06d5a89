-- sluice schema v14 (PostgreSQL): each heartbeat names its process's lease tag, the high half of
-- every lease token that process's claims write. When the process is known dead (its listener's
-- backend gone and its heartbeat two intervals old, while the reaping process has been connected
-- that long itself), the reaper expires its leases at once instead of waiting out the lease TTL.
-- Rows written before this version have no tag, and their leases expire as before.
ALTER TABLE dispatchers ADD COLUMN lease_tag INTEGER;
