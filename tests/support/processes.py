"""Real processes for tests: a Daphne server and worker trees on the test database.

They run in their own sessions (process groups) so a test can signal one
process or a whole tree, as a supervisor would.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

# For a test that needs a run's claim to end only by what the test does (a kill, a
# freeze, a database fault): no time slice at all (float("inf"), a setting users have
# too), rather than a slice longer than the test, which a loaded machine could outlast.
NO_TIME_SLICES = {"AGENTOPS_TIME_SLICE": "inf", "AGENTOPS_UNCONTENDED_SLICE": "inf"}

# Deadlines (seconds) of waits on real processes. A wait ends as soon as its condition
# holds, so a deadline only bounds a failure; these are set for CI, where the processes
# share two cores with the other test streams (loads of 10-25), not for a quiet machine.
#
# A worker tree brought to a moment of its runs: a claim, a few steps, a status, a
# takeover after a kill. Seconds of work, but a kill ends the tree and the restart loop's
# fresh one is a new Python that imports Django before it forks (tens of seconds on CI,
# as a command's start-up is), and every claim and step waits its turn for a core.
TREE_DEADLINE = 60
# Runs taken to their end through what the test did to them (kills, faults, a deploy):
# the rest of their work, replayed up to where each stood, after a fresh tree per kill.
RUNS_END_DEADLINE = 120
# A `manage.py` command, or a script that sets Django up, in a process of its own: its
# start-up alone takes tens of seconds on CI (tests/api/test_cli_remote.py), then its work.
COMMAND_DEADLINE = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Without an interval of its own a wait polls at once, then less and less often, up to
# POLL_AT_MOST: most waits are over in a moment, and a long one (a run's whole work, a
# tree's start) polling 20 times a second cost CI's CPU-bound passes a query or a page
# of the server each time, for thousands of seconds of waits in all.
POLL_FIRST, POLL_GROWTH, POLL_AT_MOST = 0.05, 1.5, 0.25


def wait_until(predicate, timeout: float = 30.0, interval: float | None = None,
               message: str = ""):
    """Poll `predicate` until it returns a truthy value; fail with `message` after
    `timeout`. `interval`: poll at that fixed pace (a test that acts at a moment)."""
    deadline = time.monotonic() + timeout
    pause = interval or POLL_FIRST
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message or predicate}")
        time.sleep(pause)
        if interval is None:
            pause = min(pause * POLL_GROWTH, POLL_AT_MOST)


def process_env(**extra) -> dict:
    """The environment for a child process, pointed at the test database."""
    env = dict(os.environ)
    # The browser fixture's leave for Playwright's event loop in this thread
    # (tests/web/conftest.py): a server or worker must refuse async-unsafe calls as in
    # production, and its environment must not depend on which module started it (the
    # shared Daphne, tests/conftest.py).
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    settings = connection.settings_dict
    if settings["ENGINE"].endswith("postgresql"):
        user = settings.get("USER") or "postgres"
        host = settings.get("HOST") or "127.0.0.1"
        port = settings.get("PORT") or 5432
        password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
        env["DATABASE_URL"] = f"postgres://{user}{password}@{host}:{port}/{settings['NAME']}"
    else:
        env.pop("DATABASE_URL", None)
        env["SQLITE_PATH"] = str(settings["NAME"])
    env.setdefault("AGENTOPS_AGENT_MODULES", "tests.workload_agents")
    env["PYTHONPATH"] = str(ROOT)
    # DJANGO_SETTINGS_MODULE comes with os.environ: this process's own
    # (tests/support/settings.py under pytest), so a password hash made here does not look
    # outdated to a child, which would re-hash it at a login. (Not read from the settings
    # object: under override_settings, as the live server fixture holds, it names none.)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Managed:
    """A child process in its own session, with its output in a log file."""

    def __init__(self, args: list[str], env: dict, log_path: Path):
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig) -> None:
        os.kill(self.proc.pid, sig)

    def signal_group(self, sig) -> None:
        os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            try:
                self.signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")


class Server(Managed):
    def __init__(self, tmp_path: Path, port: int | None = None, **env):
        self.port = port or free_port()
        super().__init__([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                          "agentops.asgi:application"], process_env(**env),
                         tmp_path / f"daphne-{self.port}.log")
        self.url = f"http://127.0.0.1:{self.port}"
        wait_until(self._ready, 30, message=f"daphne on {self.port}")

    def _ready(self):
        if not self.alive():
            raise AssertionError(f"daphne exited:\n{self.output()[-3000:]}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0


class Cluster(Managed):
    """`manage.py worker` (a main process and its worker processes) under a restart loop
    in this process, as a service manager keeps it (systemd's Restart=, docs/workers.md):
    when the tree ends damaged (a non-zero exit) a fresh one starts; an exit 0 (a stop
    signal) ends it. `proc` and `pid` are the current tree's main; `restart=False`
    leaves a damaged tree ended, for a test of the tree itself. `wrapper` runs the command
    through another (a worker host in a network namespace: tests/support/netns.py); it
    must exec the command, so that `pid` is the tree's main."""

    # ready_timeout: the main is a new Python that imports Django and the agents before it
    # forks its workers (tens of seconds on CI), and other streams start trees beside it.
    def __init__(self, tmp_path: Path, workers: int = 2, name: str = "c", restart: bool = True,
                 ready_timeout: float = 90.0, wrapper: tuple[str, ...] = (), **env):
        env.setdefault("AGENTOPS_WORKERS", workers)
        self.pid_dir = tmp_path / f"pids-{name}-{time.monotonic_ns()}"
        self.pid_dir.mkdir()
        env["AGENTOPS_WORKER_PID_DIR"] = self.pid_dir
        self.args = [*wrapper, sys.executable, "manage.py", "worker"]
        self.env = process_env(**env)
        super().__init__(self.args, self.env, tmp_path / f"worker-{name}-{time.monotonic_ns()}.log")
        self.workers = workers
        self.mains = [self.proc]   # every tree started, the current one last
        self.restart = restart
        self.stopping = False
        self.lock = threading.Lock()
        if restart:
            threading.Thread(target=self._keep, name=f"restart-{name}", daemon=True).start()
        wait_until(lambda: len(self.tree_workers()) >= workers or self._dead(), ready_timeout,
                   message="the worker tree")

    def _keep(self) -> None:
        while True:
            started = time.monotonic()
            if self.proc.wait() == 0:
                return
            if time.monotonic() - started < 1.0:  # one that cannot start: not in a tight loop
                time.sleep(1.0)
            with self.lock:
                if self.stopping:
                    return
                self.proc = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=self.log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
                self.mains.append(self.proc)

    def _dead(self):
        if not self.alive() and (self.proc.returncode == 0 or not self.restart):
            raise AssertionError(f"the worker tree exited:\n{self.output()[-3000:]}")
        return False

    def role_pids(self, role: str) -> list[int]:
        """Live processes of this cluster's trees in a role (main, worker): each writes a
        file role-pid when it starts (runs/worker/roles.py)."""
        pids = [int(p.name.split("-")[1]) for p in self.pid_dir.glob(f"{role}-*")]
        return [pid for pid in pids if is_running(pid)]

    def worker_pids(self) -> list[int]:
        """Every live worker, an old tree's still handing its runs back included."""
        return self.role_pids("worker")

    def tree_workers(self) -> list[int]:
        """The live workers of the current tree."""
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []
        return [p.pid for p in children if p.pid in set(self.worker_pids())]

    def idle_workers(self) -> list[int]:
        """The current tree's workers that hold no run."""
        from runs.models import Run

        owners = Run.objects.filter(lease_owner__isnull=False).values_list("lease_owner", flat=True)
        busy = {int(owner.split(":")[1]) for owner in owners}
        return [pid for pid in self.tree_workers() if pid not in busy]

    def tree_ready(self) -> bool:
        """One live main, the current one, with every worker, none of them stopped, and
        no process of an old tree left."""
        workers = self.tree_workers()
        return self.role_pids("main") == [self.proc.pid] and len(workers) == self.workers \
            and sorted(workers) == sorted(self.worker_pids()) \
            and not any(is_stopped(pid) for pid in workers)

    def stop_with(self, sig, *, group: bool = False) -> None:
        """A stop, as a service manager sends it (a deploy): no fresh tree after it,
        however this one ends. A main stopped (SIGSTOP) before it had its handlers dies of
        the signal once thawed: systemd starts no fresh tree after a stop either."""
        with self.lock:
            self.stopping = True
            (self.signal_group if group else self.signal)(sig)

    def stop(self, timeout: float = 10.0) -> None:
        with self.lock:
            self.stopping = True
        super().stop(timeout)
        for main in self.mains:  # each tree in a process group of its own
            try:
                os.killpg(main.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def all_pids(self) -> list[int]:
        try:
            return [self.pid] + [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


def is_stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def is_running(pid: int) -> bool:
    """Alive: neither gone nor a zombie waiting to be reaped."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
