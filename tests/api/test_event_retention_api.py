"""A run whose old events retention deleted (docs/retention.md) through the API: its event
pages walk the kept ones and end, and its event stream says what went and ends, so
that the client follows it to its end instead of asking again for the gap."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from agentops.client import Client
from runs import services
from runs.models import Run, RunEvent
from runs.storage.event_retention import Policy, prune
from tests.web.conftest import drive


def pruned_run(user) -> Run:
    run = drive(services.run_launch(user=user, agent="ticker", inputs={"steps": 4,
                                                                        "delay": 0}).pk)
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=31))
    assert prune(policy=Policy(days=30, batch=4)).runs == 1
    return Run.objects.get(pk=run.pk)


def kept(run) -> list[int]:
    return list(RunEvent.objects.filter(run_id=run.pk).order_by("seq").values_list("seq",
                                                                                   flat=True))


@pytest.mark.django_db
def test_event_pages_walk_the_kept_events_across_the_deleted_ones_and_end(users, bearer):
    run = pruned_run(users["alice"])
    assert 1 < len(kept(run)) < run.event_seq
    client = bearer("alice", "read")
    for limit in (1, 2, 500):
        seqs, after, pages = [], 0, 0
        while pages < 50:
            pages += 1
            page = client.get(f"/api/v1/runs/{run.pk}/events?after={after}&limit={limit}").json()
            assert page["pruned_before"] == run.event_seq + 1 and page["head"] == run.event_seq
            seqs += [e["seq"] for e in page["events"]]
            if not page["more"]:
                break
            after = page["events"][-1]["seq"]
        assert seqs == kept(run), limit
        assert pages <= len(seqs) + 1
    # a cursor inside the deleted range
    page = client.get(f"/api/v1/runs/{run.pk}/events?after={kept(run)[1]}").json()
    assert [e["seq"] for e in page["events"]] == kept(run)[2:] and not page["more"]
    fresh = drive(services.run_launch(user=users["alice"], agent="ticker",
                                      inputs={"steps": 1, "delay": 0}).pk)
    assert client.get(f"/api/v1/runs/{fresh.pk}/events").json()["pruned_before"] == 0


def test_the_stream_announces_what_went_and_the_client_follows_to_the_end(server, users,
                                                                          make_token):
    run = pruned_run(users["alice"])
    token = make_token("alice", "read")
    with httpx.stream("GET", f"{server.url}/api/v1/runs/{run.pk}/events/stream",
                      headers={"Authorization": f"Bearer {token}"}, timeout=30) as response:
        body = "".join(response.iter_text())
    assert body.index("event: pruned") < body.index("id: ")
    assert json.dumps({"before": run.event_seq + 1}) in body
    assert "event: end" in body
    with Client(server.url, token=token) as api:
        assert [e.seq for e in api.follow(run.pk, give_up_after=30)] == kept(run)
        assert api.connections == 1 and api.last_end.seq == run.event_seq
