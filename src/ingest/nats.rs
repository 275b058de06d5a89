//! A NATS JetStream durable pull consumer as a source: created when missing (explicit acks,
//! every message of the stream, at most the source's bound unacknowledged), each message
//! acknowledged once its event is stored, or terminated (`Term`, with the reason on a server
//! that takes one) when it is refused; the server then never redelivers it and publishes a
//! `MSG_TERMINATED` advisory, and the message stays in the stream.

use async_nats::jetstream::{self, AckKind, consumer};
use futures_util::TryStreamExt;

use super::backoff::Backoff;
use super::settings::{Broker, Source};
use super::{Outcome, Taker, Trace};

/// Boxed errors, as async-nats answers them.
type Error = Box<dyn std::error::Error + Send + Sync>;

/// Consume the source's consumer until the connection fails; the error says why.
pub(super) async fn consume(taker: &Taker, source: &Source, backoff: &mut Backoff) -> String {
    match consume_until_error(taker, source, backoff).await {
        Ok(()) => "the server ended the consumer".into(),
        Err(e) => e.to_string(),
    }
}

async fn consume_until_error(
    taker: &Taker,
    source: &Source,
    backoff: &mut Backoff,
) -> Result<(), Error> {
    let Broker::Nats {
        stream,
        consumer: name,
    } = &source.broker
    else {
        return Ok(());
    };
    let client = async_nats::connect(source.url.as_str()).await?;
    // "+TERM <reason>" is understood from nats-server 2.10.4; an older one reads it as no
    // acknowledgement at all and would redeliver forever, so it gets a bare "+TERM".
    let reason_taken = version_at_least(&client.server_info().version, (2, 10, 4));
    let js = jetstream::new(client.clone());
    let consumer: consumer::PullConsumer = js
        .get_stream(stream)
        .await?
        .get_or_create_consumer(
            name,
            consumer::pull::Config {
                durable_name: Some(name.clone()),
                ack_policy: consumer::AckPolicy::Explicit,
                max_ack_pending: i64::from(source.prefetch),
                ..Default::default()
            },
        )
        .await?;
    let messages = consumer.messages().await?;
    backoff.succeeded();
    messages
        .map_err(Error::from)
        .try_for_each_concurrent(usize::from(source.prefetch), |message| {
            let client = client.clone();
            async move {
                let identity = message
                    .info()
                    .map(|i| format!("nats:{}:{}", i.stream, i.stream_sequence))
                    .ok();
                let header = |name: &str| {
                    let headers = message.headers.as_ref()?;
                    headers.get(name).map(|v| v.as_str().to_owned())
                };
                let trace = Trace {
                    parent: header("traceparent"),
                    state: header("tracestate"),
                };
                match taker
                    .take(&message.payload, identity.as_deref(), &trace)
                    .await
                {
                    Outcome::Stored { .. } => message.ack().await?,
                    Outcome::Refused(reason) if reason_taken => {
                        let reply = message.reply.clone().ok_or("not a JetStream message")?;
                        client
                            .publish(reply, format!("+TERM {reason}").into())
                            .await?;
                    }
                    Outcome::Refused(_) => message.ack_with(AckKind::Term).await?,
                }
                Ok(())
            }
        })
        .await
}

/// Is `version` (`2.10.4`, `2.11.0-beta`) at least `least`?
fn version_at_least(version: &str, least: (u64, u64, u64)) -> bool {
    let mut parts = version
        .split(['.', '-'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next()) >= least
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_reason_needs_2_10_4() {
        assert!(!version_at_least("2.9.10", (2, 10, 4)));
        assert!(!version_at_least("2.10.3", (2, 10, 4)));
        assert!(version_at_least("2.10.4", (2, 10, 4)));
        assert!(version_at_least("2.11.0-beta", (2, 10, 4)));
    }
}
