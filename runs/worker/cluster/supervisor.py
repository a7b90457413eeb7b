"""`manage.py worker`: a thin supervisor that keeps one `manage.py qcluster` running.

Why a process above qcluster: honcho (`bin/serve`) stops every process as soon
as one exits, so the worker command must never exit on its own; and qcluster's
main process, though it replaces a broken cluster under it, can itself be
killed or freeze. The supervisor holds no database connection and no thread,
so there is little in it to break. It

* runs qcluster as a child in a process group of its own, and starts a new one
  whenever it exits (at once if it had got its cluster working, else after a
  backoff that doubles up to MAX_BACKOFF: a broken setting fails again);
* watches the main's progress: the main touches a file every tick of its loop
  (`report_progress`); silent for MAIN_STALE_SECONDS means frozen: the whole
  group is killed and a new qcluster started. Before its first report a main is
  starting (importing Django and the agents, forking its tree), which on a loaded
  machine takes far longer than a tick: it has MAIN_START_SECONDS for that, so a
  short stale limit cannot kill every main before it gets going;
* ends an old group's leftovers: SIGTERM at once (workers hand their runs
  back), SIGKILL after SHUTDOWN_GRACE_SECONDS;
* forwards SIGTERM/SIGINT to the qcluster main alone, which hands the running
  runs off as before (a deploy), waits for it, and exits.

The qcluster main dies with its supervisor (SIGTERM from the kernel,
runs/worker/cluster/lifelines.py), so a killed supervisor leaves nothing behind.
Production supervisors (systemd, Kubernetes) can run either command: see
docs/workers.md.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runs.worker.cluster import roles
from runs.worker.cluster.lifelines import describe_exit, die_with_parent

logger = logging.getLogger("agentops.supervisor")

PROGRESS_FILE_ENV = "AGENTOPS_PROGRESS_FILE"
SUPERVISOR_PID_ENV = "AGENTOPS_SUPERVISOR_PID"
TICK = 0.1
FIRST_BACKOFF, MAX_BACKOFF = 0.5, 10.0
HEALTHY_AFTER = 30.0  # a qcluster that ran this long restarts at once when it dies


def attach() -> None:
    """In the qcluster main: die (gracefully) with the supervisor that started it."""
    supervisor_pid = os.environ.get(SUPERVISOR_PID_ENV)
    if supervisor_pid:
        die_with_parent(int(supervisor_pid), signal.SIGTERM)


def report_progress() -> None:
    path = os.environ.get(PROGRESS_FILE_ENV)
    if path:
        Path(path).touch()


class Supervisor:
    def __init__(self, argv: list[str], stale_seconds: float, grace_seconds: float,
                 start_seconds: float = 120.0):
        self.argv = argv
        self.stale_seconds = stale_seconds
        self.start_seconds = max(start_seconds, stale_seconds)
        self.grace_seconds = grace_seconds
        self.progress = Path(tempfile.mkstemp(prefix="agentops-progress-")[1])
        self.child: subprocess.Popen | None = None
        self.started_at = 0.0
        self.started_wall = 0.0
        self.backoff = 0.0
        self.next_start = 0.0
        self.old_groups: dict[int, float] = {}  # process group -> SIGKILL after
        self.stopping = False

    def run(self) -> int:
        roles.set_title(roles.SUPERVISOR)
        signal.signal(signal.SIGTERM, self.on_stop_signal)
        signal.signal(signal.SIGINT, self.on_stop_signal)
        try:
            while not (self.stopping and self.child is None):
                self.tick()
                time.sleep(TICK)
        finally:
            self.end_groups(force=True)
            self.progress.unlink(missing_ok=True)
        return 0

    def tick(self) -> None:
        if self.child is None:
            if not self.stopping and time.monotonic() >= self.next_start:
                self.start()
            return
        code = self.child.poll()
        if code is not None:
            self.child_ended(f"exited ({describe_exit(code)})")
        elif not self.stopping and self.silence() > self.allowed_silence():
            logger.error("qcluster %s made no progress for %.0f s: killing its group",
                         self.child.pid, self.silence())
            _killpg(self.child.pid, signal.SIGKILL)
        self.end_groups()

    def start(self) -> None:
        os.utime(self.progress, (0, 0))  # "not yet": the new main reports by touching it
        env = dict(os.environ, **{PROGRESS_FILE_ENV: str(self.progress),
                                  SUPERVISOR_PID_ENV: str(os.getpid())})
        self.child = subprocess.Popen(self.argv, env=env, process_group=0)
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        logger.info("started qcluster %s", self.child.pid)

    def child_ended(self, how: str) -> None:
        pid = self.child.pid
        self.child = None
        # What is left of its group: workers SIGTERMed by the kernel are handing off.
        _killpg(pid, signal.SIGTERM)
        self.old_groups[pid] = time.monotonic() + self.grace_seconds
        if self.stopping:
            return
        lived = time.monotonic() - self.started_at
        # One that got its cluster working (it reported progress) was killed or broke:
        # start the next at once. One that never did may fail again the same way.
        self.backoff = 0.0 if self.reported() or lived >= HEALTHY_AFTER else \
            min(max(self.backoff * 2, FIRST_BACKOFF), MAX_BACKOFF)
        self.next_start = time.monotonic() + self.backoff
        logger.error("qcluster %s %s after %.1f s: starting another in %.1f s",
                     pid, how, lived, self.backoff)

    def reported(self) -> bool:
        try:
            return self.progress.stat().st_mtime > self.started_wall
        except FileNotFoundError:
            return False

    def silence(self) -> float:
        try:
            touched = self.progress.stat().st_mtime
        except FileNotFoundError:
            touched = 0.0
        return time.time() - max(touched, self.started_wall)

    def allowed_silence(self) -> float:
        return self.stale_seconds if self.reported() else self.start_seconds

    def end_groups(self, force: bool = False) -> None:
        now = time.monotonic()
        for group, kill_after in list(self.old_groups.items()):
            if force or now >= kill_after:
                _killpg(group, signal.SIGKILL)
            if not _group_exists(group):
                del self.old_groups[group]

    def on_stop_signal(self, signum, frame) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.child is not None:
            # The main alone: it hands the runs off (runs/management/commands/qcluster.py).
            try:
                self.child.send_signal(signum)
            except ProcessLookupError:
                pass
            self.old_groups[self.child.pid] = time.monotonic() + self.grace_seconds + 5


def _killpg(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def qcluster_argv() -> list[str]:
    return [sys.executable, sys.argv[0], "qcluster"]
