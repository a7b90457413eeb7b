"""The schedules' clock: launch what is due. Called by the duties of every worker
tree (runs/worker/sweep.py), with the time passed in so that tests
can drive minutes of schedule in no time.

One launch per slot, whatever the number of clusters: each due schedule is handled in
one transaction that first locks its row (PostgreSQL: FOR UPDATE SKIP LOCKED, so a
cluster skips a schedule another is handling; SQLite: the write lock taken at BEGIN)
and then reads it again; the slot's launch, its ScheduleLaunch row and the schedule's
next slot commit together, so a slot is launched once or, after a crash, not yet.

After downtime (no cluster ticking), the slots that passed are not launched one by
one: the latest passed slot is launched once (if the overlap policy lets it), with the
number of slots it folds in recorded as `missed`, and the schedule moves to its next
future slot.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q

from runs.durable import DurableError
from runs.durable import records as r
from runs.models import Run
from runs.storage import clock

from .models import LaunchOutcome, Overlap, Schedule, ScheduleLaunch
from .timing import latest_slot, next_slot

logger = logging.getLogger("agentops.schedules")
BATCH = 100


def tick(now: datetime | None = None, limit: int = BATCH) -> list[ScheduleLaunch]:
    """Handle every due schedule; return the ScheduleLaunch rows written."""
    now = now or clock.now_dt()  # as the worker trees' leases: the database's clock
    due = list(Schedule.objects.filter(paused=False)
               .filter(Q(next_at__lte=now) | Q(queued_slot__isnull=False))
               .order_by("next_at").values_list("pk", flat=True)[:limit])
    written = []
    for pk in due:
        written.extend(_tick_one(pk, now))
    return written


def _locked(pk: int):
    rows = Schedule.objects.filter(pk=pk, paused=False)
    if connection.features.has_select_for_update_skip_locked:
        rows = rows.select_for_update(skip_locked=True, of=("self",))
    return rows.first()


def _tick_one(pk: int, now: datetime) -> list[ScheduleLaunch]:
    with transaction.atomic():
        schedule = _locked(pk)
        if schedule is None:  # paused meanwhile, deleted, or another cluster has it
            return []
        written = []
        active = _active(schedule)
        if schedule.queued_slot is not None and not active:
            launch = _launch(schedule, schedule.queued_slot, now)
            schedule.queued_slot = None
            active = launch.outcome == LaunchOutcome.LAUNCHED
            written.append(launch)
        if schedule.next_at is not None and schedule.next_at <= now:
            slot, missed = latest_slot(schedule, schedule.next_at, now)
            schedule.next_at = next_slot(schedule, slot)
            if schedule.overlap == Overlap.ALLOW or not active:
                written.append(_launch(schedule, slot, now, missed=missed))
            elif schedule.overlap == Overlap.QUEUE and schedule.queued_slot is None:
                schedule.queued_slot = slot
                written.append(_record(schedule, slot, LaunchOutcome.QUEUED, missed=missed))
            else:  # skip, or queue with a slot already waiting (one waits, at most)
                written.append(_record(schedule, slot, LaunchOutcome.SKIPPED, missed=missed))
        schedule.updated_at = now
        schedule.save(update_fields=["next_at", "queued_slot", "last_run", "updated_at"])
        return written


def _active(schedule: Schedule) -> bool:
    if schedule.last_run_id is None:
        return False
    status = Run.objects.filter(pk=schedule.last_run_id).values_list("status", flat=True).first()
    return status is not None and status not in r.FINAL_STATUSES


def _record(schedule, slot, outcome, *, run=None, missed=0, detail="") -> ScheduleLaunch:
    return ScheduleLaunch.objects.create(schedule=schedule, slot_at=slot, outcome=outcome,
                                         run=run, missed=missed, detail=detail[:500])


def _launch(schedule: Schedule, slot: datetime, now: datetime, *, missed: int = 0):
    from runs import services

    try:
        with transaction.atomic():  # a failed launch leaves the tick's transaction usable
            run = services.run_launch(user=schedule.owner, agent=schedule.agent,
                                      inputs=schedule.inputs)
    except DurableError as exc:  # the agent is gone, or its schema no longer takes the inputs
        field = getattr(exc, "field", "")
        detail = f"{field}: {exc}" if field else str(exc)
        logger.warning("schedule %s could not launch %s: %s", schedule.pk, schedule.agent, detail)
        return _record(schedule, slot, LaunchOutcome.FAILED, missed=missed, detail=detail)
    schedule.last_run = run
    return _record(schedule, slot, LaunchOutcome.LAUNCHED, run=run, missed=missed)
