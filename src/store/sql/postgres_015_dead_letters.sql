-- sluice schema v15 (PostgreSQL): the dead letters, found without walking the history.
-- Counting them (every /metrics scrape, the console) and replaying an endpoint's read this index,
-- whose size is the dead letters kept, not the months of delivered rows beside them. Small to
-- keep: a row enters it only when it is dead-lettered.
CREATE INDEX deliveries_dead ON deliveries (endpoint_id, id) WHERE state = 3;
