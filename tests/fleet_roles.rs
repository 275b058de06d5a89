//! A fleet of real processes on PostgreSQL without Redis: an API process and two dispatcher
//! processes. Every role answers `/healthz`, `/readyz` and `/metrics` over HTTP (a dispatcher
//! on its own `--listen`, serving no API route); the API process, which runs no dispatcher,
//! counts both dispatchers as current replicas from their heartbeats in `/v1/scale` and the
//! `sluice_fleet_*` gauges; SIGTERM one and the count drops at once, with nothing left leased.
//! The API process's operator console shows the fleet's deliveries and its occupancy shares
//! per destination host, summed from the dispatchers' heartbeats.

#[path = "console/client.rs"]
#[allow(dead_code)]
mod client;

use sluice_testkit as support;

use std::time::Duration;

use serde_json::json;
use sluice_testkit::receiver::{self, Behavior};

use sluice_testkit::process::{Client, Process};
use support::{ADMIN, eventually};

fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split([' ', '{']).next() == Some(name))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

/// The live dispatchers `GET /v1/scale` counts.
async fn current_replicas(c: &Client) -> Option<u64> {
    let (status, body, _) = c.get("/v1/scale", Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    body["current_replicas"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_is_observable_and_the_api_process_sees_the_live_fleet() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let fleet = ["--database-url", &db, "--heartbeat-interval", "1s"];
    let op_port = support::free_port();
    let op = format!("127.0.0.1:{op_port}");
    let api =
        Process::start(&[&fleet[..], &["--role", "api", "--operator-listen", &op]].concat()).await;
    let dispatcher = [&fleet[..], &["--role", "dispatcher", "--drain-grace", "2s"]].concat();
    let d1 = Process::start(&dispatcher).await;
    let d2 = Process::start(&dispatcher).await;
    let operator = Client::new(&format!("http://{op}"));
    let c = Client::new(&api.base);

    // Health, readiness and metrics on every process; the dispatchers serve nothing else.
    for (who, client, token) in [
        ("api (operator listener)", &operator, None),
        ("api (API listener)", &c, Some(ADMIN)),
        ("dispatcher 1", &Client::new(&d1.base), None),
        ("dispatcher 2", &Client::new(&d2.base), None),
    ] {
        for path in ["/healthz", "/readyz"] {
            assert_eq!(client.get(path, None).await.0, 200, "{who} {path}");
        }
        if token.is_none() {
            let (status, _, text) = client.get("/metrics", None).await;
            assert_eq!(status, 200, "{who} /metrics");
            assert!(text.contains("sluice_build_info"), "{who}: {text}");
        }
    }
    for d in [&d1, &d2] {
        let (status, body, _) = Client::new(&d.base).get("/v1/scale", Some(ADMIN)).await;
        assert_eq!(status, 404, "a dispatcher serves no API route: {body}");
        let (_, _, text) = Client::new(&d.base).get("/metrics", None).await;
        assert!(gauge(&text, "sluice_heartbeat_age_seconds").is_some_and(|a| a < 10.0));
    }

    // The API process runs no dispatcher, yet it sees both through their heartbeats.
    let replicas = || current_replicas(&c);
    assert!(
        eventually(Duration::from_secs(10), || async {
            replicas().await == Some(2)
        })
        .await,
        "current_replicas {:?}",
        replicas().await
    );
    let (_, _, text) = operator.get("/metrics", None).await;
    assert_eq!(
        gauge(&text, "sluice_fleet_dispatchers"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(gauge(&text, "sluice_fleet_concurrency_limit"), Some(1024.0));

    // Load on the fleet shows in the API process's figures.
    let rx = receiver::start(Behavior::Slow(Duration::from_millis(50)), false)
        .await
        .unwrap();
    let (_, token) = c.tenant("acme").await;
    c.endpoint(&token, &rx.url(), json!({})).await;
    for n in 0..40 {
        c.send(&token, "order.paid", json!({ "n": n })).await;
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            let (_, _, text) = operator.get("/metrics", None).await;
            gauge(&text, "sluice_fleet_arrivals_per_second").is_some_and(|r| r > 0.0)
                && gauge(&text, "sluice_fleet_mean_service_seconds").is_some_and(|s| s > 0.0)
        })
        .await,
        "the fleet's load never reached the API process"
    );

    // SIGTERM one dispatcher: it stops counting at once, and leaves nothing leased.
    let said = d1.terminate();
    assert!(said.contains("stopped:"), "{said}");
    assert_eq!(
        replicas().await,
        Some(1),
        "a drained dispatcher is not a replica"
    );
    let store = sluice::store::open(Some(&db), std::path::Path::new("."), Default::default())
        .await
        .unwrap();
    let beats = store.heartbeats(0).await.unwrap();
    assert_eq!(
        beats.len(),
        1,
        "the drained dispatcher deleted its heartbeat: {beats:?}"
    );
    // What d1 held was attempted or released: the survivor delivers everything.
    assert!(
        eventually(Duration::from_secs(30), || async {
            let s = store.queue_stats(sluice::clock::now_ms()).await.unwrap();
            s.ready == 0 && s.leased == 0 && store.delivered_count().await.unwrap() == 40
        })
        .await,
        "{:?}, delivered {}",
        store.queue_stats(sluice::clock::now_ms()).await.unwrap(),
        store.delivered_count().await.unwrap()
    );
    d2.terminate();
    api.terminate();
}

/// A dispatcher killed outright (no drain, no goodbye) stops counting as a replica as soon as
/// PostgreSQL sees its connections close, not when its heartbeat goes stale: with a 60 s
/// interval its last heartbeat stays fresh for three minutes, yet `/v1/scale` drops it within
/// the test's wait. Before heartbeats named their process's listener backend it stayed counted
/// the whole three minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_dispatcher_stops_counting_before_its_heartbeat_goes_stale() {
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let fleet = ["--database-url", &db, "--heartbeat-interval", "60s"];
    let api = Process::start(&[&fleet[..], &["--role", "api"]].concat()).await;
    let dispatcher = [&fleet[..], &["--role", "dispatcher"]].concat();
    let d1 = Process::start(&dispatcher).await;
    let d2 = Process::start(&dispatcher).await;
    let c = Client::new(&api.base);
    let replicas = || current_replicas(&c);
    assert!(
        eventually(Duration::from_secs(20), || async {
            replicas().await == Some(2)
        })
        .await,
        "current_replicas {:?}",
        replicas().await
    );
    d1.kill();
    assert!(
        eventually(Duration::from_secs(30), || async {
            replicas().await == Some(1)
        })
        .await,
        "a killed dispatcher still counted: current_replicas {:?}",
        replicas().await
    );
    let store = sluice::store::open(Some(&db), std::path::Path::new("."), Default::default())
        .await
        .unwrap();
    assert_eq!(
        store.heartbeats(0).await.unwrap().len(),
        1,
        "the killed dispatcher's row is still young but not live"
    );
    d2.terminate();
    api.terminate();
}

/// The value of the console tile named `key` (`Delivered`), as the page shows it.
fn tile(page: &str, key: &str) -> Option<String> {
    let start = format!("<span class=\"k\">{key}</span><span class=\"v\">");
    let at = page.find(&start)? + start.len();
    Some(page[at..].split('<').next()?.to_owned())
}

/// An API process runs no dispatcher, yet its operator console shows what the fleet delivered:
/// every message sent through it was delivered by the two dispatcher processes, and the page
/// adds up their heartbeats' counts, lists both, and shows a delivery rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_process_console_shows_the_fleet_summed_from_heartbeats() {
    const N: u64 = 30;
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let fleet = ["--database-url", &db, "--heartbeat-interval", "1s"];
    let api = Process::start(&[&fleet[..], &["--role", "api"]].concat()).await;
    let dispatcher = [&fleet[..], &["--role", "dispatcher"]].concat();
    let d1 = Process::start(&dispatcher).await;
    let d2 = Process::start(&dispatcher).await;
    let c = Client::new(&api.base);
    assert!(
        eventually(Duration::from_secs(20), || async {
            current_replicas(&c).await == Some(2)
        })
        .await,
        "current_replicas {:?}",
        current_replicas(&c).await
    );

    let rx = receiver::start(Behavior::Fast, false).await.unwrap();
    let (_, token) = c.tenant("acme").await;
    c.endpoint(&token, &rx.url(), json!({})).await;
    for n in 0..N {
        c.send(&token, "order.paid", json!({ "n": n })).await;
    }
    let store = sluice::store::open(Some(&db), std::path::Path::new("."), Default::default())
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async {
            let s = store.queue_stats(sluice::clock::now_ms()).await.unwrap();
            s.ready == 0 && s.leased == 0 && store.delivered_count().await.unwrap() == N
        })
        .await,
        "{:?}, delivered {}",
        store.queue_stats(sluice::clock::now_ms()).await.unwrap(),
        store.delivered_count().await.unwrap()
    );

    let admin = client::Client::new(&api.base);
    let login = admin.get("/console/login").await;
    assert_eq!(login.status, 200, "{}", login.body);
    let done = admin
        .submit("/console/login", &login, &[("token", support::ADMIN)])
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let needle = format!("<span id=\"fleet-delivered\">{N}</span>");
    let shown = || async {
        let page = admin.get("/console/admin/").await;
        assert_eq!(page.status, 200, "{}", page.body);
        page.body
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            shown().await.contains(&needle)
        })
        .await,
        "the API process's console never showed {N} delivered: {}",
        shown().await
    );
    let page = shown().await;
    let beats = store.heartbeats(0).await.unwrap();
    assert_eq!(beats.len(), 2, "{beats:?}");
    assert_eq!(
        beats.iter().map(|b| b.tally.delivered).sum::<u64>(),
        N,
        "the heartbeats carry what each dispatcher delivered: {beats:?}"
    );
    for b in &beats {
        assert!(page.contains(&b.id), "dispatcher {} listed: {page}", b.id);
        assert!(!b.host.is_empty(), "a heartbeat names its host: {b:?}");
        assert!(page.contains(&b.host), "host {} shown: {page}", b.host);
    }
    // A rate needs a reading a second old; the dispatchers' counts grew since the API's first.
    assert!(
        eventually(Duration::from_secs(30), || async {
            tile(&shown().await, "Delivered").is_some_and(|v| v != "—" && v != "0/s")
        })
        .await,
        "no fleet delivery rate: {:?}",
        tile(&shown().await, "Delivered")
    );
    assert!(
        page.contains("from the live dispatchers' heartbeats"),
        "{page}"
    );
    d1.terminate();
    d2.terminate();
    api.terminate();
}

/// The console's "Hosts by occupancy share" rows: (host, share in %, worker-seconds).
fn host_shares(page: &str) -> Vec<(String, f64, f64)> {
    let Some(at) = page.find("<table class=\"cards\" id=\"hosts\">") else {
        return Vec::new();
    };
    let table = &page[at..page[at..]
        .find("</table>")
        .map_or(page.len(), |end| at + end)];
    let cell = |row: &str, label: &str| {
        let start = format!("data-label=\"{label}\">");
        let at = row.find(&start)? + start.len();
        Some(row[at..].split('<').next()?.trim().to_owned())
    };
    table
        .split("<tr")
        .filter_map(|row| {
            let host = cell(row, "Host")?;
            let share = cell(row, "Share")?;
            let seconds = cell(row, "Worker-seconds")?;
            Some((
                host,
                share.strip_suffix(" %")?.parse().ok()?,
                seconds.parse().ok()?,
            ))
        })
        .collect()
}

/// An API process runs no dispatcher, yet its operator console shows the fleet's occupancy
/// shares per destination host: two dispatcher processes deliver to a slow receiver on
/// 127.0.0.1 and a fast one on 127.0.0.2 (the `host` is the URL's host, without its port),
/// their heartbeats carry their worker-seconds per host, and the page lists both hosts with
/// shares that add up to 100 %, the slow one above the other and above the 15 % line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_process_console_shows_the_fleets_occupancy_shares_per_host() {
    const N: u64 = 16;
    let Some(db) = support::fresh_postgres().await else {
        return;
    };
    let fleet = ["--database-url", &db, "--heartbeat-interval", "1s"];
    let api = Process::start(&[&fleet[..], &["--role", "api"]].concat()).await;
    let dispatcher = [&fleet[..], &["--role", "dispatcher"]].concat();
    let d1 = Process::start(&dispatcher).await;
    let d2 = Process::start(&dispatcher).await;
    let c = Client::new(&api.base);
    assert!(
        eventually(Duration::from_secs(20), || async {
            current_replicas(&c).await == Some(2)
        })
        .await,
        "current_replicas {:?}",
        current_replicas(&c).await
    );

    let slow = receiver::start(Behavior::Slow(Duration::from_millis(250)), false)
        .await
        .unwrap();
    let fast = receiver::start_on("127.0.0.2:0".parse().unwrap(), Behavior::Fast, false)
        .await
        .unwrap();
    let (_, token) = c.tenant("acme").await;
    c.endpoint(&token, &slow.url(), json!({})).await;
    c.endpoint(&token, &fast.url(), json!({})).await;
    for n in 0..N {
        c.send(&token, "order.paid", json!({ "n": n })).await;
    }
    let store = sluice::store::open(Some(&db), std::path::Path::new("."), Default::default())
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || async {
            let s = store.queue_stats(sluice::clock::now_ms()).await.unwrap();
            s.ready == 0 && s.leased == 0 && store.delivered_count().await.unwrap() == 2 * N
        })
        .await,
        "{:?}, delivered {}",
        store.queue_stats(sluice::clock::now_ms()).await.unwrap(),
        store.delivered_count().await.unwrap()
    );
    // The heartbeats carry the time: at least the slow receiver's 250 ms per delivery, over
    // both dispatchers, and the fast receiver's named too.
    let seconds = |host: &'static str| {
        let store = store.clone();
        async move {
            store
                .heartbeats(0)
                .await
                .unwrap()
                .iter()
                .filter_map(|b| b.host_seconds.hosts.get(host))
                .sum::<f64>()
        }
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            seconds("127.0.0.1").await >= 0.25 * N as f64 && seconds("127.0.0.2").await > 0.0
        })
        .await,
        "{:?}",
        store.heartbeats(0).await.unwrap()
    );

    let admin = client::Client::new(&api.base);
    let login = admin.get("/console/login").await;
    assert_eq!(login.status, 200, "{}", login.body);
    let done = admin
        .submit("/console/login", &login, &[("token", support::ADMIN)])
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let shown = || async {
        let page = admin.get("/console/admin/").await;
        assert_eq!(page.status, 200, "{}", page.body);
        page.body
    };
    // Every delivery is done, so the heartbeats' figures stop growing; the API process's
    // sampler has no reading five minutes old, so its window starts at its first reading,
    // before the dispatchers started: the page's seconds per host are the two dispatchers'
    // heartbeats added up (compared with the store's on each try, as both may still move).
    let fleet_wide = || async {
        let rows = host_shares(&shown().await);
        let slow_seconds = seconds("127.0.0.1").await;
        let at = |h: &str| rows.iter().find(|(host, _, _)| host == h);
        at("127.0.0.2").is_some()
            && at("127.0.0.1").is_some_and(|r| (r.2 - slow_seconds).abs() <= 0.06)
    };
    assert!(
        eventually(Duration::from_secs(30), fleet_wide).await,
        "the API process's console never showed both hosts, the slow one with the \
         dispatchers' seconds added up: {} and {:?}",
        shown().await,
        store.heartbeats(0).await.unwrap()
    );
    let page = shown().await;
    let rows = host_shares(&page);
    let share = |h: &str| rows.iter().find(|(host, _, _)| host == h).map(|r| r.1);
    let total: f64 = rows.iter().map(|(_, s, _)| s).sum();
    assert!(
        (total - 100.0).abs() <= 0.2,
        "shares add up to 100 %: {rows:?}"
    );
    let (slow_share, fast_share) = (share("127.0.0.1").unwrap(), share("127.0.0.2").unwrap());
    assert!(slow_share > fast_share, "{rows:?}");
    assert!(slow_share > 15.0, "{rows:?}");
    assert!(
        page.contains("above 15 %"),
        "the slow host is flagged: {page}"
    );
    assert!(
        !page.contains("This process runs no dispatcher"),
        "the shares are the fleet's, not this process's: {page}"
    );
    assert!(
        page.contains("Occupancy shares are the whole fleet's too"),
        "{page}"
    );
    d1.terminate();
    d2.terminate();
    api.terminate();
}
