"""The Workers page: hosts and processes with their last heartbeat, the runs each
holds, the queue depth and the rate of finished runs."""

import os
import socket
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from runs import heartbeat
from runs.models import Run, WorkerHeartbeat

pytestmark = pytest.mark.django_db


def test_record_heartbeat_upserts_one_row_per_process_and_throttles():
    assert heartbeat.record_heartbeat(force=True)
    assert not heartbeat.record_heartbeat()  # within HEARTBEAT_SECONDS: no write
    row = WorkerHeartbeat.objects.get()
    assert (row.host, row.pid) == (socket.gethostname(), os.getpid())
    first = row.last_seen
    assert heartbeat.record_heartbeat(force=True)
    row.refresh_from_db()
    assert WorkerHeartbeat.objects.count() == 1 and row.last_seen >= first


def test_old_heartbeats_are_forgotten():
    WorkerHeartbeat.objects.create(host="gone", pid=1,
                                   last_seen=timezone.now() - timedelta(days=2))
    heartbeat.record_heartbeat(force=True)
    assert not WorkerHeartbeat.objects.filter(host="gone").exists()


def test_the_page_shows_hosts_processes_runs_queue_and_rate(ops, users):
    from django_q.models import OrmQ

    now = timezone.now()
    WorkerHeartbeat.objects.create(host="web-1", pid=100, cluster="agentops", last_seen=now,
                                   processes=[{"pid": 101, "rss_mb": 50.0}])
    WorkerHeartbeat.objects.create(host="web-2", pid=200, cluster="agentops",
                                   last_seen=now - timedelta(minutes=5))
    held = Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                              status="running", lease_owner="web-1:101:abcd",
                              lease_expires_at=now + timedelta(seconds=4))
    for _ in range(10):
        Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                           status="succeeded", finished_at=now - timedelta(minutes=1))
    OrmQ.objects.create(key="agentops", payload="x", lock=None)
    page = ops.get("/ops/workers/").content.decode()
    assert 'data-host="web-1"' in page and 'data-host="web-2"' in page
    assert 'data-worker="web-1:101:abcd"' in page and held.pk[:8] in page
    assert "(stale)" in page  # web-2 stopped reporting
    assert '<strong id="queue-depth">1</strong>' in page
    assert "<strong>2.0</strong> runs/min" in page  # 10 finished in the 5-minute window
    assert ops.get("/ops/workers/", HTTP_HX_REQUEST="true",
                   HTTP_HX_TARGET="workers-panel").content.decode().startswith('<div id="workers-panel"')
