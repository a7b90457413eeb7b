"""django-q2's qcluster, plus what durable runs need from the cluster's main process:

* the recovery sweep, every AGENTOPS_SWEEP_INTERVAL seconds, in the main thread;
* on SIGTERM/SIGINT to this process alone, SIGUSR1 to every worker first, so a
  running run hands itself back at its next effect boundary instead of making
  the deploy wait for it (django-q2 itself waits for running tasks).
"""

import logging
import signal
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
            import os
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        cluster = Cluster()
        stopping = {"flag": False}

        def on_stop_signal(signum, frame):
            stopping["flag"] = True
            _signal_workers(cluster)
            cluster.sig_handler(signum, frame)

        signal.signal(signal.SIGTERM, on_stop_signal)
        signal.signal(signal.SIGINT, on_stop_signal)
        # Inherited by the sentinel, monitor and pusher, so our SIGUSR1 cannot kill
        # them; worker processes install their own handler (runs/signals.py).
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        # Let the sentinel fork before this process opens database connections.
        connection.close()
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
        # After a signal to the whole group the sentinel is already dead and
        # cluster.stop() returns early without marking the cluster stopped, so
        # wait on the process rather than on has_stopped.
        while cluster.sentinel.is_alive():
            time.sleep(0.1)


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
