"""The operators' Deploys page (/ops/deploys/): the runs waiting for a worker of their
code, grouped by agent and code with why they wait, the codes the live clusters serve,
and the bulk upgrade: a preview that writes nothing, then a confirm with a reason that
writes an audit entry per run."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.deploys import services
from runs.durable import versions
from runs.models import AuditEntry, Run, WorkerHeartbeat
from tests.deploys.conftest import (
    DIVERGES_AT_1,
    REG,
    REG_V3,
    crashed,
    handed_off,
    launch,
    waiting_for_v1,
)

pytestmark = pytest.mark.django_db
URL = "/ops/deploys/"


def heartbeat(registry, pid: int, *, stopping=False, seen_ago: float = 0, cluster="c"):
    return WorkerHeartbeat.objects.create(
        host="deployhost", pid=pid, cluster=cluster, stopping=stopping,
        last_seen=timezone.now() - timedelta(seconds=seen_ago),
        codes=versions.codes_of(registry.classes()))


def state():
    return sorted(Run.objects.values_list("id", "status", "agent_version", "branch", "epoch",
                                          "version_refused")), AuditEntry.objects.count()


def group_key(run_id: str) -> str:
    run = Run.objects.get(pk=run_id)
    return f"{run.code_fingerprint}/{run.agent}"


def texts(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def messages_of(response):
    return [str(m) for m in response.context["messages"]]


def test_the_page_groups_the_waiting_runs_and_shows_the_live_codes(ops, code_on_disk):
    waiting = [waiting_for_v1(launch()) for _ in range(2)]
    handed_off(launch(), 2)  # queued for its own code's workers: it waits for nothing
    heartbeat(REG_V3, 1, cluster="blue")
    heartbeat(REG, 2, stopping=True, cluster="old")   # stopping: serves nothing any more
    heartbeat(REG, 3, seen_ago=600, cluster="dead")   # silent: gone
    code_on_disk(REG_V3)
    response = ops.get(URL)
    assert response.status_code == 200
    body = texts(response)
    [group] = response.context["groups"]
    assert (group.agent, group.version, [r.pk for r in group.runs]) == ("writer", "1", waiting)
    assert group.divergences == [(DIVERGES_AT_1, 2)]
    assert f'{DIVERGES_AT_1} <span class="muted">(2 runs)</span>' in body
    assert "No live cluster serves this code:" in body
    assert [(c.agent, c.version, c.clusters) for c in response.context["codes"]] == [
        ("writer", "3", ("blue deployhost:1",))]
    assert 'aria-current="page">Deploys</a>' in body  # in the operators' navigation

    heartbeat(REG, 4, cluster="green")  # a live cluster of v1's code: it takes them
    body = texts(ops.get(URL))
    assert "Served by green deployhost:4: its workers will take these runs." in body


def test_preview_of_a_group_then_confirm_with_a_reason(ops, code_on_disk):
    waiting = [waiting_for_v1(launch()) for _ in range(3)]
    code_on_disk(REG_V3)
    before = state()
    preview = ops.post(URL, {"do": "preview", "group": group_key(waiting[0])})
    assert preview.status_code == 200, texts(preview)[-2000:]
    assert state() == before  # a preview writes nothing
    body = texts(preview)
    # each: 3 steps checkpointed (kept), then step 4's post (carried over to the new code)
    assert ("0 runs replay cleanly, 3 diverge: at step 1 (3); effects kept: 18; effects "
            "dropped: 0; 3 effects after a divergence are carried over") in body
    assert preview.context["preview_ids"] == waiting
    rows = re.findall(r'<tr data-run="(\w+)" class="diverges">', body)
    assert rows == waiting
    confirm = re.search(r'<form method="post" id="upgrade-confirm".*?</form>', body).group(0)
    assert re.findall(r'name="run" value="(\w+)"', confirm) == waiting

    refused = ops.post(URL, {"do": "upgrade", "run": waiting, "reason": " "})
    assert refused.status_code == 400
    assert "Give a reason: it goes into the audit trail of each run." in texts(refused)
    assert refused.context["preview"]["diverging"] == 3  # the preview stays on screen
    assert state() == before

    done = ops.post(URL, {"do": "upgrade", "run": waiting, "reason": "deploy 3"}, follow=True)
    assert messages_of(done) == ["Upgraded 3 of 3 run(s): each is queued on this code, and its "
                                 "audit trail has the reason."]
    for run in Run.objects.filter(pk__in=waiting):
        assert (run.status, run.agent_version, run.branch, run.attention) == ("queued", "3", 2,
                                                                               None)
    entries = AuditEntry.objects.filter(action="upgrade").order_by("id")
    assert [(e.run_id, e.actor, e.reason, e.before["status"], e.after["status"])
            for e in entries] == [(run_id, "charlie", "deploy 3", "queued", "queued")
                                  for run_id in waiting]
    assert "No run waits for a worker of its code." in texts(done)


def test_preview_of_the_ticked_runs_only(ops, code_on_disk):
    waiting = [waiting_for_v1(launch()) for _ in range(3)]
    code_on_disk(REG_V3)
    response = ops.post(URL, {"do": "preview", "run": waiting[1:]})
    assert response.status_code == 200
    assert response.context["preview_ids"] == waiting[1:]
    assert [row["run_id"] for row in response.context["preview"]["runs"]] == waiting[1:]


def test_a_group_larger_than_a_request_is_previewed_a_batch_at_a_time(ops, code_on_disk,
                                                                      monkeypatch):
    waiting = [waiting_for_v1(launch()) for _ in range(3)]
    code_on_disk(REG_V3)
    monkeypatch.setattr(services, "MAX_RUNS", 2)
    response = ops.post(URL, {"do": "preview", "group": group_key(waiting[0])})
    assert response.context["preview_ids"] == waiting[:2]
    assert "The group has 3 runs: these are its first 2." in texts(response)


@pytest.mark.parametrize("data, error", [
    ({"do": "preview"}, "Choose runs: tick some, or preview a whole group."),
    ({"do": "preview", "group": "0123456789abcdef/gone"}, "No run of that code waits any more"),
    ({"do": "preview", "run": ["../x"]}, "Run ids are 1-32 letters, digits"),
    ({"do": "preview", "run": [f"r{i}" for i in range(501)]}, "At most 500 runs at once"),
    ({"do": "preview", "run": ["nosuchrun"]}, "run_ids: no run with id nosuchrun"),
    ({"do": "upgrade", "reason": "x"}, "Preview the runs to upgrade first."),
    ({"do": "explode", "run": ["WAITING"]}, "Select a valid choice"),
])
def test_bad_requests_are_400_and_change_nothing(ops, code_on_disk, data, error):
    run_id = waiting_for_v1(launch())
    code_on_disk(REG_V3)
    data = {**data, "run": [run_id if r == "WAITING" else r for r in data.get("run", [])]}
    before = state()
    response = ops.post(URL, data)
    assert response.status_code == 400
    assert error in texts(response)
    assert state() == before


def test_an_upgrade_of_a_run_that_ended_meanwhile_says_so(ops, code_on_disk):
    run_id = waiting_for_v1(launch())
    code_on_disk(REG_V3)
    from runs import services as run_services

    run_services.run_cancel(run_id=run_id, user="ops", reason="no longer needed")
    done = ops.post(URL, {"do": "upgrade", "run": [run_id], "reason": "deploy"}, follow=True)
    assert messages_of(done)[0].startswith("Upgraded 0 of 1 run(s)")
    assert messages_of(done)[1].startswith(f"1 not upgraded: {run_id[:8]}: ")


def test_operators_only(client, users, code_on_disk):
    run_id = waiting_for_v1(launch())
    assert client.get(URL).status_code == 302  # to the login page
    client.force_login(users["alice"])
    before = state()
    assert client.get(URL).status_code == 403
    assert client.post(URL, {"do": "upgrade", "run": [run_id], "reason": "x"}).status_code == 403
    assert state() == before


def test_a_run_that_replays_cleanly_is_previewed_as_such(ops, code_on_disk):
    from tests.deploys.conftest import REG_V2

    run_id = crashed(launch(), 4)  # running, not waiting: selected by hand
    code_on_disk(REG_V2)
    preview = ops.post(URL, {"do": "preview", "run": [run_id]}).context["preview"]
    assert (preview["clean"], preview["diverging"], preview["effects_kept"]) == (1, 0, 7)
    assert preview["runs"][0]["kept"] == 7 and preview["runs"][0]["carried"] == 0
