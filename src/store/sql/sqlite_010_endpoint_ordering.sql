-- sluice schema v10 (SQLite): FIFO endpoints. `ordering` 0 is unordered (the default: deliveries
-- go as lanes allow), 1 is FIFO: one delivery in flight at a time across the fleet, in the order
-- their messages were accepted (delivery id order), the next only once the one before it is
-- delivered or dead-lettered.
ALTER TABLE endpoints ADD COLUMN ordering INTEGER NOT NULL DEFAULT 0;

-- A FIFO endpoint's head: its lowest pending (ready or leased) delivery, found without walking
-- its history. Small: only deliveries not yet settled are in it.
CREATE INDEX deliveries_pending ON deliveries (endpoint_id, id) WHERE state IN (0, 1);
