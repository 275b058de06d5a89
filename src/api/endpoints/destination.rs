//! An endpoint's destination as the API takes and shows it: `"destination": {"type": …}`, with
//! `"url"` beside it as the shorthand for HTTP. Broker URLs go through the egress guard like a
//! receiver's; credentials are write-only and never in a URL.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::checks::check_destination_of;
use super::destination_aws::AwsIn;
use super::destination_fields::{check_broker_url, check_credential, check_short, check_subject};
use crate::api::AppState;
use crate::model::{Destination, DestinationCredentials};
use crate::web::problem::Problem;

/// The destination kinds this sluice delivers to.
/// The most entries a Redis destination may trim its stream to (`max_len`).
pub(crate) const MAX_LEN_MOST: u32 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DestinationType {
    /// A signed HTTP POST.
    Http,
    /// RabbitMQ (AMQP 0-9-1): a persistent, mandatory, publisher-confirmed publish.
    Rabbitmq,
    /// NATS JetStream: a publish acknowledged by the stream capturing the subject.
    Nats,
    /// Redis Streams: an `XADD` to an existing stream, acknowledged by its entry id.
    Redis,
    /// Amazon SQS (standard or FIFO): a `SendMessage`, accepted by its `MessageId`.
    Sqs,
    /// Amazon SNS (standard or FIFO): a `Publish`, accepted by its `MessageId`.
    Sns,
    /// Amazon EventBridge: a `PutEvents` of one entry, accepted with `FailedEntryCount` 0.
    Eventbridge,
    /// Google Cloud Pub/Sub: a `publish`, accepted by its message id.
    Pubsub,
}

/// What an endpoint delivers to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DestinationIn {
    /// `http`, `rabbitmq`, `nats`, `redis`, `sqs`, `sns`, `eventbridge` or `pubsub`.
    #[serde(rename = "type")]
    pub kind: DestinationType,
    /// `http`: the receiver's URL (http or https). `rabbitmq`: `amqp://host:port/vhost`, or
    /// `amqps://…` over TLS (the vhost percent-encoded: `%2f` is `/`). `nats`:
    /// `nats://host:port`, or `tls://…` over TLS. `redis`: `redis://host:port/db`, or
    /// `rediss://…` over TLS. Over TLS the broker's certificate must name the URL's host and
    /// chain to a CA this endpoint trusts (`tls_ca_bundle`, or the operator's and the
    /// system's); a `tls_client_certificate` is presented when the broker asks for one. Never
    /// with credentials in it. Required for these; the AWS types take none (see
    /// `endpoint_url`).
    #[serde(default)]
    pub url: Option<String>,
    /// `rabbitmq`: the exchange published to; omitted or `""` is the default exchange, which
    /// routes to the queue named by `routing_key`.
    #[serde(default)]
    pub exchange: Option<String>,
    /// `rabbitmq`: the routing key (at most 255 bytes).
    #[serde(default)]
    pub routing_key: Option<String>,
    /// `nats`: the subject published to (no wildcards); a JetStream stream must capture it
    /// (sluice creates none).
    #[serde(default)]
    pub subject: Option<String>,
    /// `redis`: the stream's key; it must exist (sluice adds with `NOMKSTREAM`).
    #[serde(default)]
    pub stream: Option<String>,
    /// `redis`: trim the stream to about this many entries on each add (`MAXLEN ~`),
    /// 1–1000000000; omitted: no trimming.
    #[serde(default, deserialize_with = "crate::api::whole::option")]
    pub max_len: Option<u32>,
    /// `sqs`: the queue's URL (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`); a name
    /// ending in `.fifo` is a FIFO queue (`MessageGroupId` the endpoint id,
    /// `MessageDeduplicationId` the message id).
    #[serde(default)]
    pub queue_url: Option<String>,
    /// `sns`: the topic's ARN (`arn:aws:sns:REGION:ACCOUNT:NAME`); a name ending in `.fifo` is
    /// a FIFO topic.
    #[serde(default)]
    pub topic_arn: Option<String>,
    /// `eventbridge`: the event bus's name or ARN (`default` is the account's default bus).
    #[serde(default)]
    pub event_bus_name: Option<String>,
    /// `eventbridge`: each entry's `Source` (1 to 256 characters, not starting with `aws.`);
    /// omitted: `sluice`.
    #[serde(default)]
    pub source: Option<String>,
    /// `sqs`, `sns`, `eventbridge`: the AWS region (`us-east-1`), which requests are signed
    /// for.
    #[serde(default)]
    pub region: Option<String>,
    /// `sqs`, `sns`, `eventbridge`, `pubsub`: the service endpoint (http or https: a VPC
    /// endpoint, an emulator), judged by the egress guard like a receiver's URL; omitted: the
    /// region's (`https://sqs.REGION.amazonaws.com`, `sns.…`, `events.…`), or
    /// `https://pubsub.googleapis.com`.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// `pubsub`: the Google Cloud project's id.
    #[serde(default)]
    pub project_id: Option<String>,
    /// `pubsub`: the topic's id in the project (sluice creates none).
    #[serde(default)]
    pub topic: Option<String>,
    /// The broker's or service's credentials: write-only, never shown. On a PATCH, left out
    /// keeps the stored ones when the type is unchanged.
    #[serde(default)]
    pub credentials: Option<CredentialsIn>,
}

/// A broker's or AWS service's credentials (write-only).
#[derive(Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialsIn {
    /// User name.
    #[serde(default)]
    pub username: Option<String>,
    /// Password.
    #[serde(default)]
    pub password: Option<String>,
    /// `nats`: a token, instead of a user name and password.
    #[serde(default)]
    pub token: Option<String>,
    /// AWS (`sqs`, `sns`, `eventbridge`): the access key id; required there, with
    /// `secret_access_key`.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// AWS: the secret access key.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// AWS: the session token of temporary credentials.
    #[serde(default)]
    pub session_token: Option<String>,
    /// `pubsub`: a service account's JSON key, as Google gives it (its `token_uri`, where
    /// sluice gets tokens, is judged by the egress guard); omitted: no token (an emulator).
    #[serde(default)]
    pub service_account_key: Option<String>,
}

impl std::fmt::Debug for CredentialsIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialsIn")
            .field("username", &self.username)
            .field(
                "access_key_id",
                &self.access_key_id.as_ref().map(|_| "<hidden>"),
            )
            .finish_non_exhaustive()
    }
}

/// A checked destination and the credentials to store with it (`None`: keep what is stored).
pub(crate) struct Checked {
    pub destination: Destination,
    pub credentials: Option<Option<DestinationCredentials>>,
}

/// Check `url` (the shorthand) or `destination`: exactly one of them.
pub(crate) async fn check(
    state: &AppState,
    url: Option<&str>,
    destination: Option<DestinationIn>,
) -> Result<Option<Checked>, Problem> {
    match (url, destination) {
        (Some(_), Some(_)) => Err(Problem::unprocessable(
            "destination",
            "give either url (an HTTP destination) or destination, not both",
        )),
        (Some(url), None) => Ok(Some(Checked {
            destination: Destination::Http {
                url: check_destination_of(state, "url", url).await?,
            },
            credentials: Some(None),
        })),
        (None, Some(d)) => check_destination(state, d).await.map(Some),
        (None, None) => Ok(None),
    }
}

async fn check_destination(state: &AppState, d: DestinationIn) -> Result<Checked, Problem> {
    let refuse = |field: &str, why: &str| {
        Err(Problem::unprocessable(
            &format!("destination.{field}"),
            format!("destination.{field} {why}"),
        ))
    };
    match d.kind {
        DestinationType::Http => {
            only_for(&d, "http")?;
            if d.exchange.is_some() {
                return refuse("exchange", "applies only to rabbitmq");
            }
            if d.routing_key.is_some() {
                return refuse("routing_key", "applies only to rabbitmq");
            }
            if d.subject.is_some() {
                return refuse("subject", "applies only to nats");
            }
            if d.credentials.is_some() {
                return refuse(
                    "credentials",
                    "applies only to brokers (an HTTP endpoint authenticates with headers or oauth2)",
                );
            }
            let url = required_url(&d, "http")?;
            let url = check_destination_of(state, "destination.url", url).await?;
            Ok(Checked {
                destination: Destination::Http { url },
                credentials: Some(None),
            })
        }
        DestinationType::Rabbitmq => {
            only_for(&d, "rabbitmq")?;
            if d.subject.is_some() {
                return refuse("subject", "applies only to nats");
            }
            if d.credentials.as_ref().is_some_and(|c| c.token.is_some()) {
                return refuse("credentials.token", "applies only to nats");
            }
            let url =
                check_broker_url(state, required_url(&d, "rabbitmq")?, &["amqp", "amqps"]).await?;
            let exchange = d.exchange.unwrap_or_default();
            let Some(routing_key) = d.routing_key else {
                return refuse("routing_key", "is required for rabbitmq");
            };
            check_short("exchange", &exchange)?;
            check_short("routing_key", &routing_key)?;
            let credentials = d.credentials.map(credentials_of).transpose()?;
            Ok(Checked {
                destination: Destination::Rabbitmq {
                    url,
                    exchange,
                    routing_key,
                },
                credentials: credentials.map(Some),
            })
        }
        DestinationType::Nats => {
            only_for(&d, "nats")?;
            if d.exchange.is_some() {
                return refuse("exchange", "applies only to rabbitmq");
            }
            if d.routing_key.is_some() {
                return refuse("routing_key", "applies only to rabbitmq");
            }
            let url = check_broker_url(state, required_url(&d, "nats")?, &["nats", "tls"]).await?;
            let Some(subject) = d.subject else {
                return refuse("subject", "is required for nats");
            };
            check_subject(&subject)?;
            let credentials = d.credentials.map(credentials_of).transpose()?;
            if let Some(c) = &credentials
                && c.token.is_some()
                && (c.username.is_some() || c.password.is_some())
            {
                return refuse(
                    "credentials.token",
                    "goes alone: give a token, or a user name and password",
                );
            }
            Ok(Checked {
                destination: Destination::Nats { url, subject },
                credentials: credentials.map(Some),
            })
        }
        DestinationType::Redis => {
            only_for(&d, "redis")?;
            let url =
                check_broker_url(state, required_url(&d, "redis")?, &["redis", "rediss"]).await?;
            let db = url::Url::parse(&url)
                .ok()
                .map(|u| u.path().trim_start_matches('/').to_owned())
                .unwrap_or_default();
            if !db.is_empty() && !db.parse::<u16>().is_ok_and(|n| n < 10_000) {
                return refuse(
                    "url",
                    "must name its database by number (redis://host:port/0 or rediss://…)",
                );
            }
            let Some(stream) = d.stream else {
                return refuse("stream", "is required for redis");
            };
            if stream.is_empty() || stream.len() > 1024 || stream.chars().any(char::is_control) {
                return refuse(
                    "stream",
                    "must be 1 to 1024 bytes without control characters",
                );
            }
            if d.max_len.is_some_and(|n| !(1..=MAX_LEN_MOST).contains(&n)) {
                return refuse("max_len", "must be 1–1000000000");
            }
            let credentials = d.credentials.map(credentials_of).transpose()?;
            Ok(Checked {
                destination: Destination::Redis {
                    url,
                    stream,
                    max_len: d.max_len.map(u64::from),
                },
                credentials: credentials.map(Some),
            })
        }
        DestinationType::Pubsub => {
            only_for(&d, "pubsub")?;
            let credentials = d.credentials.map(credentials_of).transpose()?;
            let destination =
                super::destination_gcp::check(state, d.endpoint_url, d.project_id, d.topic).await?;
            if let Some(key) = credentials
                .as_ref()
                .and_then(|c| c.service_account_key.as_deref())
            {
                super::destination_gcp::check_key(state, key).await?;
            }
            Ok(Checked {
                destination,
                credentials: credentials.map(Some),
            })
        }
        DestinationType::Sqs | DestinationType::Sns | DestinationType::Eventbridge => {
            let kind = match d.kind {
                DestinationType::Sqs => "sqs",
                DestinationType::Sns => "sns",
                _ => "eventbridge",
            };
            only_for(&d, kind)?;
            let credentials = match d.credentials {
                Some(c) => {
                    if c.access_key_id.is_none() || c.secret_access_key.is_none() {
                        return refuse(
                            "credentials.secret_access_key",
                            "and credentials.access_key_id are both required for AWS",
                        );
                    }
                    if c.token.is_some() {
                        return refuse("credentials.token", "applies only to nats");
                    }
                    Some(credentials_of(c)?)
                }
                None => None,
            };
            let aws = AwsIn {
                kind,
                region: d.region,
                endpoint_url: d.endpoint_url,
                queue_url: d.queue_url,
                topic_arn: d.topic_arn,
                event_bus_name: d.event_bus_name,
                source: d.source,
            };
            Ok(Checked {
                destination: super::destination_aws::check(state, aws).await?,
                credentials: credentials.map(Some),
            })
        }
    }
}

/// The problem of an AWS destination given without its key (on create, or on a change of type).
pub(crate) fn aws_key_required() -> Problem {
    Problem::unprocessable(
        "destination.credentials",
        "destination.credentials (access_key_id and secret_access_key) are required for sqs, \
         sns and eventbridge: every call is signed",
    )
}

/// The `url` a type other than AWS's requires.
fn required_url<'a>(d: &'a DestinationIn, kind: &str) -> Result<&'a str, Problem> {
    d.url.as_deref().ok_or_else(|| {
        Problem::unprocessable(
            "destination.url",
            format!("destination.url is required for {kind}"),
        )
    })
}

/// Refuse the fields of other kinds than `kind`.
fn only_for(d: &DestinationIn, kind: &str) -> Result<(), Problem> {
    const BROKERS: &[&str] = &["rabbitmq", "nats", "redis"];
    const ADDRESSED: &[&str] = &["http", "rabbitmq", "nats", "redis"];
    const AWS: &[&str] = &["sqs", "sns", "eventbridge"];
    const CLOUD: &[&str] = &["sqs", "sns", "eventbridge", "pubsub"];
    let c = d.credentials.as_ref();
    let given: [(&str, bool, &[&str]); 21] = [
        ("url", d.url.is_some(), ADDRESSED),
        ("exchange", d.exchange.is_some(), &["rabbitmq"]),
        ("routing_key", d.routing_key.is_some(), &["rabbitmq"]),
        ("subject", d.subject.is_some(), &["nats"]),
        ("stream", d.stream.is_some(), &["redis"]),
        ("max_len", d.max_len.is_some(), &["redis"]),
        ("queue_url", d.queue_url.is_some(), &["sqs"]),
        ("topic_arn", d.topic_arn.is_some(), &["sns"]),
        (
            "event_bus_name",
            d.event_bus_name.is_some(),
            &["eventbridge"],
        ),
        ("source", d.source.is_some(), &["eventbridge"]),
        ("region", d.region.is_some(), AWS),
        ("endpoint_url", d.endpoint_url.is_some(), CLOUD),
        ("project_id", d.project_id.is_some(), &["pubsub"]),
        ("topic", d.topic.is_some(), &["pubsub"]),
        (
            "credentials.username",
            c.is_some_and(|c| c.username.is_some()),
            BROKERS,
        ),
        (
            "credentials.password",
            c.is_some_and(|c| c.password.is_some()),
            BROKERS,
        ),
        (
            "credentials.token",
            c.is_some_and(|c| c.token.is_some()),
            &["nats"],
        ),
        (
            "credentials.access_key_id",
            c.is_some_and(|c| c.access_key_id.is_some()),
            AWS,
        ),
        (
            "credentials.secret_access_key",
            c.is_some_and(|c| c.secret_access_key.is_some()),
            AWS,
        ),
        (
            "credentials.session_token",
            c.is_some_and(|c| c.session_token.is_some()),
            AWS,
        ),
        (
            "credentials.service_account_key",
            c.is_some_and(|c| c.service_account_key.is_some()),
            &["pubsub"],
        ),
    ];
    match given
        .iter()
        .find(|(_, set, of)| *set && !of.contains(&kind))
    {
        Some((field, _, of)) => Err(Problem::unprocessable(
            &format!("destination.{field}"),
            format!("destination.{field} applies only to {}", of.join(", ")),
        )),
        None => Ok(()),
    }
}

fn credentials_of(c: CredentialsIn) -> Result<DestinationCredentials, Problem> {
    check_credential("username", c.username.as_deref())?;
    check_credential("password", c.password.as_deref())?;
    check_credential("token", c.token.as_deref())?;
    check_credential("access_key_id", c.access_key_id.as_deref())?;
    check_credential("secret_access_key", c.secret_access_key.as_deref())?;
    // An STS session token runs past a kilobyte.
    if c.session_token
        .as_deref()
        .is_some_and(|t| t.is_empty() || t.len() > 4096 || t.chars().any(char::is_control))
    {
        return Err(Problem::unprocessable(
            "destination.credentials.session_token",
            "destination.credentials.session_token must be 1 to 4096 bytes without control \
             characters",
        ));
    }
    Ok(DestinationCredentials {
        username: c.username,
        password: c.password,
        token: c.token,
        access_key_id: c.access_key_id,
        secret_access_key: c.secret_access_key,
        session_token: c.session_token,
        service_account_key: c.service_account_key,
    })
}
