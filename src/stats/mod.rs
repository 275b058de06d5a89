//! Per-endpoint rolling statistics: latency histograms, windows of outcomes and the evidence
//! arithmetic built on them.
//!
//! # Layout
//! - [`histogram`]: [`LatencyHistogram`], fixed-memory log-linear quantiles of service times.
//! - [`window`]: [`Window`], a ring of sub-windows of histograms and counters.
//! - [`snapshot`]: [`WindowSnapshot`], a window's figures at one instant.
//! - [`failures`]: [`AttemptKind`], how an attempt ended, and failures counted by kind.
//! - [`evidence`](mod@evidence): [`Evidence`] for a customer and [`littles_law_lane`] for sizing.
//!
//! Everything here is synchronous and lock-free: the caller owns one value per endpoint behind its
//! own mutex and passes `now` in, so tests run under paused time.

pub mod evidence;
pub mod failures;
pub mod histogram;
pub mod snapshot;
pub mod window;

pub use evidence::{
    Condition, Evidence, Standing, evidence, format_duration, format_rate, littles_law_lane,
};
pub use failures::{AttemptKind, FailureCounts};
pub use histogram::LatencyHistogram;
pub use snapshot::WindowSnapshot;
pub use window::Window;
