"""The operator pages in Chromium against Daphne: a dashboard row and a run's page change
when the run does, told over the websocket, with no HTTP poll meanwhile; and with the
websocket blocked the fallback poll still brings the change."""

import re

import pytest

from runs import services
from runs.durable import Outcome
from tests.operator.conftest import LIVE, drive, launch
from tests.web.conftest import ask_page, screenshot, wait_caught_up

pytestmark = [pytest.mark.services, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
POLL_SECONDS = 0.4   # the fallback's period here: a poll, had there been one, comes fast


@pytest.fixture(autouse=True)
def _fast_fallback(monkeypatch):
    monkeypatch.setenv("AGENTOPS_OPS_POLL", str(POLL_SECONDS))  # read by the Daphne started next


LIVE_PARTIALS = re.compile(r"/ops/(\?|$)|/ops/runs/\w+/live/")  # the table, a run's updates


def partial_requests(page) -> list:
    """The requests for the live partials, each with what caused it (X-Ops-Refresh; an
    htmx poll of today's pages sends none)."""
    seen = []
    page.on("request", lambda request: seen.append(request.headers.get("x-ops-refresh", "poll"))
            if request.headers.get("hx-request") and LIVE_PARTIALS.search(request.url) else None)
    return seen


def live_now(page, seen) -> None:
    """Wait for the socket to be live, then count from there (before, while it connects,
    the page may rightly poll)."""
    page.wait_for_selector(LIVE)
    page.evaluate("window.opsLive.polls = 0; window.opsLive.ticks = 0")
    seen.clear()


def row_status(page, run_id, status):
    """The dashboard's row drawn at the run's last event (the page's own signal: the row's
    data-live-seq, as the server rendered it), and the status it shows."""
    row = f'#runs-table tr[data-run="{run_id}"]'
    wait_caught_up(page, run_id, row)
    assert page.get_attribute(f"{row} [data-status]", "data-status") == status


def wait_ticks(page, ticks: int) -> None:
    """The fallback timer went round `ticks` times (an arrow function: the page's
    Content-Security-Policy refuses an expression evaluated again at each poll)."""
    ask_page(page, "(n) => window.opsLive.ticks >= n", arg=ticks)


def test_the_dashboard_and_a_run_page_update_over_the_websocket(operator_page, server, users):
    page = operator_page
    run, other = launch(users["alice"], steps=3), launch(users["alice"], steps=4)
    assert drive(other.pk) == Outcome.SUCCEEDED  # checkpoints and effects to show
    seen = partial_requests(page)
    page.goto(f"{server.url}/ops/")
    live_now(page, seen)
    row_status(page, run.pk, "queued")

    services.run_cancel(run_id=run.pk, user=users["charlie"], reason="not needed")
    row_status(page, run.pk, "cancelled")
    # The fallback timer went round several times while the socket was live and never
    # polled: every request the page made was one the socket asked for.
    wait_ticks(page, 4)
    assert page.evaluate("window.opsLive.polls") == 0
    assert seen and set(seen) == {"live"}, seen
    screenshot(page, "ops-dashboard")

    page.goto(f"{server.url}/ops/runs/{other.pk}/")
    live_now(page, seen)
    services.run_rollback(run_id=other.pk, checkpoint=2, user=users["charlie"],
                          reason="again from checkpoint 2", resume=False)
    wait_caught_up(page, other.pk, "#run-poller")
    assert page.get_attribute("#run-summary [data-status]", "data-status") == "paused"
    assert page.inner_text("#run-branch") == "2"
    assert page.locator('#audit li:has-text("again from checkpoint 2")').count() == 1
    wait_ticks(page, 4)
    assert page.evaluate("window.opsLive.polls") == 0
    assert set(seen) == {"live"}, seen
    screenshot(page, "ops-run")


def test_with_the_websocket_blocked_the_fallback_poll_updates_the_row(operator_page, server,
                                                                      users):
    page = operator_page
    page.route_web_socket(re.compile(r"/ws/operator/"), lambda ws: ws.close(code=1011))
    run = launch(users["alice"], steps=3)
    seen = partial_requests(page)
    page.goto(f"{server.url}/ops/")
    row_status(page, run.pk, "queued")

    services.run_cancel(run_id=run.pk, user=users["charlie"], reason="not needed")
    row_status(page, run.pk, "cancelled")
    assert page.evaluate("window.opsLive.live") is False
    assert page.evaluate("window.opsLive.polls") >= 1 and "poll" in seen
    assert page.get_attribute("#live-indicator", "data-state") != "live"
