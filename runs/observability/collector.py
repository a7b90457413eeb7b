"""What the database knows, read when /metrics is scraped: no process has to keep it.

Runs by status and agent, the due runs and how long the oldest has waited, runs in
doubt and stalled, and the live processes of the worker trees (their heartbeats).
A scrape while the database is away still answers: these families are left out and
agentops_database_up is 0.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import DatabaseError
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from runs.durable import records as r

logger = logging.getLogger("agentops.metrics")

HEARTBEAT_FRESH = timedelta(seconds=10)  # a main silent longer is not counted as alive


class DatabaseCollector:
    def collect(self):
        up = GaugeMetricFamily("agentops_database_up", "Whether /metrics could read the "
                               "database for the families below")
        try:
            families = list(_families())
        except DatabaseError as exc:
            logger.warning("metrics: database unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families


def _families():
    from runs.models import Run, WorkerHeartbeat
    from runs.storage.orm import due_runs_queryset
    from runs.worker.stalls import KINDS, stalled_q

    runs = GaugeMetricFamily("agentops_runs", "Runs by status and agent", labels=["status", "agent"])
    for row in Run.objects.order_by().values("status", "agent").annotate(n=Count("id")):
        runs.add_metric([row["status"], row["agent"]], row["n"])
    yield runs

    now = time.time()
    due = due_runs_queryset(now).order_by().aggregate(n=Count("id"), oldest=Min("updated_at"))
    yield GaugeMetricFamily("agentops_due_runs", "Runs a worker should take now", value=due["n"])
    age = max(0.0, now - due["oldest"].timestamp()) if due["oldest"] else 0.0
    yield GaugeMetricFamily("agentops_oldest_due_run_age_seconds",
                            "How long the longest-waiting due run has not changed", value=age)

    in_doubt = Run.objects.filter(status=r.NEEDS_ATTENTION, attention__kind="in_doubt").count()
    yield GaugeMetricFamily("agentops_in_doubt_effects", "Effects in doubt, each holding its "
                            "run for an operator's answer", value=in_doubt)

    stalled = GaugeMetricFamily("agentops_stalled_runs", "Runs that are not moving "
                                "(docs/stalls.md), by kind", labels=["kind"])
    for kind in KINDS:
        stalled.add_metric([kind], Run.objects.filter(stalled_q(kind=kind)).count())
    yield stalled

    alive = GaugeMetricFamily("agentops_worker_processes", "Live processes of the worker "
                              "trees, by role", labels=["role"])
    counts: dict[str, int] = {"main": 0}
    fresh = WorkerHeartbeat.objects.filter(last_seen__gte=timezone.now() - HEARTBEAT_FRESH)
    for processes in fresh.values_list("processes", flat=True):
        counts["main"] += 1
        for process in processes or []:
            if process.get("alive"):
                role = str(process.get("role") or "?")
                counts[role] = counts.get(role, 0) + 1
    for role, n in sorted(counts.items()):
        alive.add_metric([role], n)
    yield alive
