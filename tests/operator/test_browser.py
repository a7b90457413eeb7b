"""One operator flow in a real browser against Daphne and real workers: pause, resume
(also from elsewhere, seen live), roll back with its preview, edit the state, and
resolve an in-doubt effect. The run's events and audit entries match the clicks."""

import json

import pytest

from runs import services
from runs.models import AuditEntry, Effect, Run, RunEvent
from tests.operator.conftest import wait_quiet, wait_shown
from tests.support.processes import wait_until
from tests.web.conftest import screenshot

pytestmark = [pytest.mark.services, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
AGENTS = "tests.workload_agents,tests.operator.agents"


def click_action(page, action, reason):
    """Act from the controls as drawn (wait_shown first): the form posts, and the page
    the action redirects to is loaded."""
    page.fill('#action-form input[name="reason"]', reason)
    with page.expect_navigation():
        page.click(f'#action-form button[value="{action}"]')


def test_operator_flow_in_a_browser(operator_page, server, start_cluster, faults_dir, users):
    page = operator_page
    start_cluster(workers=2, AGENTOPS_AGENT_MODULES=AGENTS)
    run = services.run_launch(user=users["alice"], agent="ledger",
                              inputs={"steps": 400, "delay": 0.05, "charge": True})
    url = f"{server.url}/ops/runs/{run.pk}/"
    page.goto(url)
    wait_until(lambda: Run.objects.get(pk=run.pk).step_no >= 3, 20, message="three steps")
    wait_shown(page, run.pk, "running")

    # pause → paused, live; resume → running
    click_action(page, "pause", "browser pause")
    wait_shown(page, run.pk, "paused")
    click_action(page, "resume", "browser resume")
    wait_shown(page, run.pk, "running")

    # an action taken elsewhere shows live on this open page, and the reason the
    # operator was typing meanwhile survives the controls' redraw
    page.fill('#action-form input[name="reason"]', "go on")
    services.run_pause(run_id=run.pk, user=users["charlie"], reason="from the shell")
    wait_shown(page, run.pk, "paused")
    assert page.locator('#audit li:has-text("from the shell")').count() == 1
    assert page.locator('#action-form button[value="resume"]').count() == 1  # redrawn
    assert page.input_value('#action-form input[name="reason"]') == "go on"
    with page.expect_navigation():
        page.click('#action-form button[value="resume"]')
    wait_shown(page, run.pk, "running")

    # rollback with preview
    page.select_option('#rollback-pick select[name="checkpoint"]', "3")
    page.click('#rollback-pick button[type="submit"]')
    page.wait_for_selector("#rollback-preview")
    assert page.locator("#first-effects tbody tr[data-key]").count() >= 2
    assert "write_entry" in page.inner_text("#undone-by-tool")
    assert "charge" in page.inner_text("#undone-by-tool")
    assert page.is_checked('#rollback-then input[value="resume"]')  # it was running
    page.fill('#rollback-confirm input[name="reason"]', "browser rollback")
    page.click('#rollback-confirm button[type="submit"]')
    page.wait_for_url(url)
    wait_until(lambda: Effect.objects.filter(run_id=run.pk, branch=2).count() >= 2, 20,
               message="work on the new branch")
    # Drawn running again on its new branch: the controls clicked next are not redrawn
    # under the click (the run was queued, then claimed: each redraws them).
    wait_shown(page, run.pk, "running")
    assert page.inner_text("#run-branch") == "2"

    # edit the state: pause, edit, resume, and it finishes with the edited state
    click_action(page, "pause", "before the edit")
    wait_shown(page, run.pk, "paused")
    page.click("#edit-state-link")
    page.wait_for_selector("#edit-state-form")
    page.fill("#id_path", "/i")
    page.fill("#id_value", "{ not json")
    page.fill('#edit-state-form input[name="reason"]', "browser edit")
    page.click("#edit-preview-button")
    page.wait_for_selector('#edit-state-form .field-error:has-text("Not valid JSON")')
    page.click("#json-patch summary")
    page.fill("#id_json_patch", json.dumps([{"op": "replace", "path": "/i", "value": 398},
                                            {"op": "replace", "path": "/total", "value": -1}]))
    page.fill("#id_value", "")
    page.fill('#edit-state-form input[name="reason"]', "browser edit")
    page.click("#edit-preview-button")
    page.wait_for_selector("#edit-preview")
    page.click("#edit-confirm")
    page.wait_for_url(url)
    assert page.inner_text("#run-branch") == "3"
    click_action(page, "resume", "finish it")
    wait_shown(page, run.pk, "succeeded")
    finished = Run.objects.get(pk=run.pk)
    assert finished.output == {"entries": 400, "total": -1 + 398 + 399}
    expected = [("pause", "browser pause"), ("resume", "browser resume"),
                ("pause", "from the shell"), ("resume", "go on"),
                ("rollback", "browser rollback"), ("pause", "before the edit"),
                ("edit_state", "browser edit"), ("resume", "finish it")]
    assert [(e.action, e.reason) for e in
            AuditEntry.objects.filter(run=run).order_by("created_at", "id")] == expected
    assert [(e.data["action"], e.data["reason"]) for e in
            RunEvent.objects.filter(run=run, kind="audit").order_by("seq")] == expected
    assert page.locator("#audit li").count() == len(expected)

    # resolve an in-doubt effect: a worker is killed after a charge, before its log
    (faults_dir / "after_effect_before_log").write_text("kill@charger")
    doubtful = services.run_launch(user=users["bob"], agent="charger", inputs={"steps": 2})
    wait_until(lambda: Run.objects.get(pk=doubtful.pk).status == "needs_attention", 30,
               message="in doubt")
    page.goto(f"{server.url}/ops/attention/")
    wait_quiet(page)
    assert page.locator(f'section[data-run="{doubtful.pk}"] .in-doubt').count() == 1
    # followed, not clicked: any run's change (the workers' too) redraws the list
    page.goto(server.url + page.get_attribute(f'section[data-run="{doubtful.pk}"] header a',
                                              "href"))
    page.wait_for_selector("#resolve-form")
    page.check('#resolve-form input[value="done"]')
    page.fill("#resolve-form textarea", '{"charged": 0, "unit": "unit-0"}')
    page.fill('#resolve-form input[name="reason"]', "seen in the bank")
    with page.expect_navigation():
        page.click('#resolve-form button[type="submit"]')
    wait_shown(page, doubtful.pk, "succeeded")
    key = Run.objects.get(pk=doubtful.pk).attention  # cleared once resolved
    assert key is None
    resolved = Effect.objects.get(run_id=doubtful.pk, step_no=1, seq=0)
    assert (resolved.resolution, resolved.result) == ("done", {"charged": 0, "unit": "unit-0"})
    assert [(e.action, e.reason) for e in AuditEntry.objects.filter(run=doubtful)] == [
        ("resolve", "seen in the bank")]

    # the Workers page: each tree's processes by role; the worker killed above ended
    # its tree, which stopped working (its processes dead, or unknown once its last
    # heartbeat is stale), and the fresh tree the restart loop started works
    page.goto(f"{server.url}/ops/workers/")
    working = '.cluster[data-working="yes"]'
    page.wait_for_selector('.cluster[data-working="no"] tr[data-role="worker"]')
    page.wait_for_selector(f'{working} tr[data-role="worker"][data-alive="yes"]')
    assert page.locator(f'{working} tr[data-role="worker"][data-alive="yes"]').count() == 2
    screenshot(page, "workers-page")


def test_a_redraw_of_the_controls_keeps_the_reason_being_typed_from_the_first_moment(
        operator_page, server, users):
    """The controls are redrawn when the run's course changes (here: asked for with a
    stale token, as after a status change). The half-typed reason is back in the new
    field in the same task as the swap: a click can never meet it empty."""
    page = operator_page
    run = services.run_launch(user=users["alice"], agent="ask", inputs={"question": "Who?"})
    page.goto(f"{server.url}/ops/runs/{run.pk}/")
    page.fill('#action-form input[name="reason"]', "half a reas")
    seen = page.evaluate("""async () => {
        const poller = document.getElementById("run-poller");
        const old = document.querySelector('#action-form input[name="reason"]');
        const seen = [];
        // registered after the page's own listeners: it runs after them, before settling
        document.body.addEventListener("htmx:afterSwap", () => {
            const field = document.querySelector('#action-form input[name="reason"]');
            seen.push([field !== old, field.value]);
        });
        await htmx.ajax("GET", poller.dataset.opsUrl.replace(/token=[^&]*/, "token="),
                        {source: poller, target: poller, swap: "outerHTML"});
        return seen;
    }""")
    assert seen and seen[0] == [True, "half a reas"]
    assert page.input_value('#action-form input[name="reason"]') == "half a reas"
