//! The queue's statements: enqueue, settle, lease extension, reaping, replay, purge, and the
//! announcement of new work.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;

use super::*;
use crate::store::postgres::{WORK_CHANNEL, pg};
use crate::store::*;

/// Apply a batch of outcomes in one statement (so a refused batch changes nothing). A settle
/// ends its lease normally, so it also ends any run of lease expiries (`expiries = 0`). A lease
/// token is set only while a delivery is leased (every way out of the lease clears it), so the
/// token alone fences; rows are found by primary key (`id = ANY($1)`), whatever the statistics.
/// Rows made ready again (retries, sheds, releases) mark their endpoints due in the same
/// statement (`due`, one row whatever it marks, so it always runs).
const SETTLE: &str = "WITH v AS ( \
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], \
                             $5::bigint[], $6::bool[], $7::bigint[], $8::text[]) \
            AS v(id, token, state, visible, inc, touch, status, error) \
    ), upd AS ( \
        UPDATE deliveries d SET state = v.state, \
            visible_at_ms = COALESCE(v.visible, d.visible_at_ms), \
            attempts = d.attempts + v.inc, lease_until_ms = NULL, lease_token = NULL, expiries = 0, \
            last_status = CASE WHEN v.touch THEN v.status ELSE d.last_status END, \
            last_error = CASE WHEN v.touch THEN v.error ELSE d.last_error END, \
            updated_at_ms = $9 \
        FROM v WHERE d.id = ANY($1) AND d.id = v.id AND d.lease_token = v.token \
        RETURNING d.id, d.endpoint_id, d.tenant_id, d.state, d.visible_at_ms \
    ), ins AS ( \
        INSERT INTO attempts (delivery_id, started_at_ms, duration_ms, status, error_kind, response) \
        SELECT a.id, a.started, a.duration, a.status, a.kind, a.response \
        FROM unnest($10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], \
                    $15::text[]) AS a(id, started, duration, status, kind, response) \
        JOIN upd ON upd.id = a.id \
    ), due AS ( \
        SELECT sluice_mark_work_due(array_agg(endpoint_id), array_agg(tenant_id), \
            array_agg(CASE WHEN state = 0 THEN visible_at_ms ELSE $9 END)) \
        FROM upd WHERE state = 0 OR (state IN (2, 3) \
            AND (SELECT e.ordering FROM endpoints e WHERE e.id = upd.endpoint_id) = 1 \
            AND EXISTS (SELECT 1 FROM deliveries p \
                WHERE p.endpoint_id = upd.endpoint_id AND p.state = 0)) \
    ) SELECT upd.id FROM upd, due";

/// An enqueue batch in one statement, committed on its own: the messages (a repeated
/// idempotency key keeps the original and inserts nothing; only messages with a key are
/// inserted through `ON CONFLICT`, whose speculative insertion costs every row it writes a
/// second WAL record and a probe of the key index), then one delivery per (new message,
/// subscribed enabled endpoint) through the fan-out index (one row per message and candidate
/// pattern in; no endpoint has two patterns matching one type, see [`subscriptions::patterns`],
/// so nothing is de-duplicated), and one per message addressed to a single endpoint. Returns
/// each new message's id (endpoint NULL), then each delivery's message and endpoint.
const ENQUEUE: &str = "WITH v AS ( \
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $13::text[], $14::text[]) AS v(id, tenant_id, event_type, payload, key, tp, ts) \
    ), keyed AS ( \
        INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key, created_at_ms, \
            traceparent, tracestate) \
        SELECT id, tenant_id, event_type, payload, key, $6, tp, ts FROM v WHERE key IS NOT NULL \
        ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING \
        RETURNING id \
    ), unkeyed AS ( \
        INSERT INTO messages (id, tenant_id, event_type, payload, idempotency_key, created_at_ms, \
            traceparent, tracestate) \
        SELECT id, tenant_id, event_type, payload, NULL, $6, tp, ts FROM v WHERE key IS NULL \
        RETURNING id \
    ), m AS ( \
        SELECT id FROM keyed UNION ALL SELECT id FROM unkeyed \
    ), routed AS ( \
        INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
            visible_at_ms, created_at_ms, updated_at_ms) \
        SELECT c.id, s.endpoint_id, c.tenant_id, 0, 0, $6, $6, $6 \
        FROM unnest($7::text[], $8::text[], $9::text[]) AS c(id, tenant_id, pattern) \
        JOIN m ON m.id = c.id \
        JOIN subscriptions s ON s.tenant_id = c.tenant_id AND s.pattern = c.pattern \
        JOIN endpoints e ON e.id = s.endpoint_id AND e.enabled AND NOT e.operational \
        RETURNING message_id, endpoint_id \
    ), direct AS ( \
        INSERT INTO deliveries (message_id, endpoint_id, tenant_id, state, attempts, \
            visible_at_ms, created_at_ms, updated_at_ms) \
        SELECT x.id, x.endpoint_id, x.tenant_id, 0, 0, $6, $6, $6 \
        FROM unnest($10::text[], $11::text[], $12::text[]) AS x(id, endpoint_id, tenant_id) \
        JOIN m ON m.id = x.id \
        RETURNING message_id, endpoint_id \
    ) \
    SELECT id, NULL FROM m \
    UNION ALL SELECT message_id, endpoint_id FROM routed \
    UNION ALL SELECT message_id, endpoint_id FROM direct";

/// The originals of repeated idempotency keys, by the id the repeat was given, and whether each
/// repeat asks for the same thing (event type and payload byte for byte).
const FIND_KEYS: &str = "SELECT k.repeat, m.id, \
        m.event_type = k.event_type AND m.payload = k.payload FROM messages m \
    JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) \
        AS k(repeat, tenant_id, key, event_type, payload) \
      ON m.tenant_id = k.tenant_id AND m.idempotency_key = k.key";

/// Announce new work to every listening process; the payload names this one, whose own
/// listener ignores it (it was woken directly).
pub(in crate::store::postgres) async fn notify(
    c: &impl GenericClient,
    instance: &str,
) -> StoreResult<()> {
    c.execute("SELECT pg_notify($1, $2)", &[&WORK_CHANNEL, &instance])
        .await
        .map_err(pg)?;
    Ok(())
}

/// Enqueue a batch in one statement (see [`ENQUEUE`]); a message whose key was already used
/// then resolves to the original, read after the commit. Also returns the endpoints given work.
pub(in crate::store::postgres) async fn enqueue(
    c: &impl GenericClient,
    messages: &[NewMessage],
    now_ms: i64,
) -> StoreResult<(Vec<Enqueued>, HashSet<String>)> {
    let ids: Vec<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    let tenants: Vec<&str> = messages.iter().map(|m| m.tenant_id.as_str()).collect();
    let types: Vec<&str> = messages.iter().map(|m| m.event_type.as_str()).collect();
    let payloads: Vec<&str> = messages.iter().map(|m| m.payload.as_str()).collect();
    let keys: Vec<Option<&str>> = messages
        .iter()
        .map(|m| m.idempotency_key.as_deref())
        .collect();
    let parents: Vec<Option<&str>> = messages.iter().map(|m| m.traceparent.as_deref()).collect();
    let states: Vec<Option<&str>> = messages.iter().map(|m| m.tracestate.as_deref()).collect();
    // Routed messages: one row per candidate pattern; direct ones: their one endpoint.
    let (mut r_ids, mut r_tenants, mut r_patterns) = (Vec::new(), Vec::new(), Vec::new());
    let (mut d_ids, mut d_targets, mut d_tenants) = (Vec::new(), Vec::new(), Vec::new());
    for m in messages {
        match &m.only_endpoint {
            Some(target) => {
                d_ids.push(m.id.as_str());
                d_targets.push(target.as_str());
                d_tenants.push(m.tenant_id.as_str());
            }
            None => {
                for pattern in subscriptions::candidates(&m.event_type) {
                    r_ids.push(m.id.as_str());
                    r_tenants.push(m.tenant_id.as_str());
                    r_patterns.push(pattern);
                }
            }
        }
    }
    let stmt = c.prepare_cached(ENQUEUE).await.map_err(pg)?;
    let rows = c
        .query(
            &stmt,
            &[
                &ids,
                &tenants,
                &types,
                &payloads,
                &keys,
                &now_ms,
                &r_ids,
                &r_tenants,
                &r_patterns,
                &d_ids,
                &d_targets,
                &d_tenants,
                &parents,
                &states,
            ],
        )
        .await
        .map_err(pg)?;
    let mut inserted: HashSet<String> = HashSet::new();
    let mut given_work: HashSet<String> = HashSet::new();
    let mut counts: HashMap<String, u32> = HashMap::new();
    for r in &rows {
        let id: String = r.get(0);
        match r.get::<_, Option<String>>(1) {
            Some(endpoint) => {
                *counts.entry(id).or_default() += 1;
                given_work.insert(endpoint);
            }
            None => {
                inserted.insert(id);
            }
        }
    }

    // Messages whose key was already taken resolve to the original id.
    let repeats: Vec<&NewMessage> = messages
        .iter()
        .filter(|m| !inserted.contains(&m.id) && m.idempotency_key.is_some())
        .collect();
    // Keyed by the repeating message's own id: two repeats of one key in a batch may differ.
    let mut originals: HashMap<String, (String, bool)> = HashMap::new();
    if !repeats.is_empty() {
        let column = |f: fn(&NewMessage) -> &str| repeats.iter().map(|m| f(m)).collect::<Vec<_>>();
        let stmt = c.prepare_cached(FIND_KEYS).await.map_err(pg)?;
        let params = [
            column(|m| &m.id),
            column(|m| &m.tenant_id),
            column(|m| m.idempotency_key.as_deref().unwrap_or_default()),
            column(|m| &m.event_type),
            column(|m| &m.payload),
        ];
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p as _).collect();
        for r in c.query(&stmt, &params).await.map_err(pg)? {
            originals.insert(r.get(0), (r.get(1), r.get(2)));
        }
    }

    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        if inserted.contains(&m.id) {
            let deliveries = counts.get(&m.id).copied().unwrap_or(0);
            out.push(Enqueued::created(m.id.clone(), deliveries));
        } else {
            let (id, same) = originals.get(&m.id).cloned().ok_or_else(|| {
                StoreError::Conflict(format!("message id {} already exists", m.id))
            })?;
            out.push(Enqueued::repeat(id, same));
        }
    }
    Ok((out, given_work))
}

pub(in crate::store::postgres) async fn settle(
    c: &impl GenericClient,
    settlements: &[Settlement],
    now_ms: i64,
) -> StoreResult<Vec<i64>> {
    let n = settlements.len();
    let (mut ids, mut tokens, mut states, mut visible, mut incs, mut touch, mut status, mut error) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut a_ids, mut a_started, mut a_duration, mut a_status, mut a_kind, mut a_response) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for s in settlements {
        let row = SettleRow::of(s, now_ms);
        ids.push(s.delivery_id);
        tokens.push(s.lease_token);
        states.push(row.state);
        visible.push(row.visible_at_ms);
        incs.push(row.attempts_added);
        touch.push(row.touches_last);
        status.push(row.last_status);
        error.push(row.last_error);
        if let Some(a) = &s.attempt {
            a_ids.push(s.delivery_id);
            a_started.push(a.started_at_ms);
            a_duration.push(i64::from(a.duration_ms));
            a_status.push(a.status.map(i64::from));
            a_kind.push(a.error_kind.as_deref());
            a_response.push(a.response.as_deref());
        }
    }
    let stmt = c.prepare_cached(SETTLE).await.map_err(pg)?;
    let rows = c
        .query(
            &stmt,
            &[
                &ids,
                &tokens,
                &states,
                &visible,
                &incs,
                &touch,
                &status,
                &error,
                &now_ms,
                &a_ids,
                &a_started,
                &a_duration,
                &a_status,
                &a_kind,
                &a_response,
            ],
        )
        .await
        .map_err(pg)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

pub(in crate::store::postgres) async fn extend_lease(
    c: &impl GenericClient,
    id: i64,
    token: i64,
    until_ms: i64,
) -> StoreResult<bool> {
    let n = c
        .execute(
            "UPDATE deliveries SET lease_until_ms = $3 WHERE id = $1 AND lease_token = $2 \
             AND state = 1",
            &[&id, &token, &until_ms],
        )
        .await
        .map_err(pg)?;
    Ok(n > 0)
}

pub(in crate::store::postgres) async fn purge(
    c: &impl GenericClient,
    request: &PurgeRequest,
) -> StoreResult<PurgeReport> {
    let limit = i64::from(request.limit.max(1));
    let rows = c
        .query(
            "SELECT id, message_id FROM deliveries \
             WHERE message_id >= $1 AND message_id < $2 AND state = 2 AND updated_at_ms < $3 \
             ORDER BY message_id LIMIT $4 FOR UPDATE SKIP LOCKED",
            &[
                &request.after,
                &request.id_ceiling(),
                &request.before_ms,
                &limit,
            ],
        )
        .await
        .map_err(pg)?;
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    let next: Option<String> = (rows.len() as i64 >= limit)
        .then(|| rows.last().map(|r| r.get(1)))
        .flatten();
    if !ids.is_empty() {
        c.execute("DELETE FROM attempts WHERE delivery_id = ANY($1)", &[&ids])
            .await
            .map_err(pg)?;
        c.execute("DELETE FROM deliveries WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(pg)?;
    }
    let messages = c
        .execute(
            "DELETE FROM messages m WHERE m.id >= $1 AND m.id <= $2 AND m.created_at_ms < $3 \
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = m.id)",
            &[
                &request.after,
                &request.messages_up_to(next.as_deref()),
                &request.before_ms,
            ],
        )
        .await
        .map_err(pg)?;
    Ok(PurgeReport {
        deliveries: ids.len() as u64,
        messages,
        next,
    })
}

/// Expire now (one millisecond ago) the unexpired leases whose tokens carry one of `tags`
/// ([`crate::ids::tagged_lease_token`]): the next reap returns them, counting the expiry as it
/// counts any other. Reached through the leased index (a few rows: what is in flight).
pub(in crate::store::postgres) async fn expire_leases_tagged(
    c: &impl GenericClient,
    tags: &[i32],
    now_ms: i64,
) -> StoreResult<u64> {
    c.execute(
        "UPDATE deliveries SET lease_until_ms = $2 - 1 \
         WHERE state = 1 AND lease_until_ms >= $2 AND (lease_token >> 32)::int = ANY($1)",
        &[&tags, &now_ms],
    )
    .await
    .map_err(pg)
}

/// FIFO endpoints whose head the reaper just dead-lettered as poison: due again when anything
/// waits behind them (rare, so a walk of the FIFO endpoints is cheap enough).
const FIFO_AFTER_POISON: &str = "SELECT sluice_mark_work_due(array_agg(e.id), array_agg(e.tenant_id), \
         array_agg($1::bigint)) FROM endpoints e WHERE e.ordering = 1 AND e.enabled \
       AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 1) \
       AND EXISTS (SELECT 1 FROM deliveries p WHERE p.endpoint_id = e.id AND p.state = 0)";

pub(in crate::store::postgres) async fn reap(
    c: &impl GenericClient,
    now_ms: i64,
    max_expiries: u32,
) -> StoreResult<ReapReport> {
    let max = i64::from(max_expiries);
    let dead = c
        .execute(
            "UPDATE deliveries SET state = 3, lease_until_ms = NULL, lease_token = NULL, \
             expiries = expiries + 1, updated_at_ms = $1, \
             last_error = 'lease expired ' || (expiries + 1) || ' times (poison message)' \
             WHERE state = 1 AND lease_until_ms < $1 AND expiries + 1 >= $2",
            &[&now_ms, &max],
        )
        .await
        .map_err(pg)?;
    if dead > 0 {
        c.execute(FIFO_AFTER_POISON, &[&now_ms]).await.map_err(pg)?;
    }
    let returned = c
        .query_one(
            "WITH r AS (UPDATE deliveries SET state = 0, visible_at_ms = $1, \
             lease_until_ms = NULL, lease_token = NULL, expiries = expiries + 1, updated_at_ms = $1 \
             WHERE state = 1 AND lease_until_ms < $1 \
             RETURNING endpoint_id, tenant_id, visible_at_ms) \
             SELECT count(*), sluice_mark_work_due(array_agg(endpoint_id), array_agg(tenant_id), \
                 array_agg(visible_at_ms)) FROM r",
            &[&now_ms],
        )
        .await
        .map_err(pg)?
        .get::<_, i64>(0) as u64;
    Ok(ReapReport { returned, dead })
}

/// Ready now, attempts reset; `$1` is the time, `$2` the reason. Followed by a `WHERE` and
/// [`MARK`], which marks the endpoints of the rows made ready due in the same statement and
/// counts them.
const MAKE_READY: &str = "WITH r AS (UPDATE deliveries SET state = 0, attempts = 0, \
    expiries = 0, visible_at_ms = $1, last_error = $2, updated_at_ms = $1";
const MARK: &str = "RETURNING endpoint_id, tenant_id, visible_at_ms) SELECT count(*), \
    sluice_mark_work_due(array_agg(endpoint_id), array_agg(tenant_id), array_agg(visible_at_ms)) \
    FROM r";

pub(in crate::store::postgres) async fn replay(
    c: &impl GenericClient,
    tenant: &str,
    target: &ReplayTarget,
    now_ms: i64,
) -> StoreResult<u64> {
    let reason = target.reason();
    match target {
        ReplayTarget::Delivery(id) | ReplayTarget::Resend(id) => {
            let state = c
                .query_opt(
                    "SELECT state FROM deliveries WHERE id = $1 AND tenant_id = $2",
                    &[id, &tenant],
                )
                .await
                .map_err(pg)?
                .map(|r| DeliveryState::from_code(r.get(0)))
                .ok_or(StoreError::NotFound("delivery"))?;
            let allowed = replayable(target, state)?;
            c.query_one(
                &format!(
                    "{MAKE_READY} WHERE id = $3 AND tenant_id = $4 AND state IN ({allowed}) {MARK}"
                ),
                &[&now_ms, &reason, id, &tenant],
            )
            .await
            .map(|r| r.get::<_, i64>(0) as u64)
            .map_err(pg)
        }
        ReplayTarget::Endpoint(endpoint) => {
            endpoint_owned(c, tenant, endpoint).await?;
            c.query_one(
                &format!(
                    "{MAKE_READY} WHERE endpoint_id = $3 AND tenant_id = $4 AND state = 3 {MARK}"
                ),
                &[&now_ms, &reason, endpoint, &tenant],
            )
            .await
            .map(|r| r.get::<_, i64>(0) as u64)
            .map_err(pg)
        }
        ReplayTarget::Recover {
            endpoint,
            since_ms,
            until_ms,
        } => {
            endpoint_owned(c, tenant, endpoint).await?;
            c.query_one(
                &format!(
                    "{MAKE_READY} WHERE endpoint_id = $3 AND tenant_id = $4 \
                     AND created_at_ms >= $5 AND created_at_ms < $6 \
                     AND (state = 3 OR (state = 0 AND attempts > 0)) {MARK}"
                ),
                &[&now_ms, &reason, endpoint, &tenant, since_ms, until_ms],
            )
            .await
            .map(|r| r.get::<_, i64>(0) as u64)
            .map_err(pg)
        }
    }
}

pub(in crate::store::postgres) async fn queue_stats(
    c: &impl GenericClient,
    now_ms: i64,
) -> StoreResult<QueueStats> {
    let r = c
        .query_one(crate::store::QUEUE_COUNTS, &[])
        .await
        .map_err(pg)?;
    let mut stats = QueueStats {
        ready: r.get::<_, i64>(0) as u64,
        leased: r.get::<_, i64>(1) as u64,
        dead: r.get::<_, i64>(2) as u64,
        ..QueueStats::default()
    };
    for r in c
        .query(crate::store::OLDEST_READY_BY_TENANT, &[&now_ms])
        .await
        .map_err(pg)?
    {
        let oldest: Option<i64> = r.get(1);
        stats
            .oldest_ready_age_ms
            .push((r.get(0), crate::store::waited_ms(now_ms, oldest)));
    }
    Ok(stats)
}

pub(in crate::store::postgres) async fn delivered_count(
    c: &impl GenericClient,
) -> StoreResult<u64> {
    c.query_one("SELECT count(*) FROM deliveries WHERE state = 2", &[])
        .await
        .map(|r| r.get::<_, i64>(0) as u64)
        .map_err(pg)
}
