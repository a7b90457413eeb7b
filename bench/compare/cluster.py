"""A real `manage.py worker` on the bench database, as the Procfile's worker line runs it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.setup_db import ROOT


class WorkerTree:
    def __init__(self, url: str, workers: int | None = None, **env):
        self.url = url
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-worker-"))
        self.pid_dir = self.tmp / "pids"
        self.pid_dir.mkdir()
        child_env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        child_env.update({
            "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "agentops.settings",
            "PYTHONPATH": str(ROOT), "AGENTOPS_AGENT_MODULES": "bench.compare.agents",
            "AGENTOPS_WORKER_PID_DIR": str(self.pid_dir),
        })
        if workers is not None:
            child_env["AGENTOPS_WORKERS"] = str(workers)
        child_env.update({k: str(v) for k, v in env.items()})
        self.log_path = self.tmp / "worker.log"
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, "manage.py", "worker"], cwd=ROOT,
                                         env=child_env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.workers = workers or int(_settings_workers())
        deadline = time.monotonic() + 60
        while len(self.worker_pids()) < self.workers:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker tree did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def worker_pids(self) -> list[int]:
        return [int(p.name.split("-")[1]) for p in self.pid_dir.glob("worker-*")]

    def memory(self) -> int:
        """Proportional set size (PSS) of the tree's processes together: forked
        workers share pages with their parent, which a sum of RSS would count again."""
        try:
            main = psutil.Process(self.proc.pid)
            procs = [main, *main.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        return sum(_pss(p) for p in procs)

    def connections(self) -> int:
        """PostgreSQL connections of this tree: the database's, minus this process's
        own (the bench runs alone on its database)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM pg_stat_activity "
                                "WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid()").fetchone()[0] - 1

    def stop(self) -> None:
        """SIGTERM to the main process (a deploy): runs hand back at their next boundary."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError):  # what is left of the group
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def _settings_workers() -> int:
    from django.conf import settings

    return settings.AGENTOPS_WORKERS


def _pss(process: psutil.Process) -> int:
    try:
        return process.memory_full_info().pss
    except psutil.Error:  # gone between listing and reading
        return 0
