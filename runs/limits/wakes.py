"""Wake runs held by a shared limit whose turn came sooner than they were told.

The limit's queue (runs/durable/policies/limit_queue.py) says which held runs to wake and when;
here their timers (`Run.wake_at`) move earlier, never later, and only while the run
still waits on that limit: a run that went on, was cancelled or waits for something
else since is left alone. The sweep and the workers' free slots then claim it as any
due timer. A wake-up lost here (the database away) costs the run its place for a few
seconds: the queue passes over a waiter that does not come and wakes it once more.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.db import DatabaseError

from runs.durable import records as r
from runs.durable.policies.limit_queue import Wake
from runs.models import Run
from runs.storage.columns import to_dt

log = logging.getLogger(__name__)


def wake_held_runs(limit: str, wakes: tuple[Wake, ...]) -> None:
    by_time: dict[float, list[str]] = defaultdict(list)
    for wake in wakes:
        by_time[wake.at].append(wake.run)
    try:
        for at, run_ids in by_time.items():
            when = to_dt(at)
            Run.objects.filter(pk__in=run_ids, status=r.WAITING, attention__kind="limit",
                               attention__limit=limit, wake_at__gt=when).update(wake_at=when)
    except DatabaseError as exc:
        log.warning("limit %s: held runs not woken (%s); the queue wakes them again", limit, exc)
