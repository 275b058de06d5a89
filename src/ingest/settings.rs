//! Where events are taken from: one `--ingest-from` URL per source, the broker named by its
//! scheme and what to read in its query (`?queue=…`, `?stream=…&consumer=…`,
//! `?stream=…&group=…`), parsed and checked once at start-up.

use std::fmt;

/// Most messages one source holds unacknowledged at once, when its URL does not say.
pub const DEFAULT_PREFETCH: u16 = 64;

/// The consumer (JetStream) or consumer group (Redis) sluice reads as, when the URL does not
/// say.
pub const DEFAULT_CONSUMER: &str = "sluice";

/// Where in its broker a source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broker {
    /// A RabbitMQ queue, consumed with manual acknowledgement.
    Rabbitmq {
        /// The queue's name (it must exist: the producer's set-up declares it).
        queue: String,
    },
    /// A JetStream durable pull consumer.
    Nats {
        /// The stream's name (it must exist).
        stream: String,
        /// The durable consumer's name, created (explicit acks, deliver all) when missing.
        consumer: String,
    },
    /// A Redis stream read through a consumer group.
    Redis {
        /// The stream's key.
        stream: String,
        /// The consumer group, created at the stream's start (`0`) when missing.
        group: String,
        /// This process's name in the group; `None`: `sluice-` and the host name.
        consumer: Option<String>,
        /// The stream refused entries are added to.
        refused: String,
    },
}

/// One source of events.
#[derive(Clone, PartialEq, Eq)]
pub struct Source {
    /// Where it reads.
    pub broker: Broker,
    /// The broker's URL as its client takes it (sluice's own query keys removed); it may hold
    /// credentials, so it is never shown: [`Source::name`] and [`Source::host`] are.
    pub url: String,
    /// Most messages held unacknowledged at once (RabbitMQ prefetch, JetStream
    /// `max_ack_pending`, Redis `COUNT`), 1–10000.
    pub prefetch: u16,
}

/// Never the URL: it may carry a password.
impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Source({} at {})", self.name(), self.host())
    }
}

impl Source {
    /// The source as the metrics' `source` label and the logs name it: `rabbitmq:orders`,
    /// `nats:ORDERS/sluice`, `redis:orders/sluice` (stream and group).
    pub fn name(&self) -> String {
        match &self.broker {
            Broker::Rabbitmq { queue } => format!("rabbitmq:{queue}"),
            Broker::Nats { stream, consumer } => format!("nats:{stream}/{consumer}"),
            Broker::Redis { stream, group, .. } => format!("redis:{stream}/{group}"),
        }
    }

    /// The broker's host and port, for logs (no credentials).
    pub fn host(&self) -> String {
        url::Url::parse(&self.url)
            .ok()
            .map(|u| match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_owned(),
                _ => String::new(),
            })
            .unwrap_or_default()
    }

    /// Parse one `--ingest-from` URL; the error says what is wrong, showing the URL without
    /// its password.
    pub fn parse(text: &str) -> Result<Source, String> {
        let mut url = url::Url::parse(text.trim())
            .map_err(|e| format!("{:?} is not a URL: {e}", shown(text)))?;
        let shown = shown(text);
        let mut ours = Params::default();
        let mut theirs = Vec::new();
        for (key, value) in url.query_pairs() {
            let slot = match key.as_ref() {
                "queue" => &mut ours.queue,
                "stream" => &mut ours.stream,
                "consumer" => &mut ours.consumer,
                "group" => &mut ours.group,
                "refused" => &mut ours.refused,
                "prefetch" => &mut ours.prefetch,
                _ => {
                    theirs.push((key.into_owned(), value.into_owned()));
                    continue;
                }
            };
            if value.is_empty() {
                return Err(format!("{shown:?}: {key}= is empty"));
            }
            *slot = Some(value.into_owned());
        }
        let prefetch = match &ours.prefetch {
            None => DEFAULT_PREFETCH,
            Some(n) => n
                .parse::<u16>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| format!("{shown:?}: prefetch={n} must be 1–10000"))?,
        };
        let only = |allowed: &[&str], ours: &Params| -> Result<(), String> {
            for (key, set) in [
                ("queue", &ours.queue),
                ("stream", &ours.stream),
                ("consumer", &ours.consumer),
                ("group", &ours.group),
                ("refused", &ours.refused),
            ] {
                if set.is_some() && !allowed.contains(&key) {
                    return Err(format!(
                        "{shown:?}: {key}= does not apply to {}://",
                        url.scheme()
                    ));
                }
            }
            Ok(())
        };
        let needs = |value: &Option<String>, key: &str| {
            value
                .clone()
                .ok_or_else(|| format!("{shown:?} needs ?{key}=…"))
        };
        let broker = match url.scheme() {
            "amqp" | "amqps" => {
                only(&["queue"], &ours)?;
                Broker::Rabbitmq {
                    queue: needs(&ours.queue, "queue")?,
                }
            }
            "nats" | "tls" => {
                only(&["stream", "consumer"], &ours)?;
                Broker::Nats {
                    stream: needs(&ours.stream, "stream")?,
                    consumer: ours.consumer.clone().unwrap_or(DEFAULT_CONSUMER.into()),
                }
            }
            "redis" | "rediss" => {
                only(&["stream", "group", "consumer", "refused"], &ours)?;
                let stream = needs(&ours.stream, "stream")?;
                Broker::Redis {
                    refused: ours.refused.clone().unwrap_or(format!("{stream}:refused")),
                    stream,
                    group: ours.group.clone().unwrap_or(DEFAULT_CONSUMER.into()),
                    consumer: ours.consumer.clone(),
                }
            }
            other => {
                return Err(format!(
                    "{shown:?}: {other}:// is not a broker: amqp://, nats:// or redis://"
                ));
            }
        };
        url.set_query(None);
        if !theirs.is_empty() {
            url.query_pairs_mut().extend_pairs(theirs);
        }
        Ok(Source {
            broker,
            url: url.into(),
            prefetch,
        })
    }
}

/// Sluice's own query keys, before they are checked against the scheme.
#[derive(Default)]
struct Params {
    queue: Option<String>,
    stream: Option<String>,
    consumer: Option<String>,
    group: Option<String>,
    refused: Option<String>,
    prefetch: Option<String>,
}

/// `text` with any password replaced by `***`, for messages.
fn shown(text: &str) -> String {
    match url::Url::parse(text.trim()) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.into()
        }
        _ => text.trim().to_owned(),
    }
}

/// Parse every `--ingest-from` URL, each problem added to `errors` named by the flag.
pub fn parse_all(urls: &[String], errors: &mut Vec<String>) -> Vec<Source> {
    let mut sources: Vec<Source> = Vec::new();
    for text in urls {
        match Source::parse(text) {
            Ok(s)
                if sources
                    .iter()
                    .any(|o| o.name() == s.name() && o.host() == s.host()) =>
            {
                errors.push(format!("ingest-from: {} is given twice", s.name()));
            }
            Ok(s) => sources.push(s),
            Err(e) => errors.push(format!("ingest-from: {e}")),
        }
    }
    sources
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_reads_its_own_keys() {
        let s =
            Source::parse("amqp://guest:pw@127.0.0.1:5672/%2f?queue=orders&heartbeat=10").unwrap();
        assert_eq!(
            s.broker,
            Broker::Rabbitmq {
                queue: "orders".into()
            }
        );
        assert_eq!(s.url, "amqp://guest:pw@127.0.0.1:5672/%2f?heartbeat=10");
        assert_eq!(s.prefetch, DEFAULT_PREFETCH);
        assert_eq!(s.name(), "rabbitmq:orders");
        assert_eq!(s.host(), "127.0.0.1:5672");
        assert!(!format!("{s:?}").contains("pw"));

        let s = Source::parse("nats://127.0.0.1:4222?stream=ORDERS&prefetch=8").unwrap();
        assert_eq!(
            s.broker,
            Broker::Nats {
                stream: "ORDERS".into(),
                consumer: "sluice".into()
            }
        );
        assert_eq!((s.url.as_str(), s.prefetch), ("nats://127.0.0.1:4222", 8));

        let s = Source::parse("redis://127.0.0.1:6379/0?stream=orders&group=g").unwrap();
        assert_eq!(
            s.broker,
            Broker::Redis {
                stream: "orders".into(),
                group: "g".into(),
                consumer: None,
                refused: "orders:refused".into(),
            }
        );
        assert_eq!(s.url, "redis://127.0.0.1:6379/0");
    }

    #[test]
    fn a_bad_url_says_what_is_wrong_without_its_password() {
        for (text, says) in [
            ("amqp://u:secret@h/%2f", "needs ?queue="),
            (
                "nats://h?queue=x&stream=s",
                "queue= does not apply to nats://",
            ),
            (
                "redis://h?stream=s&prefetch=0",
                "prefetch=0 must be 1–10000",
            ),
            ("http://u:secret@h?queue=q", "is not a broker"),
            ("redis://h?stream=", "stream= is empty"),
            ("nowhere", "is not a URL"),
        ] {
            let e = Source::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("secret"), "{text}: {e}");
        }
        let mut errors = Vec::new();
        let urls = [
            "redis://h?stream=a".to_owned(),
            "redis://h?stream=a".to_owned(),
        ];
        assert_eq!(parse_all(&urls, &mut errors).len(), 1);
        assert_eq!(errors, ["ingest-from: redis:a/sluice is given twice"]);
    }
}
