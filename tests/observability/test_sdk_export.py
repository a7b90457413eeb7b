"""Tracing as a worker process starts it (runs/observability/tracing.py: the SDK's batch
processor and OTLP/HTTP exporter, configured by the OTEL_* variables), to a real
collector over HTTP (tests/support/otlp.py): a run's spans in one trace with its
effects' events, a run's end exporting at once, the exporter's retries over a collector
briefly down, bounded and shared flushes, and a forked child exporting on its own."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from runs.durable import (
    Agent,
    AgentRegistry,
    Done,
    WorkerConfig,
    agent,
    control,
    execute_run,
    observe,
    tool,
)
from runs.durable.memory import MemoryStore
from runs.observability import tracing
from runs.observability.links import MemoryTraceLinks
from runs.observability.observer import install
from tests.support.otlp import Collector
from tests.support.processes import ROOT, wait_until

REG = AgentRegistry()
HOUR_MS = "3600000"  # the batch processor's own schedule: only a flush exports sooner


@tool(idempotent=True)
def lookup(i, *, idempotency_key):
    return i


@agent("exported", registry=REG)
class Exported(Agent):
    def start(self, inputs):
        return {"i": 0}

    def step(self, ctx, state):
        state["i"] += 1
        ctx.call(lookup, state["i"])
        ctx.call(lookup, -state["i"])
        return Done({}) if state["i"] == 2 else state


@pytest.fixture
def collector():
    collector = Collector()
    yield collector
    collector.close()


@pytest.fixture
def traced(collector, monkeypatch):
    """Tracing started from the environment, as in a worker, pointed at the collector."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", HOUR_MS)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "agentops-test")
    # a collector held unanswered by a test is not timed out (and sent the batch again)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "60")
    previous = observe.current()
    install(links=MemoryTraceLinks())
    tracing.off(restart=True)
    yield monkeypatch
    tracing.off(restart=True)
    observe.install(previous)


def run_once(store=None) -> str:
    store = store or MemoryStore()
    run = control.launch(store, agent="exported", inputs={}, registry=REG)
    assert execute_run(store, run.id, WorkerConfig(owner="host:1:w"), registry=REG) == "succeeded"
    return run.id


def of_run(collector, run_id) -> list[dict]:
    return [s for s in collector.snapshot() if s["attributes"].get("agentops.run.id") == run_id]


def test_a_runs_spans_reach_the_collector_in_one_trace_with_its_effects_events(collector, traced):
    run_id = run_once()
    # the run's end exported them: the batch processor's own schedule is an hour away
    spans = wait_until(lambda: len(of_run(collector, run_id)) == 4 and of_run(collector, run_id),
                       30, message="the run's four spans")
    assert sorted(s["name"] for s in spans) == ["claim exported", "launch exported",
                                                "step 1", "step 2"]
    assert len({s["trace_id"] for s in spans}) == 1
    assert {(s["resource"]["service.name"], s["pid"]) for s in spans} == {
        ("agentops-test", os.getpid())}
    claim = next(s for s in spans if s["name"] == "claim exported")
    for step in (1, 2):
        span = next(s for s in spans if s["name"] == f"step {step}")
        assert span["parent_id"] == claim["span_id"]
        assert [(e["name"], e["attributes"]) for e in span["events"]] == [
            # done: the outcome is left out (nearly every call's, so not worth its cost)
            (lookup.name, {"agentops.effect.key": f"{run_id}:1:{step}:{seq}"})
            for seq in (0, 1)]
        assert span["start"] <= span["events"][0]["time"] <= span["events"][1]["time"] <= span["end"]


def test_no_span_is_lost_while_the_collector_is_briefly_down(collector, traced, caplog):
    """The SDK's OTLP exporter tries a batch again on a refused connection (and on 429,
    502, 503, 504), after 1 s, 2 s, 4 s... while its timeout allows (60 s here; 10 s by
    default): a collector back within it gets every span."""
    collector.close()  # down: connections refused
    caplog.set_level(logging.WARNING, logger="opentelemetry")
    run_id = run_once()  # its end's flush meets the refused connection
    wait_until(lambda: any("retrying" in r.getMessage() for r in caplog.records), 30,
               message="the exporter to fail and wait to try again")
    assert collector.received == 0
    collector.reopen()
    # the exporter's next try comes after its current wait: 1, 2, 4, 8 or 16 s (±20 %, six
    # tries at most), one of the longer ones if the reopen came late in that series
    wait_until(lambda: len(of_run(collector, run_id)) == 4, 40, message="the run's spans")
    assert tracing.flush(30)


def test_a_flush_waits_no_longer_than_asked_for_a_collector_that_does_not_answer(collector,
                                                                               traced):
    """A run's end flushes its spans; a collector that takes the request and never
    answers must not hold the run's thread for the exporter's whole timeout."""
    collector.answering.clear()
    try:
        tracing.tracer().start_span("before").end()
        assert tracing.flush(timeout_seconds=0.5) is False  # not answered, not waited for
        wait_until(lambda: collector.received == 1, 30, message="the request at the collector")
    finally:
        collector.answering.set()
    assert tracing.flush(30) is True  # the flush went on by itself and was answered


def test_flushes_asked_for_meanwhile_share_the_next_one(collector, traced):
    """Hundreds of runs ending while the collector hangs start two flushes (the one
    running, one for every span ended since), not a thread each."""
    collector.answering.clear()
    try:
        tracing.tracer().start_span("first").end()
        assert tracing.flush(0.1) is False
        wait_until(lambda: collector.received == 1, 30, message="the first flush's request")
        for n in range(50):
            tracing.tracer().start_span(f"later {n}").end()
            assert tracing.flush(0.01) is False
        flushes = [t for t in threading.enumerate() if t.name == "span flush"]
        assert len(flushes) == 2
    finally:
        collector.answering.set()
    wait_until(lambda: collector.received == 51, 30, message="every span")
    assert len(collector.bodies) == 2  # the later spans in the second flush's one request


def test_the_sampler_of_the_environment_decides(collector, traced):
    """OTEL_TRACES_SAMPLER is the SDK's: a deployment samples runs with it."""
    traced.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    traced.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    run_once()
    assert tracing.flush(30)
    assert collector.received == 0


FORKING = textwrap.dedent("""
    import os, sys
    from runs.observability import tracing
    tracing.tracer().start_span("parent before the fork").end()
    assert tracing.flush(30)
    child = os.fork()
    if child == 0:
        tracing.tracer().start_span("child").end()
        os._exit(0 if tracing.flush(30) else 1)  # as a worker process exits: no atexit
    tracing.tracer().start_span("parent after the fork").end()
    assert tracing.flush(30)
    assert os.waitpid(child, 0)[1] == 0
    print(child)
""")


def test_a_forked_child_exports_through_a_provider_of_its_own(collector):
    """The parent's batch thread does not exist in the child, and its exporter's open
    connection to the collector is shared with the parent: the child starts its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
           "OTEL_BSP_SCHEDULE_DELAY": HOUR_MS}
    # a fresh Python that imports the SDK, then the script's flushes of up to 30 s each
    # (one before the fork, then one in each process at once)
    done = subprocess.run([sys.executable, "-c", FORKING], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    child = int(done.stdout)
    spans = {s["name"]: s["pid"] for s in collector.snapshot()}
    assert spans["child"] == child
    assert spans["parent before the fork"] == spans["parent after the fork"] != child
