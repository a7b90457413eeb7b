"""The worker tree of one host. `manage.py worker` is its main process; once Django is set
up it forks AGENTOPS_WORKERS worker processes, which share its memory copy-on-write, and
then replaces itself with a bare Python that only watches them (runs/worker/watcher.py).

    manage.py worker     main     watches its workers; ends the tree
    └─ worker × N        worker   free slots claim due runs (runs/worker/execute.py);
                                  worker 1 also keeps the tree's duties (sweep.py)

Crash-only: the tree never repairs itself. Damage ends the command with a non-zero exit
once the surviving workers have handed their runs back, and the service manager starts a
fresh tree (systemd's Restart=always, a Kubernetes Deployment, bin/serve's loop). Damage
is a worker that ends (it never does by itself), a worker stopped (SIGSTOP) for
AGENTOPS_STOPPED_SECONDS (then killed), or the main stopped as long: its workers kill it
(`watch_main`) and the kernel tells them to hand their runs back (runs/worker/lifelines.py).
SIGTERM or SIGINT to the main is a stop (a deploy, Ctrl-C): its workers get SIGTERM, each
says in the heartbeat that the tree is stopping and hands its runs back at their next
effect boundary, whatever is left after AGENTOPS_SHUTDOWN_GRACE seconds is killed, and
the command exits 0.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time

from django import db
from django.conf import settings

from runs.worker import execute, roles, sweep, watcher
from runs.worker.db import use_own_connection_in_this_thread
from runs.worker.heartbeat import record_stopping
from runs.worker.lifelines import die_with_parent

logger = logging.getLogger("agentops.tree")

DAMAGED = watcher.DAMAGED     # the exit code that asks the service manager for a fresh tree
WATCH_SECONDS = 0.25          # how often a worker looks at its main


def run() -> None:
    """The main's life up to its exec into the watcher (it never returns)."""
    roles.set_title(roles.MAIN)
    roles.mark(roles.MAIN)
    # Taken by the watcher (sigtimedwait): one sent before it runs waits for it. A worker
    # unblocks them after its fork.
    signal.pthread_sigmask(signal.SIG_BLOCK, watcher.WATCHED)
    # What a killed tree left (its workers' leases) is due before the workers' first look.
    sweep.free_dead_leases()
    sweep.start_heartbeat()
    # A child would share these connections' sockets; and objects a collection in a
    # child visits would be written to (copied) in every page they sit on.
    db.connections.close_all()
    gc.freeze()
    main = os.getpid()
    workers = {}
    for number in range(1, settings.AGENTOPS_WORKERS + 1):
        pid = os.fork()
        if pid == 0:
            _worker_process(number, main)
        workers[pid] = number
    logger.info("worker tree: main %d, workers %s", main, sorted(workers))
    logging.shutdown()
    conf = settings.AGENTOPS
    watcher.become(workers, grace=conf["SHUTDOWN_GRACE_SECONDS"],
                   stopped_limit=conf["STOPPED_SECONDS"], log_format=settings.LOG_FORMAT,
                   then=sys.orig_argv[1:])


def _worker_process(number: int, main: int) -> None:
    """The forked child's whole life; it never returns into the main's code."""
    code = DAMAGED
    try:
        execute.install_signal_handlers(before_stop=lambda: record_stopping(main))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watcher.WATCHED)
        die_with_parent(main, signal.SIGTERM)
        execute.prepare_process()
        roles.set_title(roles.WORKER, number)
        roles.mark(roles.WORKER)
        threading.Thread(target=watch_main, args=(main, settings.AGENTOPS["STOPPED_SECONDS"]),
                         name="watch-main", daemon=True).start()
        if number == 1:
            threading.Thread(target=sweep.keep_duties, args=(main, execute.STOP),
                             name="duties", daemon=True).start()
        execute.work()
        # Its siblings dead before it (the watcher reaps a killed one before it tells the
        # others) would keep their leases until a fresh tree starts. Not through the pool:
        # with the database away it would wait out the pool's timeout (30 s).
        use_own_connection_in_this_thread()
        sweep.free_dead_leases()
        code = 0
    except BaseException:  # noqa: BLE001 - a bug ends this worker, and so the tree
        logger.exception("worker %d failed", number)
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def watch_main(main: int, stopped_limit: float) -> None:
    """Kill a main stopped (SIGSTOP) for `stopped_limit`: the kernel then tells every worker
    to hand its runs back, and the service manager starts a fresh tree."""
    since = None
    while os.getppid() == main:
        if not roles.is_stopped(main):
            since = None
        elif time.monotonic() - (since := since or time.monotonic()) >= stopped_limit:
            logger.error("main %d stopped for over %s s: killing it", main, stopped_limit)
            roles.send(main, signal.SIGKILL)
            return
        time.sleep(WATCH_SECONDS)
