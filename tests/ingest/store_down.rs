//! A store that cannot take events is not the events' fault: while the database is locked
//! past the store deadline, what arrives stays unacknowledged and is tried again with backoff,
//! never refused, and is stored once the database is back.

use std::time::Duration;

use super::redis_streams::{REDIS, pending, publish, redis};
use super::{Ingesting, WAIT, event, eventually, test_settings, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_wait_for_a_store_that_is_down_and_none_is_refused() {
    const EVENTS: usize = 10;
    let Some(mut conn) = redis().await else {
        return;
    };
    let stream = unique("sluice-ingest-");
    let dir = tempfile::tempdir().unwrap();
    let s = Ingesting::start_with(sluice::config::RawSettings {
        ingest_from: vec![format!("{REDIS}?stream={stream}")],
        data_dir: Some(dir.path().to_path_buf()),
        store_deadline: Some("300ms".into()),
        ..test_settings()
    })
    .await;
    let source = format!("redis:{stream}/sluice");

    // The database's write lock, held by another connection past the store deadline.
    let db = rusqlite::Connection::open(dir.path().join("sluice.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    for i in 0..EVENTS {
        publish(&mut conn, &stream, &event(&s.tenant, i)).await;
    }
    assert!(
        eventually(WAIT, || async { s.counted(&source, "retried").await >= 2 }).await,
        "the events were not tried again while the store was down"
    );
    // What was read is kept pending (the rest waits unread behind it).
    assert!(
        pending(&mut conn, &stream, "sluice").await >= 1,
        "kept unacknowledged"
    );
    db.execute_batch("ROLLBACK").unwrap();
    drop(db);

    assert!(
        s.delivered(EVENTS).await,
        "not delivered once the store was back"
    );
    assert_eq!(s.verified(), (0..EVENTS as u64).collect());
    assert_eq!(s.counted(&source, "refused").await, 0);
    assert!(
        eventually(Duration::from_secs(10), || async {
            pending(&mut conn.clone(), &stream, "sluice").await == 0
        })
        .await
    );
    s.sluice.stop().await;
}
