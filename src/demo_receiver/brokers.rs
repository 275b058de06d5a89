//! `sluice receive --from <broker URL>`: consume what a broker destination publishes, as its
//! consumer would, print each message with its verdict, and acknowledge it to the broker only
//! when it is accepted. A refused message (signature missing, stale or wrong) is rejected the
//! broker's own way: RabbitMQ `basic.reject` without requeue (to the queue's dead-letter
//! exchange, if it has one), JetStream `Term`; a Redis stream has no refusal, so it is
//! acknowledged after being printed as refused.
//!
//! The receiver makes what it reads from if it is missing, as a consumer's set-up would: a
//! durable RabbitMQ queue, a JetStream stream capturing the subject (unless one already
//! does), a Redis stream with the consumer group `sluice-receive`.

use futures_util::StreamExt;

use super::{Check, print};

/// The consumer group (Redis) and consumer tag (RabbitMQ) the receiver reads as.
const CONSUMER: &str = "sluice-receive";

/// Where to consume from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A RabbitMQ queue (`amqp://user:password@host:port/vhost`).
    Rabbitmq {
        /// The broker's URL.
        url: String,
        /// The queue: a destination's `routing_key` on the default exchange.
        queue: String,
    },
    /// A NATS JetStream subject (`nats://host:port`).
    Nats {
        /// The server's URL.
        url: String,
        /// The subject a destination publishes to.
        subject: String,
    },
    /// A Redis stream (`redis://host:port/db`).
    Redis {
        /// The server's URL.
        url: String,
        /// The stream a destination adds to.
        stream: String,
    },
}

impl Source {
    /// The source `url` names by its scheme, reading `name` (the queue, subject or stream).
    pub fn parse(url: &str, name: &str) -> Result<Source, String> {
        let scheme = url.split_once("://").map_or("", |(s, _)| s);
        let (url, name) = (url.to_owned(), name.to_owned());
        if name.is_empty() {
            return Err(format!(
                "--from {scheme}:// needs what to read: --queue (RabbitMQ), --subject (NATS) or \
                 --stream (Redis)"
            ));
        }
        match scheme {
            "amqp" | "amqps" => Ok(Source::Rabbitmq { url, queue: name }),
            "nats" | "tls" => Ok(Source::Nats { url, subject: name }),
            "redis" | "rediss" => Ok(Source::Redis { url, stream: name }),
            _ => Err(format!(
                "--from: {scheme:?} is not a broker scheme (amqp://, nats:// or redis://)"
            )),
        }
    }
}

/// Consume `source` until the process ends or the broker goes away.
pub async fn print_forever(source: &Source, check: Check) -> anyhow::Result<()> {
    match source {
        Source::Rabbitmq { url, queue } => rabbitmq(url, queue, &check).await,
        Source::Nats { url, subject } => nats(url, subject, &check).await,
        Source::Redis { url, stream } => redis(url, stream, &check).await,
    }
}

/// Verdict of one message from its headers, printed.
fn judge(check: &Check, header: impl Fn(&str) -> String, body: &[u8]) -> super::Verdict {
    let id = header(crate::signing::WEBHOOK_ID);
    let verdict = check.verdict(
        &id,
        &header(crate::signing::WEBHOOK_TIMESTAMP),
        &header(crate::signing::WEBHOOK_SIGNATURE),
        body,
    );
    print(&id, verdict, body);
    verdict
}

async fn rabbitmq(url: &str, queue: &str, check: &Check) -> anyhow::Result<()> {
    use lapin::options::{
        BasicAckOptions, BasicConsumeOptions, BasicRejectOptions, QueueDeclareOptions,
    };
    use lapin::types::{AMQPValue, FieldTable};

    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            CONSUMER.into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    println!("receiving from RabbitMQ queue {queue:?}");
    while let Some(delivery) = consumer.next().await {
        let delivery = delivery?;
        let headers = delivery.properties.headers().clone().unwrap_or_default();
        let header = |name: &str| match headers.inner().get(name) {
            Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            _ => String::new(),
        };
        match judge(check, header, &delivery.data).accepted {
            true => delivery.ack(BasicAckOptions::default()).await?,
            false => {
                delivery
                    .reject(BasicRejectOptions { requeue: false })
                    .await?
            }
        };
    }
    Ok(())
}

async fn nats(url: &str, subject: &str, check: &Check) -> anyhow::Result<()> {
    use async_nats::jetstream::{self, AckKind, consumer, context::GetStreamByNameErrorKind};

    let js = jetstream::new(async_nats::connect(url).await?);
    let stream = match js.stream_by_subject(subject).await {
        Ok(name) => js.get_stream(name).await?,
        Err(e) if matches!(e.kind(), GetStreamByNameErrorKind::NotFound) => {
            let name: String = format!("SLUICE_RECEIVE_{subject}")
                .chars()
                .map(
                    |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        true => c.to_ascii_uppercase(),
                        false => '_',
                    },
                )
                .collect();
            js.create_stream(jetstream::stream::Config {
                name,
                subjects: vec![subject.to_owned()],
                ..Default::default()
            })
            .await?;
            js.get_stream(js.stream_by_subject(subject).await?).await?
        }
        Err(e) => return Err(e.into()),
    };
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: subject.to_owned(),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    println!("receiving from NATS JetStream subject {subject:?}");
    while let Some(message) = messages.next().await {
        let message = message?;
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        };
        let verdict = judge(check, header, &message.payload);
        let acked = match verdict.accepted {
            true => message.ack().await,
            false => message.ack_with(AckKind::Term).await,
        };
        acked.map_err(|e| anyhow::anyhow!("acknowledging to JetStream: {e}"))?;
    }
    Ok(())
}

/// One `XREADGROUP` answer: per stream, its entries, each an id and field/value pairs.
type Entries = Option<Vec<(String, Vec<(String, Vec<(String, Vec<u8>)>)>)>>;

async fn redis(url: &str, stream: &str, check: &Check) -> anyhow::Result<()> {
    let client = ::redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let made: ::redis::RedisResult<()> = ::redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(CONSUMER)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await;
    if let Err(e) = made
        && e.code() != Some("BUSYGROUP")
    {
        return Err(e.into());
    }
    println!("receiving from Redis stream {stream:?}");
    // A blocking read needs a connection of its own: the multiplexed one would wait behind it.
    let config = ::redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(30)));
    let mut reader = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    loop {
        let read: Entries = ::redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(CONSUMER)
            .arg(CONSUMER)
            .arg("COUNT")
            .arg(64)
            .arg("BLOCK")
            .arg(5_000)
            .arg("STREAMS")
            .arg(stream)
            .arg(">")
            .query_async(&mut reader)
            .await?;
        for (_, entries) in read.unwrap_or_default() {
            for (entry, fields) in entries {
                let field = |name: &str| {
                    fields
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default()
                };
                let body = fields
                    .iter()
                    .find(|(k, _)| k == "body")
                    .map_or(&[][..], |(_, v)| v.as_slice());
                judge(check, field, body);
                let _: i64 = ::redis::cmd("XACK")
                    .arg(stream)
                    .arg(CONSUMER)
                    .arg(&entry)
                    .query_async(&mut conn)
                    .await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_names_the_broker_and_a_name_is_required() {
        assert_eq!(
            Source::parse("amqp://h/%2f", "orders"),
            Ok(Source::Rabbitmq {
                url: "amqp://h/%2f".into(),
                queue: "orders".into()
            })
        );
        assert!(matches!(
            Source::parse("nats://h:4222", "a.b"),
            Ok(Source::Nats { .. })
        ));
        assert!(matches!(
            Source::parse("rediss://h/0", "s"),
            Ok(Source::Redis { .. })
        ));
        assert!(
            Source::parse("redis://h/0", "")
                .unwrap_err()
                .contains("--stream")
        );
        assert!(
            Source::parse("http://h", "x")
                .unwrap_err()
                .contains("not a broker")
        );
    }
}
