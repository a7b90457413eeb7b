"""A run waiting to retry, in a real browser against Daphne: the countdown runs, and an
operator's "retry now" (with a reason) wakes it, audited."""

import pytest

from runs.durable import Outcome
from runs.models import AuditEntry, Run
from tests.operator.conftest import drive, launch
from tests.operator.test_retry_actions import OUTAGE
from tests.web.conftest import ask_page

pytestmark = [pytest.mark.services, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_countdown_runs_and_retry_now_wakes_the_run(operator_page, server, users):
    OUTAGE.update(failures=1, calls=0)
    run = launch(users["alice"], "retry-actions-page")
    assert drive(run.pk) == Outcome.WAITING
    page = operator_page
    page.goto(f"{server.url}/ops/runs/{run.pk}/")
    line = page.locator("#run-summary .retrying")
    assert line.inner_text().startswith("retrying fetch_page in ")
    assert "attempt 2: HTTP 503 Service Unavailable" in line.inner_text()
    first = int(page.inner_text("#run-summary .retry-countdown"))
    # the countdown's own timer ticks once a second (static/js/countdown.js): the context's
    # deadline is twenty of its ticks
    ask_page(page,
             "n => parseInt(document.querySelector('#run-summary .retry-countdown').textContent) < n",
             arg=first)

    page.fill('#action-form input[name="reason"]', "the site is back")
    with page.expect_navigation():
        page.click('#action-form button[value="retry_now"]')
    assert page.locator("text=The call's next attempt starts now.").count() == 1
    assert Run.objects.get(pk=run.pk).status == "queued"
    entry = AuditEntry.objects.get(run_id=run.pk)
    assert (entry.actor, entry.action, entry.reason) == ("charlie", "retry_now",
                                                         "the site is back")
    assert drive(run.pk) == Outcome.SUCCEEDED
