"""GET /metrics: the Prometheus text format, for every process of this deployment.

Never a 500: a database that cannot be read leaves its families out
(collector.py), and a failure of the rest still answers with what was collected.
"""

from __future__ import annotations

import logging
import os

import psutil
from django.http import HttpResponse, HttpResponseNotAllowed, HttpResponseNotFound
from django.views.decorators.cache import never_cache
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from runs.observability import guard, metrics
from runs.observability.collector import DatabaseCollector

logger = logging.getLogger("agentops.metrics")


@never_cache
def metrics_view(request):
    verdict = guard.access(request)
    if verdict == guard.DISABLED:
        return HttpResponseNotFound("Not found", content_type="text/plain")
    if verdict != guard.ALLOWED:
        return HttpResponse("Forbidden: a bearer token or an allowed address is needed\n",
                            status=403, content_type="text/plain")
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


def exposition() -> bytes:
    parts = []
    for registry in (_process_registry, _database_registry):
        try:
            parts.append(generate_latest(registry()))
        except Exception:  # noqa: BLE001 - a scrape answers with what it could collect
            logger.exception("metrics: a collector failed")
    return b"".join(parts)


def _process_registry():
    if not metrics.MULTIPROCESS:
        return REGISTRY  # this process's own values only
    _forget_dead_processes(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


def _database_registry():
    registry = CollectorRegistry()
    registry.register(DatabaseCollector())
    return registry


def _forget_dead_processes(directory: str) -> None:
    """A live gauge (websocket viewers) of a process that died is not live any more.
    Counters and histograms of dead processes stay: their counts happened."""
    for name in os.listdir(directory):
        if not name.startswith("gauge_live"):
            continue
        try:
            pid = int(name.rsplit("_", 1)[1].split(".")[0])
        except (IndexError, ValueError):
            continue
        if not psutil.pid_exists(pid):
            multiprocess.mark_process_dead(pid, directory)
