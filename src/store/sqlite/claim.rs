//! The embedded driver's claim: fair across tenants first ([`crate::fairness`]), then round robin
//! over each tenant's due endpoints, each taking no more than its room; a FIFO endpoint gives
//! only its head, and only while nothing of it is in flight.
//!
//! It runs on the writer thread inside the caller's savepoint, so nothing else writes between
//! its reads and its writes: the due tables can be corrected (rows moved later or dropped) in
//! the same step.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::db;
use crate::fairness::{self, Turn};
use crate::store::*;

/// Tenants that have been served, lowest pass first, with their written policy.
const ACTIVE_TENANTS: &str = "SELECT d.tenant_id, d.pass, d.cost, t.weight, t.max_share \
     FROM due_tenants d JOIN tenants t ON t.id = d.tenant_id \
     WHERE d.pass IS NOT NULL AND d.due_ms <= ?1 ORDER BY d.pass, d.tenant_id";
/// Tenants newly due (no pass yet), longest due first, with their written policy.
const FRESH_TENANTS: &str = "SELECT d.tenant_id, d.pass, d.cost, t.weight, t.max_share \
     FROM due_tenants d JOIN tenants t ON t.id = d.tenant_id \
     WHERE d.pass IS NULL AND d.due_ms <= ?1 ORDER BY d.due_ms, d.tenant_id";
/// The highest pass: where a dispatcher's first claim puts its floor.
const TOP_PASS: &str = "SELECT max(pass) FROM due_tenants";
/// A tenant's due, enabled endpoints, longest due first (ties by id).
const TENANT_ENDPOINTS: &str = "SELECT q.endpoint_id, e.ordering FROM due_endpoints q \
     JOIN endpoints e ON e.id = q.endpoint_id AND e.enabled = 1 \
     WHERE q.tenant_id = ?1 AND q.due_ms <= ?2 ORDER BY q.due_ms, q.endpoint_id LIMIT ?3";
/// Does a tenant have any endpoint due now, enabled or not?
const TENANT_HAS_DUE: &str =
    "SELECT EXISTS (SELECT 1 FROM due_endpoints WHERE tenant_id = ?1 AND due_ms <= ?2)";
/// Apply a charge (see [`fairness::charged`]) to a tenant still due.
const CHARGE: &str = "UPDATE due_tenants SET pass = max(coalesce(pass, ?2), ?2) + ?3 / \
     max(1, coalesce((SELECT weight FROM tenants WHERE id = ?1), ?4)), \
     cost = CASE WHEN ?6 > 0 THEN ?3 / ?6 ELSE cost END \
     WHERE tenant_id = ?1 AND due_ms <= ?5";

/// When a FIFO endpoint next has work: its head's turn, or never while the head is in flight.
const NEXT_DUE_FIFO: &str = "SELECT CASE WHEN state = 0 THEN visible_at_ms END FROM deliveries \
     WHERE endpoint_id = ?1 AND state IN (0, 1) ORDER BY id LIMIT 1";
/// When an endpoint next has work, once this claim's picks are leased.
const NEXT_DUE: &str =
    "SELECT min(visible_at_ms) FROM deliveries WHERE endpoint_id = ?1 AND state = 0";
const CLAIM_DUE: &str = "SELECT id, message_id, attempts, visible_at_ms FROM deliveries \
     WHERE state = 0 AND endpoint_id = ?1 AND visible_at_ms <= ?2 ORDER BY visible_at_ms LIMIT ?3";
/// A FIFO endpoint's head: its lowest pending delivery, ready or leased (see migration 10).
const FIFO_HEAD: &str = "SELECT id, message_id, attempts, visible_at_ms, state FROM deliveries \
     WHERE endpoint_id = ?1 AND state IN (0, 1) ORDER BY id LIMIT 1";
const CLAIM_MARK: &str = "UPDATE deliveries SET state = 1, lease_until_ms = ?1, lease_token = ?2, \
     updated_at_ms = ?3 WHERE id = ?4";
const MESSAGE_BODY: &str = "SELECT event_type, payload, created_at_ms, traceparent, tracestate \
     FROM messages WHERE id = ?1";
/// The due time of a tenant with no due endpoint: never. Its row stays, with the cost of its
/// deliveries, until new work lowers it.
pub(super) const IDLE: i64 = i64::MAX;
/// When a tenant next has work: its earliest due endpoint row.
const TENANT_NEXT: &str = "SELECT min(due_ms) FROM due_endpoints WHERE tenant_id = ?1";

/// A claimed message's event type, payload, acceptance time and trace context.
type Body = (String, String, i64, Option<String>, Option<String>);

pub(super) fn claim(c: &Connection, req: &ClaimRequest) -> StoreResult<ClaimBatch> {
    apply_charges(c, req)?;
    let limit = req.limit as usize;
    if limit == 0 {
        return Ok(ClaimBatch::default());
    }
    let exclude: HashSet<&str> = req.exclude.iter().map(String::as_str).collect();
    let rooms: HashMap<&str, u32> = req.room.iter().map(|(e, n)| (e.as_str(), *n)).collect();
    let tenant_room: HashMap<&str, u32> = req
        .tenant_room
        .iter()
        .map(|(t, n)| (t.as_str(), *n))
        .collect();
    let floor = match req.fair_floor {
        Some(f) => f,
        None => c
            .prepare_cached(TOP_PASS)
            .and_then(|mut s| s.query_row([], |r| r.get::<_, Option<f64>>(0)))
            .map_err(db)?
            .unwrap_or(0.0),
    };

    // The tenants to serve: the lowest passes, and the longest-waiting newly due, merged by
    // their effective pass (new ones win ties: they start at the floor).
    let mut reevaluate: HashSet<String> = HashSet::new();
    let mut picks: Vec<Pick> = Vec::new();
    for fresh in [false, true] {
        let sql = if fresh { FRESH_TENANTS } else { ACTIVE_TENANTS };
        let mut s = c.prepare_cached(sql).map_err(db)?;
        let mut rows = s.query([req.now_ms]).map_err(db)?;
        let mut taken = 0;
        while taken < limit {
            let Some(r) = rows.next().map_err(db)? else {
                break;
            };
            let tenant: String = r.get(0).map_err(db)?;
            if tenant_room.get(tenant.as_str()) == Some(&0) {
                // No room: it takes no place among the tenants this claim serves.
                continue;
            }
            let (stored, cost): (Option<f64>, Option<f64>) =
                (r.get(1).map_err(db)?, r.get(2).map_err(db)?);
            let share = SharePolicy {
                weight: r.get(3).map_err(db)?,
                max_share: r.get(4).map_err(db)?,
            };
            match due_state(c, &tenant, req.now_ms, limit, &exclude)? {
                Due::Some(endpoints) => {
                    taken += 1;
                    picks.push(Pick {
                        tenant,
                        stored,
                        fresh,
                        cost,
                        share,
                        endpoints,
                    });
                }
                Due::Held => {}
                Due::Nothing => {
                    reevaluate.insert(tenant);
                }
            }
        }
    }
    let mut batch = ClaimBatch::default();
    // A tenant without room (at its ceiling, or holding slots while the pool keeps its
    // reserve) is left out.
    picks.retain(|p| tenant_room.get(p.tenant.as_str()) != Some(&0));
    if picks.is_empty() {
        correct_tenants(c, &reevaluate, req.now_ms)?;
        return Ok(batch);
    }
    picks.sort_by(|a, b| {
        let (pa, pb) = (
            fairness::effective_pass(a.stored, floor),
            fairness::effective_pass(b.stored, floor),
        );
        pa.total_cmp(&pb)
            .then(b.fresh.cmp(&a.fresh))
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
    picks.truncate(limit);
    let mut turns = Vec::with_capacity(picks.len());
    for p in &picks {
        let room = tenant_room
            .get(p.tenant.as_str())
            .copied()
            .unwrap_or(u32::MAX);
        turns.push(Turn {
            tenant: &p.tenant,
            pass: fairness::effective_pass(p.stored, floor),
            weight: p.share.weight.unwrap_or(req.default_weight).max(1),
            cost: p.cost.unwrap_or(fairness::DEFAULT_COST),
            room,
        });
    }
    batch.floor = turns.iter().map(|t| t.pass).reduce(f64::min);
    let quotas = fairness::quotas(&turns, req.limit);

    // Read each tenant's quota: its due endpoints in turn, each up to its room.
    let mut read: Vec<Read> = Vec::with_capacity(picks.len());
    for (p, &quota) in picks.iter().zip(&quotas) {
        read.push(read_tenant(c, req, &p.endpoints, quota, &rooms)?);
    }
    let supplies: Vec<u32> = read.iter().map(|r| r.rows.len() as u32).collect();
    let taken = fairness::choose(&turns, &supplies, req.limit);

    let token = crate::ids::lease_token();
    let lease_until = req.now_ms + req.lease_ms;
    let mut mark = c.prepare_cached(CLAIM_MARK).map_err(db)?;
    let mut body = c.prepare_cached(MESSAGE_BODY).map_err(db)?;
    let mut bodies: HashMap<String, Body> = HashMap::new();
    let mut rotate: Vec<&str> = Vec::new();
    let mut moved: Vec<(&str, bool)> = Vec::new();
    for ((p, (turn, r)), &n) in picks.iter().zip(turns.iter().zip(&read)).zip(&taken) {
        for row in &r.rows[..n as usize] {
            mark.execute(params![lease_until, token, req.now_ms, row.id])
                .map_err(db)?;
            if !bodies.contains_key(&row.message_id) {
                let found = body
                    .query_row([&row.message_id], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })
                    .map_err(db)?;
                bodies.insert(row.message_id.clone(), found);
            }
            let (event_type, payload, created, traceparent, tracestate) = &bodies[&row.message_id];
            batch.claimed.push(Claimed {
                delivery_id: row.id,
                lease_token: token,
                message_id: row.message_id.clone(),
                endpoint_id: r.endpoints[row.endpoint].name.clone(),
                tenant_id: p.tenant.clone(),
                attempts: row.attempts,
                event_type: event_type.clone(),
                payload: payload.clone(),
                message_created_at_ms: *created,
                traceparent: traceparent.clone(),
                tracestate: tracestate.clone(),
                visible_at_ms: row.visible_at_ms,
                tenant_pass: turn.pass,
                tenant_share: p.share,
            });
        }
        // Each endpoint read: taken to its last due delivery (its row moves to its next work),
        // served with more behind it (behind its tenant's others, when they wait), or neither.
        let mut before = 0;
        for e in &r.endpoints {
            let got = (n as usize).saturating_sub(before).min(e.supply as usize) as u32;
            before += e.supply as usize;
            if e.fifo {
                // A FIFO endpoint waits for its head whatever was taken: its row moves to
                // the head's next turn, or goes while the head is in flight (the settlement
                // that ends the head brings it back).
                moved.push((&e.name, true));
                reevaluate.insert(p.tenant.clone());
            } else if e.supply < e.asked {
                if got == e.supply {
                    moved.push((&e.name, false));
                    reevaluate.insert(p.tenant.clone());
                }
            } else if got > 0 && r.keeps_turns {
                rotate.push(&e.name);
            }
        }
    }
    reschedule(c, &rotate, &moved, req.now_ms)?;
    correct_tenants(c, &reevaluate, req.now_ms)?;
    Ok(batch)
}

/// A tenant the claim looked at.
struct Pick {
    tenant: String,
    stored: Option<f64>,
    fresh: bool,
    cost: Option<f64>,
    share: SharePolicy,
    /// Its due endpoints it may take from, oldest due first.
    endpoints: Vec<DueEndpoint>,
}

/// A due endpoint a claim may take from.
struct DueEndpoint {
    name: String,
    /// FIFO: only its head, and only while nothing of it is in flight.
    fifo: bool,
}

/// What a tenant's due endpoints look like to this claim.
enum Due {
    /// Endpoints it may take from (and whether more may be due behind them).
    Some(Vec<DueEndpoint>),
    /// Due endpoints, every one excluded (lane full, paused, breaker open) or disabled.
    Held,
    /// Nothing due at all: its row is early, to be corrected.
    Nothing,
}

/// One endpoint read for a tenant.
struct EndpointRead {
    name: String,
    fifo: bool,
    /// How many deliveries were asked of it: its room, or what was left of the quota.
    asked: u32,
    /// How many were due.
    supply: u32,
}

/// One due delivery read.
struct Row {
    id: i64,
    message_id: String,
    attempts: u32,
    visible_at_ms: i64,
    /// Index into [`Read::endpoints`].
    endpoint: usize,
}

/// What a claim read of one tenant: its due deliveries in order, endpoint by endpoint.
struct Read {
    endpoints: Vec<EndpointRead>,
    rows: Vec<Row>,
    /// The read stopped at the quota or at the endpoints' limit: more may be due behind.
    keeps_turns: bool,
}

/// Charge the dispatcher's previous claims to the tenants' passes.
fn apply_charges(c: &Connection, req: &ClaimRequest) -> StoreResult<()> {
    if req.charges.is_empty() {
        return Ok(());
    }
    let mut charge = c.prepare_cached(CHARGE).map_err(db)?;
    for ch in &req.charges {
        charge
            .execute(params![
                ch.tenant_id,
                ch.start,
                ch.seconds,
                req.default_weight.max(1),
                req.now_ms,
                ch.deliveries
            ])
            .map_err(db)?;
    }
    Ok(())
}

/// Read up to `quota` of a tenant's due deliveries: its due endpoints oldest first, each up to
/// its room. An endpoint with none due counts one against the quota, as the PostgreSQL driver's
/// read does.
fn read_tenant(
    c: &Connection,
    req: &ClaimRequest,
    endpoints: &[DueEndpoint],
    quota: u32,
    rooms: &HashMap<&str, u32>,
) -> StoreResult<Read> {
    let mut read = Read {
        endpoints: Vec::new(),
        rows: Vec::new(),
        keeps_turns: false,
    };
    if quota == 0 {
        return Ok(read);
    }
    let mut due = c.prepare_cached(CLAIM_DUE).map_err(db)?;
    let mut head = c.prepare_cached(FIFO_HEAD).map_err(db)?;
    let mut used = 0u32;
    for DueEndpoint {
        name: endpoint,
        fifo,
    } in endpoints
    {
        if used >= quota {
            break;
        }
        if *fifo {
            let index = read.endpoints.len();
            let found: Option<(Row, i64)> = head
                .query_row([endpoint], |r| {
                    Ok((
                        Row {
                            id: r.get(0)?,
                            message_id: r.get(1)?,
                            attempts: r.get(2)?,
                            visible_at_ms: r.get(3)?,
                            endpoint: index,
                        },
                        r.get(4)?,
                    ))
                })
                .optional()
                .map_err(db)?;
            let mut supply = 0;
            if let Some((row, state)) = found
                && state == DeliveryState::Ready.code()
                && row.visible_at_ms <= req.now_ms
            {
                supply = 1;
                read.rows.push(row);
            }
            used += 1;
            read.endpoints.push(EndpointRead {
                name: endpoint.clone(),
                fifo: true,
                asked: 1,
                supply,
            });
            continue;
        }
        let room = rooms
            .get(endpoint.as_str())
            .copied()
            .unwrap_or(req.per_endpoint)
            .min(req.per_endpoint)
            .max(1);
        let asked = room.min(quota - used);
        let index = read.endpoints.len();
        let mut found = due
            .query(params![endpoint, req.now_ms, i64::from(asked)])
            .map_err(db)?;
        let mut supply = 0;
        while let Some(r) = found.next().map_err(db)? {
            supply += 1;
            read.rows.push(Row {
                id: r.get(0).map_err(db)?,
                message_id: r.get(1).map_err(db)?,
                attempts: r.get(2).map_err(db)?,
                visible_at_ms: r.get(3).map_err(db)?,
                endpoint: index,
            });
        }
        used += supply.max(1);
        read.endpoints.push(EndpointRead {
            name: endpoint.clone(),
            fifo: false,
            asked,
            supply,
        });
    }
    read.keeps_turns = used >= quota || endpoints.len() >= req.limit as usize;
    Ok(read)
}

/// Whether a tenant has due endpoints this claim may take from: its first `wanted` of them
/// (oldest due first, excluded ones left out).
fn due_state(
    c: &Connection,
    tenant: &str,
    now_ms: i64,
    wanted: usize,
    exclude: &HashSet<&str>,
) -> StoreResult<Due> {
    let mut s = c.prepare_cached(TENANT_ENDPOINTS).map_err(db)?;
    // Read past the excluded ones, which sort anywhere among the due.
    let rows: Vec<DueEndpoint> = s
        .query_map(
            params![tenant, now_ms, (wanted + exclude.len()) as i64],
            |r| {
                Ok(DueEndpoint {
                    name: r.get(0)?,
                    fifo: DeliveryOrder::from_code(r.get(1)?).is_fifo(),
                })
            },
        )
        .map_err(db)?
        .collect::<Result<_, _>>()
        .map_err(db)?;
    let seen = !rows.is_empty();
    let endpoints: Vec<DueEndpoint> = rows
        .into_iter()
        .filter(|e| !exclude.contains(e.name.as_str()))
        .take(wanted)
        .collect();
    if !endpoints.is_empty() {
        return Ok(Due::Some(endpoints));
    }
    if seen {
        return Ok(Due::Held);
    }
    let any: bool = c
        .prepare_cached(TENANT_HAS_DUE)
        .and_then(|mut s| s.query_row(params![tenant, now_ms], |r| r.get(0)))
        .map_err(db)?;
    Ok(if any { Due::Held } else { Due::Nothing })
}

/// After a claim: endpoints that gave all the room asked of them may have more due work; where
/// their tenant has more due endpoints than this claim served, they move behind the others
/// (round robin). Endpoints that gave less have no due work left: their rows move to their next
/// work or go.
fn reschedule(
    c: &Connection,
    rotate: &[&str],
    moved: &[(&str, bool)],
    now_ms: i64,
) -> StoreResult<()> {
    let mut next = c.prepare_cached(NEXT_DUE).map_err(db)?;
    let mut next_fifo = c.prepare_cached(NEXT_DUE_FIFO).map_err(db)?;
    let mut set = c
        .prepare_cached("UPDATE due_endpoints SET due_ms = ?2 WHERE endpoint_id = ?1")
        .map_err(db)?;
    let mut drop = c
        .prepare_cached("DELETE FROM due_endpoints WHERE endpoint_id = ?1")
        .map_err(db)?;
    for endpoint in rotate {
        set.execute(params![endpoint, now_ms]).map_err(db)?;
    }
    for &(endpoint, fifo) in moved {
        let at: Option<i64> = if fifo {
            next_fifo
                .query_row([endpoint], |r| r.get(0))
                .optional()
                .map_err(db)?
                .flatten()
        } else {
            next.query_row([endpoint], |r| r.get(0)).map_err(db)?
        };
        match at {
            Some(at) => set.execute(params![endpoint, at.max(now_ms)]),
            None => drop.execute([endpoint]),
        }
        .map_err(db)?;
    }
    Ok(())
}

/// Tenants whose due endpoints changed, or that had none due: their rows move to their next
/// work, or to [`IDLE`] when they have none, and lose their pass (they start at the floor when
/// they return).
fn correct_tenants(c: &Connection, tenants: &HashSet<String>, now_ms: i64) -> StoreResult<()> {
    let mut next = c.prepare_cached(TENANT_NEXT).map_err(db)?;
    let mut later = c
        .prepare_cached("UPDATE due_tenants SET due_ms = ?2, pass = NULL WHERE tenant_id = ?1")
        .map_err(db)?;
    for tenant in tenants {
        let at: Option<i64> = next.query_row([tenant], |r| r.get(0)).map_err(db)?;
        match at {
            Some(at) if at <= now_ms => {}
            // Kept while idle, its cost with it: the next work lowers it again.
            at => {
                later
                    .execute(params![tenant, at.unwrap_or(IDLE)])
                    .map_err(db)?;
            }
        }
    }
    Ok(())
}
