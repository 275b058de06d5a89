-- sluice schema v10 (PostgreSQL): an endpoint's rate limit, events per second with a burst,
-- enforced fleet-wide. Both NULL: no limit; the API sets or clears them together.
ALTER TABLE endpoints ADD COLUMN rate_per_second DOUBLE PRECISION;
ALTER TABLE endpoints ADD COLUMN rate_burst BIGINT;
