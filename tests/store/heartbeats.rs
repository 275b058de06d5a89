//! The dispatchers' heartbeats: upsert by id, fresh ones read back with their tallies, stale
//! and drained ones forgotten.

use super::*;

fn beat(id: &str, at_ms: i64, in_flight: u32) -> Heartbeat {
    Heartbeat {
        id: id.into(),
        host: format!("{id}.example.internal"),
        started_at_ms: at_ms - 1_000,
        beat_at_ms: at_ms,
        in_flight,
        concurrency: 64,
        capacity: 128,
        arrivals_per_s: 12.5,
        mean_service_s: 0.25,
        draining: false,
        tally: Tally {
            delivered: u64::from(in_flight) * 1_000,
            failed: u64::from(in_flight) * 10,
            shed: u64::from(in_flight),
        },
        host_seconds: HostSeconds {
            hosts: [
                (format!("{id}.hooks.example"), f64::from(in_flight) * 1.25),
                ("127.0.0.1".to_owned(), 0.001),
            ]
            .into(),
            other: f64::from(in_flight) / 3.0,
        },
    }
}

async fn check_heartbeats_upsert_read_and_forget(store: SharedStore) {
    let now = now_ms();
    // On PostgreSQL the first beat of a store just opened waits for its listener, whose
    // backend is what tells a killed process from a live one before its row goes stale.
    assert!(
        store.beat(&beat("dsp_a", now - 60_000, 1)).await.unwrap(),
        "a beat of a store whose listener can connect names its liveness"
    );
    store.beat(&beat("dsp_b", now - 1_000, 2)).await.unwrap();
    store.beat(&beat("dsp_c", now - 500, 3)).await.unwrap();
    // A later beat replaces the row: one row per dispatcher, the newest figures.
    let mut newer = beat("dsp_a", now, 7);
    newer.draining = true;
    newer.arrivals_per_s = f64::NAN;
    store.beat(&newer).await.unwrap();

    let fresh = store.heartbeats(now - 15_000).await.unwrap();
    let ids: Vec<&str> = fresh.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["dsp_a", "dsp_b", "dsp_c"]);
    let a = &fresh[0];
    assert_eq!((a.in_flight, a.draining, a.beat_at_ms), (7, true, now));
    assert_eq!(
        a.started_at_ms,
        now - 61_000,
        "the start is kept from the first beat"
    );
    assert_eq!(
        a.arrivals_per_s, 0.0,
        "a rate that is not a number is stored as 0"
    );
    assert_eq!(fresh[1], beat("dsp_b", now - 1_000, 2));

    // The tally is rewritten with every beat, and read back as written, large counts included.
    assert_eq!(
        a.tally,
        Tally {
            delivered: 7_000,
            failed: 70,
            shed: 7
        }
    );
    let mut busy = beat("dsp_c", now - 500, 3);
    busy.tally.delivered = 5_000_000_000;
    store.beat(&busy).await.unwrap();
    let read = store.heartbeats(now - 600).await.unwrap();
    assert_eq!(read[1], busy);
    // So are the seconds per host: the newest set of named hosts, not merged with the last.
    assert_eq!(a.host_seconds.hosts["dsp_a.hooks.example"], 8.75);
    busy.host_seconds = HostSeconds {
        hosts: [("hot.hooks.example".to_owned(), 86_400.5)].into(),
        other: 1e-6,
    };
    store.beat(&busy).await.unwrap();
    let read = store.heartbeats(now - 600).await.unwrap();
    assert_eq!(read[1].host_seconds, busy.host_seconds);

    // Stale rows are not read.
    assert_eq!(store.heartbeats(now - 700).await.unwrap().len(), 2);
    // dsp_a has drained and dsp_b is older than the purge horizon: both go.
    let gone = store
        .forget_heartbeats(Some("dsp_a"), now - 800)
        .await
        .unwrap();
    assert_eq!(gone, 2);
    let left = store.heartbeats(0).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id, "dsp_c");
}

support::drivers!(check_heartbeats_upsert_read_and_forget);
