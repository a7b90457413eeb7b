"""Budgets, the ledger and approvals through the pages, the CLI and the services: who
may do what (a refusal changes nothing), bad input (never a 500), the quotas' gate."""

import csv
import io
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import tests.budgets.metered_agents  # noqa: F401  (registers "metered")
from runs import services
from runs.budgets import prices
from runs.budgets.models import Approval, Budget, BudgetChange, ModelPrice
from runs.models import AuditEntry, Run
from tests.budgets.metered_agents import CALLS
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)
CALL_COST = (1000 * 2.5 + 500 * 10.0) / 1_000_000  # the scripted model's default price


@pytest.fixture(autouse=True)
def _fresh():
    CALLS.clear()
    prices.forget()


def launch(users, owner="alice", budget=None, **inputs):
    run = services.run_launch(user=users[owner], agent="metered", inputs=inputs, budget=budget)
    return drive(run.pk)


# --- the ledger -------------------------------------------------------------------------
def test_costs_come_from_the_price_table_and_an_admin_edit_applies_to_later_calls(users):
    run = launch(users, calls=2)
    assert run.status == "succeeded"
    assert run.usage == {"cost": pytest.approx(2 * CALL_COST), "prompt_tokens": 2000,
                         "completion_tokens": 1000, "calls": 2}
    ModelPrice.objects.create(model="scripted", prompt_per_million=1, completion_per_million=1)
    prices.forget()
    later = launch(users, calls=1)
    assert later.usage["cost"] == pytest.approx(1500 / 1_000_000)
    assert Run.objects.get(pk=run.pk).usage["cost"] == pytest.approx(2 * CALL_COST)  # as logged


def test_the_run_page_list_and_costs_page_show_the_ledger(users, client_for):
    run = launch(users, calls=2)
    alice = client_for("alice")
    page = alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-cost" class="mono">$0.0150<' in page
    assert 'id="run-tokens" class="mono" title="prompt 2000 + completion 1000">3,000<' in page
    assert "$0.0150" in alice.get("/").content.decode()
    costs = alice.get("/costs/?group=agent").content.decode()
    assert "metered" in costs and "$0.0150" in costs
    assert alice.get("/costs/?group=nonsense").status_code == 200  # bad group: the default


@pytest.mark.parametrize("group", ["run", "user", "agent", "day"])
def test_the_csv_export_sums_to_the_ledger(users, client_for, group):
    for _ in range(2):
        launch(users, calls=2)
    launch(users, owner="bob", calls=1)
    response = client_for("charlie").get(f"/costs.csv?group={group}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert sum(float(row["cost"]) for row in rows) == pytest.approx(5 * CALL_COST)
    assert sum(int(row["calls"]) for row in rows) == 5
    mine = list(csv.DictReader(io.StringIO(client_for("bob").get(
        f"/costs.csv?group={group}").content.decode())))
    assert sum(int(row["calls"]) for row in mine) == 1  # a user sees their own runs only


# --- a run's budget ------------------------------------------------------------------------
def test_a_budget_from_the_launch_form_and_the_agents_default(users, client_for):
    alice = client_for("alice")
    response = alice.post("/launch/metered/", {"calls": "1", "amount": "0",
                                               "budget-cost": "0.5", "budget-tokens": ""})
    assert response.status_code == 302
    assert Run.objects.get().budget == {"cost": 0.5}
    assert services.run_launch(user=users["alice"], agent="metered", inputs={}).budget == \
        {"cost": 1.0}


@pytest.mark.parametrize("bad", ["-1", "abc", "1e400", "NaN"])
def test_a_bad_launch_budget_is_refused_and_launches_nothing(client_for, bad):
    response = client_for("alice").post("/launch/metered/", {"budget-cost": bad})
    assert response.status_code == 422
    assert Run.objects.count() == 0


def test_the_owner_raises_within_their_quota_and_the_run_goes_on(users, client_for):
    run = launch(users, calls=3, budget={"cost": 0.01})
    assert run.status == "needs_attention"
    assert run.attention["message"] == "budget reached: $0.0150 of $0.0100"
    assert CALLS == [("think", 0), ("think", 1)]
    alice = client_for("alice")
    too_much = alice.post(f"/runs/{run.pk}/budget/", {"cost": "50", "reason": "more"})
    assert too_much.status_code == 403
    assert Run.objects.get(pk=run.pk).budget == {"cost": 0.01}
    response = alice.post(f"/runs/{run.pk}/budget/", {"cost": "0.05", "reason": "worth it"})
    assert response.status_code == 302
    raised = drive(run.pk)
    assert raised.status == "succeeded" and raised.budget == {"cost": 0.05}
    assert CALLS == [("think", 0), ("think", 1), ("think", 2)]  # none repeated
    audit = AuditEntry.objects.get(run_id=run.pk, action="budget")
    assert (audit.actor, audit.reason, audit.after["before"]) == ("alice", "worth it",
                                                                 {"cost": 0.01})


def test_another_user_cannot_see_or_change_a_runs_budget(users, client_for):
    run = launch(users, calls=3, budget={"cost": 0.01})
    assert client_for("bob").post(f"/runs/{run.pk}/budget/", {"cost": "1"}).status_code == 404
    assert Run.objects.get(pk=run.pk).budget == {"cost": 0.01}
    assert client_for("charlie").post(f"/runs/{run.pk}/budget/",
                                      {"cost": "500", "reason": "ops"}).status_code == 302
    assert Run.objects.get(pk=run.pk).budget == {"cost": 500.0}


@pytest.mark.parametrize("data", [{"cost": "-1"}, {"cost": "x"}, {"tokens": "1.5"},
                                  {"cost": "1", "reason": "r" * 3000}, {"cost": "1e99"}])
def test_bad_budget_input_is_a_400_and_changes_nothing(users, client_for, data):
    run = launch(users, calls=3, budget={"cost": 0.01})
    response = client_for("alice").post(f"/runs/{run.pk}/budget/", data)
    assert response.status_code in (302, 400)  # without htmx: a message and back to the run
    assert Run.objects.get(pk=run.pk).budget == {"cost": 0.01}
    htmx = client_for("alice").post(f"/runs/{run.pk}/budget/", data, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 422 and b"inline-error" in htmx.content


# --- quotas ------------------------------------------------------------------------------
def test_a_users_daily_quota_holds_their_runs_until_an_operator_raises_it(users, client_for):
    Budget.objects.create(scope="user", user=users["alice"], period="day", cost=0.02)
    first = launch(users, calls=2)
    assert first.status == "succeeded"  # $0.015 of $0.02
    second = launch(users, calls=2)
    assert second.status == "needs_attention"
    assert second.attention["message"] == "daily user alice budget reached: $0.0225 of $0.0200"
    assert launch(users, owner="bob", calls=2).status == "succeeded"  # bob's quota is his own
    assert client_for("alice").post("/ops/budgets/", {}).status_code == 403
    response = client_for("charlie").post("/ops/budgets/", {
        "scope": "user", "subject": "alice", "period": "day", "cost": "1", "reason": "month end"})
    assert response.status_code == 302
    assert Run.objects.get(pk=second.pk).status == "queued"
    assert drive(second.pk).status == "succeeded"
    change = BudgetChange.objects.get()
    assert (change.actor, change.before, change.after) == ("charlie", {"cost": 0.02},
                                                           {"cost": 1.0})


def test_an_agents_quota(users):
    Budget.objects.create(scope="agent", agent="metered", period="month", tokens=2000)
    assert launch(users, calls=3).attention["message"] == \
        "monthly agent metered budget reached: 3,000 of 2,000 tokens"


@pytest.mark.parametrize("data", [
    {"scope": "user", "subject": "nobody", "period": "day", "cost": "1", "reason": "x"},
    {"scope": "agent", "subject": "no-agent", "period": "day", "cost": "1", "reason": "x"},
    {"scope": "user", "subject": "alice", "period": "year", "cost": "1", "reason": "x"},
    {"scope": "user", "subject": "alice", "period": "day", "cost": "-5", "reason": "x"},
    {"scope": "user", "subject": "alice", "period": "day", "cost": "1"},
    {"scope": "team", "subject": "alice\x00", "period": "day", "cost": "1", "reason": "x"},
])
def test_bad_quota_input_is_a_400_and_changes_nothing(users, client_for, data):
    assert client_for("charlie").post("/ops/budgets/", data).status_code == 400
    assert Budget.objects.count() == 0 and BudgetChange.objects.count() == 0


# --- approvals -----------------------------------------------------------------------------
def waiting(users, amount, owner="alice"):
    run = launch(users, owner=owner, calls=0, amount=amount)
    assert run.status == "waiting" and run.attention["kind"] == "approval", run.attention
    return run, Approval.objects.get(pk=run.attention["approval"])


def test_a_plain_user_cannot_approve_for_a_policy_naming_operators(users, client_for):
    run, approval = waiting(users, 5000)
    alice = client_for("alice")
    assert approval.pk not in alice.get("/approvals/").content.decode()
    assert alice.post(f"/approvals/{approval.pk}/approve/").status_code == 403
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    assert Run.objects.get(pk=run.pk).status == "waiting"
    assert client_for("bob").post(f"/approvals/{approval.pk}/approve/").status_code == 404
    charlie = client_for("charlie")
    assert approval.pk in charlie.get("/approvals/").content.decode()
    assert charlie.post(f"/approvals/{approval.pk}/approve/", {"reason": "ok"}).status_code == 302
    assert drive(run.pk).output == {"paid": 5000, "to": "shop"}
    assert AuditEntry.objects.filter(run_id=run.pk, action="approve", actor="charlie").exists()


def test_the_owner_denies_and_the_agent_handles_it(users, client_for):
    run, approval = waiting(users, 500)
    alice = client_for("alice")
    assert client_for("charlie").post(f"/approvals/{approval.pk}/deny/").status_code == 403
    assert alice.post(f"/approvals/{approval.pk}/deny/", {"reason": "no"}).status_code == 302
    assert drive(run.pk).output == {"denied": "tests.metered.pay was denied by alice"}
    again = alice.post(f"/approvals/{approval.pk}/approve/", HTTP_HX_REQUEST="true")
    assert again.status_code == 409  # answered already: nothing changes
    assert Approval.objects.get(pk=approval.pk).status == "denied"
    assert CALLS == []


@pytest.mark.parametrize("path", ["/approvals/nope/approve/", "/approvals/%00/deny/",
                                  "/approvals/" + "x" * 5000 + "/approve/"])
def test_an_unknown_approval_is_a_404_or_400(client_for, users, path):
    assert client_for("alice").post(path).status_code in (400, 404)


def test_the_inbox_lists_what_the_user_may_answer(users, client_for):
    _, owners = waiting(users, 500)
    _, operators = waiting(users, 5000, owner="bob")
    alice = client_for("alice").get("/approvals/rows/").content.decode()
    assert owners.pk in alice and operators.pk not in alice
    charlie = client_for("charlie").get("/approvals/rows/").content.decode()
    assert operators.pk in charlie and owners.pk not in charlie
    assert '&quot;amount&quot;: 5000' in charlie


def cli(*args):
    out = StringIO()
    call_command("runs", *args, stdout=out)
    return out.getvalue()


def test_approve_deny_and_budget_from_the_cli(users):
    run, approval = waiting(users, 5000)
    with pytest.raises(CommandError, match="for operators to answer"):
        cli("approve", run.pk, "--user", "alice", "--reason", "mine")
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    assert "approved by charlie" in cli("approve", run.pk, "--user", "charlie", "--reason", "ok")
    assert drive(run.pk).status == "succeeded"
    with pytest.raises(CommandError, match="no pending approval"):
        cli("deny", run.pk, "--reason", "late")
    held = launch(users, calls=3, budget={"cost": 0.01})
    cli("budget", held.pk, "--cost", "0.5", "--reason", "shell")
    assert drive(held.pk).status == "succeeded"
    with pytest.raises(CommandError):
        cli("budget", held.pk, "--cost", "-2", "--reason", "bad")
