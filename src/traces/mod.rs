//! OpenTelemetry traces of deliveries: the sampler, the spans, their OTLP/HTTP protobuf
//! encoding and the batch exporter, and the [`Tracer`] the dispatcher asks.
//!
//! Off by default. With no collector configured the tracer holds nothing: the dispatcher asks
//! [`Tracer::exporting`] (one branch) and builds no span, allocates nothing for one. Spans are
//! made after an attempt from the times it measured anyway, and handed to a bounded queue.

pub mod exporter;
pub mod otlp;
pub mod sampler;
pub mod settings;
pub mod span;

pub use exporter::{ExportCounters, Exporter};
pub use sampler::Sampler;
pub use settings::{RawTraceSettings, TraceSettings};
pub use span::{Attribute, Event, Span, SpanKind, Value};

/// What the dispatcher asks about traces: is export on, is this trace sampled, and where a
/// finished span goes.
#[derive(Clone, Default)]
pub struct Tracer {
    exporter: Option<Exporter>,
    sampler: Sampler,
}

impl Tracer {
    /// A tracer exporting per `settings` (off when they name no endpoint), counting into
    /// `counters`. Starts the export task on the current runtime when export is on.
    pub fn start(settings: &TraceSettings, counters: ExportCounters) -> Self {
        Self {
            exporter: settings
                .exporting()
                .then(|| Exporter::start(settings, counters))
                .flatten(),
            sampler: settings.sampler,
        }
    }

    /// Is export on?
    pub fn exporting(&self) -> bool {
        self.exporter.is_some()
    }

    /// Is the trace `trace_id` recorded, given the producer's `sampled` flag (`None`: sluice
    /// started it)? Always false with export off.
    pub fn sampled(&self, parent_sampled: Option<bool>, trace_id: &[u8; 16]) -> bool {
        self.exporting() && self.sampler.sampled(parent_sampled, trace_id)
    }

    /// Export a finished span (dropped and counted when the queue is full).
    pub fn export(&self, span: Span) {
        if let Some(e) = &self.exporter {
            e.send(span);
        }
    }
}

/// A new random span id (never all zero).
pub fn new_span_id() -> [u8; 8] {
    loop {
        let id: [u8; 8] = rand::random();
        if id != [0; 8] {
            return id;
        }
    }
}

/// Nanoseconds since the Unix epoch now.
pub fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
