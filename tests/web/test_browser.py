"""Chromium against a real Daphne and a a real worker tree, on the test database.

Two flows, each worth its minutes: a long run watched, left, rejoined and
followed across a Daphne restart; and a run that asks its user a question.
"""

from __future__ import annotations

import json
import re

import pytest

from runs import services
from runs.live.shutdown import CLOSE_SERVICE_RESTART
from runs.models import Checkpoint, Run, RunEvent
from tests.support.processes import Server, wait_until
from tests.web.conftest import ask_page, head, log_in, screenshot, wait_caught_up, wait_drawn

pytestmark = [pytest.mark.browser, pytest.mark.services]

RUN_URL = re.compile(r".*/runs/([0-9a-f]{32})/$")
LIVE = '#live-indicator[data-state="live"]'


def dom_events(page) -> list[tuple[int, str]]:
    return [tuple(item) for item in page.eval_on_selector_all(
        "#event-log li[data-seq]",
        "els => els.map(e => [Number(e.dataset.seq), e.querySelector('.ev-kind').textContent])")]


def db_events(run_id: str, upto: int | None = None) -> list[tuple[int, str]]:
    events = RunEvent.objects.filter(run_id=run_id).order_by("seq")
    if upto is not None:
        events = events.filter(seq__lte=upto)
    return list(events.values_list("seq", "kind"))


def assert_no_gap_no_duplicate(page, run_id: str) -> int:
    """The page's events are exactly the event rows 1..N, in order. Returns N."""
    shown = dom_events(page)
    assert shown, "the page shows no events"
    last = shown[-1][0]
    assert shown == db_events(run_id, upto=last)
    assert [seq for seq, _ in shown] == list(range(1, last + 1))
    return last


def progress(page) -> int:
    return int(page.get_attribute("#run-progress .progress", "aria-valuenow") or 0)


def ended(run_id: str, timeout: float) -> Run:
    return wait_until(lambda: (run := Run.objects.get(pk=run_id)).is_final and run, timeout,
                      message="the run to end")


STEPS = 80


def launch_neighbours(user) -> list[str]:
    """A short ticker, a run that waits for its user, and a cancelled one."""
    short = services.run_launch(user=user, agent="ticker", inputs={"steps": 5, "delay": 0.05})
    asks = services.run_launch(user=user, agent="ask", inputs={})
    cancelled = services.run_launch(user=user, agent="steps", inputs={})
    services.run_cancel(run_id=cancelled.pk, user=user, reason="changed my mind")
    return [short.pk, asks.pk, cancelled.pk]


# Every text the live indicator shows from here on, in window.indicatorTexts.
RECORD_INDICATOR = """() => {
    const indicator = document.getElementById("live-indicator");
    window.indicatorTexts = [indicator.innerText];
    new MutationObserver(() => window.indicatorTexts.push(indicator.innerText)).observe(
        indicator, {subtree: true, childList: true, characterData: true, attributes: true});
}"""


def test_launch_watch_leave_rejoin_and_survive_a_daphne_restart(users, server, start_cluster,
                                                                 browser_context, tmp_path):
    start_cluster(workers=2)
    page = browser_context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, server.url, "alice", "alice-pass-1")

    # launch from the form built from the schema
    page.goto(f"{server.url}/launch/ticker/")
    page.fill("#id_steps", str(STEPS))
    page.fill("#id_delay", "0.35")
    page.click(".launch-form button[type=submit]")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.match(page.url).group(1)
    run_url = page.url
    page.wait_for_selector(LIVE)
    others = launch_neighbours(users["alice"])  # so the run list has some company

    # progress advances by itself
    ask_page(page, "() => Number(document.querySelector('#run-progress .progress')"
                   ".getAttribute('aria-valuenow')) >= 5")
    first = progress(page)
    ask_page(page, f"() => Number(document.querySelector('#run-progress .progress')"
                   f".getAttribute('aria-valuenow')) > {first}")
    assert page.inner_text("#run-rate") != "—"
    assert page.inner_text("#run-eta").startswith("≈")
    assert_no_gap_no_duplicate(page, run_id)

    # close the page mid-run; the run goes on without anyone watching
    page.close()
    at_close = Run.objects.get(pk=run_id).event_seq
    wait_until(lambda: Run.objects.get(pk=run_id).event_seq >= at_close + 8, 20,
               message="events while the page is closed")

    # come back: everything that happened meanwhile, no gap, no duplicate
    page = browser_context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(run_url)
    page.wait_for_selector(LIVE)
    wait_drawn(page, at_close + 8)
    seen = assert_no_gap_no_duplicate(page, run_id)
    assert seen > at_close
    screenshot(page, "run-page-live")

    # the run list moves by itself too
    listing = browser_context.new_page()
    listing.goto(f"{server.url}/")
    listing.wait_for_selector(LIVE)
    bar = f"#run-row-{run_id} .progress"
    before = int(listing.get_attribute(bar, "aria-valuenow"))
    ask_page(listing, f"() => Number(document.querySelector('{bar}')"
                      f".getAttribute('aria-valuenow')) > {before}")
    for other in others:
        assert listing.locator(f"#run-row-{other}").count() == 1
    wait_until(lambda: Run.objects.get(pk=others[1]).status == "waiting", 20)
    listing.wait_for_selector(f"#run-row-{others[1]} .status-waiting")
    screenshot(listing, "run-list")
    listing.close()
    # Held while Daphne stops, so that it is still running when it is down however slow
    # the steps before were (a loaded machine had it finish first).
    services.run_pause(run_id=run_id, user=users["alice"], reason="held for the restart")

    # restart Daphne under the open page: it is told the server restarts (not a dropped
    # connection), shows it is reconnecting, then catches up
    port = server.port
    page.evaluate(RECORD_INDICATOR)
    server.stop(timeout=30)  # a clean stop (a SIGKILL would be a 1006), however loaded
    page.wait_for_selector('#live-indicator[data-state="reconnecting"]', timeout=10_000)
    assert page.get_attribute("#live-indicator", "data-close-code") == \
        str(CLOSE_SERVICE_RESTART)
    # It says why, between attempts and while one runs (it said a bare "reconnecting…"
    # while each attempt ran, and a test that read it then failed)
    ask_page(page, "() => window.indicatorTexts.some("
                   "t => t.includes('reconnecting') && !t.includes('retry in'))")
    reconnecting = [text for text in page.evaluate("window.indicatorTexts")
                    if "reconnecting" in text]
    assert all("server restarting" in text for text in reconnecting), reconnecting
    while_down = Run.objects.get(pk=run_id).event_seq
    services.run_resume(run_id=run_id, user=users["alice"], reason="Daphne is down")
    wait_until(lambda: Run.objects.get(pk=run_id).event_seq > while_down + 3, 20,
               message="events while Daphne is down")
    missed = Run.objects.get(pk=run_id).event_seq
    restarted = Server(tmp_path, port=port)
    try:
        page.wait_for_selector(LIVE)
        wait_drawn(page, missed)
        assert_no_gap_no_duplicate(page, run_id)

        # The end: the output, and every event exactly once. The deadline is the run's own
        # work: what is left of its 80 steps of 0.35 s, on a machine at a load of 10-25.
        final = ended(run_id, 60)
        assert final.status == "succeeded", (final.status, final.error)
        wait_drawn(page, final.event_seq)  # the last events applied, the panels redrawn
        assert page.locator("#run-status .status-succeeded").count() == 1
        assert page.is_visible("#panel-output .kv")
        assert str(STEPS) in page.inner_text("#output-rendered")
        assert dom_events(page) == db_events(run_id)
        assert page.inner_text("#run-progress-counts") == f"{STEPS} / {STEPS}"
        assert page.locator("#panel-timeline .mark").count() >= STEPS
        # the run has ended: no live redraw replaces the timeline under the click
        mark = page.locator("#panel-timeline .mark").nth(10)
        number = int(mark.get_attribute("data-checkpoint"))
        mark.click()
        page.wait_for_selector(f"#checkpoint-state h3:text('Checkpoint #{number}')")
        checkpoint = Checkpoint.objects.get(run_id=run_id, number=number)
        assert json.loads(page.inner_text("#checkpoint-state pre")) == checkpoint.state()
        screenshot(page, "run-page")

        page.goto(f"{restarted.url}/")
        page.wait_for_selector(LIVE)
        row = page.locator(f"#run-row-{run_id}")
        assert row.locator(".badge").inner_text() == "succeeded"
        assert not errors, errors
    finally:
        restarted.stop()


def refresh_panels(page, *names):
    """What the page does when an event makes panels stale, done now and waited for."""
    page.evaluate("""async (names) => {
        const runPage = document.getElementById("run-page");
        const query = names.map((n) => "p=" + encodeURIComponent(n)).join("&");
        await htmx.ajax("GET", runPage.dataset.panelsUrl + "?" + query,
                        {source: runPage, target: "#run-page", swap: "none"});
    }""", list(names))


def test_answer_a_question_the_run_asks(users, server, start_cluster, browser_context):
    start_cluster(workers=1)
    page = browser_context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, server.url, "alice", "alice-pass-1")
    page.goto(f"{server.url}/launch/ask/")
    page.fill("#id_question", "<i>Who</i> are you?")
    page.click(".launch-form button[type=submit]")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.match(page.url).group(1)

    # the form appears live when the run starts waiting, the prompt as text
    wait_until(lambda: Run.objects.get(pk=run_id).status == "waiting", 20,
               message="the run to ask")
    wait_caught_up(page, run_id)  # drawn as it waits: nothing redraws the form meanwhile
    assert page.is_visible("#panel-input.is-waiting form")
    assert page.inner_text("#panel-input .prompt") == "<i>Who</i> are you?"
    assert page.locator("#panel-input i, #event-log i").count() == 0

    # a live refresh of the same question (as its status event brings) leaves an answer
    # being typed as it is
    page.fill("#id_answer-name", "Ada")
    refresh_panels(page, "input")
    assert page.input_value("#id_answer-name") == "Ada"

    # a blank answer is refused next to its field, and the refusal stays through a live
    # refresh; then a real answer is taken
    page.fill("#id_answer-name", "")
    page.click("#panel-input button[type=submit]")
    page.wait_for_selector("#panel-input .field-error")
    refresh_panels(page, "input")
    assert page.locator("#panel-input .field-error").count() == 1
    page.fill("#id_answer-name", "Ada <b>Lovelace</b>")
    page.click("#panel-input button[type=submit]")
    assert ended(run_id, 20).status == "succeeded"
    wait_drawn(page, head(run_id))
    assert page.locator("#run-status .status-succeeded").count() == 1
    assert page.is_visible("#panel-output .kv")
    assert page.inner_text("#output-rendered") .endswith("Hello, Ada <b>Lovelace</b>!")
    assert page.locator("#output-rendered b").count() == 0
    assert page.is_hidden("#panel-input")
    kinds = [kind for _, kind in dom_events(page)]
    assert "input_requested" in kinds and "input_received" in kinds
    assert dom_events(page) == db_events(run_id)
    assert not errors, errors
