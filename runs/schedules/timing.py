"""When a schedule is due: cron expressions (croniter, UTC) and fixed intervals.

Interval slots are anchored at the schedule's creation (anchor + k * interval), so
editing nothing keeps the same rhythm across restarts, and a catch-up lands on a slot."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from croniter import CroniterBadCronError, CroniterError, croniter

MIN_INTERVAL = 1
MAX_INTERVAL = 366 * 86400
# missed cron slots are counted up to this many (a week of a per-minute schedule)
MISSED_COUNTED = 10_080


class TimingError(ValueError):
    """A cron expression or interval that cannot be used."""


def check_cron(expression: str) -> str:
    expression = " ".join((expression or "").split())
    if not expression:
        raise TimingError("a cron expression is required")
    if len(expression.split(" ")) != 5:
        raise TimingError("a cron expression has five fields: minute hour day month weekday "
                          "(e.g. '*/15 * * * *')")
    if "\x00" in expression:
        raise TimingError("the cron expression holds a NUL character")
    try:
        if not croniter.is_valid(expression):
            raise TimingError(f"not a valid cron expression: {expression!r}")
        croniter(expression, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadCronError, CroniterError, ValueError, KeyError, OverflowError) as exc:
        if isinstance(exc, TimingError):
            raise
        raise TimingError(f"not a valid cron expression: {expression!r} ({exc})") from None
    return expression


def check_interval(seconds) -> int:
    if seconds is None:
        raise TimingError("an interval in seconds is required")
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
        raise TimingError(f"the interval must be from {MIN_INTERVAL} s to {MAX_INTERVAL} s "
                          "(a year)")
    return int(seconds)


def next_slot(schedule, after: datetime) -> datetime:
    """The first slot strictly after `after`."""
    if schedule.kind == "cron":
        return croniter(schedule.cron, after.astimezone(UTC)).get_next(datetime)
    step = schedule.interval_seconds
    anchor = schedule.created_at
    if after < anchor:
        return anchor
    k = math.floor((after - anchor).total_seconds() / step) + 1
    return anchor + timedelta(seconds=k * step)


def latest_slot(schedule, due: datetime, now: datetime) -> tuple[datetime, int]:
    """The latest slot from `due` up to `now`, and how many slots before it (from `due`
    on) passed without a launch: a catch-up launches once, for the latest."""
    following = next_slot(schedule, now)
    if schedule.kind == "cron":
        latest = croniter(schedule.cron, following).get_prev(datetime)
    else:
        latest = following - timedelta(seconds=schedule.interval_seconds)
    latest = max(latest, due)
    if schedule.kind == "interval":
        return latest, round((latest - due).total_seconds() / schedule.interval_seconds)
    missed, slot = 0, due
    while missed < MISSED_COUNTED:
        slot = next_slot(schedule, slot)
        if slot > latest:
            break
        missed += 1
    return latest, missed
