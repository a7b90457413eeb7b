"""Webhooks on real worker trees, to a real endpoint that refuses and then accepts.

The runs whose events are delivered end while the endpoint still refuses everything:
a dead endpoint costs them nothing (their events are written as always; the deliveries
are other runs). Then the endpoint accepts, and every event arrives, once each, with a
signature that the standardwebhooks library's own verifier accepts."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from standardwebhooks.webhooks import Webhook

import tests.workload_agents  # noqa: F401
from runs import services
from runs.durable import records as r
from runs.models import Run, RunEvent
from runs.webhooks.agents import DELIVERY_AGENT
from runs.webhooks.models import Attempt, Delivery, Subscription
from tests.support.processes import TREE_DEADLINE, wait_until
from tests.webhooks.receiver import Receiver

pytestmark = pytest.mark.services
EVERYTHING = ["run.ended", "run.needs_attention", "run.waiting_for_input"]
FAST_RETRIES = {"AGENTOPS_WEBHOOK_RETRY_INITIAL": "0.3", "AGENTOPS_WEBHOOK_RETRY_MAX_INTERVAL": "2",
                "AGENTOPS_WEBHOOK_RETRY_FOR": "600"}


@pytest.fixture
def receiver():
    endpoint = Receiver()
    yield endpoint
    endpoint.stop()


def test_every_event_is_delivered_once_signed_after_the_endpoint_recovers(
        users, start_cluster, receiver):
    alice, charlie = users["alice"], users["charlie"]
    mine = Subscription.objects.create(owner=alice, url=receiver.url, events=EVERYTHING)
    ops = Subscription.objects.create(owner=charlie, url=receiver.url, events=["run.ended"],
                                      scope="all")
    tickers = [services.run_launch(user=alice, agent="ticker", inputs={"steps": 3, "delay": 0.05})
               for _ in range(3)]
    asking = services.run_launch(user=alice, agent="ask", inputs={})
    start_cluster(workers=2, **FAST_RETRIES)

    # three runs of three 0.05 s steps on the tree just started: seconds; the deadline
    # bounds a failure only, on CI's loaded cores
    wait_until(lambda: Run.objects.filter(pk__in=[t.pk for t in tickers],
                                          status=r.SUCCEEDED).count() == 3, 90, message="tickers")
    wait_until(lambda: Run.objects.get(pk=asking.pk).status == r.WAITING, TREE_DEADLINE,
               message="the ask")
    # 3 ended + 1 waiting for input for alice, 3 ended for the operator's "all"
    wait_until(lambda: Delivery.objects.count() == 7, TREE_DEADLINE, message="seven deliveries")
    deliveries = list(Delivery.objects.all())

    def refused_often():
        return all(Attempt.objects.filter(delivery=d, status_code=503).count() >= 4
                   for d in deliveries)
    # four attempts of each of seven deliveries, 0.3 s to 2 s apart (FAST_RETRIES); after a
    # wait past a second (a durable timer) a delivery run is claimed again, by two workers
    wait_until(refused_often, 120, message="every delivery refused four times")
    assert receiver.accepted() == []
    # the runs the events are about had ended (or were waiting) long before any delivery
    # got through, and wrote their events as ever: nothing of theirs waited on an endpoint
    for run in Run.objects.filter(pk__in=[t.pk for t in tickers]):
        assert run.status == r.SUCCEEDED and run.finished_at is not None
    assert not RunEvent.objects.filter(run_id__in=[t.pk for t in tickers],
                                       kind__in=["attempt", "effect"],
                                       data__tool="webhooks.deliver").exists()
    # the retries were durable timers: delivery runs waited without a worker
    delivery_runs = [d.delivery_run_id for d in deliveries]
    assert RunEvent.objects.filter(run_id__in=delivery_runs, kind="status",
                                   data__status=r.WAITING).exists()

    receiver.refusing = False
    # each delivery's next attempt is due within its backoff's 2 s cap, then claimed
    wait_until(lambda: Delivery.objects.filter(status="delivered").count() == 7, 120,
               message="every delivery delivered")
    wait_until(lambda: Run.objects.filter(pk__in=delivery_runs, status=r.SUCCEEDED).count() == 7,
               TREE_DEADLINE, message="delivery runs ended")

    accepted = receiver.accepted()
    assert sorted(a.headers["webhook-id"] for a in accepted) == sorted(d.msg_id for d in deliveries)
    by_id = {d.msg_id: d for d in Delivery.objects.select_related("subscription")}
    received = set()
    for request in accepted:
        delivery = by_id[request.headers["webhook-id"]]
        body = Webhook(delivery.subscription.secret).verify(request.body, request.headers)
        assert body == delivery.payload
        received.add((delivery.subscription_id, body["type"], body["data"]["run_id"]))
        # a signature made with another subscription's secret does not pass
        other = ops if delivery.subscription_id == mine.pk else mine
        with pytest.raises(Exception, match="signature"):
            Webhook(other.secret).verify(request.body, request.headers)
    assert received == {
        *((mine.pk, "run.ended", t.pk) for t in tickers),
        (mine.pk, "run.waiting_for_input", asking.pk),
        *((ops.pk, "run.ended", t.pk) for t in tickers)}
    # every refusal was a fresh attempt with a fresh signature of the same message id
    refused = receiver.refused()
    assert {a.headers["webhook-id"] for a in refused} == set(by_id)

    # the subscription's page shows the attempts and the endpoint's answers
    client = Client()
    client.force_login(alice)
    page = client.get(f"/webhooks/{mine.pk}/").content.decode()
    assert "HTTP 503" in page and "HTTP 200" in page and "down for maintenance" in page
    assert client.get(f"/webhooks/{ops.pk}/").status_code == 404  # charlie's, not alice's
    first = Attempt.objects.filter(delivery__subscription=mine).order_by("pk").first()
    assert first.status_code == 503 and first.response_body == "down for maintenance"
    assert json.loads(Attempt.objects.filter(status_code=200).first().response_body) == {"ok": True}
    assert not Delivery.objects.filter(run__agent=DELIVERY_AGENT).exists()
