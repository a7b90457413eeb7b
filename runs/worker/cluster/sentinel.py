"""The sentinel of a self-healing cluster: django-q2's Sentinel, with generations.

Why django-q2's own sentinel cannot recover from a kill: its workers share one
task queue and its monitor one result queue (multiprocessing Queues). A
Queue.get() holds the queue's read lock (a SemLock) while it blocks on the
pipe, and an idle worker always sits in task_queue.get(); the monitor sits in
result_queue.get(); the pusher's feeder thread holds the write lock while it
writes. A process killed there (SIGKILL, or SIGTERM, whose handler exits at
once when idle) leaves the lock held for good: django-q2 reincarnates the
process on the same queue and the new one blocks on the dead one's lock, and so
does every other worker. Nothing can free a SemLock held by a dead process.

So a process that dies unexpectedly (killed by a signal, or a non-zero exit)
ends its *generation*: fresh task and result queues, and fresh workers, monitor
and pusher on them. The old generation's workers get SIGTERM: one that holds
runs hands them back at its next effect boundary and dies (runs/worker/execute.py),
an idle one dies at once; a stopped one (SIGSTOP) is killed; any still alive
after SHUTDOWN_GRACE_SECONDS is killed. The old pusher and monitor are killed:
tasks they held (in the old queues, or taken from the broker and not yet
acknowledged) are found again by the recovery sweep, which re-enqueues a due
run nobody claimed (REQUEUE_STUCK_SECONDS), and by the broker's own retry;
a duplicate task is harmless, a run's claim decides. A process that exited
cleanly (a worker recycled after `recycle` tasks, a pusher that gave up on the
broker) released its locks and is simply respawned, as django-q2 does.

The guard loop also
* survives errors (the scheduler and the watchdog talk to the database),
* never waits on a lock a dead process may hold (a worker's timer Value is read
  without its lock, and decremented only if the lock is free),
* beats a shared clock the main process watches (runs/worker/cluster/main.py), and
  tells it when a generation began, and
* runs the watchdog (runs/worker/cluster/watchdog.py).

Every child asks the kernel to signal it when the sentinel dies
(runs/worker/cluster/lifelines.py), and the sentinel itself dies with its main.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
import uuid
from multiprocessing.sharedctypes import RawValue

from django import db
from django.conf import settings
from django_q.cluster import Sentinel, get_mp_context
from django_q.conf import Conf
from django_q.monitor import monitor
from django_q.pusher import pusher
from django_q.queues import Queue
from django_q.scheduler import scheduler
from django_q.status import Stat
from django_q.worker import worker

from runs.worker.cluster import roles
from runs.worker.cluster.lifelines import describe_exit, die_with_parent
from runs.worker.cluster.watchdog import Watchdog

logger = logging.getLogger("agentops.cluster")

ROLE_OF = {worker: roles.WORKER, pusher: roles.PUSHER, monitor: roles.MONITOR}
# A worker may hold runs: SIGTERM lets it hand them back. The others hold nothing.
DEATH_SIGNAL = {roles.WORKER: signal.SIGTERM}
IDLE = -1                        # django-q2's value of an idle worker's timer
SCHEDULE_EVERY = 30.0            # seconds, as django-q2's guard loop


def _child(role: str, parent_pid: int, target, *args) -> None:
    die_with_parent(parent_pid, DEATH_SIGNAL.get(role, signal.SIGKILL))
    roles.mark(role)
    target(*args)


class GenerationalSentinel(Sentinel):
    def __init__(self, stop_event, start_event, cluster_id, main_pid, pulse,
                 broker=None, timeout=None):
        die_with_parent(main_pid, signal.SIGKILL)
        roles.mark(roles.SENTINEL)
        self.pulse = pulse
        self.generation = 0
        self.draining: list[tuple] = []   # (process, kill-after monotonic time)
        self.watchdog = Watchdog(settings.AGENTOPS["WATCHDOG_SECONDS"])
        self.next_schedule = time.monotonic() + SCHEDULE_EVERY
        super().__init__(stop_event, start_event, cluster_id, broker, timeout, start=True)

    # --- processes ------------------------------------------------------------------
    def spawn_process(self, target, *args):
        role = ROLE_OF[target]
        process = get_mp_context().Process(
            target=_child, args=(role, os.getpid(), target, *args),
            name=roles.process_name(role, self.generation, uuid.uuid4().hex[:6]))
        process.daemon = Conf.DAEMONIZE_WORKERS if role == roles.WORKER else True
        if role == roles.WORKER:
            process.timer = args[2]
            self.pool.append(process)
        process.start()
        return process

    def spawn_cluster(self):
        roles.set_title(f"{roles.SENTINEL}-{self.generation}", str(self.cluster_id)[:8])
        super().spawn_cluster()

    def status(self) -> str:
        # django-q2 reads the queues' sizes under their locks, which a killed process
        # may hold; a raw read cannot hang.
        if self.start_event.is_set() and not self.stop_event.is_set():
            busy = _queued(self.task_queue) or _queued(self.result_queue)
            return Conf.WORKING if busy else Conf.IDLE
        return super().status()

    # --- the guard loop -------------------------------------------------------------
    def guard(self):
        logger.info("sentinel %s guarding cluster %s", os.getpid(), self.cluster_id)
        self.start_event.set()
        while True:
            self.pulse.beat = time.time()
            for duty in (self.tend, self.reap_draining, self.schedule, self.save_stat):
                try:
                    duty()
                except Exception:  # the database may be restarting: next cycle
                    logger.exception("guard loop: %s failed", duty.__name__)
                    db.connections.close_all()
            if self.stop_event.wait(Conf.GUARD_CYCLE):
                break
        self.stop()

    def tend(self) -> None:
        reason = self.check_processes() or self.watchdog.check(
            self.workers_idle(), _queued(self.task_queue), self.broker.queue_size)
        if reason:
            self.new_generation(reason)

    def check_processes(self) -> str | None:
        """Why this generation must end, or None; respawns what exited cleanly."""
        for process in list(self.pool):
            if process.is_alive():
                if _timer(process) == 0:
                    return f"worker {process.pid} ran past the task timeout"
                _count_down(process)
            elif process.exitcode != 0:
                return f"worker {process.pid} died ({describe_exit(process.exitcode)})"
            else:  # recycled, or its task timed out: it released its locks
                self.reincarnate(process)
        for process in (self.monitor, self.pusher):
            if not process.is_alive():
                if process.exitcode != 0:
                    role = roles.MONITOR if process is self.monitor else roles.PUSHER
                    return f"{role} {process.pid} died ({describe_exit(process.exitcode)})"
                self.reincarnate(process)
        return None

    def workers_idle(self) -> bool:
        return all(_timer(p) == IDLE for p in self.pool)

    def new_generation(self, reason: str) -> None:
        logger.error("cluster %s: %s: starting generation %d on fresh queues",
                     self.cluster_id, reason, self.generation + 1)
        self.retire(self.pool, self.pusher, self.monitor)
        self.generation += 1
        self.pulse.generation = self.generation
        self.task_queue = Queue(maxsize=Conf.QUEUE_LIMIT) if Conf.QUEUE_LIMIT else Queue()
        self.result_queue = Queue()
        self.spawn_cluster()
        self.reincarnations += 1
        self.watchdog.reset()

    def retire(self, workers, *others) -> None:
        grace = time.monotonic() + settings.AGENTOPS["SHUTDOWN_GRACE_SECONDS"]
        for process in others:
            roles.send(process.pid, signal.SIGKILL)
            self.draining.append((process, 0.0))
        for process in workers:
            roles.send(process.pid, signal.SIGKILL if roles.is_stopped(process.pid)
                       else signal.SIGTERM)
            self.draining.append((process, grace))

    def reap_draining(self) -> None:
        now = time.monotonic()
        still = []
        for process, kill_after in self.draining:
            if not process.is_alive():
                continue
            if now >= kill_after or roles.is_stopped(process.pid):
                roles.send(process.pid, signal.SIGKILL)
            still.append((process, kill_after))
        self.draining = still

    def schedule(self) -> None:
        if Conf.SCHEDULER and time.monotonic() >= self.next_schedule:
            self.next_schedule = time.monotonic() + SCHEDULE_EVERY
            scheduler(broker=self.broker)

    def save_stat(self) -> None:
        Stat(self).save()

    def stop(self):
        super().stop()
        for process, _ in self.draining:
            roles.send(process.pid, signal.SIGKILL)


def _queued(queue) -> int:
    return queue.size.count.get_obj().value


def _timer(process) -> float:
    return process.timer.get_obj().value


def _count_down(process) -> None:
    """django-q2's timeout clock: a busy worker's timer falls by a guard cycle each
    cycle. Only under the timer's lock (the worker writes it too), and only if the
    lock is free: a worker killed while holding it must not stop this loop."""
    lock = process.timer.get_lock()
    if not lock.acquire(timeout=0.05):
        return
    try:
        if process.timer.get_obj().value > 0:
            process.timer.get_obj().value -= Conf.GUARD_CYCLE
    finally:
        lock.release()


class Pulse(ctypes.Structure):
    """What the sentinel tells its main process, in shared memory with no lock a dead
    process could hold: when its guard loop last ran, and its generation (the main
    re-enqueues due runs at once when a generation took its queues' tasks away)."""

    _fields_ = [("beat", ctypes.c_double), ("generation", ctypes.c_int)]


def new_pulse() -> Pulse:
    return RawValue(Pulse, time.time(), 0)
