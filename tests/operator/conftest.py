"""Operator-test helpers: an operator's client, runs launched and executed in-process, an
operator's browser page and the waits on its live updates."""

from __future__ import annotations

import math

import pytest

from runs import services
from runs.durable import Outcome, WorkerConfig, execute_run
from runs.durable.faults import faults
from runs.models import Run
from runs.operator.groups import ensure_operators_group
from tests.operator import agents
from tests.support.processes import wait_until
from tests.web.conftest import (  # noqa: F401 (fixtures)
    ask_page,
    browser,
    log_in,
    new_context,
    sockets,
    wait_caught_up,
)


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
    return WorkerConfig(owner=owner, lease_seconds=1000, slice_seconds=math.inf)


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
LIVE = '#live-indicator[data-state="live"]'
# static/js/operator_live.js: the socket is watching and every fetch it or the fallback
# started has been answered and drawn (an arrow function: the CSP allows no eval).
QUIET = """() => { const s = window.opsLive;
    return Boolean(s && s.live && s.answered >= s.refreshes + s.polls); }"""


def wait_quiet(page) -> None:
    """Wait until an operator page is live and drawn as it is now: its socket watches, and
    the refresh it makes on (re)connecting, or any other fetch out, is answered and swapped
    in. Before acting on a partial that a live refresh replaces (the dashboard's table,
    the attention list): nothing replaces it under the action unless something changes."""
    page.wait_for_selector(LIVE)
    ask_page(page, QUIET)


def wait_shown(page, run_id: str, status: str, timeout: float = 20) -> None:
    """The run got to `status` (its workers' doing: `timeout` is theirs), and the operator
    run page shows it: drawn at the run's last event, the page's own signal (the
    #run-poller's data-live-seq). The summary and the controls are then those of that
    status, and stay as they are until the run's course changes."""
    wait_until(lambda: Run.objects.get(pk=run_id).status == status, timeout,
               message=f"the run to be {status}")
    wait_caught_up(page, run_id, "#run-poller")
    assert page.get_attribute("#run-summary [data-status]", "data-status") == status


@pytest.fixture
def operator_page(server, users, browser):  # noqa: F811  (the fixture imported above)
    """A browser page logged in as charlie on the real Daphne server, in a context of its
    own in the module's Chromium (tests/web/conftest.py: `browser`, which lets the test's
    ORM calls run beside Playwright's event loop in this thread)."""
    ensure_operators_group()
    context = new_context(browser, viewport={"width": 1360, "height": 1000})
    context.set_default_timeout(20_000)
    page = context.new_page()
    log_in(page, server.url, "charlie", "charlie-pass-1")
    yield page
    context.close()
