"""A run waiting to retry a call, as operators and users see it, and the operator's
"retry now" and "give up": audited, operators only, CSRF-checked; a refusal changes nothing."""

import re

import pytest
from django.test import Client

from runs.durable import Outcome, ToolFailedError, TransientToolError, agent, tool
from runs.models import AuditEntry, Effect, Run
from tests.operator.conftest import drive, launch

pytestmark = pytest.mark.django_db

OUTAGE = {"failures": 0, "calls": 0}


@tool(idempotent=True, name="tests.retry_actions.fetch_page")
def fetch_page(url: str, *, idempotency_key: str) -> dict:
    OUTAGE["calls"] += 1
    if OUTAGE["failures"]:
        OUTAGE["failures"] -= 1
        raise TransientToolError("HTTP 503 Service Unavailable from the site", retry_after=600)
    return {"url": url}


@agent("retry-actions-page")
def fetch_one(ctx, inputs):
    try:
        return {"page": ctx.call(fetch_page, "p/1")}
    except ToolFailedError as exc:
        return {"failed": exc.error_type, "permanent": exc.permanent}


@pytest.fixture
def retrying_run(users):
    OUTAGE.update(failures=1, calls=0)
    run = launch(users["alice"], "retry-actions-page")
    assert drive(run.pk) == Outcome.WAITING
    run.refresh_from_db()
    assert run.lease_owner is None and run.attention["kind"] == "retry"
    return run


def act(client, run, action, reason="the site is back"):
    return client.post(f"/ops/runs/{run.pk}/act/", {"action": action, "reason": reason})


def text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", response.content.decode()))


RETRYING = re.compile(r"retrying fetch_page in (\d+) s, attempt 2: HTTP 503 Service Unavailable")


def test_the_run_page_the_dashboard_and_the_users_page_show_the_retry(ops, client, users,
                                                                      retrying_run):
    run_page = ops.get(f"/ops/runs/{retrying_run.pk}/")
    seconds = int(RETRYING.search(text(run_page)).group(1))
    assert 590 <= seconds <= 600
    assert b'value="retry_now"' in run_page.content and b'value="give_up"' in run_page.content
    assert RETRYING.search(text(ops.get("/ops/")))
    assert b'value="retry_now"' in ops.get("/ops/").content  # the bulk action
    client.force_login(users["alice"])
    own_page = client.get(f"/runs/{retrying_run.pk}/")
    assert RETRYING.search(text(own_page))
    assert b"retry now / give up" not in own_page.content  # not an operator


def test_retry_now_starts_the_next_attempt_and_is_audited(ops, retrying_run):
    assert act(ops, retrying_run, "retry_now").status_code == 302
    run = Run.objects.get(pk=retrying_run.pk)
    assert run.status == "queued" and run.wake_at is None
    entry = AuditEntry.objects.get(run=run)
    assert (entry.actor, entry.action, entry.reason) == ("charlie", "retry_now",
                                                         "the site is back")
    assert drive(run.pk) == Outcome.SUCCEEDED
    run.refresh_from_db()
    assert run.output == {"page": {"url": "p/1"}}
    effect = Effect.objects.get(run=run, tool="tests.retry_actions.fetch_page")
    assert (effect.status, effect.attempts) == ("done", 2)
    assert OUTAGE["calls"] == 2


def test_give_up_fails_the_call_as_a_tool_error_the_agent_sees(ops, retrying_run):
    assert act(ops, retrying_run, "give_up", "the site is gone for good").status_code == 302
    assert AuditEntry.objects.get(run=retrying_run).action == "give_up"
    assert drive(retrying_run.pk) == Outcome.SUCCEEDED
    run = Run.objects.get(pk=retrying_run.pk)
    assert run.output == {"failed": "RetryGivenUp", "permanent": False}
    assert OUTAGE["calls"] == 1  # giving up calls nothing


def test_a_run_that_is_not_retrying_refuses_both_and_nothing_changes(ops, users):
    run = launch(users["alice"], steps=2)
    before = (Run.objects.get(pk=run.pk).event_seq, AuditEntry.objects.count())
    for action in ("retry_now", "give_up"):
        response = ops.post(f"/ops/runs/{run.pk}/act/", {"action": action, "reason": "x"},
                            follow=True)
        assert response.status_code == 200
        assert any("not waiting to retry" in str(m) for m in response.context["messages"])
    assert (Run.objects.get(pk=run.pk).event_seq, AuditEntry.objects.count()) == before


def test_a_plain_user_and_a_post_without_csrf_token_change_nothing(client, users, retrying_run):
    client.force_login(users["alice"])  # her own run: owning it grants nothing here
    assert act(client, retrying_run, "retry_now").status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(users["charlie"])
    assert act(strict, retrying_run, "retry_now").status_code == 403
    run = Run.objects.get(pk=retrying_run.pk)
    assert run.status == "waiting" and run.wake_at == retrying_run.wake_at
    assert not AuditEntry.objects.exists()


def test_bulk_retry_now_wakes_every_selected_run(ops, users, retrying_run):
    response = ops.post("/ops/runs/bulk/", {"action": "retry_now", "reason": "outage over",
                                            "run": [retrying_run.pk]}, follow=True)
    assert any("1 of 1" in str(m) for m in response.context["messages"])
    assert Run.objects.get(pk=retrying_run.pk).status == "queued"


def test_the_cli_retries_now_and_refuses_what_is_not_retrying(users, retrying_run):
    from django.core.management import CommandError, call_command

    call_command("runs", "retry-now", retrying_run.pk, "--reason", "outage over",
                 "--user", "charlie")
    assert Run.objects.get(pk=retrying_run.pk).status == "queued"
    assert AuditEntry.objects.get(run=retrying_run).action == "retry_now"
    with pytest.raises(CommandError, match="not waiting to retry"):
        call_command("runs", "give-up", retrying_run.pk, "--reason", "too late")
