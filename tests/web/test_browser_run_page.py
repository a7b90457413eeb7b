"""Chromium on the run page. At 1280 px, a crawl-shaped run (tests/web/lister_agent.py):
its effects table keeps the DURATION column in view, the STEP counter follows the log
past the last checkpoint (live too), and the ETA does not promise an end while the
agent's total grows faster than its work gets done. And what the live feeds make stale is
all redrawn: the run page's panels while a checkpoint's state loads or after the server
refused a refresh, the run list's rows of runs that end together."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

import tests.web.lister_agent  # noqa: F401  (registers lister)
from runs import services
from runs.models import Run, RunEvent
from tests.support.processes import wait_until
from tests.web.conftest import (
    ask_page,
    head,
    log_in,
    new_context,
    screenshot,
    wait_caught_up,
    wait_drawn,
    wait_in_browser,
)
from tests.web.test_stalls_shown import hold

pytestmark = [pytest.mark.browser, pytest.mark.services]

LIVE = '#live-indicator[data-state="live"]'

# Where each header and cell of the DURATION column ends, against the scrolled box's
# visible right edge (its left plus clientWidth, which leaves out a scrollbar).
DURATION_EDGES = """() => {
  const box = document.querySelector('#panel-effects .table-wrap');
  const visible = box.getBoundingClientRect().left + box.clientWidth;
  const cells = [...document.querySelectorAll('#panel-effects tr > :last-child')];
  return {visible, cells: cells.map(c => ({text: c.textContent.trim(),
    right: c.getBoundingClientRect().right, clipped: c.scrollWidth > c.clientWidth}))};
}"""


def append_effect_event(run_id: str, step: int) -> None:
    """An effect of a later step, as the engine writes it: the event and the run's head
    in one transaction (the live feed follows event_seq)."""
    with transaction.atomic():
        Run.objects.filter(pk=run_id).update(event_seq=F("event_seq") + 1)
        seq = Run.objects.get(pk=run_id).event_seq
        RunEvent.objects.create(run_id=run_id, seq=seq, kind="effect", data={
            "step": step, "seq": 0, "branch": 1, "tool": "tests.web.lister_agent.fetch_listing_page",
            "key": f"{run_id}:1:{step}:0", "status": "done", "idempotent": True, "ms": 1.0})


def test_the_run_page_at_1280_px(users, server, browser, launch_and_drive):
    run = launch_and_drive("lister", {"fail_at": 14})  # checkpoints at steps 0, 5, 10
    assert (run.status, run.step_no) == ("failed", 10)
    context = new_context(browser, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, server.url, "alice", "alice-pass-1")
    # A worker holds it again (a lease of 30 s, taken just before the page asks): a running
    # run, so the page shows an ETA.
    hold(run.pk)
    page.goto(f"{server.url}/runs/{run.pk}/")
    page.wait_for_selector(LIVE)

    edges = page.evaluate(DURATION_EDGES)
    assert [c["text"] for c in edges["cells"]][0] == "Duration"
    assert len(edges["cells"]) == 15  # the header and 14 effects
    for cell in edges["cells"]:
        assert cell["right"] <= edges["visible"] + 0.5, (cell, edges["visible"])
        assert not cell["clipped"], cell

    assert page.inner_text("#run-step") == "14"  # the log's last step, not checkpoint 10's
    assert page.inner_text("#run-eta") == "unknown: the total keeps growing"
    screenshot(page, "run-page-1280")

    append_effect_event(run.pk, 15)
    wait_caught_up(page, run.pk)  # the event applied, the effects panel it made stale redrawn
    assert page.inner_text("#run-step") == "15"
    assert not errors, errors
    context.close()


def test_panels_made_stale_while_a_checkpoint_loads_are_not_dropped(
        users, server, browser, launch_and_drive):
    """A checkpoint's state is loading (held here) when the run is cancelled, then an effect
    comes: the page refreshes the actions panel and then the effects panel. Both must be
    drawn: the header says the run is cancelling, not still offer "Cancel run"."""
    run = launch_and_drive("lister", {"fail_at": 14})
    hold(run.pk)
    context = new_context(browser, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    page.goto(f"{server.url}/runs/{run.pk}/")
    page.wait_for_selector(LIVE)
    wait_caught_up(page, run.pk)  # the timeline clicked next is the one drawn
    page.evaluate("""() => { window.panelCalls = []; const ajax = window.htmx.ajax;
        window.htmx.ajax = function (verb, path, context) {
          if (String(path).includes('/panels/')) window.panelCalls.push(String(path));
          return ajax.apply(this, arguments); }; }""")
    loading = []
    page.route(f"**/runs/{run.pk}/checkpoints/**", lambda route: loading.append(route))
    page.click("#panel-timeline .mark >> nth=1")
    wait_in_browser(page, lambda: loading, "the checkpoint request")

    services.run_cancel(run_id=run.pk, user=users["alice"], reason="enough")
    ask_page(page, "() => window.panelCalls.some(p => p.includes('p=actions'))")
    append_effect_event(run.pk, 15)
    ask_page(page, "() => window.panelCalls.some(p => p.includes('p=effects'))")
    loading[0].continue_()
    page.wait_for_selector("#checkpoint-state h3")
    wait_caught_up(page, run.pk)  # every panel the cancel and the effect made stale, redrawn
    assert "cancelling at the next effect boundary" in page.inner_text("#panel-actions")
    assert page.locator("#panel-actions button").count() == 0
    context.close()


def end_run(run_id: str) -> None:
    """A run ends as the engine ends it: its row and its last event in one transaction."""
    with transaction.atomic():
        Run.objects.filter(pk=run_id).update(status="succeeded", event_seq=F("event_seq") + 1,
                                             finished_at=timezone.now(), updated_at=timezone.now())
        seq = Run.objects.get(pk=run_id).event_seq
        RunEvent.objects.create(run_id=run_id, seq=seq, kind="status", data={"status": "succeeded"})


def test_the_run_list_redraws_every_row_of_runs_that_end_together(users, server, browser_context):
    """Three runs end while the first one's row is still being fetched (held here): each
    ended row is fetched again from the server (its final duration), none is dropped."""
    ids = [services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 2}).pk
           for _ in range(3)]
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    page.wait_for_selector(LIVE)
    asked, held = [], []

    def rows(route):
        asked.append(route.request.url.rsplit("id=", 1)[-1])
        held.append(route) if len(asked) == 1 else route.continue_()

    page.route("**/rows/?id=*", rows)
    end_run(ids[0])
    page.wait_for_selector(f"#run-row-{ids[0]} .status-succeeded")
    wait_in_browser(page, lambda: held, "the first row's request")
    end_run(ids[1])
    page.wait_for_selector(f"#run-row-{ids[1]} .status-succeeded")
    end_run(ids[2])
    page.wait_for_selector(f"#run-row-{ids[2]} .status-succeeded")
    # the page's signal: the first row is not drawn at its end while its redraw is held
    assert int(page.get_attribute(f"#run-row-{ids[0]}", "data-live-seq")) < head(ids[0])
    held[0].continue_()
    for run_id in ids:  # each ended row redrawn from the server's, the held one too
        wait_drawn(page, head(run_id), f"#run-row-{run_id}")
    assert sorted(asked) == sorted(ids)


def test_a_panel_refresh_the_server_refused_is_asked_for_again(users, server, browser_context):
    """The database is away for a moment when the run is cancelled: the first refresh of
    the header gets a 503. The page asks again, and shows the cancelled run's header."""
    run_id = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 5}).pk
    hold(run_id)
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    page.goto(f"{server.url}/runs/{run_id}/")
    page.wait_for_selector(LIVE)
    answered = []

    def panels(route):
        answered.append(503 if not answered else 200)
        if answered[-1] == 503:
            route.fulfill(status=503, body="the database is unavailable")
        else:
            route.continue_()

    page.route(f"**/runs/{run_id}/panels/**", panels)
    services.run_cancel(run_id=run_id, user=users["alice"], reason="enough")  # running: asks
    wait_caught_up(page, run_id)  # drawn once a refresh was answered: the second one
    assert "cancelling at the next effect boundary" in page.inner_text("#panel-actions")
    assert answered[0] == 503 and answered[-1] == 200


LOG_HAS = "(seq) => Number(document.getElementById('run-page').dataset.lastSeq) >= seq"


def test_the_page_signals_an_event_once_the_panels_it_made_stale_are_redrawn(
        users, server, browser_context):
    """The page's own signal (static/js/live.js, docs/operator-live.md): #run-page's
    data-live-seq reaches an event once the panels that event made stale are redrawn: not
    while their refresh is out, not for a later event that made no panel stale, not when
    the server refused the refresh; once it is answered."""
    run_id = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 5}).pk
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    hold(run_id)
    page.goto(f"{server.url}/runs/{run_id}/")
    page.wait_for_selector(LIVE)
    before = wait_caught_up(page, run_id)
    held = []
    page.route(f"**/runs/{run_id}/panels/**", lambda route: held.append(route))

    def signal() -> int:
        return int(page.get_attribute("#run-page", "data-live-seq"))

    append_effect_event(run_id, 1)  # the effects panel is stale
    ask_page(page, LOG_HAS, arg=head(run_id))  # its line is drawn at once
    wait_in_browser(page, lambda: held, "the refresh of the effects panel")
    assert signal() == before
    seq = append_log_event(run_id)  # no panel: drawn at once, but the effect's is still out
    ask_page(page, LOG_HAS, arg=seq)
    assert signal() == before
    held[0].fulfill(status=503, body="the database is unavailable")
    wait_in_browser(page, lambda: len(held) == 2, "the refresh asked for again")
    assert signal() == before  # refused: not drawn
    held[1].continue_()
    wait_drawn(page, seq)
    assert page.get_attribute("#run-page", "data-last-seq") == str(seq)


def append_log_event(run_id: str) -> int:
    with transaction.atomic():
        Run.objects.filter(pk=run_id).update(event_seq=F("event_seq") + 1)
        seq = Run.objects.get(pk=run_id).event_seq
        RunEvent.objects.create(run_id=run_id, seq=seq, kind="log", data={"message": "a line"})
    return seq


def test_the_signal_follows_a_run_that_keeps_making_panels_stale(users, server,
                                                                  browser_context):
    """A run whose events make a panel stale again before each fetch of it is answered (the
    page fetches panels one at a time, 0.6 s apart at most): the page's signal still
    moves, to the event each answered fetch covers, not only once nothing is left to
    fetch (which never comes while the run moves)."""
    run_id = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 5}).pk
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    hold(run_id)
    page.goto(f"{server.url}/runs/{run_id}/")
    page.wait_for_selector(LIVE)
    before = wait_caught_up(page, run_id)
    held = []
    page.route(f"**/runs/{run_id}/panels/**", lambda route: held.append(route))
    stop = threading.Event()

    def effects():  # the run's pace, not a wait: an effect every 0.1 s until told to stop
        try:
            step = 1
            while not stop.wait(0.1):
                append_effect_event(run_id, step)
                step += 1
        finally:
            connection.close()

    writer = threading.Thread(target=effects)
    writer.start()
    try:
        moved = wait_until(lambda: (seq := head(run_id)) >= before + 5 and seq, 20,
                           message="five effects")
        for _ in range(20):  # each fetch answered once a later effect made the panel stale
            # a fetch is asked for once the one before it was answered and drawn
            wait_in_browser(page, lambda: held, "a fetch of the effects panel")
            if int(page.get_attribute("#run-page", "data-live-seq")) >= moved:
                break
            drawn = int(page.get_attribute("#run-page", "data-last-seq"))
            ask_page(page, LOG_HAS, arg=drawn + 1)
            held.pop(0).continue_()
        assert int(page.get_attribute("#run-page", "data-live-seq")) >= moved
        assert writer.is_alive()  # it drew them while they came
    finally:
        stop.set()
        writer.join()
