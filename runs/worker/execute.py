"""The django-q2 task that executes runs, and the worker process's shutdown hand-off.

Deploys signal workers in two ways: SIGTERM to qcluster's main
process only (our qcluster forwards SIGUSR1 to the workers), or SIGTERM to the
whole process group (each worker gets it directly). Either way the worker's
handler sets STOP; every run the process holds stops at its next effect
boundary, hands itself back (queued, lease released at once) and only then does
a worker that got SIGTERM die, as it would have without us.

Many runs per process. Agents mostly wait on I/O (model calls, HTTP), so a
worker process holds up to RUNS_PER_WORKER runs at once, each in a thread (the
engine is synchronous): the task of one run turns the process into a host of
run slots (RunSlots) that claims due runs, oldest first, while it has free
slots. Time slices still rotate runs when there are more runs than slots: a
run that used up its slice is released and waits behind the runs that waited
longer. What the threads share:
  * database connections: a small pool per process, held only while a run
    talks to the database (runs/worker/db.py), so 1,000 runs need ~20 connections;
  * lease renewal: one keeper thread per process (runs/worker/leases.py), fenced
    per run as before.
The price: a SIGKILL (or OOM) of the process crashes every run it holds at
once, and each of them counts it towards its crash-loop guard.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from runs.durable import Outcome, WorkerConfig, claimable, execute_run
from runs.durable.errors import RunNotFoundError
from runs.live.notify import notify_run
from runs.models import Run
from runs.storage import database_store
from runs.worker.config import worker_config
from runs.worker.db import (
    DATABASE_FAULTS,
    ReleasingStore,
    release_connection,
    use_pool_in_this_process,
    wait_for_database,
)
from runs.worker.leases import keeper

logger = logging.getLogger("agentops.worker")

TASK = "runs.worker.execute.execute_run_task"
STOP = threading.Event()       # hand every held run back at its next boundary
_state = {"active": False, "terminate": False}
CLAIM_POLL_SECONDS = 0.2       # how soon a free slot looks for a due run
WAITING_AFTER_SECONDS = 0.5    # a due run unclaimed this long is waiting for a slot
M_ARENA_MAX = -8               # mallopt parameter, from glibc's malloc.h


def store() -> ReleasingStore:
    return ReleasingStore(database_store(notify=notify_run))


def execute_run_task(run_id: str) -> str:
    if STOP.is_set():
        # This process is draining (its cluster may have pulled this task a moment
        # before it stopped pulling): pass the run on to a live cluster.
        try:
            _pass_to_live_cluster(run_id)
        finally:
            release_connection()
        return "draining"
    close_old_connections()
    _state["active"] = True
    try:
        slots = settings.AGENTOPS["RUNS_PER_WORKER"]
        if slots > 1:
            return RunSlots(slots).run(run_id)
        return _execute_one(run_id)
    finally:
        release_connection()
        _state["active"] = False
        # Even when the hand-off failed (the database may be gone too), a worker told to
        # terminate must not outlive its cluster waiting on a queue nobody feeds.
        if _state["terminate"]:
            _die_by_sigterm()


def _execute(run_id: str, config: WorkerConfig) -> str:
    """One slice of a run. A run whose store call failed (a terminated connection, a
    database restart) waits for the database and takes itself back, instead of
    waiting for its lease to run out (runs/worker/db.py)."""
    outcome = execute_run(store(), run_id, config, stop_event=STOP, leases=keeper,
                          reconnect=functools.partial(wait_for_database, stop=STOP))
    if outcome == Outcome.WAITING:
        _chat_after_wait(run_id)
    return outcome


def _chat_after_wait(run_id: str) -> None:
    """A chat message sent while the run was busy answers the wait it just began
    (runs/chat/services.py: both sides deliver after their own write)."""
    from runs.chat.services import deliver_queued

    try:
        deliver_queued(run_id)
    except DATABASE_FAULTS:  # the sender's side, or the next wait, delivers it
        logger.warning("run %s: queued chat messages not delivered now", run_id, exc_info=True)


def _execute_one(run_id: str) -> str:
    """One slice of one run, alone in this process."""
    outcome = _execute(run_id, worker_config())
    if outcome == Outcome.YIELDED:
        enqueue_run(run_id)
    elif outcome == Outcome.HANDED_OFF:
        _handed_off(run_id)
    return outcome


def _handed_off(run_id: str) -> None:
    _pass_to_live_cluster(run_id)
    logger.info("run %s handed off on shutdown", run_id, extra={"run_id": run_id})


def _pass_to_live_cluster(run_id: str) -> None:
    """If the run is due, a task for it at once, for a live cluster's worker to take
    at its next poll of the broker. enqueued_at is cleared, so a live cluster's sweep
    sends another should this one reach a draining worker (which passes it on again)
    or be lost with its cluster; two tasks are harmless, the claim decides. Leaving
    the run to the sweep alone took up to 1.3 s after a SIGTERM (bench/recovery.py)."""
    try:
        due = claimable.holds(store().get(run_id), time.time())
    except RunNotFoundError:
        return  # deleted meanwhile: nothing to pass on
    if due and Run.objects.filter(pk=run_id).update(enqueued_at=None):
        _send_task(run_id)


class RunSlots:
    """Up to `slots` runs of this process at once, each in a thread.

    The task's own run takes the first slot; free slots claim due runs, oldest
    first. Slices: a run claimed while other due runs wait for a slot gets the
    usual TIME_SLICE, so waiting runs take turns; a run claimed when nobody
    waits gets UNCONTENDED_SLICE_SECONDS (rotating it would cost a release, a
    claim and a load, for nobody), cut back to TIME_SLICE as soon as runs wait
    while every slot is taken. The task stops taking runs after
    WORKER_TASK_SECONDS (well inside django-q2's task timeout) and on shutdown,
    then waits for its runs: each ends its slice or, on shutdown, hands itself
    back at its next boundary. A yielded run needs no broker task: the free
    slots of every process claim due runs.
    """

    def __init__(self, slots: int):
        self.slots = slots
        self.slice = settings.AGENTOPS["TIME_SLICE_SECONDS"]
        self.long_slice = settings.AGENTOPS["UNCONTENDED_SLICE_SECONDS"]
        self.deadline = time.monotonic() + settings.AGENTOPS["WORKER_TASK_SECONDS"]
        self.crowded = True  # until the first look at the due runs
        self.configs: dict[str, WorkerConfig] = {}  # of each held run: its slice

    def claiming(self) -> bool:
        return not STOP.is_set() and time.monotonic() < self.deadline

    def run(self, first_run_id: str) -> str:
        outcome = Outcome.NOT_CLAIMED
        with ThreadPoolExecutor(self.slots, thread_name_prefix="run") as pool:
            running = {pool.submit(self._slot, first_run_id): first_run_id}
            while running:
                if self.claiming():
                    free = self.slots - len(running)
                    # One more than fits: is anyone left waiting for a slot? A run
                    # released a moment ago is not: a free slot somewhere takes it.
                    due = _due_runs(exclude=list(running.values()), limit=free + 1)
                    self.crowded = len(due) > free and \
                        _unchanged_for(due[free]) > WAITING_AFTER_SECONDS
                    for run_id in due[:free]:
                        running[pool.submit(self._slot, run_id)] = run_id
                    if self.crowded:
                        self._shorten_slices()
                done, _ = wait(running, timeout=CLAIM_POLL_SECONDS, return_when=FIRST_COMPLETED)
                for future in done:
                    run_id = running.pop(future)
                    try:
                        result = future.result()
                    except Exception:  # one run's failure must not take the others down
                        logger.exception("run %s: worker thread failed", run_id,
                                         extra={"run_id": run_id})
                        continue
                    if run_id == first_run_id:
                        outcome = result
        if not STOP.is_set():
            self._pass_on()
        return outcome

    def _slot(self, run_id: str) -> str:
        slice_seconds = self.slice if self.crowded else \
            max(self.slice, min(self.long_slice, self.deadline - time.monotonic()))
        config = self.configs[run_id] = worker_config(slice_seconds)
        try:
            outcome = _execute(run_id, config)
            if outcome == Outcome.YIELDED and not STOP.is_set():
                # enqueued_at keeps the sweep from sending it a broker task unless it
                # waits more than REQUEUE_STUCK_SECONDS for a slot.
                Run.objects.filter(pk=run_id, lease_owner__isnull=True).update(
                    enqueued_at=timezone.now())
            elif outcome in (Outcome.HANDED_OFF, Outcome.YIELDED):
                _handed_off(run_id)
            return outcome
        finally:
            self.configs.pop(run_id, None)
            store().close_thread_resources()  # this thread's own (SQLite) or back to the pool

    def _shorten_slices(self) -> None:
        # Runs wait and no slot is free: the held runs take turns with them. The
        # session reads its slice at each boundary, so this reaches running runs.
        for config in list(self.configs.values()):
            config.slice_seconds = min(config.slice_seconds, self.slice)

    def _pass_on(self) -> None:
        """The task ends with runs still due: a task for the oldest, so a process
        (this one, next) hosts runs again without waiting for the sweep."""
        due = _due_runs(exclude=[], limit=1)
        if due:
            enqueue_run(due[0])
            release_connection()


def _due_runs(exclude: list[str], limit: int) -> list[str]:
    """Due run ids (Store.due_runs), the longest unchanged first; none while the database
    is away (the held runs go on, and free slots look again at the next poll)."""
    try:
        return store().due_runs(time.time(), limit, exclude=exclude)
    except DATABASE_FAULTS as exc:
        logger.warning("looking for due runs failed: %s", exc)
        store().close_thread_resources()  # the broken one (back to the pool, which drops it)
        return []


def _unchanged_for(run_id: str) -> float:
    """Seconds since the run last changed: how long a due run has waited for a slot
    (0 when it cannot be read: nobody is taken for waiting)."""
    try:
        return time.time() - store().get(run_id).updated_at
    except (RunNotFoundError, *DATABASE_FAULTS):
        return 0.0


def enqueue_run(run_id: str) -> None:
    """Queue a task for the run once the current transaction commits."""
    def send():
        Run.objects.filter(pk=run_id).update(enqueued_at=timezone.now())
        _send_task(run_id)

    transaction.on_commit(send)


def _send_task(run_id: str) -> None:
    from django_q.tasks import async_task

    async_task(TASK, run_id, task_name=f"run-{run_id}", group="runs")


def configure_worker_process() -> None:
    """Called in each worker process, after the fork (django-q2's post_spawn)."""
    install_signal_handlers()
    use_pool_in_this_process()
    _limit_malloc_arenas()


def _limit_malloc_arenas() -> None:
    # glibc gives threads that allocate at once arenas of their own (up to 8 per
    # core); hundreds of run threads then spread small objects over many
    # half-empty arenas. Two keep the memory of a process holding 500 runs down.
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: its allocator has its own policy
        return
    libc.mallopt(M_ARENA_MAX, 2)


def install_signal_handlers() -> None:
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGUSR1, _on_signal)


def _on_signal(signum, frame) -> None:
    STOP.set()
    if signum == signal.SIGTERM:
        _state["terminate"] = True
        if not _state["active"]:
            _die_by_sigterm()


def _die_by_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
