//! Where an endpoint delivers: an HTTP URL (the default) or a message broker, with the broker's
//! write-only credentials. Delivering to each kind is [`crate::destinations`]' (brokers) and
//! [`crate::delivery`]'s (HTTP).

use serde::{Deserialize, Serialize};

/// What an endpoint delivers to. Every kind has a `url` (the address the egress guard judges);
/// the broker kinds add where in the broker the message goes.
///
/// Stored as JSON beside the endpoint's `url` column; a row without one (every row written
/// before destinations existed) is [`Destination::Http`] at its `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Destination {
    /// A signed HTTP POST to `url` (http or https).
    Http {
        /// The receiver's URL.
        url: String,
    },
    /// An AMQP 0-9-1 publish (persistent, mandatory, publisher-confirmed).
    Rabbitmq {
        /// `amqp://host:port/vhost` or `amqps://…`, without credentials.
        url: String,
        /// The exchange published to (`""`: the default exchange, routing by queue name).
        #[serde(default)]
        exchange: String,
        /// The routing key.
        routing_key: String,
    },
    /// A JetStream publish, acknowledged by the stream that captures `subject`.
    Nats {
        /// `nats://host:port` or `tls://…`, without credentials.
        url: String,
        /// The subject (a stream must capture it; sluice creates none).
        subject: String,
    },
    /// A Redis Streams `XADD`.
    Redis {
        /// `redis://host:port/db` or `rediss://…`, without credentials.
        url: String,
        /// The stream's key.
        stream: String,
        /// Trim the stream to about this many entries (`MAXLEN ~`) on each add.
        #[serde(default)]
        max_len: Option<u64>,
    },
    /// An Amazon SQS `SendMessage` (JSON protocol), SigV4-signed.
    Sqs {
        /// The service endpoint connected to: the `endpoint_url` given, or the region's.
        url: String,
        /// The queue's URL; one ending in `.fifo` is a FIFO queue.
        queue_url: String,
        /// The AWS region signed for.
        region: String,
    },
    /// An Amazon SNS `Publish` (query protocol), SigV4-signed.
    Sns {
        /// The service endpoint connected to: the `endpoint_url` given, or the region's.
        url: String,
        /// The topic's ARN; one ending in `.fifo` is a FIFO topic.
        topic_arn: String,
        /// The AWS region signed for.
        region: String,
    },
    /// An Amazon EventBridge `PutEvents` of one entry (JSON 1.1 protocol), SigV4-signed.
    Eventbridge {
        /// The service endpoint connected to: the `endpoint_url` given, or the region's.
        url: String,
        /// The event bus's name or ARN.
        event_bus_name: String,
        /// The AWS region signed for.
        region: String,
        /// The entry's `Source`.
        source: String,
    },
    /// A Google Cloud Pub/Sub `publish` (REST), with a service account's token or none (an
    /// emulator).
    Pubsub {
        /// The service endpoint connected to: the `endpoint_url` given, or Google's.
        url: String,
        /// The project.
        project_id: String,
        /// The topic's id in the project.
        topic: String,
    },
}

impl Destination {
    /// The address connected to, whatever the kind.
    pub fn url(&self) -> &str {
        match self {
            Self::Http { url }
            | Self::Rabbitmq { url, .. }
            | Self::Nats { url, .. }
            | Self::Redis { url, .. }
            | Self::Sqs { url, .. }
            | Self::Sns { url, .. }
            | Self::Eventbridge { url, .. }
            | Self::Pubsub { url, .. } => url,
        }
    }

    /// `http`, `rabbitmq`, `nats`, `redis`, `sqs`, `sns`, `eventbridge` or `pubsub`: the API's
    /// `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http { .. } => "http",
            Self::Rabbitmq { .. } => "rabbitmq",
            Self::Nats { .. } => "nats",
            Self::Redis { .. } => "redis",
            Self::Sqs { .. } => "sqs",
            Self::Sns { .. } => "sns",
            Self::Eventbridge { .. } => "eventbridge",
            Self::Pubsub { .. } => "pubsub",
        }
    }

    /// Whether it is a broker (anything but HTTP, the AWS services included).
    pub fn is_broker(&self) -> bool {
        !matches!(self, Self::Http { .. })
    }

    /// Whether it is a cloud service's API (SQS, SNS, EventBridge, Pub/Sub): one HTTP call per
    /// attempt through the HTTP clients.
    pub fn is_cloud(&self) -> bool {
        self.is_aws() || matches!(self, Self::Pubsub { .. })
    }

    /// Whether it is an AWS service (SQS, SNS, EventBridge): reached over HTTPS with SigV4.
    pub fn is_aws(&self) -> bool {
        matches!(
            self,
            Self::Sqs { .. } | Self::Sns { .. } | Self::Eventbridge { .. }
        )
    }

    /// The stored form: JSON for a broker, NULL for HTTP (whose URL is the `url` column).
    pub fn to_column(&self) -> Option<String> {
        self.is_broker()
            .then(|| serde_json::to_string(self).ok())
            .flatten()
    }

    /// From the stored form and the `url` column (NULL or unreadable: HTTP at `url`).
    pub fn from_column(text: Option<&str>, url: &str) -> Self {
        text.and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_else(|| Self::Http {
                url: url.to_owned(),
            })
    }
}

/// The port a broker URL of `scheme` means when it names none: the protocol's registered one,
/// with or without TLS (`amqp` 5672, `amqps` 5671, `nats` and `tls` 4222, `redis` and `rediss`
/// 6379); `None` for a scheme no broker uses.
pub fn broker_default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "amqp" => Some(5672),
        "amqps" => Some(5671),
        "nats" | "tls" => Some(4222),
        "redis" | "rediss" => Some(6379),
        _ => None,
    }
}

/// Whether a broker URL of `scheme` is connected to over TLS: `amqps`, NATS's `tls`, `rediss`.
pub fn broker_scheme_is_tls(scheme: &str) -> bool {
    matches!(scheme, "amqps" | "tls" | "rediss")
}

/// Google Cloud Pub/Sub's endpoint.
pub const PUBSUB_ENDPOINT: &str = "https://pubsub.googleapis.com";

/// The regional endpoint of AWS `service` (`sqs`, `sns`, `events`) in `region`.
pub fn aws_endpoint(service: &str, region: &str) -> String {
    format!("https://{service}.{region}.amazonaws.com")
}

/// A broker's credentials: write-only, never shown, logged or put in an error.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationCredentials {
    /// User name (RabbitMQ, NATS, Redis ACL).
    #[serde(default)]
    pub username: Option<String>,
    /// Password.
    #[serde(default)]
    pub password: Option<String>,
    /// A NATS token.
    #[serde(default)]
    pub token: Option<String>,
    /// AWS: the access key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// AWS: the secret access key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    /// AWS: a session token, with temporary credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<String>,
    /// Google: a service account's JSON key (its `private_key` signs token requests to its
    /// `token_uri`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_key: Option<String>,
}

impl DestinationCredentials {
    /// The stored form: JSON, or NULL for none.
    pub fn to_column(c: &Option<Self>) -> Option<String> {
        c.as_ref().and_then(|c| serde_json::to_string(c).ok())
    }

    /// From the stored form.
    pub fn from_column(text: Option<&str>) -> Option<Self> {
        text.and_then(|t| serde_json::from_str(t).ok())
    }
}

impl std::fmt::Debug for DestinationCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<hidden>");
        f.debug_struct("DestinationCredentials")
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("token", &hidden(&self.token))
            .field("access_key_id", &hidden(&self.access_key_id))
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("service_account_key", &hidden(&self.service_account_key))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_is_stored_as_null_and_read_back_from_the_url_column() {
        let d = Destination::Http {
            url: "https://example.com/".into(),
        };
        assert_eq!(d.to_column(), None);
        assert_eq!(Destination::from_column(None, "https://example.com/"), d);
    }

    #[test]
    fn a_broker_round_trips_through_its_column() {
        let d = Destination::Rabbitmq {
            url: "amqp://broker:5672/%2f".into(),
            exchange: "events".into(),
            routing_key: "orders".into(),
        };
        let col = d.to_column().unwrap();
        assert_eq!(Destination::from_column(Some(&col), "ignored"), d);
    }

    #[test]
    fn each_broker_scheme_has_its_port_and_the_tls_ones_are_known() {
        let cases = [
            ("amqp", 5672, false),
            ("amqps", 5671, true),
            ("nats", 4222, false),
            ("tls", 4222, true),
            ("redis", 6379, false),
            ("rediss", 6379, true),
        ];
        for (scheme, port, tls) in cases {
            assert_eq!(broker_default_port(scheme), Some(port), "{scheme}");
            assert_eq!(broker_scheme_is_tls(scheme), tls, "{scheme}");
        }
        assert_eq!(broker_default_port("https"), None);
        assert!(!broker_scheme_is_tls("https"));
    }

    #[test]
    fn credentials_never_show_in_debug() {
        let c = DestinationCredentials {
            username: Some("u".into()),
            password: Some("hunter2".into()),
            token: Some("tok".into()),
            access_key_id: Some("AKIDSHOWN".into()),
            secret_access_key: Some("aws-secret".into()),
            session_token: Some("aws-session".into()),
            service_account_key: Some("-----BEGIN PRIVATE KEY-----".into()),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("tok\""));
        for hidden in ["AKIDSHOWN", "aws-secret", "aws-session", "PRIVATE KEY"] {
            assert!(!shown.contains(hidden), "{shown}");
        }
    }
}
