-- sluice schema v16 (PostgreSQL): a claim's correction of the due tables in one round trip.
--
-- After a claim, the endpoints it took to their last due delivery (and the tenants whose rows
-- promised more than they had) are moved to their next work or dropped. That was a transaction
-- of its own, BEGIN, four statements, COMMIT: six round trips, each with the buckets it had
-- taken held exclusively, so every writer sharing a bucket waited for all six. It is now one
-- statement, this function, whose buckets are held only while it runs.
--
-- Moving an endpoint or a tenant later, or dropping it, is only safe while no writer is adding
-- work for it: writers hold their endpoints' and tenants' buckets shared until commit (see
-- migrations 3 and 8), so each bucket is taken exclusively, without waiting; what is in buckets
-- taken can be moved. Each statement below reads a snapshot taken after the locks before it, so
-- it sees every delivery committed before them.
--
-- `endpoints`: those of buckets taken move to their next work (no earlier than now: behind the
-- others) or go; the others stay due, behind the rest (round robin), for a later claim to look
-- at again. `tenants`: those of buckets taken with no endpoint due now move to their next work,
-- or to never (the largest bigint: the row stays, with its cost, until new work lowers it), and
-- lose their pass (they start at the floor when they return).
--
-- Only rows it can lock at once are touched (SKIP LOCKED): a row another transaction holds
-- (another dispatcher's correction, a writer lowering it, a charge) stays as it is, due, which is
-- always safe. Waiting for it would hold the claim's deliveries back until that transaction
-- ended, and two corrections that each held a row the other wanted, taken in different orders,
-- deadlocked: PostgreSQL broke the cycle only after deadlock_timeout (1 s by default), which was
-- the fleet's one-second tail (issue 23).
--
-- It does not wait for its WAL flush: the due tables are hints that may say "due" too early,
-- never too late, and losing this transaction in a crash leaves the rows as they were, due.
CREATE FUNCTION sluice_correct_due(endpoints text[], tenants text[], now_ms bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    movable text[];
    kept text[];
    correctable text[];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF cardinality(endpoints) > 0 THEN
        SELECT COALESCE(array_agg(l.id) FILTER (WHERE l.got), '{}'),
               COALESCE(array_agg(l.id) FILTER (WHERE NOT l.got), '{}')
        INTO movable, kept
        FROM (SELECT e AS id, pg_try_advisory_xact_lock(1397, hashtext(e) & 63) AS got
              FROM unnest(endpoints) AS e) AS l;
        WITH l AS (
            SELECT q.endpoint_id AS id FROM due_endpoints q
            WHERE q.endpoint_id = ANY(movable || kept)
            ORDER BY q.endpoint_id FOR UPDATE SKIP LOCKED
        ), nx AS (
            SELECT l.id, CASE WHEN (SELECT e.ordering FROM endpoints e WHERE e.id = l.id) = 1
                THEN (SELECT CASE WHEN h.state = 0 THEN h.visible_at_ms END FROM deliveries h
                    WHERE h.endpoint_id = l.id AND h.state IN (0, 1) ORDER BY h.id LIMIT 1)
                ELSE (SELECT min(d.visible_at_ms) FROM deliveries d
                    WHERE d.endpoint_id = l.id AND d.state = 0) END AS next
            FROM l WHERE l.id = ANY(movable)
        ), gone AS (
            DELETE FROM due_endpoints q USING nx WHERE q.endpoint_id = nx.id AND nx.next IS NULL
        ), stays AS (
            UPDATE due_endpoints q SET due_ms = GREATEST(q.due_ms, now_ms) FROM l
            WHERE q.endpoint_id = l.id AND l.id = ANY(kept)
        )
        UPDATE due_endpoints q SET due_ms = GREATEST(nx.next, now_ms) FROM nx
        WHERE q.endpoint_id = nx.id AND nx.next IS NOT NULL;
    END IF;
    IF cardinality(tenants) > 0 THEN
        SELECT array_agg(t.id) FILTER (WHERE t.got) INTO correctable
        FROM (SELECT v AS id, pg_try_advisory_xact_lock(1398, hashtext(v) & 63) AS got
              FROM unnest(tenants) AS v) AS t;
        IF cardinality(correctable) > 0 THEN
            WITH nx AS (
                SELECT v.id, COALESCE((SELECT min(q.due_ms) FROM due_endpoints q
                    WHERE q.tenant_id = v.id), 9223372036854775807) AS next
                FROM unnest(correctable) AS v(id)
            ), l AS (
                SELECT q.tenant_id FROM due_tenants q JOIN nx ON nx.id = q.tenant_id
                WHERE nx.next > now_ms ORDER BY q.tenant_id FOR NO KEY UPDATE OF q SKIP LOCKED
            )
            UPDATE due_tenants q SET due_ms = nx.next, pass = NULL FROM nx
            WHERE q.tenant_id = nx.id AND nx.next > now_ms
              AND q.tenant_id IN (SELECT tenant_id FROM l);
        END IF;
    END IF;
END $$;
