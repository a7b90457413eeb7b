"""The limit gate in the engine, on the in-memory store: a run held by a limit waits as a
durable timer (no lease, no worker), says why, and goes on where it stopped; a
provider's Retry-After closes the limit for every run; no limit configured, nothing
changes."""

from __future__ import annotations

import time

import pytest

from runs.durable import AgentRegistry, TransientToolError, agent, control, execute_run, tool
from runs.durable import records as r
from runs.durable.memory import MemoryStore
from runs.durable.policies.gates import RunBudgetGate
from runs.durable.policies.limits import (
    EARLY,
    LimitGate,
    LimitRule,
    LimitStoreError,
    MemoryLimitStore,
)
from runs.durable.retry import Retry
from tests.durable.contract import Clock, worker

REG = AgentRegistry()
MADE: list[str] = []
FAIL_FIRST: dict[str, float] = {}


@tool(idempotent=True, limit="api", name="api", retry=Retry(maximum_attempts=5))
def api(question: str, *, idempotency_key: str) -> str:
    if FAIL_FIRST.pop(question, None) is not None:
        raise TransientToolError("429 Too Many Requests", retry_after=30.0, reached_target=False)
    MADE.append(question)
    return f"answer to {question}"


@agent("asker", registry=REG)
def asker(ctx, inputs):
    return {"answers": [ctx.call(api, f"{inputs['name']}-{n}") for n in range(inputs["calls"])]}


@pytest.fixture(autouse=True)
def _fresh():
    MADE.clear()
    FAIL_FIRST.clear()


@pytest.fixture
def clock(monkeypatch) -> Clock:
    # frozen: the tests compare waits and wake-up times to the millisecond
    clock = Clock(frozen=True)
    monkeypatch.setattr(time, "time", clock.time)
    return clock


def setup(pause=None, **rule):
    limits = {"api": LimitRule("api", **rule)} if rule else {}
    store, limit_store = MemoryStore(), MemoryLimitStore()
    config = worker(gates=(RunBudgetGate(), LimitGate(limit_store, limits.get,
                                                      wake=memory_waker(store), pause=pause)))
    return store, limit_store, config


def memory_waker(store: MemoryStore):
    """What runs/limits/wakes.py does on the database: a run still held by the limit has
    its timer moved earlier, never later."""
    def wake(limit, wakes):
        for w in wakes:
            run = store.runs.get(w.run)
            if run is not None and run.status == r.WAITING and run.wake_at > w.at and \
                    (run.attention or {}).get("limit") == limit:
                run.wake_at = w.at
    return wake


def launch(store, name, calls, owner="alice"):
    return control.launch(store, agent="asker", inputs={"name": name, "calls": calls},
                          owner=owner, registry=REG).id


def execute(store, run_id, config):
    return execute_run(store, run_id, config, registry=REG)


def test_a_run_held_by_a_limit_waits_durably_and_goes_on_where_it_stopped(clock):
    store, _, config = setup(requests=2, per=10.0)
    run_id = launch(store, "q", 3)
    assert execute(store, run_id, config) == "waiting"
    run = store.get(run_id)
    assert run.status == r.WAITING and run.lease_owner is None  # no worker, no lease
    assert run.attention["kind"] == "limit"
    assert run.attention["message"] == "waiting for api: 2 requests per 10 s"
    # its slot opens 10 s on; it is woken a little before, to wait the rest in its worker
    assert run.wake_at == pytest.approx(time.time() + 10 - EARLY, abs=0.5)
    assert MADE == ["q-0", "q-1"]
    assert not store.due_runs(limit=10, now=time.time())  # not before its timer
    clock.advance(10.5)
    assert execute(store, run_id, config) == "succeeded"
    assert MADE == ["q-0", "q-1", "q-2"]  # the two made before the hold were replayed
    assert store.get(run_id).output == {"answers": ["answer to q-0", "answer to q-1",
                                                    "answer to q-2"]}


DURING_CALL: list = []


@tool(idempotent=True, limit="api", name="slow-api")
def slow_api(question: str, *, idempotency_key: str) -> str:
    while DURING_CALL:  # what other workers do while this call is in flight
        DURING_CALL.pop(0)()
    MADE.append(question)
    return f"answer to {question}"


@agent("slow-asker", registry=REG)
def slow_asker(ctx, inputs):
    return {"answer": ctx.call(slow_api, inputs["name"])}


def test_a_run_held_for_a_slot_is_woken_as_soon_as_the_slot_is_given_back(clock):
    """Another worker's run asks while this run's call is in flight, and waits; when the
    call ends its slot goes to the waiting run at once: its timer is due now, not at a
    guess of when the call might end."""
    store, _, config = setup(concurrency=1)
    first, second = (control.launch(store, agent="slow-asker", inputs={"name": name},
                                    owner="alice", registry=REG).id for name in ("1", "2"))
    seen = []
    DURING_CALL.append(lambda: seen.append((execute(store, second, config),
                                            store.get(second).wake_at - time.time())))
    assert execute(store, first, config) == "succeeded"
    assert store.get(second).wake_at <= time.time()
    [(outcome, told)] = seen
    assert outcome == "waiting" and told > 60  # the call might have lasted up to its lease
    assert store.due_runs(limit=10, now=time.time()) == [second]
    assert execute(store, second, config) == "succeeded"
    assert MADE == ["1", "2"]


def test_a_call_whose_slot_opens_within_a_second_waits_for_it_in_its_worker(clock):
    """A claim costs more than a second's wait: the run keeps its worker until the slot
    opens, instead of a timer and a claim while the slot stays free."""
    waited = []

    def pause(seconds):
        waited.append(seconds)
        clock.advance(seconds)

    store, _, config = setup(pause=pause, requests=1, per=10.0)
    assert execute(store, launch(store, "first", 1), config) == "succeeded"
    clock.advance(9.5)
    assert execute(store, launch(store, "second", 1), config) == "succeeded"
    assert waited == [pytest.approx(0.5, abs=0.05)]
    assert MADE == ["first-0", "second-0"]


def test_a_concurrency_slot_is_given_back_when_the_call_ends():
    store, limit_store, config = setup(concurrency=1)
    run_id = launch(store, "c", 4)
    assert execute(store, run_id, config) == "succeeded"
    assert MADE == ["c-0", "c-1", "c-2", "c-3"]
    assert all(g["done"] for g in limit_store.states["api"]["grants"])


def test_a_retry_after_closes_the_limit_for_every_run(clock):
    store, limit_store, config = setup(requests=100, per=60.0)
    FAIL_FIRST["first-0"] = 30.0
    first, second = launch(store, "first", 1), launch(store, "second", 1, owner="bob")
    assert execute(store, first, config) == "waiting"  # its own retry, after 30 s
    assert store.get(first).attention["kind"] == "retry"
    assert execute(store, second, config) == "waiting"  # never asked the provider
    held = store.get(second)
    assert held.attention["kind"] == "limit" and held.attention["why"] == "closed"
    assert "Retry-After" in held.attention["message"]
    assert held.wake_at == pytest.approx(limit_store.states["api"]["closed_until"] - EARLY,
                                         abs=0.01)
    assert MADE == []
    clock.advance(31)
    assert execute(store, second, config) == "succeeded"
    assert execute(store, first, config) == "succeeded"
    assert sorted(MADE) == ["first-0", "second-0"]


def test_without_a_configured_limit_nothing_is_counted_or_held():
    store, limit_store, config = setup()
    run_id = launch(store, "free", 5)
    assert execute(store, run_id, config) == "succeeded"
    assert len(MADE) == 5
    assert limit_store.states == {}


def test_the_attempt_after_a_durable_retry_wait_counts_against_the_limit(clock):
    """The failed attempt reached the provider: it fills the window, so the attempt after
    the retry wait waits for its turn too (the effect stays `retrying`, same key)."""
    store, _, config = setup(requests=1, per=100.0)
    FAIL_FIRST["again-0"] = 30.0
    run_id = launch(store, "again", 1)
    assert execute(store, run_id, config) == "waiting"
    assert store.get(run_id).attention["kind"] == "retry"
    clock.advance(31)
    assert execute(store, run_id, config) == "waiting"
    held = store.get(run_id)
    assert held.attention["kind"] == "limit" and held.attention["why"] == "requests"
    assert [e.status for e in store.history(run_id).effects] == [r.RETRYING]
    clock.advance(70)
    assert execute(store, run_id, config) == "succeeded"
    assert MADE == ["again-0"]
    [effect] = store.history(run_id).effects
    assert effect.attempts == 2


FLAKY_CALLS: list[str] = []


@tool(idempotent=True, limit="api", name="flaky-api",
      retry=Retry(initial_interval=0.01, maximum_attempts=3, jitter=0))
def flaky_api(question: str, *, idempotency_key: str) -> str:
    FLAKY_CALLS.append(question)
    if len(FLAKY_CALLS) == 1:
        raise TransientToolError("the connection was cut mid-answer")
    return f"answer to {question}"


@agent("flaky-asker", registry=REG)
def flaky_asker(ctx, inputs):
    return {"answer": ctx.call(flaky_api, inputs["question"])}


def test_the_attempt_after_a_short_retry_wait_counts_against_the_limit(clock):
    """An attempt retried in the worker (a wait too short to give the worker up) is one
    more request to the provider as well: with the window full it is not made; the
    call becomes a retry due at once and the run waits for its turn, holding no slot."""
    FLAKY_CALLS.clear()
    store, _, config = setup(requests=1, per=100.0)
    run_id = control.launch(store, agent="flaky-asker", inputs={"question": "q"},
                            owner="alice", registry=REG).id
    assert execute(store, run_id, config) == "waiting"
    held = store.get(run_id)
    assert held.attention["kind"] == "limit" and held.attention["why"] == "requests"
    assert held.lease_owner is None and FLAKY_CALLS == ["q"]
    assert [e.status for e in store.history(run_id).effects] == [r.RETRYING]
    clock.advance(101)
    assert execute(store, run_id, config) == "succeeded"
    assert FLAKY_CALLS == ["q", "q"]
    assert store.get(run_id).output == {"answer": "answer to q"}
    [effect] = store.history(run_id).effects
    assert effect.attempts == 2


@agent("model-user", registry=REG)
def model_user(ctx, inputs):
    from builtin_agents.tools.llm import chat_completion

    reply = ctx.call(chat_completion, "http://provider.test/v1", "m",
                     [{"role": "user", "content": inputs["say"]}], [])
    return {"finish": reply["finish_reason"]}


def test_a_429_with_retry_after_to_the_built_in_model_tool_closes_llm_for_everyone(
        clock, monkeypatch):
    """The real LLM tool against a provider (httpx's mock transport) that answers the first
    request 429 with Retry-After: 20: the other run never reaches the provider before."""
    import httpx

    from builtin_agents.tools import llm

    seen: list[str] = []

    def provider(request):
        seen.append(request.headers["Idempotency-Key"])
        if len(seen) == 1:
            return httpx.Response(429, headers={"Retry-After": "20"},
                                  json={"error": {"message": "slow down"}})
        body = ('data: {"choices": [{"index": 0, "delta": {"content": "hi"}, '
                '"finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, text=body)

    monkeypatch.setattr(llm, "client", lambda: httpx.Client(transport=httpx.MockTransport(provider)))
    store, limit_store = MemoryStore(), MemoryLimitStore()
    rules = {"llm": LimitRule("llm", requests=100, per=60)}
    config = worker(gates=(RunBudgetGate(), LimitGate(limit_store, rules.get)))
    first, second = (control.launch(store, agent="model-user", inputs={"say": s}, owner=o,
                                    registry=REG).id for s, o in (("a", "alice"), ("b", "bob")))
    assert execute(store, first, config) == "waiting"  # its own retry, after 20 s
    assert execute(store, second, config) == "waiting"
    assert store.get(second).attention["why"] == "closed"
    assert len(seen) == 1
    clock.advance(21)
    assert execute(store, second, config) == "succeeded"
    assert execute(store, first, config) == "succeeded"
    assert len(seen) == 3


class AwayStore:
    """Redis or the database not answering."""

    def update(self, name, change):
        raise LimitStoreError("redis: Connection refused")


def test_a_limit_whose_counter_does_not_answer_holds_the_call_instead_of_letting_it_through():
    store = MemoryStore()
    rules = {"api": LimitRule("api", requests=100)}
    config = worker(gates=(RunBudgetGate(), LimitGate(AwayStore(), rules.get)))
    run_id = launch(store, "away", 1)
    assert execute(store, run_id, config) == "waiting"
    held = store.get(run_id)
    assert held.attention["why"] == "store" and "Connection refused" in held.attention["message"]
    assert held.wake_at is not None
    assert MADE == []
