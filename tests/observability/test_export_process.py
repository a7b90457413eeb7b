"""Spans exported from a process of their own (runs/observability/export_process.py):
what reaches the collector is byte for byte what the OTLP exporter sends in process,
and the exporter process is replaced when it is killed, stopped or hung, ignores a
SIGTERM meant for its parent's group, and ends when its parent does, forked or not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from runs.observability import tracing
from runs.observability.export_process import ProcessSpanExporter, decode, encode
from tests.support.otlp import Collector
from tests.support.processes import ROOT, is_running, wait_until


@pytest.fixture
def collector():
    collector = Collector()
    yield collector
    collector.close()


@pytest.fixture
def spans():
    """Spans of both kinds the observer makes: through the SDK's tracer (with an event
    and a link-free error status) and recorded whole (an effect span)."""
    memory = InMemorySpanExporter()
    tracing.use(SimpleSpanProcessor(memory))
    pipeline = tracing.pipeline()
    try:
        step = pipeline.tracer.start_span("step 1", attributes={"agentops.step": 1})
        step.add_event("attempt failed", {"exception.type": "Timeout", "retry_in": 0.5})
        step.set_status(Status(StatusCode.ERROR, "Timeout"))
        step.end()
        parent = step.get_span_context()
        for seq in range(3):
            pipeline.record("fetch", pipeline.child_of(parent), parent, kind=SpanKind.CLIENT,
                            attributes={"agentops.effect.key": f"run:1:1:{seq}",
                                        "agentops.effect.replayed": seq == 2,
                                        "agentops.effect.attempt": 1, "ratio": 0.25,
                                        "tags": ("a", "b")},
                            start=1_000 + seq, end=2_000 + seq)
        yield memory.get_finished_spans()
    finally:
        tracing.off()


def test_the_collector_receives_what_the_otlp_exporter_sends_in_process(collector, spans):
    assert len(spans) == 4
    url = f"{collector.url}/v1/traces"
    assert OTLPSpanExporter(endpoint=url).export(spans) == SpanExportResult.SUCCESS
    exporter = ProcessSpanExporter(url)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert exporter.pid is not None and exporter.pid != os.getpid()
    finally:
        exporter.shutdown()
    direct, through_process = collector.bodies
    assert through_process == direct
    assert [s["name"] for s in collector.snapshot()[4:]] == ["step 1", "fetch", "fetch", "fetch"]


def test_a_frame_decodes_to_the_spans_it_was_made_of(spans):
    again = decode(encode(spans))
    fields = lambda s: (s.name, s.context, s.parent, s.kind, s.start_time, s.end_time,  # noqa: E731
                        dict(s.attributes), [(e.name, dict(e.attributes), e.timestamp)
                                             for e in s.events],
                        s.status.status_code, s.status.description, s.resource,
                        s.instrumentation_scope)
    assert [fields(s) for s in again] == [fields(s) for s in spans]


def test_a_killed_exporter_process_is_replaced_and_its_batch_sent_again(collector, spans):
    exporter = ProcessSpanExporter(f"{collector.url}/v1/traces")
    try:
        exporter.start()
        first = exporter.pid
        collector.answering.clear()  # the batch reaches the collector, its answer does not
        os.kill(first, signal.SIGKILL)
        collector.answering.set()
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert exporter.pid not in (None, first)
        assert len(collector.bodies) == 1
    finally:
        exporter.shutdown()


def test_a_batch_in_flight_when_its_exporter_process_dies_is_sent_again(collector, spans):
    exporter = ProcessSpanExporter(f"{collector.url}/v1/traces")
    try:
        exporter.start()
        first = exporter.pid
        collector.answering.clear()
        sent = {}
        thread = threading.Thread(target=lambda: sent.update(result=exporter.export(spans)))
        thread.start()
        wait_until(lambda: len(collector.bodies) == 1, 30, message="the batch at the collector")
        os.kill(first, signal.SIGKILL)  # in the middle of its export: no answer yet
        wait_until(lambda: len(collector.bodies) == 2, 30, message="the batch sent again")
        collector.answering.set()
        thread.join(60)
        assert sent["result"] == SpanExportResult.SUCCESS
        assert collector.bodies[0] == collector.bodies[1]  # twice, never not at all
        assert exporter.pid not in (None, first)
    finally:
        collector.answering.set()
        exporter.shutdown()


def test_a_stopped_exporter_process_does_not_stop_the_exports(collector, spans, monkeypatch):
    """SIGSTOP: the batch's wait ends (the OTLP timeout twice, and a margin), the
    stopped process is killed and another sends the batch."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    exporter = ProcessSpanExporter(f"{collector.url}/v1/traces")
    try:
        exporter.start()
        stopped = exporter.pid
        os.kill(stopped, signal.SIGSTOP)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert exporter.pid not in (None, stopped)
        assert not is_running(stopped)
        assert len(collector.bodies) == 1
    finally:
        exporter.shutdown()


def test_a_sigterm_for_the_whole_group_leaves_the_exporter_process_to_its_parent(collector,
                                                                               spans):
    exporter = ProcessSpanExporter(f"{collector.url}/v1/traces")
    try:
        exporter.start()
        pid = exporter.pid
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGINT)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert exporter.pid == pid
    finally:
        exporter.shutdown()
    assert not is_running(pid)


PARENT = textwrap.dedent("""
    import os, sys, time
    from runs.observability.export_process import ProcessSpanExporter
    exporter = ProcessSpanExporter(sys.argv[1])
    exporter.start()
    print("parent's exporter", exporter.pid, flush=True)
    child = os.fork()
    if child == 0:
        sys.stdin.readline()  # once its parent is gone, it exports: through its own
        exporter.start()
        print("forked's exporter", exporter.pid, flush=True)
        time.sleep(600)  # killed by the test
        os._exit(0)
    print("forked", child, flush=True)
    time.sleep(600)  # killed by the test
""")


def test_the_exporter_process_ends_with_its_parent_even_when_the_parent_forked(collector):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, f"{collector.url}/v1/traces"],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pids: dict[str, str] = {}
    try:
        pids.update(parent.stdout.readline().rsplit(" ", 1) for _ in range(2))
        parents_exporter, forked = int(pids["parent's exporter"]), int(pids["forked"])
        parent.kill()
        parent.wait()
        # the forked process holds nothing of its parent's exporter process
        wait_until(lambda: not is_running(parents_exporter), 30,
                   message="the parent's exporter process to end")
        assert is_running(forked)
        parent.stdin.write("export\n")
        parent.stdin.flush()
        pids.update([parent.stdout.readline().rsplit(" ", 1)])
        childs_exporter = int(pids["forked's exporter"])
        assert len({parent.pid, parents_exporter, childs_exporter, forked}) == 4
        os.kill(forked, signal.SIGKILL)
        wait_until(lambda: not is_running(childs_exporter), 30,
                   message="the forked process's exporter process to end")
    finally:
        parent.kill()
        for pid in pids.values():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                continue


def test_a_flush_waits_for_a_stopped_exporter_process_no_longer_than_asked(collector, spans):
    """A run's end flushes its spans; an exporter process that does not answer (here
    SIGSTOPped) must not hold the run's thread for the exporter's whole timeout."""
    exporter = ProcessSpanExporter(f"{collector.url}/v1/traces")
    exporter.start()
    tracing.use(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000))
    stopped = exporter.pid
    try:
        for span in spans:
            tracing.pipeline().processor.on_end(span)
        os.kill(stopped, signal.SIGSTOP)
        assert tracing.flush(timeout_seconds=0.5) is False  # not exported, not waited for
        assert collector.bodies == []
        os.kill(stopped, signal.SIGCONT)
        # the flush went on by itself: the spans arrive once the process answers again
        wait_until(lambda: len(collector.bodies) == 1, 60, message="the flushed batch")
        assert tracing.flush() is True
    finally:
        os.kill(stopped, signal.SIGCONT)
        tracing.off()


def _record_effect_spans(pipeline) -> None:
    """Three effect spans with fixed ids (one failed, with an attempt's event), as the
    observer records them."""
    parent = SpanContext(0xABC, 0x1, is_remote=False, trace_flags=TraceFlags(1))
    for seq in range(3):
        failed = seq == 1
        pipeline.record(
            "fetch", SpanContext(0xABC, 0x10 + seq, is_remote=False, trace_flags=TraceFlags(1)),
            parent, kind=SpanKind.CLIENT, start=1_000 + seq, end=2_000 + seq,
            attributes={"agentops.effect.key": f"run:1:1:{seq}", "agentops.effect.attempt": 1,
                        "agentops.effect.replayed": False, "ratio": 0.25},
            events=[Event("attempt failed", {"exception.type": "Timeout"}, 1_500)]
            if failed else [],
            status=Status(StatusCode.ERROR, "Timeout") if failed else tracing.UNSET)


def test_effect_spans_queued_as_values_reach_the_collector_as_the_sdk_spans_would(collector):
    """In front of the exporter process, effect spans go into the batch processor's queue
    as the frame's values, no ReadableSpan made: the collector gets the same request as
    from the OTLP exporter given the SDK's spans."""
    memory = InMemorySpanExporter()
    tracing.use(SimpleSpanProcessor(memory))
    assert tracing.pipeline().prepared_sink is None  # any other processor: ReadableSpans
    _record_effect_spans(tracing.pipeline())
    tracing.off()
    url = f"{collector.url}/v1/traces"
    assert OTLPSpanExporter(endpoint=url).export(memory.get_finished_spans()) == \
        SpanExportResult.SUCCESS
    tracing.use(BatchSpanProcessor(ProcessSpanExporter(url)))
    try:
        assert tracing.pipeline().prepared_sink is not None
        _record_effect_spans(tracing.pipeline())
        assert tracing.flush(30)
    finally:
        tracing.off()
    direct, through_process = collector.bodies
    assert through_process == direct
