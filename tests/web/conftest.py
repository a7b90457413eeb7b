"""Fixtures for the user's pages: logged-in clients, runs executed in-process,
websocket communicators with a real session, and a browser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
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


@pytest.fixture
def browser_context(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(20_000)
    yield context
    context.close()


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
