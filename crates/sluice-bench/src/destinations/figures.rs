//! `destinations`' report: each kind's burst, its service time, each kind against HTTP; for a
//! cloud kind, what the sink counted or the emulator's CPU and own ceiling.

use super::ceiling::{MOTO_THREADS, PUBSUB_PUBLISHERS};
use super::verdicts::{LEAST_SHARE_OF_HTTP, LEAST_SHARE_OF_HTTP_CLOUD, against_http};
use super::{Kind, Row};
use crate::report::{Report, ratio};
use crate::{BenchArgs, Cloud};

/// The report: parameters, each kind's figures, the verdicts.
pub(super) fn report(args: &BenchArgs, messages: u64, producers: usize, rows: &[Row]) -> Report {
    let mut report = Report::new("destinations", args.describe());
    report.param("messages", messages);
    report.param("producers", producers);
    report.param("fan_out", 1);
    report.param(
        "cloud",
        match args.cloud {
            Cloud::Sink => "sink",
            Cloud::Emulators => "emulators",
        },
    );
    let http = rows
        .iter()
        .find(|r| r.kind == Kind::Http)
        .map(|r| r.burst.delivery_per_s);
    for row in rows {
        let kind = row.kind;
        let name = kind.label_in(args.cloud);
        let key = |what: &str| format!("{}_{what}", kind.key());
        let label = |what: &str| format!("{name}: {what}");
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
                "{name}: every delivery arrived ({} missing)",
                row.burst.undelivered
            ),
        );
        cloud_figures(&mut report, row, &name, &key);
        if kind == Kind::Http {
            continue;
        }
        let least = if kind.is_cloud() {
            LEAST_SHARE_OF_HTTP_CLOUD
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
        // Through an emulator the share is the emulator's, not sluice's: no verdict.
        if kind.is_cloud() && args.cloud == Cloud::Emulators {
            continue;
        }
        report.verdict(
            pass,
            format!("{name}: {share:.2}× HTTP's deliveries/s (target ≥ {least}×)"),
        );
    }
    report.note(
        "producers, the HTTP receiver, the broker consumers and sluice share this process; the \
         brokers run beside it on the same cores: a broker's figures include its own CPU",
    );
    report.note(match args.cloud {
        Cloud::Sink => "the cloud kinds go to a stand-in for the services in this process that \
             answers each call with the service's success reply at once (signatures not \
             verified; AWS calls without an Authorization header counted): their figures are \
             sluice's own ceiling per kind, the signing, the call and the reading of the answer"
            .to_owned(),
        Cloud::Emulators => format!(
            "the cloud kinds go to moto (one Python process, signature and IAM checking on) and \
             Google's Pub/Sub emulator, both slower than the services: each row's figures are \
             the emulator's ceiling as much as sluice's. Beside each: the emulator's CPU over \
             the burst, and what it took from a client that is not sluice once the burst was \
             over (the same calls, as many messages: boto3 from {MOTO_THREADS} threads, REST \
             publishes from {PUBSUB_PUBLISHERS} tasks). The burst is 1,000 messages here unless \
             --messages says otherwise (not 20,000): emulators are slow"
        ),
    });
    report
}

/// A cloud kind's extra figures: the sink's counts (with the invariant that every AWS call was
/// signed), or the emulator's CPU and own ceiling.
fn cloud_figures(report: &mut Report, row: &Row, name: &str, key: &dyn Fn(&str) -> String) {
    let label = |what: &str| format!("{name}: {what}");
    if let Some(sink) = &row.sink {
        report.figure(
            &key("sink_calls"),
            &label("publish calls the sink answered"),
            Some(sink.calls as f64),
            "",
        );
        if row.kind.service().is_some_and(|s| s.is_aws()) {
            report.figure(
                &key("unsigned"),
                &label("calls without an Authorization header"),
                Some(sink.unsigned as f64),
                "",
            );
            report.invariant(
                sink.unsigned == 0,
                format!("{name}: every call was signed ({} not)", sink.unsigned),
            );
        }
        report.invariant(
            sink.unreadable == 0,
            format!(
                "{name}: every request was a publish the sink reads ({} not)",
                sink.unreadable
            ),
        );
    }
    if let Some(e) = &row.emulator {
        report.figure(
            &key("emulator_cpu_burst"),
            &label("the emulator's CPU over the burst"),
            e.burst_cpu_cores,
            "cores",
        );
        report.figure(
            &key("emulator_ceiling_per_s"),
            &label("the emulator's own ceiling, calls/s from a client that is not sluice"),
            Some(e.ceiling.per_s),
            "/s",
        );
        report.figure(
            &key("emulator_ceiling_cpu"),
            &label("the emulator's CPU over that"),
            e.ceiling.cpu_cores,
            "cores",
        );
        report.figure(
            &key("emulator_ceiling_refused"),
            &label("calls the emulator refused or failed in that"),
            Some(e.ceiling.refused as f64),
            "",
        );
        report.figure(
            &key("vs_emulator_ceiling"),
            &label("deliveries/s ÷ the emulator's own ceiling"),
            ratio(Some(row.burst.delivery_per_s), Some(e.ceiling.per_s)),
            "×",
        );
    }
}
