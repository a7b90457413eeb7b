"""The cluster under qcluster's main process, and how the main replaces it.

django-q2's Cluster starts one sentinel and never looks at it again: killed,
it leaves the main process alive with nothing under it, neither working nor
exiting for a supervisor to restart it. Here the main asks, every tick of its
loop, whether its sentinel can still work (`SelfHealingCluster.failure`):
it has exited, it is stopped (SIGSTOP), or its guard loop has not beaten for
SENTINEL_STALE_SECONDS. If not, it kills what is left of the old tree and starts
a fresh cluster in the same process (`replace`): under honcho (`bin/serve`) an
exit would stop the web process too.

The main is a child subreaper (runs/worker/cluster/lifelines.py): the old sentinel's
workers, orphaned while they hand their runs back, become its children, so it
reaps them, lists them in its heartbeat and kills those that outlive the grace.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid

import psutil
from django import db
from django.conf import settings
from django_q.cluster import Cluster, get_mp_context

from runs.worker.cluster import proctree, roles
from runs.worker.cluster.lifelines import describe_exit
from runs.worker.cluster.sentinel import GenerationalSentinel, new_pulse

logger = logging.getLogger("agentops.cluster")


class SelfHealingCluster(Cluster):
    def __init__(self, broker=None):
        # django-q2's Cluster takes SIGTERM and SIGINT for itself; the qcluster
        # command's handlers (the deploy hand-off) must stay, across replacements too.
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        super().__init__(broker)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    def start(self) -> int:
        roles.set_title(roles.MAIN, self.name)
        self.stop_event = get_mp_context().Event()
        self.start_event = get_mp_context().Event()
        self.pulse = new_pulse()
        self.generation_seen = 0
        # The main's sweep keeps its connection open between ticks; a sentinel forked
        # with it would share it (and close it for the main when it closes its own).
        db.connections.close_all()
        self.sentinel = get_mp_context().Process(
            target=GenerationalSentinel, name=f"sentinel-{uuid.uuid4().hex[:6]}",
            args=(self.stop_event, self.start_event, self.cluster_id, os.getpid(),
                  self.pulse, self.broker, self.timeout))
        self.sentinel.start()
        logger.info("cluster %s starting (sentinel %s)", self.name, self.sentinel.pid)
        deadline = time.monotonic() + settings.AGENTOPS["SENTINEL_STALE_SECONDS"]
        while not self.start_event.is_set():
            if not self.sentinel.is_alive() or time.monotonic() > deadline:
                raise ClusterStartFailed(self.failure() or "sentinel did not start in time")
            time.sleep(0.05)
        return self.pid

    def failure(self) -> str | None:
        """Why this cluster cannot work any more, or None."""
        sentinel = self.sentinel
        if not sentinel.is_alive():
            return f"sentinel {sentinel.pid} exited ({describe_exit(sentinel.exitcode)})"
        if roles.is_stopped(sentinel.pid):
            return f"sentinel {sentinel.pid} is stopped"
        silent = time.time() - self.pulse.beat
        if silent > settings.AGENTOPS["SENTINEL_STALE_SECONDS"]:
            return f"sentinel {sentinel.pid}'s guard loop has been silent for {silent:.0f} s"
        return None

    def new_generation(self) -> bool:
        """Whether the sentinel began a generation since the last call (its old
        queues' tasks are gone: the sweep re-enqueues due runs at once)."""
        generation = self.pulse.generation
        began, self.generation_seen = generation != self.generation_seen, generation
        return began


class ClusterStartFailed(RuntimeError):
    pass


def replace(old: SelfHealingCluster | None, reason: str, leftovers: dict) -> SelfHealingCluster:
    """Kill the old cluster's sentinel, pusher and monitor (its workers get SIGTERM
    from the kernel and hand off, tracked in `leftovers` until the grace ends),
    then start a fresh cluster. Raises ClusterStartFailed (the caller retries)."""
    if old is not None and old.sentinel is not None:
        logger.error("cluster %s cannot work: %s; starting a fresh cluster", old.name, reason)
        end_tree(old.sentinel.pid, leftovers)
        old.sentinel.join(5)
    fresh = SelfHealingCluster()
    fresh.start()
    return fresh


def end_tree(sentinel_pid: int, leftovers: dict) -> None:
    try:
        sentinel = psutil.Process(sentinel_pid)
        children = proctree.children(sentinel_pid, recursive=True)
        sentinel.kill()
    except psutil.NoSuchProcess:
        children = []
    grace = time.monotonic() + settings.AGENTOPS["SHUTDOWN_GRACE_SECONDS"]
    for child in children:
        worker = roles.role_of(child) == roles.WORKER
        roles.send(child.pid, signal.SIGTERM if worker and not roles.is_stopped(child.pid)
                   else signal.SIGKILL)
        leftovers[child.pid] = grace if worker else 0.0


def tend_leftovers(leftovers: dict, keep: set[int]) -> None:
    """Reap this process's dead children other than `keep` (multiprocessing reaps
    its own), and kill leftovers of an old cluster past their grace."""
    now = time.monotonic()
    grace = now + settings.AGENTOPS["SHUTDOWN_GRACE_SECONDS"]
    for child in proctree.children(os.getpid()):
        if child.pid in keep:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
                leftovers.pop(child.pid, None)
            elif now >= leftovers.setdefault(child.pid, grace) or roles.is_stopped(child.pid):
                child.kill()
        except (psutil.Error, ChildProcessError):
            leftovers.pop(child.pid, None)
    for pid in [p for p in leftovers if not psutil.pid_exists(p)]:
        leftovers.pop(pid)

