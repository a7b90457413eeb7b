"""Periodic jobs that ride on the recovery sweep's tick in every cluster's main process:
launching the schedules that are due (runs/schedules/tick.py) and turning run events into
webhook deliveries (runs/webhooks/dispatch.py). Each is safe with several clusters at
once, and a failure of one is logged and tried again at the next tick without failing
the sweep (whose heartbeat must go on)."""

from __future__ import annotations

import logging

from django.db import connection

logger = logging.getLogger("agentops.sweep")


def tick() -> None:
    from runs.schedules.tick import tick as launch_due_schedules
    from runs.webhooks.dispatch import dispatch as dispatch_webhook_events

    for job in (launch_due_schedules, dispatch_webhook_events):
        try:
            job()
        except Exception:  # the database may be restarting: the next tick tries again
            logger.exception("%s failed", job.__module__)
            if connection.in_atomic_block is False:
                connection.close()
