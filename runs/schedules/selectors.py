"""Reads of schedules, with the one permission rule: a user sees and edits their own
schedules, an operator every schedule; any other is a 404."""

from __future__ import annotations

from django.http import Http404

from runs.selectors import can_see_all

from .models import Schedule, ScheduleLaunch

LAUNCHES_SHOWN = 50


def visible_schedules(user):
    if can_see_all(user):
        return Schedule.objects.select_related("owner")
    if not (user and user.is_authenticated):
        return Schedule.objects.none()
    return Schedule.objects.filter(owner=user).select_related("owner")


def schedule_get_for_user(user, pk: int) -> Schedule:
    schedule = visible_schedules(user).filter(pk=pk).first()
    if schedule is None:
        raise Http404("No such schedule.")
    return schedule


def recent_launches(schedule: Schedule, limit: int = LAUNCHES_SHOWN) -> list[ScheduleLaunch]:
    return list(schedule.launches.select_related("run")[:limit])


def launch_of_run(run_id: str) -> ScheduleLaunch | None:
    """The schedule slot that launched a run, if one did."""
    return ScheduleLaunch.objects.filter(run_id=run_id).select_related("schedule").first()
