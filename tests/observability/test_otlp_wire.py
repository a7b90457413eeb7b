"""The exporter process's OTLP request body (runs/observability/otlp_wire.py) is byte for
byte what the OTLP exporter's own encoder makes of the same spans, whatever they hold."""

from __future__ import annotations

import marshal

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from runs.observability import otlp_wire
from runs.observability.export_process import encode

RUN = Resource({"service.name": "agentops-worker", "process.pid": 4242})
SCOPE = InstrumentationScope("agentops", "1.0", "https://schema/1", {"lib": "runs"})
ATTRIBUTE_VALUES = [
    "text", "", "naïve ✓", True, False, 0, 1, -1, 2**62, -(2**63), 1.0, 0.0, -2.5, 1e300,
    ("a", "b"), (1, 2, 3), (True, False), (0.5,), (), b"\x00bytes",
]


def context(trace_id: int, span_id: int, *, remote: bool = False, state=()) -> SpanContext:
    return SpanContext(trace_id, span_id, remote, TraceFlags(1), TraceState(list(state)))


def span(n: int, **fields) -> ReadableSpan:
    values = {"name": f"span {n}", "context": context(0xABC + n, 0x100 + n),
              "parent": context(0xABC + n, 0x99), "resource": RUN,
              "attributes": {"agentops.run.id": "r-1", "agentops.seq": n},
              "kind": SpanKind.CLIENT, "start_time": 1_000 + n, "end_time": 2_000 + n,
              "status": Status(StatusCode.UNSET), "instrumentation_scope": SCOPE}
    values.update(fields)
    return ReadableSpan(**values)


def same_bytes(spans) -> None:
    expected = encode_spans(spans).SerializePartialToString()
    assert otlp_wire.export_request(*marshal.loads(encode(spans))) == expected


def test_every_kind_of_attribute_value():
    same_bytes([span(i, attributes={"value": value, "agentops.run.id": "r-1"})
                for i, value in enumerate(ATTRIBUTE_VALUES)])


def test_equal_values_of_other_types_are_not_taken_for_one_another():
    # True == 1 == 1.0 as dict keys: a cache keyed by value alone would write one for another
    for order in ([True, 1, 1.0], [1.0, 1, True], [False, 0, 0.0]):
        same_bytes([span(i, attributes={"flag": value}) for i, value in enumerate(order)])


def test_every_span_kind_status_and_parent():
    spans = [span(i, kind=kind) for i, kind in enumerate(SpanKind)]
    spans += [span(10, status=Status(StatusCode.ERROR, "Timeout")),
              span(11, status=Status(StatusCode.OK)),
              span(12, parent=None, name="a root"),
              span(13, parent=context(0xABC, 0x5, remote=True)),
              span(14, context=context(0xDEF, 0x6, state=[("vendor", "v1"), ("other", "x")])),
              span(15, name="", attributes={}, start_time=None, end_time=None)]
    same_bytes(spans)


def test_events_and_links():
    same_bytes([
        span(1, events=[Event("attempt failed", {"exception.type": "Timeout", "retry_in": 0.5},
                              timestamp=1_500),
                        Event("no attributes", None, timestamp=1_600)]),
        span(2, links=[Link(context(0x1, 0x2), {"agentops.run.id": "r-0"}),
                       Link(context(0x3, 0x4, remote=True))]),
    ])


def test_spans_of_several_resources_and_scopes_grouped_as_the_encoder_groups_them():
    other = Resource({"service.name": "agentops-web"}, "https://schema/r")
    equal_to_run = Resource({"process.pid": 4242, "service.name": "agentops-worker"})
    bare_scope = InstrumentationScope("plain")
    same_bytes([
        span(1), span(2, resource=other), span(3, resource=equal_to_run),
        span(4, instrumentation_scope=bare_scope), span(5, instrumentation_scope=None),
        span(6, resource=other, instrumentation_scope=bare_scope), span(7),
    ])


def test_a_value_the_cache_cannot_hold_is_written_all_the_same():
    spans = [span(1, attributes={"list": ("x",) * 3})]
    spans[0]._attributes = {"list": ["x", "y"], "nested": [("a",), ("b",)]}
    same_bytes(spans)


def test_an_exporter_without_the_http_client_is_handed_the_spans_rebuilt():
    """Another version of the OTLP package, without the client the body is sent with."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    from runs.observability.export_process import export_frame

    class Exporter:
        def __init__(self):
            self.spans = []

        def export(self, spans):
            self.spans.extend(spans)
            return SpanExportResult.SUCCESS

    spans, exporter = [span(1), span(2, kind=SpanKind.SERVER)], Exporter()
    assert export_frame(exporter, encode(spans))
    assert encode(exporter.spans) == encode(spans)
