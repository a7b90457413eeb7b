"""Shared fixtures: users, real Daphne and worker tree processes on the test database.

In CI (CI=true) a skipped test is turned into a failure: the suite must really
exercise PostgreSQL, Redis, the workers and the browser there.
"""

import os

import pytest

import tests.workload_agents  # noqa: F401  (registers the agents tests launch)
from tests.support.processes import Cluster, Server, process_env

pytest_plugins = ["tests.timing"]  # wall and CPU per directory and slowest test, at the end

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# Each database runs the store contract on the store production builds for it
# (runs.storage.database_store): PgStore on PostgreSQL, OrmStore on SQLite. CI's
# PostgreSQL and SQLite passes (.ci/run) thus run both stores' whole suite.
ON_POSTGRESQL = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
collect_ignore = (["test_store_contract_orm.py"] if ON_POSTGRESQL
                  else ["test_store_contract_pg.py", "test_pgbouncer.py",
                        "test_pgbouncer_web.py",
                        "test_round_trips_pg.py", "test_run_row_pg.py",
                        "test_lease_keeper_pg.py", "test_hot_path_one_run_pg.py",
                        "test_partitioned_schema_pg.py", "test_scale_plans_pg.py",
                        "test_event_retention_pg.py", "test_checkpoint_bytes_pg.py",
                        "test_worker_wrappers_pg.py", "test_gate_store_faults_pg.py"])


# Rows that migrate's post_migrate makes (content types, permissions) and that no test
# changes: a flush between transactional tests keeps them, and does not send
# post_migrate to make them again. Sent after each of the ~690 transactional tests of
# CI's PostgreSQL pass, it was 163 queries, there to recreate the same rows. The
# project's own post_migrate receiver (runs/operator/groups.py: the Operators group)
# stays connected, so the group is back after each flush as after a migrate.
KEPT_THROUGH_FLUSH = frozenset({"django_content_type", "auth_permission"})


def _flush_lighter() -> None:
    """Each backend's flush, without the tables in KEPT_THROUGH_FLUSH. On PostgreSQL
    also DELETE instead of TRUNCATE: Django's flush truncates every table, and a
    TRUNCATE of some 70 tables makes and syncs new files for each of them and its
    indexes (the biggest single cost of the PostgreSQL pass, the statement most often
    seen running). The tables hold a test's few rows; the foreign keys
    Django makes are deferred to the commit of the flush's transaction, so the order of
    the deletes does not matter. Only this test process flushes: the processes a test
    starts keep the real backend. Measured on an idle server, a flush took 83 ms of
    wall time, 47 ms of this process's CPU and 23 of PostgreSQL's with post_migrate,
    and 13, 7 and 4 ms without it."""
    from django.db.backends.postgresql.base import DatabaseWrapper as Pg
    from django.db.backends.sqlite3.base import DatabaseWrapper as Sqlite

    PgOperations, SqliteOperations = Pg.ops_class, Sqlite.ops_class

    def keeping(flush):
        def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
            return flush(self, style, [t for t in tables if t not in KEPT_THROUGH_FLUSH],
                         reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return sql_flush

    truncate = PgOperations.sql_flush

    def delete(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences,
                            allow_cascade=allow_cascade)
        # One statement each: sent as one string of statements, the same deletes cost
        # PostgreSQL 59 ms of CPU against 4 (measured on an idle server).
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};"
                for t in tables]

    PgOperations.sql_flush = keeping(delete)
    SqliteOperations.sql_flush = keeping(SqliteOperations.sql_flush)


_flush_lighter()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, migrated (post_migrate made its content types and permissions
    then); from here on its flushes keep them (KEPT_THROUGH_FLUSH) and nothing makes
    them again. At the end, no session but this one is left on it, so that it can be
    dropped."""
    from django.contrib.contenttypes.management import create_contenttypes
    from django.db import connection
    from django.db.models.signals import post_migrate

    post_migrate.disconnect(create_contenttypes)
    post_migrate.disconnect(dispatch_uid="django.contrib.auth.management.create_permissions")
    if connection.vendor == "postgresql":
        _commit_without_waiting_for_the_disk(connection, django_db_blocker)
    yield
    if connection.vendor != "postgresql":
        return
    # Threads of this process that queried the database keep their connections open
    # (CONN_MAX_AGE): asgiref's executor threads under the live sockets' and the API's
    # tests, and the tests' own threads. Another thread's connection cannot be closed
    # from here, and PostgreSQL does not drop a database that sessions are on:
    # pytest-django's teardown left 1 to 4 of each CI run's test databases behind,
    # "accessed by other users" (seen: up to 8 sessions, all this process's, idle). The
    # database is this process's alone (its name has the pid), and the tests are over.
    # (DROP DATABASE waits up to 5 s for terminated sessions to end.)
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def _commit_without_waiting_for_the_disk(connection, django_db_blocker) -> None:
    """Every session on the test database (this process's, and the servers and worker
    trees its tests start) commits without waiting for the WAL to reach the disk. A
    commit is as visible and as ordered as before, and nothing the tests do stops the
    shared server: what is given up is only a commit's survival of that server's own
    crash (tests of database restarts bring a server of their own, which runs so too,
    tests/support/private_postgres.py). The disk's flush was most of a commit's time:
    2.45 ms against 0.21-0.35 (a one-row INSERT on a 2-core CI machine), every effect,
    step and test set-up of the PostgreSQL pass waiting on it."""
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        name = connection.ops.quote_name(cursor.fetchone()[0])
        cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit = off")
        cursor.execute("SET synchronous_commit = off")  # this session began before it


# --- where each test runs (README, "The two commands") ----------------------------------------
# A test of real worker processes (killed, frozen, cut off from their database or the
# services they call: tests/crash, tests/chaos, tests/cluster; worker hosts in network
# namespaces, which also need root: tests/fleet) tells something on the
# production configuration only: PostgreSQL + Redis. A test marked `sqlite` is about the
# SQLite default (the ORM store's contract, bin/serve). The engine's own tests
# (tests/durable) touch no database. Everything else runs on whichever database the
# session has. With AGENTOPS_TEST_SPLIT=1 (.ci/run: one pass per database) every test
# runs in one pass only: PostgreSQL runs the processes and everything else, SQLite the
# tests about SQLite and the engine's own.
PROCESS_DIRS = ("tests/crash/", "tests/chaos/", "tests/cluster/", "tests/fleet/",
                "tests/limits/test_busy_limit.py")  # three worker trees share a limit
NO_DATABASE_DIRS = ("tests/durable/",)
SPLIT = os.environ.get("AGENTOPS_TEST_SPLIT") == "1"


def placement(item) -> str:
    path = item.nodeid.split("::")[0]
    if item.get_closest_marker("sqlite"):
        return "sqlite"
    if path.startswith(PROCESS_DIRS):
        return "processes"
    if path.startswith(NO_DATABASE_DIRS):
        return "no_database"
    return "database"


def runs_here(place: str) -> bool:
    if ON_POSTGRESQL:
        return not SPLIT or place in ("processes", "database")
    if place == "processes":
        return False
    return not SPLIT or place in ("sqlite", "no_database")


# The longest files first (wall time in CI's PostgreSQL pass, `python -m tests.timing`):
# bin/test's pytest-xdist hands out whole files in collection order, and a 3-minute file
# handed out last ran alone at the end while the other processes idled (CI's PostgreSQL
# pass: 4% of its tests took its last 4 minutes). The rest keep their order.
LONGEST_FIRST = (
    "tests/chaos/test_chaos_ci.py", "tests/crash/test_adapter_crashes.py",
    "tests/test_store_contract_pg.py", "tests/api/test_fuzz.py", "tests/test_pgbouncer.py",
    "tests/crash/test_deploys.py", "tests/crash/test_worker_crashes.py",
    "tests/crash/test_sandbox_outage.py", "tests/web/test_browser_chat.py",
    "tests/web/test_browser.py", "tests/fuzz/test_every_endpoint.py",
    "tests/crash/test_database_faults.py", "tests/crash/test_cluster_kills.py",
    "tests/test_cli.py", "tests/test_store_contract_orm.py", "tests/test_serve.py",
    "tests/limits/test_busy_limit.py", "tests/adapters/test_adapters.py",
    "tests/web/test_csp_browser.py", "tests/crash/test_children_crashes.py",
)


def _longest_first(item) -> int:
    path = item.nodeid.split("::")[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_longest_first)  # stable: a file's tests keep their order
    elsewhere = [item for item in items if not runs_here(placement(item))]
    if not elsewhere:
        return
    items[:] = [item for item in items if runs_here(placement(item))]
    config.hook.pytest_deselected(items=elsewhere)
    processes = sum(placement(item) == "processes" for item in elsewhere)
    config.stash[_ELSEWHERE] = (processes, len(elsewhere) - processes)
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: bin/test's default
        config.workeroutput["elsewhere"] = config.stash[_ELSEWHERE]


_ELSEWHERE = pytest.StashKey[tuple]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller collects nothing: each worker tells it what ran
    elsewhere (they all collect the same tests), for the summary below."""
    elsewhere = getattr(node, "workeroutput", {}).get("elsewhere")
    if elsewhere:
        node.config.stash[_ELSEWHERE] = tuple(elsewhere)


def pytest_terminal_summary(terminalreporter, config):
    processes, other = config.stash.get(_ELSEWHERE, (0, 0))
    if processes and not ON_POSTGRESQL:
        terminalreporter.write_line(
            f"{processes} tests of real worker processes (tests/crash, tests/chaos, "
            "tests/cluster, tests/fleet) run on PostgreSQL + Redis only: "
            "DATABASE_URL=postgres://... REDIS_URL=redis://... bin/test (README)")
    if other:
        terminalreporter.write_line(f"{other} tests run in the other database's pass "
                                    "(AGENTOPS_TEST_SPLIT=1, as .ci/run runs them)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped in CI, which must run every test: {reason}"


@pytest.fixture
def users(db, django_user_model):
    """alice and bob are plain users; charlie is an operator."""
    from django.contrib.auth.models import Group

    alice = django_user_model.objects.create_user("alice", password="alice-pass-1")
    bob = django_user_model.objects.create_user("bob", password="bob-pass-1")
    charlie = django_user_model.objects.create_user("charlie", password="charlie-pass-1")
    operators, _ = Group.objects.get_or_create(name="Operators")
    charlie.groups.add(operators)
    return {"alice": alice, "bob": bob, "charlie": charlie}


@pytest.fixture
def faults_dir(tmp_path):
    path = tmp_path / "faults"
    path.mkdir()
    return path


class SharedServer:
    """The Daphne of one test process, started when a test first asks for it, and again
    if a test stopped it (a restart under an open page) or if the environment a Daphne
    would get now differs from the one this one got (a module that sets a variable
    "read by the Daphne started next", e.g. tests/operator/test_live_browser.py)."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.proc: Server | None = None
        self.env: dict | None = None

    def get(self) -> Server:
        env = process_env()
        env.pop("PYTEST_CURRENT_TEST", None)  # pytest's name of the test: new each test
        if self.proc is None or self.env != env or not self.alive():
            if self.proc is not None:
                self.proc.stop()
            self.proc, self.env = Server(self.log_dir), env
        return self.proc

    def alive(self) -> bool:
        return self.proc.alive() and self.proc._ready()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


@pytest.fixture(scope="session")
def _shared_server(django_db_setup, tmp_path_factory):
    """Daphne holds no state of a test's between requests (sessions, runs and users are
    in the database, which each test flushes): a test process's tests can share one.
    Shared by module, the PostgreSQL pass of CI started some 30 Daphnes, each about 2
    CPU-seconds and seconds of wall time before its first test."""
    shared = SharedServer(tmp_path_factory.mktemp("daphne"))
    yield shared
    shared.stop()


@pytest.fixture
def server(transactional_db, _shared_server):
    """A real Daphne serving the whole app (and the sandbox) on a free port, shared by
    the test process's tests; on the test database, flushed after each test."""
    return _shared_server.get()


@pytest.fixture
def start_cluster(transactional_db, tmp_path, faults_dir):
    """Start worker trees: start_cluster(workers=2, **env). All stopped at teardown."""
    started = []

    def start(workers=2, name="c", **env):
        env.setdefault("AGENTOPS_FAULTS_DIR", faults_dir)
        cluster = Cluster(tmp_path, workers=workers, name=name, **env)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
