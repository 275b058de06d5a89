//! `destinations`' report: each kind's burst, its service time, and each broker against HTTP.

use super::verdicts::{LEAST_SHARE_OF_HTTP, LEAST_SHARE_OF_HTTP_AWS, against_http};
use super::{Kind, Row};
use crate::BenchArgs;
use crate::report::Report;

/// The report: parameters, each kind's figures, the verdicts.
pub(super) fn report(args: &BenchArgs, messages: u64, producers: usize, rows: &[Row]) -> Report {
    let mut report = Report::new("destinations", args.describe());
    report.param("messages", messages);
    report.param("producers", producers);
    report.param("fan_out", 1);
    let http = rows
        .iter()
        .find(|r| r.kind == Kind::Http)
        .map(|r| r.burst.delivery_per_s);
    for row in rows {
        let kind = row.kind;
        let key = |what: &str| format!("{}_{what}", kind.key());
        let label = |what: &str| format!("{}: {what}", kind.label());
        row.burst.figures(&mut report, args, &key, &label);
        report.figure(
            &key("service_p50_ms"),
            &label("attempt service time p50 (a broker's: connect, publish, acknowledgement)"),
            row.service_p50_s.map(|s| s * 1e3),
            "ms",
        );
        report.figure(
            &key("service_p99_ms"),
            &label("attempt service time p99"),
            row.service_p99_s.map(|s| s * 1e3),
            "ms",
        );
        report.invariant(
            row.burst.undelivered == 0,
            format!(
                "{}: every delivery arrived ({} missing)",
                kind.label(),
                row.burst.undelivered
            ),
        );
        if kind == Kind::Http {
            continue;
        }
        let least = if kind.is_cloud() {
            LEAST_SHARE_OF_HTTP_AWS
        } else {
            LEAST_SHARE_OF_HTTP
        };
        let Some((share, pass)) =
            http.and_then(|h| against_http(row.burst.delivery_per_s, h, least))
        else {
            continue;
        };
        report.figure(
            &key("vs_http"),
            &label("deliveries/s ÷ HTTP's"),
            Some(share),
            "×",
        );
        report.verdict(
            pass,
            format!(
                "{}: {share:.2}× HTTP's deliveries/s (target ≥ {least}×)",
                kind.label()
            ),
        );
    }
    report.note(
        "producers, the HTTP receiver, the broker consumers and sluice share this process; the \
         brokers run beside it on the same cores: a broker's figures include its own CPU; the \
         cloud kinds run against emulators (moto, Google's Pub/Sub emulator), slower than the \
         services, so theirs are the emulators' ceilings as much as sluice's",
    );
    report
}
