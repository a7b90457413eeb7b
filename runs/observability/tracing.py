"""OpenTelemetry traces: on when OTEL_EXPORTER_OTLP_ENDPOINT is set, nothing otherwise.

A run is one trace. Its context comes from the request that launched it (the W3C
`traceparent` header, middleware.py), or a new trace when none came; it is stored
with the run (links.py) so that every claim, by whatever worker, after a crash or a
deploy, continues the same trace. Spans (observer.py): a `claim` per claim, a
`step` per step under it, a span per effect under its step, replayed effects
included and marked.

The provider is this package's own rather than OpenTelemetry's global one: a
library in the same process that sets the global provider changes nothing here.

Effect spans, one per call and the most numerous by far, are not made through the
SDK's `Span` (its lock, its attributes checked one by one: some 25 us a span, half a
no-op call's budget): the observer keeps what an effect span holds while the call
runs and hands it whole to the span processor as the SDK's `ReadableSpan` when the
call ends (`Pipeline.record`). What processors and exporters receive is the same; what
they do not get for effect spans is `on_start` (no span processor of the SDK uses
it). In front of the exporter process (export_process.py), not even a `ReadableSpan`
is made: the batch processor queues the span's values as the process's frame holds
them. An effect span is sampled when its step span is (the default, parent-based).
"""

from __future__ import annotations

import os
import threading

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.status import Status, StatusCode

from runs.observability import export_process

PROPAGATOR = TraceContextTextMapPropagator()
SCOPE = "agentops"
UNSET = Status(StatusCode.UNSET)
_state: dict = {"provider": None, "pipeline": None, "configured": False}
_lock = threading.Lock()


class Pipeline:
    """Where this process's spans go: the tracer for spans made through the SDK, and
    `record` for effect spans made whole when they end."""

    __slots__ = ("tracer", "processor", "resource", "scope", "ids", "prepared_sink")

    def __init__(self, provider: TracerProvider, processor: SpanProcessor):
        self.tracer = provider.get_tracer(SCOPE)
        self.processor = processor
        self.resource = provider.resource
        self.scope = InstrumentationScope(SCOPE)
        self.ids = provider.id_generator
        self.prepared_sink = export_process.prepared_spans_sink(processor)

    def child_of(self, parent: SpanContext | None) -> SpanContext:
        """A new span's context under `parent` (its trace, sampling and state)."""
        if parent is None or not parent.is_valid:
            return SpanContext(self.ids.generate_trace_id(), self.ids.generate_span_id(),
                               is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return SpanContext(parent.trace_id, self.ids.generate_span_id(), is_remote=False,
                           trace_flags=parent.trace_flags, trace_state=parent.trace_state)

    def record(self, name: str, context: SpanContext, parent: SpanContext | None, *,
               kind: SpanKind, attributes: dict, start: int, end: int,
               events: list[Event] = (), status: Status = UNSET) -> None:
        """A finished span, to the processor (dropped when its trace is not sampled)."""
        if not context.trace_flags.sampled:
            return
        if self.prepared_sink is not None:  # the exporter process's: its frame's values
            values = export_process.span_values(name, context, parent, kind, start, end,
                                                attributes, events, (), status)
            self.prepared_sink(export_process.prepared(self.resource, self.scope, values))
            return
        self.processor.on_end(ReadableSpan(
            name, context, parent, self.resource, attributes, events, (), kind, None,
            status, start, end, self.scope))


def endpoint_configured() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure_from_env() -> bool:
    """Export over OTLP/HTTP if an endpoint is configured (the exporter reads the
    standard OTEL_EXPORTER_OTLP_* variables), from a process of its own
    (export_process.py); else leave tracing off."""
    with _lock:
        if _state["configured"]:
            return _state["pipeline"] is not None
        _state["configured"] = True
    if not endpoint_configured():
        return False
    use(BatchSpanProcessor(export_process.ProcessSpanExporter()))
    return True


def use(processor: SpanProcessor) -> TracerProvider:
    """Trace through `processor` from now on (tests use the SDK's in-memory exporter)."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "agentops")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    pipeline = Pipeline(provider, processor)
    _state.update(provider=provider, pipeline=pipeline, configured=True)
    return provider


def off() -> None:
    provider = _state["provider"]
    _state.update(provider=None, pipeline=None, configured=True)
    if provider is not None:
        provider.shutdown()


def tracer() -> trace.Tracer | None:
    """The tracer, or None when tracing is off (callers then skip all span work)."""
    current = pipeline()
    return None if current is None else current.tracer


def pipeline() -> Pipeline | None:
    """The pipeline, or None when tracing is off."""
    if not _state["configured"]:
        configure_from_env()
    return _state["pipeline"]


def flush(timeout_seconds: float = 2.0) -> bool:
    """Export what is buffered now (a run ended, a process hands its runs off and
    exits), waiting at most `timeout_seconds`; True if it was all exported by then.

    The SDK's batch processor does not bound its own flush (it waits for the exporter,
    up to twice the OTLP timeout and more for a hung exporter process): the flush runs
    on a thread of its own and goes on there past the wait, so that a collector or an
    exporter process that does not answer never holds the run's thread for long."""
    provider = _state["provider"]
    if provider is None:
        return True
    exported = threading.Event()

    def export() -> None:
        provider.force_flush(int(timeout_seconds * 1000))
        exported.set()

    threading.Thread(target=export, name="span flush", daemon=True).start()
    return exported.wait(timeout_seconds)


def current_as(span_context: SpanContext) -> Context:
    """The context in which `span_context` is the current span (what downstream
    requests send as their parent)."""
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def traceparent_of(span_context: SpanContext) -> str:
    carrier: dict = {}
    PROPAGATOR.inject(carrier, context=current_as(span_context))
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
    if _state["pipeline"] is None:
        return {}
    carrier: dict = {}
    PROPAGATOR.inject(carrier)
    return carrier
