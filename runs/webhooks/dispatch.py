"""Turn run events into webhook deliveries. Called at every tick of the duties of each
worker tree (runs/worker/side_jobs.py), never by a run: a run only writes
its `status` event, as it always did, in the commit it always made, so a webhook costs
its commit path nothing and a dead endpoint cannot slow it.

The run event table is the outbox. A cursor row (DispatchCursor) holds how far it has
been read; the dispatch locks it, so clusters take turns. Event ids come from a sequence,
and on PostgreSQL a transaction may commit after one that took a later id: an event can
appear behind the cursor. So the cursor only passes events older than GRACE seconds
(their transactions have long committed); younger ones are read again at the next
tick, and the (subscription, run, seq) constraint, checked before any insert, keeps each
event to one delivery per subscription. A partial index on status events
(migration 0001) makes the read touch only them.

Which events: a run's status event that says it ended (succeeded, failed, cancelled),
needs attention, or waits for input. Which subscriptions: the run's owner's own, and
those of operators with scope "all" (the permission is checked here, at each event, so
an operator who is no longer one stops receiving others' events). Runs of the delivery
agent itself are never reported (a delivery ending would be an event to deliver).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from runs.durable import records as r
from runs.models import Run, RunEvent
from runs.selectors import can_see_all
from runs.storage import clock

from .agents import DELIVERY_AGENT
from .models import (
    NEEDS_ATTENTION,
    RUN_ENDED,
    WAITING_FOR_INPUT,
    Delivery,
    DispatchCursor,
    Scope,
    Subscription,
)

GRACE = timedelta(seconds=10)
BATCH = 500


def event_type(data: dict) -> str | None:
    status = data.get("status")
    if status in r.FINAL_STATUSES:
        return RUN_ENDED
    if status == r.NEEDS_ATTENTION:
        return NEEDS_ATTENTION
    if status == r.WAITING and data.get("kind") == "input":
        return WAITING_FOR_INPUT
    return None


def payload(kind: str, run: dict, event: dict) -> dict:
    data = event["data"]
    body = {"run_id": run["pk"], "agent": run["agent"], "status": data.get("status"),
            "event_seq": event["seq"], "run_path": f"/runs/{run['pk']}/"}
    for key in ("reason", "error", "prompt"):
        if data.get(key) is not None:
            body[key] = data[key]
    if kind == NEEDS_ATTENTION and data.get("kind"):
        body["attention"] = data["kind"]
    return {"type": kind, "timestamp": event["created_at"].isoformat(), "data": body}


def dispatch(now: datetime | None = None) -> list[Delivery]:
    """Make the deliveries for the status events since the cursor; return them."""
    now = now or clock.now_dt()  # as the worker trees' leases: the database's clock
    # Read first, lock only if there is something to do: on SQLite a transaction takes
    # the database's write lock at BEGIN, which a tick twice a second must not.
    after = DispatchCursor.objects.filter(pk=1).values_list("last_id", flat=True).first() or 0
    if not RunEvent.objects.filter(pk__gt=after, kind="status").exists():
        return []
    with transaction.atomic():
        cursor = _cursor()
        subscriptions = list(Subscription.objects.filter(active=True))
        events = list(RunEvent.objects.filter(pk__gt=cursor.last_id, kind="status")
                      .order_by("pk").values("pk", "run_id", "seq", "data", "created_at")[:BATCH])
        made = _deliveries(subscriptions, events) if subscriptions else []
        # pass the settled events, up to the first one that is not (ids in order)
        last = cursor.last_id
        for event in events:
            if event["created_at"] > now - GRACE:
                break
            last = event["pk"]
        if last != cursor.last_id:
            DispatchCursor.objects.filter(pk=cursor.pk).update(last_id=last, updated_at=now)
    return made


def _cursor() -> DispatchCursor:
    DispatchCursor.objects.get_or_create(pk=1)
    rows = DispatchCursor.objects.filter(pk=1)
    if connection.features.has_select_for_update:
        rows = rows.select_for_update()
    return rows.get()


def _deliveries(subscriptions, events) -> list[Delivery]:
    typed = [(event_type(e["data"]), e) for e in events]
    typed = [(kind, e) for kind, e in typed if kind]
    if not typed:
        return []
    runs = {row["pk"]: row for row in Run.objects.filter(pk__in={e["run_id"] for _, e in typed})
            .exclude(agent=DELIVERY_AGENT).values("pk", "agent", "owner_id")}
    operators = _operators({s.owner_id for s in subscriptions if s.scope == Scope.ALL})
    existing = set(Delivery.objects.filter(run_id__in=list(runs), seq__in={e["seq"] for _, e in typed})
                   .values_list("subscription_id", "run_id", "seq"))
    made = []
    for kind, event in typed:
        run = runs.get(event["run_id"])
        if run is None:
            continue
        for sub in subscriptions:
            if kind not in sub.events or (sub.pk, run["pk"], event["seq"]) in existing \
                    or event["created_at"] < sub.created_at:
                continue
            if sub.owner_id != run["owner_id"] and not (sub.scope == Scope.ALL
                                                        and sub.owner_id in operators):
                continue
            made.append(_launch(sub, kind, run, event))
            existing.add((sub.pk, run["pk"], event["seq"]))
    return made


def _operators(user_ids) -> set[int]:
    users = get_user_model().objects.filter(pk__in=user_ids, is_active=True)
    return {user.pk for user in users if can_see_all(user)}


def _launch(sub: Subscription, kind: str, run: dict, event: dict) -> Delivery:
    from runs.durable import control
    from runs.services import store

    delivery = Delivery.objects.create(subscription=sub, event_type=kind, run_id=run["pk"],
                                       seq=event["seq"], msg_id=f"msg_{uuid.uuid4().hex}",
                                       payload=payload(kind, run, event))
    record = control.launch(store(), agent=DELIVERY_AGENT, inputs={"delivery": delivery.pk})
    Delivery.objects.filter(pk=delivery.pk).update(delivery_run_id=record.id)
    delivery.delivery_run_id = record.id
    return delivery
