//! A Redis stream read through consumer groups: its events are delivered, a poison entry is
//! added to the refusals stream with its reason and acknowledged, and a second group reading
//! the same stream again stores nothing twice.

use redis::aio::MultiplexedConnection;

use super::{Ingesting, WAIT, event, eventually, poison, support, unique};

/// Redis as sluice is given it (without the stream).
pub(super) const REDIS: &str = "redis://127.0.0.1:6379/0";

/// A connection to the test Redis, or None (a loud skip).
pub(super) async fn redis() -> Option<MultiplexedConnection> {
    let url = support::redis_url()?;
    let client = redis::Client::open(url).unwrap();
    Some(client.get_multiplexed_async_connection().await.unwrap())
}

/// Add an entry whose `body` is `body`.
pub(super) async fn publish(conn: &mut MultiplexedConnection, stream: &str, body: &[u8]) {
    let _: String = redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg("body")
        .arg(body)
        .query_async(conn)
        .await
        .unwrap();
}

/// Entries a group has read and not acknowledged.
pub(super) async fn pending(conn: &mut MultiplexedConnection, stream: &str, group: &str) -> i64 {
    let summary: redis::Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(conn)
        .await
        .unwrap();
    match summary {
        redis::Value::Array(items) => redis::from_redis_value(items[0].clone()).unwrap(),
        other => panic!("XPENDING: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_goes_to_the_refusals_stream_and_a_second_group_stores_nothing() {
    const GOOD: usize = 30;
    let Some(mut conn) = redis().await else {
        return;
    };
    let stream = unique("sluice-ingest-");
    let s = Ingesting::start(&[
        format!("{REDIS}?stream={stream}&group=a&prefetch=8"),
        format!("{REDIS}?stream={stream}&group=b&refused={stream}:refused-b"),
    ])
    .await;
    let poison = poison(&s.tenant);
    for i in 0..GOOD {
        publish(&mut conn, &stream, &event(&s.tenant, i)).await;
        if let Some(bad) = poison.get(i / 10).filter(|_| i % 10 == 5) {
            publish(&mut conn, &stream, bad).await;
        }
    }
    assert!(
        s.delivered(GOOD).await,
        "the good events were not all delivered"
    );
    assert_eq!(s.verified(), (0..GOOD as u64).collect());
    for (group, refused) in [
        ("a", format!("{stream}:refused")),
        ("b", format!("{stream}:refused-b")),
    ] {
        let source = format!("redis:{stream}/{group}");
        assert!(
            eventually(WAIT, || async {
                s.counted(&source, "refused").await == 3
                    && s.counted(&source, "stored").await + s.counted(&source, "duplicate").await
                        == GOOD as u64
            })
            .await,
            "{source}: every entry taken once:\n{}",
            super::ingest_metrics(&s.sluice).await
        );
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(&refused)
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(entries.len(), 3, "{refused}: {entries:?}");
        let field = |e: &(String, Vec<(String, String)>), k: &str| {
            e.1.iter()
                .find(|(f, _)| f == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        // Taken concurrently: refused in any order, each with its reason and origin.
        for (body, reason) in [
            ("this is not json", "the body is not an event"),
            ("ten_nobody", "tenant_id: no tenant"),
            ("order created", "event_type: "),
        ] {
            let refusal = entries
                .iter()
                .find(|e| field(e, "body").contains(body))
                .unwrap_or_else(|| panic!("{body} not refused: {entries:?}"));
            assert!(field(refusal, "reason").starts_with(reason), "{entries:?}");
            assert_eq!(field(refusal, "stream"), stream);
            assert!(!field(refusal, "id").is_empty());
        }
        assert_eq!(
            pending(&mut conn, &stream, group).await,
            0,
            "{group}: all acknowledged"
        );
    }
    assert_eq!(s.stored().await, GOOD, "the second reading stored nothing");
    s.sluice.stop().await;
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .arg(format!("{stream}:refused"))
        .arg(format!("{stream}:refused-b"))
        .query_async(&mut conn)
        .await
        .unwrap();
}
