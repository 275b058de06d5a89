//! Fair shares across tenants: equal shares whatever the backlog or the number of endpoints,
//! weights, ceilings, a tenant back from idle, many tenants at once, several claimers at once,
//! and work-conserving beside a trickle.
//!
//! Each claimer here does what a dispatcher does: it keeps the highest floor its claims return
//! and charges each claim (a fixed cost per delivery of each tenant) with its next claim.

use super::*;

/// A claimer as the dispatcher is one.
#[derive(Default)]
struct Claimer {
    floor: Option<f64>,
    owed: HashMap<String, TenantCharge>,
    /// Seconds a delivery of each tenant costs (0.1 unless said).
    cost: HashMap<String, f64>,
}

impl Claimer {
    fn costing(costs: &[(&Tenant, f64)]) -> Self {
        Self {
            cost: costs.iter().map(|(t, c)| (t.id.clone(), *c)).collect(),
            ..Self::default()
        }
    }

    async fn claim(&mut self, store: &SharedStore, request: ClaimRequest) -> Vec<Claimed> {
        let request = ClaimRequest {
            fair_floor: self.floor,
            charges: self.owed.drain().map(|(_, c)| c).collect(),
            default_weight: 1,
            ..request
        };
        let batch = store.claim(&request).await.expect("claim");
        if let Some(f) = batch.floor {
            self.floor = Some(self.floor.map_or(f, |v| v.max(f)));
        }
        for c in &batch.claimed {
            let seconds = self.cost.get(&c.tenant_id).copied().unwrap_or(0.1);
            let owed = self
                .owed
                .entry(c.tenant_id.clone())
                .or_insert_with(|| TenantCharge {
                    tenant_id: c.tenant_id.clone(),
                    start: c.tenant_pass,
                    seconds: 0.0,
                    deliveries: 0,
                });
            owed.seconds += seconds;
            owed.deliveries += 1;
        }
        batch.claimed
    }
}

/// A tenant with `endpoints` endpoints and `each` deliveries due on each, since `at`.
async fn backlog(store: &SharedStore, endpoints: usize, each: usize, at: i64) -> Tenant {
    let t = tenant(store).await;
    let mut batch = Vec::with_capacity(endpoints);
    for _ in 0..endpoints {
        batch.push(endpoint_for(&t, &["work"]));
    }
    store.create_endpoints(&batch).await.expect("endpoints");
    enqueue_n(store, &t, "work", each, at).await;
    t
}

fn per_tenant(claimed: &[Claimed]) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for c in claimed {
        *n.entry(c.tenant_id.clone()).or_default() += 1;
    }
    n
}

fn share(counts: &HashMap<String, usize>, t: &Tenant) -> f64 {
    let total: usize = counts.values().sum();
    counts.get(&t.id).copied().unwrap_or(0) as f64 / total.max(1) as f64
}

/// Three tenants with backlogs of very different shapes (500 endpoints, one endpoint, five)
/// get a third of the claims each, not shares in proportion to their endpoints.
async fn check_tenants_share_equally(store: SharedStore) {
    let now = now_ms();
    let wide = backlog(&store, 500, 4, now - 60_000).await;
    let narrow = backlog(&store, 1, 2_000, now - 60_000).await;
    let middle = backlog(&store, 5, 400, now - 60_000).await;
    let mut claimer = Claimer::default();
    let mut all = Vec::new();
    for step in 0..60 {
        all.extend(claimer.claim(&store, req(now + step, 12, 8)).await);
    }
    assert_eq!(all.len(), 720, "every claim full");
    let counts = per_tenant(&all);
    for t in [&wide, &narrow, &middle] {
        let s = share(&counts, t);
        assert!(
            (s - 1.0 / 3.0).abs() < 0.04,
            "{s:.3} of the claims: {counts:?}"
        );
    }
}

/// Weights 1:2:4, every tenant saturated: shares of 1/7, 2/7 and 4/7 (within 10 %).
async fn check_weights_share_in_proportion(store: SharedStore) {
    let now = now_ms();
    let mut tenants = Vec::new();
    for weight in [1, 2, 4] {
        let t = backlog(&store, 10, 300, now - 60_000).await;
        let policy = SharePolicy {
            weight: Some(weight),
            max_share: None,
        };
        store.set_tenant_share(&t.id, &policy).await.unwrap();
        assert_eq!(store.tenant(&t.id).await.unwrap().share, policy);
        tenants.push(t);
    }
    let mut claimer = Claimer::default();
    let mut all = Vec::new();
    for step in 0..50 {
        all.extend(claimer.claim(&store, req(now + step, 14, 8)).await);
    }
    let counts = per_tenant(&all);
    for (t, want) in tenants.iter().zip([1.0 / 7.0, 2.0 / 7.0, 4.0 / 7.0]) {
        let s = share(&counts, t);
        assert!(
            (s - want).abs() < want * 0.1,
            "{s:.3}, want {want:.3}: {counts:?}"
        );
    }
}

/// Shares are of the pool's time: a tenant whose deliveries take a tenth as long gets ten
/// deliveries for each of the other's.
async fn check_shares_are_of_time(store: SharedStore) {
    let now = now_ms();
    let slow = backlog(&store, 4, 500, now - 60_000).await;
    let fast = backlog(&store, 4, 500, now - 60_000).await;
    let mut claimer = Claimer::costing(&[(&slow, 1.0), (&fast, 0.1)]);
    let mut all = Vec::new();
    for step in 0..40 {
        all.extend(claimer.claim(&store, req(now + step, 11, 8)).await);
    }
    let counts = per_tenant(&all);
    let s = share(&counts, &fast);
    assert!((s - 10.0 / 11.0).abs() < 0.05, "fast: {s:.3}: {counts:?}");
}

/// A tenant back from idle is served in its first claim (no penalty for the others' history)
/// and then shares equally (no credit for the time it was away).
async fn check_a_returning_tenant_gets_neither_credit_nor_penalty(store: SharedStore) {
    let now = now_ms();
    let busy = backlog(&store, 10, 1_000, now - 60_000).await;
    let quiet = tenant(&store).await;
    for _ in 0..4 {
        endpoint(&store, &quiet, &["work"]).await;
    }
    let mut claimer = Claimer::default();
    // The busy tenant alone for a while: its pass runs ahead.
    for step in 0..100 {
        let got = claimer.claim(&store, req(now + step, 10, 8)).await;
        assert!(got.iter().all(|c| c.tenant_id == busy.id));
    }
    enqueue_n(&store, &quiet, "work", 100, now + 100).await;
    let first = claimer.claim(&store, req(now + 101, 10, 8)).await;
    assert!(
        first.iter().any(|c| c.tenant_id == quiet.id),
        "a returning tenant waits for no one's history"
    );
    let mut all = first;
    for step in 0..20 {
        all.extend(claimer.claim(&store, req(now + 102 + step, 10, 8)).await);
    }
    let s = share(&per_tenant(&all), &quiet);
    assert!(
        (0.4..=0.6).contains(&s),
        "the returning tenant got {s:.3} of the claims (credit or penalty)"
    );
}

/// The shape in small: one tenant's 2,000 endpoints all due, another's one message
/// arrives: the very next claim of a few deliveries serves it.
async fn check_a_quiet_tenant_is_served_beside_a_wide_backlog(store: SharedStore) {
    let now = now_ms();
    let busy = backlog(&store, 2_000, 2, now - 60_000).await;
    let quiet = tenant(&store).await;
    endpoint(&store, &quiet, &["work"]).await;
    let mut claimer = Claimer::default();
    for step in 0..20 {
        claimer.claim(&store, req(now + step, 4, 8)).await;
    }
    enqueue_n(&store, &quiet, "work", 1, now + 20).await;
    let next = claimer.claim(&store, req(now + 21, 4, 8)).await;
    assert!(next.iter().any(|c| c.tenant_id == quiet.id), "{next:?}");
    assert!(
        next.iter().any(|c| c.tenant_id == busy.id),
        "work-conserving"
    );
}

/// A tenant's room binds at every moment: alone, a tenant without room is not served at all
/// (its ceiling is full, or the pool keeps its reserve for others); beside another, it is left
/// out, takes no place among the tenants served, and the other takes the claim.
async fn check_a_tenant_room_binds_alone_and_beside_another(store: SharedStore) {
    let now = now_ms();
    let capped = backlog(&store, 3, 50, now - 60_000).await;
    let at_ceiling = vec![(capped.id.clone(), 0)];
    let mut claimer = Claimer::default();
    let alone = ClaimRequest {
        tenant_room: at_ceiling.clone(),
        ..req(now, 10, 8)
    };
    let got = claimer.claim(&store, alone).await;
    assert!(
        got.is_empty(),
        "alone, a tenant without room gets nothing: {got:?}"
    );
    let other = backlog(&store, 3, 50, now - 60_000).await;
    // A claim of one: the tenant without room must not take the only place.
    let one = ClaimRequest {
        tenant_room: at_ceiling.clone(),
        ..req(now + 1, 1, 8)
    };
    let got = claimer.claim(&store, one).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].tenant_id, other.id);
    let beside = ClaimRequest {
        tenant_room: at_ceiling,
        ..req(now + 1, 10, 8)
    };
    let got = claimer.claim(&store, beside).await;
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|c| c.tenant_id == other.id), "{got:?}");
    // Room for two: two, and the rest to the other.
    let two = ClaimRequest {
        tenant_room: vec![(capped.id.clone(), 2)],
        ..req(now + 2, 40, 8)
    };
    let counts = per_tenant(&claimer.claim(&store, two).await);
    assert!(
        counts.get(&capped.id).copied().unwrap_or(0) <= 2,
        "{counts:?}"
    );
    assert!(
        counts.get(&other.id).copied().unwrap_or(0) >= 8,
        "{counts:?}"
    );
}

/// 10,000 tenants with one due delivery each: every claim is full, and every tenant is served
/// exactly once before the due work runs out (no starvation, nothing twice).
async fn check_ten_thousand_tenants_due(store: SharedStore) {
    const TENANTS: usize = 10_000;
    let now = now_ms();
    let mut tenants = Vec::with_capacity(TENANTS);
    let mut endpoints = Vec::with_capacity(TENANTS);
    for _ in 0..TENANTS {
        let t = Tenant {
            id: new_id("ten"),
            name: "many".into(),
            token_hash: hash_token(&new_token("sk")),
            created_at_ms: now,
            share: Default::default(),
        };
        store.create_tenant(&t).await.expect("tenant");
        endpoints.push(endpoint_for(&t, &["work"]));
        tenants.push(t);
    }
    for chunk in endpoints.chunks(1_000) {
        store.create_endpoints(chunk).await.expect("endpoints");
    }
    let messages: Vec<NewMessage> = tenants.iter().map(|t| message(t, "work")).collect();
    for chunk in messages.chunks(1_000) {
        store.enqueue(chunk, now - 1_000).await.expect("enqueue");
    }
    let mut claimer = Claimer::default();
    let mut seen: HashSet<String> = HashSet::new();
    for step in 0..(TENANTS / 250) as i64 {
        let got = claimer.claim(&store, req(now + step, 250, 8)).await;
        assert_eq!(got.len(), 250, "claim {step} full");
        for c in got {
            assert!(
                seen.insert(c.tenant_id.clone()),
                "{} served twice",
                c.tenant_id
            );
        }
    }
    assert_eq!(seen.len(), TENANTS);
    assert!(
        claimer
            .claim(&store, req(now + 100, 250, 8))
            .await
            .is_empty()
    );
}

/// Four claimers at once over four saturated tenants: nothing is leased twice, and no tenant
/// gets much more than its share because claims raced (each sees the others' charges).
async fn check_concurrent_claimers_keep_shares(store: SharedStore) {
    let now = now_ms();
    let mut tenants = Vec::new();
    for _ in 0..4 {
        tenants.push(backlog(&store, 8, 300, now - 60_000).await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(4));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (store, start) = (store.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut claimer = Claimer::default();
            let mut got = Vec::new();
            for step in 0..40 {
                got.extend(claimer.claim(&store, req(now + step, 8, 4)).await);
            }
            got
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let ids: HashSet<i64> = all.iter().map(|c| c.delivery_id).collect();
    assert_eq!(ids.len(), all.len(), "a delivery leased twice");
    let counts = per_tenant(&all);
    for t in &tenants {
        let s = share(&counts, t);
        assert!((s - 0.25).abs() < 0.08, "{s:.3}: {counts:?}");
    }
}

support::drivers!(
    check_tenants_share_equally,
    check_weights_share_in_proportion,
    check_shares_are_of_time,
    check_a_returning_tenant_gets_neither_credit_nor_penalty,
    check_a_quiet_tenant_is_served_beside_a_wide_backlog,
    check_a_tenant_room_binds_alone_and_beside_another,
    check_ten_thousand_tenants_due,
    check_concurrent_claimers_keep_shares,
    check_work_conserving_beside_a_trickle,
);

/// Work-conserving beside a trickle: a slow tenant's backlog (its pass runs ahead, 0.3 s a
/// delivery) beside a fast tenant with one delivery due at every claim. Every claim has room
/// for both, so the slow tenant's endpoint gets its per-endpoint share each time, not one
/// claim's worth and then nothing while the trickle keeps a lower pass (the soak's slow
/// endpoint fell behind for good that way).
async fn check_work_conserving_beside_a_trickle(store: SharedStore) {
    let now = now_ms();
    let slow = backlog(&store, 1, 200, now - 60_000).await;
    let fast = tenant(&store).await;
    endpoint(&store, &fast, &["work"]).await;
    let mut claimer = Claimer::costing(&[(&slow, 0.3), (&fast, 0.001)]);
    let mut slow_got = Vec::new();
    for step in 0..30 {
        enqueue_n(&store, &fast, "work", 1, now + step * 10).await;
        let got = claimer.claim(&store, req(now + step * 10 + 1, 50, 8)).await;
        slow_got.push(got.iter().filter(|c| c.tenant_id == slow.id).count());
    }
    assert!(
        slow_got.iter().sum::<usize>() >= 200,
        "the slow tenant's deliveries per claim: {slow_got:?}"
    );
}

/// Every claim rewrites the tenants it charges, so the tenants' table gathers dead versions as
/// fast as claims run: a 1,000 s soak on a PostgreSQL without autovacuum left 150,000 of them
/// behind 6 rows. The store vacuums it itself, as it does the endpoints' due table: here, with
/// autovacuum kept away from it, claims that charge two tenants each bring a vacuum of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claims_keep_the_tenants_table_vacuumed() {
    let Some(url) = support::fresh_postgres().await else {
        return;
    };
    let store = support::postgres_store(&url).await;
    let watcher = support::postgres_client(&url).await;
    watcher
        .batch_execute("ALTER TABLE due_tenants SET (autovacuum_enabled = false)")
        .await
        .unwrap();
    let now = now_ms();
    backlog(&store, 2, 600, now - 60_000).await;
    backlog(&store, 2, 600, now - 60_000).await;
    let vacuums = || async {
        watcher
            .query_one(
                "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'due_tenants'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(vacuums().await, 0);
    let mut claimer = Claimer::default();
    let mut claimed = 0;
    // Two deliveries of each tenant per claim: 600 claims, 1,200 charges and as many rotations.
    for step in 0..600 {
        claimed += claimer.claim(&store, req(now + step, 4, 1)).await.len();
    }
    assert_eq!(claimed, 2_400, "every claim full");
    assert!(
        support::eventually(Duration::from_secs(30), || async { vacuums().await > 0 }).await,
        "the tenants' table was never vacuumed"
    );
}
