-- sluice schema v8 (SQLite): an endpoint's rate limit, events per second with a burst, enforced
-- fleet-wide. Both NULL: no limit; the API sets or clears them together.
ALTER TABLE endpoints ADD COLUMN rate_per_second REAL;
ALTER TABLE endpoints ADD COLUMN rate_burst INTEGER;
