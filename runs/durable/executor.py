"""The entry point a worker calls: claim a run, keep its lease alive, run it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from . import clock, observe
from .config import WorkerConfig, thread_ended
from .errors import DurableError, FencedError
from .records import Commit
from .registry import AgentRegistry
from .registry import registry as default_registry
from .session import Outcome, RunSession

logger = logging.getLogger("agentops.engine")

MAX_RECONNECTS = 3  # store failures in a row, the run no further, that are reconnected after


def execute_run(store, run_id: str, config: WorkerConfig, *,
                registry: AgentRegistry = default_registry,
                stop_event: threading.Event | None = None, leases=None,
                reconnect: Callable[[BaseException], bool] | None = None) -> str:
    """Run `run_id` for one time slice (or until it ends, waits or is stopped).

    Returns an Outcome. Safe to call for a run someone else holds: the claim is
    a conditional update, and a run that is not claimable returns NOT_CLAIMED.

    `leases`: an object with hold(session)/drop(session) that keeps the lease
    alive instead of a LeaseRenewer thread per run (a worker process holding
    hundreds of runs renews them together: runs/worker/leases.py).

    `reconnect(error)`: called when the store failed mid-run (a terminated
    connection, a database restart); returns True once the store answers again,
    False to leave the run as a crash leaves it (ABANDONED: its lease runs out).
    On True the session's lease is released, fenced by its epoch like every
    write, and the run is claimed again at once by the same claim: it resumes
    from what the store really holds, without waiting for its lease and without
    counting a crash (a database fault is not the run's doing). A store that
    answers yet fails the same run again and again (a full disk) is not
    reconnected to more than MAX_RECONNECTS times in a row without the run getting
    further: a database that blinks every few seconds while the run goes on (a
    flapping network, failovers one after another) is reconnected to each time.
    """
    failures, resumed_at = 0, None
    while True:
        session = _claimed(store, run_id, config, registry, stop_event)
        if session is None:
            return Outcome.NOT_CLAIMED
        outcome = _hosted(session, leases)
        if outcome != Outcome.ABANDONED:
            return outcome
        # In a row: the sessions that resumed the run where the one before resumed it
        # (a session that failed before it loaded the run got no further either).
        failures = failures + 1 if session.resumed_at in (None, resumed_at) else 1
        resumed_at = session.resumed_at or resumed_at
        given_up = _after_store_failure(session, reconnect, failures)
        if given_up is not None:
            return given_up


def _claimed(store, run_id: str, config: WorkerConfig, registry: AgentRegistry,
             stop_event: threading.Event | None) -> RunSession | None:
    """A session of the run if this worker claims it (None: not claimable), observed."""
    started = time.perf_counter()
    claim = store.claim(run_id, config.owner, config.lease_seconds, clock.now(),
                        codes=config.codes)
    if claim is None:
        return None
    session = RunSession(store, registry, config, claim, stop_event=stop_event)
    session.observed = observe.current().session(session)
    session.observed.claimed(time.perf_counter() - started)
    return session


def _hosted(session: RunSession, leases) -> str:
    """The session run with its lease kept alive: by `leases`, or a renewer of its own."""
    outcome = "error"  # an exception out of the session is a bug, but still an ending
    keeper = leases if leases is not None else LeaseRenewer(session)
    try:
        keeper.hold(session)
        try:
            outcome = session.execute()
        finally:
            keeper.drop(session)
    finally:
        session.observed.ended(outcome)
    return outcome


def _after_store_failure(session: RunSession, reconnect, failures: int) -> str | None:
    """The store failed mid-run: None once it answers again and the lease is released
    (the run may be claimed back), else the outcome to return."""
    run_id = session.run.id
    logger.warning("run %s: the store failed mid-run (%r)", run_id, session.store_error,
                   extra={"run_id": run_id})
    if reconnect is None or failures > MAX_RECONNECTS:
        return Outcome.ABANDONED  # a fault that outlasts reconnecting: the crash-loop guard's
    given_up = _release_when_reconnected(session, reconnect)
    if given_up is None:
        logger.info("run %s: store answers again; claiming it back", run_id,
                    extra={"run_id": run_id})
    return given_up


def _release_when_reconnected(session: RunSession, reconnect) -> str | None:
    """None once the lease is released (the run may be claimed again); else FENCED
    (another owner took the run meanwhile) or ABANDONED (`reconnect` gave up)."""
    error = session.store_error
    while reconnect(error):
        try:
            # Nothing else: whatever the failed commit did or did not write stands.
            session.store.commit(session.run.id, session.epoch, Commit(release=True))
            return None
        except FencedError:
            return Outcome.FENCED
        except DurableError:
            raise
        except Exception as exc:  # noqa: BLE001 - still failing: wait for it again
            error = exc
    return Outcome.ABANDONED


class LeaseRenewer(threading.Thread):
    """Renews the lease while a step runs, so a long tool call keeps its run.

    Renewal is fenced like every write: once another owner took the run, the
    renewal fails and the session stops at its next boundary.
    """

    def __init__(self, session: RunSession):
        super().__init__(name=f"lease-{session.run.id}", daemon=True)
        self.session = session
        self.interval = max(0.05, session.config.lease_seconds / 4)
        self._stopped = threading.Event()

    def hold(self, session: RunSession) -> None:
        self.start()

    def drop(self, session: RunSession) -> None:
        self._stopped.set()
        self.join(timeout=5)

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
            thread_ended(self.session.config)
