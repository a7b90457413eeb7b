"""Writes of schedules. Timing is (re)computed here, once: a new, edited or resumed
schedule is due at its first slot after now (a resume does not launch the slots that
passed while it was paused)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from .models import Schedule
from .timing import next_slot

EDITABLE = ("name", "agent", "inputs", "kind", "cron", "interval_seconds", "overlap", "paused")


def _retime(schedule: Schedule, now) -> None:
    schedule.next_at = None if schedule.paused else next_slot(schedule, now)
    if schedule.paused:
        schedule.queued_slot = None


def schedule_create(*, user, data: dict, now=None, instance: Schedule | None = None) -> Schedule:
    """`instance`: an unsaved Schedule to fill in and save (the admin's)."""
    now = now or timezone.now()
    schedule = instance or Schedule()
    schedule.owner = user
    schedule.created_at = schedule.updated_at = now
    for key in EDITABLE:
        if key in data:
            setattr(schedule, key, data[key])
    _retime(schedule, now)
    schedule.save()
    return schedule


def schedule_update(*, schedule: Schedule, data: dict, now=None) -> Schedule:
    now = now or timezone.now()
    with transaction.atomic():
        locked = Schedule.objects.select_for_update().get(pk=schedule.pk)
        timing_before = (locked.kind, locked.cron, locked.interval_seconds, locked.paused)
        for key in EDITABLE:
            if key in data:
                setattr(locked, key, data[key])
        if (locked.kind, locked.cron, locked.interval_seconds, locked.paused) != timing_before:
            _retime(locked, now)
        locked.updated_at = now
        locked.save()
    return locked


def schedule_set_paused(*, schedule: Schedule, paused: bool, now=None) -> Schedule:
    return schedule_update(schedule=schedule, data={"paused": paused}, now=now)


def schedule_delete(*, schedule: Schedule) -> None:
    schedule.delete()
