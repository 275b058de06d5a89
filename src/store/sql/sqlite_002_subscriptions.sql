-- sluice schema v2 (SQLite): the fan-out index. One row per (endpoint, pattern) it subscribes
-- to; an endpoint with no filter is the pattern '*'. Operational endpoints receive only messages
-- addressed to them and have no rows. Kept by endpoint create/update in the same transaction;
-- deleting an endpoint (or its tenant) deletes its rows.
CREATE TABLE subscriptions (
    tenant_id   TEXT NOT NULL,
    pattern     TEXT NOT NULL,
    endpoint_id TEXT NOT NULL REFERENCES endpoints(id) ON DELETE CASCADE,
    PRIMARY KEY (tenant_id, pattern, endpoint_id)
) WITHOUT ROWID;
CREATE INDEX subscriptions_endpoint ON subscriptions (endpoint_id);

INSERT INTO subscriptions (tenant_id, pattern, endpoint_id)
SELECT tenant_id, '*', id FROM endpoints WHERE operational = 0 AND json_array_length(event_types) = 0;
INSERT OR IGNORE INTO subscriptions (tenant_id, pattern, endpoint_id)
SELECT e.tenant_id, t.value, e.id FROM endpoints e, json_each(e.event_types) AS t
WHERE e.operational = 0;
