"""The services the fleet tests' hosts (tests/support/netns.py) reach on the bridge's
address: PgBouncer in transaction mode in front of PostgreSQL (the pooled set-up of a
fleet, docs/fleet.md), TCP relays (to Redis, which listens on loopback; or one that
delays what it passes on, a slow network), the app's Daphne (its sandbox is the hosts'
tools' target). Each runs in the root namespace and is stopped by its `stop`."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from tests.support.netns import PGBOUNCER, SERVICES_NAME
from tests.support.processes import Managed, process_env, wait_until


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class PgBouncer:
    """Debian's pgbouncer in transaction mode on `address`, in front of the PostgreSQL
    of `upstream` (Django's settings of the test database), with `pool_size` server
    connections per database and user (docs/fleet.md says why each setting)."""

    def __init__(self, address: str, upstream: dict, pool_size: int = 4,
                 idle_transaction_timeout: float = 5.0):
        self.address, self.port = address, free_port(address)
        self.user, self.database = upstream.get("USER") or "postgres", upstream["NAME"]
        self.directory = Path(tempfile.mkdtemp(prefix="pgbouncer-fleet-"))
        self.directory.chmod(0o755)  # read by the user pgbouncer runs as
        (self.directory / "users.txt").write_text(f'"{self.user}" ""\n')
        ini = self.directory / "pgbouncer.ini"
        ini.write_text(f"""[databases]
* = host={upstream.get("HOST") or "127.0.0.1"} port={upstream.get("PORT") or 5432}

[pgbouncer]
listen_addr = {address}
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.directory / "users.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
reserve_pool_size = 0
max_client_conn = 1000
idle_transaction_timeout = {idle_transaction_timeout}
stats_users = {self.user}
""")
        # Its log goes to a file, never to a pipe: pgbouncer writes a few lines for every
        # connection, and once a pipe nobody reads holds 64 KiB its next write blocks the
        # whole pooler (a whole store contract logs about 63 KB: in CI, where a slower run
        # adds its periodic stats lines, the last tests hung or timed out connecting).
        self.log = self.directory / "pgbouncer.log"
        # pgbouncer refuses to run as root: it takes another identity
        identity = ["-u", "nobody"] if os.geteuid() == 0 else []
        with self.log.open("w") as log:
            self.process = subprocess.Popen([PGBOUNCER, *identity, str(ini)],
                                            stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_until(lambda: self.process.poll() is not None or self.answers(), 30,
                       message="pgbouncer accepts connections")
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer ended: {self.log.read_text()}")
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"postgres://{self.user}@{self.address}:{self.port}/{self.database}"

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def show(self, what: str) -> list[dict]:
        """The rows of the admin console's SHOW `what` (CLIENTS, SERVERS, POOLS) for the
        test database: who is connected, as PgBouncer counts them."""
        console = f"postgres://{self.user}@{self.address}:{self.port}/pgbouncer"
        with psycopg.connect(console, connect_timeout=2, autocommit=True,
                             row_factory=dict_row) as conn:
            # no parameters: psycopg sends it in the simple protocol, the console's only one
            rows = conn.execute(f"SHOW {what}").fetchall()
        return [row for row in rows if row["database"] == self.database]

    def stop(self) -> None:
        # SIGQUIT: at once. Since PgBouncer 1.23 SIGTERM waits for every client to go.
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.directory, ignore_errors=True)


class Relay:
    """A TCP relay from `address` (a free port) to `target`, two threads per connection:
    what the hosts use to reach a server that listens on loopback only (Redis), or to
    reach one later than the network would (`delay`: seconds to hold each chunk sent
    to the target, called per chunk; the order of the bytes is kept)."""

    def __init__(self, address: str, target: tuple[str, int],
                 delay: Callable[[], float] | None = None):
        self.target, self.delay = target, delay
        self.listener = socket.create_server((address, 0))
        self.address, self.port = self.listener.getsockname()[:2]
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, name="relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # stopped
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.open += [client, upstream]
                self.connections += 1
            threading.Thread(target=_pump, args=(client, upstream, self.delay),
                             daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()

    def stop(self) -> None:
        self.listener.close()
        with self.lock:
            for sock in self.open:
                with contextlib.suppress(OSError):
                    sock.close()


def _pump(source: socket.socket, sink: socket.socket, delay=None) -> None:
    held: queue.Queue = queue.Queue()
    if delay is not None:
        threading.Thread(target=_send_when_due, args=(held, sink), daemon=True).start()
    due = 0.0
    try:
        while data := source.recv(65536):
            if delay is None:
                sink.sendall(data)
                continue
            due = max(due, time.monotonic() + delay())  # never before an earlier chunk
            held.put((due, data))
    except OSError:
        pass
    finally:
        if delay is None:
            _close_writing(sink)
        else:
            held.put((None, b""))


def _send_when_due(held: queue.Queue, sink: socket.socket) -> None:
    """The delaying half of a relay: each chunk at its due time, then the end."""
    while True:
        due, data = held.get()
        if due is None:
            _close_writing(sink)
            return
        time.sleep(max(0.0, due - time.monotonic()))  # the delay itself, not a wait on a test
        try:
            sink.sendall(data)
        except OSError:
            return


def _close_writing(sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class BridgeServer(Managed):
    """The app's Daphne (its sandbox the target of the hosts' tools) on the bridge."""

    def __init__(self, log_dir: Path, address: str, **env):
        self.port = free_port(address)
        super().__init__([sys.executable, "-m", "daphne", "-b", address, "-p", str(self.port),
                          "agentops.asgi:application"], process_env(**env),
                         log_dir / f"daphne-{address}-{self.port}.log")
        self.url = f"http://{SERVICES_NAME}:{self.port}"  # as the hosts name it
        wait_until(lambda: self._ready(address), 30, message=f"daphne on {self.url}")

    def _ready(self, address: str) -> bool:
        if not self.alive():
            raise AssertionError(f"daphne exited:\n{self.output()[-3000:]}")
        with socket.socket() as s:
            return s.connect_ex((address, self.port)) == 0
