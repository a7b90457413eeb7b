"""Effects as events of their step's span (runs/observability/observer.py), in one
process on MemoryStore with the SDK's in-memory exporter: failed attempts, calls made
in parallel threads, on_resume's calls outside any step, a step of many calls, and one
sampling decision for a whole run."""

from __future__ import annotations

import threading

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

from runs.durable import (
    Agent,
    AgentRegistry,
    Done,
    Outcome,
    Retry,
    ToolFailedError,
    TransientToolError,
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
from tests.support.processes import wait_until

REG = AgentRegistry()
WORLD: dict = {"failures": 0, "headers": [], "die": False}
SHORT = Retry(initial_interval=0.01, maximum_attempts=2, jitter=0)
CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class WorkerDied(BaseException):
    """What a SIGKILL looks like from inside: nothing after it runs in this attempt."""


@tool(idempotent=True, retry=SHORT)
def flaky(*, idempotency_key):
    WORLD["failures"] += 1
    if WORLD["failures"] == 1:
        raise TransientToolError("the first attempt times out")
    return "ok"


@tool(idempotent=True, retry=SHORT)
def broken(*, idempotency_key):
    raise TransientToolError("never answers")


@tool(idempotent=True)
def fetch(i, *, idempotency_key):
    WORLD["headers"].append((i, threading.get_ident(), tracing.downstream_headers()))
    if WORLD["die"]:
        WORLD["die"] = False
        raise WorkerDied()
    return i


@agent("retrying", registry=REG)
class Retrying(Agent):
    def step(self, ctx, state):
        ctx.call(flaky)
        try:
            ctx.call(broken)
        except ToolFailedError:
            pass
        return Done({})


@tool(idempotent=True)
def together(i, *, idempotency_key):
    """Returns once all five calls of the group are in: they run at once, in threads."""
    WORLD["barrier"].wait()
    return fetch.fn(i, idempotency_key=idempotency_key)


@agent("fanning", registry=REG)
class Fanning(Agent):
    def step(self, ctx, state):
        return Done({"got": ctx.map(together, range(5), max_concurrency=5)})


@agent("resuming", registry=REG)
class Resuming(Agent):
    def on_resume(self, ctx, state):
        ctx.call(fetch, -1)
        return state

    def step(self, ctx, state):
        ctx.call(fetch, 1)
        return Done({})


@agent("busy", registry=REG)
class Busy(Agent):
    def step(self, ctx, state):
        for i in range(state["calls"]):
            ctx.call(fetch, i)
        return Done({})


@pytest.fixture
def traced():
    """Spans to memory, as the worker traces (links in memory: no database)."""
    def start(sampler=None) -> InMemorySpanExporter:
        exporter = InMemorySpanExporter()
        tracing.use(SimpleSpanProcessor(exporter), sampler)
        return exporter

    previous = observe.current()
    install(links=MemoryTraceLinks())
    WORLD.update(failures=0, headers=[], die=False, barrier=threading.Barrier(5, timeout=10))
    yield start
    tracing.off()
    observe.install(previous)


def run_to_end(store, agent_name: str, inputs=None) -> str:
    run = control.launch(store, agent=agent_name, inputs=inputs or {}, registry=REG)
    assert execute_run(store, run.id, WorkerConfig(owner="host:1:w"), registry=REG) == \
        Outcome.SUCCEEDED
    return run.id


def events(span) -> list[tuple]:
    return [(e.name, dict(e.attributes)) for e in span.events]


def test_failed_attempts_are_events_before_their_calls_event(traced):
    exporter = traced()
    run_id = run_to_end(MemoryStore(), "retrying")
    [step] = [s for s in exporter.get_finished_spans() if s.name == "step 1"]
    key = f"{run_id}:1:1:"
    got = [(name, a.get("agentops.tool"), a.get("agentops.effect.key"),
            a.get("agentops.effect.attempt"), a.get("agentops.effect.outcome"),
            a.get("agentops.retry_in"), a.get("exception.type")) for name, a in events(step)]
    assert got == [
        ("attempt failed", flaky.name, key + "0", 1, None, 0.01, "TransientToolError"),
        (flaky.name, None, key + "0", 2, None, None, None),  # its tool's name; done: no outcome
        ("attempt failed", broken.name, key + "1", 1, None, 0.01, "TransientToolError"),
        ("attempt failed", broken.name, key + "1", 2, None, -1.0, "TransientToolError"),
        (broken.name, None, key + "1", 2, "error", None, "TransientToolError")]
    # an effect's event is stamped with its call's start: the attempts' come after it
    assert step.events[1].timestamp < step.events[0].timestamp


def test_calls_made_in_parallel_threads_are_events_of_their_step_sent_downstream(traced):
    exporter = traced()
    run_id = run_to_end(MemoryStore(), "fanning")
    [step] = [s for s in exporter.get_finished_spans() if s.name == "step 1"]
    assert sorted(a["agentops.effect.key"] for _, a in events(step)) == \
        [f"{run_id}:1:1:{seq}" for seq in range(5)]
    assert len({thread for _, thread, _ in WORLD["headers"]}) == 5, "the calls ran in threads"
    # each thread's tool saw the step's span as the downstream parent
    parents = {headers["traceparent"].split("-")[2] for _, _, headers in WORLD["headers"]}
    assert parents == {f"{step.context.span_id:016x}"}


def test_on_resumes_calls_are_events_of_a_span_of_their_own_step(traced):
    """on_resume's calls sit at step -epoch in the log: no step span is open for them."""
    exporter = traced()
    store = MemoryStore()
    run = control.launch(store, agent="resuming", inputs={}, registry=REG)
    WORLD["die"] = True
    with pytest.raises(WorkerDied):
        execute_run(store, run.id, WorkerConfig(owner="host:1:a", lease_seconds=0.2),
                    registry=REG)
    second = WorkerConfig(owner="host:2:b")
    assert wait_until(lambda: (o := execute_run(store, run.id, second, registry=REG))
                      != Outcome.NOT_CLAIMED and o, 10,
                      message="the lease to run out") == Outcome.SUCCEEDED
    spans = exporter.get_finished_spans()
    claim = next(s for s in spans if s.name == "claim resuming"
                 and s.attributes["agentops.epoch"] == 2)
    resume = next(s for s in spans if s.name == "step -2")
    assert resume.parent.span_id == claim.context.span_id
    assert resume.attributes["agentops.outside_steps"] is True
    assert [(name, a["agentops.effect.key"]) for name, a in events(resume)] == \
        [(fetch.name, f"{run.id}:1:-2:0")]
    step = next(s for s in spans if s.name == "step 1" and s.parent.span_id == claim.context.span_id)
    assert resume.end_time <= step.start_time  # ended when the next step began
    # its tool sent the resume span downstream
    assert WORLD["headers"][-2][2]["traceparent"].split("-")[2] == f"{resume.context.span_id:016x}"


def test_a_step_keeps_every_call_past_the_sdks_default_of_128_events(traced):
    exporter = traced()
    run_id = run_to_end(MemoryStore(), "busy", {"calls": 300})
    [step] = [s for s in exporter.get_finished_spans() if s.name == "step 1"]
    assert [a["agentops.effect.key"] for _, a in events(step)] == \
        [f"{run_id}:1:1:{seq}" for seq in range(300)]
    assert step.dropped_events == 0


def test_one_sampling_decision_for_a_whole_run(traced):
    """ParentBased(ALWAYS_OFF): a run launched without a caller is not traced at all (its
    calls tell downstream it is not sampled); a run whose caller sampled its trace is
    traced whole, claims and steps."""
    exporter = traced(ParentBased(ALWAYS_OFF))
    store = MemoryStore()
    unsampled = run_to_end(store, "fanning")
    assert exporter.get_finished_spans() == ()
    assert {int(h["traceparent"][-2:], 16) & 1 for _, _, h in WORLD["headers"]} == {0}
    token = otel_context.attach(tracing.context_of(CALLER))
    try:
        sampled = control.launch(store, agent="fanning", inputs={}, registry=REG)
    finally:
        otel_context.detach(token)
    assert execute_run(store, sampled.id, WorkerConfig(owner="host:1:w"), registry=REG) == \
        Outcome.SUCCEEDED
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["claim fanning", "launch fanning", "step 1"]
    assert {s.attributes["agentops.run.id"] for s in spans} == {sampled.id}
    assert {s.context.trace_id for s in spans} == {int(CALLER.split("-")[1], 16)}
    assert unsampled != sampled.id
