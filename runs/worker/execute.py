"""A worker process: run slots that claim due runs, each run in a thread, and the
shutdown hand-off.

Many runs per process. Agents mostly wait on I/O (model calls, HTTP), so a worker
process holds up to RUNS_PER_WORKER runs at once, each in a thread (the engine is
synchronous). Its free slots poll the due runs (`Store.due_runs`: the claim rule and
the worker's agent code, runs/worker/fleet.py; the longest unchanged first) every
CLAIM_POLL_SECONDS and claim them: a launch only commits its run, and whichever free
slot polls next takes it. Time slices rotate runs when there are more runs than
slots: a run that used up its slice is released and waits behind the runs that waited
longer. What the threads share:
  * database connections: a small pool per process, held only while a run talks to
    the database (runs/worker/db.py), so 1,000 runs need ~20 connections;
  * lease renewal: one keeper thread per process (runs/worker/leases.py), fenced per
    run as before.
The price: a SIGKILL (or OOM) of the process crashes every run it holds at once, and
each of them counts it towards its crash-loop guard.

SIGTERM or SIGINT (a deploy, its main stopping, or its main's death: the kernel's
death signal, runs/worker/lifelines.py) first says that the tree is stopping (the
heartbeat, runs/worker/heartbeat.py: its code is served no more, so a tree of other
code may take the runs over), then sets STOP: every held run stops at its next effect
boundary and hands itself back (queued, lease released at once), for a free slot of
another worker to take at its next poll; then the process ends.
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
from django.db import connection

from runs.db_faults import DATABASE_FAULTS
from runs.durable import Outcome, WorkerConfig, clock, execute_run
from runs.durable.errors import RunNotFoundError
from runs.storage import database_store
from runs.wakeups import notify_run
from runs.worker import fleet
from runs.worker.config import worker_config
from runs.worker.db import (
    ReleasingStore,
    use_own_connection_in_this_thread,
    use_pool_in_this_process,
    wait_for_database,
)
from runs.worker.leases import keeper

logger = logging.getLogger("agentops.worker")

STOPPING = threading.Event()   # a stop signal came: claim no more runs
STOP = threading.Event()       # hand every held run back at its next boundary
SAY_STOPPING_SECONDS = 1.0     # the longest a hand-back waits for the heartbeat's word
WAITING_AFTER_SECONDS = 0.5    # a due run unclaimed this long is waiting for a slot
STOP_CHECK_SECONDS = 0.05      # how soon an idle worker notices a stop signal
M_ARENA_MAX = -8               # mallopt parameter, from glibc's malloc.h


def store() -> ReleasingStore:
    return ReleasingStore(database_store(notify=notify_run))


def prepare_process() -> None:
    """A forked worker process's set-up, before any thread of its own starts: a thread
    that asks for a connection of its own (the tree's duties, the lease keeper) gets one
    only once the process has its pool, and took the pool's before (a connection it held
    through a database failover went back to the pool as good: a run got it next)."""
    use_pool_in_this_process()
    _limit_malloc_arenas()


def work() -> None:
    """A worker process's life, after its fork and `prepare_process` (its stop signals
    already handled: install_signal_handlers): claim and run due runs until STOP, then
    wait for the held runs to hand themselves back."""
    RunSlots(settings.AGENTOPS["RUNS_PER_WORKER"]).serve()


def _execute(run_id: str, config: WorkerConfig) -> str:
    """One slice of a run. A run whose store call failed (a terminated connection, a
    database restart) waits for the database and takes itself back, instead of
    waiting for its lease to run out (runs/worker/db.py)."""
    return execute_run(store(), run_id, config, stop_event=STOP, leases=keeper,
                       reconnect=functools.partial(wait_for_database, stop=STOP))


class RunSlots:
    """Up to `slots` runs of this process at once, each in a thread.

    Free slots claim due runs, oldest first. Slices: a run claimed while other due
    runs wait for a slot gets the usual TIME_SLICE, so waiting runs take turns; a run
    claimed when nobody waits gets UNCONTENDED_SLICE_SECONDS (rotating it would cost a
    release, a claim and a load, for nobody), cut back to TIME_SLICE as soon as runs
    wait while every slot is taken.
    """

    def __init__(self, slots: int):
        self.slots = slots
        self.slice = settings.AGENTOPS["TIME_SLICE_SECONDS"]
        self.long_slice = settings.AGENTOPS["UNCONTENDED_SLICE_SECONDS"]
        self.poll = settings.AGENTOPS["CLAIM_POLL_SECONDS"]
        self.crowded = True  # until the first look at the due runs
        self.configs: dict[str, WorkerConfig] = {}  # of each held run: its slice

    def serve(self) -> None:
        # The main thread never waits on STOP itself: the signal handler sets it, and an
        # Event's lock taken by a handler that interrupted its own thread's wait deadlocks.
        with ThreadPoolExecutor(self.slots, thread_name_prefix="run") as pool:
            running: dict = {}
            while not STOP.is_set() or running:
                if not STOPPING.is_set():
                    self._claim(pool, running)
                if not running:
                    _nap(self.poll)
                    continue
                done, _ = wait(running, timeout=self.poll, return_when=FIRST_COMPLETED)
                for future in done:
                    run_id = running.pop(future)
                    if future.exception() is not None:  # one run's failure, not the others'
                        logger.error("run %s: worker thread failed", run_id,
                                     exc_info=future.exception(), extra={"run_id": run_id})

    def _claim(self, pool: ThreadPoolExecutor, running: dict) -> None:
        free = self.slots - len(running)
        # One more than fits: is anyone left waiting for a slot? A run released a moment
        # ago is not: a free slot somewhere takes it.
        due = _due_runs(exclude=list(running.values()), limit=free + 1)
        self.crowded = len(due) > free and _unchanged_for(due[free]) > WAITING_AFTER_SECONDS
        # A thread's start waits until the new thread holds the GIL once; behind the
        # batch's first runs, already claiming and loading, 1,000 starts took 4.7 s. The
        # batch's runs wait at a gate until every one of its threads has started.
        gate = threading.Event()
        try:
            for run_id in due[:free]:
                running[pool.submit(self._slot, run_id, gate)] = run_id
        finally:
            gate.set()
        if self.crowded:
            self._shorten_slices()

    def _slot(self, run_id: str, gate: threading.Event) -> str:
        gate.wait()
        slice_seconds = self.slice if self.crowded else max(self.slice, self.long_slice)
        config = self.configs[run_id] = worker_config(slice_seconds)
        try:
            outcome = _execute(run_id, config)
            if outcome == Outcome.HANDED_OFF:
                logger.info("run %s handed off on shutdown", run_id, extra={"run_id": run_id})
            elif outcome == Outcome.FENCED:  # cut off longer than its lease (a partition)
                logger.warning("run %s: fenced off: another worker claimed it, and this "
                               "worker's late writes were refused", run_id,
                               extra={"run_id": run_id})
            return outcome
        finally:
            self.configs.pop(run_id, None)
            store().close_thread_resources()  # this thread's own (SQLite) or back to the pool

    def _shorten_slices(self) -> None:
        # Runs wait and no slot is free: the held runs take turns with them. The
        # session reads its slice at each boundary, so this reaches running runs.
        for config in list(self.configs.values()):
            config.slice_seconds = min(config.slice_seconds, self.slice)


def _nap(seconds: float) -> None:
    """Sleep until the next poll, but not past a stop signal: an idle worker of a tree
    that ends should not hold up the fresh one."""
    deadline = time.monotonic() + seconds
    while not STOP.is_set() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, STOP_CHECK_SECONDS))


def _due_runs(exclude: list[str], limit: int) -> list[str]:
    """Due run ids (Store.due_runs), the longest unchanged first; none while the database
    is away (the held runs go on, and free slots look again at the next poll)."""
    try:
        return store().due_runs(clock.now(), limit, exclude=exclude,
                                codes=fleet.worker_codes(polling=True))
    except DATABASE_FAULTS as exc:
        logger.warning("looking for due runs failed: %s", exc)
        store().close_thread_resources()  # the broken one (back to the pool, which drops it)
        return []


def _unchanged_for(run_id: str) -> float:
    """Seconds since the run last changed: how long a due run has waited for a slot
    (0 when it cannot be read: nobody is taken for waiting)."""
    try:
        return clock.now() - store().get(run_id).updated_at
    except (RunNotFoundError, *DATABASE_FAULTS):
        return 0.0


def _limit_malloc_arenas() -> None:
    # glibc gives threads that allocate at once arenas of their own (up to 8 per
    # core); hundreds of run threads then spread small objects over many
    # half-empty arenas. Two keep the memory of a process holding 500 runs down.
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: its allocator has its own policy
        return
    libc.mallopt(M_ARENA_MAX, 2)


def install_signal_handlers(before_stop=None) -> None:
    """`before_stop`: said once a stop signal came, before any run is handed back (for
    at most SAY_STOPPING_SECONDS: a database that does not answer holds up no stop)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, functools.partial(_on_stop_signal, before_stop))


def _on_stop_signal(before_stop, signum, frame) -> None:
    if STOPPING.is_set():
        return
    STOPPING.set()
    # Not in the handler: it interrupted this thread, maybe inside a database call.
    threading.Thread(target=_stop, args=(before_stop,), name="stop", daemon=True).start()
    # Held runs hand themselves back at their next effect boundary. One stuck in a slow
    # tool call would keep this process (and the run's lease) alive: with the main gone
    # (a death signal), nobody else would end it after the grace.
    grace = threading.Timer(settings.AGENTOPS["SHUTDOWN_GRACE_SECONDS"], os._exit, (1,))
    grace.daemon = True
    grace.start()


def _stop(before_stop) -> None:
    if before_stop is not None:
        saying = threading.Thread(target=_said, args=(before_stop,), name="say-stopping",
                                  daemon=True)
        saying.start()
        saying.join(SAY_STOPPING_SECONDS)
    STOP.set()


def _said(before_stop) -> None:
    # Not through the pool, where it would wait behind the runs' threads.
    use_own_connection_in_this_thread()
    try:
        before_stop()
    except DATABASE_FAULTS as exc:
        logger.warning("could not say that the tree is stopping: %s", exc)
    except Exception:  # noqa: BLE001 - the stop goes on
        logger.exception("could not say that the tree is stopping")
    finally:
        connection.close()  # this thread's own
