//! Capacity planning maths for the dispatch worker pool: Erlang C sizing, square-root staffing,
//! process/pod layout, the queue-age replica controller and a printable sizing report.
//!
//! Typical use: build a [`SizeRequest`], call [`size`] and print the [`SizeReport`].

pub mod autoscale;
pub mod erlang;
pub mod heartbeats;
pub mod layout;
mod numbers;
pub mod report;
pub mod signal;
pub mod staffing;
mod table;

pub use autoscale::{PolicyError, ScalingPolicy, ScalingSettings, desired_replicas};
pub use erlang::{
    ErlangError, erlang_b, erlang_c, mean_queue_wait, servers_for_mean_wait,
    servers_for_percentile_wait, wait_percentile_exceeds,
};
pub use layout::{Layout, LayoutError, current_fd_soft_limit, plan_layout};
pub use report::{SizeError, SizeReport, SizeRequest, SizeRow, Surge, WaitTarget, size};
pub use staffing::{StaffingBeta, littles_law_floor, sqrt_staffing, workers_floor};
