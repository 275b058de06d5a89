//! A RabbitMQ queue as a source: consumed with manual acknowledgement and a prefetch of the
//! source's bound; each delivery acknowledged once its event is stored, or rejected without
//! requeue when it is refused, so the queue's dead-letter exchange (`x-dead-letter-exchange`,
//! the operator's set-up) receives it with an `x-death` header.

use futures_util::TryStreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties};

use super::backoff::Backoff;
use super::settings::{Broker, Source};
use super::{Outcome, Taker, Trace};

/// The consumer tag sluice consumes as (seen in the management UI).
const TAG: &str = "sluice-ingest";

/// Consume the source's queue until the connection fails; the error says why.
pub(super) async fn consume(taker: &Taker, source: &Source, backoff: &mut Backoff) -> String {
    match consume_until_error(taker, source, backoff).await {
        Ok(()) => "the broker cancelled the consumer".into(),
        Err(e) => e.to_string(),
    }
}

async fn consume_until_error(
    taker: &Taker,
    source: &Source,
    backoff: &mut Backoff,
) -> lapin::Result<()> {
    let Broker::Rabbitmq { queue } = &source.broker else {
        return Ok(());
    };
    let conn = Connection::connect(&source.url, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .basic_qos(source.prefetch, BasicQosOptions::default())
        .await?;
    // The queue is the producer's, declared with its own arguments (its dead-letter exchange
    // among them): consuming a queue that does not exist fails, and is tried again.
    let consumer = channel
        .basic_consume(
            queue.as_str().into(),
            TAG.into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    backoff.succeeded();
    consumer
        .try_for_each_concurrent(usize::from(source.prefetch), |delivery| async move {
            let identity = delivery
                .properties
                .message_id()
                .as_ref()
                .map(|id| format!("rabbitmq:{queue}:{id}"));
            let headers = delivery.properties.headers().as_ref();
            let header = |name: &str| match headers.and_then(|h| h.inner().get(name)) {
                Some(AMQPValue::LongString(s)) => {
                    Some(String::from_utf8_lossy(s.as_bytes()).into())
                }
                Some(AMQPValue::ShortString(s)) => Some(s.as_str().to_owned()),
                _ => None,
            };
            let trace = Trace {
                parent: header("traceparent"),
                state: header("tracestate"),
            };
            match taker
                .take(&delivery.data, identity.as_deref(), &trace)
                .await
            {
                Outcome::Stored { .. } => delivery.ack(BasicAckOptions::default()).await?,
                Outcome::Refused(_) => {
                    delivery
                        .reject(BasicRejectOptions { requeue: false })
                        .await?
                }
            };
            Ok(())
        })
        .await?;
    let _ = conn.close(200, "sluice ingest stopped".into()).await;
    Ok(())
}
