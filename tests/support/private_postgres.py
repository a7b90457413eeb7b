"""A PostgreSQL server of a test's own, which it may terminate and restart.

Database-fault tests must not touch a server that other test sessions share, and
they must run the same in the SQLite pass of CI: each brings its own server
(initdb in a temporary directory, on a free port, no fsync), migrates it, and
points this process's default connection at it for the duration, so the
fixtures of tests.support.processes start Daphne and worker trees on it too.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import dj_database_url
import psycopg
from django.db import connections
from django.db.utils import load_backend

from tests.support.processes import ROOT, free_port, wait_until

DATABASE = "agentops"


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL's server binaries are not installed "
                           "(apt-get install postgresql)")
    return Path(initdb).parent


class PrivatePostgres:
    def __init__(self):
        self.bin = _bindir()
        # Not under pytest's tmp_path, which the postgres user may not enter.
        directory = Path(tempfile.mkdtemp(prefix="agentops-postgres-"))
        self.data = directory / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"
        # PostgreSQL refuses to run as root: as root, run it as the postgres user.
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_owner:
            shutil.chown(directory, "postgres")
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync",
                 "-E", "UTF8")
        self.start()
        with self.admin() as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT,
                       env={**os.environ, "DATABASE_URL": self.url}, check=True)

    def _pg(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.as_owner, str(self.bin / tool), *args], cwd="/",
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout[-2000:]}")

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   "-c max_connections=100")
        self._pg("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                 str(self.data / "server.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres",
                               autocommit=True)

    def backends(self, exclude: set[int] = frozenset()) -> set[int]:
        """The server processes of every client connected to the app's database."""
        with self.admin() as admin:
            rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s",
                                 [DATABASE]).fetchall()
        return {pid for (pid,) in rows} - set(exclude)

    def terminate(self, exclude: set[int] = frozenset()) -> int:
        """pg_terminate_backend every connection to the app's database (but `exclude`),
        as a failover does; returns once all of them are gone."""
        doomed = self.backends(exclude)
        with self.admin() as admin:  # all at once, in one statement
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid",
                          [list(doomed)])
        wait_until(lambda: not (self.backends() & doomed), 10,
                   message="the terminated backends to exit")
        return len(doomed)

    def close(self) -> None:
        try:
            self.stop("immediate")
        except RuntimeError:
            pass  # already stopped
        shutil.rmtree(self.data.parent, ignore_errors=True)


@contextmanager
def default_database(url: str):
    """This thread's default connection goes to `url` for the duration."""
    original = connections["default"]
    settings = connections.configure_settings({"default": dj_database_url.parse(
        url, conn_max_age=0, conn_health_checks=True)})["default"]
    wrapper = load_backend(settings["ENGINE"]).DatabaseWrapper(settings, "default")
    connections["default"] = wrapper
    try:
        yield wrapper
    finally:
        wrapper.close()
        connections["default"] = original
