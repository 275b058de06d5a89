//! Settling what receivers send, on both drivers (issue 10, finding 1).
//!
//! - Any bytes a receiver answers, and any failure text, go through the path the dispatcher
//!   takes (`delivery::decide`, `delivery::attempt_record`) and then `Store::settle`: the write
//!   succeeds and the attempt reads back as the storable text.
//! - A batch mixing a settlement the store refuses with good ones: the good ones apply exactly
//!   once and the bad one is settled with a storable record.
//!
//! `sqlite::…` always; `postgres::…` when `SLUICE_TEST_DATABASE_URL` is set (required in CI).

use sluice_testkit as support;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sluice::clock::now_ms;
use sluice::delivery::{
    self, ErrorKind, Failure, MAX_ERROR_BYTES, Phases, Report, Response, storable,
};
use sluice::dispatcher::settle_batch;
use sluice::ids::{hash_token, new_id, new_token};
use sluice::model::*;
use sluice::retry::RetrySchedule;
use sluice::store::*;

// ---- fixtures ---------------------------------------------------------------------------------

async fn tenant_with_endpoint(store: &SharedStore) -> Tenant {
    let now = now_ms();
    let t = Tenant {
        id: new_id("ten"),
        name: "hostile".into(),
        token_hash: hash_token(&new_token("sk")),
        created_at_ms: now,
        share: Default::default(),
    };
    store.create_tenant(&t).await.expect("create tenant");
    let e = Endpoint::new(
        new_id("ep"),
        t.id.clone(),
        "https://example.com/hook".into(),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        now,
    );
    store.create_endpoint(&e).await.expect("create endpoint");
    t
}

/// Enqueue `n` messages at `at_ms` and lease them all.
async fn leased(store: &SharedStore, t: &Tenant, n: usize, at_ms: i64) -> Vec<Claimed> {
    let messages: Vec<NewMessage> = (0..n)
        .map(|i| NewMessage {
            id: new_id("msg"),
            tenant_id: t.id.clone(),
            event_type: "e".into(),
            payload: format!(r#"{{"n":{i}}}"#),
            idempotency_key: None,
            only_endpoint: None,
            traceparent: None,
            tracestate: None,
        })
        .collect();
    store.enqueue(&messages, at_ms).await.expect("enqueue");
    let claimed = store
        .claim(&ClaimRequest {
            now_ms: at_ms,
            limit: n as u32,
            per_endpoint: n as u32,
            lease_ms: 60_000,
            exclude: Vec::new(),
            room: Vec::new(),
            ..Default::default()
        })
        .await
        .expect("claim")
        .claimed;
    assert_eq!(claimed.len(), n, "claimed at {at_ms}");
    claimed
}

async fn delivery(store: &SharedStore, t: &Tenant, id: i64) -> DeliveryView {
    let found = store
        .list_deliveries(&DeliveryFilter {
            tenant_id: t.id.clone(),
            after: Some(id - 1),
            limit: 1,
            ..Default::default()
        })
        .await
        .expect("list deliveries");
    assert_eq!(found.first().map(|d| d.id), Some(id));
    found.into_iter().next().unwrap()
}

// ---- any bytes, through decide and the record, into the store ---------------------------------

/// Bytes biased toward what breaks text columns: NUL, stray continuation bytes, truncated
/// sequences, plus multi-byte characters and plain ASCII.
fn hostile_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(vec![0u8]),
        Just(vec![0xff]),
        Just(vec![0xc3]),
        Just(vec![0x80]),
        Just("é".as_bytes().to_vec()),
        Just("☕".as_bytes().to_vec()),
        Just(b"\\x00".to_vec()),
        any::<u8>().prop_map(|b| vec![b]),
        "[ -~]{1,8}".prop_map(String::into_bytes),
    ];
    prop::collection::vec(piece, 0..120).prop_map(|pieces| pieces.concat())
}

fn hostile_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop_oneof![Just('\0'), any::<char>()], 0..80).prop_map(String::from_iter)
}

const KINDS: [ErrorKind; ErrorKind::ALL.len()] = ErrorKind::ALL;

fn results() -> impl Strategy<Value = Result<Response, Failure>> {
    prop_oneof![
        (
            prop_oneof![Just(200u16), Just(410), Just(429), Just(500), 100u16..600],
            hostile_bytes()
        )
            .prop_map(|(status, body)| Ok(Response {
                status,
                retry_after: None,
                body,
            })),
        (0..KINDS.len(), hostile_text()).prop_map(|(k, message)| Err(Failure {
            kind: KINDS[k],
            message,
        })),
    ]
}

/// Small, so bodies are often cut (the dispatcher's default is 64 KiB).
const CAP: usize = 256;

fn any_response_settles_and_reads_back(rt: &tokio::runtime::Runtime, store: SharedStore) {
    let t = rt.block_on(tenant_with_endpoint(&store));
    // Each case leases its own delivery at an earlier time than the case before, so a retry
    // settled by one case (due at or after its own time) is never due for the next case's claim.
    let clock = std::cell::Cell::new(now_ms());
    let mut runner = TestRunner::new(Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&results(), |result| {
            clock.set(clock.get() - 1_000);
            let clock = clock.get();
            let report = Report {
                started_at_ms: clock,
                duration: Duration::from_millis(12),
                result,
                phases: Phases::default(),
            };
            let attempts_made = 1;
            let decision = delivery::decide(
                &report.result,
                attempts_made,
                &RetrySchedule::default(),
                Duration::from_secs(3600),
                clock,
                0.5,
            );
            let record = delivery::attempt_record(&report, CAP);
            // What must read back, computed here from the raw input.
            let (expected_response, expected_reason) = match &report.result {
                Ok(r) => ((!r.body.is_empty()).then(|| storable(&r.body, CAP)), None),
                Err(f) => {
                    let text = storable(f.message.as_bytes(), MAX_ERROR_BYTES);
                    let reason = matches!(f.kind, ErrorKind::Refused | ErrorKind::Invalid)
                        .then(|| text.clone());
                    (Some(text), reason)
                }
            };
            rt.block_on(async {
                let c = leased(&store, &t, 1, clock).await.remove(0);
                let settlement = Settlement {
                    delivery_id: c.delivery_id,
                    lease_token: c.lease_token,
                    outcome: decision.outcome.clone(),
                    attempt: Some(record),
                };
                let applied = store.settle(&[settlement], clock).await;
                prop_assert!(
                    matches!(&applied, Ok(ids) if ids == &[c.delivery_id]),
                    "{:?}",
                    applied
                );
                let log = store
                    .attempts(&t.id, c.delivery_id)
                    .await
                    .expect("attempts");
                prop_assert_eq!(log.len(), 1);
                prop_assert_eq!(&log[0].response, &expected_response);
                if let Some(reason) = expected_reason {
                    let d = delivery(&store, &t, c.delivery_id).await;
                    prop_assert_eq!(d.state, DeliveryState::Dead);
                    prop_assert_eq!(d.last_error, Some(reason));
                }
                Ok(())
            })
        })
        .unwrap_or_else(|e| panic!("{}: {e}", store.driver()));
}

// ---- a refused settlement in a batch ----------------------------------------------------------

fn attempt_with(response: &str) -> AttemptRecord {
    AttemptRecord {
        started_at_ms: 1_700_000_000_000,
        duration_ms: 9,
        status: Some(200),
        error_kind: None,
        response: Some(response.into()),
    }
}

/// A settlement carrying raw text the boundary would have made storable (as if a path had
/// skipped it): PostgreSQL refuses it, SQLite stores it. Either way the batch goes through.
async fn a_refused_settlement_never_holds_up_the_batch(store: SharedStore) {
    let t = tenant_with_endpoint(&store).await;
    let now = now_ms();
    let claimed = leased(&store, &t, 9, now).await;
    const BAD: usize = 5;
    let batch: Vec<Settlement> = claimed
        .iter()
        .enumerate()
        .map(|(i, c)| Settlement {
            delivery_id: c.delivery_id,
            lease_token: c.lease_token,
            outcome: SettleOutcome::Delivered,
            attempt: Some(attempt_with(if i == BAD {
                "{\"bad\":\"nul\0here\"}"
            } else {
                "ok"
            })),
        })
        .collect();
    let bad_id = batch[BAD].delivery_id;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);

    let written = settle_batch(&*store, &batch, deadline).await;
    let mut applied = written.applied.clone();
    applied.sort_unstable();
    let mut all: Vec<i64> = batch.iter().map(|s| s.delivery_id).collect();
    all.sort_unstable();
    assert_eq!(applied, all, "every settlement applied, each once");
    assert!(written.dropped.is_empty(), "{written:?}");
    if store.driver() == "postgres" {
        assert_eq!(written.replaced, vec![bad_id], "PostgreSQL refuses a NUL");
    }

    // Written again (a retry after an ambiguous failure): the lease tokens fence it off.
    let again = settle_batch(&*store, &batch, deadline).await;
    assert!(again.applied.is_empty(), "{again:?}");

    for s in &batch {
        let d = delivery(&store, &t, s.delivery_id).await;
        assert_eq!(
            (d.state, d.attempts),
            (DeliveryState::Delivered, 1),
            "{d:?}"
        );
        let log = store.attempts(&t.id, s.delivery_id).await.unwrap();
        assert_eq!(log.len(), 1, "one attempt row for {}", s.delivery_id);
        let response = log[0].response.as_deref().unwrap_or_default();
        if s.delivery_id == bad_id {
            let stored_as_is = response == "{\"bad\":\"nul\0here\"}";
            let noted = response.starts_with("[response not stored: the store refused it");
            assert!(
                (store.driver() == "sqlite" && stored_as_is) || noted,
                "{}: {response:?}",
                store.driver()
            );
            assert!(!noted || !response.contains('\0'));
        } else {
            assert_eq!(response, "ok");
        }
    }
}

// Blocking: the proptest runner calls `block_on` once per case, which cannot happen inside an
// async test.
support::drivers!(
    a_refused_settlement_never_holds_up_the_batch;
    blocking: any_response_settles_and_reads_back
);
