"""Database faults with real processes: every connection of the app terminated
(pg_terminate_backend, as a failover does) and the database restarted, while
runs work, pages load and live sockets follow a run.

Each test has a PostgreSQL server of its own (tests/support/private_postgres.py),
in the SQLite pass too: the shared server is never terminated or restarted.
What must hold: every run finishes with the output of an uninterrupted run,
nothing reached the sandbox twice, no run waited for its lease (a resume "after
a crash" would show it: the lease is 30 s here), no page load returned 500 and
every page load made once the database answered again returned 200, and the
live socket stayed open and delivered every event once, in order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from django.db.utils import load_backend

from runs import services
from runs.durable.executor import MAX_RECONNECTS
from runs.models import Run, RunEvent
from tests.chaos.followers import Followers, login
from tests.crash.helpers import assert_consistent, assert_outside_world_clean, wait_final
from tests.support.private_postgres import PrivatePostgres, default_database
from tests.support.processes import RUNS_END_DEADLINE, TREE_DEADLINE, Cluster, Server, wait_until

pytestmark = [pytest.mark.services]

STEPS = 30
LEASE = 30  # a run that waited for its lease would wait this long, and resume "after crash"


@pytest.fixture(scope="module")
def private_postgres():
    server = PrivatePostgres()
    yield server
    server.close()


@pytest.fixture
def app(private_postgres, django_db_blocker, tmp_path):
    """Daphne (with the Procfile's connection pool) and a worker tree, on the private server."""
    with django_db_blocker.unblock(), default_database(private_postgres.url):
        if not User.objects.filter(username="alice").exists():
            User.objects.create_user("alice", password="alice-pass-1")
        started = []
        try:
            web = Server(tmp_path, AGENTOPS_DB_POOL=1)
            started.append(web)
            # (The tree's only liveness check reads the kernel's process states, which a
            # loaded machine does not fool: the old cluster's timed checks replaced its
            # workers around a database restart at a load of 14.)
            env = {"AGENTOPS_SANDBOX_URL": f"{web.url}/sandbox", "AGENTOPS_LEASE_SECONDS": LEASE}
            started.append(Cluster(tmp_path, workers=2, **env))
            yield web, started[1]
        finally:
            for process in reversed(started):
                process.stop()


class PageLoads:
    """A logged-in user reloading pages in a loop: (started, ended, path, status)."""

    def __init__(self, base_url: str, session: str, paths: list[str]):
        # A load that meets the outage waits for a pooled connection (10 s,
        # AGENTOPS_DB_POOL_TIMEOUT) before its 503, longer on CI; a client timeout would
        # end the loop (the thread dies of it), so it is far above that.
        self.client = httpx.Client(base_url=base_url, cookies={"sessionid": session}, timeout=60)
        self.paths = paths
        self.loads: list[tuple[float, float, str, int]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            for path in self.paths:
                started = time.monotonic()
                status = self.client.get(path).status_code
                self.loads.append((started, time.monotonic(), path, status))

    def wait_for_a_load_after(self, moment: float) -> None:
        """Until a load that started after `moment` has ended: the loop may be in the
        middle of a load that met the fault when the runs finish."""
        wait_until(lambda: any(load[0] > moment for load in self.loads), 30,
                   message="a page load that started after the last fault")

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(70)  # past the client's 60 s: a load in flight ends by then
        self.client.close()

    def check(self, faults: list[tuple[float, float]]) -> None:
        """No 500 ever; a 503 only for a load that overlapped a fault; 200 otherwise."""
        assert self.loads, "no page was loaded"
        errors = [load for load in self.loads if load[3] == 500]
        assert not errors, f"HTTP 500 during or after a database fault: {errors[:5]}"
        for started, ended, path, status in self.loads:
            during = any(started <= end and ended >= begin for begin, end in faults)
            assert status == 200 or (during and status == 503), \
                (path, status, "a page load after the database answered again failed")
        after = [load for load in self.loads if load[0] > faults[-1][1]]
        assert after, "no page was loaded after the last fault"


def launch_runs(user, n: int) -> list[str]:
    return [services.run_launch(user=user, agent="steps",
                                inputs={"steps": STEPS, "delay": 0.05, "notify": True}).id
            for _ in range(n)]


def progressed(run_ids: list[str], beyond: dict[str, int], by: int) -> bool:
    rows = dict(Run.objects.filter(pk__in=run_ids).values_list("id", "step_no"))
    finished = set(Run.objects.filter(pk__in=run_ids, status="succeeded")
                   .values_list("id", flat=True))
    return all(run_id in finished or rows[run_id] >= beyond.get(run_id, 0) + by
               for run_id in run_ids)


def own_backend() -> set[int]:
    """This test process's own connection: not the app's, and kept alive."""
    connection.ensure_connection()
    return {connection.connection.info.backend_pid}


def check_outcome(run_ids: list[str], followers: Followers) -> None:
    runs = wait_final(run_ids, timeout=RUNS_END_DEADLINE)
    for run in runs.values():
        assert run.status == "succeeded", (run.status, run.error, run.attention)
        assert run.output == {"units": STEPS, "total": STEPS * (STEPS - 1) // 2}
        assert run.crash_count == 0
        assert_consistent(run)
    after_crash = RunEvent.objects.filter(run_id__in=run_ids, kind="status", data__after="crash")
    assert not after_crash.exists(), \
        f"runs waited for their lease instead of reconnecting: {list(after_crash.values('data'))}"
    assert len(assert_outside_world_clean(run_ids)) == len(run_ids) * STEPS
    heads = dict(Run.objects.filter(pk__in=run_ids).values_list("id", "event_seq"))
    assert followers.wait_caught_up(heads, 30), "a live socket fell behind"
    for run_id, follower in followers.followers.items():
        assert not follower.problems, follower.problems
        assert follower.seqs == list(range(1, heads[run_id] + 1))
        assert follower.connects == 1, "the live socket was closed by the database fault"


@contextmanager
def watched_runs(web: Server):
    """Four runs; a live socket follows the first; alice reloads pages in a loop."""
    run_ids = launch_runs(User.objects.get(username="alice"), 4)
    session = login(web.url, "alice", "alice-pass-1")
    followers = Followers(web.url, session)
    followers.follow(run_ids[0])
    pages = PageLoads(web.url, session, ["/", f"/runs/{run_ids[0]}/", f"/runs/{run_ids[1]}/"])
    try:
        yield run_ids, followers, pages
    finally:
        pages.stop()
        followers.stop()


def stuck(run_ids: list[str], cluster: Cluster) -> str:
    """What a wait for the runs found: each run's state and the tree's last lines (the
    private server is gone once the test has failed)."""
    rows = Run.objects.filter(pk__in=run_ids).values_list(
        "id", "status", "step_no", "attention", "wake_at", "lease_owner", "lease_expires_at")
    return "\n".join([*map(str, rows), cluster.output()[-6000:]])


def test_terminated_connections_are_survived_everywhere(app, private_postgres):
    web, cluster = app
    faults = []
    with watched_runs(web) as (run_ids, followers, pages):
        # More than twice the faults a run is reconnected after in a row (MAX_RECONNECTS):
        # each comes after the runs got further, so none may leave a run to its lease.
        for _ in range(2 * MAX_RECONNECTS + 2):
            before = dict(Run.objects.filter(pk__in=run_ids).values_list("id", "step_no"))
            try:
                wait_until(lambda before=before: progressed(run_ids, before, 2), TREE_DEADLINE,
                           message="the runs to move on")
            except AssertionError as failed:
                raise AssertionError(f"{failed}\n{stuck(run_ids, cluster)}") from None
            begin = time.monotonic()
            assert private_postgres.terminate(exclude=own_backend()) > 0
            faults.append((begin, time.monotonic()))
        check_outcome(run_ids, followers)
        pages.wait_for_a_load_after(faults[-1][1])
    pages.check(faults)


def test_a_database_restart_is_survived_everywhere(app, private_postgres):
    web, cluster = app
    with watched_runs(web) as (run_ids, followers, pages):
        wait_until(lambda: progressed(run_ids, {}, 5), TREE_DEADLINE, message="the runs to start")
        connection.close()
        begin = time.monotonic()
        private_postgres.stop("fast")  # every connection ends; new ones are refused
        # Down until a worker's pool has tried to reconnect for AGENTOPS_DB_RECONNECT_SECONDS
        # and given up (page loads go on all the while): an outage, not a blink.
        wait_until(lambda: "reconnection attempt in pool" in cluster.output(), 30,
                   message="a worker's pool to give up a reconnection")
        private_postgres.start()
        faults = [(begin, time.monotonic())]
        check_outcome(run_ids, followers)
        pages.wait_for_a_load_after(faults[-1][1])
    pages.check(faults)


def web_database_settings(url: str) -> dict:
    """The default database as a web process (AGENTOPS_DB_POOL=1, the Procfile's web line)
    configures it, for `url`."""
    env = {**os.environ, "DATABASE_URL": url, "AGENTOPS_DB_POOL": "1",
           "DJANGO_SETTINGS_MODULE": "agentops.settings"}
    printed = subprocess.run(
        [sys.executable, "-c", "import json; from django.conf import settings; "
                               "print(json.dumps(settings.DATABASES['default']))"],
        env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    return json.loads(printed)


def test_a_web_request_after_a_failover_does_not_wait_out_each_dead_connection(
        private_postgres, django_db_blocker):
    """Every idle connection of a web process's pool dies at once (pg_terminate_backend, as
    a failover does); the next request is served, and leaves no dead connection behind.
    psycopg_pool's own check would hand the request each dead connection in turn and
    sleep after each, 1, 2, 4 and 8 s: past the pool's timeout (10 s) before the fifth."""
    db = web_database_settings(private_postgres.url)
    idle = 5
    db["OPTIONS"]["pool"].update(min_size=idle, max_size=idle)
    settings = connections.configure_settings({"default": db})["default"]
    web = load_backend(settings["ENGINE"]).DatabaseWrapper(settings, "web")  # its own pool
    with django_db_blocker.unblock():
        try:
            web.pool.open(wait=True)
            assert private_postgres.terminate() >= idle
            with web.cursor() as cursor:  # the request's first query
                cursor.execute("SELECT 1")
                assert cursor.fetchone() == (1,)
            web.close()
            lost = web.pool.get_stats().get("connections_lost", 0)
            web.pool.check()  # a dead connection left in the pool would be counted here
            assert web.pool.get_stats().get("connections_lost", 0) == lost
        finally:
            web.close()
            web.close_pool()
