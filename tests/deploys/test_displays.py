"""A run waiting for a worker of its code, a move between codes, a patch marker and an
effect carried over by an upgrade, as every surface shows them: the run page, the
operator pages (run, dashboard, attention queue), `runs show` and `runs watch`, and the
stall rule's why. Runs made by the real engine on the database."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from runs.durable import Outcome, control, execute_run, upgrade
from runs.models import AuditEntry, Effect, Run
from runs.operator import selectors as ops_selectors
from runs.storage import database_store
from runs.worker import stalls
from tests.deploys.conftest import (
    DIVERGES_AT_1,
    REG_V3,
    config,
    crashed,
    launch,
    moved_to_v2,
    waiting_for_v1,
)
from tests.durable.agents_versions import REG_PATCHED

pytestmark = pytest.mark.django_db
MOVED = "moved to version 2 at step 3 (replayed 3 steps, 7 logged effects)"


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def alice(client, users):
    client.force_login(users["alice"])
    return client


def runs_cli(*args) -> str:
    out = io.StringIO()
    try:
        call_command("runs", *args, stdout=out, stderr=io.StringIO())
    except SystemExit:
        pass
    return out.getvalue()


# --- a run waiting for its code --------------------------------------------------------------
def test_the_run_page_says_why_it_waits(alice, users):
    run_id = waiting_for_v1(launch(owner=users["alice"]))
    page = text(alice.get(f"/runs/{run_id}/"))
    assert (f'<strong>Waiting for its code:</strong> {DIVERGES_AT_1}. A worker of version 1 '
            "takes it, or an operator moves it to the new code.") in page
    panel = text(alice.get(f"/runs/{run_id}/panels/", {"p": "actions"}))
    assert 'id="version-wait"' in panel and DIVERGES_AT_1 in panel


def test_a_waiting_run_handed_back_says_its_timer_is_due_and_why_it_waits(alice, users, ops):
    run_id = waiting_for_v1(launch(owner=users["alice"]))
    # as a run on a due timer is handed back: it stays waiting (runs/durable/upgrade.py)
    Run.objects.filter(pk=run_id).update(status="waiting", wake_at=timezone.now())
    page = text(alice.get(f"/runs/{run_id}/"))
    assert "Its timer is due: it waits for a worker of its own code (see above)." in page
    assert f"<strong>Waiting for its code:</strong> {DIVERGES_AT_1}." in page
    assert ops.get(f"/ops/runs/{run_id}/").context["actions"][0] == "upgrade"


def test_the_operator_run_page_shows_the_divergence_and_offers_upgrade(ops, code_on_disk):
    run_id = waiting_for_v1(launch())
    page = ops.get(f"/ops/runs/{run_id}/")
    body = text(page)
    assert f"<strong>Waiting for a worker of its code</strong>: {DIVERGES_AT_1}." in body
    assert "call tests.post_unit(1)" in body and "call tests.audit_unit(1)" in body
    assert page.context["actions"][0] == "upgrade"
    assert 'name="action" value="upgrade"' in body

    code_on_disk(REG_V3)
    done = ops.post(f"/ops/runs/{run_id}/act/", {"action": "upgrade", "reason": "v3 is out"},
                    follow=True)
    assert [str(m) for m in done.context["messages"]][0].startswith(
        "Continuing on the current version")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.agent_version, run.attention) == ("queued", "3", None)
    [entry] = AuditEntry.objects.filter(run_id=run_id)
    assert (entry.action, entry.reason, entry.actor) == ("upgrade", "v3 is out", "charlie")


def test_the_dashboard_and_the_attention_queue_list_it(ops):
    run_id = waiting_for_v1(launch())
    waiting_since = Run.objects.get(pk=run_id).updated_at
    dashboard = text(ops.get("/ops/"))
    assert f'<span class="small warn version-wait">{DIVERGES_AT_1}</span>' in dashboard
    assert "1 run needs attention" in dashboard
    queue = ops.get("/ops/attention/")
    assert [run.pk for run in queue.context["runs"]] == [run_id]  # queued, not stalled
    assert f"<strong>Waiting for a worker of its code</strong>: {DIVERGES_AT_1}." in text(queue)
    # once stalled it is listed once, its why the attention's message
    Run.objects.filter(pk=run_id).update(updated_at=waiting_since - timedelta(minutes=2))
    assert [run.pk for run in ops_selectors.attention_queue()] == [run_id]
    assert ops_selectors.attention_count() == 1


def queued_seconds(text: str) -> int:
    """The seconds a `why` says the run has been queued, after the attention's message."""
    found = re.search(rf"{re.escape(DIVERGES_AT_1)} \(queued (\d+) s\)", text)
    assert found, text
    return int(found.group(1))


def test_the_stall_rule_gives_the_attention_message_as_why():
    run_id = waiting_for_v1(launch())
    updated = timezone.now() - timedelta(seconds=75)
    Run.objects.filter(pk=run_id).update(updated_at=updated)
    run = Run.objects.get(pk=run_id)
    stall = stalls.stall_of(run)
    assert stall.kind == stalls.UNCLAIMED
    row = Run.objects.filter(pk=run_id).values(*stalls.FIELDS).get()
    assert stalls.stall_of(row).why == stall.why  # the live feeds' rows say the same
    assert Run.objects.filter(stalls.stalled_q(kind=stalls.UNCLAIMED)).count() == 1
    shown = runs_cli("show", run_id)
    assert "STALLED since" in shown
    assert "WAITING FOR ITS CODE" not in shown  # said once, in the stall
    # 75 s at the update; the command-line client, a process of its own, may read the
    # clock seconds later on a loaded machine
    since = (timezone.now() - updated).total_seconds()
    assert 75 <= queued_seconds(stall.why) <= queued_seconds(shown) <= since


def test_runs_show_says_why_it_waits(users):
    run_id = waiting_for_v1(launch())
    shown = runs_cli("show", run_id)
    assert f"  WAITING FOR ITS CODE: {DIVERGES_AT_1}" in shown
    data = json.loads(runs_cli("show", run_id, "--json"))
    assert (data["status"], data["version_wait"]) == ("queued", DIVERGES_AT_1)
    assert data["code_fingerprint"] == Run.objects.get(pk=run_id).code_fingerprint
    assert json.loads(runs_cli("show", moved_to_v2(launch()), "--json"))["version_wait"] is None


# --- a move between codes ----------------------------------------------------------------------
def test_a_move_reads_as_a_sentence_everywhere(alice, ops, users):
    run_id = moved_to_v2(launch(owner=users["alice"]))
    page = text(alice.get(f"/runs/{run_id}/"))
    assert f'<span class="ev-kind">version</span><span class="ev-text">{MOVED}</span>' in page
    assert '<span id="run-version" class="muted small">v2</span>' in page
    assert f"<strong>version</strong> {MOVED}" in text(ops.get(f"/ops/runs/{run_id}/"))
    watched = runs_cli("watch", run_id, "--from", "1").splitlines()
    [line] = [line for line in watched if " version " in line]
    assert re.fullmatch(rf"#\d+ version {re.escape(MOVED)}", line)


def test_an_operators_upgrade_says_so():
    from runs.deploys.words import moved_text

    assert moved_text({"from_version": "1", "to_version": "3", "step": 3, "how": "operator",
                       "replayed_steps": 0, "effects": 1}) == (
        "moved to version 3 at step 3 (replayed 0 steps, 1 logged effect) by an operator's "
        "upgrade")
    assert moved_text({"from_version": "1", "to_version": "1", "to_code": "0123456789abcdef",
                       "step": 2, "how": "replay", "replayed_steps": 2, "effects": 4}) == (
        "moved to version 1's new code 01234567 at step 2 (replayed 2 steps, 4 logged effects)")


# --- patch markers and carried effects ---------------------------------------------------------
def test_carried_effects_say_so_instead_of_a_negative_call_number(alice, ops, users):
    run_id = crashed(launch(owner=users["alice"]), 5)
    Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - timedelta(hours=1))
    outcome = execute_run(database_store(), run_id, config("deploy-test:3:v3"), registry=REG_V3)
    assert outcome == Outcome.VERSION_WAIT
    upgrade.upgrade(database_store(), run_id, actor="ops", reason="v3", registry=REG_V3)
    carried = list(Effect.objects.filter(run_id=run_id, seq__lt=0))
    assert len(carried) == 3  # step 4's post and note, step 5's post
    page = text(alice.get(f"/runs/{run_id}/"))
    assert page.count("carried over, not asked for again yet") == 3
    assert "#-1" not in page
    ops_page = text(ops.get(f"/ops/runs/{run_id}/"))
    assert ops_page.count("/carried over, not asked for again yet</td>") == 3
    effects = alice.get(f"/api/v1/runs/{run_id}/effects").json()["effects"]  # the session
    assert sorted(e["seq"] for e in effects if e["carried"]) == [-2, -1, -1]


def test_a_patch_marker_shows_as_one(alice, ops, users):
    run_id = control.launch(database_store(), agent="writer", inputs={"n": 2},
                            registry=REG_PATCHED, owner=str(users["alice"].pk)).id
    assert execute_run(database_store(), run_id, config(), registry=REG_PATCHED) == \
        Outcome.SUCCEEDED
    assert Effect.objects.filter(run_id=run_id, kind="patch", tool="audit").count() == 2
    page = text(alice.get(f"/runs/{run_id}/"))
    assert page.count(">patch audit</span>") == 2
    assert '<span class="tag">patch</span>' not in page
    assert text(ops.get(f"/ops/runs/{run_id}/")).count('<td class="mono">patch audit</td>') == 2


# --- the admin ---------------------------------------------------------------------------------
def test_the_admin_shows_a_runs_code_and_the_code_that_refused_it(client, django_user_model):
    from runs.durable import versions
    from runs.models import WorkerHeartbeat

    client.force_login(django_user_model.objects.create_superuser("root", "r@x.org", "pw-12345"))
    run_id = waiting_for_v1(launch())
    run = Run.objects.get(pk=run_id)
    page = text(client.get(f"/admin/runs/run/{run_id}/change/"))
    v3 = versions.fingerprint(REG_V3.agents["writer"])
    assert run.code_fingerprint in page and run.version_refused == v3 and v3 in page
    assert "Version refused" in page
    WorkerHeartbeat.objects.create(host="h", pid=1, codes=versions.codes_of(REG_V3.classes()))
    beats = text(client.get("/admin/runs/workerheartbeat/"))
    assert f"writer v3 {v3}" in beats
    found = client.get("/admin/runs/run/", {"q": run.code_fingerprint})
    assert run_id[:12] in text(found) or run_id in text(found)
