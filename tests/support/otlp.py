"""An OTLP/HTTP trace collector in the test process, for the spans of real workers.

Worker processes export with the real exporter (OTEL_EXPORTER_OTLP_ENDPOINT pointed
here); the collector decodes what arrives with the protocol's own messages. It is
also a downstream HTTP target: requests to /downstream/... are answered and their
headers kept, so a test sees the traceparent a tool sent.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class Collector:
    """`keep=False`: count the spans received without keeping them (a benchmark's
    collector stands for one on another host; what it does with spans is not the
    worker's cost)."""

    def __init__(self, keep: bool = True):
        self.keep = keep
        self.received = 0
        self.received_events = 0
        self.spans: list[dict] = []
        self.bodies: list[bytes] = []  # each export request as it came (kept ones only)
        # cleared: what arrives is kept but not answered until it is set (a hung collector)
        self.answering = threading.Event()
        self.answering.set()
        self.downstream: list[dict] = []
        self._lock = threading.Lock()
        self.server = None
        self._listen(0)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _listen(self, port: int) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop listening: a request now finds its connection refused (a collector down)."""
        self.answering.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def reopen(self) -> None:
        """Listen again on the same port (the collector back), keeping what it received."""
        self._listen(self.port)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.spans)

    def received_headers(self) -> list[dict]:
        with self._lock:
            return list(self.downstream)

    def _keep(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        if not self.keep:
            spans = [span for resource_spans in request.resource_spans
                     for scope_spans in resource_spans.scope_spans for span in scope_spans.spans]
            with self._lock:
                self.received += len(spans)
                self.received_events += sum(len(span.events) for span in spans)
            return
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append({
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex(), "name": span.name,
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "events": [{"name": e.name, "time": e.time_unix_nano,
                                    "attributes": {a.key: _value(a.value) for a in e.attributes}}
                                   for e in span.events],
                        "dropped_events": span.dropped_events_count,
                        "pid": resource.get("process.pid"), "resource": resource})
        with self._lock:
            self.spans.extend(spans)
            self.bodies.append(body)
            self.received += len(spans)
            self.received_events += sum(len(span["events"]) for span in spans)

    def _handler(self):
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    collector._keep(body)
                    collector.answering.wait()
                    self._answer(ExportTraceServiceResponse().SerializeToString(),
                                 "application/x-protobuf")
                elif self.path.startswith("/downstream/"):
                    with collector._lock:
                        collector.downstream.append({k.lower(): v for k, v in self.headers.items()})
                    self._answer(json.dumps({"id": len(collector.downstream)}).encode(),
                                 "application/json")
                else:
                    self.send_error(404)

            def do_GET(self):
                if self.path != "/received":
                    self.send_error(404)
                    return
                with collector._lock:
                    received = {"spans": collector.received, "events": collector.received_events}
                self._answer(json.dumps(received).encode(), "application/json")

            def _answer(self, body: bytes, content_type: str):
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        return Handler


if __name__ == "__main__":  # a collector in a process of its own: prints its URL, serves
    import sys

    collector = Collector(keep="--count" not in sys.argv)
    print(collector.url, flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin
    finally:
        collector.close()
