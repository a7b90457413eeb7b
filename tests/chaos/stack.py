"""The system under test, as real processes: agentops on its own database (PostgreSQL,
or SQLite for the reduced profile), Redis, one Daphne for users and followers,
several worker trees (as on several hosts, each under a restart loop), and the sandbox
target.

The sandbox is the outside world. It runs in its own Daphne on its own SQLite
file, so the faults injected into agentops' infrastructure (PostgreSQL, Redis,
the web server) never reach it: what it records is what agentops did to the
world, counted by someone who was not crashing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

from tests.support.processes import ROOT, Cluster, Server

AGENT_MODULES = "tests.workload_agents,tests.chaos.agents"
def redis_start(port: str, directory: str = "/var/lib/redis",
                log: str = "/var/log/redis/ci.log") -> list[str]:
    return ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1",
            "--port", port, "--save", "", "--appendonly", "no", "--dir", directory,
            "--logfile", log]


def pg_version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


def with_database(url: str, name: str) -> str:
    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"/{name}"))


def database_name(url: str) -> str:
    return urlparse(url).path.lstrip("/") or "agentops"


class Postgres:
    """The PostgreSQL server agentops uses: create the chaos database, restart, kill backends."""

    def __init__(self, url: str):
        self.use_database(url)

    def use_database(self, url: str) -> None:
        self.url = url
        self.admin_url = with_database(url, "postgres")
        self.database = database_name(url)

    def _connect(self):
        import psycopg
        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)

    def recreate(self) -> None:
        self.wait_ready()
        with self._connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def ensure_running(self) -> None:
        if not self.ready():
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main",
                            "start"], check=False, capture_output=True)
        self.wait_ready()

    def restart(self) -> None:
        # a shutdown (its checkpoint first) and a start-up, which pg_ctlcluster waits for:
        # seconds, more while the storm's processes load the machine
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", pg_version(), "main",
                        "restart"], check=True, capture_output=True, timeout=120)
        self.wait_ready()

    def terminate_backends(self) -> int:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                [self.database]).fetchall()
        return sum(1 for (ok,) in rows if ok)

    def connections(self) -> dict[str, int]:
        """Client connections to the chaos database, by the kind of process holding them."""
        import psutil
        with self._connect() as conn:
            ports = [port for (port,) in conn.execute(
                "SELECT client_port FROM pg_stat_activity WHERE datname = %s "
                "AND pid <> pg_backend_pid()", [self.database]).fetchall()]
        owners = {c.laddr.port: c.pid for c in psutil.net_connections("tcp")
                  if c.raddr and c.raddr.port == 5432 and c.pid}
        kinds: dict[str, int] = {}
        for port in ports:
            kind = _process_kind(owners.get(port))
            kinds[kind] = kinds.get(kind, 0) + 1
        return kinds

    def ready(self) -> bool:
        try:
            with self._connect() as conn:
                conn.execute("SELECT 1")
            return True
        except Exception:
            return False

    # timeout: as long as a restart is allowed (restart above), which this follows
    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not accept connections within {timeout} s")
            time.sleep(0.2)


class PrivatePostgresServer(Postgres):
    """A PostgreSQL server of the run's own (--private-services): pg_restart restarts it,
    not the machine's shared server that other test sessions use."""

    def __init__(self):
        from tests.support.private_postgres import PrivatePostgres
        self.server = PrivatePostgres()
        super().__init__(self.server.url)

    def ensure_running(self) -> None:
        self.wait_ready()

    def restart(self) -> None:
        self.server.stop("fast")
        self.server.start()
        self.wait_ready()

    def close(self) -> None:
        self.server.close()


class Redis:
    def __init__(self, url: str, directory: str | None = None):
        parts = urlparse(url)
        self.url = url
        self.port = str(parts.port or 6379)
        self.directory = directory  # a private server's (--private-services), or the shared one

    def ping(self) -> bool:
        done = subprocess.run(["redis-cli", "-p", self.port, "ping"], capture_output=True,
                              text=True)
        return done.stdout.strip() == "PONG"

    def start(self) -> None:
        if self.directory:
            command = redis_start(self.port, self.directory, f"{self.directory}/redis.log")
        else:
            os.makedirs("/var/lib/redis", exist_ok=True)
            os.makedirs("/var/log/redis", exist_ok=True)
            command = redis_start(self.port)
        subprocess.run(command, check=True, capture_output=True)
        self.wait(True)

    def stop(self) -> None:
        subprocess.run(["redis-cli", "-p", self.port, "shutdown", "nosave"], capture_output=True)
        self.wait(False)

    def ensure_running(self) -> None:
        if not self.ping():
            self.start()

    def wait(self, up: bool, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.ping() != up:
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis did not {'start' if up else 'stop'} in {timeout} s")
            time.sleep(0.1)


class Stack:
    """Processes of the system under test; the harness's own Django points at the same
    database, so `process_env()` (tests/support) hands children the right settings."""

    def __init__(self, workdir: Path, *, postgres: Postgres | None, redis: Redis | None,
                 workers: int, lease_seconds: float, time_slice: float):
        self.workdir = workdir
        self.postgres = postgres
        self.redis = redis
        self.workers = workers
        self.faults_dir = workdir / "faults"
        self.faults_dir.mkdir(parents=True, exist_ok=True)
        self.logs = workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.engine_env = {
            "AGENTOPS_FAULTS_DIR": str(self.faults_dir),
            "AGENTOPS_LEASE_SECONDS": lease_seconds,
            "AGENTOPS_TIME_SLICE": time_slice,
            "AGENTOPS_SWEEP_INTERVAL": 0.3,
            "AGENTOPS_LIVE_POLL": 0.3,
        }
        self.sandbox: Server | None = None
        self.web: Server | None = None
        self.clusters: list[Cluster] = []
        self.retired: list[Cluster] = []
        self._names = 0

    # --- the outside world --------------------------------------------------------
    def start_sandbox(self, port: int) -> None:
        env = {"DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": self.workdir / "sandbox.sqlite3",
               "AGENTOPS_SANDBOX_STALE_SECONDS": 5}
        migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
                                 cwd=ROOT, env=_env(env), capture_output=True, text=True)
        if migrate.returncode:
            raise RuntimeError(f"sandbox migrate failed:\n{migrate.stderr[-3000:]}")
        self.sandbox_env = env
        self.sandbox = Server(self.logs, port=port, **env)

    def stop_sandbox_server(self) -> None:
        self.sandbox.stop()

    def start_sandbox_server(self) -> None:
        """The same sandbox (its database and port) back after an outage."""
        self.sandbox = Server(self.logs, port=self.sandbox.port, **self.sandbox_env)

    @property
    def sandbox_url(self) -> str:
        return f"{self.sandbox.url}/sandbox"

    # --- agentops -------------------------------------------------------------------
    def start_web(self, port: int | None = None) -> Server:
        env = {"AGENTOPS_DB_POOL": 1, **self.engine_env}
        self.web = Server(self.logs, port=port, **env)
        return self.web

    def restart_web(self) -> None:
        port = self.web.port
        self.web.stop()
        self.start_web(port)

    def start_cluster(self) -> Cluster:
        self._names += 1
        cluster = Cluster(self.logs, workers=self.workers, name=f"c{self._names}",
                          **self.engine_env)
        self.clusters.append(cluster)
        return cluster

    def retire(self, cluster: Cluster) -> None:
        if cluster in self.clusters:
            self.clusters.remove(cluster)
            self.retired.append(cluster)

    def worker_pids(self) -> dict[int, Cluster]:
        return {pid: c for c in self.clusters for pid in c.worker_pids()}

    def stop_clusters(self) -> None:
        for cluster in self.clusters + self.retired:
            cluster.stop(timeout=5)
        self.retired += self.clusters
        self.clusters = []

    def stop(self) -> None:
        self.stop_clusters()
        for server in (self.web, self.sandbox):
            if server is not None:
                server.stop()


def _process_kind(pid: int | None) -> str:
    import psutil
    try:
        cmd = " ".join(psutil.Process(pid).cmdline()) if pid else ""
    except psutil.Error:
        return "gone"
    if cmd.startswith("agentops "):  # a worker tree's main or worker (runs/worker/roles.py)
        return cmd.split()[1].split("-")[0]
    for name in ("daphne", "tests.chaos"):
        if name in cmd:
            return {"tests.chaos": "harness"}.get(name, name)
    return "other" if cmd else "unknown"


def _env(extra: dict) -> dict:
    from tests.support.processes import process_env
    return process_env(**extra)
