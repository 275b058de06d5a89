//! A finished span as the exporter sends it: built after the fact from the times the
//! dispatcher measured anyway, so nothing is allocated for tracing while an attempt runs.

/// What a span describes, as OTLP numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Inside sluice (a delivery held without an attempt).
    Internal,
    /// An HTTP attempt: sluice is the client.
    Client,
    /// A broker attempt: sluice publishes a message.
    Producer,
}

impl SpanKind {
    /// The OTLP `Span.SpanKind` number.
    pub fn code(self) -> u64 {
        match self {
            Self::Internal => 1,
            Self::Client => 3,
            Self::Producer => 4,
        }
    }
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(String),
    /// A static string (no allocation).
    Static(&'static str),
    /// An integer.
    Int(i64),
}

/// One attribute: a semantic-convention or `sluice.` key and its value.
pub type Attribute = (&'static str, Value);

/// Something that happened during a span.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When, nanoseconds since the Unix epoch.
    pub time_unix_ns: u64,
    /// `sluice.held` or `sluice.shed`.
    pub name: &'static str,
    /// Its attributes (`sluice.reason`).
    pub attributes: Vec<Attribute>,
}

/// A finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The trace it belongs to.
    pub trace_id: [u8; 16],
    /// Its own id.
    pub span_id: [u8; 8],
    /// Its parent: the producer's span, if the message came with one.
    pub parent_span_id: Option<[u8; 8]>,
    /// The producer's `tracestate`, carried as the span's.
    pub trace_state: Option<String>,
    /// `POST`, `send <destination>` or `held`.
    pub name: String,
    /// Client, producer or internal.
    pub kind: SpanKind,
    /// Start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// End, nanoseconds since the Unix epoch.
    pub end_unix_ns: u64,
    /// Its attributes: never a secret, a header value or the payload.
    pub attributes: Vec<Attribute>,
    /// Its events.
    pub events: Vec<Event>,
    /// `Some(description)` when the attempt failed (span status ERROR).
    pub error: Option<String>,
}
