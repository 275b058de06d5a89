//! The operator's pages over HTTP: the fleet with the occupancy share per host and its
//! threshold, the tenants with their endpoints' breaker and governor, the plan table, and a
//! portal link made from the dashboard; and a fleet on PostgreSQL, where a session opened on one
//! process works on the others and an API-only process reads the evidence from the store.

use std::time::Duration;

use serde_json::json;
use sluice::config::Role;
use sluice_testkit::receiver::{self, Behavior};

use crate::client::{Client, SESSION, admin_client, portal_client};
use crate::support::{Sluice, eventually, test_settings};

#[tokio::test]
async fn the_operator_sees_the_fleet_tenants_and_plan() {
    let s = Sluice::start(test_settings()).await;
    let fast = receiver::start(Behavior::Fast, false).await.unwrap();
    let slow = receiver::start(Behavior::Slow(Duration::from_millis(150)), false)
        .await
        .unwrap();
    let (tenant, token) = s.tenant("acme").await;
    let (fast_ep, _) = s.endpoint(&token, &fast.url(), json!({})).await;
    s.endpoint(&token, &slow.url(), json!({})).await;
    for n in 0..6 {
        s.send(&token, "order.created", json!({ "n": n })).await;
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            fast.record.requests() >= 6 && slow.record.requests() >= 6
        })
        .await
    );
    let admin = admin_client(&s).await;
    // Rates need a reading at least a second old: the sampler's first one, taken at start.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // The shares come from the heartbeats, so they trail the attempts by up to one beat.
    assert!(
        eventually(Duration::from_secs(20), || async {
            admin
                .get("/console/admin/")
                .await
                .body
                .contains("<table class=\"cards\" id=\"hosts\">")
        })
        .await,
        "no shares: {}",
        admin.get("/console/admin/").await.body
    );
    let fleet = admin.get("/console/admin/").await;
    assert_eq!(fleet.status, 200, "{}", fleet.body);
    for needle in [
        "Delivered",
        "In flight",
        "Replicas wanted",
        "Autoscaling:",
        "15 % threshold",
        "127.0.0.1",
    ] {
        assert!(fleet.body.contains(needle), "{needle}: {}", fleet.body);
    }
    assert!(
        fleet.body.contains("above 15 %"),
        "both endpoints' host, 127.0.0.1, holds all the time"
    );

    let tenants = admin.get("/console/admin/tenants").await;
    assert_eq!(tenants.status, 200);
    assert!(tenants.body.contains(&tenant) && tenants.body.contains(&fast_ep));
    assert!(
        tenants.body.contains("badge closed"),
        "breaker state: {}",
        tenants.body
    );
    assert!(tenants.body.contains("Governor"));

    let plan = admin.get("/console/admin/plan").await;
    assert_eq!(plan.status, 200, "{}", plan.body);
    assert!(
        plan.body.contains("Recommended concurrency"),
        "{}",
        plan.body
    );
    assert!(plan.body.contains("Lanes by Little"));

    // A portal link made here opens the tenant's portal in another browser.
    let link_page = admin
        .submit(
            &format!("/console/admin/tenants/{tenant}/portal-link"),
            &tenants,
            &[],
        )
        .await;
    assert_eq!(link_page.status, 200, "{}", link_page.body);
    let at = link_page.body.find("/console/enter?token=").unwrap();
    let path: String = link_page.body[at..]
        .chars()
        .take_while(|c| *c != '<' && *c != '"')
        .collect();
    let customer = Client::new(&s.base);
    let enter = customer.get(&path).await;
    assert_eq!(enter.status, 200);
    let done = customer
        .submit(
            "/console/enter",
            &enter,
            &[("token", &enter.field("token"))],
        )
        .await;
    assert_eq!(done.status, 303);
    let portal = customer.get("/console/portal/").await;
    assert!(portal.body.contains(&fast.url()), "{}", portal.body);
}

#[tokio::test]
async fn a_fleet_shares_sessions_and_an_api_process_reads_the_store() {
    let Some(url) = crate::support::fresh_postgres().await else {
        return;
    };
    let settings = |role: Role| {
        let mut raw = test_settings();
        raw.database_url = Some(url.clone());
        raw.role = Some(role);
        raw
    };
    let all = Sluice::start(settings(Role::All)).await;
    let api = Sluice::start(settings(Role::Api)).await;
    let receiver = receiver::start(Behavior::Fast, false).await.unwrap();
    let (_, token) = all.tenant("acme").await;
    let (ep, _) = all.endpoint(&token, &receiver.url(), json!({})).await;
    let msg = all.send(&token, "order.created", json!({ "n": 1 })).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            all.message(&token, &msg).await["deliveries"][0]["state"] == json!("delivered")
        })
        .await
    );

    // A link made through one process opens a session that every process honours: the
    // cookie key was generated once, in the store.
    let c = portal_client(&api, &token).await;
    let elsewhere = Client::new(&all.base);
    elsewhere.set_cookie(SESSION, &c.cookie(SESSION).unwrap());
    assert_eq!(elsewhere.get("/console/portal/").await.status, 200);

    // Without a dispatcher the evidence comes from the attempts in the store.
    let page = c.get(&format!("/console/portal/endpoints/{ep}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("from the store"), "{}", page.body);
    assert!(page.body.contains("1 sample over"), "{}", page.body);
    let log = c.get("/console/portal/messages").await;
    assert!(log.body.contains(&msg) && log.body.contains("badge delivered"));
    let admin = admin_client(&api).await;
    let tenants = admin.get("/console/admin/tenants").await;
    assert!(
        tenants.body.contains("runs no dispatcher"),
        "{}",
        tenants.body
    );
    assert_eq!(admin.get("/console/admin/").await.status, 200);
    assert_eq!(admin.get("/console/admin/plan").await.status, 200);
}
