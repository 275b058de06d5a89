//! Admission control: what decides whether a claimed delivery is attempted now, held, or shed.
//!
//! [`admit`] is the one door, in order: enabled → paused → breaker → rate → lane → fleet →
//! the tenant's seat → global permit; what it takes comes back when its [`Admitted`] guard drops. Its parts:
//!
//! - [`rate`]: rate limit per endpoint (GCRA), fleet-wide in Redis with [`fleet`];
//! - [`lane`]: per-endpoint bulkhead with an acquisition deadline (shed when it passes);
//! - [`governor`]: AIMD concurrency limit per endpoint and Retry-After pauses;
//! - [`endpoint`]: one endpoint's state at run time, the one home of its lane, governor,
//!   breaker, turns and window;
//! - [`breaker`]: latency breaker (p95 over a window vs the endpoint's ceiling) and error breaker;
//! - [`fleet`]: lane slots held in Redis so a fleet of dispatchers shares one allowance;
//! - [`peers`]: without Redis, this dispatcher's part of each lane and rate limit;
//! - [`seats`]: a tenant's attempts in the pool, held under its ceiling.

pub mod breaker;
pub mod endpoint;
pub mod fleet;
mod gate;
pub mod governor;
mod held;
pub mod lane;
pub mod peers;
pub mod rate;
pub mod seats;

pub use endpoint::{EndpointPolicy, EndpointRuntime, LaneBasis};
pub use fleet::count::FleetCount;
pub use gate::{Admitted, Gate, admit};
pub use held::Held;
