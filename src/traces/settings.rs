//! The tracing settings: where spans go (OTLP/HTTP protobuf), with which headers, under which
//! service name and sampler, and the bounds of the export queue. Read the standard way
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`/`_ARG`,
//! `OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_TIMEOUT`), by flags `--otlp-…`/`--traces-…`, or from a
//! `[traces]` table of the settings file (keys spelled as the flags). Setting an endpoint turns export on.

use std::time::Duration;

use serde::Deserialize;

use super::sampler::Sampler;
use crate::setting::{Problems, SettingProblem, shown};

/// The tracing settings, validated. Their `Debug` names the export headers, never their values.
#[derive(Clone, PartialEq)]
pub struct TraceSettings {
    /// Where spans are POSTed (`…/v1/traces`); `None`: export is off.
    pub endpoint: Option<url::Url>,
    /// Headers sent with every export (a collector's API key): never logged or shown.
    pub headers: Vec<(String, String)>,
    /// `service.name` of the spans.
    pub service_name: String,
    /// Which traces are recorded.
    pub sampler: Sampler,
    /// Most spans waiting for export (1–1000000); past it new spans are dropped and counted.
    pub max_queue: usize,
    /// Most spans in one export request (1–max_queue).
    pub max_batch: usize,
    /// Longest a span waits before its batch is sent (1ms–1m).
    pub schedule_delay: Duration,
    /// Longest one export request may take (100ms–1m); its spans are dropped past it.
    pub export_timeout: Duration,
}

impl Default for TraceSettings {
    fn default() -> Self {
        Self {
            endpoint: None,
            headers: Vec::new(),
            service_name: "sluice".into(),
            sampler: Sampler::default(),
            max_queue: 2048,
            max_batch: 512,
            schedule_delay: Duration::from_secs(5),
            export_timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for TraceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("TraceSettings")
            .field("endpoint", &self.endpoint.as_ref().map(url::Url::as_str))
            .field("header_names", &header_names)
            .field("service_name", &self.service_name)
            .field("sampler", &self.sampler)
            .field("max_queue", &self.max_queue)
            .field("max_batch", &self.max_batch)
            .field("schedule_delay", &self.schedule_delay)
            .field("export_timeout", &self.export_timeout)
            .finish()
    }
}

impl TraceSettings {
    /// Is export on?
    pub fn exporting(&self) -> bool {
        self.endpoint.is_some()
    }

    /// Every value out of range: the queue 1–1000000, a batch 1–max_queue, the delay
    /// 1ms–1m, the timeout 100ms–1m.
    pub fn problems(&self) -> Vec<SettingProblem> {
        let mut p = Problems::default();
        p.check(
            (1..=1_000_000).contains(&self.max_queue),
            "max_queue",
            self.max_queue,
            "1–1000000",
        );
        p.check(
            (1..=self.max_queue.max(1)).contains(&self.max_batch),
            "max_batch",
            self.max_batch,
            "1 to the queue size",
        );
        p.check(
            (Duration::from_millis(1)..=Duration::from_secs(60)).contains(&self.schedule_delay),
            "schedule_delay",
            shown(self.schedule_delay),
            "1ms–1m",
        );
        p.check(
            (Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.export_timeout),
            "export_timeout",
            shown(self.export_timeout),
            "100ms–1m",
        );
        p.into_vec()
    }
}

crate::setting::raw_settings! {
    /// The raw tracing settings (flags `--otlp-…`, `--otel-service-name` and `--traces-…`, the
    /// standard `OTEL_…` variables; in the file, the same keys in a `[traces]` table).
    #[derive(Debug, Clone, Default, Deserialize, clap::Args)]
    #[serde(deny_unknown_fields)]
    pub struct RawTraceSettings {
        /// Export attempt spans over OTLP/HTTP (protobuf) to this collector: spans go to ENDPOINT/v1/traces; setting it turns tracing on [default: none, off]
        #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
        #[serde(rename = "otlp-endpoint", alias = "otlp_endpoint")]
        pub endpoint: Option<String>,
        /// The full URL spans are POSTed to, instead of --otlp-endpoint's /v1/traces [default: none]
        #[arg(long = "otlp-traces-endpoint", env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")]
        #[serde(rename = "otlp-traces-endpoint", alias = "otlp_traces_endpoint")]
        pub traces_endpoint: Option<String>,
        /// Headers of every export, key=value,… with values percent-encoded (a collector's API key) [default: none]
        #[arg(
            long = "otlp-headers",
            env = "OTEL_EXPORTER_OTLP_HEADERS",
            hide_env_values = true
        )]
        #[serde(rename = "otlp-headers", alias = "otlp_headers")]
        pub headers: Option<String>,
        /// Most time one export request may take, milliseconds, 100–60000 [default: 10000]
        #[arg(long = "otlp-timeout", env = "OTEL_EXPORTER_OTLP_TIMEOUT")]
        #[serde(rename = "otlp-timeout", alias = "otlp_timeout")]
        pub timeout: Option<u64>,
        /// service.name of the spans [default: sluice]
        #[arg(long = "otel-service-name", env = "OTEL_SERVICE_NAME")]
        #[serde(rename = "otel-service-name", alias = "otel_service_name")]
        pub service_name: Option<String>,
        /// always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio [default: parentbased_always_on]
        #[arg(long = "traces-sampler", env = "OTEL_TRACES_SAMPLER")]
        #[serde(rename = "traces-sampler", alias = "traces_sampler")]
        pub sampler: Option<String>,
        /// The ratio (0–1) of the traceidratio samplers [default: 1]
        #[arg(long = "traces-sampler-arg", env = "OTEL_TRACES_SAMPLER_ARG")]
        #[serde(rename = "traces-sampler-arg", alias = "traces_sampler_arg")]
        pub sampler_arg: Option<String>,
        /// Most spans waiting for export; past it new spans are dropped (counted in sluice_trace_spans_dropped_total), 1–1000000 [default: 2048]
        #[arg(long = "traces-max-queue", env = "OTEL_BSP_MAX_QUEUE_SIZE")]
        #[serde(rename = "traces-max-queue", alias = "traces_max_queue")]
        pub max_queue: Option<usize>,
        /// Most spans in one export request, 1 to the queue size [default: 512]
        #[arg(long = "traces-max-batch", env = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE")]
        #[serde(rename = "traces-max-batch", alias = "traces_max_batch")]
        pub max_batch: Option<usize>,
        /// Longest a span waits before its batch is sent, milliseconds, 1–60000 [default: 5000]
        #[arg(long = "traces-schedule-delay", env = "OTEL_BSP_SCHEDULE_DELAY")]
        #[serde(rename = "traces-schedule-delay", alias = "traces_schedule_delay")]
        pub schedule_delay: Option<u64>,
    }
}

impl RawTraceSettings {
    /// Parse every value, adding each that does not parse to `errors` by its flag; the
    /// ranges are checked by [`TraceSettings::problems`].
    pub fn parse(self, errors: &mut Vec<String>) -> TraceSettings {
        let mut s = TraceSettings::default();
        let http_url = |text: &str| {
            url::Url::parse(text.trim())
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        };
        let refused =
            |flag: &str, text: &str| format!("{flag}: {text:?} must be an http:// or https:// URL");
        if let Some(text) = &self.traces_endpoint {
            match http_url(text) {
                Some(u) => s.endpoint = Some(u),
                None => errors.push(refused("otlp-traces-endpoint", text)),
            }
        } else if let Some(text) = &self.endpoint {
            match http_url(text) {
                Some(_) => {
                    let base = text.trim().trim_end_matches('/');
                    s.endpoint = http_url(&format!("{base}/v1/traces"));
                }
                None => errors.push(refused("otlp-endpoint", text)),
            }
        }
        if let Some(text) = &self.headers {
            match parse_headers(text) {
                Ok(h) => s.headers = h,
                Err(e) => errors.push(format!("otlp-headers: {e}")),
            }
        }
        if let Some(name) = &self.service_name {
            match name.trim() {
                "" => errors.push("otel-service-name: must not be empty".into()),
                n => s.service_name = n.to_owned(),
            }
        }
        if let Some(name) = &self.sampler {
            match Sampler::parse(name, self.sampler_arg.as_deref()) {
                Ok(sampler) => s.sampler = sampler,
                Err(e) => errors.push(format!("traces-sampler: {e}")),
            }
        }
        s.max_queue = self.max_queue.unwrap_or(s.max_queue);
        s.max_batch = self
            .max_batch
            .unwrap_or(s.max_batch.min(s.max_queue.max(1)));
        if let Some(ms) = self.schedule_delay {
            s.schedule_delay = Duration::from_millis(ms);
        }
        if let Some(ms) = self.timeout {
            s.export_timeout = Duration::from_millis(ms);
        }
        s
    }
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by commas, values
/// percent-encoded. An error never repeats a value (it may be a secret).
pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, pair) in text.split(',').enumerate() {
        if pair.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("entry {} is not key=value", i + 1));
        };
        let key = key.trim().to_ascii_lowercase();
        let value = percent_decode(value.trim())
            .ok_or_else(|| format!("the value of {key:?} is not percent-encoded text"))?;
        let valid_name = reqwest::header::HeaderName::from_bytes(key.as_bytes()).is_ok();
        let valid_value = reqwest::header::HeaderValue::from_str(&value).is_ok();
        if !valid_name || !valid_value {
            return Err(format!("{key:?} is not a valid header"));
        }
        out.push((key, value));
    }
    Ok(out)
}

fn percent_decode(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_turns_export_on_at_its_traces_path() {
        let mut errors = Vec::new();
        let s = RawTraceSettings::default().parse(&mut errors);
        assert!(!s.exporting());
        let s = RawTraceSettings {
            endpoint: Some("http://collector:4318/".into()),
            ..Default::default()
        }
        .parse(&mut errors);
        assert_eq!(
            s.endpoint.as_ref().map(url::Url::as_str),
            Some("http://collector:4318/v1/traces")
        );
        let s = RawTraceSettings {
            endpoint: Some("http://collector:4318".into()),
            traces_endpoint: Some("https://c.example/custom".into()),
            ..Default::default()
        }
        .parse(&mut errors);
        assert_eq!(
            s.endpoint.as_ref().map(url::Url::as_str),
            Some("https://c.example/custom")
        );
        assert_eq!(errors, Vec::<String>::new());
    }

    #[test]
    fn bad_values_are_named_by_their_flags() {
        let mut errors = Vec::new();
        let s = RawTraceSettings {
            endpoint: Some("collector:4318".into()),
            headers: Some("api-key=s3cret,broken".into()),
            sampler: Some("sometimes".into()),
            service_name: Some(" ".into()),
            max_queue: Some(0),
            ..Default::default()
        }
        .parse(&mut errors);
        let flags: Vec<_> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap())
            .collect();
        assert_eq!(
            flags,
            [
                "otlp-endpoint",
                "otlp-headers",
                "otel-service-name",
                "traces-sampler"
            ]
        );
        assert!(!errors.concat().contains("s3cret"), "{errors:?}");
        let fields: Vec<_> = s.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            ["max_queue"],
            "the batch follows the queue by default"
        );
        assert!(errors[0].contains("\"collector:4318\""), "{errors:?}");
    }

    #[test]
    fn headers_are_percent_decoded() {
        assert_eq!(
            parse_headers("Api-Key=a%20b, x-tenant=42").unwrap(),
            [
                ("api-key".to_owned(), "a b".to_owned()),
                ("x-tenant".to_owned(), "42".to_owned())
            ]
        );
        assert!(parse_headers("k=%zz").is_err());
    }
}
