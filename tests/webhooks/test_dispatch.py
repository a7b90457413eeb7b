"""Run events become deliveries: the right subscriptions, once each, never for a
delivery run, and an event that appears behind the cursor is still delivered."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.durable import records as r
from runs.models import Run, RunEvent
from runs.webhooks import dispatch as dispatching
from runs.webhooks.agents import DELIVERY_AGENT
from runs.webhooks.dispatch import dispatch
from runs.webhooks.models import Delivery, DispatchCursor, Subscription

EVERYTHING = ["run.ended", "run.needs_attention", "run.waiting_for_input"]


def subscribe(user, *, scope="mine", events=EVERYTHING, **kw) -> Subscription:
    return Subscription.objects.create(owner=user, url="https://hooks.example.com/x",
                                       events=events, scope=scope,
                                       created_at=timezone.now() - timedelta(hours=1), **kw)


def run_of(user, agent="ticker") -> Run:
    return Run.objects.create(id=f"{agent[:4]}{Run.objects.count():028d}", owner=user,
                              agent=agent, agent_version="1")


def event(run, status, at=None, pk=None, **data) -> RunEvent:
    run.event_seq += 1
    run.save(update_fields=["event_seq"])
    return RunEvent.objects.create(id=pk, run=run, seq=run.event_seq, kind="status",
                                   data={"status": status, **data},
                                   created_at=at or timezone.now())


@pytest.mark.django_db
def test_each_event_goes_to_the_owner_and_to_operators_who_asked_for_every_run(users):
    alice, bob, charlie = users["alice"], users["bob"], users["charlie"]
    mine = subscribe(alice)
    bobs = subscribe(bob)
    ops = subscribe(charlie, scope="all")
    only_ended = subscribe(alice, events=["run.ended"])
    off = subscribe(alice, active=False)
    run = run_of(alice)
    event(run, r.RUNNING)
    event(run, r.WAITING, kind="input", prompt="name?")
    event(run, r.WAITING, kind="retry")  # a durable timer: not an event for webhooks
    event(run, r.NEEDS_ATTENTION, kind="in_doubt", reason="in doubt")
    event(run, r.SUCCEEDED)
    made = dispatch()
    got = {(d.subscription_id, d.event_type) for d in made}
    assert got == {
        (mine.pk, "run.waiting_for_input"), (mine.pk, "run.needs_attention"),
        (mine.pk, "run.ended"),
        (ops.pk, "run.waiting_for_input"), (ops.pk, "run.needs_attention"), (ops.pk, "run.ended"),
        (only_ended.pk, "run.ended")}
    assert not Delivery.objects.filter(subscription__in=[bobs, off]).exists()
    ended = Delivery.objects.get(subscription=mine, event_type="run.ended")
    assert ended.payload["type"] == "run.ended"
    assert ended.payload["data"]["run_id"] == run.pk and ended.payload["data"]["status"] == "succeeded"
    # every delivery has its run of the system agent, queued
    assert Run.objects.get(pk=ended.delivery_run_id).agent == DELIVERY_AGENT
    assert Run.objects.get(pk=ended.delivery_run_id).inputs == {"delivery": ended.pk}
    # read again (the events are younger than the grace period): nothing new
    assert dispatch() == []
    assert Delivery.objects.count() == 7


@pytest.mark.django_db
def test_a_user_no_longer_an_operator_receives_only_their_own_runs(users):
    charlie, alice = users["charlie"], users["alice"]
    ops = subscribe(charlie, scope="all")
    charlie.groups.clear()
    event(run_of(alice), r.FAILED, error="boom")
    event(run_of(charlie), r.CANCELLED)
    made = dispatch()
    assert [(d.subscription_id, d.run.owner_id) for d in made] == [(ops.pk, charlie.pk)]


@pytest.mark.django_db
def test_delivery_runs_ending_are_not_events_to_deliver(users):
    subscribe(users["charlie"], scope="all")
    event(run_of(None, agent=DELIVERY_AGENT), r.SUCCEEDED)
    assert dispatch() == []


@pytest.mark.django_db
def test_the_cursor_passes_only_settled_events_so_a_late_commit_is_not_missed(users):
    alice = users["alice"]
    sub = subscribe(alice)
    now = timezone.now()
    old = event(run_of(alice), r.SUCCEEDED, at=now - timedelta(minutes=5))
    young = event(run_of(alice), r.SUCCEEDED, at=now, pk=old.pk + 10)
    dispatch(now)
    assert DispatchCursor.objects.get().last_id == old.pk  # not past the young one
    # An event whose id is below the young one's but which becomes visible only now: on
    # PostgreSQL, a transaction that took its id first and committed last.
    late_run = run_of(alice)
    event(late_run, r.FAILED, at=now, pk=old.pk + 5)
    dispatch(now + timedelta(seconds=1))
    dispatch(now + dispatching.GRACE + timedelta(seconds=1))
    runs = list(Delivery.objects.filter(subscription=sub).values_list("run_id", flat=True))
    assert sorted(runs) == sorted([old.run_id, young.run_id, late_run.pk])  # each once
    assert DispatchCursor.objects.get().last_id >= young.pk  # (the delivery runs: later ids)


@pytest.mark.django_db
def test_events_before_a_subscription_existed_are_not_sent_to_it(users):
    alice = users["alice"]
    event(run_of(alice), r.SUCCEEDED, at=timezone.now() - timedelta(seconds=5))
    Subscription.objects.create(owner=alice, url="https://hooks.example.com/x",
                                events=EVERYTHING)
    assert dispatch() == []
