"""Operator-test helpers: an operator's client, runs launched and executed in-process."""

from __future__ import annotations

import pytest

from runs import services
from runs.durable import Outcome, WorkerConfig, execute_run
from runs.durable.faults import faults
from runs.models import Run
from runs.operator.groups import ensure_operators_group
from tests.operator import agents


@pytest.fixture(autouse=True)
def _fresh_outside_world():
    agents.reset()
    yield
    faults.disarm()


@pytest.fixture
def ops(client, users):
    """A test client logged in as charlie, the operator."""
    # A transactional test's flush empties auth_group_permissions: put it back.
    ensure_operators_group()
    client.force_login(users["charlie"])
    return client


def launch(user, agent: str = "ledger", **inputs) -> Run:
    inputs.setdefault("delay", 0) if agent == "ledger" else None
    return services.run_launch(user=user, agent=agent, inputs=inputs)


def edit_state(ops, run_id: str, patch: list, reason: str):
    """Edit a run's state through the editor as an operator does: preview, then confirm."""
    import json

    url = f"/ops/runs/{run_id}/state/"
    data = {"checkpoint": ops.get(url).context["checkpoint"].number, "op": "replace",
            "json_patch": json.dumps(patch), "reason": reason}
    preview = ops.post(url, {**data, "preview": "1"})
    assert preview.status_code == 200, preview.content.decode()[-2000:]
    return ops.post(url, {**data, "confirm": "1", "previewed": preview.context["preview_token"]})


def config(owner: str = "testhost:4242:tok") -> WorkerConfig:
    # A lease far longer than any test: the renewal thread never writes.
    return WorkerConfig(owner=owner, lease_seconds=1000, slice_seconds=1e9)


def drive(run_id: str, owner: str = "testhost:4242:tok") -> str:
    """Execute the run in this process until it stops (ends, pauses, waits, ...)."""
    outcome = Outcome.YIELDED
    while outcome == Outcome.YIELDED:
        outcome = execute_run(services.store(), run_id, config(owner))
    return outcome


class SimulatedCrash(BaseException):
    """The worker dies here: nothing after it runs and the lease is never released."""


def crash_after_charge(run_id: str, charges: int) -> None:
    """Run until the `charges`-th charge has happened but is not logged, then 'die'."""
    target = agents.CALLS["charge"] + charges

    def action():
        if agents.CALLS["charge"] >= target:
            faults.disarm()
            raise SimulatedCrash()

    faults.arm("after_effect_before_log", action)
    try:
        drive(run_id)
    except SimulatedCrash:
        pass
    else:  # pragma: no cover - the test's premise failed
        raise AssertionError("the run finished without reaching the fault point")
    from django.utils import timezone

    Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now())  # the lease runs out


def in_doubt_run(user, charges: int = 2) -> Run:
    """A run in needs_attention with its `charges`-th charge in doubt."""
    run = launch(user, steps=4)
    crash_after_charge(run.pk, charges)
    assert drive(run.pk, owner="testhost:4343:new") == Outcome.NEEDS_ATTENTION
    run.refresh_from_db()
    assert run.attention["kind"] == "in_doubt", run.attention
    return run


# --- the browser -----------------------------------------------------------------------------
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def operator_page(monkeypatch, server, users):
    """A browser page logged in as charlie on the real Daphne server. Started after
    the database fixtures: Playwright's sync API keeps an event loop in this thread,
    and the ORM calls the test makes between browser steps are plain sync calls."""
    import os

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    ensure_operators_group()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1360, "height": 1000})
        context.set_default_timeout(20_000)
        page = context.new_page()
        page.goto(f"{server.url}/login/")
        page.fill("#id_username", "charlie")
        page.fill("#id_password", "charlie-pass-1")
        page.click("button[type=submit]")
        page.wait_for_load_state()
        yield page
        context.close()
        browser.close()
