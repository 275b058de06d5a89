//! Fleet-wide lanes against real Redis servers: each test starts its own private `redis-server`
//! on a free loopback port (so it can kill and restart it), never a mock.
//!
//! Without a `redis-server` binary the tests are skipped loudly, unless
//! `SLUICE_REQUIRE_SERVICES=1`, where that is a failure. `SLUICE_REDIS_SERVER` may name the binary.

use sluice_testkit as support;
use support::RedisServer;

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use sluice::admission::fleet::{FleetAcquire, FleetError, FleetLanes, FleetSettings};

/// A plain connection for inspecting what the fleet wrote.
async fn inspect(server: &RedisServer) -> MultiplexedConnection {
    try_connect(&server.url())
        .await
        .expect("inspection connection")
}

async fn try_connect(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// Test settings: a fast heartbeat so the tests take seconds, not minutes.
fn settings(process_id: &str) -> FleetSettings {
    FleetSettings {
        key_prefix: "sluice-test".to_string(),
        slot_ttl: Duration::from_secs(60),
        heartbeat: Duration::from_millis(100),
        redis_timeout: Duration::from_millis(250),
        process_id: process_id.to_string(),
    }
}

async fn fleet(server: &RedisServer, process_id: &str) -> FleetLanes {
    FleetLanes::connect(&server.url(), settings(process_id))
        .await
        .expect("connect fleet lanes")
}

/// Redis's own clock in milliseconds, computed as the scripts do.
async fn redis_now_ms(conn: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1000 + micros / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowance_holds_across_three_dispatchers() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let mut lanes = Vec::new();
    for i in 0..3 {
        lanes.push(fleet(&server, &format!("dispatcher-{i}")).await);
    }
    let held = Arc::new(AtomicU32::new(0));
    let max_held = Arc::new(AtomicU32::new(0));
    let inspect = inspect(&server).await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (lane, held, max_held) = (lanes[i % 3].clone(), held.clone(), max_held.clone());
        let mut inspect = inspect.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let slot = loop {
                    match lane.try_acquire("ep_busy", 4).await {
                        FleetAcquire::Acquired(slot) => break slot,
                        FleetAcquire::Full => tokio::time::sleep(Duration::from_millis(2)).await,
                        FleetAcquire::Unavailable => panic!("redis is up"),
                    }
                };
                let now_held = held.fetch_add(1, Ordering::SeqCst) + 1;
                max_held.fetch_max(now_held, Ordering::SeqCst);
                let in_redis: u32 = inspect.zcard("sluice-test:lane:ep_busy").await.unwrap();
                assert!(
                    in_redis <= 4,
                    "{in_redis} holders in Redis for an allowance of 4"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
                held.fetch_sub(1, Ordering::SeqCst);
                lane.release(slot).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("acquirer task");
    }
    assert_eq!(
        max_held.load(Ordering::SeqCst),
        4,
        "20 acquirers should fill the lane"
    );
    let left: u32 = inspect
        .clone()
        .zcard("sluice-test:lane:ep_busy")
        .await
        .unwrap();
    assert_eq!(left, 0, "every slot was released");
}

#[tokio::test]
async fn release_frees_a_slot() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let (a, b) = (fleet(&server, "a").await, fleet(&server, "b").await);
    let FleetAcquire::Acquired(slot) = a.try_acquire("ep_one", 1).await else {
        panic!("an empty lane admits");
    };
    assert_eq!(b.try_acquire("ep_one", 1).await, FleetAcquire::Full);
    assert_eq!(slot.lane_key(), "sluice-test:lane:ep_one");
    assert!(slot.member().starts_with("a:"));
    a.release(slot).await;
    assert!(matches!(
        b.try_acquire("ep_one", 1).await,
        FleetAcquire::Acquired(_)
    ));
    // Another endpoint's lane is independent.
    assert!(matches!(
        a.try_acquire("ep_two", 1).await,
        FleetAcquire::Acquired(_)
    ));
}

/// A slot whose release never reached Redis (its holder still running and beating) frees
/// itself after its ttl.
#[tokio::test]
async fn a_lost_release_frees_itself_after_the_slot_ttl() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    // Beats of 1 s (a live entry of 3 s): a stalled beat on a busy machine cannot make the
    // holder look dead, so only the slot's ttl can free it.
    let short = FleetSettings {
        slot_ttl: Duration::from_secs(1),
        heartbeat: Duration::from_secs(1),
        ..settings("loses-a-release")
    };
    let holder = FleetLanes::connect(&server.url(), short).await.unwrap();
    let FleetAcquire::Acquired(slot) = holder.try_acquire("ep_leak", 1).await else {
        panic!("an empty lane admits");
    };
    // The slot vanishes without a release; its process lives on, beating.
    drop(slot);
    let other = fleet(&server, "other").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(other.try_acquire("ep_leak", 1).await, FleetAcquire::Full);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(matches!(
        other.try_acquire("ep_leak", 1).await,
        FleetAcquire::Acquired(_)
    ));
    drop(holder);
}

/// A killed dispatcher's slot: held while its live entry lasts, then pruned by the next acquire
/// once the entry has expired (three heartbeats), long before the slot's own 60 s ttl.
#[tokio::test]
async fn a_killed_dispatchers_slot_comes_back_after_three_heartbeats() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let beats = |id: &str| FleetSettings {
        heartbeat: Duration::from_secs(1),
        ..settings(id)
    };
    let killed = FleetLanes::connect(&server.url(), beats("killed"))
        .await
        .unwrap();
    let survivor = FleetLanes::connect(&server.url(), beats("survivor"))
        .await
        .unwrap();
    let FleetAcquire::Acquired(slot) = killed.try_acquire("ep_orphan", 1).await else {
        panic!("an empty lane admits");
    };
    // Killed: no release, no more heartbeats.
    drop(slot);
    drop(killed);
    assert_eq!(
        survivor.try_acquire("ep_orphan", 1).await,
        FleetAcquire::Full
    );
    let back = support::eventually(Duration::from_secs(20), || async {
        matches!(
            survivor.try_acquire("ep_orphan", 1).await,
            FleetAcquire::Acquired(_)
        )
    })
    .await;
    assert!(
        back,
        "the killed dispatcher's slot was not pruned within 20 s (slot ttl 60 s)"
    );
}

/// After Redis comes back empty, a live dispatcher may hold a slot before it has beaten again:
/// that young holder is not an orphan, and the lane stays full for the others. (Heartbeats of
/// 30 s: no beat happens during the test, so only the holder's age protects it.)
#[tokio::test]
async fn a_young_holder_of_an_unregistered_dispatcher_is_not_pruned() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let slow_beats = |id: &str| FleetSettings {
        heartbeat: Duration::from_secs(30),
        ..settings(id)
    };
    let first = FleetLanes::connect(&server.url(), slow_beats("first"))
        .await
        .unwrap();
    let second = FleetLanes::connect(&server.url(), slow_beats("second"))
        .await
        .unwrap();
    let mut conn = inspect(&server).await;
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let FleetAcquire::Acquired(_slot) = first.try_acquire("ep_young", 1).await else {
        panic!("an empty lane admits");
    };
    let live: Option<f64> = conn
        .zscore("sluice-test:dispatchers", "first")
        .await
        .unwrap();
    assert_eq!(live, None, "the holder's dispatcher is not registered");
    assert_eq!(second.try_acquire("ep_young", 1).await, FleetAcquire::Full);
}

/// How this shows Redis's clock is used: the script takes no timestamp argument (checked by the
/// unit test in `fleet/scripts.rs`), and the score Redis stored equals `TIME` + ttl, bracketed by
/// two `TIME` reads around the acquire. On one host both clocks agree, so the value alone cannot
/// tell them apart; the bracket and the argument list together leave only Redis's clock.
/// Then a holder whose expiry is set by hand from Redis `TIME` is seen expired exactly when
/// Redis's clock passes it.
#[tokio::test]
async fn slot_expiry_is_scored_on_the_redis_clock() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let lanes = fleet(&server, "clock").await;
    let mut inspect = inspect(&server).await;
    let before_ms = redis_now_ms(&mut inspect).await;
    let FleetAcquire::Acquired(slot) = lanes.try_acquire("ep_clock", 2).await else {
        panic!("an empty lane admits");
    };
    let after_ms = redis_now_ms(&mut inspect).await;
    let score: f64 = inspect
        .zscore(slot.lane_key(), slot.member())
        .await
        .unwrap();
    let ttl_ms = 60_000;
    assert!(
        (before_ms + ttl_ms) as f64 <= score && score <= (after_ms + ttl_ms) as f64,
        "score {score} is not Redis TIME + ttl (TIME was {before_ms}..{after_ms})"
    );
    let pttl: i64 = inspect.pttl(slot.lane_key()).await.unwrap();
    assert!(pttl > 55_000 && pttl <= 60_000, "lane key expiry {pttl} ms");

    // A foreign holder that Redis's clock says expires 300 ms from now, of a dispatcher that is
    // live for the whole test (so only its expiry can free it, not its process's death).
    let expires_ms = redis_now_ms(&mut inspect).await + 300;
    let _: () = inspect
        .zadd("sluice-test:dispatchers", "foreign", expires_ms + 60_000)
        .await
        .unwrap();
    let _: () = inspect
        .zadd(slot.lane_key(), "foreign:1", expires_ms)
        .await
        .unwrap();
    assert_eq!(lanes.try_acquire("ep_clock", 2).await, FleetAcquire::Full);
    while redis_now_ms(&mut inspect).await <= expires_ms {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(
        lanes.try_acquire("ep_clock", 2).await,
        FleetAcquire::Acquired(_)
    ));
}

#[tokio::test]
async fn live_dispatchers_divide_the_local_share() {
    let Some(server) = RedisServer::start().await else {
        return;
    };
    let mut lanes = Vec::new();
    for i in 0..3 {
        lanes.push(fleet(&server, &format!("live-{i}")).await);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while lanes.iter().any(|l| l.live_dispatchers() != 3) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for lane in &lanes {
        assert_eq!(lane.live_dispatchers(), 3);
        assert_eq!(lane.local_share(8), 2, "8 / 3 floors to 2");
        assert_eq!(lane.local_share(2), 1, "never below 1");
        assert!(!lane.is_degraded());
    }
    // One leaves cleanly: the other two see 2 within a few heartbeats, and their shares grow.
    let gone = lanes.pop().unwrap();
    gone.leave().await;
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(3);
    while lanes.iter().any(|l| l.live_dispatchers() != 2) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lanes.iter().all(|l| l.local_share(8) == 4));
}

/// A Redis that restarts empty knows only the dispatchers that beat since: the first to beat
/// must not count itself alone (its local share would become the whole allowance while the
/// others' outage-share attempts still run: a fleet of 3 on a lane of 3 reached 4 in flight).
#[tokio::test]
async fn a_restarted_redis_does_not_shrink_the_live_count() {
    let Some(mut server) = RedisServer::start().await else {
        return;
    };
    let mut lanes = Vec::new();
    for i in 0..3 {
        lanes.push(fleet(&server, &format!("restart-{i}")).await);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while lanes.iter().any(|l| l.live_dispatchers() != 3) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lanes.iter().all(|l| l.live_dispatchers() == 3));
    server.stop();
    // Every handle notices the outage (a beat fails within a heartbeat and the Redis timeout).
    let deadline = Instant::now() + Duration::from_secs(5);
    while lanes.iter().any(|l| !l.is_degraded()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lanes.iter().all(FleetLanes::is_degraded));
    server.restart().await.expect("redis-server");
    // Watch every handle from the restart until all are back and a few beats have passed.
    let mut lowest = u32::MAX;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut back_at = None;
    while Instant::now() < deadline {
        for lane in &lanes {
            lowest = lowest.min(lane.live_dispatchers());
        }
        if back_at.is_none() && lanes.iter().all(|l| !l.is_degraded()) {
            back_at = Some(Instant::now());
        }
        if back_at.is_some_and(|at| at.elapsed() > Duration::from_millis(500)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(back_at.is_some(), "the handles did not see Redis return");
    assert_eq!(
        lowest, 3,
        "a handle counted fewer live dispatchers after the restart"
    );
    assert!(lanes.iter().all(|l| l.local_share(3) == 1));
}

/// Collects what the fmt subscriber writes, to count the degrade/restore log lines.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn count(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .matches(needle)
            .count()
    }
}

// current-thread runtime: every task runs on this thread, under the capturing subscriber.
#[tokio::test]
async fn redis_outage_degrades_quickly_and_recovers() {
    let Some(mut server) = RedisServer::start().await else {
        return;
    };
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let lanes = FleetLanes::connect(
        &server.url(),
        FleetSettings {
            heartbeat: Duration::from_millis(200),
            ..settings("outage")
        },
    )
    .await
    .unwrap();
    let FleetAcquire::Acquired(slot) = lanes.try_acquire("ep_out", 4).await else {
        panic!("redis is up");
    };
    lanes.release(slot).await;

    server.stop();
    let started = Instant::now();
    assert_eq!(
        lanes.try_acquire("ep_out", 4).await,
        FleetAcquire::Unavailable
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(lanes.is_degraded());
    // While degraded, calls do not touch Redis: a hundred answer at once.
    let started = Instant::now();
    for _ in 0..100 {
        assert_eq!(
            lanes.try_acquire("ep_out", 4).await,
            FleetAcquire::Unavailable
        );
    }
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(lanes.live_dispatchers(), 1, "last known count kept");
    assert_eq!(lanes.local_share(4), 4);
    tokio::time::sleep(Duration::from_millis(600)).await; // a few failed heartbeats

    server.restart().await.expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(5);
    let slot = loop {
        match lanes.try_acquire("ep_out", 4).await {
            FleetAcquire::Acquired(slot) => break slot,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("still {other:?} 5 s after redis came back"),
        }
    };
    assert!(!lanes.is_degraded());
    lanes.release(slot).await;
    assert_eq!(
        logs.count("redis unreachable: lanes fall back to a local share"),
        1
    );
    assert_eq!(logs.count("redis is back: fleet-wide lanes restored"), 1);
}

#[tokio::test]
async fn connect_succeeds_while_redis_is_down() {
    let Some(mut server) = RedisServer::not_started() else {
        return;
    };
    let started = Instant::now();
    let lanes = fleet(&server, "early").await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(lanes.is_degraded());
    assert_eq!(
        lanes.try_acquire("ep_early", 2).await,
        FleetAcquire::Unavailable
    );
    assert_eq!(lanes.local_share(2), 2, "alone as far as it knows");

    server.restart().await.expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !matches!(
        lanes.try_acquire("ep_early", 2).await,
        FleetAcquire::Acquired(_)
    ) {
        assert!(
            Instant::now() < deadline,
            "not back 5 s after redis came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!lanes.is_degraded());
}

#[tokio::test]
async fn invalid_settings_are_all_reported() {
    let bad = FleetSettings {
        key_prefix: String::new(),
        slot_ttl: Duration::ZERO,
        heartbeat: Duration::ZERO,
        redis_timeout: Duration::ZERO,
        process_id: String::new(),
    };
    match FleetLanes::connect("redis://127.0.0.1:1", bad).await {
        Err(FleetError::InvalidSettings(problems)) => assert_eq!(problems.len(), 5),
        other => panic!("expected invalid settings, got {other:?}"),
    }
    let err = FleetLanes::connect("not a url", FleetSettings::default()).await;
    assert!(matches!(err, Err(FleetError::InvalidUrl(_))));
}
