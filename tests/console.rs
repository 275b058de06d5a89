//! The console end to end over HTTP (no browser): a real sluice on 127.0.0.1:0, real loopback
//! receivers, a cookie-keeping client. The security-relevant behaviour lives here (one-time,
//! expiring portal links; cookie flags; CSRF; CSP and framing; tenant isolation; no token in a
//! page; revocation), and the pages' flows; `tests/console/browser.py` drives the same pages in
//! headless Chromium (run by `.ci/run`).

#[path = "console/client.rs"]
mod client;
#[path = "console/dashboard.rs"]
mod dashboard;
#[path = "console/destinations.rs"]
mod destinations;
#[path = "console/hostile.rs"]
mod hostile;
#[path = "console/https.rs"]
mod https;
#[path = "console/portal.rs"]
mod portal;
#[path = "console/security.rs"]
mod security;
#[path = "console/traces.rs"]
mod traces;
use sluice_testkit as support;
