#!/usr/bin/env python3
"""A local OTLP/HTTP trace receiver for dsh's tests.

Listens on 127.0.0.1 (an ephemeral port, printed as the first stdout line),
decodes each POST /v1/traces body as an ExportTraceServiceRequest with the
official protobuf definitions (the `opentelemetry-proto` PyPI package), and
appends one JSON line per span to --out: ids in hex, name, kind, times,
attributes, events, status, the resource attributes, and the request's
content type and authorization header. Answers with an empty
ExportTraceServiceResponse.
"""

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

MAX_BODY = 16 * 1024 * 1024


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind is None:
        return None
    return getattr(v, kind)


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    out = None

    def do_POST(self):
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        length = int(self.headers.get("content-length", "0"))
        if length < 0 or length > MAX_BODY:
            self.send_error(413)
            return
        body = self.rfile.read(length)
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for rs in request.resource_spans:
            resource = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append(json.dumps({
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": s.kind,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": attrs(s.attributes),
                        "events": [{"name": e.name, "attributes": attrs(e.attributes)} for e in s.events],
                        "status": {"code": s.status.code, "message": s.status.message},
                        "resource": resource,
                        "scope": ss.scope.name,
                        "content_type": self.headers.get("content-type"),
                        "authorization": self.headers.get("authorization"),
                    }))
        with open(self.out, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    Handler.out = args.out
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
