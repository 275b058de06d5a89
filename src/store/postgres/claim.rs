//! The PostgreSQL driver's claim: fair across tenants first ([`crate::fairness`], the same order
//! as the embedded driver's), then round robin over each tenant's due endpoints, in one
//! statement committed on its own; the due tables are corrected after it, in a transaction of
//! their own that never waits for another transaction (a writer, another dispatcher's claim or
//! correction): the claim's deliveries are handed out only once the correction ends.

use std::collections::BTreeSet;

use tokio_postgres::types::ToSql;

use super::pg;
use crate::store::*;

/// The claim. Tenants: the lowest passes and the longest-waiting newly due (`ten0`, each read
/// through its index, stepping over tenants whose due endpoints are all excluded and those
/// without room, `$14`), merged by
/// effective pass (new ones start at the floor `$9` and win ties), the first `$3` kept (`sel`);
/// each has its room (`$10`/`$11`: under its ceiling, or none while the pool keeps its reserve)
/// and one without room is left out. Quotas: the level θ, `⌈(θ − pass) × weight ÷ cost⌉` and the even part
/// `⌈limit ÷ tenants⌉` of [`crate::fairness::quotas`]. Rows: each tenant's due endpoints oldest first, locked against
/// other claimers (SKIP LOCKED), each giving up to its room (`$7`/`$8`, at most `$4`) of due
/// deliveries through the ready index, until the tenant's quota is read (an endpoint with none
/// due counts one). A FIFO endpoint gives only its head, its lowest pending delivery (through
/// `deliveries_pending`), and only when that head is ready and due: while it is leased, by any
/// dispatcher, or locked by another transaction, nothing behind it is taken (its row lock also
/// keeps two claims off one endpoint). A FIFO endpoint whose head it leased loses its row here
/// (the settlement, expiry or requeue that ends the head brings it back, and so does new work);
/// one that gave nothing is returned to be moved: to the head's turn, or dropped while the head
/// is in flight elsewhere. Then the `$3` lowest start tags (`pass + k × cost ÷ weight`, ties by tenant
/// and `k`) are leased, as [`crate::fairness::choose`] picks them. An endpoint taken to its last
/// due delivery is returned to be moved; one served with more behind it goes behind its
/// tenant's others when they wait.
///
/// Returns rows of four kinds (`kind`): 0 a leased delivery with its tenant's pass and policy;
/// 1 an endpoint with no due work left; 2 a tenant whose row said due but that has no due
/// endpoint (both corrected after the claim); 3 the floor, the lowest pass among the tenants
/// looked at.
///
/// Every table is reached through its key (scalar subqueries, `LATERAL … LIMIT`, `= ANY`),
/// never a join the planner might turn into a scan while its statistics are young.
const CLAIM: &str = "WITH fl AS ( \
        SELECT COALESCE($9::float8, (SELECT max(pass) FROM due_tenants), 0) AS f \
    ), ten0 AS ( \
        (SELECT t.tenant_id, t.pass, t.cost, o.ok FROM due_tenants t CROSS JOIN LATERAL ( \
            SELECT EXISTS (SELECT 1 FROM due_endpoints q WHERE q.tenant_id = t.tenant_id \
                AND q.due_ms <= $1::bigint AND NOT (q.endpoint_id = ANY($2))) AS ok) o \
         WHERE t.pass IS NOT NULL AND t.due_ms <= $1::bigint AND NOT (t.tenant_id = ANY($14)) \
            AND (o.ok OR NOT EXISTS ( \
            SELECT 1 FROM due_endpoints q WHERE q.tenant_id = t.tenant_id \
                AND q.due_ms <= $1::bigint)) \
         ORDER BY t.pass, t.tenant_id LIMIT $3::bigint + 16) \
        UNION ALL \
        (SELECT t.tenant_id, t.pass, t.cost, o.ok FROM due_tenants t CROSS JOIN LATERAL ( \
            SELECT EXISTS (SELECT 1 FROM due_endpoints q WHERE q.tenant_id = t.tenant_id \
                AND q.due_ms <= $1::bigint AND NOT (q.endpoint_id = ANY($2))) AS ok) o \
         WHERE t.pass IS NULL AND t.due_ms <= $1::bigint AND NOT (t.tenant_id = ANY($14)) \
            AND (o.ok OR NOT EXISTS ( \
            SELECT 1 FROM due_endpoints q WHERE q.tenant_id = t.tenant_id \
                AND q.due_ms <= $1::bigint)) \
         ORDER BY t.due_ms, t.tenant_id LIMIT $3::bigint + 16) \
    ), ten AS ( \
        SELECT x.tenant_id, GREATEST(COALESCE(x.pass, fl.f), fl.f) AS pass, x.pass IS NULL AS fresh, \
            GREATEST(1, COALESCE(w.weight, $12::int)) AS weight, w.weight AS own_weight, \
            w.max_share, GREATEST(COALESCE(x.cost, $13::float8), 1e-6) AS cost, \
            COALESCE((SELECT r.n FROM unnest($10::text[], $11::bigint[]) AS r(id, n) \
                WHERE r.id = x.tenant_id LIMIT 1), $3::bigint) AS troom \
        FROM ten0 x CROSS JOIN fl CROSS JOIN LATERAL (SELECT t.weight, t.max_share FROM tenants t \
            WHERE t.id = x.tenant_id LIMIT 1) w WHERE x.ok \
    ), sel0 AS ( \
        SELECT ten.tenant_id, ten.pass, ten.weight, ten.own_weight, ten.max_share, \
            ten.weight / ten.cost AS rate, ten.troom, \
            row_number() OVER (ORDER BY ten.pass, ten.fresh DESC, ten.tenant_id) AS rank \
        FROM ten WHERE ten.troom > 0 \
    ), sel1 AS ( \
        SELECT * FROM sel0 WHERE rank <= $3::bigint \
    ), lvl AS ( \
        SELECT min(($3::bigint + p.spr) / p.sr) AS theta, \
            ceil($3::float8 / GREATEST(count(*), 1)) AS even FROM ( \
            SELECT sum(pass * rate) OVER w AS spr, sum(rate) OVER w AS sr FROM sel1 \
            WINDOW w AS (ORDER BY pass, rank)) p \
    ), sel AS ( \
        SELECT sel1.*, LEAST(sel1.troom, $3::bigint, \
            GREATEST(0, ceil((lvl.theta - sel1.pass) * sel1.rate)) + lvl.even)::bigint AS quota \
        FROM sel1 CROSS JOIN lvl \
    ), rows0 AS ( \
        SELECT sel.tenant_id, r.endpoint_id, r.due_ms, r.room, r.fifo, r.id, r.visible_at_ms \
        FROM sel CROSS JOIN LATERAL ( \
            SELECT q.endpoint_id, q.due_ms, q.room, q.fifo, COALESCE(d.id, h.id) AS id, \
                COALESCE(d.visible_at_ms, h.visible_at_ms) AS visible_at_ms FROM ( \
                SELECT q.endpoint_id, q.due_ms, CASE WHEN e.fifo THEN 1 ELSE \
                    GREATEST(1, LEAST($4::bigint, COALESCE((SELECT r.n \
                    FROM unnest($7::text[], $8::bigint[]) AS r(id, n) WHERE r.id = q.endpoint_id \
                    LIMIT 1), $4::bigint))) END AS room, e.fifo \
                FROM due_endpoints q CROSS JOIN LATERAL (SELECT e.enabled, e.ordering = 1 AS fifo \
                    FROM endpoints e WHERE e.id = q.endpoint_id) e \
                WHERE q.tenant_id = sel.tenant_id AND q.due_ms <= $1::bigint \
                  AND NOT (q.endpoint_id = ANY($2)) AND e.enabled \
                ORDER BY q.due_ms, q.endpoint_id LIMIT $3::bigint \
                FOR NO KEY UPDATE OF q SKIP LOCKED) q \
            LEFT JOIN LATERAL ( \
                SELECT d.id, d.visible_at_ms FROM deliveries d \
                WHERE NOT q.fifo AND d.endpoint_id = q.endpoint_id AND d.state = 0 \
                  AND d.visible_at_ms <= $1::bigint \
                ORDER BY d.visible_at_ms LIMIT q.room \
                FOR UPDATE SKIP LOCKED) d ON true \
            LEFT JOIN LATERAL ( \
                SELECT d.id, d.visible_at_ms FROM deliveries d \
                WHERE q.fifo AND d.id = (SELECT p.id FROM deliveries p \
                    WHERE p.endpoint_id = q.endpoint_id AND p.state IN (0, 1) ORDER BY p.id LIMIT 1) \
                  AND d.state = 0 AND d.visible_at_ms <= $1::bigint \
                FOR UPDATE SKIP LOCKED) h ON true \
            LIMIT sel.quota) r \
        WHERE sel.quota > 0 \
    ), numbered AS ( \
        SELECT r.*, row_number() OVER (PARTITION BY r.tenant_id \
            ORDER BY r.due_ms, r.endpoint_id, r.visible_at_ms, r.id) - 1 AS k \
        FROM rows0 r WHERE r.id IS NOT NULL \
    ), chosen AS ( \
        SELECT n.id FROM numbered n \
        CROSS JOIN LATERAL (SELECT s.pass, s.rate FROM sel s WHERE s.tenant_id = n.tenant_id) s \
        ORDER BY s.pass + n.k / s.rate, n.tenant_id, n.k LIMIT $3::bigint \
    ), leased AS ( \
        UPDATE deliveries d SET state = 1, lease_until_ms = $5, lease_token = $6, \
            updated_at_ms = $1::bigint \
        WHERE d.id = ANY(ARRAY(SELECT id FROM chosen)) \
        RETURNING d.id, d.message_id, d.endpoint_id, d.tenant_id, d.attempts, d.visible_at_ms \
    ), eps AS ( \
        SELECT r.tenant_id, r.endpoint_id, r.due_ms, min(r.room) AS room, count(r.id) AS supply, \
            count(p.id) AS got, count(*) AS used, bool_or(r.fifo) AS fifo \
        FROM rows0 r LEFT JOIN chosen p ON p.id = r.id \
        GROUP BY r.tenant_id, r.endpoint_id, r.due_ms \
    ), judged AS ( \
        SELECT e.endpoint_id, e.tenant_id, e.supply, e.got, e.fifo, \
            LEAST(e.room, s.quota - ((sum(e.used) OVER (PARTITION BY e.tenant_id \
                ORDER BY e.due_ms, e.endpoint_id))::bigint - e.used)) AS asked, \
            (sum(e.used) OVER (PARTITION BY e.tenant_id) >= s.quota \
                OR count(*) OVER (PARTITION BY e.tenant_id) >= $3::bigint) AS keeps \
        FROM eps e CROSS JOIN LATERAL (SELECT s.quota FROM sel s WHERE s.tenant_id = e.tenant_id) s \
    ), rotated AS ( \
        UPDATE due_endpoints q SET due_ms = $1::bigint FROM judged j \
        WHERE q.endpoint_id = j.endpoint_id AND j.supply >= j.asked AND j.got > 0 AND j.keeps \
            AND NOT j.fifo \
    ), fifo_taken AS ( \
        DELETE FROM due_endpoints q USING judged j \
        WHERE q.endpoint_id = j.endpoint_id AND j.fifo AND j.got > 0 \
    ) \
    SELECT 0 AS kind, l.id, l.message_id, l.endpoint_id, l.tenant_id, l.attempts, \
           l.visible_at_ms, m.event_type, m.payload, m.created_at_ms, \
           s.pass, s.own_weight, s.max_share, m.traceparent, m.tracestate \
    FROM leased l CROSS JOIN LATERAL (SELECT event_type, payload, created_at_ms, traceparent, \
        tracestate FROM messages WHERE id = l.message_id LIMIT 1) m \
    CROSS JOIN LATERAL (SELECT * FROM sel s WHERE s.tenant_id = l.tenant_id LIMIT 1) s \
    UNION ALL \
    SELECT 1, NULL, NULL, endpoint_id, tenant_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
        NULL, NULL \
    FROM judged WHERE (supply < asked AND got = supply AND NOT fifo) OR (fifo AND got = 0) \
    UNION ALL \
    SELECT 2, NULL, NULL, NULL, tenant_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
        NULL, NULL \
    FROM ten0 WHERE NOT ok \
    UNION ALL \
    SELECT 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, min(pass), NULL, NULL, \
        NULL, NULL \
    FROM sel HAVING count(*) > 0";

/// Charge the dispatcher's previous claims to the tenants' passes, in a statement (and an
/// implicit transaction) of its own ahead of the claim.
const CHARGE: &str =
    "SELECT sluice_charge_tenants($1::text[], $2::float8[], $3::float8[], $4::int[], $5, $6)";

/// The correction after a claim (migration 16, `sluice_correct_due`): endpoints taken to their
/// last due delivery move to their next work or go, tenants whose rows promised more than they
/// had are corrected, where no writer is adding work for them; one statement, so the buckets it
/// takes exclusively are held for its run alone.
const CORRECT_DUE: &str = "SELECT sluice_correct_due($1::text[], $2::text[], $3::bigint)";

/// Apply the request's charges and claim a batch (pipelined: one round trip), then correct the
/// due tables where the claim found less than they promised (see [`move_due`]). Nothing is
/// held across the claim's commit: writers never wait for it. Also returns about how many
/// rows of the due tables (endpoints and tenants) it rewrote.
pub(super) async fn claim(
    client: &mut deadpool_postgres::Object,
    req: &ClaimRequest,
    token: i64,
) -> StoreResult<(ClaimBatch, u64)> {
    let ids: Vec<&str> = req.charges.iter().map(|c| c.tenant_id.as_str()).collect();
    let starts: Vec<f64> = req.charges.iter().map(|c| c.start).collect();
    let seconds: Vec<f64> = req.charges.iter().map(|c| c.seconds).collect();
    let counts: Vec<i32> = req
        .charges
        .iter()
        .map(|c| c.deliveries.min(i32::MAX as u32) as i32)
        .collect();
    let weight = req.default_weight.clamp(1, i32::MAX as u32) as i32;
    let charge_stmt = match req.charges.is_empty() {
        true => None,
        false => Some(client.prepare_cached(CHARGE).await.map_err(pg)?),
    };
    let charge = async {
        let Some(stmt) = &charge_stmt else {
            return;
        };
        let params: [&(dyn ToSql + Sync); 6] =
            [&ids, &starts, &seconds, &counts, &weight, &req.now_ms];
        // A charge that did not land only leaves a tenant's pass behind by one claim.
        if let Err(e) = client.execute(stmt, &params).await {
            tracing::debug!(error = %super::errors::cause(&e), "postgres: charges not applied");
        }
    };
    if req.limit == 0 {
        charge.await;
        return Ok((ClaimBatch::default(), 0));
    }
    let room_ids: Vec<&str> = req.room.iter().map(|(e, _)| e.as_str()).collect();
    let room_n: Vec<i64> = req.room.iter().map(|(_, n)| i64::from(*n)).collect();
    let tenant_ids: Vec<&str> = req.tenant_room.iter().map(|(t, _)| t.as_str()).collect();
    let tenant_n: Vec<i64> = req.tenant_room.iter().map(|(_, n)| i64::from(*n)).collect();
    let no_room: Vec<&str> = req
        .tenant_room
        .iter()
        .filter(|(_, n)| *n == 0)
        .map(|(t, _)| t.as_str())
        .collect();
    let stmt = client.prepare_cached(CLAIM).await.map_err(pg)?;
    let params: [&(dyn ToSql + Sync); 14] = [
        &req.now_ms,
        &req.exclude,
        &i64::from(req.limit),
        &i64::from(req.per_endpoint.max(1)),
        &(req.now_ms + req.lease_ms),
        &token,
        &room_ids,
        &room_n,
        &req.fair_floor,
        &tenant_ids,
        &tenant_n,
        &weight,
        &crate::fairness::DEFAULT_COST,
        &no_room,
    ];
    // Pipelined: both statements are prepared, and polling the charge first sends it first,
    // so the server runs it (in a transaction of its own) before the claim, which sees it.
    let ((), rows) = futures_util::future::join(charge, client.query(&stmt, &params)).await;
    let rows = rows.map_err(pg)?;
    let mut batch = ClaimBatch::default();
    let mut to_move: Vec<String> = Vec::new();
    let mut tenants: BTreeSet<String> = BTreeSet::new();
    for r in &rows {
        match r.get::<_, i32>(0) {
            0 => batch.claimed.push(Claimed {
                delivery_id: r.get(1),
                message_id: r.get(2),
                endpoint_id: r.get(3),
                tenant_id: r.get(4),
                attempts: r.get::<_, i64>(5) as u32,
                visible_at_ms: r.get(6),
                event_type: r.get(7),
                payload: r.get(8),
                message_created_at_ms: r.get(9),
                traceparent: r.get(13),
                tracestate: r.get(14),
                lease_token: token,
                tenant_pass: r.get(10),
                tenant_share: SharePolicy {
                    weight: r.get::<_, Option<i32>>(11).map(|w| w.max(0) as u32),
                    max_share: r.get(12),
                },
            }),
            1 => {
                to_move.push(r.get(3));
                tenants.insert(r.get(4));
            }
            2 => {
                tenants.insert(r.get(4));
            }
            _ => batch.floor = r.get(10),
        }
    }
    let moved = to_move.len() as u64;
    // Tenant rows rewritten: one per tenant charged, one per tenant corrected.
    let tenant_rows = (req.charges.len() + tenants.len()) as u64;
    if !to_move.is_empty() || !tenants.is_empty() {
        // The claim has committed: a failure here only leaves rows due (a later claim that
        // finds nothing moves them), never a lease unreturned.
        let tenants: Vec<String> = tenants.into_iter().collect();
        if let Err(e) = move_due(client, &to_move, &tenants, req.now_ms).await {
            tracing::debug!(error = %e, "postgres: due rows not moved");
        }
    }
    // Rotated rows (one per endpoint that gave a full share), moved ones and tenant rows.
    let rotated = batch.claimed.len() as u64 / u64::from(req.per_endpoint.max(1));
    Ok((batch, rotated + moved + tenant_rows))
}

/// Claims this process sent without learning what became of them: the deadline passed, or the
/// connection broke, between sending the claim and handing its batch out. The server may have
/// committed it, and its deliveries would then stay leased to nobody until the lease expired (a
/// minute by default: a database freeze of 10 s in the soak left a batch of healthy deliveries
/// 60 s late, the reaper's return). Every claim's rows carry its own token and lease end, so
/// the next claims of this process give such rows back first, exactly those: ready again as
/// they were, no attempt and no expiry counted (nothing was sent). A claim held in a frozen
/// connection may commit only after the first try, so each is tried again, at most every
/// [`GIVE_BACK_EVERY`], until rows were found or its lease has ended (the reaper's then).
#[derive(Default)]
pub(super) struct InDoubt {
    state: std::sync::Mutex<Doubts>,
}

#[derive(Default)]
struct Doubts {
    /// (token, lease end) of each claim in doubt.
    claims: Vec<(i64, i64)>,
    /// The last give-back tried.
    tried: Option<std::time::Instant>,
}

/// How often claims in doubt are tried again.
const GIVE_BACK_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// A claim being sent: unless [`Sent::known`] is called, dropping it puts the claim in doubt.
pub(super) struct Sent<'a> {
    doubts: &'a InDoubt,
    claim: Option<(i64, i64)>,
}

impl Sent<'_> {
    /// Its batch is in hand (or it surely never committed).
    pub(super) fn known(mut self) {
        self.claim = None;
    }
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            self.doubts.lock().claims.push(claim);
        }
    }
}

impl InDoubt {
    fn lock(&self) -> std::sync::MutexGuard<'_, Doubts> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A claim with this token and lease end is about to be sent.
    pub(super) fn sending(&self, token: i64, until_ms: i64) -> Sent<'_> {
        Sent {
            doubts: self,
            claim: Some((token, until_ms)),
        }
    }

    /// The claims to try to give back now (their leases not yet ended), if it is time.
    fn to_try(&self, now_ms: i64) -> Vec<(i64, i64)> {
        let mut d = self.lock();
        d.claims.retain(|(_, until)| *until >= now_ms);
        if d.claims.is_empty() || d.tried.is_some_and(|at| at.elapsed() < GIVE_BACK_EVERY) {
            return Vec::new();
        }
        d.tried = Some(std::time::Instant::now());
        d.claims.clone()
    }

    /// Forget the claims whose rows were given back.
    fn given_back(&self, tokens: &[i64]) {
        self.lock().claims.retain(|(t, _)| !tokens.contains(t));
    }
}

/// Make the rows of claims in doubt ready again (see [`InDoubt`]), with their endpoints and
/// tenants due; found through the leased index by lease end, then by token.
const GIVE_BACK: &str = "WITH f AS ( \
        SELECT id, lease_token FROM deliveries \
        WHERE state = 1 AND lease_until_ms = ANY($2) AND lease_token = ANY($1) FOR UPDATE \
    ), r AS ( \
        UPDATE deliveries d SET state = 0, lease_until_ms = NULL, lease_token = NULL, \
            updated_at_ms = $3 \
        FROM f WHERE d.id = f.id \
        RETURNING d.endpoint_id, d.tenant_id, d.visible_at_ms, f.lease_token) \
    SELECT array_agg(DISTINCT lease_token), count(*), sluice_mark_work_due(array_agg(endpoint_id), \
        array_agg(tenant_id), array_agg(visible_at_ms)) FROM r";

/// Give back what claims in doubt leased, when there are any and it is time (see [`InDoubt`]).
/// A failure leaves them in doubt for the next claim.
pub(super) async fn give_back(client: &deadpool_postgres::Object, doubts: &InDoubt, now_ms: i64) {
    let claims = doubts.to_try(now_ms);
    if claims.is_empty() {
        return;
    }
    let (tokens, ends): (Vec<i64>, Vec<i64>) = claims.into_iter().unzip();
    match client
        .query_one(GIVE_BACK, &[&tokens, &ends, &now_ms])
        .await
    {
        Ok(row) => {
            let found: Vec<i64> = row.get::<_, Option<Vec<i64>>>(0).unwrap_or_default();
            let n: i64 = row.get(1);
            if n > 0 {
                tracing::info!(
                    deliveries = n,
                    claims = found.len(),
                    "postgres: gave back the deliveries of claims whose outcome was lost"
                );
            }
            doubts.given_back(&found);
        }
        Err(e) => {
            tracing::debug!(error = %super::errors::cause(&e), "postgres: claims in doubt not given back");
        }
    }
}

/// Move the rows of `endpoints` to their next work, or drop them, and correct the rows of
/// `tenants`, where no writer is adding work for them (see [`CORRECT_DUE`]); the others stay
/// due.
///
/// It never waits: buckets are tried, rows another transaction holds are skipped (they stay
/// due), so the batch the claim took is handed out at once, whoever else is correcting. Its
/// transaction does not wait for its WAL flush: the due tables are hints that may say "due" too
/// early, never too late, and losing it in a crash leaves the rows as they were, due.
async fn move_due(
    client: &deadpool_postgres::Object,
    endpoints: &[String],
    tenants: &[String],
    now_ms: i64,
) -> StoreResult<()> {
    let stmt = client.prepare_cached(CORRECT_DUE).await.map_err(pg)?;
    client
        .execute(&stmt, &[&endpoints, &tenants, &now_ms])
        .await
        .map_err(pg)?;
    Ok(())
}
