"""Chromium against a real Daphne and a real worker tree: the built-in agents under budgets
and approvals, as their users and operators see them.

  * alice approves her assistant's note from the inbox, and the run goes on;
  * charlie (an operator) raises the budget of alice's assistant from its run page;
  * alice cannot approve her migration's cut-over, which its rule leaves to operators
    (403, nothing changed), and charlie can.
"""

from __future__ import annotations

import pytest

from runs import services
from runs.budgets.models import Approval
from runs.models import AuditEntry, Run
from sandbox.models import Notification, Record
from tests.agents.helpers import cluster_env
from tests.support.processes import wait_until
from tests.web.conftest import log_in, new_context, screenshot, wait_caught_up

pytestmark = [pytest.mark.browser, pytest.mark.services]


def assistant_inputs(server, **extra) -> dict:
    sandbox = f"{server.url}/sandbox"
    return {"question": "Which pages mention a boat or the city?", "follow_ups": [],
            "base_url": f"{sandbox}/llm/v1", "site_url": f"{sandbox}/site",
            "target_url": f"{sandbox}/api", "site_pages": 1000, "latency_ms": 0,
            "search_scan": 20, "chat": False, **extra}


# The assistant's own work decides how long these take: a worker tree started by the test, then
# tens of model calls and site pages through the sandbox before the run asks or ends, on a
# machine at a load of 10-25. The deadline is that work's, not a page's.
RUN_WORK_SECONDS = 90


def run_of(run_id: str) -> Run:
    return Run.objects.get(pk=run_id)


def held(run_id: str, status: str, kind: str, timeout: float = RUN_WORK_SECONDS) -> Run:
    def there():
        run = run_of(run_id)
        assert run.status not in ("failed", "cancelled", "succeeded"), (run.status, run.error)
        return run if run.status == status and (run.attention or {}).get("kind") == kind else None
    return wait_until(there, timeout, interval=0.1, message=f"the run to be {status} ({kind})")


def page_as(browser, server, username: str):
    """A page of a browser context of this user's own (a login per context)."""
    context = new_context(browser, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    log_in(page, server.url, username, f"{username}-pass-1")
    return page


def finished(run_id: str, timeout: float = RUN_WORK_SECONDS) -> Run:
    run = wait_until(lambda: (lambda r: r if r.status in ("succeeded", "failed", "cancelled")
                              else None)(run_of(run_id)), timeout, interval=0.1,
                     message="the run to end")
    assert run.status == "succeeded", (run.status, run.error, run.attention)
    return run


def hold_the_inbox(page) -> None:
    """Stop the inbox's poll and wait for a poll out to be drawn: the list (hx-trigger
    "every 2s", innerHTML) is then not redrawn under the clicks that follow. The inbox has
    no script of the project's, hence no signal of its own (static/js/live.js): htmx's
    request class on #inbox says whether a poll is out."""
    page.evaluate("""() => { const inbox = document.getElementById('inbox');
        inbox.addEventListener('htmx:beforeRequest', (event) => {
          if (event.detail.elt === inbox) event.preventDefault(); }); }""")
    page.wait_for_selector("#inbox:not(.htmx-request)", state="attached")


def test_a_user_approves_a_note_from_the_inbox_and_the_run_goes_on(users, server, start_cluster,
                                                                    browser_context):
    start_cluster(workers=1, **cluster_env(server))
    run = services.run_launch(user=users["alice"], agent="assistant",
                              inputs=assistant_inputs(server, approve_notes=True))
    waiting = held(run.pk, "waiting", "approval")
    approval = Approval.objects.get(pk=waiting.attention["approval"])
    assert Record.objects.filter(unit__startswith=f"{run.pk}-note-").count() == 0

    page = browser_context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, server.url, "alice", "alice-pass-1")
    page.goto(f"{server.url}/approvals/")
    hold_the_inbox(page)
    text = page.inner_text(f"#approval-{approval.pk}")
    assert "builtin_agents.tools.research.write_note" in text
    assert f'"title": "{approval.arguments["title"]}"' in text  # the exact arguments
    screenshot(page, "approvals-inbox")
    page.click(f"#approval-{approval.pk} button:has-text('Approve')")
    page.wait_for_selector("#inbox-empty")

    done = finished(run.pk)
    notes = Record.objects.filter(unit__startswith=f"{run.pk}-note-")
    assert notes.count() == 1  # approved once, written once
    assert f"note with id {notes.get().pk}" in done.output["answer"]
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == ("approved", "alice")
    assert approval.used_by.startswith(f"{run.pk}:")
    assert Approval.objects.filter(run_id=run.pk).count() == 1  # not asked twice
    assert AuditEntry.objects.filter(run_id=run.pk, action="approve", actor="alice").exists()
    assert errors == []


def test_an_operator_raises_a_budget_and_the_run_goes_on(users, server, start_cluster, browser):
    start_cluster(workers=1, **cluster_env(server))
    run = services.run_launch(user=users["alice"], agent="assistant",
                              inputs=assistant_inputs(server), budget={"cost": 0.0001})
    stopped = held(run.pk, "needs_attention", "budget")
    calls_then = stopped.usage["calls"]
    message = stopped.attention["message"]
    assert message.startswith("budget reached: $0.0") and message.endswith(" of $0.0001")

    # the owner may not raise it past her quota: told why, nothing changed
    page = page_as(browser, server, "alice")
    page.goto(f"{server.url}/runs/{run.pk}/")
    page.fill("#budget-form input[name=cost]", "500")
    page.click("#budget-form button[type=submit]")
    page.wait_for_selector("#budget-messages .inline-error")
    assert "quota" in page.inner_text("#budget-messages")
    assert run_of(run.pk).budget == {"cost": 0.0001}
    page.close()

    page = page_as(browser, server, "charlie")
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/runs/{run.pk}/")
    assert page.inner_text("#budget-reached").startswith(message)
    screenshot(page, "run-page-budget")
    page.fill("#budget-form input[name=cost]", "1")
    page.fill("#budget-form input[name=reason]", "the answer is worth a dollar")
    page.click("#budget-form button[type=submit]")
    done = finished(run.pk)
    assert done.usage["calls"] > calls_then and done.budget == {"cost": 1.0}
    wait_caught_up(page, run.pk)  # the run's end applied, its budget panel redrawn
    assert page.locator("#budget-reached").count() == 0
    audit = AuditEntry.objects.get(run_id=run.pk, action="budget")
    assert (audit.actor, audit.reason) == ("charlie", "the answer is worth a dollar")
    assert errors == []


def test_a_plain_user_cannot_approve_what_a_rule_leaves_to_operators(users, server,
                                                                     start_cluster, browser):
    start_cluster(workers=1, **cluster_env(server))
    sandbox = f"{server.url}/sandbox"
    run = services.run_launch(user=users["alice"], agent="migrate", inputs={
        "source_url": f"{sandbox}/dataset/rows", "target_url": f"{sandbox}/api", "rows": 60,
        "batch_size": 20, "approve_cutover": True})
    waiting = held(run.pk, "waiting", "approval")
    approval = Approval.objects.get(pk=waiting.attention["approval"])
    assert approval.approvers == "operators"

    page = page_as(browser, server, "alice")
    page.goto(f"{server.url}/approvals/")
    page.wait_for_selector("#inbox-empty")  # not hers to answer
    page.goto(f"{server.url}/runs/{run.pk}/")
    assert "Only operators can answer" in page.inner_text("#approval-waiting")
    token = page.eval_on_selector("input[name=csrfmiddlewaretoken]", "e => e.value")
    response = page.request.post(f"{server.url}/approvals/{approval.pk}/approve/",
                                 form={"csrfmiddlewaretoken": token, "reason": "mine"},
                                 headers={"Referer": page.url})
    assert response.status == 403
    approval.refresh_from_db()
    assert approval.status == "pending" and run_of(run.pk).status == "waiting"
    assert not AuditEntry.objects.filter(run_id=run.pk, action="approve").exists()
    assert Notification.objects.filter(unit=f"{run.pk}-cutover").count() == 0
    page.close()

    page = page_as(browser, server, "charlie")
    page.goto(f"{server.url}/runs/{run.pk}/")
    page.fill("#approval-waiting input[name=reason]", "numbers checked")
    page.click("#approval-waiting button:has-text('Approve')")
    done = finished(run.pk)
    assert done.output["cut_over"] is True
    assert Notification.objects.filter(unit=f"{run.pk}-cutover").count() == 1
