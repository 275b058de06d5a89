//! The nouns every part of sluice speaks in, one file per table: tenants, endpoints (with their
//! rate limits, TLS settings and OAuth2 credentials), messages, deliveries and attempts, the
//! queue's requests and reports, the fleet's heartbeats, a message's W3C trace context.
//!
//! Plain values that import nothing above [`crate::clock`] and [`crate::ids`]: the store keeps
//! them, and everything above it takes them from here, so no floor reaches up for a type.

mod delivery;
mod endpoint;
mod fleet;
mod message;
mod queue;
mod tenant;
mod trace;

pub use delivery::*;
pub use endpoint::*;
pub use fleet::*;
pub use message::*;
pub use queue::*;
pub use tenant::*;
pub use trace::*;
