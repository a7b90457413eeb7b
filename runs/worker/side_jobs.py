"""The features' periodic jobs (runs/hooks.py `side_jobs`: launching the schedules that
are due, turning run events into webhook deliveries), on every tick of each worker
tree's duties (its worker 1). Each is safe with several trees at once, and a failure of one is
logged and tried again at the next tick without holding up the others (or the
heartbeat, which must go on)."""

from __future__ import annotations

import logging

from django.db import connection

from runs.hooks import hooks

logger = logging.getLogger("agentops.sweep")


def tick() -> None:
    for job in list(hooks.side_jobs):
        try:
            job()
        except Exception:  # noqa: BLE001 - the database may be restarting: the next tick
            logger.exception("%s.%s failed", job.__module__, job.__qualname__)
            if not connection.in_atomic_block:
                connection.close()
