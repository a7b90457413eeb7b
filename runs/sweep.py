"""The recovery sweep: hand every run that should be running to a worker.

It runs in qcluster's main process every AGENTOPS_SWEEP_INTERVAL seconds (see
runs/management/commands/qcluster.py) and on demand (`manage.py runs sweep`).
Due runs: queued and unleased, running with an expired lease, waiting on a
timer that is due. A run's lease held by a process on this host that no longer
exists is expired at once, so a SIGKILLed worker's run does not wait out its
lease.
"""

from __future__ import annotations

import logging
import socket
import time
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from django_q.brokers import get_broker

from runs.cluster.roles import is_alive
from runs.models import Run
from runs.store import due_runs_queryset
from runs.worker import enqueue_run

logger = logging.getLogger("agentops.sweep")


def sweep(limit: int = 500, tasks_lost: bool = False) -> int:
    """Enqueue due runs; return how many were enqueued.

    A run whose task was enqueued but not taken may have its task stuck in the
    local queue of a cluster whose worker is frozen or dead; the task is then
    re-enqueued (duplicates are harmless: the claim decides). When the broker
    has a backlog, an unclaimed run is simply waiting its turn, so re-enqueueing
    is held back to the slow REQUEUE_AFTER_SECONDS. `tasks_lost`: this host's
    cluster has just thrown its local queues away (a new generation, a new
    cluster, a new qcluster: runs/cluster/), with whatever tasks they held, so
    every due run gets a task now rather than after REQUEUE_STUCK_SECONDS.
    """
    if settings.AGENTOPS["DETECT_DEAD_LOCAL_WORKERS"]:
        expire_dead_local_leases()
    now = timezone.now()
    conf = settings.AGENTOPS
    backlog = get_broker().queue_size()
    wait = conf["REQUEUE_STUCK_SECONDS"] if backlog < settings.Q_CLUSTER["workers"] else \
        conf["REQUEUE_AFTER_SECONDS"]
    if tasks_lost:
        wait = 0
    stale = now - timedelta(seconds=wait)
    not_enqueued = Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=stale)
    due = list(due_runs_queryset(time.time()).filter(not_enqueued)
               .order_by("updated_at").values_list("id", flat=True)[:limit])
    enqueued = 0
    for run_id in due:
        # Several clusters sweep at once: the conditional update elects one.
        if Run.objects.filter(not_enqueued, pk=run_id).update(enqueued_at=now) == 1:
            enqueue_run(run_id)
            enqueued += 1
    return enqueued


def expire_dead_local_leases() -> int:
    host = socket.gethostname()
    held = Run.objects.filter(lease_owner__startswith=f"{host}:", lease_expires_at__gt=timezone.now(),
                              status__in=["queued", "running", "waiting"])
    expired = 0
    for run_id, owner in held.values_list("id", "lease_owner"):
        if not is_alive(int(owner.split(":")[1])):
            expired += Run.objects.filter(pk=run_id, lease_owner=owner).update(
                lease_expires_at=timezone.now())
    if expired:
        logger.info("expired %d lease(s) of dead local workers", expired)
    return expired
