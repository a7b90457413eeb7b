"""The operator pages in Chromium: Cancel asks before it acts (dismissed, nothing
happens; accepted, the cancel is recorded), so does a bulk cancel, and the dashboard's
filters line up."""

import pytest

from runs.models import AuditEntry, Run
from tests.operator.conftest import launch, wait_quiet
from tests.web.conftest import screenshot

pytestmark = [pytest.mark.services, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_cancel_asks_first_and_the_filters_line_up(operator_page, server, users):
    page = operator_page
    run = launch(users["alice"], steps=3)  # queued: a cancel takes effect at once
    page.goto(f"{server.url}/ops/runs/{run.pk}/")
    answers = []

    def answer(dialog):
        answers.append(dialog.message)
        dialog.accept() if len(answers) > 1 else dialog.dismiss()

    page.on("dialog", answer)
    page.fill('#action-form input[name="reason"]', "not needed")
    page.click('#action-form .danger-zone button[value="cancel"]')  # dismissed
    assert answers and answers[0].startswith("Cancel this run?")
    assert Run.objects.get(pk=run.pk).status == "queued"
    assert not AuditEntry.objects.filter(run_id=run.pk).exists()
    screenshot(page, "operator-run-controls")

    with page.expect_navigation():
        page.click('#action-form .danger-zone button[value="cancel"]')  # accepted
    assert page.get_attribute("#run-summary [data-status]", "data-status") == "cancelled"
    assert list(AuditEntry.objects.filter(run_id=run.pk).values_list("action", "reason")) == [
        ("cancel", "not needed")]

    page.goto(f"{server.url}/ops/")
    other = launch(users["alice"], steps=3)
    page.goto(f"{server.url}/ops/")
    # The table refreshes once its socket is live (what changed since the render): ticked
    # before that answer, the box would be drawn over unticked. Nothing changes after it.
    wait_quiet(page)
    page.check(f'input.run-select[value="{other.pk}"]')
    page.select_option('#bulk-form select[name="action"]', "cancel")
    page.fill('#bulk-form input[name="reason"]', "bulk, not needed")
    answers.clear()  # the handler dismisses the first question again
    page.click('#bulk-form button[name="bulk"]')
    assert answers and answers[0].startswith("Cancel the selected runs?")
    assert page.is_checked(f'input.run-select[value="{other.pk}"]')  # the question was asked of it
    assert Run.objects.get(pk=other.pk).status == "queued"
    assert not AuditEntry.objects.filter(run_id=other.pk).exists()
    bottoms = page.eval_on_selector_all(
        "#run-filters input:not([type=checkbox]), #run-filters select, #run-filters button",
        "els => els.map(e => Math.round(e.getBoundingClientRect().bottom))")
    screenshot(page, "operator-dashboard")
    assert len(bottoms) >= 8 and len(set(bottoms)) == 1, bottoms
