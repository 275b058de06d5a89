//! What every HTTP surface of sluice shares (the API, the console, the listeners): errors as
//! RFC 9457 problem details, and the request body's deadline.

pub mod deadline;
pub mod problem;
