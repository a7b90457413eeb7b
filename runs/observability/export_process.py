"""Spans exported from a process of their own: the OTLP encoding off the run's process.

Encoding a span for OTLP (protobuf messages built attribute by attribute in Python)
costs more CPU than making it, and on the worker it is paid under the same GIL as the
run's own thread: measured on 2 cores, tracing cost a no-op call 20-37% more when the
batch processor's thread encoded and sent in process. So the batch processor
(the SDK's, unchanged: batching, schedule, flush, shutdown) hands each batch to
`ProcessSpanExporter`, which sends the spans' fields as one `marshal` frame to an
exporter process; that process writes the OTLP request from them (otlp_wire.py, the
bytes the OTLP exporter's encoder would make, at a sixth of its CPU) and sends it with
the OTLP exporter's HTTP client, configured by the same OTEL_EXPORTER_OTLP_* variables,
and answers once the collector has answered. A batch's export therefore returns when
its spans are at the collector, as in process: `force_flush` still means exported.

The exporter process is started on the first export and again after it died (the
batch it held is sent once more, to the new one). It exits when the
process it exports for is gone (its stdin closes), after exporting what it was sent.
A process forked after the exporter started (django-q2's workers) starts its own.

Not carried: the counts of attributes, events and links the SDK dropped over its limits.
"""

from __future__ import annotations

import logging
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from runs.observability import otlp_wire

logger = logging.getLogger("agentops.tracing")
FRAME = struct.Struct("!I")
OK, FAILED, READY = b"\x00", b"\x01", b"\x02"
_exporters: weakref.WeakSet = weakref.WeakSet()
_INHERITED: list = []
PROJECT_ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 60.0  # a loaded machine's Python start-up and imports, with room


def _context(context) -> tuple | None:
    if context is None:
        return None
    state = context.trace_state
    return (context.trace_id, context.span_id, context.is_remote, int(context.trace_flags),
            tuple(state.items()) if state else ())


def _attributes(attributes) -> dict:
    return dict(attributes) if attributes else {}


def _resource(resource) -> tuple:
    return (_attributes(resource.attributes), resource.schema_url or "")


def _scope(scope) -> tuple | None:
    if scope is None:
        return None
    return (scope.name, scope.version, scope.schema_url, _attributes(scope.attributes))


def span_values(name: str, context, parent, kind: SpanKind, start: int, end: int, attributes,
                events, links, status: Status) -> tuple:
    """A span's fields as plain values (what a frame's row holds, but for where its
    resource and scope are)."""
    return (name, _context(context), _context(parent), kind.value, start, end,
            _attributes(attributes),
            [(e.name, _attributes(e.attributes), e.timestamp) for e in events],
            [(_context(link.context), _attributes(link.attributes)) for link in links],
            status.status_code.value, status.description)


def prepared(resource: Resource, scope: InstrumentationScope, values: tuple) -> tuple:
    """A span made whole by its maker, for `prepared_spans_sink`: a plain tuple, since
    effect spans are made by the thousand a second."""
    return (resource, scope, values)


def encode(spans: Sequence) -> bytes:
    """One batch as plain values: resources and scopes once, spans referring to them.
    A span is the SDK's `ReadableSpan` or a `prepared` one."""
    resources: dict = {}  # id -> (index, values); a batch has one or two
    scopes: dict = {}
    rows = []
    for span in spans:
        if type(span) is tuple:
            resource_of, scope_of, values = span
        else:
            resource_of, scope_of = span.resource, span.instrumentation_scope
            values = span_values(span.name, span.context, span.parent, span.kind,
                                 span.start_time, span.end_time, span.attributes, span.events,
                                 span.links, span.status)
        resource = resources.get(id(resource_of))
        if resource is None:
            resource = resources[id(resource_of)] = (len(resources), _resource(resource_of))
        scope = scopes.get(id(scope_of))
        if scope is None:
            scope = scopes[id(scope_of)] = (len(scopes), _scope(scope_of))
        rows.append(values + (resource[0], scope[0]))
    return marshal.dumps(([r for _, r in resources.values()], [s for _, s in scopes.values()],
                          rows))


def prepared_spans_sink(processor):
    """Where `prepared` spans go when `processor` is the SDK's batch processor in front of
    a `ProcessSpanExporter`: into its queue as they are (batched, scheduled and flushed
    as its spans are), a `ReadableSpan` neither made nor read field by field. None for
    any other processor, or a version of the SDK whose batch processor has no such queue:
    spans are then made as `ReadableSpan` and handed to `on_end`."""
    if not isinstance(processor, BatchSpanProcessor):
        return None
    if not isinstance(getattr(processor, "span_exporter", None), ProcessSpanExporter):
        return None
    emit = getattr(getattr(processor, "_batch_processor", None), "emit", None)
    return emit if callable(emit) else None


def decode(frame: bytes) -> list[ReadableSpan]:
    def context(values):
        if values is None:
            return None
        trace_id, span_id, is_remote, flags, state = values
        return SpanContext(trace_id, span_id, is_remote, TraceFlags(flags),
                           TraceState(list(state)))

    resources_values, scopes_values, rows = marshal.loads(frame)
    resources = [Resource(attributes, schema_url or None)
                 for attributes, schema_url in resources_values]
    scopes = [None if s is None else InstrumentationScope(s[0], s[1], s[2], s[3])
              for s in scopes_values]
    return [
        ReadableSpan(
            name, context=context(own), parent=context(parent), resource=resources[resource],
            attributes=attributes, kind=SpanKind(kind), start_time=start, end_time=end,
            events=[Event(e_name, e_attributes, e_time) for e_name, e_attributes, e_time in events],
            links=[Link(context(link_context), link_attributes)
                   for link_context, link_attributes in links],
            status=Status(StatusCode(code), description), instrumentation_scope=scopes[scope])
        for (name, own, parent, kind, start, end, attributes, events, links, code, description,
             resource, scope) in rows]


class ExporterProcessGone(Exception):
    """The exporter process died, hung or closed its pipe in the middle of a batch."""


def _export_seconds() -> float:
    """How long a batch may take in the exporter process: the OTLP exporter's own
    timeout (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, OTEL_EXPORTER_OTLP_TIMEOUT, 10 s), twice
    (its retries stop at it), and time to encode. Past it the process is taken as hung."""
    raw = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
           or os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") or "10")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 10.0
    return 2 * max(seconds, 1.0) + 5.0


class ProcessSpanExporter(SpanExporter):
    """`endpoint`: the collector's traces URL; None reads OTEL_EXPORTER_OTLP_* as the
    OTLP exporter does."""

    def __init__(self, endpoint: str | None = None):
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._closed = False
        _exporters.add(self)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        frame = encode(spans)
        frame = FRAME.pack(len(frame)) + frame
        with self._lock:
            # A batch whose exporter process died (killed, out of memory) is sent once
            # more to a new one: the collector may then see it twice, never not at all.
            for _ in range(2):
                try:
                    answer = self._exchange(frame)
                except ExporterProcessGone:
                    self._stop_child(kill=True)
                    continue
                return SpanExportResult.SUCCESS if answer == OK else SpanExportResult.FAILURE
        return SpanExportResult.FAILURE

    def start(self) -> None:
        """Start the exporter process now rather than at the first export (its
        start-up, some 0.2 s of CPU, then falls outside what is measured or timed)."""
        with self._lock:
            self._running_child()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export has been answered when it returns

    def shutdown(self) -> None:
        self._closed = True
        with self._lock:
            self._stop_child(kill=False)

    @property
    def pid(self) -> int | None:
        """The exporter process's pid, while one runs for this process."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def _exchange(self, frame: bytes) -> bytes:
        """Send one frame, wait for its one-byte answer; never longer than a batch may
        take (a SIGSTOPped exporter must not stop this process's flushes for good)."""
        child = self._running_child()
        deadline = time.monotonic() + _export_seconds()
        stdin = child.stdin.fileno()
        sent = 0
        try:
            while sent < len(frame):
                if not select.select([], [stdin], [], _left(deadline))[1]:
                    raise ExporterProcessGone("the exporter process takes no input")
                # at most a pipe's atomic size once writable: the write never blocks
                sent += os.write(stdin, frame[sent:sent + select.PIPE_BUF])
        except OSError as error:  # EPIPE: it died
            raise ExporterProcessGone(str(error)) from error
        answer = self._answer(deadline)
        if answer not in (OK, FAILED):
            raise ExporterProcessGone("the exporter process closed its output")
        return answer

    def _answer(self, deadline: float) -> bytes:
        stdout = self._child.stdout.fileno()
        try:
            if not select.select([stdout], [], [], _left(deadline))[0]:
                raise ExporterProcessGone("the exporter process did not answer in time")
            return os.read(stdout, 1)
        except OSError as error:
            raise ExporterProcessGone(str(error)) from error

    def _running_child(self) -> subprocess.Popen:
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._stop_child(kill=True)
        command = [sys.executable, "-m", "runs.observability.export_process"]
        if self.endpoint:
            command.append(self.endpoint)
        # unbuffered: frames are written and answers read on the file descriptors
        self._child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       bufsize=0, cwd=PROJECT_ROOT)
        # ready once it has imported the exporter: its start-up is not a batch's time
        if self._answer(time.monotonic() + START_SECONDS) != READY:
            raise ExporterProcessGone("the exporter process did not start")
        return self._child

    def _stop_child(self, *, kill: bool) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if kill:
            child.kill()
        child.stdin.close()   # the exporter process exports what it holds and exits
        child.stdout.close()
        try:
            child.wait(timeout=None if kill else _export_seconds())
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def _forget_after_fork(self) -> None:
        """In a forked child: the exporter process is the parent's. Close this copy of
        its pipes (else it would outlive its parent) and leave it to the parent."""
        child, self._child = self._child, None
        self._lock = threading.Lock()  # it may have been held by a thread not forked
        if child is not None:
            os.close(child.stdin.fileno())
            os.close(child.stdout.fileno())
            # never closed again (nor waited for): their descriptors' numbers are free now
            _INHERITED.append(child)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _after_fork_in_child() -> None:
    for exporter in list(_exporters):
        exporter._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _read_exactly(stream, size: int) -> bytes | None:
    data = stream.read(size)
    return data if data is not None and len(data) == size else None


def export_frame(exporter, frame: bytes) -> bool:
    """Send one frame's spans with the OTLP exporter's own HTTP client (its endpoint,
    headers, compression, timeout and retries, as OTEL_EXPORTER_OTLP_* configure them),
    the request body written by otlp_wire: the exporter's public `export` takes the
    SDK's spans and encodes them itself, at ten times the CPU. An exporter without that
    client (another version of the package) is given the spans rebuilt."""
    client = getattr(exporter, "_client", None)
    if not callable(getattr(client, "export", None)):
        return exporter.export(decode(frame)) is SpanExportResult.SUCCESS
    try:
        body = otlp_wire.export_request(*marshal.loads(frame))
    except (TypeError, ValueError, EOFError) as error:  # not a frame encode() made
        logger.error("an exported batch could not be encoded: %s", error)
        return False
    return bool(client.export(body).success)


def serve(stdin, stdout, endpoint: str | None) -> None:
    """The exporter process: a frame in, its export's result out, until stdin closes."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
    stdout.write(READY)
    stdout.flush()
    try:
        while True:
            header = _read_exactly(stdin, FRAME.size)
            if header is None:
                return
            frame = _read_exactly(stdin, FRAME.unpack(header)[0])
            if frame is None:
                return
            stdout.write(OK if export_frame(exporter, frame) else FAILED)
            stdout.flush()
    finally:
        exporter.shutdown()


if __name__ == "__main__":
    # Its life is its parent's: a SIGTERM or Ctrl-C sent to the whole process group
    # must not cut the parent's last flush short; the parent's end closes stdin.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # spans can wait: the runs of the process it exports for come first
    os.nice(19)
    from runs.worker.cluster.roles import EXPORTER, set_title

    set_title(EXPORTER)  # what the heartbeat and `ps` call it
    serve(sys.stdin.buffer, sys.stdout.buffer, sys.argv[1] if len(sys.argv) > 1 else None)
