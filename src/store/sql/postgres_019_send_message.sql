-- Transactional enqueue: `send_message`, which an application calls inside its own transaction.
-- Committed, its message is one `POST /v1/messages` would have stored (the same rows: the
-- message, one ready delivery per subscribed enabled endpoint through the subscriptions index,
-- the due marks by the deliveries' trigger); rolled back, it never existed. Errors carry
-- SQLSTATEs of class SL (README, "Transactional enqueue").

-- The patterns an event type can match, most specific first: the type, each dotted prefix
-- with `.*`, then `*`. The same list as `store::subscriptions::candidates` (a test compares
-- them), so both enqueues find the same subscriptions.
CREATE FUNCTION sluice_event_patterns(event_type text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT array_agg(p ORDER BY n DESC)
    FROM (
        SELECT length(event_type) + 1 AS n, event_type AS p
        UNION ALL
        SELECT n, substr(event_type, 1, n - 1) || '.*'
        FROM generate_series(1, length(event_type)) AS n
        WHERE substr(event_type, n, 1) = '.'
        UNION ALL
        SELECT 0, '*'
    ) AS candidates
$$;

-- A message id as `ids::new_id` makes one: `msg_`, 10 base32 characters of the millisecond,
-- 16 of randomness (80 bits: the low five bits of 16 random bytes of two v4 UUIDs, skipping
-- byte 6, whose low bits are partly the version).
CREATE FUNCTION sluice_new_message_id(at_ms bigint) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    alphabet CONSTANT text := '0123456789abcdefghjkmnpqrstvwxyz';
    noise bytea := uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid());
    id text := 'msg_';
BEGIN
    FOR i IN REVERSE 9..0 LOOP
        id := id || substr(alphabet, ((at_ms >> (i * 5)) & 31)::int + 1, 1);
    END LOOP;
    FOR i IN 0..15 LOOP
        id := id || substr(alphabet, (get_byte(noise, i + (i >= 6)::int) & 31) + 1, 1);
    END LOOP;
    RETURN id;
END
$$;

CREATE FUNCTION send_message(tenant_id text, event_type text, payload jsonb,
                             idempotency_key text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
-- The search path of the migration: sluice's schema, then pg_temp (last, see
-- `postgres::options::configure`), whatever the caller's.
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    body text;
    max_bytes bigint;
    new_id text;
    original record;
    fanned bigint;
BEGIN
    IF send_message.tenant_id IS NULL
       OR NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = send_message.tenant_id) THEN
        RAISE EXCEPTION 'tenant_id: no tenant %', coalesce(send_message.tenant_id, 'NULL')
            USING ERRCODE = 'SL001', COLUMN = 'tenant_id';
    END IF;
    IF send_message.event_type IS NULL
       OR octet_length(send_message.event_type) > 256
       OR send_message.event_type !~ '^[A-Za-z0-9._:-]+$' THEN
        RAISE EXCEPTION 'event_type: event type % must be 1–256 of A-Z a-z 0-9 . _ - :',
            coalesce(quote_literal(send_message.event_type), 'NULL')
            USING ERRCODE = 'SL002', COLUMN = 'event_type';
    END IF;
    IF send_message.payload IS NULL THEN
        RAISE EXCEPTION 'payload: must be a JSON value, not SQL NULL (JSON null is ''null''::jsonb)'
            USING ERRCODE = 'SL003', COLUMN = 'payload';
    END IF;
    body := send_message.payload::text;
    -- The API's --max-payload-bytes, which `serve` writes here at start-up.
    SELECT s.value::bigint INTO max_bytes FROM settings s WHERE s.key = 'max_payload_bytes';
    max_bytes := coalesce(max_bytes, 262144);
    IF octet_length(body) > max_bytes THEN
        RAISE EXCEPTION 'payload: payload is % bytes; the limit is %', octet_length(body), max_bytes
            USING ERRCODE = 'SL004', COLUMN = 'payload';
    END IF;
    IF send_message.idempotency_key IS NOT NULL
       AND (octet_length(send_message.idempotency_key) > 256
            OR send_message.idempotency_key !~ '^[!-~]+$') THEN
        RAISE EXCEPTION 'idempotency_key: must be 1–256 printable ASCII characters'
            USING ERRCODE = 'SL005', COLUMN = 'idempotency_key';
    END IF;

    new_id := sluice_new_message_id(now_ms);
    IF send_message.idempotency_key IS NULL THEN
        INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key, created_at_ms)
        VALUES (new_id, send_message.tenant_id, send_message.event_type, body, NULL, now_ms);
    ELSE
        -- A concurrent transaction holding the same key makes this wait for its outcome: its
        -- commit makes this call a repeat, its rollback lets this one insert.
        INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key, created_at_ms)
        VALUES (new_id, send_message.tenant_id, send_message.event_type, body,
                send_message.idempotency_key, now_ms)
        ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
        IF NOT FOUND THEN
            SELECT m.id, m.event_type, m.payload INTO original FROM messages m
            WHERE m.tenant_id = send_message.tenant_id
              AND m.idempotency_key = send_message.idempotency_key;
            IF original.event_type = send_message.event_type
               AND original.payload::jsonb = send_message.payload THEN
                RETURN original.id;
            END IF;
            RAISE EXCEPTION 'idempotency_key: this key was used for message % with a different event type or payload; nothing was stored', original.id
                USING ERRCODE = 'SL006', COLUMN = 'idempotency_key';
        END IF;
    END IF;

    -- Fan-out: the statement of the API's enqueue (`queries::queue::ENQUEUE`, `routed`).
    INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts,
        visible_at_ms, created_at_ms, updated_at_ms)
    SELECT new_id, s.endpoint_id, send_message.tenant_id, 0, 0, now_ms, now_ms, now_ms
    FROM subscriptions s
    JOIN endpoints e ON e.id = s.endpoint_id AND e.enabled AND NOT e.operational
    WHERE s.tenant_id = send_message.tenant_id
      AND s.pattern = ANY (sluice_event_patterns(send_message.event_type));
    GET DIAGNOSTICS fanned = ROW_COUNT;
    IF fanned > 0 THEN
        -- Delivered to listeners at commit only, never for a rollback.
        PERFORM pg_notify('sluice_work', 'send_message');
    END IF;
    RETURN new_id;
END
$$;

-- Only the roles granted it (`sluice grant-sender`) may call it: functions are executable by
-- PUBLIC unless revoked.
REVOKE ALL ON FUNCTION send_message(text, text, jsonb, text) FROM PUBLIC;
