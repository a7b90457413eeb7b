"""The audit: the report page and ``manage.py sandbox``."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sandbox.models import KeyCall, Notification, Record, SiteGeneration


def post_record(client, key, unit):
    return client.post(
        "/sandbox/api/records",
        {"unit": unit},
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def sandbox(*args):
    out = StringIO()
    call_command("sandbox", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def traffic(client):
    post_record(client, "run-1:0", "row-1")
    post_record(client, "run-1:0", "row-1")  # a retry, answered by replay
    post_record(client, "run-1:1", "row-2")
    client.post("/sandbox/api/notifications", {"unit": "n-1"}, content_type="application/json")
    client.post("/sandbox/api/notifications", {"unit": "n-1"}, content_type="application/json")


@pytest.mark.django_db
def test_report_json_figures(traffic):
    figures = json.loads(sandbox("report", "--json"))
    assert figures["ok"] is True
    assert figures["records"]["records"] == 2
    assert figures["records"]["keys"] == 2
    assert figures["records"]["calls"] == 3
    assert figures["records"]["replays"] == 1
    assert figures["records"]["duplicates"] == 0
    assert figures["calls_histogram"] == {"1": 1, "2": 1}
    assert [(k["key"], k["calls"], k["records"]) for k in figures["calls_per_key"]] == [
        ("run-1:0", 2, 1),
        ("run-1:1", 1, 1),
    ]
    assert figures["notifications"]["per_unit"] == {"n-1": 2}
    assert figures["notifications"]["units_notified_more_than_once"] == ["n-1"]


@pytest.mark.django_db
def test_report_fails_on_a_unit_written_under_two_keys(client, traffic):
    post_record(client, "run-1:1-after-rollback-without-dedup", "row-2")
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("sandbox", "report", "--json", stdout=out)
    assert caught.value.returncode == 1
    figures = json.loads(out.getvalue())
    assert figures["ok"] is False
    assert figures["records"]["duplicate_units"] == {"row-2": 2}


@pytest.mark.django_db
def test_report_text(traffic):
    text = sandbox("report")
    assert "records 2" in text and "run-1:0: 2 calls" in text and "ok:" in text


@pytest.mark.django_db
def test_the_report_page_highlights_repeated_keys(client, traffic):
    response = client.get("/sandbox/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<tr class="repeat">\n<td><code>run-1:0</code>' in html
    assert "<tr>\n<td><code>run-1:1</code>" in html
    assert "No duplicated side effect" in html
    assert "http://" not in html and "https://" not in html  # no external assets


@pytest.mark.django_db
def test_bump_generation_and_reset(traffic):
    assert sandbox("bump-generation").strip() == "generation 1"
    assert sandbox("bump-generation").strip() == "generation 2"
    assert SiteGeneration.objects.get().generation == 2
    sandbox("reset")
    for model in (Record, KeyCall, Notification, SiteGeneration):
        assert not model.objects.exists()


@pytest.mark.django_db
def test_reset_over_http(client, traffic):
    response = client.post("/sandbox/api/reset")
    assert response.status_code == 200
    assert response.json()["deleted"]["Record"] == 2
    assert not Record.objects.exists()
