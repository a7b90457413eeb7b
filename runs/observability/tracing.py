"""OpenTelemetry traces: on when OTEL_EXPORTER_OTLP_ENDPOINT is set, nothing otherwise.

A run is one trace. Its context comes from the request that launched it (the W3C
`traceparent` header, middleware.py), or a new trace when none came; it is stored
with the run (links.py) so that every claim, by whatever worker, after a crash or a
deploy, continues the same trace. Spans (observer.py): a `claim` per claim, a
`step` per step under it, a span per effect under its step, replayed effects
included and marked.

The provider is this package's own rather than OpenTelemetry's global one: a
library in the same process that sets the global provider changes nothing here.
"""

from __future__ import annotations

import os
import threading

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

PROPAGATOR = TraceContextTextMapPropagator()
_state: dict = {"provider": None, "tracer": None, "configured": False}
_lock = threading.Lock()


def endpoint_configured() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure_from_env() -> bool:
    """Export over OTLP/HTTP if an endpoint is configured (the exporter reads the
    standard OTEL_EXPORTER_OTLP_* variables); else leave tracing off."""
    with _lock:
        if _state["configured"]:
            return _state["tracer"] is not None
        _state["configured"] = True
    if not endpoint_configured():
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    use(BatchSpanProcessor(OTLPSpanExporter()))
    return True


def use(processor: SpanProcessor) -> TracerProvider:
    """Trace through `processor` from now on (tests use the SDK's in-memory exporter)."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "agentops")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    _state.update(provider=provider, tracer=provider.get_tracer("agentops"), configured=True)
    return provider


def off() -> None:
    provider = _state["provider"]
    _state.update(provider=None, tracer=None, configured=True)
    if provider is not None:
        provider.shutdown()


def tracer() -> trace.Tracer | None:
    """The tracer, or None when tracing is off (callers then skip all span work)."""
    if not _state["configured"]:
        configure_from_env()
    return _state["tracer"]


def flush(timeout_seconds: float = 2.0) -> None:
    """Export what is buffered now: before a process hands its runs off and exits."""
    provider = _state["provider"]
    if provider is not None:
        provider.force_flush(int(timeout_seconds * 1000))


def traceparent_of(span_context: SpanContext) -> str:
    carrier: dict = {}
    PROPAGATOR.inject(carrier, context=trace.set_span_in_context(NonRecordingSpan(span_context)))
    return carrier.get("traceparent", "")


def context_of(traceparent: str) -> Context | None:
    """The context a `traceparent` value names, or None for a malformed one."""
    context = PROPAGATOR.extract({"traceparent": traceparent})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def downstream_headers() -> dict:
    """`traceparent` (and `tracestate`) of the current span, for an outgoing request;
    empty when tracing is off or no span is current."""
    if _state["tracer"] is None:
        return {}
    carrier: dict = {}
    PROPAGATOR.inject(carrier)
    return carrier
