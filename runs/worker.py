"""The django-q2 task that executes runs, and the worker process's shutdown hand-off.

Deploys signal workers in two ways (STACK-NOTES): SIGTERM to qcluster's main
process only (our qcluster forwards SIGUSR1 to the workers), or SIGTERM to the
whole process group (each worker gets it directly). Either way the worker's
handler sets STOP; the running run stops at its next effect boundary, hands
itself back (queued, lease released at once) and only then does a worker that
got SIGTERM die, as it would have without us.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from runs.config import worker_config
from runs.durable import Outcome, execute_run
from runs.live import notify_run
from runs.models import Run
from runs.store import OrmStore, due_runs_queryset

logger = logging.getLogger("agentops.worker")

TASK = "runs.worker.execute_run_task"
STOP = threading.Event()       # hand the current run back at its next boundary
_state = {"active": False, "terminate": False}


def store() -> OrmStore:
    return OrmStore(notify=notify_run)


def execute_run_task(run_id: str) -> str:
    if STOP.is_set():
        # This process is draining: leave the run to a live cluster's sweep.
        Run.objects.filter(pk=run_id, lease_owner__isnull=True).update(enqueued_at=None)
        return "draining"
    close_old_connections()
    _state["active"] = True
    try:
        if settings.AGENTOPS["RUNS_PER_WORKER"] > 1:
            return _execute_many(run_id)
        return _execute_one(run_id)
    finally:
        _state["active"] = False
        # Even when the hand-off failed (the database may be gone too), a worker told to
        # terminate must not outlive its cluster waiting on a queue nobody feeds.
        if _state["terminate"]:
            _die_by_sigterm()


def _execute_one(run_id: str, in_thread: bool = False) -> str:
    try:
        outcome = execute_run(store(), run_id, worker_config(), stop_event=STOP)
        if outcome == Outcome.YIELDED:
            enqueue_run(run_id)
        elif outcome == Outcome.HANDED_OFF:
            Run.objects.filter(pk=run_id).update(enqueued_at=None)
            logger.info("run %s handed off on shutdown", run_id)
        return outcome
    finally:
        if in_thread:
            connection.close()


def _execute_many(first_run_id: str) -> str:
    """Runs whose steps mostly wait on I/O (LLM calls, HTTP) share a worker process:
    besides the run of this task, the process claims other due runs while it has
    free slots, each in a thread of its own (with its own database connection).
    It stops taking new runs after WORKER_TASK_SECONDS, well inside django-q2's
    task timeout, and on shutdown."""
    slots = settings.AGENTOPS["RUNS_PER_WORKER"]
    deadline = time.monotonic() + settings.AGENTOPS["WORKER_TASK_SECONDS"]
    outcome = Outcome.NOT_CLAIMED
    with ThreadPoolExecutor(slots, thread_name_prefix="run") as pool:
        running = {pool.submit(_execute_one, first_run_id, True): first_run_id}
        while running:
            free = slots - len(running)
            if free > 0 and not STOP.is_set() and time.monotonic() < deadline:
                for run_id in _due_runs(exclude=list(running.values()), limit=free):
                    running[pool.submit(_execute_one, run_id, True)] = run_id
            done, _ = wait(running, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                run_id = running.pop(future)
                try:
                    result = future.result()
                except Exception:  # one run's failure must not take the others down
                    logger.exception("run %s: worker thread failed", run_id)
                    continue
                if run_id == first_run_id:
                    outcome = result
    return outcome


def _due_runs(exclude: list[str], limit: int) -> list[str]:
    return list(due_runs_queryset(time.time()).exclude(pk__in=exclude)
                .order_by("updated_at").values_list("id", flat=True)[:limit])


def enqueue_run(run_id: str) -> None:
    """Queue a task for the run once the current transaction commits."""
    def send():
        from django_q.tasks import async_task

        Run.objects.filter(pk=run_id).update(enqueued_at=timezone.now())
        async_task(TASK, run_id, task_name=f"run-{run_id}", group="runs")

    transaction.on_commit(send)


def install_signal_handlers() -> None:
    """Called in each worker process (django-q2's post_spawn)."""
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
