"""Lease renewal for a worker process that holds many runs at once.

A LeaseRenewer thread per run (runs/durable/executor.py) costs a thread and one
UPDATE + SELECT per run and interval: 1,000 runs in a process would spend 2,000
statements a second on renewals alone. One keeper thread per process renews
every held lease that needs it with one `Store.renew_leases` call instead. A run
that commits often (every effect's commit extends its lease) needs no renewal at
all; only runs inside long tool calls are renewed.

The rules are the store's (`renew_leases`, held to them by the contract suite): a
lease is renewed only while the run keeps its epoch and owner (a released run is
not leased again). What the keeper learns goes to each session's LeaseState
(runs/durable/lease.py), the one object a session shares with renewing threads: a
lease renewed with the control request it read, or lost to a newer owner (the
session stops at its next boundary).
"""

from __future__ import annotations

import logging
import os
import threading

from runs.db_faults import DATABASE_FAULTS
from runs.durable import clock
from runs.durable.faults import faults
from runs.storage import database_store
from runs.worker.db import ReleasingStore, use_own_connection_in_this_thread

logger = logging.getLogger("agentops.leases")


class LeaseKeeper:
    def __init__(self, make_store=lambda: ReleasingStore(database_store())):
        self._sessions: dict[int, object] = {}
        self._lock = threading.Lock()
        self._pid = None
        self._make_store = make_store
        self._stop = threading.Event()

    def hold(self, session) -> None:
        with self._lock:
            self._sessions[id(session)] = session
            if self._pid != os.getpid():  # first use in this (forked) process
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="lease-keeper", daemon=True).start()

    def drop(self, session) -> None:
        with self._lock:
            self._sessions.pop(id(session), None)

    def stop(self) -> None:
        """End the keeper's thread (its connection closed) at its next tick."""
        self._stop.set()

    def _loop(self) -> None:
        use_own_connection_in_this_thread()
        store = self._make_store()
        interval = 0.0
        while not self._stop.wait(interval):
            interval = 1.0
            with self._lock:
                sessions = list(self._sessions.values())
            if sessions:
                interval = max(0.05, min(s.config.lease_seconds for s in sessions) / 4)
                try:
                    self.renew_due(sessions, store)
                except DATABASE_FAULTS as exc:  # the database may be restarting: next tick
                    logger.warning("lease renewal failed: %s", exc)
                    # A connection of its own is kept open, so a broken one (an
                    # OperationalError, or Django's InterfaceError for one already
                    # closed) is dropped here, or every tick after would fail on it.
                    store.close_thread_resources()
                except Exception:  # noqa: BLE001 - every held run depends on this thread
                    logger.exception("lease keeper: unexpected error, going on")
                    store.close_thread_resources()
        store.close_thread_resources()

    def renew_due(self, sessions: list, store) -> int:
        """Renew the sessions whose lease ends within half a lease; return how many."""
        for session in sessions:  # crash tests kill the process here, as in LeaseRenewer
            faults.hit("lease_renewal", session.run.agent)
        now = clock.now()
        due = [s for s in sessions if s.lease.due_for_renewal(now, s.config.lease_seconds)]
        if not due:
            return 0
        expires = clock.now() + min(s.config.lease_seconds for s in due)
        renewed = store.renew_leases([s.lease.held for s in due], expires)
        for session in due:
            if session.lease.held.run_id in renewed:
                session.lease.renewed(expires, renewed[session.lease.held.run_id])
            else:
                session.lease.lost()  # a newer owner claimed the run: stop at the next boundary
                logger.warning("run %s: lease lost to a newer owner", session.lease.held.run_id,
                               extra={"run_id": session.lease.held.run_id,
                                      "worker": session.owner})
        return len(renewed)


keeper = LeaseKeeper()
