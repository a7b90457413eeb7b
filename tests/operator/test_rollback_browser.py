"""A rollback of a paused run with thousands of calls, in a real browser against Daphne:
the preview stays about a screen tall with Confirm on it, says how many calls of each
tool it undoes, and the run is still paused afterwards (the form's default for a
paused run)."""

import pytest

from runs.models import AuditEntry, Effect, Run
from tests.operator.conftest import launch
from tests.support.long_history import give_history
from tests.web.conftest import screenshot

pytestmark = [pytest.mark.services, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CALLS = 4000


def test_rolling_back_thousands_of_calls_keeps_the_page_short_and_the_run_paused(
        operator_page, server, users):
    page = operator_page
    run = give_history(launch(users["alice"], steps=1), CALLS, status="paused")
    page.goto(f"{server.url}/ops/runs/{run.pk}/rollback/?checkpoint=1")
    page.wait_for_selector("#rollback-preview")

    undone = CALLS - 2  # all but step 1's two calls
    assert page.inner_text("#undone-count") == str(undone)
    charge = page.locator('#undone-by-tool tr[data-tool="ledger.charge"] td')
    assert [charge.nth(i).inner_text() for i in range(4)] == [
        "ledger.charge", str(undone // 2), str(undone // 2), str(undone // 2)]
    assert page.is_checked('#rollback-then input[value="pause"]')
    assert not page.is_checked('#rollback-then input[value="resume"]')

    viewport = page.viewport_size["height"]
    confirm = page.locator('#rollback-confirm button[type="submit"]').bounding_box()
    assert confirm["y"] + confirm["height"] <= viewport  # on screen, without scrolling
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height <= 2 * viewport, f"the preview is {height} px tall"
    screenshot(page, "ops-rollback-preview")

    # the full list, a page at a time
    page.click("#all-effects summary")
    page.click('#all-effects a[rel="next"]')
    page.wait_for_url("**&page=2")
    page.wait_for_selector("#all-effects[open] #effects-page")
    assert "page 2 of" in page.inner_text("#all-effects nav")
    assert f"{run.pk}:1:15:0" in page.inner_text("#effects-page")

    page.fill('#rollback-confirm input[name="reason"]', "bad batch")
    page.click('#rollback-confirm button[type="submit"]')
    page.wait_for_url(f"{server.url}/ops/runs/{run.pk}/")
    after = Run.objects.get(pk=run.pk)
    assert (after.status, after.branch, after.step_no) == ("paused", 2, 1)
    assert Effect.objects.filter(run_id=run.pk, superseded=True).count() == undone
    audit = AuditEntry.objects.get(run=run, action="rollback")
    assert (audit.reason, audit.after["then"]) == ("bad batch", "pause")
