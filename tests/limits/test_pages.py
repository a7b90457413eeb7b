"""A run held by a shared limit, driven in this process with the worker's own gates (the
database's store, or Redis when REDIS_URL is set): what its owner and the operators see."""

import math
import re

import pytest
from django.test import Client

from runs import services
from runs.budgets.gates import worker_gates
from runs.durable import Outcome, WorkerConfig, agent, execute_run, tool
from runs.limits import config
from runs.limits.stores import RedisLimitStore, limit_store
from runs.models import Run
from runs.operator.groups import ensure_operators_group

pytestmark = pytest.mark.django_db

CALLS: list[str] = []


@tool(idempotent=True, name="tests.limits.pages.lookup", limit="pages-api")
def lookup(term: str, *, idempotency_key: str) -> str:
    CALLS.append(term)
    return term.upper()


@agent("limits-pages")
def two_lookups(ctx, inputs):
    return {"found": [ctx.call(lookup, "one"), ctx.call(lookup, "two")]}


@pytest.fixture
def held_run(settings, users):
    settings.AGENTOPS = {**settings.AGENTOPS,
                         "LIMITS": {"pages-api": {"requests": 1, "per": 3600}}}
    config.forget()
    store = limit_store()
    if isinstance(store, RedisLimitStore):
        store.reset("pages-api")
    CALLS.clear()
    run = services.run_launch(user=users["alice"], agent="limits-pages", inputs={})
    worker = WorkerConfig(owner="testhost:4242:tok", lease_seconds=1000, slice_seconds=math.inf,
                          gates=worker_gates())
    assert execute_run(services.store(), run.pk, worker) == Outcome.WAITING
    yield Run.objects.get(pk=run.pk)
    config.forget()
    if isinstance(store, RedisLimitStore):
        store.reset("pages-api")


def text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", response.content.decode()))


MESSAGE = "waiting for pages-api: 1 request an hour"


def test_the_owner_and_the_operators_see_why_the_run_waits(held_run, users, client):
    assert CALLS == ["one"]  # the second call was not made
    assert held_run.status == "waiting" and held_run.lease_owner is None
    assert held_run.wake_at is not None
    client.force_login(users["alice"])
    page = client.get(f"/runs/{held_run.pk}/")
    assert MESSAGE in text(page)
    assert b'class="muted limit-wait"' in page.content  # in the panel, not only the log
    assert MESSAGE in text(client.get("/"))  # the list of her runs
    ensure_operators_group()
    ops = Client()
    ops.force_login(users["charlie"])
    assert MESSAGE in text(ops.get("/ops/"))
    assert MESSAGE in text(ops.get(f"/ops/runs/{held_run.pk}/"))


def test_the_admin_lists_limits_and_their_state(held_run, admin_client):
    from runs.limits.models import Limit

    Limit.objects.create(name="llm", requests=60, per_seconds=60)
    page = text(admin_client.get("/admin/limits/limit/"))
    assert "60 requests a minute" in page
    assert admin_client.get("/admin/limits/limitstate/").status_code == 200
