"""One attempt: an address the rule refuses is recorded and never retried; a URL that
resolves to a private address at delivery time is refused then, not only when saved."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import timezone

from runs.durable import PermanentToolError, TransientToolError
from runs.durable.retry import retryable
from runs.models import Run
from runs.webhooks import sending
from runs.webhooks.models import Attempt, Delivery, Subscription
from tests.webhooks.receiver import ENDLESS_CAP, Receiver

CLOSED = {"ALLOWED_NETWORKS": [], "RETRY_INITIAL": 5.0, "RETRY_MAX_INTERVAL": 3600.0,
          "RETRY_FOR": 1.0, "TIMEOUT": 5.0}
LOOPBACK = {**CLOSED, "ALLOWED_NETWORKS": ["127.0.0.0/8"]}


def delivery_to(user, url) -> Delivery:
    sub = Subscription.objects.create(owner=user, url=url, events=["run.ended"])
    run = Run.objects.create(id="r" * 32, owner=user, agent="ticker", agent_version="1")
    return Delivery.objects.create(subscription=sub, event_type="run.ended", run=run, seq=2,
                                   msg_id="msg_test", payload={"type": "run.ended"},
                                   created_at=timezone.now())


@pytest.mark.django_db
@override_settings(WEBHOOKS=CLOSED)
def test_a_refused_address_is_one_recorded_attempt_and_no_retry(users):
    delivery = delivery_to(users["alice"], "http://localhost:9/hook")
    with pytest.raises(sending.DeliveryRefused) as refused:
        sending.attempt(delivery.pk)
    assert isinstance(refused.value, PermanentToolError)
    assert not retryable(refused.value, idempotent=True)
    [attempt] = Attempt.objects.filter(delivery=delivery)
    assert attempt.status_code is None and "127.0.0.1" in attempt.error


@pytest.mark.django_db
@override_settings(WEBHOOKS=LOOPBACK)
def test_an_answer_other_than_2xx_is_retried_and_a_2xx_delivers(users):
    receiver = Receiver()
    try:
        delivery = delivery_to(users["alice"], receiver.url)
        with pytest.raises(TransientToolError):
            sending.attempt(delivery.pk)
        receiver.refusing = False
        assert sending.attempt(delivery.pk) == {"status_code": 200, "attempt": 2}
        delivery.refresh_from_db()
        assert delivery.status == "delivered" and delivery.attempts == 2
        assert [(a.number, a.status_code) for a in Attempt.objects.filter(delivery=delivery)] \
            == [(1, 503), (2, 200)]
        # a delivery already made is not sent again (a replayed or repeated attempt)
        assert sending.attempt(delivery.pk)["already"] is True
        assert len(receiver.requests) == 2
        stamps = [req.headers["webhook-timestamp"] for req in receiver.requests]
        assert all(s.isdigit() for s in stamps)
    finally:
        receiver.stop()


@pytest.mark.django_db
@override_settings(WEBHOOKS=LOOPBACK)
def test_an_answer_without_end_is_read_only_up_to_the_clip(users):
    receiver = Receiver()
    receiver.endless = True
    try:
        delivery = delivery_to(users["alice"], receiver.url)
        with pytest.raises(sending.EndpointFailed, match="HTTP 500"):
            sending.attempt(delivery.pk)
        [attempt] = Attempt.objects.filter(delivery=delivery)
        assert attempt.response_body == "x" * sending.BODY_CLIP
        # the worker hung up after its clip: the endpoint could not send it all (only what
        # the two sockets' buffers took, a few MiB on loopback)
        assert receiver.sent < ENDLESS_CAP, receiver.sent
    finally:
        receiver.stop()


@pytest.mark.django_db
@override_settings(WEBHOOKS=LOOPBACK)
def test_an_endpoints_cookie_is_never_sent_back(users):
    """One client serves every delivery of a process: it must keep no cookie, or one
    subscriber's would reach the next request (its own, or another subscriber's)."""
    receiver = Receiver()
    receiver.cookie = "session=from-the-endpoint"
    try:
        first = delivery_to(users["alice"], receiver.url)
        with pytest.raises(TransientToolError):
            sending.attempt(first.pk)
        receiver.refusing = False
        assert sending.attempt(first.pk)["status_code"] == 200
        assert [request.headers.get("Cookie") for request in receiver.requests] == [None, None]
    finally:
        receiver.stop()
