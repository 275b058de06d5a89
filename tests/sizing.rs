//! `sluice plan` against a real, in-process sluice and a slow loopback receiver; the
//! Prometheus parser and histogram arithmetic; lanes, the skew warning, the scale signal and the
//! `sluice size` command line. Ranges, never timings.

use std::time::{Duration, Instant};

use sluice::config::RawSettings;
use sluice::plan::{self, Measurements, PlanArgs, PlanOptions, Scrape, from_scrapes};
use sluice::sizing::signal::{ScaleDirection, ScaleLimit, scale_signal};
use sluice::sizing::{ScalingPolicy, ScalingSettings};
use sluice_testkit::receiver::{self, Behavior};

use sluice_testkit::process::Process;

const ADMIN: &str = "sk_admin_sizing_test_token";
const MESSAGES: usize = 12;

async fn post(client: &reqwest::Client, url: String, token: &str, body: String) -> String {
    let response = client
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    assert!(status.is_success(), "{status}: {text}");
    text
}

fn field(json: &str, key: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(json).expect("json");
    value[key].as_str().expect("string field").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_measures_a_running_sluice_from_its_metrics_and_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = RawSettings {
        listen: Some("127.0.0.1:0".into()),
        data_dir: Some(dir.path().to_path_buf()),
        allow_network: vec!["127.0.0.0/8".into()],
        sqlite_synchronous: Some("normal".into()),
        admin_token: Some(ADMIN.into()),
        ..RawSettings::default()
    };
    let running = sluice::serve::start(settings.validate().expect("valid config"))
        .await
        .expect("sluice starts");
    let receiver = receiver::start(Behavior::Slow(Duration::from_millis(200)), false)
        .await
        .expect("receiver");
    let base = format!("http://{}", running.addr.expect("api address"));
    let metrics_url = format!("{base}/metrics");
    let client = reqwest::Client::new();

    let tenant = post(
        &client,
        format!("{base}/v1/tenants"),
        ADMIN,
        r#"{"name":"acme"}"#.into(),
    );
    let token = field(&tenant.await, "token");
    let endpoint = format!(r#"{{"url":"{}"}}"#, receiver.url());
    let endpoint = field(
        &post(&client, format!("{base}/v1/endpoints"), &token, endpoint).await,
        "id",
    );

    let before = plan::scrape(&client, &metrics_url, Some(ADMIN))
        .await
        .expect("scrape");
    let started = Instant::now();
    for i in 0..MESSAGES {
        let body = format!(r#"{{"event_type":"order.created","payload":{{"n":{i}}}}}"#);
        post(&client, format!("{base}/v1/messages"), &token, body).await;
    }
    // Wait (not a timing assertion) until every attempt has been settled and counted.
    let deadline = Instant::now() + Duration::from_secs(60);
    let after = loop {
        let now = plan::scrape(&client, &metrics_url, Some(ADMIN))
            .await
            .expect("scrape");
        let done = now.sum("webhook_service_seconds_count").unwrap_or(0.0)
            - before.sum("webhook_service_seconds_count").unwrap_or(0.0);
        if done >= MESSAGES as f64 {
            break now;
        }
        assert!(Instant::now() < deadline, "only {done} attempts settled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let m = from_scrapes(&before, &after, started.elapsed().as_secs_f64());
    assert!(
        (MESSAGES as f64..=MESSAGES as f64 + 2.0).contains(&m.attempts),
        "{m:?}"
    );
    assert!(m.arrival_rate_per_s > 0.0 && m.arrival_rate_per_s <= m.attempts / m.interval_s);
    let mean = m.mean_service_s.expect("mean");
    assert!((0.2..10.0).contains(&mean), "mean {mean}");
    let p50 = m.p50_service_s.expect("p50");
    assert!((0.1..15.0).contains(&p50), "p50 {p50}");
    assert_eq!(m.current_concurrency, Some(512));
    assert_eq!(m.endpoints.len(), 1, "{:?}", m.endpoints);
    assert_eq!(m.endpoints[0].endpoint, endpoint);
    assert_eq!(m.endpoints[0].current_lane, Some(8));
    let host = &m.hosts[0];
    assert_eq!(host.host, "127.0.0.1");
    assert!(
        host.mean_s.is_some_and(|s| (0.2..10.0).contains(&s)),
        "{host:?}"
    );

    let report = plan::plan(&m, &PlanOptions::default()).expect("plan");
    // Pinned to the arithmetic, not merely positive: the offered load is the completed rate
    // (plus any backlog growth) times the mean service time; the pool is what Erlang C needs
    // for the default 0.5 s mean wait on that load; a lane is Little's Law on the endpoint's
    // offered rate and latency, under the fairness ceiling (a quarter of the pool).
    let growth = m.backlog_growth_per_s.unwrap_or(0.0).max(0.0);
    let load = (m.arrival_rate_per_s + growth) * mean;
    assert!(
        (report.offered_load_erlangs - load).abs() < 1e-9,
        "{} vs {load}",
        report.offered_load_erlangs
    );
    let pool = sluice::sizing::servers_for_mean_wait(load, mean, 0.5).expect("erlang c");
    assert_eq!(report.recommended_concurrency, pool, "{report:?}");
    assert!(report.utilisation > 0.0 && report.utilisation < 1.0);
    assert_eq!(report.lane_ceiling, (pool / 4).max(1));
    assert_eq!(report.lanes.len(), 1);
    let lane = &report.lanes[0];
    let little = (lane.offered_per_s * lane.latency_s).ceil() as u32;
    assert_eq!(
        lane.recommended_lane,
        little.clamp(1, report.lane_ceiling),
        "{lane:?}"
    );
    let text = report.to_string();
    assert!(
        text.contains("recommendation") && text.contains(&endpoint),
        "{text}"
    );

    // The store alone: the same attempts, read through the Store trait.
    let mut args = PlanArgs::for_metrics(metrics_url.clone(), 0.2);
    args.admin_token = Some(ADMIN.into());
    args.metrics_url = None;
    args.data_dir = Some(dir.path().to_path_buf());
    let from_store = plan::measure(&args).await.expect("store plan");
    let sm = &from_store.measured;
    assert_eq!(sm.source, "store");
    assert_eq!(sm.attempts, MESSAGES as f64);
    assert!(
        sm.mean_service_s.is_some_and(|s| (0.2..10.0).contains(&s)),
        "{sm:?}"
    );
    assert_eq!(sm.endpoints[0].host.as_deref(), Some("127.0.0.1"));

    // Both: the metrics figures, with hosts joined from the store.
    args.metrics_url = Some(metrics_url);
    let both = plan::measure(&args).await.expect("combined plan");
    assert_eq!(both.measured.source, "metrics+store");
    assert!(
        serde_json::to_string(&both)
            .expect("json")
            .contains("recommended_concurrency")
    );

    running.stop().await;
}

const BEFORE: &str = "\
# TYPE webhook_service_seconds histogram
webhook_service_seconds_bucket{le=\"0.1\"} 0
webhook_service_seconds_bucket{le=\"1.0\"} 0
webhook_service_seconds_bucket{le=\"60.0\"} 0
webhook_service_seconds_bucket{le=\"+Inf\"} 0
webhook_service_seconds_sum 0.0
webhook_service_seconds_count 0
# EOF
";

fn bimodal(fast: u32, slow: u32) -> (Scrape, Scrape) {
    let after = format!(
        "# TYPE webhook_service_seconds histogram\n\
         webhook_service_seconds_bucket{{le=\"0.1\"}} {fast}\n\
         webhook_service_seconds_bucket{{le=\"1.0\"}} {fast}\n\
         webhook_service_seconds_bucket{{le=\"60.0\"}} {n}\n\
         webhook_service_seconds_bucket{{le=\"+Inf\"}} {n}\n\
         webhook_service_seconds_sum {sum}\n\
         webhook_service_seconds_count {n}\n\
         webhook_service_seconds_created 1.7e9\n\
         webhook_deliveries_ok_total{{endpoint=\"ep_a\"}} {n}\n# EOF\n",
        n = fast + slow,
        sum = f64::from(fast) * 0.05 + f64::from(slow) * 30.0,
    );
    (
        Scrape::parse(BEFORE).expect("before"),
        Scrape::parse(&after).expect("after"),
    )
}

#[test]
fn histogram_p50_is_interpolated_within_its_bucket() {
    let text = "\
x_bucket{host=\"a\",le=\"0.1\"} 10\nx_bucket{host=\"a\",le=\"0.5\"} 30\n\
x_bucket{host=\"a\",le=\"1\"} 40\nx_bucket{host=\"a\",le=\"+Inf\"} 40\n\
x_sum{host=\"a\"} 12\nx_count{host=\"a\"} 40\n\
x_bucket{host=\"b\",le=\"0.1\"} 0\nx_bucket{host=\"b\",le=\"0.5\"} 0\n\
x_bucket{host=\"b\",le=\"1\"} 20\nx_bucket{host=\"b\",le=\"+Inf\"} 20\n\
x_sum{host=\"b\"} 15\nx_count{host=\"b\"} 20\n# EOF\n";
    let scrape = Scrape::parse(text).expect("parses");
    let a = &scrape.histograms("x", Some("host"))["a"];
    // Rank 20 of 40 falls 10 into the 0.1–0.5 bucket of 20: 0.1 + 0.4 × ½.
    assert!((a.quantile(0.5).expect("p50") - 0.3).abs() < 1e-12);
    // The first bucket interpolates from 0; p25 is rank 10, the top of that bucket.
    assert!((a.quantile(0.25).expect("p25") - 0.1).abs() < 1e-12);
    assert_eq!(a.mean(), Some(0.3));
    // Merged over hosts: 60 observations, rank 30 is the 0.5 bound.
    let merged = scrape.histogram("x").expect("merged");
    assert_eq!(merged.count, 60.0);
    assert!((merged.quantile(0.5).expect("p50") - 0.5).abs() < 1e-12);
    // Deltas are bucket by bucket.
    let (before, after) = bimodal(90, 10);
    let delta = after
        .histogram("webhook_service_seconds")
        .expect("after")
        .delta(&before.histogram("webhook_service_seconds").expect("before"));
    assert_eq!(delta.count, 100.0);
    assert!((delta.quantile(0.5).expect("p50") - 0.1 * 50.0 / 90.0).abs() < 1e-12);
}

#[test]
fn mean_over_p50_above_five_warns_on_a_bimodal_input() {
    let (before, after) = bimodal(90, 10);
    let m = from_scrapes(&before, &after, 10.0);
    assert_eq!(m.arrival_rate_per_s, 10.0);
    assert!((m.mean_service_s.expect("mean") - 3.045).abs() < 1e-9);
    let report = plan::plan(&m, &PlanOptions::default()).expect("plan");
    assert!(report.mean_to_p50.expect("ratio") > 5.0);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("cap request time or lanes before adding workers")),
        "{:?}",
        report.warnings
    );
    // All fast: no skew, no warning.
    let (before, after) = bimodal(100, 0);
    let report = plan::plan(
        &from_scrapes(&before, &after, 10.0),
        &PlanOptions::default(),
    )
    .expect("plan");
    assert!(report.mean_to_p50.expect("ratio") <= 5.0);
    assert!(!report.warnings.iter().any(|w| w.contains("p50")));
}

#[test]
fn lane_recommendations_are_clamped_by_the_fairness_ceiling() {
    let (before, after) = bimodal(0, 0);
    let mut m: Measurements = from_scrapes(&before, &after, 10.0);
    m.attempts = 1_000.0;
    m.arrival_rate_per_s = 100.0;
    m.mean_service_s = Some(0.4);
    m.p50_service_s = Some(0.3);
    m.p95_service_s = Some(0.9);
    let load = |endpoint: &str, offered_per_s, latency_s| plan::EndpointLoad {
        endpoint: endpoint.into(),
        offered_per_s,
        latency_s,
        latency_source: "host p95".into(),
        ..plan::EndpointLoad::default()
    };
    m.endpoints = vec![
        load("ep_hot", 60.0, Some(5.0)),
        load("ep_cold", 2.0, Some(0.2)),
        load("ep_fleet", 10.0, None),
    ];
    let report = plan::plan(&m, &PlanOptions::default()).expect("plan");
    let ceiling = report.lane_ceiling;
    assert_eq!(ceiling, report.recommended_concurrency / 4);
    let lane = |id: &str| report.lanes.iter().find(|l| l.endpoint == id).expect(id);
    // 60/s × 5 s = 300 slots wanted; the fairness ceiling wins.
    assert_eq!(lane("ep_hot").recommended_lane, ceiling);
    assert!(lane("ep_hot").clamped_by_ceiling);
    // 2/s × 0.2 s = 0.4 → 1 slot.
    assert_eq!(lane("ep_cold").recommended_lane, 1);
    assert!(!lane("ep_cold").clamped_by_ceiling);
    // No endpoint latency: the fleet p95, 10/s × 0.9 s = 9.
    assert_eq!(lane("ep_fleet").recommended_lane, 9);
    assert_eq!(lane("ep_fleet").latency_source, "fleet p95");
    assert!(report.warnings.iter().any(|w| w.contains("ep_hot")));
    let wider = PlanOptions {
        lane_share: 1.0,
        ..PlanOptions::default()
    };
    let report = plan::plan(&m, &wider).expect("plan");
    assert_eq!(report.lane_ceiling, report.recommended_concurrency);
}

#[test]
fn scale_signal_follows_the_step_and_floor_rules() {
    let policy = ScalingPolicy::default();
    // Above target: proportional, at most doubling, at most +8.
    let s = scale_signal(20, 120.0, 0.0, 1.0, 160, &policy);
    assert_eq!((s.desired_replicas, s.limited_by), (28, ScaleLimit::StepUp));
    let s = scale_signal(5, 45.0, 0.0, 1.0, 160, &policy);
    assert_eq!((s.desired_replicas, s.direction), (8, ScaleDirection::Up));
    // Below the scale-in threshold: one replica at a time.
    let s = scale_signal(20, 2.0, 0.0, 1.0, 160, &policy);
    assert_eq!(
        (s.desired_replicas, s.direction),
        (19, ScaleDirection::Down)
    );
    // Deadband: hold.
    let s = scale_signal(20, 20.0, 0.0, 1.0, 160, &policy);
    assert_eq!(
        (s.desired_replicas, s.direction),
        (20, ScaleDirection::Hold)
    );
    // Little's Law floor: 900/s × 1.4 s / 160 = 7.9 → 8, even with a tiny age.
    let s = scale_signal(8, 1.0, 900.0, 1.4, 160, &policy);
    assert_eq!(
        (s.desired_replicas, s.floor, s.littles_law_replicas),
        (8, 8, 8)
    );
    assert_eq!(s.limited_by, ScaleLimit::Floor);
    // Never zero, even with min_replicas 1 and no load.
    let one = ScalingPolicy::try_new(ScalingSettings {
        min_replicas: 1,
        ..ScalingSettings::default()
    })
    .expect("valid");
    for current in 0..4 {
        assert!(scale_signal(current, 0.0, 0.0, 1.0, 160, &one).desired_replicas >= 1);
    }
    let json = serde_json::to_value(scale_signal(3, 0.0, 0.0, 1.0, 160, &policy)).expect("json");
    assert_eq!(json["desired_replicas"], 3);
    assert_eq!(json["direction"], "hold");
    assert!(
        json["reason"]
            .as_str()
            .is_some_and(|r| r.contains("min_replicas"))
    );
}

#[test]
fn size_command_prints_the_seed_rows() {
    let out = Process::command("size")
        .args(&["--rate", "900", "--service-time", "1.4"])
        .args(&["--target-wait", "0.5", "--surge-rate", "2400"])
        .args(&["--surge-service-time", "3.1"])
        .run();
    assert!(out.status.success(), "{out:?}");
    let text = out.stdout;
    for figure in ["1,260", "1,314", "7,440", "steady", "surge"] {
        assert!(text.contains(figure), "{figure} missing from:\n{text}");
    }
}

#[test]
fn backlog_growth_is_added_to_the_offered_rate() {
    let (before, after) = bimodal(100, 0);
    let depth = |ready: u32| {
        format!(
            "sluice_queue_depth{{state=\"ready\"}} {ready}\nsluice_queue_depth{{state=\"leased\"}} 8\n"
        )
    };
    let before = Scrape::parse(&depth(100)).map(|d| Scrape {
        samples: [before.samples, d.samples].concat(),
    });
    let after = Scrape::parse(&depth(300)).map(|d| Scrape {
        samples: [after.samples, d.samples].concat(),
    });
    let m = from_scrapes(&before.expect("before"), &after.expect("after"), 10.0);
    assert_eq!(m.backlog_growth_per_s, Some(20.0));
    let report = plan::plan(&m, &PlanOptions::default()).expect("plan");
    // 100 completed attempts in 10 s plus 20/s of growth.
    assert!((report.offered_rate_per_s - 30.0).abs() < 1e-9);
    assert!(report.warnings.iter().any(|w| w.contains("backlog grew")));
}
