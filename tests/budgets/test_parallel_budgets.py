"""A parallel group under the worker's gates as deployed (the run's budget, the quotas,
approvals, limits: runs/budgets/gates.py): at most one call over a run's budget or a
user's quota, the run held with the message, then raised, finished without a call
made twice."""

import pytest

import tests.budgets.quota_agents  # noqa: F401  (registers "budget_fan")
from runs import services
from runs.budgets import services as budget_services
from runs.budgets.models import Budget
from runs.models import Effect, Run
from tests.durable import budget_agents
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)
CALL = budget_agents.PROMPT + budget_agents.COMPLETION
ALL_ONCE = {f"q{n}": 1 for n in range(6)}


@pytest.fixture(autouse=True)
def _fresh():
    budget_agents.reset()


def tokens(run: Run) -> int:
    return run.usage.get("prompt_tokens", 0) + run.usage.get("completion_tokens", 0)


def assert_held_one_call_over_at_most(run: Run, limit: int, message: str) -> None:
    spent = tokens(run)
    assert run.status == "needs_attention"
    assert limit <= spent <= limit + CALL
    assert run.attention["message"] == f"{message}: {spent:,} of {limit:,} tokens"
    assert sum(budget_agents.PROVIDER.made.values()) == run.usage["calls"] == spent // CALL


def assert_finished_each_call_once(run_id: str) -> None:
    run = drive(run_id)
    assert run.status == "succeeded"
    assert budget_agents.PROVIDER.made == ALL_ONCE  # the logged ones were replayed
    assert tokens(run) == 6 * CALL
    assert Effect.objects.filter(run=run, status="done").count() == 6


def test_a_group_under_a_runs_budget(users):
    run = services.run_launch(user=users["alice"], agent="budget_fan", inputs={"calls": 6},
                              budget={"tokens": 2500})
    assert_held_one_call_over_at_most(drive(run.pk), 2500, "budget reached")
    budget_services.set_run_budget(run_id=run.pk, user=users["charlie"],
                                   budget={"tokens": 10_000}, reason="worth it")
    assert_finished_each_call_once(run.pk)


def test_a_group_under_a_users_daily_quota(users):
    Budget.objects.create(scope="user", user=users["alice"], period="day", tokens=2500)
    run = services.run_launch(user=users["alice"], agent="budget_fan", inputs={"calls": 6},
                              budget={})
    assert_held_one_call_over_at_most(drive(run.pk), 2500, "daily user alice budget reached")
    budget_services.set_quota(user=users["charlie"], scope="user", period="day",
                              subject=users["alice"], tokens=100_000, reason="more")
    assert_finished_each_call_once(run.pk)
