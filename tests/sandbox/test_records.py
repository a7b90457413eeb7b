import json
import threading
import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from sandbox.idempotency import body_digest
from sandbox.models import IdempotencyKey, KeyCall, Record

URL = "/sandbox/api/records"


def claim(digest, *, claimed_at, key="key-1"):
    """A key claimed by a request that has not finished."""
    return IdempotencyKey.objects.create(
        key=key, request_digest=digest, claim_token="dead", claimed_at=claimed_at
    )


def post(client, body, key="key-1", **headers):
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **headers)


@pytest.mark.django_db
class TestRecordsApi:
    def test_it_stores_the_first_request(self, client):
        response = post(client, {"unit": "row-1", "name": "Ada"})
        assert response.status_code == 201
        record = Record.objects.get()
        assert response.json() == {
            "id": record.pk,
            "key": "key-1",
            "payload": {"unit": "row-1", "name": "Ada"},
        }
        assert record.unit == "row-1"
        assert "Idempotent-Replayed" not in response.headers
        assert IdempotencyKey.objects.get().state == IdempotencyKey.DONE

    def test_it_replays_a_repeat_with_the_same_body(self, client):
        first = post(client, {"unit": "row-1", "name": "Ada"})
        # Same JSON, other key order and spacing: the canonical digest is equal.
        again = post(client, '{"name":   "Ada", "unit": "row-1"}')
        assert again.status_code == 201
        assert again.json() == first.json()
        assert again.headers["Idempotent-Replayed"] == "true"
        assert Record.objects.count() == 1
        calls = KeyCall.objects.get(key="key-1")
        assert (calls.calls, calls.replays) == (2, 1)

    def test_it_refuses_a_repeat_with_another_body(self, client):
        first = post(client, {"unit": "row-1", "name": "Ada"})
        response = post(client, {"unit": "row-1", "name": "Grace"})
        assert response.status_code == 422
        assert response.json()["error"] == "idempotency_key_reused"
        assert list(Record.objects.values_list("payload", flat=True)) == [first.json()["payload"]]
        assert IdempotencyKey.objects.get().response_body == first.json()
        assert KeyCall.objects.get().mismatches == 1

    def test_it_requires_the_header(self, client):
        response = post(client, {"unit": "row-1"}, key=None)
        assert response.status_code == 400
        assert response.json()["error"] == "missing_idempotency_key"
        assert not Record.objects.exists()
        assert not IdempotencyKey.objects.exists()
        assert not KeyCall.objects.exists()

    def test_it_refuses_an_overlong_key(self, client):
        response = post(client, {"unit": "row-1"}, key="k" * 256)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_idempotency_key"
        assert not KeyCall.objects.exists()

    @pytest.mark.parametrize("body", ["[1, 2]", "not json", "", '"a string"'])
    def test_it_requires_a_json_object(self, client, body):
        response = post(client, body)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_body"
        assert not Record.objects.exists()
        assert not IdempotencyKey.objects.exists()
        # The call still reached the outside world, so it is counted.
        assert KeyCall.objects.get().rejected == 1

    def test_a_bad_body_does_not_burn_the_key(self, client):
        post(client, "[1]")
        assert post(client, {"unit": "row-1"}).status_code == 201

    def test_it_answers_409_while_the_key_is_processing(self, client):
        claim(body_digest({"unit": "row-1"}), claimed_at=timezone.now())
        response = post(client, {"unit": "row-1"})
        assert response.status_code == 409
        assert response.json()["error"] == "request_in_progress"
        assert not Record.objects.exists()
        assert KeyCall.objects.get().conflicts == 1

    def test_it_takes_over_a_stale_claim(self, client, monkeypatch):
        # The request that claimed the key died with its process a minute ago.
        monkeypatch.setenv("AGENTOPS_SANDBOX_STALE_SECONDS", "5")
        claim(body_digest({"unit": "row-1"}), claimed_at=timezone.now() - timedelta(seconds=60))
        response = post(client, {"unit": "row-1"})
        assert response.status_code == 201
        assert Record.objects.count() == 1
        assert IdempotencyKey.objects.get().claim_token != "dead"

    def test_a_failure_before_the_work_releases_the_key(self, client):
        response = post(client, {"unit": "row-1"}, HTTP_X_SANDBOX_FAIL="before")
        assert response.status_code == 503
        assert not IdempotencyKey.objects.exists()
        assert post(client, {"unit": "row-1"}).status_code == 201
        assert Record.objects.count() == 1

    def test_a_lost_response_is_replayed_on_retry(self, client):
        lost = post(client, {"unit": "row-1"}, HTTP_X_SANDBOX_FAIL="after")
        assert lost.status_code == 503
        retry = post(client, {"unit": "row-1"})
        assert retry.status_code == 201
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert Record.objects.count() == 1

    def test_it_lists_records_by_key_prefix(self, client):
        post(client, {"unit": "a"}, key="run-1:0")
        post(client, {"unit": "b"}, key="run-1:1")
        post(client, {"unit": "c"}, key="run-2:0")
        listing = client.get(URL, {"prefix": "run-1:"}).json()
        assert listing["count"] == 2
        assert [r["key"] for r in listing["records"]] == ["run-1:0", "run-1:1"]
        assert client.get(URL).json()["count"] == 3

    def test_stats_count_calls_replays_and_duplicate_units(self, client):
        post(client, {"unit": "row-1"}, key="a")
        post(client, {"unit": "row-1"}, key="a")  # a replay: not a duplicate
        post(client, {"unit": "row-1"}, key="b")  # the same unit under a new key: a duplicate
        post(client, {"unit": "row-2"}, key="c")
        stats = client.get(f"{URL}/stats").json()
        assert stats["records"] == 3
        assert stats["keys"] == 3
        assert stats["calls"] == 4
        assert stats["replays"] == 1
        assert stats["duplicates"] == 1
        assert stats["duplicate_units"] == {"row-1": 2}


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_repeat_gets_409(http):
    """Two real overlapping requests: the database's unique constraint picks one."""
    body = {"unit": "row-7", "n": 7}
    answers = {}

    def slow_first():
        answers["first"] = http.post(
            "/api/records",
            json=body,
            headers={"Idempotency-Key": "race", "X-Sandbox-Delay-Ms": "1500"},
        )

    thread = threading.Thread(target=slow_first)
    thread.start()
    deadline = time.monotonic() + 10
    # Wait until the first request holds the key (its row is committed at once).
    while not IdempotencyKey.objects.filter(key="race").exists():
        assert time.monotonic() < deadline, "the first request never claimed the key"
        time.sleep(0.02)
    with httpx.Client(base_url=str(http.base_url), timeout=30) as other:
        second = other.post("/api/records", json=body, headers={"Idempotency-Key": "race"})
    thread.join(timeout=30)

    assert second.status_code == 409
    assert second.json()["error"] == "request_in_progress"
    assert answers["first"].status_code == 201
    assert Record.objects.filter(key="race").count() == 1
    # Once the first has finished, a repeat is a replay of its response.
    third = http.post("/api/records", json=body, headers={"Idempotency-Key": "race"})
    assert third.status_code == 201
    assert third.headers["Idempotent-Replayed"] == "true"
    assert third.json() == answers["first"].json()
    assert KeyCall.objects.get(key="race").calls == 3
