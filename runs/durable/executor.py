"""The entry point a worker calls: claim a run, keep its lease alive, run it."""

from __future__ import annotations

import logging
import threading
import time

from .errors import FencedError
from .registry import AgentRegistry
from .registry import registry as default_registry
from .session import Outcome, RunSession, WorkerConfig

logger = logging.getLogger("agentops.engine")


def execute_run(store, run_id: str, config: WorkerConfig, *,
                registry: AgentRegistry = default_registry,
                stop_event: threading.Event | None = None, leases=None) -> str:
    """Run `run_id` for one time slice (or until it ends, waits or is stopped).

    Returns an Outcome. Safe to call for a run someone else holds: the claim is
    a conditional update, and a run that is not claimable returns NOT_CLAIMED.

    `leases`: an object with hold(session)/drop(session) that keeps the lease
    alive instead of a LeaseRenewer thread per run (a worker process holding
    hundreds of runs renews them together: runs/leases.py).
    """
    claim = store.claim(run_id, config.owner, config.lease_seconds, time.time())
    if claim is None:
        return Outcome.NOT_CLAIMED
    session = RunSession(store, registry, config, claim, stop_event=stop_event)
    if leases is not None:
        leases.hold(session)
        try:
            return _execute(session)
        finally:
            leases.drop(session)
    renewer = LeaseRenewer(session, store)
    renewer.start()
    try:
        return _execute(session)
    finally:
        renewer.stop()


def _execute(session: RunSession) -> str:
    outcome = session.execute()
    if outcome == Outcome.ABANDONED:
        logger.warning("run %s: the store failed mid-run (%r); left to the recovery sweep "
                       "once its lease runs out", session.run.id, session.store_error)
    return outcome


class LeaseRenewer(threading.Thread):
    """Renews the lease while a step runs, so a long tool call keeps its run.

    Renewal is fenced like every write: once another owner took the run, the
    renewal fails and the session stops at its next boundary.
    """

    def __init__(self, session: RunSession, store):
        super().__init__(name=f"lease-{session.run.id}", daemon=True)
        self.session = session
        self.store = store
        self.interval = max(0.05, session.config.lease_seconds / 4)
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopped.wait(self.interval):
                try:
                    self.session.renew()
                except FencedError:
                    logger.warning("run %s: lease lost to a newer owner", self.session.run.id)
                    return
                except Exception:  # a database hiccup: the next renewal may succeed
                    logger.exception("run %s: lease renewal failed", self.session.run.id)
        finally:
            close = getattr(self.store, "close_thread_resources", None)
            if close is not None:
                close()

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)
