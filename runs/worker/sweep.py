"""The duties of a worker tree, kept by its worker 1 every AGENTOPS_SWEEP_INTERVAL
seconds (`keep_duties`, runs/worker/tree.py), and once on demand (`manage.py runs sweep`):

* the heartbeat (runs/worker/heartbeat.py): the tree's processes and agent code;
* the leases held by processes of this host that no longer exist expire at once, so a
  SIGKILLed worker's runs do not wait out their lease;
* the features' side jobs (runs/hooks.py: due schedules, webhook deliveries);
* retention of checkpoints, events and effects (runs/storage/retention.py, apply; docs/
  retention.md) every RETENTION_INTERVAL_SECONDS, in
  a thread of its own: a long prune holds up neither the heartbeat nor a stop. The
  first one comes at a random moment of the first interval, so that the trees of a
  fleet do not all prune at once, and a tree restarted more often still prunes.

They were the main's until 2026-12-07; the main is now a bare watcher
(runs/worker/watcher.py, why). Worker 1 keeps them in a thread with a connection of
its own (as the lease keeper's: never behind the runs' threads in the pool), and stops
at the tree's stop; a worker 1 that dies ends the tree, and the fresh tree's worker 1
takes them up. Nothing here hands runs to workers: their free slots poll the due runs.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection

from runs.db_faults import DATABASE_FAULTS
from runs.durable import clock
from runs.storage.retention import apply as apply_retention
from runs.worker import side_jobs
from runs.worker.db import use_own_connection_in_this_thread
from runs.worker.execute import store
from runs.worker.heartbeat import record_heartbeat, record_start
from runs.worker.roles import is_alive

logger = logging.getLogger("agentops.sweep")


def keep_duties(main: int, stop: threading.Event) -> None:
    """Worker 1's thread: the duties of the tree of `main` every SWEEP_INTERVAL until `stop`."""
    use_own_connection_in_this_thread()
    duties = Duties(main)
    while True:  # the first at once: the tree's row lists its workers from the start
        duties.tick()
        if stop.wait(settings.AGENTOPS["SWEEP_INTERVAL"]):
            break
    connection.close()


class Duties:
    def __init__(self, main: int | None = None):
        self.main = main  # the tree's main process, whose heartbeat this is
        self.prune_every = settings.AGENTOPS["RETENTION_INTERVAL_SECONDS"]
        self.next_prune = time.monotonic() + random.uniform(0, self.prune_every)
        self.pruning: threading.Thread | None = None

    def tick(self) -> None:
        """One round; a database fault ends it (the next tick tries again on a fresh
        connection), any other error is logged and the next duty goes on."""
        close_old_connections()
        for duty in (self.heartbeat, expire_dead_local_leases, side_jobs.tick,
                     self.retention):
            if not _survived(duty):
                return

    def heartbeat(self) -> None:
        record_heartbeat(main=self.main)

    def retention(self) -> None:
        if time.monotonic() < self.next_prune or (self.pruning and self.pruning.is_alive()):
            return
        self.next_prune = time.monotonic() + self.prune_every
        self.pruning = threading.Thread(target=_prune, name="retention", daemon=True)
        self.pruning.start()


def free_dead_leases() -> None:
    """Before a tree's workers start, and as each ends: a lease a dead worker of this
    host still holds (killed, not handed back) expires now, for a free slot to take its
    run at once."""
    _survived(expire_dead_local_leases)


def start_heartbeat() -> None:
    """The tree's row, new, before its workers start (runs/worker/heartbeat.py)."""
    _survived(record_start)


def _survived(duty) -> bool:
    try:
        duty()
        return True
    except DATABASE_FAULTS as exc:  # the database may be restarting
        logger.warning("%s failed: %s; trying again next tick", _name(duty), exc)
        connection.close()
        return False
    except Exception:  # noqa: BLE001 - the duties (and so the tree) must go on
        logger.exception("%s failed", _name(duty))
        return True


def _name(duty) -> str:
    return getattr(duty, "__qualname__", repr(duty))


def _prune() -> None:
    use_own_connection_in_this_thread()  # as the duties': a long prune holds no pooled one
    try:
        apply_retention()
    except Exception:  # noqa: BLE001 - the next interval tries again
        logger.exception("retention failed")
    finally:
        connection.close()  # this thread's own


def sweep() -> int:
    """The duties that need no tree, once: dead local workers' leases, then the side jobs.
    Returns how many leases were expired."""
    expired = expire_dead_local_leases()
    side_jobs.tick()
    return expired


def expire_dead_local_leases() -> int:
    """Expire, through the store, the leases held by processes of this host that no
    longer exist; a run claimed again meanwhile keeps its new lease (renew_leases
    checks epoch and owner)."""
    if not settings.AGENTOPS["DETECT_DEAD_LOCAL_WORKERS"]:
        return 0
    now, runs = clock.now(), store()
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
