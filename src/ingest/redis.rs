//! A Redis stream as a source, read through a consumer group (created at the stream's start
//! when missing). An entry's `body` field is the event. Each entry is acknowledged (`XACK`)
//! once its event is stored; a refused one is first added to the refusals stream with the
//! reason, then acknowledged. What this consumer read and never acknowledged (a crash) is
//! read again first on start; what a consumer that is gone left pending is claimed after
//! [`CLAIM_IDLE`].

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::settings::{Broker, Source};
use super::{Outcome, Taker, Trace};

/// How long an entry stays pending with another consumer before this one claims it: far
/// longer than storing one takes, so only a consumer that is gone loses its entries.
pub(super) const CLAIM_IDLE: Duration = Duration::from_secs(60);

/// How long a blocking read waits before it reads again (and so notices a connection gone
/// quiet).
const READ_BLOCK: Duration = Duration::from_secs(5);

/// One `XREADGROUP` answer: per stream, its entries, each an id and its fields (none when the
/// entry was deleted while pending).
type Entries = Option<Vec<(String, Vec<(String, Option<Vec<(String, Vec<u8>)>>)>)>>;

/// Consume the source's stream until the connection fails; the error says why.
pub(super) async fn consume(taker: &Taker, source: &Source, backoff: &mut Backoff) -> String {
    match consume_until_error(taker, source, backoff).await {
        Ok(()) => "stopped".into(),
        Err(e) => e.to_string(),
    }
}

async fn consume_until_error(
    taker: &Taker,
    source: &Source,
    backoff: &mut Backoff,
) -> redis::RedisResult<()> {
    let Broker::Redis {
        stream,
        group,
        consumer,
        refused,
    } = &source.broker
    else {
        return Ok(());
    };
    let me = consumer
        .clone()
        .unwrap_or_else(|| match crate::dispatcher::host_name() {
            "" => "sluice".to_owned(),
            host => format!("sluice-{host}"),
        });
    let client = redis::Client::open(source.url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let made: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await;
    if let Err(e) = made
        && e.code() != Some("BUSYGROUP")
    {
        return Err(e);
    }
    // A blocking read needs a connection of its own: the multiplexed one would wait behind it.
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(READ_BLOCK + Duration::from_secs(10)));
    let mut reader = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    backoff.succeeded();
    let count = usize::from(source.prefetch);
    // Our own pending entries first ("0"), then new ones (">").
    let mut pending = true;
    let mut claimed_at: Option<Instant> = None;
    loop {
        if claimed_at.is_none_or(|at| at.elapsed() >= CLAIM_IDLE) {
            // Entries a gone consumer left pending become ours, read with our own pending.
            let _: redis::Value = redis::cmd("XAUTOCLAIM")
                .arg(stream)
                .arg(group)
                .arg(&me)
                .arg(CLAIM_IDLE.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(count)
                .arg("JUSTID")
                .query_async(&mut conn)
                .await?;
            claimed_at = Some(Instant::now());
            pending = true;
        }
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(group)
            .arg(&me)
            .arg("COUNT")
            .arg(count);
        if !pending {
            read.arg("BLOCK").arg(READ_BLOCK.as_millis() as u64);
        }
        read.arg("STREAMS")
            .arg(stream)
            .arg(if pending { "0" } else { ">" });
        let entries: Entries = read.query_async(&mut reader).await?;
        let entries: Vec<_> = entries
            .unwrap_or_default()
            .into_iter()
            .flat_map(|(_, entries)| entries)
            .collect();
        if pending && entries.is_empty() {
            pending = false;
            continue;
        }
        let tasks = entries.into_iter().map(|(id, fields)| {
            let mut conn = conn.clone();
            async move {
                let deleted = fields.is_none();
                let mut fields = fields.unwrap_or_default();
                let mut field = |name: &str| {
                    let at = fields.iter().position(|(k, _)| k == name)?;
                    Some(fields.swap_remove(at).1)
                };
                let body = field("body");
                let text = |v: Vec<u8>| String::from_utf8(v).ok();
                let trace = Trace {
                    parent: field("traceparent").and_then(text),
                    state: field("tracestate").and_then(text),
                };
                let outcome = match &body {
                    Some(body) => {
                        let identity = format!("redis:{stream}:{id}");
                        taker.take(body, Some(&identity), &trace).await
                    }
                    // Deleted or trimmed while pending: nothing is left to take or refuse.
                    None if deleted => Outcome::Stored { duplicate: true },
                    None => taker.refuse("the entry has no `body` field".into()),
                };
                if let Outcome::Refused(reason) = &outcome {
                    refuse(&mut conn, refused, stream, &id, body.as_deref(), reason).await?;
                }
                let _: i64 = redis::cmd("XACK")
                    .arg(stream)
                    .arg(group)
                    .arg(&id)
                    .query_async(&mut conn)
                    .await?;
                Ok::<_, redis::RedisError>(())
            }
        });
        for done in futures_util::future::join_all(tasks).await {
            done?;
        }
    }
}

/// Add a refused entry to the refusals stream: its body, the reason, and where it came from.
async fn refuse(
    conn: &mut MultiplexedConnection,
    refused: &str,
    stream: &str,
    id: &str,
    body: Option<&[u8]>,
    reason: &str,
) -> redis::RedisResult<()> {
    let _: String = redis::cmd("XADD")
        .arg(refused)
        .arg("*")
        .arg("body")
        .arg(body.unwrap_or_default())
        .arg("reason")
        .arg(reason)
        .arg("stream")
        .arg(stream)
        .arg("id")
        .arg(id)
        .query_async(conn)
        .await?;
    Ok(())
}
