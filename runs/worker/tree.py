"""The worker tree of one host. `manage.py worker` is its main process; once Django is set
up it forks AGENTOPS_WORKERS worker processes, which share its memory copy-on-write.

    manage.py worker     main     every AGENTOPS_SWEEP_INTERVAL: its duties
    │                             (runs/worker/sweep.py) and a look at its workers
    └─ worker × N        worker   free slots claim due runs (runs/worker/execute.py)

Crash-only: the tree never repairs itself. Damage ends the command with a non-zero exit
once the surviving workers have handed their runs back, and the service manager starts a
fresh tree (systemd's Restart=always, a Kubernetes Deployment, bin/serve's loop). Damage
is a worker that ends (it never does by itself), a worker stopped (SIGSTOP) for
AGENTOPS_STOPPED_SECONDS (then killed), or the main stopped as long: its workers kill it
(`watch_main`) and the kernel tells them to hand their runs back (runs/worker/lifelines.py).
SIGTERM or SIGINT to the main is a stop (a deploy, Ctrl-C): its heartbeat says so at once,
its workers get SIGTERM and hand their runs back at their next effect boundary, whatever
is left after AGENTOPS_SHUTDOWN_GRACE seconds is killed, and the command exits 0.
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

from runs.worker import execute, roles
from runs.worker.lifelines import die_with_parent

logger = logging.getLogger("agentops.tree")

DAMAGED = 1                   # the exit code that asks the service manager for a fresh tree
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
NAP_SECONDS = 0.1             # how soon the main notices a stop signal or a child's change
WATCH_SECONDS = 0.25          # how often a worker looks at its main


class Tree:
    def __init__(self, duties):
        conf = settings.AGENTOPS
        self.duties = duties  # tick(), stopping(), free_dead_leases(): runs/worker/sweep.py
        self.interval, self.grace = conf["SWEEP_INTERVAL"], conf["SHUTDOWN_GRACE_SECONDS"]
        self.stopped_limit = conf["STOPPED_SECONDS"]
        self.workers: dict[int, int] = {}            # pid -> its number
        self.stopped_since: dict[int, float] = {}
        self.stop_signal: int | None = None
        self.woken = False

    def run(self) -> int:
        """The main's life; returns the command's exit code."""
        roles.set_title(roles.MAIN)
        roles.mark(roles.MAIN)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGCHLD, self._on_child)
        # What a killed tree left (its workers' leases) is due before the workers' first look.
        self.duties.free_dead_leases()
        # A child would share these connections' sockets; and objects a collection in a
        # child visits would be written to (copied) in every page they sit on.
        db.connections.close_all()
        gc.freeze()
        for number in range(1, settings.AGENTOPS_WORKERS + 1):
            self._fork(number)
        logger.info("worker tree: main %d, workers %s", os.getpid(), sorted(self.workers))
        damage = None
        while self.stop_signal is None and damage is None:
            self.duties.tick()
            self._nap()
            damage = self._damage()
        if self.stop_signal is not None:  # a stop, and whatever it caused meanwhile
            self.duties.stopping()
        else:
            logger.error("worker tree damaged: %s; ending it for a fresh one", damage)
        self._end()
        self.duties.free_dead_leases()  # of workers killed, not handed back: due for others now
        return 0 if self.stop_signal is not None else DAMAGED

    def _on_stop(self, signum, frame) -> None:
        self.stop_signal = self.stop_signal or signum

    def _on_child(self, signum, frame) -> None:
        self.woken = True  # a worker ended or stopped: look now, not after the nap

    def _fork(self, number: int) -> None:
        main = os.getpid()
        # A stop signal sent before the child has its own handlers waits until it has.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:
            _worker_process(number, main)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        self.workers[pid] = number

    def _nap(self) -> None:
        """Until the next tick, a stop signal, a worker's change, or a stop's time limit."""
        deadline = min([time.monotonic() + self.interval,
                        *(since + self.stopped_limit for since in self.stopped_since.values())])
        self.woken = False
        while self.stop_signal is None and not self.woken and time.monotonic() < deadline:
            time.sleep(min(NAP_SECONDS, max(0.0, deadline - time.monotonic())))

    def _damage(self) -> str | None:
        now = time.monotonic()
        for pid, number in list(self.workers.items()):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                del self.workers[pid]
                code = os.waitstatus_to_exitcode(status)
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
                return f"worker {number} (pid {pid}) ended: {how}"
            if not roles.is_stopped(pid):
                self.stopped_since.pop(pid, None)
            elif now - self.stopped_since.setdefault(pid, now) >= self.stopped_limit:
                return f"worker {number} (pid {pid}) stopped for over {self.stopped_limit} s"
        return None

    def _end(self) -> None:
        """SIGTERM to every worker (SIGKILL to a stopped one: it could not act on it), up to
        the grace for them to hand their runs back, then SIGKILL to those left."""
        for pid in self.workers:
            roles.send(pid, signal.SIGKILL if roles.is_stopped(pid) else signal.SIGTERM)
        self._reap(until=time.monotonic() + self.grace)
        if self.workers:
            logger.warning("workers %s still running %.0f s after SIGTERM: killing them",
                           sorted(self.workers), self.grace)
            for pid in self.workers:
                roles.send(pid, signal.SIGKILL)
            self._reap(until=time.monotonic() + 5)

    def _reap(self, until: float) -> None:
        while self.workers and time.monotonic() < until:
            for pid in list(self.workers):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    del self.workers[pid]
            time.sleep(0.02)


def _worker_process(number: int, main: int) -> None:
    """The forked child's whole life; it never returns into the main's code."""
    code = DAMAGED
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        execute.install_signal_handlers()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        die_with_parent(main, signal.SIGTERM)
        roles.set_title(roles.WORKER, number)
        roles.mark(roles.WORKER)
        threading.Thread(target=watch_main, args=(main, settings.AGENTOPS["STOPPED_SECONDS"]),
                         name="watch-main", daemon=True).start()
        execute.work()
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
