"""The recovery sweep: hand every run that should be running to a worker.

It runs in qcluster's main process every AGENTOPS_SWEEP_INTERVAL seconds (see
runs/management/commands/qcluster.py) and on demand (`manage.py runs sweep`).
Due runs are the store's (`Store.due_runs`, the claim rule of
runs/durable/claimable.py), the longest unchanged first. A run's lease held by a process on this host that no longer
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

from runs.models import Run
from runs.worker import side_jobs
from runs.worker.cluster.roles import is_alive
from runs.worker.execute import enqueue_run, store

logger = logging.getLogger("agentops.sweep")


def sweep(limit: int = 500, tasks_lost: bool = False) -> int:
    """Enqueue due runs; return how many were enqueued.

    A run whose task was enqueued but not taken may have its task stuck in the
    local queue of a cluster whose worker is frozen or dead; the task is then
    re-enqueued (duplicates are harmless: the claim decides). When the broker
    has a backlog, an unclaimed run is simply waiting its turn, so re-enqueueing
    is held back to the slow REQUEUE_AFTER_SECONDS. `tasks_lost`: this host's
    cluster has just thrown its local queues away (a new generation, a new
    cluster, a new qcluster: runs/worker/cluster/), with whatever tasks they held, so
    every due run gets a task now rather than after REQUEUE_STUCK_SECONDS.
    The `limit` longest unchanged due runs are looked at; those among them with a
    recent task wait their turn, and the newer ones get theirs as these are claimed.
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
    due = store().due_runs(time.time(), limit)
    # enqueued_at is the runtime's own record of the tasks it sent, not the store's:
    # of the due runs, those without a task sent since `stale`.
    waiting = set(Run.objects.filter(not_enqueued, pk__in=due).values_list("id", flat=True))
    enqueued = 0
    for run_id in (run_id for run_id in due if run_id in waiting):
        # Several clusters sweep at once: the conditional update elects one.
        if Run.objects.filter(not_enqueued, pk=run_id).update(enqueued_at=now) == 1:
            enqueue_run(run_id)
            enqueued += 1
    side_jobs.tick()  # schedules due, webhook events to deliver (runs/worker/side_jobs.py)
    return enqueued


def expire_dead_local_leases() -> int:
    """Expire, through the store, the leases held by processes of this host that no
    longer exist; a run claimed again meanwhile keeps its new lease (renew_leases
    checks epoch and owner)."""
    now, runs = time.time(), store()
    leases = runs.live_leases(f"{socket.gethostname()}:", now)
    dead = [lease for lease in leases if not is_alive(int(lease.owner.split(":")[1]))]
    expired = runs.renew_leases(dead, now) if dead else {}
    for lease in dead:
        if lease.run_id in expired:
            logger.info("run %s: lease of dead worker %s expired", lease.run_id, lease.owner,
                        extra={"run_id": lease.run_id, "worker": lease.owner})
    if expired:
        logger.info("expired %d lease(s) of dead local workers", len(expired))
    return len(expired)
