"""django-q2's qcluster, plus what durable runs need from the cluster's main process:

* the recovery sweep, every AGENTOPS_SWEEP_INTERVAL seconds, in the main thread;
* on SIGTERM/SIGINT to this process alone, SIGUSR1 to every worker first, so a
  running run hands itself back at its next effect boundary instead of making
  the deploy wait for it (django-q2 itself waits for running tasks).
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
from django_q.cluster import Cluster
from django_q.management.commands.qcluster import Command as QClusterCommand

from runs.heartbeat import record_heartbeat
from runs.sweep import sweep

logger = logging.getLogger("agentops.cluster")


class Command(QClusterCommand):
    help = "Starts a django-q2 cluster that executes durable runs, with the recovery sweep."

    def handle(self, *args, **options):
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        cluster = Cluster()
        stopping = {"flag": False}
        main_pid = os.getpid()

        def on_stop_signal(signum, frame):
            if os.getpid() != main_pid:
                # A child forked before it set its own handlers: die as it would have.
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            if stopping["flag"]:
                return
            stopping["flag"] = True
            _signal_workers(cluster)
            # Stop pulling tasks now: a run handed back in the next few milliseconds
            # must go to a live cluster, not to this one's draining workers. From a
            # thread: when the whole group was signalled the sentinel died at once,
            # possibly inside stop_event.wait(), and then set() blocks forever (a
            # multiprocessing Condition waits for its dead sleeper to acknowledge).
            threading.Thread(target=cluster.stop_event.set, daemon=True).start()

        signal.signal(signal.SIGTERM, on_stop_signal)
        signal.signal(signal.SIGINT, on_stop_signal)
        # Inherited by the sentinel, monitor and pusher, so our SIGUSR1 cannot kill
        # them; worker processes install their own handler (runs/signals.py).
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        # Let the sentinel fork before this process opens database connections.
        connection.close()
        # The sentinel, monitor, pusher and workers are forked from here and share its
        # pages until written; freezing moves Django's objects out of the collector's
        # reach, so a collection in a child does not write (and copy) those pages.
        gc.freeze()
        cluster.start()
        if options.get("run_once"):
            cluster.stop()
            return
        interval = settings.AGENTOPS["SWEEP_INTERVAL"]
        while not stopping["flag"] and not cluster.has_stopped:
            try:
                close_old_connections()
                sweep()
                record_heartbeat()
            except Exception:  # the database may be restarting: try again next tick
                logger.exception("recovery sweep failed")
                connection.close()
            time.sleep(interval)
        # Not cluster.stop(), which joins without a limit (and blocks in the case
        # above): the signal handler told the sentinel to stop; wait for it with a
        # limit. Running runs hand themselves back at their next effect boundary;
        # whatever is alive after the grace period is killed (its runs are durable:
        # leases and the sweep's dead-process check bring them back).
        deadline = time.monotonic() + settings.AGENTOPS["SHUTDOWN_GRACE_SECONDS"]
        while cluster.sentinel.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if cluster.sentinel.is_alive():
            logger.warning("cluster still running %.0f s after the stop signal: killing it",
                           settings.AGENTOPS["SHUTDOWN_GRACE_SECONDS"])
            _kill_tree(cluster.sentinel.pid)


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        processes = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def _signal_workers(cluster: Cluster) -> None:
    sentinel = getattr(cluster, "sentinel", None)
    if sentinel is None or sentinel.pid is None:
        return
    try:
        children = psutil.Process(sentinel.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        try:
            child.send_signal(signal.SIGUSR1)
        except psutil.NoSuchProcess:
            pass
