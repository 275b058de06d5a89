//! The limits of every HTTP listener: how long a request's headers and body may take, how long
//! an idle keep-alive connection is kept, and how many connections are served at once.

use std::time::Duration;

use crate::setting::{Problems, SettingProblem, shown};

/// Limits of every HTTP listener sluice serves (the API and the operator listener).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerSettings {
    /// From accept (or from the first byte of a later request) to the end of its headers;
    /// 100 ms–5 min, default 10 s.
    pub header_read_timeout: Duration,
    /// From the end of the headers to the last byte of the body; 100 ms–10 min, default 30 s.
    pub body_read_timeout: Duration,
    /// How long a keep-alive connection may sit idle between requests (or stall while its
    /// response is written); 100 ms–1 h, default 60 s.
    pub idle_timeout: Duration,
    /// Connections served at once on the API listener; 1–1,000,000, default 1024.
    pub max_connections: u32,
    /// Connections one client address (an IPv6 /64) may hold on the API listener; 1–1,000,000,
    /// default half of `max_connections` (a value above it is `max_connections`). Behind a
    /// reverse proxy every connection comes from the proxy: raise it to `max_connections` there.
    pub max_connections_per_peer: u32,
}

impl Default for ListenerSettings {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_connections_per_peer: 512,
        }
    }
}

impl ListenerSettings {
    /// Every value out of range: the header, body and idle timeouts from 100 ms to 5 min,
    /// 10 min and 1 h, and 1–1,000,000 connections (overall and per address).
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        for (field, value, max) in [
            ("header_read_timeout", self.header_read_timeout, 300),
            ("body_read_timeout", self.body_read_timeout, 600),
            ("idle_timeout", self.idle_timeout, 3600),
        ] {
            p.check(
                (Duration::from_millis(100)..=Duration::from_secs(max)).contains(&value),
                field,
                shown(value),
                format_args!("100ms–{max}s"),
            );
        }
        for (field, n) in [
            ("max_connections", self.max_connections),
            ("max_connections_per_peer", self.max_connections_per_peer),
        ] {
            p.check((1..=1_000_000).contains(&n), field, n, "1–1000000");
        }
        p.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_out_of_range_is_a_problem_and_the_edges_are_not() {
        let bad = ListenerSettings {
            header_read_timeout: Duration::from_millis(99),
            body_read_timeout: Duration::from_secs(601),
            idle_timeout: Duration::ZERO,
            max_connections: 1_000_001,
            max_connections_per_peer: 0,
        };
        let problems: Vec<_> = bad.problems().into_iter().map(|p| p.to_string()).collect();
        let expected = [
            "header_read_timeout: 99ms must be 100ms–300s",
            "body_read_timeout: 601s must be 100ms–600s",
            "idle_timeout: 0ns must be 100ms–3600s",
            "max_connections: 1000001 must be 1–1000000",
            "max_connections_per_peer: 0 must be 1–1000000",
        ];
        assert_eq!(problems, expected);
        assert_eq!(ListenerSettings::default().problems(), []);
        let low = Duration::from_millis(100);
        let lowest = ListenerSettings {
            header_read_timeout: low,
            body_read_timeout: low,
            idle_timeout: low,
            max_connections: 1,
            max_connections_per_peer: 1,
        };
        assert_eq!(lowest.problems(), []);
        let highest = ListenerSettings {
            header_read_timeout: Duration::from_secs(300),
            body_read_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(3600),
            max_connections: 1_000_000,
            max_connections_per_peer: 1_000_000,
        };
        assert_eq!(highest.problems(), []);
    }
}
