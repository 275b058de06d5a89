"""An OTLP/HTTP trace receiver for sluice's tests: decodes each POST /v1/traces body as an
`ExportTraceServiceRequest` with PyPI's opentelemetry-proto (not sluice's own encoder, which is
what is under test) and appends every span to --out as one JSON line.

It listens on 127.0.0.1 with a free port and prints {"port": N} as its first line. A body that
does not decode, or is not sent as application/x-protobuf, is answered 400 and recorded as a
line {"error": ...}, so a test sees it.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def any_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def span_json(resource, scope, span):
    return {
        "service": resource.get("service.name"),
        "scope": scope.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "trace_state": span.trace_state,
        "name": span.name,
        "kind": span.kind,
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "flags": span.flags,
        "attributes": attributes(span.attributes),
        "events": [
            {"name": e.name, "time_unix_nano": e.time_unix_nano, "attributes": attributes(e.attributes)}
            for e in span.events
        ],
        "status": {"code": span.status.code, "message": span.status.message},
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="file the spans are appended to, one JSON line each")
    args = parser.parse_args()
    lock = threading.Lock()

    def record(lines):
        with lock, open(args.out, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                record([{"error": f"{self.path} {self.headers.get('Content-Type')}"}])
                self.send_response(400)
                self.end_headers()
                return
            request = ExportTraceServiceRequest()
            try:
                request.ParseFromString(body)
            except DecodeError as e:
                record([{"error": f"cannot decode: {e}"}])
                self.send_response(400)
                self.end_headers()
                return
            lines = []
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        lines.append(span_json(resource, ss.scope, span))
            record(lines)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
