-- sluice schema v3 (PostgreSQL): when each endpoint next has work. One row per endpoint that has
-- ready deliveries, with a time no later than its earliest one becomes visible (earlier is
-- allowed: a claim that finds nothing corrects it). Claims read due endpoints from here, oldest
-- first, instead of walking every endpoint; the triggers keep it on every statement that makes
-- a delivery ready (enqueue, retry, shed, release, reap, replay).
--
-- So a row is never dropped or postponed while a delivery for its endpoint is being written:
-- endpoints fall into 64 buckets (hashtext(id) & 63); a writer holds the buckets it writes to
-- in shared mode until commit (advisory locks: nothing written, writers never wait for each
-- other), and a claim drops or postpones a row only while holding its bucket exclusively
-- (pg_try_advisory_xact_lock, never waiting), deciding in a statement that starts after the
-- lock, so it sees every delivery committed before. A bucket it cannot take keeps its rows due.
CREATE TABLE due_endpoints (
    endpoint_id TEXT PRIMARY KEY REFERENCES endpoints(id) ON DELETE CASCADE,
    due_ms      BIGINT NOT NULL
);
CREATE INDEX due_endpoints_due ON due_endpoints (due_ms, endpoint_id);

INSERT INTO due_endpoints (endpoint_id, due_ms)
SELECT d.endpoint_id, min(d.visible_at_ms) FROM deliveries d
JOIN endpoints e ON e.id = d.endpoint_id AND e.enabled
WHERE d.state = 0 GROUP BY d.endpoint_id;

CREATE FUNCTION sluice_mark_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed WHERE state = 0) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1397, b) FROM (
        SELECT DISTINCT hashtext(endpoint_id) & 63 AS b FROM changed WHERE state = 0 ORDER BY 1
    ) AS buckets;
    INSERT INTO due_endpoints (endpoint_id, due_ms)
    SELECT endpoint_id, min(visible_at_ms) FROM changed WHERE state = 0
    GROUP BY endpoint_id ORDER BY endpoint_id
    ON CONFLICT (endpoint_id) DO NOTHING;
    -- Work due clearly earlier than its row says (a retry pending, a row moved later): lower
    -- the row, locking rows in id order as every writer does. A row a claim just moved to its
    -- own "now" is left alone (within 250 ms), so writers rarely lock rows at all.
    PERFORM 1 FROM due_endpoints q
        JOIN (SELECT endpoint_id, min(visible_at_ms) AS due FROM changed WHERE state = 0
              GROUP BY endpoint_id) AS c ON c.endpoint_id = q.endpoint_id
        WHERE q.due_ms > c.due + 250 ORDER BY q.endpoint_id FOR NO KEY UPDATE OF q;
    UPDATE due_endpoints q SET due_ms = c.due
    FROM (SELECT endpoint_id, min(visible_at_ms) AS due FROM changed WHERE state = 0
          GROUP BY endpoint_id) AS c
    WHERE q.endpoint_id = c.endpoint_id AND q.due_ms > c.due + 250;
    RETURN NULL;
END $$;

CREATE TRIGGER deliveries_due_on_insert AFTER INSERT ON deliveries
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sluice_mark_due();
CREATE TRIGGER deliveries_due_on_update AFTER UPDATE ON deliveries
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sluice_mark_due();
