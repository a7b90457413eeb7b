"""A worker process's runs share a small pool of database connections
(runs/worker/db.py): a run holds one only while it talks to the database, never while
its tool waits, even when a gate read the database just before the call (the quota
gate does for every metered call: a model call). Otherwise a worker holding 1,000
runs whose model calls take a second, on a pool of 10, made 10 calls a second."""

import pytest

from runs import services
from runs.models import Run
from tests.cluster.pool_agents import PARTIES
from tests.support.processes import TREE_DEADLINE, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_more_runs_than_pooled_connections_are_inside_their_metered_calls_at_once(
        start_cluster, tmp_path):
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    ids = [services.run_launch(user=None, agent="pool-meeting", inputs={}).id
           for _ in range(PARTIES)]
    start_cluster(workers=1, AGENTOPS_AGENT_MODULES="tests.cluster.pool_agents",
                  AGENTOPS_RUNS_PER_WORKER=PARTIES, AGENTOPS_WORKER_DB_POOL=PARTIES // 2,
                  AGENTOPS_TEST_MEETING_DIR=str(meeting))
    wait_until(lambda: Run.objects.filter(pk__in=ids, status="succeeded").count() == PARTIES,
               TREE_DEADLINE, message="every run to succeed")
    # each call saw all of them inside: none waited outside for a connection the others held
    assert [run.output for run in Run.objects.filter(pk__in=ids)] == [{"inside": PARTIES}] * PARTIES
