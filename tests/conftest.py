"""Shared fixtures: users, real Daphne and qcluster processes on the test database.

In CI (CI=true) a skipped test is turned into a failure: the suite must really
exercise PostgreSQL, Redis, the workers and the browser there.
"""

import os

import pytest

import tests.workload_agents  # noqa: F401  (registers the agents tests launch)
from tests.support.processes import Cluster, Server

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


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


@pytest.fixture
def server(transactional_db, tmp_path):
    """A real Daphne serving the whole app (and the sandbox) on a free port."""
    proc = Server(tmp_path)
    yield proc
    proc.stop()


@pytest.fixture
def start_cluster(transactional_db, tmp_path, faults_dir):
    """Start qcluster processes: start_cluster(workers=2, **env). All stopped at teardown."""
    started = []

    def start(workers=2, name="c", **env):
        env.setdefault("AGENTOPS_FAULTS_DIR", faults_dir)
        cluster = Cluster(tmp_path, workers=workers, name=name, **env)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
