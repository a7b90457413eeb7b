"""A request's trace: the caller's W3C `traceparent` continued, or a new trace.

While tracing is on, a request that writes (not GET or HEAD) or that carries a
`traceparent` gets a server span, current while the view runs: a run launched by it
joins that trace (observer.Observer.launched). Plain page views and polls without a
`traceparent` are not traced: they would bury the runs' traces in page loads.
"""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry import trace

from runs.observability import tracing

READS = ("GET", "HEAD", "OPTIONS")


class TraceRequestMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        tracer = tracing.tracer()
        carried = request.META.get("HTTP_TRACEPARENT")
        if tracer is None or (request.method in READS and not carried):
            return self.get_response(request)
        parent = tracing.PROPAGATOR.extract({
            "traceparent": carried or "", "tracestate": request.META.get("HTTP_TRACESTATE", "")})
        span = tracer.start_span(f"{request.method} {request.path[:200]}", context=parent,
                                 kind=trace.SpanKind.SERVER, attributes={
                                     "http.request.method": request.method,
                                     "url.path": request.path[:2000]})
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            response = self.get_response(request)
            span.set_attribute("http.response.status_code", response.status_code)
            return response
        finally:
            otel_context.detach(token)
            span.end()
