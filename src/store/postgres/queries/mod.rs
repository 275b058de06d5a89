//! The PostgreSQL driver's statements, each run on a pooled client or inside the caller's
//! transaction, by resource. Batches travel as arrays (`unnest`) so one round trip serves many
//! rows.

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
