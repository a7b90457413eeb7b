"""Chromium on a real Daphne: the pages whose content is widest (calls with long URLs as
arguments, idempotency keys, a run in doubt) fit their window, and none logs a console
error or warning (a CSP violation, an htmx swap without its target, a script error):
the operator's run page at 1280 px and its live redraw, the rollback preview, the launch
form re-rendered with an error, the run list on a phone (390 px), and the user's run
page (its event log's kind column, its rate after a rollback)."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

import tests.web.layout_agent  # noqa: F401  (registers publisher)
from runs import services
from runs.durable import Outcome
from runs.durable.faults import faults
from runs.models import Run, RunEvent
from runs.operator.groups import ensure_operators_group
from tests.web.conftest import (
    drive,
    log_in,
    new_context,
    screenshot,
    wait_caught_up,
    wait_drawn,
    wait_in_browser,
)

pytestmark = [pytest.mark.browser, pytest.mark.services]

LIVE = '#live-indicator[data-state="live"]'

# The page's width against its window's and, when it is wider, the outermost elements
# that stick out of it (not those inside a box that scrolls), to say what to fix.
WIDTH = """() => {
  const root = document.documentElement, edge = root.clientWidth + 0.5;
  const out = (e) => e.getBoundingClientRect().right > edge;
  const boxed = (e) => { for (let a = e.parentElement; a; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') return true; } return false; };
  const culprits = [...document.body.querySelectorAll('*')]
    .filter((e) => out(e) && !(e.parentElement && out(e.parentElement)) && !boxed(e))
    .slice(0, 6).map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className} `
                         + `right=${Math.round(e.getBoundingClientRect().right)}`);
  return {scroll: root.scrollWidth, client: root.clientWidth, culprits};
}"""


class Console:
    """What a page logs as an error or a warning, and the exceptions it throws. Chromium
    logs every answer of status 400 or more as "Failed to load resource"; `expected`
    names the (status, URL end) pairs the test asked for, such as a form's 422."""

    def __init__(self, page, expected: tuple[tuple[int, str], ...] = ()):
        self.problems: list[str] = []
        self.expected = expected
        page.on("console", self.message)
        page.on("pageerror", lambda exc: self.problems.append(f"pageerror: {exc}"))

    def message(self, message) -> None:
        if message.type not in ("error", "warning"):
            return
        url = message.location.get("url", "")
        if any(message.text.startswith(f"Failed to load resource: the server responded with "
                                       f"a status of {status} ") and url.endswith(end)
               for status, end in self.expected):
            return
        self.problems.append(f"{message.type}: {message.text} ({url})")


def assert_fits(page, where: str) -> None:
    width = page.evaluate(WIDTH)
    assert width["scroll"] <= width["client"], (where, width)


def ops_state(page) -> dict:
    return page.evaluate("({...window.opsLive})")


class Crash(BaseException):
    """The worker dies here: nothing after it runs, its lease is never released."""


def in_doubt_publisher(users) -> Run:
    """A publisher run with two operator actions in its audit trail, whose second note's
    post is in doubt (its worker died after the post, before its outcome was logged)."""
    run = services.run_launch(user=users["alice"], agent="publisher", inputs={"steps": 4})
    services.run_pause(run_id=run.pk, user=users["charlie"], reason="hold it while I look")
    services.run_resume(run_id=run.pk, user=users["charlie"], reason="looks fine, go on")
    calls = []

    def after_second_post():  # the calls: read 0, post 0, read 1, post 1
        calls.append(1)
        if len(calls) == 4:
            faults.disarm()
            raise Crash()

    faults.arm("after_effect_before_log", after_second_post)
    try:
        with pytest.raises(Crash):
            drive(run.pk)
    finally:
        faults.disarm()
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())  # the lease runs out
    run = drive(run.pk)
    assert (run.status, run.attention["kind"]) == (Outcome.NEEDS_ATTENTION, "in_doubt")
    return run


def append_log(run_id: str, message: str) -> int:
    """A log line as the engine writes it: the event and the run's head in one transaction."""
    with transaction.atomic():
        Run.objects.filter(pk=run_id).update(event_seq=F("event_seq") + 1)
        seq = Run.objects.get(pk=run_id).event_seq
        RunEvent.objects.create(run_id=run_id, seq=seq, kind="log", data={"message": message})
    return seq


@pytest.fixture
def as_user(users, server, browser):
    """as_user("charlie", width=1280): a page logged in, and what its console says."""
    ensure_operators_group()  # a transactional test's flush empties its permissions
    contexts = []

    def open_page(name: str, width: int = 1280, expected=()):
        context = new_context(browser, viewport={"width": width, "height": 900},
                                      is_mobile=width < 500)
        context.set_default_timeout(20_000)
        contexts.append(context)
        page = context.new_page()
        console = Console(page, expected)
        log_in(page, server.url, name, f"{name}-pass-1")
        return page, console

    yield open_page
    for context in contexts:
        context.close()


def test_the_operator_run_page_and_its_rollback_preview_fit_1280_px(users, server, as_user):
    page, console = as_user("charlie")
    run = in_doubt_publisher(users)
    page.goto(f"{server.url}/ops/runs/{run.pk}/")
    page.wait_for_selector(LIVE)
    assert page.locator("#effects tbody tr[data-key]").count() == 4
    assert page.locator("#audit li[data-action]").count() == 2
    assert_fits(page, "the operator run page")
    argument = page.locator("#effects td.args").first  # cut to its cell, whole in its title
    assert argument.get_attribute("title").startswith("'https://docs.example.com/")
    assert "not recorded" not in page.inner_text(".cause.in-doubt")

    seq = append_log(run.pk, "a line the page draws live")  # the live redraw
    wait_drawn(page, seq, "#run-poller")  # its fetch answered and swapped in
    assert page.locator(f'#events li[data-seq="{seq}"]').count() == 1
    assert_fits(page, "the operator run page, redrawn")
    screenshot(page, "ops-run")  # docs/screenshots/ops-run.png is a copy, refreshed by hand
    assert not console.problems, console.problems

    page.goto(f"{server.url}/ops/runs/{run.pk}/rollback/?checkpoint=1")
    page.wait_for_selector("#rollback-preview")
    assert page.locator("#first-effects tbody tr[data-key]").count() == 4
    assert_fits(page, "the rollback preview")
    assert not console.problems, console.problems


def test_a_change_told_while_the_run_page_fetches_waits_for_that_fetch(users, server,
                                                                     as_user):
    """Two fetches of the run page's updates were out at once when a change was told just
    after a redraw: the second answer was then swapped relative to the part of the page
    the first had replaced, where none of its targets are (htmx:oobErrorNoTarget for
    #run-summary, #events, #audit and #run-history). The page fetches again once the
    fetch out is answered. htmx settles a redraw 20 ms after it (that is when its guard of
    one request per element was reset); the settle is put off here so that the change
    surely falls in between."""
    page, console = as_user("charlie")
    run = drive(services.run_launch(user=users["alice"], agent="publisher",
                                    inputs={"steps": 2}).pk)
    page.goto(f"{server.url}/ops/runs/{run.pk}/")
    page.wait_for_selector(LIVE)
    page.evaluate("htmx.config.defaultSettleDelay = 4000")
    fetches, held = [], []

    def hold_second(route):
        fetches.append(route)
        held.append(route) if len(fetches) == 2 else route.continue_()

    page.route(f"**/ops/runs/{run.pk}/live/**", hold_second)
    first = append_log(run.pk, "first")
    wait_drawn(page, first, "#run-poller")  # redrawn, not yet settled
    second = append_log(run.pk, "second")
    wait_in_browser(page, lambda: held, "the fetch of the second change")
    # Once the redraw settles, the page watches again, and is told the second change again
    wait_in_browser(page, lambda: len(fetches) > 2 or ops_state(page).get("deferred"),
                    "the change told again while its fetch is out")
    held[0].continue_()
    wait_drawn(page, second, "#run-poller")
    wait_in_browser(page, lambda: console.problems or (
        lambda s: s["answered"] == s["refreshes"] + s["polls"])(ops_state(page)),
        "every fetch answered")
    assert not console.problems, console.problems
    assert page.locator(f'#events li[data-seq="{second}"]').count() == 1


def test_the_launch_form_with_an_error_keeps_the_csp(users, server, as_user):
    """A textarea the user resized carries a style attribute (the browser's own); htmx's
    settle copied it onto the form as redrawn with setAttribute, which the CSP refuses."""
    page, console = as_user("alice", expected=((422, "/launch/assistant/"),))
    page.goto(f"{server.url}/launch/assistant/")
    box = page.locator("#id_question").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] + 60)
    page.mouse.up()
    assert "height" in (page.get_attribute("#id_question", "style") or "")  # resized
    page.fill("#id_budget-cost", "-1")
    page.click("#launch-panel button[type=submit]")
    page.wait_for_selector("#launch-panel .field.has-error .field-error")
    assert_fits(page, "the launch form with an error")
    assert not console.problems, console.problems


def test_the_run_list_fits_a_phone(users, server, as_user):
    drive(services.run_launch(user=users["alice"], agent="publisher", inputs={"steps": 2}).pk)
    services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 3})
    page, console = as_user("alice", width=390)
    page.wait_for_selector(LIVE)
    assert page.locator("#run-list tr.run-row").count() == 2
    assert_fits(page, "the run list at 390 px")
    assert not console.problems, console.problems


def test_the_run_page_event_kinds_fit_and_a_rollback_clears_the_rate(users, server, as_user):
    asking = drive(services.run_launch(user=users["alice"], agent="ask", inputs={}).pk)
    assert asking.status == "waiting"
    ticker = drive(services.run_launch(user=users["alice"], agent="ticker",
                                       inputs={"steps": 4, "delay": 0.05}).pk)
    page, console = as_user("alice")

    page.goto(f"{server.url}/runs/{asking.pk}/")
    page.wait_for_selector(LIVE)
    kind = page.locator("#event-log .ev-input_requested .ev-kind")
    assert kind.inner_text() == "input_requested"
    assert kind.evaluate("e => e.scrollWidth <= e.clientWidth"), "the kind overflows its column"
    assert_fits(page, "the run page")

    page.goto(f"{server.url}/runs/{ticker.pk}/")
    page.wait_for_selector(LIVE)
    assert page.inner_text("#run-rate").endswith("/s")  # the four steps' pace
    services.run_rollback(run_id=ticker.pk, checkpoint=2, user=users["charlie"],
                          reason="again from step 1", resume=False)
    wait_caught_up(page, ticker.pk)
    assert page.inner_text("#run-branch") == "2"
    # paused on a branch that has not moved yet: no rate, no ETA
    assert (page.inner_text("#run-rate"), page.inner_text("#run-eta")) == ("—", "—")
    assert not console.problems, console.problems


def test_a_page_moves_only_for_a_user_who_has_not_asked_for_less_motion(users, server, browser):
    """The run list's live dot pulses, unless the user's system asks for less motion
    (prefers-reduced-motion): then nothing on the page moves (static/css/app.css). Every
    other browser test draws its pages so (tests/web/conftest.py, new_context)."""
    moving = {}
    for motion in ("no-preference", "reduce"):
        context = new_context(browser, viewport={"width": 1280, "height": 900},
                              reduced_motion=motion)
        try:
            page = context.new_page()
            log_in(page, server.url, "alice", "alice-pass-1")
            page.wait_for_selector(LIVE)
            moving[motion] = page.evaluate(
                "() => document.getAnimations().map((a) => a.animationName || 'a transition')")
        finally:
            context.close()
    assert "pulse" in moving["no-preference"], moving
    assert moving["reduce"] == [], moving
