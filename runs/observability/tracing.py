"""OpenTelemetry traces through the SDK: on when OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, nothing otherwise.

A run is one trace. Its context comes from the request that launched it (the W3C
`traceparent` header, middleware.py), or a new trace when none came; it is stored
with the run (links.py) so that every claim, by whatever worker, after a crash or a
deploy, continues the same trace. Spans (observer.py): a `claim` per claim, a
`step` per step under it, and each effect an event of its step's span.

Everything goes through the SDK's public API: a `TracerProvider` with the sampler
OTEL_TRACES_SAMPLER names (parent-based, always on, by default), the batch processor
(OTEL_BSP_*) and the OTLP/HTTP exporter (OTEL_EXPORTER_OTLP_*), in the process that
makes the spans. The provider is this package's own rather than OpenTelemetry's
global one: a library in the same process that sets the global provider changes
nothing here.

Started on first use in each process (`start`): a forked child forgets its parent's
provider (its batch thread and its exporter's open connections are the parent's)
and starts its own when it first traces.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    # The SDK is imported where a provider is made: every process imports this module
    # (the middleware, the observer), most never trace, and the SDK was about a tenth
    # of their start (0.05-0.1 CPU-s).
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.sampling import Sampler

PROPAGATOR = TraceContextTextMapPropagator()
SCOPE = "agentops"
# Effects are events of their step's span. The SDK's default limit (128 events a span)
# would drop the calls of a busy step; OTEL_SPAN_EVENT_COUNT_LIMIT still decides when set.
EVENTS_PER_SPAN = 10_000
_state: dict = {"provider": None, "tracer": None, "configured": False}
_lock = threading.Lock()


def endpoint_configured() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def start() -> bool:
    """Trace in this process if an endpoint is configured, else leave tracing off;
    True if tracing is on. Once per process (later calls answer the first's result)."""
    with _lock:
        if not _state["configured"]:
            _state["configured"] = True
            if endpoint_configured():
                # imported only here: the exporter and its protobuf cost every process
                # that never traces a tenth of Django's start-up
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
                from opentelemetry.sdk.trace.export import BatchSpanProcessor

                _install(BatchSpanProcessor(OTLPSpanExporter()), None)
    return _state["tracer"] is not None


def use(processor: SpanProcessor, sampler: Sampler | None = None) -> TracerProvider:
    """Trace through `processor` from now on (tests use the SDK's in-memory exporter).
    `sampler`: None for OTEL_TRACES_SAMPLER's."""
    with _lock:
        return _install(processor, sampler)


def _install(processor: SpanProcessor, sampler: Sampler | None) -> TracerProvider:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

    events = None if os.environ.get("OTEL_SPAN_EVENT_COUNT_LIMIT") else EVENTS_PER_SPAN
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "agentops"),
                                "process.pid": os.getpid()})
    provider = TracerProvider(resource=resource, sampler=sampler,
                              span_limits=SpanLimits(max_events=events))
    provider.add_span_processor(processor)
    _state.update(provider=provider, tracer=provider.get_tracer(SCOPE), configured=True)
    return provider


def off(*, restart: bool = False) -> None:
    """Export what is buffered, then trace no more in this process; `restart`: until
    the next use, which starts tracing from the environment again (tests)."""
    provider = _state["provider"]
    _state.update(provider=None, tracer=None, configured=not restart)
    if provider is not None:
        provider.shutdown()


def tracer() -> trace.Tracer | None:
    """The tracer, or None when tracing is off (callers then skip all span work)."""
    if not _state["configured"]:
        start()
    return _state["tracer"]


def flush(timeout_seconds: float = 2.0) -> bool:
    """Export what is buffered now (a run ended, a process hands its runs off and
    exits), waiting at most `timeout_seconds`; True if it was all exported by then.

    The SDK's flush is not bounded by its timeout (a batch waits for the exporter's
    retries, up to OTEL_EXPORTER_OTLP_TIMEOUT): it runs on a thread of its own and goes
    on there past the wait, so that a collector that does not answer never holds the
    run's thread for long."""
    provider = _state["provider"]
    return True if provider is None else _flusher.flush(provider, timeout_seconds)


class _Flusher:
    """One flush at a time, and at most one waiting: a flush asked for while another
    runs is done once that one ends, for every caller that asked meanwhile. Runs that
    end by the hundred while the collector is away start two threads, not hundreds."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = threading.Lock()
        self.next: threading.Event | None = None  # the flush not started yet

    def flush(self, provider: TracerProvider, timeout_seconds: float) -> bool:
        with self.lock:
            done = self.next
            if done is None:
                done = self.next = threading.Event()
                threading.Thread(target=self._flush, args=(provider,), name="span flush",
                                 daemon=True).start()
        return done.wait(timeout_seconds)

    def _flush(self, provider: TracerProvider) -> None:
        with self.running:
            with self.lock:  # from here on, a new request needs a flush after this one
                done, self.next = self.next, None
            provider.force_flush()
            done.set()


_flusher = _Flusher()


def _forget_after_fork() -> None:
    """In a forked child: the parent's provider is not this process's (its batch thread
    is gone, its exporter's connections are shared with the parent); the child starts
    its own at its first span."""
    global _flusher, _lock
    _lock = threading.Lock()  # a thread of the parent may have held it at the fork
    _flusher = _Flusher()
    _state.update(provider=None, tracer=None, configured=False)


os.register_at_fork(after_in_child=_forget_after_fork)


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
    if _state["tracer"] is None:
        return {}
    carrier: dict = {}
    PROPAGATOR.inject(carrier)
    return carrier
