//! One conformance suite for the `Store` trait, run against both drivers.
//!
//! Each behaviour is written once as `check_*(store)`; the test kit's `drivers!` macro runs it
//! against a fresh embedded SQLite store (`sqlite::check_*`) and a fresh PostgreSQL database
//! (`postgres::check_*`, skipped loudly without `SLUICE_TEST_DATABASE_URL`, failed in CI). Times are passed in explicitly, so no check depends on the wall clock
//! beyond generous timeouts for wake-ups.

use sluice_testkit as support;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use sluice::clock::now_ms;
use sluice::ids::{hash_token, new_id, new_token};
use sluice::model::*;
use sluice::store::*;

mod admin;
mod claim;
mod fairness;
mod fifo;
mod heartbeats;
mod insert;
mod message_log;
mod reads;
mod reap;
mod redelivery;
mod retention;
mod row_ids;
mod settle;
mod trace_context;
mod upgrade;

// ---- fixtures ---------------------------------------------------------------------------------

async fn tenant(store: &SharedStore) -> Tenant {
    let t = Tenant {
        id: new_id("ten"),
        name: "Acme".into(),
        token_hash: hash_token(&new_token("sk")),
        created_at_ms: now_ms(),
        share: Default::default(),
    };
    store.create_tenant(&t).await.expect("create tenant");
    t
}

fn endpoint_for(tenant: &Tenant, event_types: &[&str]) -> Endpoint {
    let now = now_ms();
    Endpoint {
        description: "a test endpoint".into(),
        event_types: event_types.iter().map(|s| s.to_string()).collect(),
        ..Endpoint::new(
            new_id("ep"),
            tenant.id.clone(),
            "https://example.com/hook".into(),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            now,
        )
    }
}

async fn endpoint(store: &SharedStore, tenant: &Tenant, event_types: &[&str]) -> Endpoint {
    let e = endpoint_for(tenant, event_types);
    store.create_endpoint(&e).await.expect("create endpoint");
    e
}

fn message(tenant: &Tenant, event_type: &str) -> NewMessage {
    NewMessage {
        id: new_id("msg"),
        tenant_id: tenant.id.clone(),
        event_type: event_type.into(),
        payload: format!(r#"{{"type":"{event_type}","n":1}}"#),
        idempotency_key: None,
        only_endpoint: None,
        traceparent: None,
        tracestate: None,
    }
}

async fn enqueue_n(store: &SharedStore, tenant: &Tenant, event_type: &str, n: usize, now: i64) {
    let batch: Vec<NewMessage> = (0..n).map(|_| message(tenant, event_type)).collect();
    for chunk in batch.chunks(1_000) {
        store.enqueue(chunk, now).await.expect("enqueue");
    }
}

fn req(now: i64, limit: u32, per_endpoint: u32) -> ClaimRequest {
    ClaimRequest {
        now_ms: now,
        limit,
        per_endpoint,
        lease_ms: 60_000,
        exclude: Vec::new(),
        room: vec![],
        ..Default::default()
    }
}

fn attempt(status: Option<u16>, error_kind: Option<&str>) -> AttemptRecord {
    AttemptRecord {
        started_at_ms: 1_700_000_000_000,
        duration_ms: 37,
        status,
        error_kind: error_kind.map(str::to_owned),
        response: status.map(|s| format!("body of {s}")),
    }
}

fn settlement(c: &Claimed, outcome: SettleOutcome, attempt: Option<AttemptRecord>) -> Settlement {
    Settlement {
        delivery_id: c.delivery_id,
        lease_token: c.lease_token,
        outcome,
        attempt,
    }
}

/// The first `limit` messages of a tenant's log below `before`, unfiltered.
fn log_of(tenant: &Tenant, before: Option<&str>, limit: u32) -> MessageFilter {
    MessageFilter {
        tenant_id: tenant.id.clone(),
        before: before.map(str::to_owned),
        limit,
        ..Default::default()
    }
}

async fn deliveries(store: &SharedStore, filter: DeliveryFilter) -> Vec<DeliveryView> {
    store
        .list_deliveries(&filter)
        .await
        .expect("list deliveries")
}

fn all_of(tenant: &Tenant) -> DeliveryFilter {
    DeliveryFilter {
        tenant_id: tenant.id.clone(),
        limit: 10_000,
        ..Default::default()
    }
}

async fn delivery(store: &SharedStore, tenant: &Tenant, id: i64) -> DeliveryView {
    let found = deliveries(
        store,
        DeliveryFilter {
            after: Some(id - 1),
            limit: 1,
            ..all_of(tenant)
        },
    )
    .await;
    assert_eq!(found.len(), 1, "delivery {id} not found");
    assert_eq!(found[0].id, id);
    found.into_iter().next().unwrap()
}

fn ids(claimed: &[Claimed]) -> BTreeSet<i64> {
    claimed.iter().map(|c| c.delivery_id).collect()
}

fn endpoints_of(claimed: &[Claimed]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for c in claimed {
        *counts.entry(c.endpoint_id.clone()).or_default() += 1;
    }
    counts
}

#[track_caller]
fn assert_not_found<T: Debug>(result: StoreResult<T>) {
    match result {
        Err(StoreError::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[track_caller]
fn assert_conflict<T: Debug>(result: StoreResult<T>) {
    match result {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
}
