"""Durable retries on the in-memory store: the policy, short waits in the worker thread,
long waits as durable timers that free the worker, and the operator's retry now / give up."""

from __future__ import annotations

import math
import time
from collections import Counter

import pytest

from runs.durable import (
    Agent,
    AgentRegistry,
    Done,
    InvalidTransitionError,
    Outcome,
    PermanentToolError,
    Retry,
    ToolFailedError,
    TransientToolError,
    WorkerConfig,
    agent,
    control,
    execute_run,
    tool,
)
from runs.durable import context as context_module
from runs.durable import records as r
from runs.durable import retry as retry_module
from runs.durable.memory import MemoryStore
from runs.durable.retry import LONGEST_WAIT, RETRY_AFTER_LIMIT
from tests.support.leases import NoLeases
from tests.support.processes import wait_until

REG = AgentRegistry()
# What the flaky target saw: the idempotency key of every attempt, and how to fail.
TARGET = {"keys": [], "fail": {}, "sent": Counter()}


def fail_next(tool_name: str, *errors: BaseException) -> None:
    TARGET["fail"] = {tool_name: list(errors)}


def _maybe_fail(tool_name: str):
    if TARGET["fail"].get(tool_name):
        raise TARGET["fail"][tool_name].pop(0)


@tool(idempotent=True, name="t.fetch", retry=Retry(initial_interval=0.3, maximum_interval=0.6,
                                                   maximum_attempts=None, jitter=0.2))
def fetch(url, *, idempotency_key):
    TARGET["keys"].append(idempotency_key)
    _maybe_fail("fetch")
    return {"url": url}


@tool(idempotent=True, name="t.quick", retry=Retry(initial_interval=0.01, maximum_attempts=5))
def quick(value, *, idempotency_key):
    TARGET["keys"].append(idempotency_key)
    _maybe_fail("quick")
    return value


@tool(name="t.send", retry=Retry(initial_interval=0.3, maximum_attempts=4, jitter=0))
def send(message):
    TARGET["sent"][message] += 1
    _maybe_fail("send")
    return {"sent": message}


def _caught(ctx, call):
    try:
        return {"result": call()}
    except ToolFailedError as exc:
        return {"caught": exc.error_type, "permanent": exc.permanent, "attempts": exc.attempts,
                "message": exc.message}


@agent("fetcher", registry=REG)
def fetcher(ctx, inputs):
    before = ctx.call(quick, "before")
    return {"before": before, **_caught(ctx, lambda: ctx.call(fetch, inputs["url"]))}


@agent("quick", registry=REG)
def quick_agent(ctx, inputs):
    return _caught(ctx, lambda: ctx.call(quick, "v"))


@agent("sender", registry=REG)
def sender(ctx, inputs):
    return _caught(ctx, lambda: ctx.call(send, "hello"))


@agent("resumer", registry=REG)
class Resumer(Agent):
    """on_resume's calls are never replayed: a long wait there gives up instead."""

    def step(self, ctx, state):
        if not state.get("slept"):
            ctx.sleep(1.5)
        return Done(state.get("checked"))

    def on_resume(self, ctx, state):
        return {"slept": True, "checked": _caught(ctx, lambda: ctx.call(fetch, "resume"))}


@pytest.fixture(autouse=True)
def fresh_target(monkeypatch):
    TARGET.update(keys=[], fail={}, sent=Counter())
    # Waits over 0.1 s are durable timers here, so the tests wait tenths of seconds.
    monkeypatch.setattr(retry_module, "INLINE_SLEEP_SECONDS", 0.1)


def launch(store, name, **inputs):
    return control.launch(store, agent=name, inputs=inputs, registry=REG).id


def execute(store, run_id):
    return execute_run(store, run_id, WorkerConfig(owner="w:1"), registry=REG, leases=NoLeases())


def events(store, run_id, kind):
    return [data for _, k, data in store.events_after(run_id) if k == kind]


def the_effect(store, run_id, tool_name):
    [effect] = [e for e in store.history(run_id).effects if e.tool == tool_name]
    return effect


def unavailable(retry_after=None):
    return TransientToolError("503 Service Unavailable", retry_after=retry_after)


# --- the policy ------------------------------------------------------------------------------
def test_backoff_grows_by_the_coefficient_up_to_the_maximum_interval():
    policy = Retry(initial_interval=0.1, backoff_coefficient=3, maximum_interval=2, jitter=0)
    assert [policy.backoff(n) for n in range(1, 6)] == pytest.approx([0.1, 0.3, 0.9, 2, 2])


def test_jitter_is_computed_from_the_key_and_attempt_so_a_replay_waits_the_same():
    policy = Retry(initial_interval=10, maximum_interval=10, jitter=0.2)
    waits = [policy.backoff(3, f"run:1:2:{n}") for n in range(50)]
    assert waits == [policy.backoff(3, f"run:1:2:{n}") for n in range(50)]
    assert all(8 <= w <= 12 for w in waits)
    assert len(set(waits)) > 40  # runs failing together do not retry together


def test_maximum_attempts_counts_the_first_and_none_is_unlimited():
    capped = Retry(maximum_attempts=3, jitter=0)
    assert capped.next_wait(2, first_at=0, now=0, key="k") is not None
    assert capped.next_wait(3, first_at=0, now=0, key="k") is None
    unlimited = Retry(maximum_attempts=None, maximum_interval=30, jitter=0)
    assert unlimited.next_wait(100_000, first_at=0, now=0, key="k") == 30


def test_maximum_elapsed_cuts_the_last_wait_short_then_gives_up():
    policy = Retry(initial_interval=30, maximum_interval=30, maximum_attempts=None,
                   maximum_elapsed=3600, jitter=0)
    assert policy.next_wait(5, first_at=0, now=100, key="k") == 30
    assert policy.next_wait(99, first_at=0, now=3590, key="k") == pytest.approx(10)
    assert policy.next_wait(100, first_at=0, now=3600, key="k") is None


def test_retry_after_replaces_the_backoff_even_past_the_maximum_interval():
    policy = Retry(initial_interval=0.1, maximum_interval=1, maximum_attempts=None)
    assert policy.next_wait(1, first_at=0, now=0, key="k", retry_after=90) == 90


def test_retry_after_never_shortens_the_backoff():
    # Retry-After is the least a client should wait. A server that answers "0" or an
    # HTTP date in the past must not turn the backoff into a loop of instant attempts.
    policy = Retry(initial_interval=5, maximum_interval=5, maximum_attempts=None, jitter=0)
    for said in (0.0, -3.0, float("nan"), 2.0):
        assert policy.next_wait(7, first_at=0, now=0, key="k", retry_after=said) == 5


def test_a_retry_after_beyond_any_sane_wait_is_capped():
    policy = Retry(maximum_attempts=None)
    for said in (1e20, float("inf")):
        assert policy.next_wait(1, first_at=0, now=0, key="k", retry_after=said) == \
            RETRY_AFTER_LIMIT


@pytest.mark.parametrize("bad", [dict(initial_interval=-1), dict(backoff_coefficient=0.5),
                                 dict(maximum_attempts=0), dict(jitter=2),
                                 dict(maximum_elapsed=-5)])
def test_a_policy_that_makes_no_sense_is_refused(bad):
    with pytest.raises(ValueError):
        Retry(**bad)


@pytest.mark.parametrize("bad", [dict(maximum_interval=1e12), dict(maximum_interval=math.inf),
                                 dict(initial_interval=math.nan),
                                 dict(initial_interval=1e12, maximum_interval=1e12),
                                 dict(backoff_coefficient=math.nan)])
def test_a_policy_that_would_make_an_unwritable_wake_time_is_refused(bad):
    """A wait of 1e12 s wakes past the year 9999, which no store's timestamp holds; a NaN
    wait wakes never. Refused when the policy is made, naming the field."""
    with pytest.raises(ValueError, match=next(iter(bad))):
        Retry(**bad)


def test_the_longest_policy_wait_is_the_longest_sleep():
    policy = Retry(initial_interval=LONGEST_WAIT, maximum_interval=LONGEST_WAIT, jitter=0)
    assert policy.backoff(1) == LONGEST_WAIT == context_module.MAX_SLEEP_SECONDS


# --- the engine ------------------------------------------------------------------------------
def test_short_waits_stay_in_the_worker_thread_and_each_attempt_is_an_event():
    store = MemoryStore()
    run_id = launch(store, "quick")
    fail_next("quick", unavailable(), ConnectionError("reset"))
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert store.get(run_id).output == {"result": "v"}
    attempts = events(store, run_id, "attempt")
    assert [(a["attempt"], a["error"][:20]) for a in attempts] == [
        (1, "TransientToolError: "), (2, "ConnectionError: res")]
    assert all(0 < a["retry_in"] <= 0.1 for a in attempts)
    assert all(e["status"] != r.WAITING for e in events(store, run_id, "status"))
    assert the_effect(store, run_id, "t.quick").attempts == 3
    assert len(set(TARGET["keys"])) == 1  # one effect, one key, for every attempt


def test_a_server_that_keeps_saying_retry_after_0_gets_the_backoff_not_a_hot_loop():
    store = MemoryStore()
    run_id = launch(store, "fetcher", url="u")
    fail_next("fetch", *[unavailable(retry_after=0) for _ in range(50)])
    assert execute(store, run_id) == Outcome.WAITING  # the policy's 0.3 s: a durable wait
    assert TARGET["keys"].count(the_effect(store, run_id, "t.fetch").key) == 1


def test_a_permanent_error_fails_fast_and_says_so():
    store = MemoryStore()
    run_id = launch(store, "quick")
    fail_next("quick", PermanentToolError("404 Not Found"))
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert store.get(run_id).output == {"caught": "PermanentToolError", "permanent": True,
                                        "attempts": 1, "message": "404 Not Found"}
    assert len(TARGET["keys"]) == 1


class NotFound(PermanentToolError):
    """A tool's own kind of permanent error: a subclass, matched by isinstance."""


@tool(idempotent=True, name="t.lookup", retry=Retry(initial_interval=0.01, maximum_attempts=4))
def lookup(item, *, idempotency_key):
    TARGET["keys"].append(idempotency_key)
    _maybe_fail("lookup")
    return item


@tool(name="t.post", retry=Retry(initial_interval=0.01, maximum_attempts=4))
def post(item):
    TARGET["sent"][item] += 1
    _maybe_fail("post")
    return item


@agent("looker", registry=REG)
def looker(ctx, inputs):
    return _caught(ctx, lambda: ctx.call(lookup, "x"))


@agent("poster", registry=REG)
def poster(ctx, inputs):
    return _caught(ctx, lambda: ctx.call(post, "x"))


@pytest.mark.parametrize("name, tool_name", [("looker", "lookup"), ("poster", "post")])
def test_a_subclass_of_permanent_tool_error_is_not_retried(name, tool_name):
    store = MemoryStore()
    run_id = launch(store, name)
    fail_next(tool_name, *[NotFound("no such item") for _ in range(4)])
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert store.get(run_id).output == {"caught": "NotFound", "permanent": True, "attempts": 1,
                                        "message": "no such item"}
    calls = len(TARGET["keys"]) if name == "looker" else TARGET["sent"]["x"]
    assert calls == 1  # Retry(maximum_attempts=4) would have made 4
    assert [a["retry_in"] for a in events(store, run_id, "attempt")] == [None]


def test_a_spent_policy_reaches_the_agent_as_not_permanent():
    store = MemoryStore()
    run_id = launch(store, "quick")
    fail_next("quick", *[unavailable() for _ in range(5)])
    assert execute(store, run_id) == Outcome.SUCCEEDED
    output = store.get(run_id).output
    assert (output["permanent"], output["attempts"]) == (False, 5)
    assert events(store, run_id, "attempt")[-1]["retry_in"] is None


def test_a_long_wait_frees_the_worker_as_a_durable_timer_then_the_same_key_is_retried():
    store = MemoryStore()
    run_id = launch(store, "fetcher", url="u")
    fail_next("fetch", unavailable(), unavailable())
    before = time.time()
    assert execute(store, run_id) == Outcome.WAITING
    run = store.get(run_id)
    assert run.status == r.WAITING and run.lease_owner is None  # no worker holds it
    assert run.attention["kind"] == "retry"
    assert (run.attention["tool"], run.attention["attempt"]) == ("t.fetch", 2)
    assert run.attention["error"] == "503 Service Unavailable"
    assert run.attention["error_type"] == "TransientToolError"
    effect = the_effect(store, run_id, "t.fetch")
    assert effect.status == r.RETRYING and effect.attempts == 1
    recorded_wait = effect.result["wait"]
    assert recorded_wait == pytest.approx(fetch.retry.backoff(1, effect.key))
    assert run.wake_at == effect.result["wake_at"] >= before + recorded_wait
    assert execute(store, run_id) == Outcome.NOT_CLAIMED  # not due yet
    wait_until(lambda: time.time() >= run.wake_at, 5)
    assert execute(store, run_id) == Outcome.WAITING  # the second attempt failed too
    second = the_effect(store, run_id, "t.fetch")
    assert second.attempts == 2 and second.result["first_at"] == effect.result["first_at"]
    wait_until(lambda: time.time() >= store.get(run_id).wake_at, 5)
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert store.get(run_id).output == {"before": "before", "result": {"url": "u"}}
    assert TARGET["keys"].count(effect.key) == 3  # three attempts, one key: the target dedups
    assert [a["attempt"] for a in events(store, run_id, "attempt")] == [1, 2]
    assert the_effect(store, run_id, "t.quick").attempts == 1  # replayed, not called again


def test_retry_after_sets_the_durable_timer():
    store = MemoryStore()
    run_id = launch(store, "fetcher", url="u")
    fail_next("fetch", unavailable(retry_after=120))
    assert execute(store, run_id) == Outcome.WAITING
    effect = the_effect(store, run_id, "t.fetch")
    assert effect.result["wait"] == 120
    assert store.get(run_id).wake_at == pytest.approx(time.time() + 120, abs=2)


def test_a_run_woken_early_or_crashed_mid_wait_waits_until_the_recorded_time():
    store = MemoryStore()
    run_id = launch(store, "fetcher", url="u")
    fail_next("fetch", unavailable(retry_after=30))
    assert execute(store, run_id) == Outcome.WAITING
    wake_at = store.get(run_id).wake_at
    control.pause(store, run_id, actor="op")
    control.resume(store, run_id, actor="op")  # queued: claimable at once
    assert execute(store, run_id) == Outcome.WAITING
    assert store.get(run_id).wake_at == wake_at
    control.pause(store, run_id, actor="op")
    control.resume(store, run_id, actor="op")
    # A worker claims it and dies at once; the next one finds its lease run out.
    assert store.claim(run_id, "dead:2", 0.05, time.time()) is not None
    wait_until(lambda: time.time() > store.get(run_id).lease_expires_at, 2)
    assert execute(store, run_id) == Outcome.WAITING
    assert store.get(run_id).wake_at == wake_at
    assert TARGET["keys"].count(the_effect(store, run_id, "t.fetch").key) == 1


def test_retry_now_wakes_the_timer_and_is_audited():
    store = MemoryStore()
    run_id = launch(store, "fetcher", url="u")
    fail_next("fetch", unavailable(retry_after=600))
    assert execute(store, run_id) == Outcome.WAITING
    run = control.retry_now(store, run_id, actor="op", reason="the site is back")
    assert run.status == r.QUEUED
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert the_effect(store, run_id, "t.fetch").attempts == 2
    [audit] = store.audit[run_id]
    assert (audit.action, audit.actor, audit.reason) == ("retry_now", "op", "the site is back")


def test_give_up_fails_the_call_as_a_tool_error_the_agent_sees():
    store = MemoryStore()
    run_id = launch(store, "fetcher", url="u")
    fail_next("fetch", unavailable(retry_after=600))
    assert execute(store, run_id) == Outcome.WAITING
    control.give_up(store, run_id, actor="op", reason="the site is gone")
    assert execute(store, run_id) == Outcome.SUCCEEDED
    output = store.get(run_id).output
    assert (output["caught"], output["permanent"], output["attempts"]) == \
        ("RetryGivenUp", False, 1)
    assert "503 Service Unavailable" in output["message"]
    assert len(TARGET["keys"]) == 2  # quick once, fetch once: giving up calls nothing
    assert [a.action for a in store.audit[run_id]] == ["give_up"]


def test_a_run_cancelled_while_waiting_to_retry_no_longer_says_it_is_retrying():
    store = MemoryStore()
    run_id = launch(store, "fetcher", url="u")
    fail_next("fetch", unavailable(retry_after=600))
    assert execute(store, run_id) == Outcome.WAITING
    assert store.get(run_id).attention["kind"] == "retry"
    run = control.cancel(store, run_id, actor="op", reason="not needed")
    assert (run.status, run.attention, run.wake_at) == (r.CANCELLED, None, None)
    assert store.get(run_id).attention is None
    with pytest.raises(InvalidTransitionError):
        control.retry_now(store, run_id, actor="op")


def test_retry_now_and_give_up_refuse_a_run_that_is_not_waiting_to_retry():
    store = MemoryStore()
    run_id = launch(store, "quick")
    for action in (control.retry_now, control.give_up):
        with pytest.raises(InvalidTransitionError, match="not waiting to retry"):
            action(store, run_id, actor="op")
    assert store.audit[run_id] == []


@pytest.mark.parametrize("resolution, sent", [("done", 1), ("skip", 1), ("retry", 2)])
def test_a_non_idempotent_call_that_may_have_reached_the_target_is_in_doubt(resolution, sent):
    """Not an error the agent (or a later resume) could send again: the operator decides."""
    store = MemoryStore()
    run_id = launch(store, "sender")
    fail_next("send", TransientToolError("read timeout"))  # sent; whether it landed is unknown
    assert execute(store, run_id) == Outcome.NEEDS_ATTENTION
    attention = store.get(run_id).attention
    assert (attention["kind"], attention["tool"]) == ("in_doubt", "t.send")
    assert "read timeout" in attention["error"] and "read timeout" in attention["message"]
    effect = the_effect(store, run_id, "t.send")
    assert (effect.status, effect.attempts) == (r.INTENT, 1)
    with pytest.raises(InvalidTransitionError, match="in-doubt"):
        control.resume(store, run_id, actor="op")
    control.resolve_effect(store, run_id, seq=attention["seq"], resolution=resolution,
                           actor="op", result={"sent": "hello"})
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert TARGET["sent"]["hello"] == sent


def refused_then_due(store) -> str:
    """A sender run whose first send was refused before sending; its retry is due now."""
    run_id = launch(store, "sender")
    fail_next("send", TransientToolError("connection refused", reached_target=False))
    assert execute(store, run_id) == Outcome.WAITING
    wait_until(lambda: time.time() >= store.get(run_id).wake_at, 5)
    return run_id


def test_a_non_idempotent_call_refused_before_sending_is_retried_durably():
    store = MemoryStore()
    run_id = refused_then_due(store)
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert store.get(run_id).output == {"result": {"sent": "hello"}}
    assert TARGET["sent"]["hello"] == 2


def test_a_non_idempotent_attempt_cut_short_after_a_durable_wait_is_in_doubt():
    store = MemoryStore()
    run_id = refused_then_due(store)

    class Died(BaseException):
        pass

    fail_next("send", Died())  # the worker dies inside the second attempt
    with pytest.raises(Died):
        execute(store, run_id)
    store.runs[run_id].lease_expires_at = time.time() - 1  # its lease runs out
    assert execute(store, run_id) == Outcome.NEEDS_ATTENTION
    assert store.get(run_id).attention["kind"] == "in_doubt"
    assert TARGET["sent"]["hello"] == 2


def test_on_resume_cannot_wait_durably_so_a_long_wait_there_gives_up():
    store = MemoryStore()
    run_id = launch(store, "resumer")
    assert execute(store, run_id) == Outcome.WAITING  # the sleep
    fail_next("fetch", unavailable(retry_after=60))
    wait_until(lambda: time.time() >= store.get(run_id).wake_at, 5)
    assert execute(store, run_id) == Outcome.SUCCEEDED
    assert store.get(run_id).output["caught"] == "TransientToolError"


def test_before_tool_is_called_on_the_calls_thread_before_each_attempt():
    """WorkerConfig.before_tool: where a worker hands its thread's pooled connection back
    (a gate may have read the database), so no run holds one while its tool waits."""
    store, seen = MemoryStore(), []

    def before_tool():
        seen.append(list(TARGET["keys"]))  # what the target had seen by then

    fail_next("quick", TransientToolError("flaky"))
    run_id = launch(store, "quick")
    config = WorkerConfig(owner="w:1", before_tool=before_tool)
    assert execute_run(store, run_id, config, registry=REG, leases=NoLeases()) == Outcome.SUCCEEDED
    key = TARGET["keys"][0]
    assert seen == [[], [key]]  # before the first attempt, and before the second
