"""The observer on the engine, in one process (MemoryStore, the SDK's in-memory
exporter): one trace per run from the launching request's context, a claim span per
claim, a step span per step with an event per effect (tool, key, attempt, replayed,
outcome), metrics counted, and every log line inside a run carrying its context."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from runs.durable import (
    Agent,
    AgentRegistry,
    Done,
    Outcome,
    WorkerConfig,
    agent,
    control,
    execute_run,
    observe,
    tool,
)
from runs.durable.memory import MemoryStore
from runs.observability import logs, tracing
from runs.observability.links import MemoryTraceLinks
from runs.observability.observer import install
from tests.support.processes import wait_until

REG = AgentRegistry()
WORLD = {"die_in": None, "headers": [], "lines": []}
log = logging.getLogger("agentops.engine.test")


class WorkerDied(BaseException):
    """What a SIGKILL looks like from inside: nothing after it runs in this attempt."""


@tool(idempotent=True)
def fetch(i, *, idempotency_key):
    WORLD["headers"].append((i, tracing.downstream_headers()))
    log.info("fetching %s", i)
    return i * 2


@tool(idempotent=True)
def risky(*, idempotency_key):
    if WORLD["die_in"] == "risky":
        WORLD["die_in"] = None
        raise WorkerDied()
    return "ok"


@tool(idempotent=True, meter=lambda result, arguments: {
    "model": "scripted", "prompt_tokens": 7, "completion_tokens": result})
def think(n, *, idempotency_key):
    return n


@agent("metered", registry=REG)
class Metered(Agent):
    """Two model calls in one step, then a call that may die: a replay of the step
    answers both model calls from the log."""

    def start(self, inputs):
        return {}

    def step(self, ctx, state):
        ctx.call(think, 3)
        ctx.call(think, 5)
        ctx.call(risky)
        return Done({"ok": True})


@agent("observed", registry=REG)
class Observed(Agent):
    def start(self, inputs):
        return {"i": 0}

    def step(self, ctx, state):
        state["i"] += 1
        ctx.call(fetch, state["i"])
        if state["i"] < 2:
            return state
        ctx.call(risky)
        return Done({"ok": True})


@pytest.fixture
def traced():
    exporter = InMemorySpanExporter()
    previous = observe.current()
    tracing.use(SimpleSpanProcessor(exporter))
    links = MemoryTraceLinks()
    install(links=links)
    WORLD.update(die_in=None, headers=[])
    yield exporter, links
    tracing.off()
    observe.install(previous)


def value(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def run_until_claimed(store, run_id, config):
    return wait_until(lambda: (o := execute_run(store, run_id, config, registry=REG))
                      != Outcome.NOT_CLAIMED and o, 10, message="the lease to run out")


def test_one_trace_across_a_crash_with_both_claims_and_the_replayed_effect_marked(traced):
    exporter, links = traced
    store = MemoryStore()
    caller = trace.get_tracer("caller", tracer_provider=tracing._state["provider"])
    with caller.start_as_current_span("POST /launch/observed/") as request_span:
        run = control.launch(store, agent="observed", inputs={}, registry=REG)
    caller_trace = request_span.get_span_context().trace_id
    assert links.get(run.id).split("-")[1] == f"{caller_trace:032x}"

    before = {"takeovers": value("agentops_lease_takeovers_total", agent="observed"),
              "replayed": value("agentops_effects_replayed_total", tool=fetch.name),
              "succeeded": value("agentops_run_sessions_total", agent="observed",
                                 outcome="succeeded")}
    config = WorkerConfig(owner="host:1:first", lease_seconds=0.2, slice_seconds=60)
    WORLD["die_in"] = "risky"
    with pytest.raises(WorkerDied):
        execute_run(store, run.id, config, registry=REG)
    outcome = run_until_claimed(store, run.id, WorkerConfig(owner="host:2:second",
                                                            lease_seconds=5, slice_seconds=60))
    assert outcome == Outcome.SUCCEEDED

    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {caller_trace}, "one trace, the caller's"
    claims = sorted((s for s in spans if s.name == "claim observed"),
                    key=lambda s: s.attributes["agentops.epoch"])
    assert [(c.attributes["agentops.epoch"], c.attributes["agentops.takeover"],
             c.attributes["agentops.worker"]) for c in claims] == [
        (1, False, "host:1:first"), (2, True, "host:2:second")]
    launch = next(s for s in spans if s.name == "launch observed")
    assert launch.parent.span_id == request_span.get_span_context().span_id
    assert all(c.parent.span_id == launch.context.span_id for c in claims)

    by_claim = {c.context.span_id: c.attributes["agentops.epoch"] for c in claims}
    steps = [s for s in spans if s.name.startswith("step ")]
    # step 1 ran once; step 2 ran, died in `risky`, and was replayed by the next claim
    assert sorted((by_claim[s.parent.span_id], s.attributes["agentops.step"],
                   s.attributes["agentops.replaying"]) for s in steps) == [
        (1, 1, False), (1, 2, False), (2, 2, True)]
    effects = sorted((by_claim[s.parent.span_id], s.attributes["agentops.step"], e.name,
                      e.attributes["agentops.effect.key"],
                      e.attributes.get("agentops.effect.attempt"),  # only past the first
                      e.attributes.get("agentops.effect.replayed"),  # only when true
                      e.attributes.get("agentops.effect.outcome"))  # only when not done
                     for s in steps for e in s.events)
    key = lambda step: f"{run.id}:1:{step}:"  # noqa: E731
    assert effects == [
        (1, 1, fetch.name, key(1) + "0", None, None, None),
        (1, 2, fetch.name, key(2) + "0", None, None, None),
        (1, 2, risky.name, key(2) + "1", None, None, "stopped"),
        (2, 2, fetch.name, key(2) + "0", None, True, None),
        (2, 2, risky.name, key(2) + "1", None, None, None)]

    # the tool saw its step's span as the downstream parent (one call per real fetch)
    step_of = {(by_claim[s.parent.span_id], s.attributes["agentops.step"]): s for s in steps}
    assert [i for i, _ in WORLD["headers"]] == [1, 2]
    for i, headers in WORLD["headers"]:
        _, trace_id, parent_id, flags = headers["traceparent"].split("-")
        assert trace_id == f"{caller_trace:032x}" and int(flags, 16) & 1  # sampled
        assert parent_id == f"{step_of[1, i].context.span_id:016x}"

    assert value("agentops_lease_takeovers_total", agent="observed") - before["takeovers"] == 1
    assert value("agentops_effects_replayed_total", tool=fetch.name) - before["replayed"] == 1
    assert value("agentops_run_sessions_total", agent="observed", outcome="succeeded") \
        - before["succeeded"] == 1


def test_a_run_launched_without_a_trace_gets_one_of_its_own(traced):
    exporter, links = traced
    store = MemoryStore()
    first = control.launch(store, agent="observed", inputs={}, registry=REG)
    second = control.launch(store, agent="observed", inputs={}, registry=REG)
    for run in (first, second):
        assert execute_run(store, run.id, WorkerConfig(owner="w"), registry=REG) == "succeeded"
    spans = exporter.get_finished_spans()
    traces = {s.attributes["agentops.run.id"]: s.context.trace_id for s in spans
              if s.name == "claim observed"}
    assert len(set(traces.values())) == 2
    for span in spans:
        assert span.context.trace_id == traces[span.attributes["agentops.run.id"]]


def test_tracing_off_makes_no_spans_and_sends_no_traceparent():
    assert tracing.tracer() is None or not tracing.endpoint_configured()
    tracing.off()
    store = MemoryStore()
    WORLD.update(die_in=None, headers=[])
    run = control.launch(store, agent="observed", inputs={}, registry=REG)
    assert execute_run(store, run.id, WorkerConfig(owner="w"), registry=REG) == "succeeded"
    assert [headers for _, headers in WORLD["headers"]] == [{}, {}]


def test_every_log_line_inside_a_run_carries_its_run_step_effect_and_worker():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    engine = logging.getLogger("agentops")
    engine.addHandler(handler)
    try:
        store = MemoryStore()
        WORLD.update(die_in=None, headers=[])
        run = control.launch(store, agent="observed", inputs={}, registry=REG)
        assert execute_run(store, run.id, WorkerConfig(owner="host:9:tok"),
                           registry=REG) == "succeeded"
        log.info("after the run")
    finally:
        engine.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    inside = [line for line in lines if line["message"].startswith("fetching")]
    assert [(line["run_id"], line["branch"], line["step"], line["effect_key"], line["worker"])
            for line in inside] == [(run.id, 1, 1, f"{run.id}:1:1:0", "host:9:tok"),
                                    (run.id, 1, 2, f"{run.id}:1:2:0", "host:9:tok")]
    after = next(line for line in lines if line["message"] == "after the run")
    assert after["run_id"] is None and after["step"] is None and after["effect_key"] is None
    assert after["worker"].endswith(f":{__import__('os').getpid()}")
    assert set(logs.FIELDS) <= set(after)


def test_the_text_format_for_people_shows_the_context_after_the_message():
    record = logging.LogRecord("agentops.worker", logging.INFO, __file__, 1, "run %s handed off",
                               ("abc",), None)
    record.run_id, record.step = "abc", 3
    logs.ContextFilter().filter(record)
    text = logs.TextFormatter().format(record)
    assert text.endswith("run abc handed off [run_id=abc step=3]")
    assert time.strftime("%Y") in text


def test_the_engine_imports_neither_django_nor_prometheus_nor_opentelemetry():
    import subprocess
    import sys

    from tests.support.processes import ROOT

    probe = ("import sys, runs.durable, runs.durable.observe, runs.durable.memory; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'django', 'prometheus_client', 'opentelemetry'}))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, text=True,
                         capture_output=True, check=True).stdout
    assert out.strip() == "[]"


def test_tokens_and_cost_are_counted_once_per_logged_call_across_a_crash(traced):
    store = MemoryStore()
    run = control.launch(store, agent="metered", inputs={}, registry=REG)
    labels = {"agent": "metered", "model": "scripted"}
    before = {"input": value("agentops_tokens_total", kind="input", **labels),
              "output": value("agentops_tokens_total", kind="output", **labels),
              "cost": value("agentops_cost_usd_total", **labels)}
    price = lambda model, prompt, completion: (prompt + 2 * completion) / 1000  # noqa: E731
    WORLD["die_in"] = "risky"
    with pytest.raises(WorkerDied):
        execute_run(store, run.id, WorkerConfig(owner="host:1:first", lease_seconds=0.2,
                                                slice_seconds=60, price=price), registry=REG)
    outcome = run_until_claimed(store, run.id, WorkerConfig(
        owner="host:2:second", lease_seconds=5, slice_seconds=60, price=price))
    assert outcome == Outcome.SUCCEEDED
    # both calls were logged by the first claim and replayed by the second: once each
    assert value("agentops_tokens_total", kind="input", **labels) - before["input"] == 14
    assert value("agentops_tokens_total", kind="output", **labels) - before["output"] == 8
    assert value("agentops_cost_usd_total", **labels) - before["cost"] == pytest.approx(0.030)
    assert store.get(run.id).usage["cost"] == pytest.approx(0.030)  # what the ledger says


def test_a_run_that_ended_has_its_spans_exported_before_its_worker_moves_on():
    """Batched as deployed (the processor's own schedule an hour away here): a worker
    process may be retired right after a run ends; its trace must not wait for it."""
    exporter = InMemorySpanExporter()
    previous = observe.current()
    tracing.use(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000))
    install(links=MemoryTraceLinks())
    WORLD.update(die_in=None, headers=[])
    try:
        store = MemoryStore()
        run = control.launch(store, agent="observed", inputs={}, registry=REG)
        config = WorkerConfig(owner="host:1:only", lease_seconds=5, slice_seconds=60)
        assert execute_run(store, run.id, config, registry=REG) == Outcome.SUCCEEDED
        events = [e.name for s in exporter.get_finished_spans() for e in s.events]
        assert events == [fetch.name, fetch.name, risky.name]
    finally:
        tracing.off()
        observe.install(previous)
