//! The SQLite driver's statements, by resource. Each function runs inside the caller's savepoint
//! (writes) or on a reader connection (reads); none of them opens or commits a transaction itself.

mod endpoints;
mod log;
mod queue;
mod settings;
mod tenants;

pub(super) use endpoints::*;
pub(super) use log::*;
pub(super) use queue::*;
pub(super) use settings::*;
pub(super) use tenants::*;
