//! Subscriptions: which endpoints an event type reaches, as an index both drivers keep.
//!
//! Each endpoint that can receive events is stored once per pattern it subscribes to, in
//! `subscriptions (tenant_id, pattern, endpoint_id)`, written in the same transaction as the
//! endpoint itself: an endpoint with no filter is the pattern `*`, one with filters is one row
//! per event type. Fan-out looks up the few patterns an event type can match (the type itself,
//! then `a.b.*`, `a.*` and `*` for `a.b.c`), so a message costs the endpoints it reaches rather
//! than every endpoint of its tenant.
//!
//! Prefix patterns (`order.*`) are part of the index already; whether a filter may be written as
//! one is the API's decision ([`crate::api`] accepts event types of `A-Z a-z 0-9 . _ - :` today).

use std::borrow::Cow;

/// The pattern that stands for "every event type".
pub const EVERY_EVENT: &str = "*";

/// The patterns an endpoint with these filters is stored under (no filter is [`EVERY_EVENT`]),
/// without repeats and without a pattern another one already covers (`order.paid` beside
/// `order.*`): so at most one of an endpoint's patterns matches any event type, and fan-out
/// needs no de-duplication.
pub fn patterns(event_types: &[String]) -> Vec<&str> {
    if event_types.is_empty() {
        return vec![EVERY_EVENT];
    }
    let mut out: Vec<&str> = event_types.iter().map(String::as_str).collect();
    out.sort_unstable();
    out.dedup();
    let covered = |p: &str, all: &[&str]| all.iter().any(|q| *q != p && covers(q, p));
    let all = out.clone();
    out.retain(|p| !covered(p, &all));
    out
}

/// Does pattern `wide` match every event type pattern `narrow` matches?
fn covers(wide: &str, narrow: &str) -> bool {
    match narrow.strip_suffix('*') {
        // A prefix pattern is covered by itself or a shorter prefix pattern.
        Some(prefix) => {
            wide == EVERY_EVENT
                || wide
                    .strip_suffix('*')
                    .is_some_and(|w| w.ends_with('.') && prefix.starts_with(w))
        }
        None => matches(wide, narrow),
    }
}

/// Every pattern that matches `event_type`, most specific first: the type itself, then each
/// dotted prefix followed by `.*`, then [`EVERY_EVENT`].
pub fn candidates(event_type: &str) -> impl Iterator<Item = Cow<'_, str>> {
    let prefixes = event_type
        .rmatch_indices('.')
        .map(move |(at, _)| Cow::Owned(format!("{}.*", &event_type[..at])));
    std::iter::once(Cow::Borrowed(event_type))
        .chain(prefixes)
        .chain(std::iter::once(Cow::Borrowed(EVERY_EVENT)))
}

/// Does `pattern` match `event_type`? The rule [`candidates`] enumerates.
pub fn matches(pattern: &str, event_type: &str) -> bool {
    if pattern == EVERY_EVENT || pattern == event_type {
        return true;
    }
    pattern.strip_suffix('*').is_some_and(|prefix| {
        prefix.ends_with('.') && event_type.len() > prefix.len() && event_type.starts_with(prefix)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn candidates_run_from_the_type_to_every_event() {
        let c: Vec<_> = candidates("order.paid.v2").collect();
        assert_eq!(c, ["order.paid.v2", "order.paid.*", "order.*", "*"]);
        let c: Vec<_> = candidates("ping").collect();
        assert_eq!(c, ["ping", "*"]);
    }

    #[test]
    fn patterns_of_no_filter_is_every_event_and_repeats_go() {
        assert_eq!(patterns(&[]), [EVERY_EVENT]);
        let types = ["b".to_owned(), "a".to_owned(), "b".to_owned()];
        assert_eq!(patterns(&types), ["a", "b"]);
    }

    #[test]
    fn patterns_drop_what_a_wider_pattern_covers() {
        let types: Vec<String> = ["order.paid", "order.*", "order.paid.*", "invoice.sent"]
            .map(String::from)
            .to_vec();
        assert_eq!(patterns(&types), ["invoice.sent", "order.*"]);
        let types: Vec<String> = ["*", "a"].map(String::from).to_vec();
        assert_eq!(patterns(&types), ["*"]);
    }

    #[test]
    fn prefix_patterns_match_below_the_dot_only() {
        assert!(matches("order.*", "order.paid"));
        assert!(matches("order.*", "order.paid.v2"));
        assert!(!matches("order.*", "order"));
        assert!(!matches("order.*", "orders.paid"));
        assert!(!matches("order", "order.paid"));
        assert!(matches("*", "anything"));
    }

    proptest! {
        /// Stored patterns match exactly the event types the filters match, and never two of
        /// them the same type.
        #[test]
        fn stored_patterns_match_once(
            filters in proptest::collection::vec("[ab](\\.[ab]){0,2}(\\.\\*)?|\\*", 0..5),
            event in "[ab](\\.[ab]){0,3}",
        ) {
            let stored = patterns(&filters);
            let by_filters = filters.is_empty() || filters.iter().any(|f| matches(f, &event));
            let hits = stored.iter().filter(|p| matches(p, &event)).count();
            prop_assert_eq!(hits > 0, by_filters);
            prop_assert!(hits <= 1, "{:?} matched {} twice", stored, event);
        }

        /// The candidates of a type are exactly the patterns that match it, among patterns
        /// built from its own pieces and a neighbour's.
        #[test]
        fn candidates_are_the_matching_patterns(
            parts in proptest::collection::vec("[a-c]{1,2}", 1..5),
            other in proptest::collection::vec("[a-c]{1,2}", 1..5),
        ) {
            let event_type = parts.join(".");
            let cands: Vec<String> = candidates(&event_type).map(Cow::into_owned).collect();
            let mut pool = vec![EVERY_EVENT.to_owned(), other.join(".")];
            for n in 1..=other.len() {
                pool.push(format!("{}.*", other[..n].join(".")));
            }
            for n in 1..=parts.len() {
                pool.push(format!("{}.*", parts[..n].join(".")));
                pool.push(parts[..n].join("."));
            }
            for p in &pool {
                prop_assert_eq!(matches(p, &event_type), cands.contains(p), "pattern {}", p);
            }
        }
    }
}
