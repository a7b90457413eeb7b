"""Lease renewal for a worker process that holds many runs at once.

A LeaseRenewer thread per run (runs/durable/executor.py) costs a thread and one
UPDATE + SELECT per run and interval: 1,000 runs in a process would spend 2,000
statements a second on renewals alone. One keeper thread per process renews
every held lease that needs it in one transaction instead. A run that commits
often (every effect's commit extends its lease) needs no renewal at all; only
runs inside long tool calls are renewed.

The rules are those of RunSession.renew: the renewal is fenced by the run's
epoch (and owner, so a released run is not leased again), a run that was not
renewed has been taken over and its session stops at its next boundary, and
the control (pause/cancel) read with the renewal reaches the session.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from functools import reduce
from operator import or_

from django.db import DatabaseError, connection, transaction
from django.db.models import Q

from runs.db import release_connection
from runs.durable.faults import faults
from runs.models import Run
from runs.store import to_dt

logger = logging.getLogger("agentops.leases")

# one statement's worth of (id, epoch, owner) conditions
CHUNK = 250


class LeaseKeeper:
    def __init__(self):
        self._sessions: dict[int, object] = {}
        self._lock = threading.Lock()
        self._pid = None

    def hold(self, session) -> None:
        with self._lock:
            self._sessions[id(session)] = session
            if self._pid != os.getpid():  # first use in this (forked) process
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="lease-keeper", daemon=True).start()

    def drop(self, session) -> None:
        with self._lock:
            self._sessions.pop(id(session), None)

    def _loop(self) -> None:
        while True:
            interval = 1.0
            with self._lock:
                sessions = list(self._sessions.values())
            if sessions:
                interval = max(0.05, min(s.config.lease_seconds for s in sessions) / 4)
                try:
                    self.renew_due(sessions)
                except DatabaseError as exc:  # the database may be restarting: next tick
                    logger.warning("lease renewal failed: %s", exc)
                    connection.close()  # a broken connection is not reused (no pool: ours)
                except Exception:  # noqa: BLE001 - every held run depends on this thread
                    logger.exception("lease keeper: unexpected error, going on")
                finally:
                    release_connection()
            time.sleep(interval)

    def renew_due(self, sessions: list) -> int:
        """Renew the sessions whose lease ends within half a lease; return how many."""
        for session in sessions:  # crash tests kill the process here, as in LeaseRenewer
            faults.hit("lease_renewal", session.run.agent)
        now = time.time()
        due = [s for s in sessions if not s.fenced and
               s.lease_expires_at - now < s.config.lease_seconds / 2]
        renewed = 0
        for start in range(0, len(due), CHUNK):
            renewed += _renew_chunk(due[start:start + CHUNK])
        return renewed


def _renew_chunk(sessions: list) -> int:
    expires = time.time() + min(s.config.lease_seconds for s in sessions)
    held = {(s.run.id, s.epoch, s.owner) for s in sessions}
    condition = reduce(or_, (Q(pk=run_id, epoch=epoch, lease_owner=owner)
                             for run_id, epoch, owner in held))
    with transaction.atomic():
        Run.objects.filter(condition).update(lease_expires_at=to_dt(expires))
        # Read in the same transaction: a matched row stays locked until commit, so
        # its epoch and owner here are the ones the update saw.
        rows = Run.objects.filter(pk__in=[run_id for run_id, _, _ in held]).values_list(
            "id", "epoch", "lease_owner", "control")
        still_ours = {run_id: control for run_id, epoch, owner, control in rows
                      if (run_id, epoch, owner) in held}
    for session in sessions:
        if session.run.id in still_ours:
            session.control = still_ours[session.run.id]
            session.lease_expires_at = expires
        else:
            session.fenced = True  # a newer owner claimed the run: stop at the next boundary
            logger.warning("run %s: lease lost to a newer owner", session.run.id)
    return len(still_ours)


keeper = LeaseKeeper()
