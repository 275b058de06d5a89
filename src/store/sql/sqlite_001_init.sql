-- sluice schema v1 (SQLite). Times are Unix epoch milliseconds.
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE tenants (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL
);

CREATE TABLE endpoints (
    id                       TEXT PRIMARY KEY,
    tenant_id                TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    url                      TEXT NOT NULL,
    description              TEXT NOT NULL DEFAULT '',
    event_types              TEXT NOT NULL DEFAULT '[]',
    secret                   TEXT NOT NULL,
    previous_secret          TEXT,
    previous_secret_until_ms INTEGER,
    enabled                  INTEGER NOT NULL DEFAULT 1,
    disabled_reason          TEXT,
    operational              INTEGER NOT NULL DEFAULT 0,
    lane_size                INTEGER,
    latency_ceiling_ms       INTEGER,
    connect_timeout_ms       INTEGER,
    read_timeout_ms          INTEGER,
    total_timeout_ms         INTEGER,
    failing_since_ms         INTEGER,
    created_at_ms            INTEGER NOT NULL,
    updated_at_ms            INTEGER NOT NULL
);
CREATE INDEX endpoints_tenant ON endpoints (tenant_id, id);

CREATE TABLE messages (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    payload         TEXT NOT NULL,
    idempotency_key TEXT,
    created_at_ms   INTEGER NOT NULL
);
CREATE UNIQUE INDEX messages_idempotency ON messages (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX messages_tenant ON messages (tenant_id, id);

-- The queue: one row per message x subscribed endpoint.
CREATE TABLE deliveries (
    id             INTEGER PRIMARY KEY,
    message_id     TEXT NOT NULL,
    endpoint_id    TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    state          INTEGER NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    visible_at_ms  INTEGER NOT NULL,
    lease_until_ms INTEGER,
    lease_token    INTEGER,
    expiries       INTEGER NOT NULL DEFAULT 0,
    last_status    INTEGER,
    last_error     TEXT,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL
);
-- Fair claims walk endpoints and take the earliest due rows of each through this index.
CREATE INDEX deliveries_ready ON deliveries (endpoint_id, visible_at_ms) WHERE state = 0;
CREATE INDEX deliveries_leased ON deliveries (lease_until_ms) WHERE state = 1;
CREATE INDEX deliveries_message ON deliveries (message_id);
CREATE INDEX deliveries_endpoint ON deliveries (endpoint_id, id);

CREATE TABLE attempts (
    id            INTEGER PRIMARY KEY,
    delivery_id   INTEGER NOT NULL,
    started_at_ms INTEGER NOT NULL,
    duration_ms   INTEGER NOT NULL,
    status        INTEGER,
    error_kind    TEXT,
    response      TEXT
);
CREATE INDEX attempts_delivery ON attempts (delivery_id);

-- What happened to an endpoint: breaker transitions, disables, replays. Visible to its tenant.
CREATE TABLE endpoint_events (
    id          INTEGER PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL,
    at_ms       INTEGER NOT NULL
);
CREATE INDEX endpoint_events_endpoint ON endpoint_events (endpoint_id, id);
