"""/metrics: who may read it, what it says about the database, and that it never 500s."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from runs.durable import control
from runs.storage.orm import OrmStore

TOKEN = "s3cret-scrape-token"


@pytest.fixture
def metrics_token(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_TOKEN": TOKEN, "METRICS_ALLOW": []}


def scrape(client, **headers):
    return client.get("/metrics", **headers)


@pytest.mark.django_db
def test_without_a_token_or_an_allow_list_there_is_no_metrics_page(client, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_TOKEN": "", "METRICS_ALLOW": []}
    assert scrape(client).status_code == 404
    assert scrape(client, HTTP_AUTHORIZATION="Bearer anything").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("header", [None, "Bearer wrong", "Bearer", "Basic " + TOKEN,
                                    f"Bearer {TOKEN}x", "Bearer s3cret-\u00e9t\u00e9",
                                    "Bearer " + "x" * 10000])
def test_a_missing_or_wrong_token_is_forbidden(client, metrics_token, header):
    headers = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = scrape(client, **headers)
    assert response.status_code == 403
    assert b"agentops_" not in response.content


@pytest.mark.django_db
def test_the_token_reads_runs_by_status_and_agent_and_the_due_runs(client, metrics_token):
    store = OrmStore()
    for _ in range(3):
        control.launch(store, agent="steps", inputs={"steps": 1})
    control.launch(store, agent="ticker", inputs={})
    response = scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    assert 'agentops_runs{agent="steps",status="queued"} 3.0' in text
    assert 'agentops_runs{agent="ticker",status="queued"} 1.0' in text
    assert "agentops_due_runs 4.0" in text
    assert "agentops_database_up 1.0" in text
    assert 'agentops_stalled_runs{kind="unclaimed"} 0.0' in text
    assert "agentops_in_doubt_effects 0.0" in text
    # counted in this process as the runs were launched
    assert 'agentops_runs_launched_total{agent="steps"}' in text


@pytest.mark.django_db
def test_an_allowed_address_needs_no_token(client, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_TOKEN": "",
                         "METRICS_ALLOW": ["10.0.0.0/8", "127.0.0.1"]}
    assert scrape(client).status_code == 200
    assert scrape(client, REMOTE_ADDR="10.1.2.3").status_code == 200
    assert scrape(client, REMOTE_ADDR="192.168.1.1").status_code == 403
    assert scrape(client, REMOTE_ADDR="not-an-address").status_code == 403


@pytest.mark.django_db
def test_only_reads_are_answered(client, metrics_token):
    response = client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 405


@pytest.mark.django_db
def test_a_database_that_cannot_be_read_leaves_its_families_out_not_a_500(
        client, metrics_token, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise OperationalError("the database is restarting")

    monkeypatch.setattr(BaseDatabaseWrapper, "cursor", refuse)
    response = scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    text = response.content.decode()
    assert "agentops_database_up 0.0" in text
    assert "agentops_runs{" not in text
    assert "agentops_effect_seconds" in text  # this process's own metrics still answer


def test_a_malformed_allow_list_stops_the_process_at_startup(settings):
    from django.apps import apps
    from django.core.exceptions import ImproperlyConfigured

    settings.AGENTOPS = {**settings.AGENTOPS, "METRICS_ALLOW": ["10.0.0.0/33"]}
    with pytest.raises(ImproperlyConfigured, match="AGENTOPS_METRICS_ALLOW"):
        apps.get_app_config("observability").ready()
