-- sluice schema v6 (PostgreSQL): a cheaper write path.
--
-- due_endpoints loses its foreign key: every row it gained (one per endpoint that becomes due,
-- so about one per delivery at low load) ran a check that locked the endpoint's row FOR KEY
-- SHARE, a write (and, with several writers at once, a MultiXact) on the endpoints table.
-- Deleting an endpoint or a tenant deletes its rows itself.
ALTER TABLE due_endpoints DROP CONSTRAINT IF EXISTS due_endpoints_endpoint_id_fkey;
DELETE FROM due_endpoints q WHERE NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.id = q.endpoint_id);

-- Attempts are read by delivery (oldest first) and, joined from deliveries, by id: one index
-- on (delivery_id, id) serves both, instead of a primary key and a second index written on
-- every attempt. Ids still come from the identity sequence, so they stay unique.
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_pkey;
DROP INDEX IF EXISTS attempts_delivery;
CREATE INDEX attempts_delivery_id ON attempts (delivery_id, id);

-- The small, hot due table is rewritten on most claims: vacuum it after a few hundred dead rows
-- rather than a fifth of the table (claims read it from its oldest end, where dead versions
-- gather). The store also vacuums it itself after heavy churn (see the driver).
-- Never truncated by vacuum: that takes an exclusive lock claims would queue behind.
ALTER TABLE due_endpoints SET (autovacuum_vacuum_threshold = 200,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = false);
-- Deliveries: dead versions of claimed and settled rows stay in the ready index until vacuum;
-- vacuum after 2 % of the table changed instead of 20 %, without the cost-based pauses.
ALTER TABLE deliveries SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);

-- Claims and settles no longer pay for a statement trigger on every UPDATE of deliveries (each
-- collected every row it changed into a transition table to find the few made ready): the
-- statements that make deliveries ready again (a settle's retries, sheds and releases, the
-- reaper, a replay) mark their endpoints due themselves through this function, by the same
-- rule as the insert trigger: the endpoints' buckets held shared until commit, then a row for
-- each endpoint not yet due, and rows due clearly later than the new work lowered (locked in
-- id order). Enqueue keeps its insert trigger.
DROP TRIGGER IF EXISTS deliveries_due_on_update ON deliveries;

CREATE FUNCTION sluice_mark_endpoints_due(endpoints text[], dues bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF endpoints IS NULL OR cardinality(endpoints) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1397, b) FROM (
        SELECT DISTINCT hashtext(e) & 63 AS b FROM unnest(endpoints) AS e ORDER BY 1
    ) AS buckets;
    INSERT INTO due_endpoints (endpoint_id, due_ms)
    SELECT e, min(d) FROM unnest(endpoints, dues) AS v(e, d)
    GROUP BY e ORDER BY e
    ON CONFLICT (endpoint_id) DO NOTHING;
    PERFORM 1 FROM due_endpoints q
        JOIN (SELECT e, min(d) AS due FROM unnest(endpoints, dues) AS v(e, d) GROUP BY e) AS c
          ON c.e = q.endpoint_id
        WHERE q.due_ms > c.due + 250 ORDER BY q.endpoint_id FOR NO KEY UPDATE OF q;
    UPDATE due_endpoints q SET due_ms = c.due
    FROM (SELECT e, min(d) AS due FROM unnest(endpoints, dues) AS v(e, d) GROUP BY e) AS c
    WHERE q.endpoint_id = c.e AND q.due_ms > c.due + 250;
    RETURN cardinality(endpoints);
END $$;
