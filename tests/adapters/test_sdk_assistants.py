"""The built-in SDK assistants (builtin_agents/sdk_agents.py) on a real worker, launched
with a budget of $0.0001 as a user does: held "budget reached" before a model request
once the budget is spent, their page showing the cost, tokens and model calls of the
requests made; raised, they finish, each request counted once."""

import pytest
from django.test import Client

from runs import services
from runs.budgets.services import set_run_budget
from runs.durable.policies.budget import money
from runs.models import Effect, Run
from tests.support.processes import wait_until
from tests.support.sdks import skip_module_without_sdks

skip_module_without_sdks()
pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def status(run_id: str) -> str:
    return Run.objects.get(pk=run_id).status


@pytest.mark.timeout(300)
@pytest.mark.parametrize("agent", ["pydantic_assistant", "openai_assistant"])
def test_a_builtin_sdk_assistant_is_held_by_its_budget_and_its_cost_shows(agent, users, server,
                                                                        start_cluster):
    sandbox = f"{server.url}/sandbox"
    start_cluster(workers=1, AGENTOPS_SANDBOX_URL=sandbox)
    inputs = {"prompt": "Which pages mention a boat or the city?", "follow_ups": [],
              "site_url": f"{sandbox}/site", "target_url": f"{sandbox}/api",
              "site_pages": 1000, "latency_ms": 0, "search_scan": 20}
    run = services.run_launch(user=users["alice"], agent=agent, inputs=inputs,
                              budget={"cost": 0.0001})
    # 60 s: the worker imports the SDK on the run's first step (seconds, more when loaded)
    wait_until(lambda: status(run.pk) in ("needs_attention", "succeeded", "failed"), 60,
               message="held by its budget")
    held = Run.objects.get(pk=run.pk)
    assert held.status == "needs_attention", (held.status, held.usage, held.error)
    assert held.attention["kind"] == "budget"
    assert held.attention["message"] == f"budget reached: {money(held.usage['cost'])} of $0.0001"
    requests = Effect.objects.filter(run_id=run.pk, tool__contains="model_", status="done")
    assert held.usage["calls"] == requests.count() >= 1
    assert held.usage["cost"] == pytest.approx(sum(e.usage["cost"] for e in requests))
    assert held.usage["cost"] >= 0.0001

    alice = Client()
    alice.force_login(users["alice"])
    page = alice.get(f"/runs/{run.pk}/").content.decode()
    assert f'id="run-cost" class="mono">{money(held.usage["cost"])}<' in page
    assert f'id="run-calls" class="mono">{held.usage["calls"]}<' in page

    set_run_budget(run_id=run.pk, user=users["alice"], budget={"cost": 1.0}, reason="go on")
    wait_until(lambda: Run.objects.get(pk=run.pk).is_final, 30, message="finished")
    done = Run.objects.get(pk=run.pk)
    assert done.status == "succeeded", (done.status, done.error)
    requests = Effect.objects.filter(run_id=run.pk, tool__contains="model_", status="done")
    assert done.usage["calls"] == requests.count() > held.usage["calls"]
    assert done.usage["prompt_tokens"] == sum(e.usage["prompt_tokens"] for e in requests)
    assert done.usage["completion_tokens"] == sum(e.usage["completion_tokens"]
                                                  for e in requests)
