//! Where a broker's host name leads, as the egress guard last allowed it: remembered for a
//! while, so an attempt on a connection already open costs no name lookup, and looked up again
//! after [`REMEMBERED`], so a broker that moves is followed (its new address is a new
//! connection) and a name that comes to resolve to a refused range is refused again.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long an allowed address is used without looking the name up again.
pub(super) const REMEMBERED: Duration = Duration::from_secs(30);

/// Most names remembered; past it, the memory starts over (a lookup each, once).
const MOST: usize = 4096;

/// Allowed addresses by host name.
#[derive(Default)]
pub(super) struct Addresses {
    by_host: Mutex<HashMap<String, (IpAddr, Instant)>>,
}

impl Addresses {
    /// The allowed address of `host` remembered less than [`REMEMBERED`] ago.
    pub(super) fn get(&self, host: &str) -> Option<IpAddr> {
        let by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        by_host
            .get(host)
            .filter(|(_, at)| at.elapsed() < REMEMBERED)
            .map(|(ip, _)| *ip)
    }

    /// Remember that `host` led to the allowed `ip`.
    pub(super) fn remember(&self, host: &str, ip: IpAddr) {
        let mut by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        if by_host.len() >= MOST && !by_host.contains_key(host) {
            by_host.clear();
        }
        by_host.insert(host.to_owned(), (ip, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_address_is_remembered_for_a_while_then_looked_up_again() {
        let a = Addresses::default();
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        assert_eq!(a.get("rabbit.example.com"), None);
        a.remember("rabbit.example.com", ip);
        assert_eq!(a.get("rabbit.example.com"), Some(ip));
        assert_eq!(a.get("other.example.com"), None);
        tokio::time::advance(REMEMBERED).await;
        assert_eq!(a.get("rabbit.example.com"), None, "looked up again");
    }
}
