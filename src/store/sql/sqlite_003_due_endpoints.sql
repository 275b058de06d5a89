-- sluice schema v3 (SQLite): when each endpoint next has work. One row per endpoint that has ready
-- deliveries, with a time no later than its earliest one becomes visible (earlier is allowed:
-- a claim that finds nothing corrects it). Claims read due endpoints from here, oldest first,
-- instead of walking every endpoint. Enqueue (the only code that inserts deliveries) marks
-- each endpoint it gives work once per batch; the trigger keeps it on every update that makes a
-- delivery ready again (retry, shed, release, reap, replay), whichever statement does it.
CREATE TABLE due_endpoints (
    endpoint_id TEXT PRIMARY KEY REFERENCES endpoints(id) ON DELETE CASCADE,
    due_ms      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX due_endpoints_due ON due_endpoints (due_ms, endpoint_id);

INSERT INTO due_endpoints (endpoint_id, due_ms)
SELECT d.endpoint_id, min(d.visible_at_ms) FROM deliveries d
JOIN endpoints e ON e.id = d.endpoint_id AND e.enabled = 1
WHERE d.state = 0 GROUP BY d.endpoint_id;

CREATE TRIGGER deliveries_due_on_update AFTER UPDATE OF state, visible_at_ms ON deliveries
WHEN NEW.state = 0
BEGIN
    INSERT INTO due_endpoints (endpoint_id, due_ms) VALUES (NEW.endpoint_id, NEW.visible_at_ms)
    ON CONFLICT (endpoint_id) DO UPDATE SET due_ms = excluded.due_ms
        WHERE excluded.due_ms < due_endpoints.due_ms;
END;
