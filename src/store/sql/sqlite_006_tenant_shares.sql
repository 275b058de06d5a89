-- sluice schema v6 (SQLite): fair shares across tenants.
--
-- A tenant's written policy: its weight and its ceiling (NULL: the process default).
ALTER TABLE tenants ADD COLUMN weight INTEGER;
ALTER TABLE tenants ADD COLUMN max_share REAL;

-- Due endpoints carry their tenant, and are read per tenant (oldest due first) by claims.
DROP TRIGGER IF EXISTS deliveries_due_on_update;
CREATE TABLE due_endpoints_v6 (
    endpoint_id TEXT PRIMARY KEY REFERENCES endpoints(id) ON DELETE CASCADE,
    tenant_id   TEXT NOT NULL,
    due_ms      INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO due_endpoints_v6 (endpoint_id, tenant_id, due_ms)
SELECT q.endpoint_id, e.tenant_id, q.due_ms FROM due_endpoints q JOIN endpoints e ON e.id = q.endpoint_id;
DROP TABLE due_endpoints;
ALTER TABLE due_endpoints_v6 RENAME TO due_endpoints;
CREATE INDEX due_endpoints_tenant ON due_endpoints (tenant_id, due_ms, endpoint_id);

-- One row per tenant that has had due work: a time no later than its earliest due endpoint
-- (earlier is allowed: a claim that finds nothing corrects it; with none due, the largest
-- integer), its virtual pass (NULL: newly due, it starts at the claim's floor) and the expected
-- seconds of one of its deliveries (from the dispatchers' charges). Claims read the lowest
-- passes and the oldest new rows.
CREATE TABLE due_tenants (
    tenant_id TEXT PRIMARY KEY,
    due_ms    INTEGER NOT NULL,
    pass      REAL,
    cost      REAL
) WITHOUT ROWID;
CREATE INDEX due_tenants_pass ON due_tenants (pass, tenant_id) WHERE pass IS NOT NULL;
CREATE INDEX due_tenants_fresh ON due_tenants (due_ms, tenant_id) WHERE pass IS NULL;
INSERT INTO due_tenants (tenant_id, due_ms)
SELECT tenant_id, min(due_ms) FROM due_endpoints GROUP BY tenant_id;

-- Whatever makes an endpoint due, or due earlier, makes its tenant due no later.
CREATE TRIGGER due_endpoints_tenant_on_insert AFTER INSERT ON due_endpoints
BEGIN
    INSERT INTO due_tenants (tenant_id, due_ms) VALUES (NEW.tenant_id, NEW.due_ms)
    ON CONFLICT (tenant_id) DO UPDATE SET due_ms = excluded.due_ms
        WHERE excluded.due_ms < due_tenants.due_ms;
END;
CREATE TRIGGER due_endpoints_tenant_on_lower AFTER UPDATE OF due_ms ON due_endpoints
WHEN NEW.due_ms < OLD.due_ms
BEGIN
    UPDATE due_tenants SET due_ms = NEW.due_ms
    WHERE tenant_id = NEW.tenant_id AND due_ms > NEW.due_ms;
END;

CREATE TRIGGER deliveries_due_on_update AFTER UPDATE OF state, visible_at_ms ON deliveries
WHEN NEW.state = 0
BEGIN
    INSERT INTO due_endpoints (endpoint_id, tenant_id, due_ms)
    VALUES (NEW.endpoint_id, NEW.tenant_id, NEW.visible_at_ms)
    ON CONFLICT (endpoint_id) DO UPDATE SET due_ms = excluded.due_ms
        WHERE excluded.due_ms < due_endpoints.due_ms;
END;
