//! The evidence arithmetic: what an endpoint can receive at its measured p95 and lane, in figures
//! and in the one sentence a customer needs to read, plus the Little's Law lane size.

use std::time::Duration;

use serde::Serialize;

use super::WindowSnapshot;
use super::snapshot::opt_secs;
use crate::model::RateLimit;

/// What the endpoint is doing, the most telling first: it leads the sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// Disabled (by its tenant, a 410, or after failing for days): nothing is delivered.
    Disabled,
    /// The breaker is open: deliveries are held, and only a probe goes after the cooldown.
    BreakerOpen,
    /// A `Retry-After` pause is running: nothing is attempted until it ends.
    Paused,
    /// Its rate limit held deliveries back in the window: they wait for their turns.
    RateLimited,
    /// More attempts failed than were delivered in the window.
    Failing,
    /// Deliveries succeed (some may fail).
    Delivering,
    /// No attempt in the window.
    Idle,
}

/// Where an endpoint stands apart from its window's figures: what the store and the live
/// admission say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Standing<'a> {
    /// Disabled, with the reason given.
    pub disabled: Option<&'a str>,
    /// The breaker holds deliveries back now.
    pub breaker_open: bool,
    /// A `Retry-After` pause is running now.
    pub paused: bool,
    /// The rate limit the tenant asked for.
    pub rate_limit: Option<RateLimit>,
    /// Deliveries waiting to be attempted, as the store counts them (when it was asked).
    pub waiting: Option<u64>,
}

/// The figures behind a conversation with a customer about their endpoint, and the sentence
/// that states them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evidence {
    /// What the endpoint is doing.
    pub condition: Condition,
    /// Median response time measured by us.
    #[serde(rename = "p50_s", serialize_with = "opt_secs")]
    pub p50: Option<Duration>,
    /// 95th-percentile response time measured by us.
    #[serde(rename = "p95_s", serialize_with = "opt_secs")]
    pub p95: Option<Duration>,
    /// 99th-percentile response time measured by us.
    #[serde(rename = "p99_s", serialize_with = "opt_secs")]
    pub p99: Option<Duration>,
    /// Mean response time measured by us.
    #[serde(rename = "mean_s", serialize_with = "opt_secs")]
    pub mean: Option<Duration>,
    /// Concurrent deliveries allowed to this endpoint.
    pub lane: u32,
    /// Deliveries per second the lane sustains: lane ÷ the p95 of delivered attempts only
    /// (`None` without a delivery in the window: failures measure nothing about capacity),
    /// and never more than the endpoint's rate limit.
    pub sustainable_per_s: Option<f64>,
    /// Deliveries per second reaching admission for this endpoint.
    pub offered_per_s: f64,
    /// Share of offered deliveries shed at the full lane, 0 to 1.
    pub shed_share: f64,
    /// The figures in one sentence, for the status page and the notice to the customer.
    pub sentence: String,
}

/// The evidence for an endpoint whose window reads `snapshot`, whose lane is `lane` slots and
/// which stands as `standing`.
pub fn evidence(snapshot: &WindowSnapshot, lane: u32, standing: Standing<'_>) -> Evidence {
    // A p95 under the histogram's resolution is floored at 1 µs rather than divided by zero.
    let sustainable_per_s = snapshot.delivered_p95.map(|p95| {
        let lane_rate = f64::from(lane) / p95.as_secs_f64().max(1e-6);
        standing
            .rate_limit
            .map_or(lane_rate, |l| lane_rate.min(l.per_second()))
    });
    let failed = snapshot.samples.saturating_sub(snapshot.delivered);
    let condition = if standing.disabled.is_some() {
        Condition::Disabled
    } else if standing.breaker_open {
        Condition::BreakerOpen
    } else if standing.paused {
        Condition::Paused
    } else if standing.rate_limit.is_some() && snapshot.rate_limited_per_s > 0.0 {
        Condition::RateLimited
    } else if snapshot.samples == 0 {
        Condition::Idle
    } else if failed > snapshot.delivered {
        Condition::Failing
    } else {
        Condition::Delivering
    };
    let figures = figures(snapshot, lane, sustainable_per_s, failed);
    let sentence = match condition {
        Condition::Disabled => format!(
            "disabled ({}): nothing is delivered until it is enabled again; {figures}",
            standing.disabled.unwrap_or("no reason given")
        ),
        Condition::BreakerOpen => format!(
            "the breaker is open: deliveries are held, and one probe is tried once its \
             cooldown ends; {figures}"
        ),
        Condition::Paused => format!(
            "paused as the endpoint asked (Retry-After): nothing is attempted until the pause \
             ends; {figures}"
        ),
        Condition::RateLimited => format!("{}; {figures}", held_to_rate(snapshot, standing)),
        Condition::Failing | Condition::Delivering | Condition::Idle => figures,
    };
    Evidence {
        condition,
        p50: snapshot.p50,
        p95: snapshot.p95,
        p99: snapshot.p99,
        mean: snapshot.mean,
        lane,
        sustainable_per_s,
        offered_per_s: snapshot.offered_per_s,
        shed_share: snapshot.shed_share,
        sentence,
    }
}

/// What the window says, in words: the capacity sentence for an endpoint that delivers, what
/// fails and how for one that fails more than it delivers, or that nothing was measured.
fn figures(s: &WindowSnapshot, lane: u32, sustainable: Option<f64>, failed: u64) -> String {
    let offered = format_rate(s.offered_per_s);
    let failures = || {
        let how = s.failures.describe();
        let attempts = s.samples;
        match how.is_empty() {
            true => format!("{failed} of {attempts} attempts failed"),
            false => format!("{failed} of {attempts} attempts failed: {how}"),
        }
    };
    if s.samples == 0 {
        return format!(
            "no response times measured yet; with a lane of {lane} you are generating {offered} \
             events per second"
        );
    }
    match (s.delivered_p95, sustainable) {
        (Some(p95), Some(sustainable)) if failed <= s.delivered => {
            let head = format!(
                "at your current p95 of {} and a lane of {lane}, you can receive {} events per \
                 second; you are generating {offered}",
                format_duration(p95),
                format_rate(sustainable),
            );
            let head = if sustainable >= s.offered_per_s {
                format!("{head}, within that")
            } else {
                head
            };
            match failed {
                0 => head,
                _ => format!("{head}; {}", failures()),
            }
        }
        _ => format!(
            "failing: in the last {}, {}; {} events per second delivered while you are \
             generating {offered}",
            format_duration(s.span),
            failures(),
            format_rate(s.delivered_per_s),
        ),
    }
}

/// "held to its rate limit: you asked for 50/s; 120/s are arriving; 12,000 are waiting".
///
/// What arrives is what reaches admission less the deliveries the limit held and that came back
/// at their turns to be offered again.
fn held_to_rate(s: &WindowSnapshot, standing: Standing<'_>) -> String {
    let asked = standing.rate_limit.map_or(0.0, |l| l.per_second());
    let arriving = (s.offered_per_s - s.rate_limited_per_s).max(s.delivered_per_s);
    let head = format!(
        "held to its rate limit: you asked for {}/s; {}/s are arriving",
        format_rate(asked),
        format_rate(arriving)
    );
    match standing.waiting {
        Some(n) => {
            use num_format::{Locale, ToFormattedString};
            format!("{head}; {} are waiting", n.to_formatted_string(&Locale::en))
        }
        None => head,
    }
}

/// The lane Little's Law asks for: ⌈offered rate × p95⌉ slots, at least 1 and at most `ceiling`.
///
/// The ceiling is the fairness cap (a share of the worker pool): an endpoint that would need more
/// is the one to cap, so however slow it is it never holds more than its share of the fleet.
pub fn littles_law_lane(offered_per_s: f64, p95: Duration, ceiling: u32) -> u32 {
    let ceiling = ceiling.max(1);
    let needed = (offered_per_s * p95.as_secs_f64()).ceil();
    if needed.is_nan() {
        return 1;
    }
    // `as` saturates, and `min` has already capped an infinite need at the ceiling.
    (needed.min(f64::from(ceiling)) as u32).max(1)
}

/// A duration the way a person writes it: "450 µs", "2.5 ms", "180 ms", "2.5 s", "25 s", "4.5 min",
/// "1.5 h".
pub fn format_duration(duration: Duration) -> String {
    let s = duration.as_secs_f64();
    if s < 0.000_999_5 {
        format!("{} µs", (s * 1e6).round())
    } else if s < 0.009_95 {
        format!("{} ms", one_decimal(s * 1e3))
    } else if s < 0.999_5 {
        format!("{} ms", (s * 1e3).round())
    } else if s < 9.95 {
        format!("{} s", one_decimal(s))
    } else if s < 119.5 {
        format!("{} s", s.round())
    } else if s < 7_170.0 {
        format!("{} min", one_decimal(s / 60.0))
    } else {
        format!("{} h", one_decimal(s / 3600.0))
    }
}

/// A rate the way a person writes it: two significant figures below 1 ("0.16"), one decimal
/// below 10 ("2.5", "3"), whole numbers with thousands separators above ("40", "1,200").
pub fn format_rate(per_s: f64) -> String {
    if per_s.is_nan() || per_s <= 0.0 {
        "0".to_owned()
    } else if per_s >= 9.95 {
        use num_format::{Locale, ToFormattedString};
        (per_s.min(u64::MAX as f64).round() as u64).to_formatted_string(&Locale::en)
    } else if per_s >= 0.995 {
        one_decimal(per_s)
    } else {
        // floor(log10) is -1 for 0.1..1, so two decimals there, three for 0.01..0.1, and so on.
        let decimals = (1 - per_s.log10().floor() as i32).clamp(0, 6) as usize;
        trim(format!("{per_s:.decimals$}"))
    }
}

/// One decimal place, without a trailing ".0".
fn one_decimal(x: f64) -> String {
    trim(format!("{x:.1}"))
}

/// Drops trailing zeros after a decimal point, and the point if nothing follows it.
fn trim(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests;
