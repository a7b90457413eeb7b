"""Fixtures for the user's pages: logged-in clients, runs executed in-process,
websocket communicators with a real session, and a browser."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import pytest_asyncio
from django.test import Client

import tests.workload_agents  # noqa: F401  (registers ticker, ask, shout, steps here too)
from runs import services
from runs.durable import Outcome, execute_run
from runs.models import Run
from runs.storage import database_store
from runs.worker.config import worker_config

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def client_for(users):
    """client_for("alice"): a test client logged in as that user."""
    def make(name: str, **kwargs) -> Client:
        client = Client(**kwargs)
        client.force_login(users[name])
        return client
    return make


@pytest.fixture
def alice_client(client_for):
    return client_for("alice")


def drive(run_id: str, max_slices: int = 50) -> Run:
    """Execute a run in this process until it ends or waits (no worker needed)."""
    outcome = None
    for _ in range(max_slices):
        outcome = execute_run(database_store(), run_id, worker_config())
        if outcome != Outcome.YIELDED:
            break
    return Run.objects.get(pk=run_id)


@pytest.fixture
def launch_and_drive(users):
    def run(agent: str, inputs=None, owner: str = "alice") -> Run:
        launched = services.run_launch(user=users[owner], agent=agent, inputs=inputs or {})
        return drive(launched.pk)
    return run


# --- websocket communicators -----------------------------------------------------------------
class Sockets:
    """The WebsocketCommunicators a test connected (`sockets(communicator)` once it called
    connect), each disconnected at the test's end. One left open (a socket the server
    closed too: its consumer runs until the client's disconnect) would be cancelled with
    the test's event loop, which a live consumer takes for Daphne stopping: it then waits
    CLOSE_WAIT_SECONDS for a closing reply that never comes (runs/live/shutdown.py)."""

    DISCONNECT_SECONDS = 10  # the consumer's own end on the client's disconnect, under load

    def __init__(self):
        self.connected = []

    def __call__(self, communicator):
        self.connected.append(communicator)
        return communicator

    async def disconnect_all(self) -> None:
        for communicator in self.connected:
            if not communicator.future.done():  # its application still runs
                await communicator.disconnect(timeout=self.DISCONNECT_SECONDS)


@pytest_asyncio.fixture
async def sockets():
    connected = Sockets()
    yield connected
    await connected.disconnect_all()


# --- the browser -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    """Chromium for one test module. While Playwright's sync API is active, its event
    loop runs in this thread, and Django refuses ORM calls in a thread with a running
    loop: the module's tests (and their fixtures) may make them all the same."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def new_context(browser, **options):
    """A browser context as every browser test opens one: its pages drawn without
    motion, as for a user who asks for less (static/css/app.css). The pages' endless
    animations (the live dot, a running run's badge and bar) otherwise keep Chromium
    drawing 60 frames a second for every open page: 0.16 of a core each, measured, on a
    machine whose CI is CPU-bound. test_browser_layout.py checks both kinds of user."""
    options.setdefault("reduced_motion", "reduce")
    return browser.new_context(**options)


@pytest.fixture
def browser_context(browser):
    context = new_context(browser, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(20_000)
    yield context
    context.close()


# --- the page's own signal that a live update has been applied (static/js/live.js) ------------
# How often a wait asks the page: Playwright's default asks at every animation frame, which
# keeps Chromium drawing 60 frames a second for as long as the wait lasts (0.07-0.2 of a
# core, measured, against 0.01 at this pace) on CI's CPU-bound passes.
POLL_MS = 100


def ask_page(page, expression: str, arg=None, **options):
    """Playwright's wait_for_function, asking the page every POLL_MS unless told."""
    options.setdefault("polling", POLL_MS)
    return page.wait_for_function(expression, arg=arg, **options)


DRAWN_AT = """([selector, seq]) => [...document.querySelectorAll(selector)]
    .some((e) => Number(e.dataset.liveSeq) >= seq)"""
# An arrow function, never a bare expression: Playwright evaluates a bare one again at each
# poll, which the Content-Security-Policy (no eval) refuses; a function it compiles once.
APPLIED_MORE = "(n) => Number(document.body.dataset.liveApplied) > n"


def head(run_id: str) -> int:
    """The run's last event number, as committed."""
    return Run.objects.get(pk=run_id).event_seq


def wait_drawn(page, seq: int, selector: str = "#run-page", timeout: float | None = None) -> None:
    """Wait until `selector` (the run page, a row of the run list, the operator run page's
    #run-poller) shows the run's events up to `seq` with what they made stale redrawn:
    the page's own signal, data-live-seq. Without `timeout`, the context's default."""
    ask_page(page, DRAWN_AT, arg=[selector, seq],
             timeout=None if timeout is None else timeout * 1000)


def wait_caught_up(page, run_id: str, selector: str = "#run-page") -> int:
    """Wait until the page shows the run as it is now (its last committed event); returns
    that event number. Before acting on live content: nothing is redrawn under the action
    unless the run moves again."""
    seq = head(run_id)
    wait_drawn(page, seq, selector)
    return seq


def applied_count(page) -> int:
    """How many live updates the page has applied so far (<body data-live-applied>)."""
    return int(page.get_attribute("body", "data-live-applied") or 0)


def wait_applied_after(page, count: int) -> None:
    """Wait until the page has applied a live update after the `count`-th."""
    ask_page(page, APPLIED_MORE, arg=count)


def wait_in_browser(page, predicate, what: str, timeout: float = 20) -> None:
    """Wait for a condition that route handlers or page events make true (a request held,
    a count they keep): Playwright runs them only while this thread is inside one of its
    calls, hence the short browser waits between looks."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        page.wait_for_timeout(50)


def screenshot(page, name: str) -> Path:
    """Save a screenshot as a test artifact (artifacts/ is git-ignored; the README's
    copies in docs/screenshots/ are refreshed by hand from these)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
