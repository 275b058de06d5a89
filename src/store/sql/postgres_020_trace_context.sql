-- sluice schema v20 (PostgreSQL): trace context. A message keeps its producer's W3C
-- `traceparent` (version 00 form) and `tracestate` when it came with a valid one (NULL
-- otherwise: every row written before, and messages without one, whose attempts are in a trace
-- derived from the message id); an endpoint may ask for `traceparent` on its attempts.
ALTER TABLE messages ADD COLUMN traceparent TEXT;
ALTER TABLE messages ADD COLUMN tracestate TEXT;
ALTER TABLE endpoints ADD COLUMN trace_context BOOLEAN NOT NULL DEFAULT FALSE;
