"""django-q2's qcluster, made self-healing, plus what durable runs need from the
cluster's main process:

* the cluster is ours (runs/worker/cluster/): its sentinel replaces a generation whose
  process died, and this process replaces a sentinel that died, stopped or went
  silent, in the same command (runs/worker/cluster/main.py);
* the recovery sweep and the heartbeat, every AGENTOPS_SWEEP_INTERVAL seconds;
* on SIGTERM/SIGINT to this process alone, SIGUSR1 to every worker first, so a
  running run hands itself back at its next effect boundary instead of making
  the deploy wait for it (django-q2 itself waits for running tasks);
* under `manage.py worker` (runs/worker/cluster/supervisor.py) it shows its progress
  every tick and dies with its supervisor.
"""

import gc
import logging
import os
import signal
import threading
import time

import psutil
from django.conf import settings
from django.db import close_old_connections, connection
from django_q.management.commands.qcluster import Command as QClusterCommand

from runs.worker.cluster import proctree, roles, supervisor
from runs.worker.cluster.lifelines import become_subreaper
from runs.worker.cluster.main import ClusterStartFailed, SelfHealingCluster, replace, tend_leftovers
from runs.worker.heartbeat import record_heartbeat
from runs.worker.sweep import sweep

logger = logging.getLogger("agentops.cluster")
RESTART_PAUSE = 1.0  # seconds between attempts to start a cluster that fails to start
STOP_CHECK_SECONDS = 0.1  # how soon the main loop notices a stop signal


class Command(QClusterCommand):
    help = "Starts a self-healing django-q2 cluster that executes durable runs, with the sweep."

    def handle(self, *args, **options):
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        supervisor.attach()
        become_subreaper()
        roles.mark(roles.MAIN)
        state = {"cluster": SelfHealingCluster(), "stopping": False}
        self.install_stop_handlers(state)
        # Let the sentinel fork before this process opens database connections.
        connection.close()
        # The sentinel, monitor, pusher and workers are forked from here and share its
        # pages until written; freezing moves Django's objects out of the collector's
        # reach, so a collection in a child does not write (and copy) those pages.
        gc.freeze()
        state["cluster"].start()
        if options.get("run_once"):
            state["cluster"].stop()
            return
        self.keep(state)
        self.shut_down(state["cluster"])

    def install_stop_handlers(self, state):
        main_pid = os.getpid()

        def on_stop_signal(signum, frame):
            if os.getpid() != main_pid:
                # A child forked before it set its own handlers: die as it would have.
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            if state["stopping"]:
                return
            state["stopping"] = True
            _stop(state["cluster"])

        signal.signal(signal.SIGTERM, on_stop_signal)
        signal.signal(signal.SIGINT, on_stop_signal)
        # Inherited by the sentinel, monitor and pusher, so our SIGUSR1 cannot kill
        # them; worker processes install their own handler (runs/worker/signals.py).
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    def keep(self, state):
        """The main loop: a working cluster, the sweep, the heartbeat, until a stop signal."""
        interval = settings.AGENTOPS["SWEEP_INTERVAL"]
        leftovers: dict[int, float] = {}
        next_attempt = 0.0
        tasks_lost = True  # a qcluster started: its predecessor's queues may have held tasks
        while not state["stopping"]:
            cluster = state["cluster"]
            reason = cluster.failure()
            if reason and time.monotonic() >= next_attempt:
                try:
                    state["cluster"] = replace(cluster, reason, leftovers)
                    tasks_lost = True
                    if state["stopping"]:  # the stop signal came while it started
                        _stop(state["cluster"])
                except ClusterStartFailed as exc:
                    logger.error("a fresh cluster failed to start: %s; trying again", exc)
                    next_attempt = time.monotonic() + RESTART_PAUSE
            tend_leftovers(leftovers, keep={state["cluster"].sentinel.pid})
            supervisor.report_progress()
            tasks_lost = state["cluster"].new_generation() or tasks_lost
            try:
                close_old_connections()
                sweep(tasks_lost=tasks_lost)
                tasks_lost = False
                record_heartbeat()
            except Exception:  # the database may be restarting: try again next tick
                logger.exception("recovery sweep failed")
                connection.close()
            _nap(state, interval)

    def shut_down(self, cluster):
        # Not cluster.stop(), which joins without a limit (and blocks in the case
        # above): the signal handler told the sentinel to stop; wait for it and for
        # any leftover of a replaced cluster, with a limit. Running runs hand
        # themselves back at their next effect boundary; whatever is alive after the
        # grace period is killed (its runs are durable: leases and the sweep's
        # dead-process check bring them back).
        grace = settings.AGENTOPS["SHUTDOWN_GRACE_SECONDS"]
        deadline = time.monotonic() + grace
        while _descendants() and time.monotonic() < deadline:
            cluster.sentinel.is_alive()  # reaps it
            tend_leftovers({}, keep={cluster.sentinel.pid})
            time.sleep(0.1)
        if _descendants():
            logger.warning("cluster still running %.0f s after the stop signal: killing it", grace)
            for process in _descendants():
                _kill(process)


def _nap(state, seconds: float) -> None:
    """Sleep between sweeps, but not past a stop signal: time.sleep resumes after the
    handler (PEP 475), so one long sleep would hold the shutdown for a whole interval."""
    deadline = time.monotonic() + seconds
    while not state["stopping"] and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, STOP_CHECK_SECONDS))


def _stop(cluster) -> None:
    _signal_workers(cluster)
    # Stop pulling tasks now: a run handed back in the next few milliseconds
    # must go to a live cluster, not to this one's draining workers. From a
    # thread: when the whole group was signalled the sentinel died at once,
    # possibly inside stop_event.wait(), and then set() blocks forever (a
    # multiprocessing Condition waits for its dead sleeper to acknowledge).
    threading.Thread(target=cluster.stop_event.set, daemon=True).start()


def _descendants() -> list[psutil.Process]:
    alive = []
    for process in proctree.children(os.getpid(), recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def _kill(process: psutil.Process) -> None:
    try:
        process.kill()
    except psutil.NoSuchProcess:
        pass


def _signal_workers(cluster) -> None:
    sentinel = getattr(cluster, "sentinel", None)
    if sentinel is None or sentinel.pid is None:
        return
    try:
        children = proctree.children(sentinel.pid, recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        try:
            child.send_signal(signal.SIGUSR1)
        except psutil.NoSuchProcess:
            pass
