"""An answer to an approval after its deadline is refused and never honoured
(docs/approvals.md, "Deadlines"): the API's 409, the pages' and the CLI's clear refusal,
nothing recorded; the gate treats a request answered after its deadline as expired
whatever its row says, so the fallback applies and the call is not made, in this
process and in a real worker's."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

import tests.budgets.approval_agents  # noqa: F401  (registers deadline_payer, deadline_skipper)
from runs import services
from runs.api import tokens
from runs.budgets import selectors
from runs.budgets import services as approvals
from runs.budgets.models import Approval
from runs.durable.policies import approvals as a
from runs.models import AuditEntry, Effect, Run
from tests.support.processes import wait_until
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)
AGENT_MODULES = "tests.workload_agents,tests.budgets.approval_agents"


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "ledger.txt"
    path.touch()
    return path


def waiting(users, ledger, agent="deadline_payer", amount=500) -> tuple[Run, Approval]:
    run = services.run_launch(user=users["alice"], agent=agent,
                              inputs={"amount": amount, "ledger": str(ledger)})
    run = drive(run.pk)
    assert run.status == "waiting" and run.attention["kind"] == "approval", run.attention
    return run, Approval.objects.get(pk=run.attention["approval"])


def past_deadline(approval: Approval) -> None:
    """The request's deadline passes now, as time would make it pass for every reader: the
    request's row (the pages, the API, the CLI, the database's conditional update and the
    gate read its deadline) and the run's timer, set for it. Waiting for a real deadline
    made what comes before it a race: under load, a page asked for in time was served after
    a two-second deadline (beside other suites, 1 of 4 runs)."""
    moment = timezone.now() - timedelta(seconds=1)
    assert approval.deadline > moment  # still in time until here
    Approval.objects.filter(pk=approval.pk).update(deadline=moment)
    assert Run.objects.filter(pk=approval.run_id, wake_at__isnull=False).update(wake_at=moment)
    approval.refresh_from_db()


def answer_late(approval: Approval, status=a.APPROVED, after=1.5) -> None:
    """A yes (or no) recorded after the deadline, as no service of ours writes one: a
    web process of an older release during a deploy, a row edited by hand."""
    Approval.objects.filter(pk=approval.pk).update(
        status=status, decided_by="alice",
        decided_at=approval.deadline + timedelta(seconds=after))


def api_client(user) -> Client:
    _, secret = tokens.create(user, name="t", scopes=("read", "launch"), days=1, max_days=30)
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def api_post(client, path, body=None):
    return client.post(path, json.dumps(body or {}), content_type="application/json")


def cli(*args) -> str:
    out = StringIO()
    call_command("runs", *args, stdout=out)
    return out.getvalue()


def test_an_answer_after_the_deadline_is_refused_everywhere_and_the_fallback_applies(
        users, client_for, ledger):
    run, approval = waiting(users, ledger)
    alice = client_for("alice")
    assert [row.pk for row in selectors.inbox(users["alice"])] == [approval.pk]
    assert "/approve/" in alice.get(f"/runs/{run.pk}/").content.decode()
    past_deadline(approval)
    assert selectors.inbox(users["alice"]) == []  # no longer answerable: not offered
    page = alice.get(f"/runs/{run.pk}/").content.decode()
    assert "The deadline has passed" in page and "/approve/" not in page

    refused = api_post(api_client(users["alice"]), f"/api/v1/approvals/{approval.pk}/approve",
                       {"reason": "late"})
    assert refused.status_code == 409, refused.content
    assert refused["Content-Type"].startswith("application/json")
    assert "too late" in refused.json()["detail"] and "deny" in refused.json()["detail"]

    page = alice.post(f"/approvals/{approval.pk}/approve/", {"reason": "late"},
                      HTTP_HX_REQUEST="true")
    assert page.status_code == 409 and "too late" in page.content.decode()
    shown = alice.post(f"/approvals/{approval.pk}/deny/", {"reason": "late"}, follow=True)
    assert "too late" in shown.content.decode()

    with pytest.raises(CommandError, match="too late"):
        cli("approve", run.pk, "--user", "alice", "--reason", "late")
    with pytest.raises(CommandError, match="too late"):
        cli("approve", run.pk, "--reason", "late")  # the trusted shell: the same rule

    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.decided_at) == (a.PENDING, "", None)
    assert not AuditEntry.objects.filter(run_id=run.pk, action__in=("approve", "deny")).exists()

    done = drive(run.pk)
    assert done.status == "succeeded"
    assert "not approved in time (fallback: deny)" in done.output["denied"]
    assert ledger.read_text() == ""
    assert Approval.objects.get(pk=approval.pk).status == a.EXPIRED


def test_an_answer_in_time_is_taken_over_the_api(users, ledger):
    run, approval = waiting(users, ledger)
    answered = api_post(api_client(users["alice"]), f"/api/v1/approvals/{approval.pk}/approve",
                        {"reason": "fine"})
    assert answered.status_code == 200, answered.content
    body = answered.json()
    assert body["status"] == "approved" and body["decided_by"] == "alice"
    assert body["fallback"] == "deny" and body["deadline"]
    approval.refresh_from_db()
    assert approval.decided_at < approval.deadline
    assert drive(run.pk).output == {"paid": {"paid": 500}}
    assert ledger.read_text() == "paid 500\n"
    again = api_post(api_client(users["alice"]), f"/api/v1/approvals/{approval.pk}/deny")
    assert again.status_code == 409 and "already answered" in again.json()["detail"]


def test_the_deadline_is_judged_on_the_databases_clock(users, ledger, monkeypatch):
    """A web process whose clock lags (here by an hour) cannot slip a late answer in: the
    conditional update compares the deadline with the database's now()."""
    run, approval = waiting(users, ledger)
    past_deadline(approval)
    lagging = approval.deadline - timedelta(hours=1)
    monkeypatch.setattr(timezone, "now", lambda: lagging)
    with pytest.raises(a.ApprovalExpiredError):
        approvals.decide_approval(approval_id=approval.pk, user=users["alice"], approve=True)
    assert Approval.objects.get(pk=approval.pk).status == a.PENDING


@pytest.mark.parametrize("agent, status, output", [
    ("deadline_payer", a.APPROVED, {"denied": "tests.deadline.pay was not approved in time "
                                              "(fallback: deny)"}),
    ("deadline_skipper", a.APPROVED, {"paid": None}),
    ("deadline_skipper", a.DENIED, {"paid": None}),  # a late no is no answer either
])
def test_the_gate_treats_an_answer_after_the_deadline_as_expired(users, ledger, agent, status,
                                                                 output):
    run, approval = waiting(users, ledger, agent=agent)
    past_deadline(approval)
    answer_late(approval, status)
    done = drive(run.pk)
    assert (done.status, done.output) == ("succeeded", output)
    assert ledger.read_text() == ""
    assert Approval.objects.get(pk=approval.pk).used_by == ""


def test_an_approval_without_the_time_it_was_given_fails_closed(users, ledger):
    run, approval = waiting(users, ledger)
    past_deadline(approval)  # the run's timer is due: the worker takes it up
    Approval.objects.filter(pk=approval.pk).update(status=a.APPROVED, decided_by="alice")
    assert "not approved in time" in drive(run.pk).output["denied"]
    assert ledger.read_text() == ""


def test_the_memory_book_refuses_a_late_answer_too():
    book = a.MemoryApprovalBook()
    late = a.ApprovalRequest(id="q", run_id="r", key="k", digest="d", tool="pay",
                             args_preview="", rule={"fallback": "skip"},
                             deadline=time.time() - 1)
    book.requests[("r", "k", "d")] = late
    with pytest.raises(a.ApprovalExpiredError, match="fallback \\(skip\\)"):
        book.decide("q", approve=True, by="alice")
    assert book.find("r", "k", "d").status == a.PENDING


def test_a_late_approval_is_not_honoured_by_a_real_worker(users, ledger, start_cluster):
    """With no worker running, two requests pass their deadlines: one is approved late
    over the API (409), the other's row says approved after the deadline. A worker then
    resumes both: neither payment is made, both runs take the fallback."""
    refused_run, refused = waiting(users, ledger)
    forced_run, forced = waiting(users, ledger, amount=700)
    past_deadline(refused)
    past_deadline(forced)
    late = api_post(api_client(users["alice"]), f"/api/v1/approvals/{refused.pk}/approve",
                    {"reason": "back from lunch"})
    assert late.status_code == 409, late.content
    answer_late(forced)

    start_cluster(workers=1, AGENTOPS_AGENT_MODULES=AGENT_MODULES)
    ids = (refused_run.pk, forced_run.pk)
    wait_until(lambda: set(Run.objects.filter(pk__in=ids).values_list("status", flat=True))
               == {"succeeded"}, timeout=30, message="both runs resumed by the worker")
    for run in Run.objects.filter(pk__in=ids):
        assert "not approved in time (fallback: deny)" in run.output["denied"], run.output
        call = Effect.objects.get(run_id=run.pk, tool="tests.deadline.pay")
        assert (call.status, call.error["type"]) == ("error", "ApprovalDeniedError")
    assert ledger.read_text() == ""  # no payment, in any process
