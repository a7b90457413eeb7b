"""The Deploys page in a browser, on a real Daphne whose code is deploy v3 of the writer:
runs of v1 that a v3 worker handed back are previewed as a group, then upgraded with a
reason. Takes the README's screenshot of the preview (artifacts/screenshots/deploys.png;
docs/screenshots/ holds a copy)."""

from __future__ import annotations

import pytest

from runs.durable import versions
from runs.models import AuditEntry, Run, WorkerHeartbeat
from tests.deploys.conftest import REG_V3, launch, waiting_for_v1
from tests.operator import conftest as operator_conftest
from tests.support.processes import Server, wait_until
from tests.web import conftest as web_conftest
from tests.web.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
operator_page = operator_conftest.operator_page  # the fixture: charlie, logged in
browser = web_conftest.browser  # the module's Chromium, which operator_page opens a page in


@pytest.fixture(scope="module")
def _v3_server(django_db_setup, tmp_path_factory):
    """Daphne with deploy v3's writer among its agents, as the web tier of that deploy."""
    server = Server(tmp_path_factory.mktemp("daphne"),
                    AGENTOPS_AGENT_MODULES="tests.workload_agents,tests.deploys.served_v3")
    yield server
    server.stop()


@pytest.fixture
def server(transactional_db, _v3_server):
    return _v3_server


def test_preview_then_upgrade_a_group_in_the_browser(server, operator_page):
    page = operator_page
    waiting = [waiting_for_v1(launch()) for _ in range(3)]
    WorkerHeartbeat.objects.create(host="web-2", pid=4100, cluster="blue",
                                   codes=versions.codes_of(REG_V3.classes()))
    page.goto(f"{server.url}/ops/")
    page.click("nav.ops-nav >> text=Deploys")
    page.wait_for_selector("section.version-group")
    assert page.locator("section.version-group tr[data-run]").count() == 3
    page.click("section.version-group button[name=group]")
    summary = page.wait_for_selector("#preview-summary")
    assert summary.inner_text().startswith("0 runs replay cleanly, 3 diverge: at step 1 (3); "
                                           "effects kept: 18; effects dropped: 0")
    assert page.locator("#preview-runs tr.diverges").count() == 3
    assert page.locator("#live-codes tr[data-code]").inner_text().startswith("writer\t3")
    screenshot(page, "deploys")
    assert AuditEntry.objects.count() == 0  # the preview wrote nothing

    page.fill("#upgrade-confirm input[name=reason]", "deploy 3: the audit step")
    page.click("#upgrade-confirm button[type=submit]")
    page.wait_for_selector("text=Upgraded 3 of 3 run(s)")
    wait_until(lambda: AuditEntry.objects.filter(action="upgrade").count() == 3, 10,
               message="an audit entry per run")
    assert {(e.run_id, e.reason, e.actor) for e in AuditEntry.objects.all()} == {
        (run_id, "deploy 3: the audit step", "charlie") for run_id in waiting}
    assert set(Run.objects.filter(pk__in=waiting).values_list("agent_version", "status")) == {
        ("3", "queued")}
    assert page.locator("#no-version-waits").is_visible()
