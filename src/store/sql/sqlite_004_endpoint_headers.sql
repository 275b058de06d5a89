-- sluice schema v4 (SQLite): headers an endpoint sends with every attempt, as a JSON object of
-- lower-case names to values (checked by the API before they are stored).
ALTER TABLE endpoints ADD COLUMN headers TEXT NOT NULL DEFAULT '{}';
