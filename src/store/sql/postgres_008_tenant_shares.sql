-- sluice schema v8 (PostgreSQL): fair shares across tenants.
--
-- A tenant's written policy: its weight and its ceiling (NULL: the process default).
ALTER TABLE tenants ADD COLUMN weight INTEGER, ADD COLUMN max_share DOUBLE PRECISION;

-- Due endpoints carry their tenant and are read per tenant, oldest due first.
ALTER TABLE due_endpoints ADD COLUMN tenant_id TEXT;
UPDATE due_endpoints q SET tenant_id = e.tenant_id FROM endpoints e WHERE e.id = q.endpoint_id;
DELETE FROM due_endpoints WHERE tenant_id IS NULL;
-- A process of the previous version (a rolling upgrade) inserts rows without a tenant: name it.
CREATE FUNCTION sluice_due_endpoint_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.tenant_id := (SELECT tenant_id FROM endpoints WHERE id = NEW.endpoint_id);
    IF NEW.tenant_id IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER due_endpoints_tenant BEFORE INSERT ON due_endpoints
    FOR EACH ROW WHEN (NEW.tenant_id IS NULL) EXECUTE FUNCTION sluice_due_endpoint_tenant();
ALTER TABLE due_endpoints ALTER COLUMN tenant_id SET NOT NULL;
DROP INDEX IF EXISTS due_endpoints_due;
CREATE INDEX due_endpoints_tenant ON due_endpoints (tenant_id, due_ms, endpoint_id);

-- One row per tenant that has had due work: a time no later than its earliest due endpoint
-- (earlier is allowed: a claim that finds nothing corrects it; with none due, the largest
-- bigint), its virtual pass (NULL: newly due, it starts at the claim's floor) and the expected
-- seconds of one of its deliveries (from the dispatchers' charges). Claims read the lowest passes
-- and the oldest new rows; writers add and lower rows as they do for endpoints; a claim raises a
-- row only while holding the tenant's bucket exclusively (advisory lock 1398, as 1397 is for
-- endpoints), and charges passes in a statement of its own, locking rows in tenant order.
CREATE TABLE due_tenants (
    tenant_id TEXT PRIMARY KEY,
    due_ms    BIGINT NOT NULL,
    pass      DOUBLE PRECISION,
    cost      DOUBLE PRECISION
);
CREATE INDEX due_tenants_pass ON due_tenants (pass, tenant_id) WHERE pass IS NOT NULL;
CREATE INDEX due_tenants_fresh ON due_tenants (due_ms, tenant_id) WHERE pass IS NULL;
INSERT INTO due_tenants (tenant_id, due_ms)
SELECT tenant_id, min(due_ms) FROM due_endpoints GROUP BY tenant_id;
ALTER TABLE due_tenants SET (autovacuum_vacuum_threshold = 200,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = false);

-- Mark work due: each endpoint and each tenant gets a row no later than its earliest new work.
-- Every bucket is taken (shared) before any row is locked, endpoints' before tenants', and rows
-- are locked in key order, endpoints' before tenants': writers never wait for each other's
-- buckets, and a claim that holds a bucket exclusively waits for no writer's row.
CREATE FUNCTION sluice_mark_work_due(endpoints text[], tenants text[], dues bigint[])
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF endpoints IS NULL OR cardinality(endpoints) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1397, b) FROM (
        SELECT DISTINCT hashtext(e) & 63 AS b FROM unnest(endpoints) AS e ORDER BY 1
    ) AS buckets;
    PERFORM pg_advisory_xact_lock_shared(1398, b) FROM (
        SELECT DISTINCT hashtext(t) & 63 AS b FROM unnest(tenants) AS t ORDER BY 1
    ) AS buckets;
    INSERT INTO due_endpoints (endpoint_id, tenant_id, due_ms)
    SELECT e, min(t), min(d) FROM unnest(endpoints, tenants, dues) AS v(e, t, d)
    GROUP BY e ORDER BY e
    ON CONFLICT (endpoint_id) DO NOTHING;
    -- Work due clearly earlier than its row says: lower the row. A row a claim just moved to
    -- its own "now" is left alone (within 250 ms), so writers rarely lock rows at all.
    PERFORM 1 FROM due_endpoints q
        JOIN (SELECT e, min(d) AS due FROM unnest(endpoints, dues) AS v(e, d) GROUP BY e) AS c
          ON c.e = q.endpoint_id
        WHERE q.due_ms > c.due + 250 ORDER BY q.endpoint_id FOR NO KEY UPDATE OF q;
    UPDATE due_endpoints q SET due_ms = c.due
    FROM (SELECT e, min(d) AS due FROM unnest(endpoints, dues) AS v(e, d) GROUP BY e) AS c
    WHERE q.endpoint_id = c.e AND q.due_ms > c.due + 250;
    INSERT INTO due_tenants (tenant_id, due_ms)
    SELECT t, min(d) FROM unnest(tenants, dues) AS v(t, d)
    GROUP BY t ORDER BY t
    ON CONFLICT (tenant_id) DO NOTHING;
    PERFORM 1 FROM due_tenants q
        JOIN (SELECT t, min(d) AS due FROM unnest(tenants, dues) AS v(t, d) GROUP BY t) AS c
          ON c.t = q.tenant_id
        WHERE q.due_ms > c.due + 250 ORDER BY q.tenant_id FOR NO KEY UPDATE OF q;
    UPDATE due_tenants q SET due_ms = c.due
    FROM (SELECT t, min(d) AS due FROM unnest(tenants, dues) AS v(t, d) GROUP BY t) AS c
    WHERE q.tenant_id = c.t AND q.due_ms > c.due + 250;
    RETURN cardinality(endpoints);
END $$;

-- The previous signature, for statements of the previous version during a rolling upgrade.
CREATE OR REPLACE FUNCTION sluice_mark_endpoints_due(endpoints text[], dues bigint[])
RETURNS bigint LANGUAGE sql AS $$
    SELECT sluice_mark_work_due(array_agg(v.e), array_agg(en.tenant_id), array_agg(v.d))
    FROM unnest(endpoints, dues) AS v(e, d) JOIN endpoints en ON en.id = v.e
$$;

CREATE OR REPLACE FUNCTION sluice_mark_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM sluice_mark_work_due(array_agg(endpoint_id), array_agg(tenant_id),
        array_agg(visible_at_ms))
    FROM changed WHERE state = 0;
    RETURN NULL;
END $$;

-- Charge claims to tenants' passes (see the fairness module): in tenant order, each from the
-- larger of its stored pass and the pass it was served at, divided by its weight, and its cost
-- per delivery from the claim's; a tenant no longer due keeps no pass.
CREATE FUNCTION sluice_charge_tenants(tenants text[], starts float8[], seconds float8[],
    deliveries integer[], default_weight integer, now_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM 1 FROM due_tenants q WHERE q.tenant_id = ANY(tenants)
        ORDER BY q.tenant_id FOR NO KEY UPDATE OF q;
    UPDATE due_tenants q
    SET pass = GREATEST(COALESCE(q.pass, c.start), c.start)
            + c.seconds / GREATEST(1, COALESCE(w.weight, default_weight)),
        cost = CASE WHEN c.n > 0 THEN c.seconds / c.n ELSE q.cost END
    FROM unnest(tenants, starts, seconds, deliveries) AS c(id, start, seconds, n)
    JOIN tenants w ON w.id = c.id
    WHERE q.tenant_id = c.id AND q.due_ms <= now_ms;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
