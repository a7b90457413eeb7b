"""The API's errors are JSON, always (docs/api.md), with the right status and, through a
real Daphne, its reason phrase: an unknown path, a method an endpoint lacks, a damaged
cursor, a body that is not sent as JSON, a body over either limit, a 422."""

from __future__ import annotations

import base64
import http.client
import json
from http import HTTPStatus

import pytest
from django.conf import settings
from django.test import Client

from runs.api.api import api
from runs.api.parsing import BODY_OVERHEAD
from runs.api.status_phrases import complete_twisted_phrases
from runs.models import Run

pytestmark = pytest.mark.django_db

LAUNCH = json.dumps({"agent": "ticker", "inputs": {}})


def json_error(response, status: int) -> str:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    return response.json()["detail"]


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("method, path", [
    ("get", "/api/v1/nope"), ("get", "/api/v1/runs/"), ("post", "/api/v1/runs/abc/nope"),
    ("get", "/api/v1/agents/x/y/z")])
def test_an_unknown_path_is_a_json_404(bearer, method, path):
    response = getattr(bearer("alice", "read", "launch"), method)(path)
    assert path in json_error(response, 404)
    assert json_error(getattr(Client(), method)(path), 404)  # anonymous: the same


def test_a_method_an_endpoint_lacks_is_a_json_405(bearer):
    response = bearer("alice", "read").delete("/api/v1/runs")
    assert "DELETE" in json_error(response, 405)
    assert set(response["Allow"].replace(" ", "").split(",")) == {"GET", "POST"}


@pytest.mark.parametrize("cursor", [
    "bogus", b64('{"x": 1}'), b64("yesterday|abc"), b64("2026-12-01T00:00:00+00:00|a b"),
    "%00%01", "=" * 8])
def test_a_damaged_cursor_is_a_400_that_names_it(bearer, users, cursor):
    from runs import services

    services.run_launch(user=users["alice"], agent="ticker", inputs={})
    detail = json_error(bearer("alice", "read").get(f"/api/v1/runs?cursor={cursor}"), 400)
    assert "cursor" in detail


def test_a_good_cursor_still_pages(bearer, users):
    from runs import services

    ids = [services.run_launch(user=users["alice"], agent="ticker", inputs={}).pk
           for _ in range(3)]
    client = bearer("alice", "read")
    first = client.get("/api/v1/runs?limit=2").json()
    rest = client.get(f"/api/v1/runs?limit=2&cursor={first['next_cursor']}").json()
    assert [r["id"] for r in first["runs"] + rest["runs"]] == list(reversed(ids))


@pytest.mark.parametrize("content_type", [
    "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
    "application/xml", "application/jsonx", ""])
def test_a_body_not_sent_as_json_is_a_415_and_launches_nothing(bearer, content_type):
    client = bearer("alice", "launch")
    response = client.generic("POST", "/api/v1/runs", LAUNCH, content_type=content_type)
    assert "application/json" in json_error(response, 415)
    assert Run.objects.count() == 0


@pytest.mark.parametrize("content_type", [
    "application/json", "application/json; charset=utf-8", "Application/JSON",
    "application/vnd.agentops+json"])
def test_json_media_types_are_taken(bearer, content_type):
    response = bearer("alice", "launch").generic("POST", "/api/v1/runs", LAUNCH,
                                                 content_type=content_type)
    assert response.status_code == 202, response.content
    assert Run.objects.count() == 1


@pytest.mark.parametrize("size", [
    settings.AGENTOPS["MAX_INPUT_BYTES"] + BODY_OVERHEAD + 1,  # the API's own limit
    1024 * 1024,
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1])  # Django's, met before the API's
def test_a_body_over_the_limit_is_a_json_413(bearer, size):
    body = json.dumps({"agent": "ticker", "inputs": {"pad": "x" * size}})
    response = bearer("alice", "launch").post("/api/v1/runs", body,
                                              content_type="application/json")
    assert "too large" in json_error(response, 413)
    assert Run.objects.count() == 0


def test_every_status_the_api_documents_has_a_reason_phrase_in_twisteds_table():
    from twisted.web import http as twisted_http

    complete_twisted_phrases()
    statuses = {int(code) for operation in _operations() for code in operation["responses"]}
    assert {400, 401, 403, 404, 409, 413, 415, 422, 503} <= statuses
    for status in statuses | {405, 500}:
        assert status in twisted_http.RESPONSES, status
    assert twisted_http.RESPONSES[422] == HTTPStatus(422).phrase.encode()


def _operations():
    schema = api.get_openapi_schema()
    return [op for path in schema["paths"].values() for op in path.values()]


# --- through a real Daphne ---------------------------------------------------------------
def request(server, method, path, body=b"", headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.reason, response.getheader("Content-Type"), \
            response.read()
    finally:
        connection.close()


def test_through_daphne_every_error_is_json_with_its_reason_phrase(server, make_token):
    token = {"Authorization": f"Bearer {make_token('alice', 'read', 'launch')}"}
    as_json = {**token, "Content-Type": "application/json"}
    too_large = json.dumps({"agent": "ticker", "inputs": {
        "pad": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}}).encode()
    cases = [
        (422, "POST", "/api/v1/runs", json.dumps({"agent": "no-such-agent"}).encode(), as_json),
        (413, "POST", "/api/v1/runs", too_large, as_json),
        (413, "POST", "/api/v1/runs", b'{"agent": "ticker", "inputs": {"pad": "'
         + b"x" * 1024 * 1024 + b'"}}', as_json),
        (415, "POST", "/api/v1/runs", LAUNCH.encode(), {**token, "Content-Type": "text/plain"}),
        (404, "GET", "/api/v1/no-such-endpoint", b"", token),
        (400, "GET", "/api/v1/runs?cursor=bogus", b"", token),
        (405, "DELETE", "/api/v1/runs", b"", token),
        (401, "GET", "/api/v1/runs", b"", {}),
    ]
    for status, method, path, body, headers in cases:
        got, reason, content_type, raw = request(server, method, path, body, headers)
        where = f"{method} {path[:40]}"
        assert got == status, (where, raw[:300])
        assert reason == HTTPStatus(status).phrase, (where, reason)
        assert content_type.startswith("application/json"), (where, content_type)
        assert json.loads(raw)["detail"], where
    assert Run.objects.count() == 0
