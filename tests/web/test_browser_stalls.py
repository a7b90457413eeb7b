"""Chromium watches a run stall and move again, without reloading: the badge turns to
`stalled`, the stripe stops, the ETA goes, the note says why and since when, and the
live indicator stops saying a green "live". A run's stall comes with no event: the
page learns it from the socket (the server's poll of the runs it follows)."""

from __future__ import annotations

import pytest

from runs import services
from runs.durable import WorkerConfig, execute_run
from runs.storage import database_store
from tests.web.conftest import log_in, screenshot
from tests.web.test_stalls_shown import hold, lose_lease

pytestmark = [pytest.mark.browser, pytest.mark.services]

LIVE = '#live-indicator[data-state="live"]'


def half_run(user) -> str:
    """A ticker run that made some progress in this process, then was handed back."""
    run = services.run_launch(user=user, agent="ticker", inputs={"steps": 40, "delay": 0.02})
    execute_run(database_store(), run.pk, WorkerConfig(owner="web-1:4242:ab12cd34", lease_seconds=30,
                                                 slice_seconds=0.3))
    return run.pk


def test_a_run_page_shows_a_stall_live_and_its_end(users, server, browser_context):
    run_id = half_run(users["alice"])
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    hold(run_id)  # a lease of 30 s, taken just before the page asks
    page.goto(f"{server.url}/runs/{run_id}/")
    page.wait_for_selector(LIVE)
    assert page.text_content("#run-status").strip() == "running"
    assert page.is_visible("#run-progress .progress.is-running")
    assert page.is_hidden("#run-stall")

    # A stall comes with no event: the page's signal is its own data-stalled, set as the
    # socket's stall message is drawn (static/js/run.js).
    lose_lease(run_id)
    page.wait_for_selector("#run-page[data-stalled]", state="attached")
    assert page.locator("#run-status .badge.status-stalled").count() == 1
    assert page.text_content("#run-status").strip() == "stalled"
    assert page.query_selector("#run-progress .progress.is-running") is None
    assert page.text_content("#run-eta") == "—"
    assert page.is_visible("#run-stall")
    assert page.text_content("#run-stall-why").startswith("lease holder web-1:4242 gone:")
    assert page.text_content("#live-indicator .live-text") == "stalled"
    assert "is-stalled" in page.get_attribute("#live-indicator", "class")
    screenshot(page, "run-page-stalled")

    hold(run_id)
    page.wait_for_selector("#run-page:not([data-stalled])", state="attached")
    assert page.locator("#run-status .badge.status-running").count() == 1
    assert page.is_visible("#run-progress .progress.is-running")
    assert page.is_hidden("#run-stall")
    assert page.text_content("#live-indicator .live-text") == "live"
