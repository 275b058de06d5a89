//! A consumer of each broker, at 127.0.0.1 as `.ci/run` starts them, timing every message it
//! reads into the timeline by the producer's `sent_at_us` in the body (as the HTTP receiver
//! does); each makes its own queue or stream and removes it when finished.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::timeline::{Timeline, sent_at_us};

const RABBITMQ: &str = "amqp://127.0.0.1:5672/%2f";
const NATS: &str = "nats://127.0.0.1:4222";
const REDIS: &str = "redis://127.0.0.1:6379/0";

/// A running consumer: the endpoint's `destination` that delivers to it, the task reading, and
/// what to remove when finished.
pub(crate) struct Consumer {
    pub(crate) destination: Value,
    task: tokio::task::JoinHandle<()>,
    made: Made,
}

impl Consumer {
    /// A consumer of what `destination` delivers to, read by `task`, having made `made`.
    pub(super) fn new(
        destination: Value,
        task: tokio::task::JoinHandle<()>,
        made: Made,
    ) -> Consumer {
        Consumer {
            destination,
            task,
            made,
        }
    }
}

/// What a consumer made on its broker.
pub(super) enum Made {
    Queue(lapin::Channel, lapin::Connection, String),
    Stream(async_nats::jetstream::Context, String),
    Key(redis::aio::MultiplexedConnection, String),
    /// A cloud kind's consumer processes (none for Pub/Sub), stopped when finished; the
    /// emulator itself is the run's to stop.
    Processes(Vec<std::process::Child>),
}

impl Consumer {
    /// Stop reading and remove what it made (best effort: the broker keeps a leftover).
    pub(crate) async fn finish(self) {
        self.task.abort();
        let removed = match self.made {
            Made::Queue(channel, conn, queue) => {
                let deleted = channel
                    .queue_delete(queue.as_str().into(), Default::default())
                    .await
                    .map(drop)
                    .map_err(anyhow::Error::from);
                let _ = conn.close(200, "done".into()).await;
                deleted
            }
            Made::Stream(js, name) => js
                .delete_stream(&name)
                .await
                .map(drop)
                .map_err(anyhow::Error::from),
            Made::Processes(children) => {
                super::cloud::stop(children);
                Ok(())
            }
            Made::Key(mut conn, key) => redis::cmd("DEL")
                .arg(&key)
                .query_async::<()>(&mut conn)
                .await
                .map_err(anyhow::Error::from),
        };
        if let Err(e) = removed {
            eprintln!("destinations: could not remove the bench's queue or stream: {e}");
        }
    }
}

/// A durable queue behind RabbitMQ's default exchange, consumed without acknowledgements,
/// timed into the timeline's `group`.
pub(crate) async fn rabbitmq(timeline: Arc<Timeline>, group: usize) -> anyhow::Result<Consumer> {
    use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    let conn = lapin::Connection::connect(
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        lapin::ConnectionProperties::default(),
    )
    .await
    .context("RabbitMQ at 127.0.0.1:5672 (guest/guest)")?;
    let channel = conn.create_channel().await?;
    let queue = format!("sluice-bench-{}", sluice::ids::new_id("q"));
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let mut deliveries = channel
        .basic_consume(
            queue.as_str().into(),
            "sluice-bench".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let task = tokio::spawn(async move {
        while let Some(Ok(delivery)) = deliveries.next().await {
            timeline.delivered(group, sent_at_us(&delivery.data));
        }
    });
    Ok(Consumer {
        destination: json!({
            "type": "rabbitmq", "url": RABBITMQ, "exchange": "", "routing_key": queue,
            "credentials": { "username": "guest", "password": "guest" },
        }),
        task,
        made: Made::Queue(channel, conn, queue),
    })
}

/// A JetStream stream of its own capturing one subject, read by a plain subscription to it.
pub(super) async fn nats(timeline: Arc<Timeline>) -> anyhow::Result<Consumer> {
    use async_nats::jetstream::{self, stream};
    let client = async_nats::connect(NATS)
        .await
        .context("NATS at 127.0.0.1:4222")?;
    let js = jetstream::new(client.clone());
    let id = sluice::ids::new_id("s").replace('_', "");
    let name = format!("SLUICE_BENCH_{id}");
    let subject = format!("sluice.bench.{id}");
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        ..Default::default()
    })
    .await
    .context("create a stream (JetStream enabled: nats-server -js)")?;
    let mut messages = client.subscribe(subject.clone()).await?;
    let task = tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            timeline.delivered(0, sent_at_us(&message.payload));
        }
    });
    Ok(Consumer {
        destination: json!({ "type": "nats", "url": NATS, "subject": subject }),
        task,
        made: Made::Stream(js, name),
    })
}

/// A stream of its own (made empty: sluice's `XADD` does not make streams), read by `XREAD`.
pub(super) async fn redis(timeline: Arc<Timeline>) -> anyhow::Result<Consumer> {
    let client = redis::Client::open(REDIS)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .context("Redis at 127.0.0.1:6379")?;
    let stream = format!("sluice-bench-{}", sluice::ids::new_id("s"));
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg("bench")
        .arg("$")
        .arg("MKSTREAM")
        .query_async::<()>(&mut conn)
        .await
        .context("make the stream")?;
    // A connection of its own: a blocking read would hold up the clean-up's commands.
    let mut reader = client.get_multiplexed_async_connection().await?;
    let key = stream.clone();
    let task = tokio::spawn(async move {
        type Entries = Vec<(String, Vec<(String, HashMap<String, Vec<u8>>)>)>;
        let mut last = "0-0".to_owned();
        loop {
            let read: redis::RedisResult<Option<Entries>> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(1000)
                .arg("BLOCK")
                .arg(200)
                .arg("STREAMS")
                .arg(&key)
                .arg(&last)
                .query_async(&mut reader)
                .await;
            match read {
                Ok(Some(streams)) => {
                    for (_, entries) in streams {
                        for (id, fields) in entries {
                            timeline.delivered(0, fields.get("body").and_then(|b| sent_at_us(b)));
                            last = id;
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("destinations: XREAD failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(Consumer {
        destination: json!({ "type": "redis", "url": REDIS, "stream": stream }),
        task,
        made: Made::Key(conn, stream),
    })
}

/// RabbitMQ's memory alarm, raised (`rabbitmqctl set_vm_memory_high_watermark 0`: the broker
/// blocks every publisher) and cleared again when dropped, also when the run fails.
pub(crate) struct MemoryAlarm;

impl MemoryAlarm {
    pub(crate) fn raise() -> anyhow::Result<MemoryAlarm> {
        watermark("0")?;
        Ok(MemoryAlarm)
    }
}

impl Drop for MemoryAlarm {
    fn drop(&mut self) {
        if let Err(e) = watermark("0.4") {
            eprintln!("destinations: could not clear RabbitMQ's memory alarm: {e}");
        }
    }
}

fn watermark(fraction: &str) -> anyhow::Result<()> {
    let out = std::process::Command::new("rabbitmqctl")
        .args(["set_vm_memory_high_watermark", fraction])
        .output()
        .context("rabbitmqctl")?;
    anyhow::ensure!(
        out.status.success(),
        "rabbitmqctl set_vm_memory_high_watermark {fraction}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
