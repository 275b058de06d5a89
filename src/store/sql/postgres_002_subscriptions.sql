-- sluice schema v2 (PostgreSQL): the fan-out index. One row per (endpoint, pattern) it
-- subscribes to; an endpoint with no filter is the pattern '*'. Operational endpoints receive
-- only messages addressed to them and have no rows. Kept by endpoint create/update in the same
-- transaction; deleting an endpoint (or its tenant) deletes its rows.
CREATE TABLE subscriptions (
    tenant_id   TEXT NOT NULL,
    pattern     TEXT NOT NULL,
    endpoint_id TEXT NOT NULL REFERENCES endpoints(id) ON DELETE CASCADE,
    PRIMARY KEY (tenant_id, pattern, endpoint_id)
);
CREATE INDEX subscriptions_endpoint ON subscriptions (endpoint_id);

INSERT INTO subscriptions (tenant_id, pattern, endpoint_id)
SELECT tenant_id, '*', id FROM endpoints WHERE NOT operational AND event_types::jsonb = '[]'::jsonb;
INSERT INTO subscriptions (tenant_id, pattern, endpoint_id)
SELECT DISTINCT e.tenant_id, t.pattern, e.id
FROM endpoints e, jsonb_array_elements_text(e.event_types::jsonb) AS t(pattern)
WHERE NOT e.operational;
