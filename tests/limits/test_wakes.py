"""Held runs woken through the database (runs/limits/wakes.py): the worker's own gates in
this process, on the database's store of the limits (Redis when REDIS_URL is set)."""

import math
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs import services
from runs.budgets.gates import worker_gates
from runs.durable import Outcome, WorkerConfig, agent, execute_run, tool
from runs.durable.policies.limits import Wake
from runs.limits import config
from runs.limits.stores import RedisLimitStore, limit_store
from runs.limits.wakes import wake_held_runs
from runs.models import Run

pytestmark = pytest.mark.django_db

DURING_CALL: list = []


@tool(idempotent=True, name="tests.limits.wakes.lookup", limit="wakes-api")
def lookup(term: str, *, idempotency_key: str) -> str:
    while DURING_CALL:  # what another worker does while this call is in flight
        DURING_CALL.pop(0)()
    return term.upper()


@agent("limits-wakes")
def one_lookup(ctx, inputs):
    return {"found": ctx.call(lookup, inputs["term"])}


@pytest.fixture
def one_at_a_time(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "LIMITS": {"wakes-api": {"concurrency": 1}}}
    config.forget()
    store = limit_store()
    if isinstance(store, RedisLimitStore):
        store.reset("wakes-api")
    yield
    config.forget()
    if isinstance(store, RedisLimitStore):
        store.reset("wakes-api")


def worker() -> WorkerConfig:
    return WorkerConfig(owner="testhost:4242:tok", lease_seconds=1000, slice_seconds=math.inf,
                        gates=worker_gates())


def test_a_run_held_for_a_slot_is_woken_when_the_slot_is_given_back(one_at_a_time, users):
    first = services.run_launch(user=users["alice"], agent="limits-wakes", inputs={"term": "a"})
    second = services.run_launch(user=users["bob"], agent="limits-wakes", inputs={"term": "b"})
    seen = []
    DURING_CALL.append(lambda: seen.append(
        (execute_run(services.store(), second.pk, worker()),
         Run.objects.get(pk=second.pk).wake_at)))
    assert execute_run(services.store(), first.pk, worker()) == Outcome.SUCCEEDED
    [(outcome, told)] = seen
    assert outcome == Outcome.WAITING
    woken = Run.objects.get(pk=second.pk)
    assert woken.wake_at <= timezone.now() < told  # due now, not when it was told
    assert second.pk in services.store().due_runs(time.time(), 10)
    assert execute_run(services.store(), second.pk, worker()) == Outcome.SUCCEEDED
    assert Run.objects.get(pk=second.pk).output == {"found": "B"}


def held(users, limit="wakes-api", status="waiting", kind="limit", in_seconds=600.0):
    run = services.run_launch(user=users["alice"], agent="limits-wakes", inputs={"term": "x"})
    wake_at = timezone.now() + timedelta(seconds=in_seconds)
    Run.objects.filter(pk=run.pk).update(status=status, wake_at=wake_at,
                                         attention={"kind": kind, "limit": limit})
    return run.pk, wake_at


def test_only_a_run_still_held_by_that_limit_has_its_timer_moved_and_only_earlier(users):
    target, _ = held(users)
    other_limit, other_wake = held(users, limit="llm")
    retrying, retry_wake = held(users, kind="retry")
    running, running_wake = held(users, status="running")
    sooner, sooner_wake = held(users, in_seconds=1.0)
    at = time.time() + 10
    wake_held_runs("wakes-api", tuple(Wake(run_id, at)
                                      for run_id in (target, other_limit, retrying, running,
                                                     sooner, "no-such-run")))
    wake_at = dict(Run.objects.values_list("pk", "wake_at"))
    assert wake_at[target].timestamp() == pytest.approx(at)
    assert wake_at[other_limit] == other_wake and wake_at[retrying] == retry_wake
    assert wake_at[running] == running_wake and wake_at[sooner] == sooner_wake
