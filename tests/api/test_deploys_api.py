"""POST /api/v1/replay-check and POST /api/v1/upgrades (docs/api.md, docs/deploys.md):
operators only, through an 'operate' token; bad bodies are JSON 400/422 and change
nothing; the same verdicts and preview as the command and the Deploys page. Runs of
the versions contract's writer made by the real engine (tests/deploys/conftest.py)."""

from __future__ import annotations

import json

import pytest

from runs.models import AuditEntry, Run
from tests.deploys import conftest as deploys
from tests.deploys.conftest import (
    DIVERGES_AT_1,
    REG_V2,
    REG_V3,
    crashed,
    finished,
    launch,
    waiting_for_v1,
)

pytestmark = pytest.mark.django_db
_fresh_world, code_on_disk = deploys._fresh_world, deploys.code_on_disk  # the fixtures


def post(client, path, body):
    return client.post(path, json.dumps(body), content_type="application/json")


def state():
    return sorted(Run.objects.values_list("id", "status", "agent_version", "branch", "epoch")), \
        AuditEntry.objects.count()


def test_replay_check_gives_each_verdict(bearer, code_on_disk):
    in_flight = crashed(launch(), 5)
    ended = finished(launch(n=2))
    code_on_disk(REG_V3)
    response = post(bearer("charlie", "operate"), "/api/v1/replay-check", {})
    assert response.status_code == 200, response.content
    report = response.json()
    assert (report["passed"], report["checked"], report["diverging"],
            report["diverging_in_flight"], report["blocking"]) == (False, 2, 2, 1, [in_flight])
    rows = {row["run_id"]: row for row in report["runs"]}
    assert rows[ended]["in_flight"] is False and rows[ended]["verdict"] == "diverges"
    assert rows[in_flight]["divergence"]["message"] == (
        "diverges at step 1, call 1 (tests.audit_unit where the history has tests.post_unit)")
    code_on_disk(REG_V2)
    body = {"agent": "writer", "status": ["running"], "limit": 5}
    report = post(bearer("charlie", "operate"), "/api/v1/replay-check", body).json()
    assert (report["passed"], [r["run_id"] for r in report["runs"]]) == (True, [in_flight])
    assert report["runs"][0]["message"] == "replays cleanly (4 steps, 9 logged effects)"


@pytest.mark.parametrize("body, status, where", [
    ({"limit": 0}, 422, "limit"),
    ({"limit": 1001}, 422, "limit"),
    ({"limit": "many"}, 422, "limit"),
    ({"status": ["sleeping"]}, 422, "status"),
    ({"status": "queued"}, 422, "status"),
    ({"agent": "x" * 101}, 422, "agent"),
])
def test_replay_check_refuses_bad_bodies_as_json(bearer, body, status, where):
    response = post(bearer("charlie", "operate"), "/api/v1/replay-check", body)
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    assert where in response.json()["detail"]


def test_raw_bodies_that_are_not_json_are_refused_as_json(bearer):
    ops = bearer("charlie", "operate")
    for path in ("/api/v1/replay-check", "/api/v1/upgrades"):
        not_json = ops.post(path, "{", content_type="application/json")
        assert not_json.status_code == 400 and "detail" in not_json.json()
        text = ops.post(path, "{}", content_type="text/plain")
        assert text.status_code == 415 and "detail" in text.json()


def test_only_operators_with_the_operate_scope(users, bearer, code_on_disk):
    run_id = waiting_for_v1(launch())
    code_on_disk(REG_V3)
    before = state()
    for client in (bearer("alice", "read", "launch", "operate"), bearer("charlie", "read"),
                   bearer("charlie", "read", "launch")):
        for path, body in (("/api/v1/replay-check", {}),
                           ("/api/v1/upgrades", {"run_ids": [run_id], "reason": "v3"})):
            response = post(client, path, body)
            assert response.status_code == 403, (path, response.content)
            assert response.json()["detail"]
    from django.test import Client

    assert post(Client(), "/api/v1/upgrades", {"run_ids": [run_id]}).status_code == 401
    assert state() == before


def test_upgrades_preview_then_upgrade_with_an_audit_entry_each(bearer, code_on_disk):
    waiting = [waiting_for_v1(launch()) for _ in range(2)]
    ended = finished(launch(n=2))
    code_on_disk(REG_V3)
    ops = bearer("charlie", "operate")
    before = state()
    preview = post(ops, "/api/v1/upgrades", {"run_ids": waiting + [ended], "preview": True})
    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert state() == before  # a preview writes nothing
    assert (body["clean"], body["diverging"], body["effects_dropped"]) == (0, 2, 0)
    assert body["summary"].startswith("0 runs replay cleanly, 2 diverge: at step 1 (2); "
                                      "effects kept: ")
    assert body["summary"].endswith("; 1 skipped (see why)")
    assert body["skipped"] == {ended: "it has ended (succeeded)"}
    assert [row["run_id"] for row in body["runs"]] == waiting
    assert all(row["from_version"] == "1" and row["to_version"] == "3" for row in body["runs"])

    done = post(ops, "/api/v1/upgrades", {"run_ids": waiting + [ended], "reason": "deploy 3"})
    assert done.status_code == 200, done.content
    assert done.json()["upgraded"] == waiting
    assert list(done.json()["failed"]) == [ended]
    for run in Run.objects.filter(pk__in=waiting):
        assert (run.status, run.agent_version, run.attention, run.version_refused) == (
            "queued", "3", None, None)
    entries = AuditEntry.objects.filter(action="upgrade").order_by("id")
    assert [(e.run_id, e.actor, e.reason) for e in entries] == [
        (run_id, "charlie", "deploy 3") for run_id in waiting]


@pytest.mark.parametrize("body, status, where", [
    ({"run_ids": []}, 422, "run_ids"),
    ({"run_ids": "abc"}, 422, "run_ids"),
    ({"run_ids": ["../etc"]}, 422, "run_ids"),
    ({"run_ids": ["a" * 33]}, 422, "run_ids"),
    ({"run_ids": ["nosuchrun"], "preview": True}, 422, "no run with id nosuchrun"),
    ({"run_ids": ["nosuchrun"], "reason": "x"}, 422, "no run with id nosuchrun"),
    ({"run_ids": ["WAITING"]}, 422, "reason"),
    ({"run_ids": ["WAITING"], "reason": "   "}, 422, "reason"),
    ({"run_ids": ["WAITING"], "reason": "x" * 2001}, 422, "reason"),
    ({"run_ids": ["WAITING"], "preview": "maybe"}, 422, "preview"),
    ({"run_ids": [f"r{i}" for i in range(501)], "preview": True}, 400, "at most 500 runs"),
])
def test_upgrades_refuse_bad_bodies_and_change_nothing(bearer, code_on_disk, body, status,
                                                       where):
    run_id = waiting_for_v1(launch())
    code_on_disk(REG_V3)
    if isinstance(body["run_ids"], list):
        body = {**body, "run_ids": [run_id if i == "WAITING" else i for i in body["run_ids"]]}
    before = state()
    response = post(bearer("charlie", "operate"), "/api/v1/upgrades", body)
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    assert where in response.json()["detail"], response.json()
    assert state() == before
    assert Run.objects.get(pk=run_id).attention["message"] == DIVERGES_AT_1


def test_a_run_waiting_for_its_code_in_the_run_detail(bearer, users, code_on_disk):
    run_id = waiting_for_v1(launch(owner=users["alice"]))
    detail = bearer("alice", "read").get(f"/api/v1/runs/{run_id}").json()
    assert (detail["status"], detail["version_wait"]) == ("queued", DIVERGES_AT_1)
    assert detail["attention"]["kind"] == "version" and detail["code_fingerprint"]
    moved = launch(owner=users["alice"])
    from tests.deploys.conftest import moved_to_v2

    moved_to_v2(moved)
    detail = bearer("alice", "read").get(f"/api/v1/runs/{moved}").json()
    assert (detail["agent_version"], detail["version_wait"]) == ("2", None)
    events = bearer("alice", "read").get(f"/api/v1/runs/{moved}/events").json()["events"]
    [line] = [e["text"] for e in events if e["kind"] == "version"]
    assert line == "moved to version 2 at step 3 (replayed 3 steps, 7 logged effects)"


def test_a_history_that_cannot_be_read_is_skipped_never_a_500(bearer, code_on_disk):
    from runs.durable import upgrade
    from runs.models import Checkpoint
    from runs.storage import database_store

    broken = waiting_for_v1(launch())
    upgrade.upgrade(database_store(), broken, actor="ops", registry=REG_V3)  # branch 2
    Checkpoint.objects.filter(run_id=broken, branch=2).update(blob=b"\x00not a state")
    other = waiting_for_v1(launch())
    code_on_disk(REG_V3)
    ops = bearer("charlie", "operate")
    preview = post(ops, "/api/v1/upgrades", {"run_ids": [broken, other], "preview": True})
    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert body["skipped"][broken].startswith("its history cannot be replayed here: ")
    assert [row["run_id"] for row in body["runs"]] == [other]
    assert body["summary"].endswith("; 1 skipped (see why)")
    check = post(ops, "/api/v1/replay-check", {})
    assert check.status_code == 200
    assert {row["run_id"]: row["verdict"] for row in check.json()["runs"]}[broken] == "error"
