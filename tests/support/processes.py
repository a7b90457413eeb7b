"""Real processes for tests: a Daphne server and qcluster workers on the test database.

They run in their own sessions (process groups) so a test can signal one
process or a whole cluster, as a supervisor would.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

# For a test that needs a run's claim to end only by what the test does (a kill, a
# freeze, a database fault), on a machine as loaded as CI's (six streams on two cores,
# a load of 14): no time slice ends during the test...
LONG_SLICES = {"AGENTOPS_TIME_SLICE": 600, "AGENTOPS_UNCONTENDED_SLICE": 600}
# ... and the cluster's liveness checks (tasks queued while every worker looks idle, a
# silent guard loop or main) do not misread a starved machine and replace its workers,
# which hand their runs back. A death still ends the generation at once.
QUIET_LIVENESS = {"AGENTOPS_WATCHDOG_SECONDS": 120, "AGENTOPS_SENTINEL_STALE": 120,
                  "AGENTOPS_MAIN_STALE": 240}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05, message: str = ""):
    """Poll `predicate` until it returns a truthy value; fail with `message` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message or predicate}")
        time.sleep(interval)


def process_env(**extra) -> dict:
    """The environment for a child process, pointed at the test database."""
    env = dict(os.environ)
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
    """`manage.py qcluster` (main process, sentinel, and its worker processes), or with
    supervised=True `manage.py worker`, the supervisor that runs and restarts it."""

    def __init__(self, tmp_path: Path, workers: int = 2, name: str = "c", supervised: bool = False,
                 ready_timeout: float = 90.0, **env):
        env.setdefault("AGENTOPS_WORKERS", workers)
        self.pid_dir = tmp_path / f"pids-{name}-{time.monotonic_ns()}"
        self.pid_dir.mkdir()
        env["AGENTOPS_WORKER_PID_DIR"] = self.pid_dir
        command = "worker" if supervised else "qcluster"
        super().__init__([sys.executable, "manage.py", command], process_env(**env),
                         tmp_path / f"{command}-{name}-{time.monotonic_ns()}.log")
        self.workers = workers
        wait_until(lambda: len(self.worker_pids()) >= workers or self._dead(), ready_timeout,
                   message="qcluster workers")

    def _dead(self):
        if not self.alive():
            raise AssertionError(f"qcluster exited:\n{self.output()[-3000:]}")
        return False

    def role_pids(self, role: str) -> list[int]:
        """Live processes of this cluster in a role (main, sentinel, worker, pusher,
        monitor): each writes a file role-pid when it starts (runs/worker/cluster/roles.py)."""
        pids = [int(p.name.split("-")[1]) for p in self.pid_dir.glob(f"{role}-*")]
        return [pid for pid in pids if is_running(pid)]

    def worker_pids(self) -> list[int]:
        return self.role_pids("worker")

    def tree_ready(self) -> bool:
        """One live main and sentinel, a pusher, a monitor and every worker, all idle."""
        counts = {role: len(self.role_pids(role)) for role in ("main", "sentinel", "pusher", "monitor")}
        return set(counts.values()) == {1} and len(self.idle_workers()) == self.workers

    def idle_workers(self) -> list[int]:
        idle = []
        for pid in self.worker_pids():
            try:
                if " ".join(psutil.Process(pid).cmdline()).split()[-1:] == ["idle"]:
                    idle.append(pid)
            except psutil.Error:
                pass
        return idle

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        # Under `manage.py worker` each qcluster main leads a process group of its own.
        for main in self.pid_dir.glob("main-*"):
            try:
                os.killpg(int(main.name.split("-")[1]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def all_pids(self) -> list[int]:
        try:
            return [self.pid] + [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


def is_running(pid: int) -> bool:
    """Alive: neither gone nor a zombie waiting to be reaped."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
