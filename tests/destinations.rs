//! Broker destinations against real brokers on this machine (RabbitMQ at 127.0.0.1:5672,
//! guest/guest; NATS with JetStream at 127.0.0.1:4222; Redis at 127.0.0.1:6379): deliveries arrive signed and verifiable by the reference `standardwebhooks`
//! package, a broker's refusals are failed attempts named by their kind, credentials appear in
//! no answer, and the API names every bad field. Over TLS, against a `nats-server` and a
//! `redis-server` started with TLS and RabbitMQ behind a TLS terminator. No broker is mocked.
//! The AWS destinations (SQS, SNS, EventBridge) against moto, a server of the AWS wire
//! protocols with signature checking, one per test; Google Cloud Pub/Sub against Google's
//! emulator.

use sluice_testkit as support;

#[path = "destinations/api.rs"]
mod api;
#[path = "destinations/aws.rs"]
mod aws;
#[path = "destinations/aws_edges.rs"]
mod aws_edges;
#[path = "destinations/aws_fleet.rs"]
mod aws_fleet;
#[path = "destinations/blocked.rs"]
mod blocked;
#[path = "destinations/fleet.rs"]
mod fleet;
#[path = "destinations/nats.rs"]
mod nats;
#[path = "destinations/pubsub.rs"]
mod pubsub;
#[path = "destinations/rabbitmq.rs"]
mod rabbitmq;
#[path = "destinations/receive.rs"]
mod receive;
#[path = "destinations/redis.rs"]
mod redis_streams;
#[path = "destinations/restart.rs"]
mod restart;
#[path = "destinations/servers.rs"]
mod servers;
#[path = "destinations/tls.rs"]
mod tls;
