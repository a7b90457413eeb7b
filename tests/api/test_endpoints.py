"""The API's endpoints through Django's test client: the pages' permission rules,
scopes, bad input as 4xx with a detail, never a 500."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs import services
from runs.api.models import ApiToken
from runs.api.tokens import create, revoke
from runs.models import AuditEntry, Run
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db

ALL = ("read", "launch", "operate")


def post(client, path, body=None, **headers):
    return client.post(path, json.dumps(body or {}), content_type="application/json",
                       **headers)


def test_anonymous_gets_401_everywhere(db):
    client = Client()
    for path in ("/api/v1/agents", "/api/v1/runs", "/api/v1/runs/abc"):
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.json() == {"detail": "Unauthorized"}
    assert post(client, "/api/v1/runs", {"agent": "ticker"}).status_code == 401
    assert Run.objects.count() == 0


def test_a_wrong_token_is_401_not_the_session(users):
    client = Client(HTTP_AUTHORIZATION="Bearer aop_not-a-real-one")
    client.force_login(users["alice"])
    assert client.get("/api/v1/runs").status_code == 401


def test_agents_with_their_input_schemas(bearer):
    client = bearer("alice", "read")
    agents = {a["name"]: a for a in client.get("/api/v1/agents").json()}
    assert agents["ticker"]["input_schema"]["type"] == "object"
    one = client.get("/api/v1/agents/ticker").json()
    assert one == agents["ticker"]
    assert client.get("/api/v1/agents/nope").status_code == 404


def test_launch_needs_the_launch_scope_and_gives_202_and_location(bearer):
    read_only = bearer("alice", "read")
    response = post(read_only, "/api/v1/runs", {"agent": "ticker", "inputs": {"steps": 2}})
    assert response.status_code == 403 and "launch" in response.json()["detail"]
    assert Run.objects.count() == 0
    launcher = bearer("alice", "launch", "read")
    response = post(launcher, "/api/v1/runs", {"agent": "ticker", "inputs": {"steps": 2}})
    assert response.status_code == 202, response.content
    run = response.json()
    assert response["Location"] == f"/api/v1/runs/{run['id']}"
    assert run["status"] == "queued" and run["owner"] == "alice"
    assert Run.objects.get(pk=run["id"]).inputs["steps"] == 2


@pytest.mark.parametrize("body, status, where", [
    ({"agent": "nope"}, 422, "unknown agent"),
    ({"agent": "ticker", "inputs": {"steps": "many"}}, 422, "steps"),
    ({"inputs": {}}, 422, "agent"),
    ([1, 2], 422, ""),
])
def test_bad_launches_are_refused_and_change_nothing(bearer, body, status, where):
    response = post(bearer("alice", "launch"), "/api/v1/runs", body)
    assert response.status_code == status, response.content
    assert where in response.json()["detail"]
    assert Run.objects.count() == 0


@pytest.mark.parametrize("raw, problem", [
    (b'{"agent": "ticker", "inputs": {"a": "\\u0000"}}', "NUL"),
    (b'{"agent": "ticker", "inputs": {"a": NaN}}', "JSON number"),
    (b'{"agent": ', "JSON"),
    (b'\xff\xfe', "JSON"),
])
def test_bodies_that_are_not_clean_json_are_400(bearer, raw, problem):
    response = bearer("alice", "launch").post("/api/v1/runs", raw,
                                              content_type="application/json")
    assert response.status_code == 400, response.content
    assert problem.lower() in response.json()["detail"].lower()
    assert Run.objects.count() == 0


def test_another_users_run_is_404_and_an_operator_sees_it(users, bearer):
    run = services.run_launch(user=users["alice"], agent="ticker", inputs={})
    assert bearer("bob", *ALL).get(f"/api/v1/runs/{run.pk}").status_code == 404
    assert bearer("charlie", "read").get(f"/api/v1/runs/{run.pk}").status_code == 200
    assert bearer("alice", "read").get(f"/api/v1/runs/{run.pk}").json()["id"] == run.pk
    # list: one's own; every user's only for operators
    assert bearer("bob", "read").get("/api/v1/runs").json()["runs"] == []
    assert bearer("bob", "read").get("/api/v1/runs?all=true").status_code == 403
    listed = bearer("charlie", "read").get("/api/v1/runs?all=true&owner=alice").json()
    assert [r["id"] for r in listed["runs"]] == [run.pk]


def test_list_filters_and_pages(users, bearer):
    ids = [services.run_launch(user=users["alice"], agent="ticker", inputs={}).pk
           for _ in range(5)]
    services.run_cancel(run_id=ids[0], user=users["alice"], reason="x")
    client = bearer("alice", "read")
    first = client.get("/api/v1/runs?limit=2").json()
    second = client.get(f"/api/v1/runs?limit=2&cursor={first['next_cursor']}").json()
    third = client.get(f"/api/v1/runs?limit=2&cursor={second['next_cursor']}").json()
    seen = [r["id"] for page in (first, second, third) for r in page["runs"]]
    assert seen == list(reversed(ids)) and third["next_cursor"] is None
    cancelled = client.get("/api/v1/runs?status=cancelled").json()["runs"]
    assert [r["id"] for r in cancelled] == [ids[0]]
    assert client.get("/api/v1/runs?status=bogus").status_code == 422
    assert client.get("/api/v1/runs?limit=0").status_code == 422


def test_a_child_run_names_its_parent_and_a_parent_lists_its_children(users, bearer):
    parent = drive(services.run_launch(user=users["alice"], agent="fan_out", inputs={
        "children": 2, "steps": 1, "delay": 0, "child": "ticker"}).pk)
    client = bearer("alice", "read")
    children = client.get(f"/api/v1/runs?parent={parent.pk}").json()["runs"]
    assert len(children) == 2 and {c["parent_id"] for c in children} == {parent.pk}
    assert client.get(f"/api/v1/runs/{parent.pk}").json()["parent_id"] is None
    assert bearer("bob", "read").get(f"/api/v1/runs?parent={parent.pk}").json()["runs"] == []


def test_events_after_n_paged_and_checkpoints_and_effects(users, bearer):
    run = drive(services.run_launch(user=users["alice"], agent="ticker",
                                    inputs={"steps": 3, "delay": 0}).pk)
    client = bearer("alice", "read")
    page = client.get(f"/api/v1/runs/{run.pk}/events?after=0&limit=2").json()
    assert [e["seq"] for e in page["events"]] == [1, 2] and page["more"]
    seqs, after = [], 0
    while True:
        page = client.get(f"/api/v1/runs/{run.pk}/events?after={after}&limit=3").json()
        seqs += [e["seq"] for e in page["events"]]
        if not page["more"]:
            break
        after = page["events"][-1]["seq"]
    assert seqs == list(range(1, run.event_seq + 1))
    checkpoints = client.get(f"/api/v1/runs/{run.pk}/checkpoints").json()
    assert checkpoints and checkpoints[-1]["number"] == run.checkpoint_count
    one = client.get(f"/api/v1/runs/{run.pk}/checkpoints/{checkpoints[-1]['number']}").json()
    assert "state" in one
    assert client.get(f"/api/v1/runs/{run.pk}/checkpoints/99999").status_code == 404
    effects = client.get(f"/api/v1/runs/{run.pk}/effects").json()
    assert effects["total"] == len(effects["effects"])


def test_owner_cancels_others_cannot_operator_needs_a_reason(users, bearer):
    run = services.run_launch(user=users["alice"], agent="ticker", inputs={})
    path = f"/api/v1/runs/{run.pk}/cancel"
    assert post(bearer("alice", "read"), path).status_code == 403
    assert post(bearer("bob", *ALL), path).status_code == 404
    response = post(bearer("charlie", *ALL), path, {"reason": ""})
    assert response.status_code == 422 and "reason" in response.json()["detail"].lower()
    assert Run.objects.get(pk=run.pk).status == "queued"
    response = post(bearer("alice", "launch", "read"), path)
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert post(bearer("alice", "launch", "read"), path).status_code == 409


def test_answer_input(users, bearer):
    run = drive(services.run_launch(user=users["alice"], agent="ask", inputs={}).pk)
    assert run.status == "waiting"
    path = f"/api/v1/runs/{run.pk}/input"
    assert post(bearer("charlie", *ALL), path, {"value": "x"}).status_code == 403
    response = post(bearer("alice", "launch", "read"), path, {"value": 12})
    assert response.status_code == 422, response.content
    response = post(bearer("alice", "launch", "read"), path, {"value": {"name": "Ada"}})
    assert response.status_code == 200 and response.json()["status"] == "queued"
    assert post(bearer("alice", "launch", "read"), path,
                {"value": {"name": "Ada"}}).status_code == 409


def test_operator_actions_need_an_operator_and_the_operate_scope(users, bearer):
    run = services.run_launch(user=users["alice"], agent="ticker", inputs={})
    path = f"/api/v1/runs/{run.pk}/pause"
    assert post(bearer("alice", *ALL), path, {"reason": "r"}).status_code == 403
    assert post(bearer("charlie", "read", "launch"), path, {"reason": "r"}).status_code == 403
    assert post(bearer("charlie", "operate"), path, {"reason": ""}).status_code == 422
    response = post(bearer("charlie", "operate"), path, {"reason": "maintenance"})
    assert response.status_code == 200 and response.json()["status"] == "paused"
    audit = AuditEntry.objects.get(run_id=run.pk)
    assert (audit.actor, audit.action, audit.reason) == ("charlie", "pause", "maintenance")
    response = post(bearer("charlie", "operate"), f"/api/v1/runs/{run.pk}/resume",
                    {"reason": "done"})
    assert response.status_code == 200 and response.json()["status"] == "queued"


def test_rollback_with_preview_and_state_edit(users, bearer):
    run = drive(services.run_launch(user=users["alice"], agent="ticker",
                                    inputs={"steps": 3, "delay": 0}).pk)
    ops = bearer("charlie", "operate")
    preview = ops.get(f"/api/v1/runs/{run.pk}/rollback?checkpoint=1")
    assert preview.status_code == 200, preview.content
    assert preview.json()["checkpoint"] == 1
    assert ops.get(f"/api/v1/runs/{run.pk}/rollback?checkpoint=999").status_code == 404
    response = post(ops, f"/api/v1/runs/{run.pk}/rollback",
                    {"checkpoint": 1, "reason": "redo", "then": "pause"})
    assert response.status_code == 200, response.content
    rolled = response.json()
    assert rolled["branch"] == run.branch + 1 and rolled["status"] == "paused"
    number = bearer("charlie", "read").get(
        f"/api/v1/runs/{run.pk}/checkpoints").json()[-1]["number"]
    bad = post(ops, f"/api/v1/runs/{run.pk}/state",
               {"reason": "fix", "patch": [{"op": "replace", "path": "/nope/x", "value": 1}],
                "checkpoint": number})
    assert bad.status_code == 422, bad.content
    stale = post(ops, f"/api/v1/runs/{run.pk}/state",
                 {"reason": "fix", "patch": [{"op": "add", "path": "/note", "value": 1}],
                  "checkpoint": 1 if number != 1 else 2})
    assert stale.status_code == 409, stale.content
    done = post(ops, f"/api/v1/runs/{run.pk}/state",
                {"reason": "fix", "patch": [{"op": "add", "path": "/note", "value": "hi"}],
                 "checkpoint": number})
    assert done.status_code == 200, done.content
    assert done.json()["status"] == "paused"


def test_session_auth_needs_csrf_on_post(users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["alice"])
    assert client.get("/api/v1/runs").status_code == 200
    response = post(client, "/api/v1/runs", {"agent": "ticker"})
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    client.get("/account/tokens/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    response = post(client, "/api/v1/runs", {"agent": "ticker"}, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 202, response.content


def test_openapi_document_and_docs_are_served_locally(db):
    doc = Client().get("/api/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert "/api/v1/runs/{run_id}/events/stream" in doc["paths"]
    page = Client().get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "cdn" not in html.lower()
    scripts = re.findall(r'<script src="/static/([^"]+)"', html)
    assert scripts == ["vendor/swagger-ui/swagger-ui-bundle.js", "js/swagger-init.js"]
    assert all(finders.find(path) for path in scripts)  # the files are there to serve
    settings = json.loads(re.search(r'id="swagger-settings"[^>]*>(.*?)</script>', html, re.S)[1])
    assert settings["url"] == "/api/v1/openapi.json"


def test_a_nul_in_the_query_is_a_json_400(bearer):
    response = bearer("alice", "read").get("/api/v1/runs?agent=a%00b")
    assert response.status_code == 400
    assert "contains a NUL character" in response.json()["detail"]


def test_an_expired_or_revoked_token_is_401_and_changes_nothing(users):
    token, secret = create(users["alice"], name="laptop", scopes=ALL, days=1, max_days=365)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/runs").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now())  # its day is over
    assert client.get("/api/v1/runs").status_code == 401
    assert post(client, "/api/v1/runs", {"agent": "ticker"}).status_code == 401
    fresh, secret = create(users["alice"], name="desk", scopes=ALL, days=1, max_days=365)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert revoke(users["alice"], fresh.pk)
    assert post(client, "/api/v1/runs", {"agent": "ticker"}).status_code == 401
    assert Run.objects.count() == 0


def test_every_users_list_costs_the_same_queries_for_1_run_as_for_5(users, bearer):
    """The operators' list reads every field it returns in its one query: a field left
    deferred by the all-runs page's queryset was a query per run (154 queries for a page
    of 50 in bench/scale.py)."""
    client = bearer("charlie", "read")

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/api/v1/runs?all=true").status_code == 200
        return len(captured)

    services.run_launch(user=users["alice"], agent="ticker", inputs={})
    queries()  # the token's first use is written once
    one = queries()
    for _ in range(4):
        services.run_launch(user=users["alice"], agent="ticker", inputs={})
    assert queries() == one
