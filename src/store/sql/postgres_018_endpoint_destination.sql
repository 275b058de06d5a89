-- sluice schema v18 (PostgreSQL): an endpoint's destination. NULL is HTTP at `url` (every row
-- written before, so existing endpoints are HTTP endpoints in place); a broker destination is
-- its JSON (`{"type":"rabbitmq","url":…,"exchange":…,"routing_key":…}`) and `url` holds the
-- same broker URL, which the egress guard judges like any destination. Its credentials are
-- write-only JSON (`username`, `password`, `token`), never shown.
ALTER TABLE endpoints ADD COLUMN destination TEXT;
ALTER TABLE endpoints ADD COLUMN destination_credentials TEXT;
