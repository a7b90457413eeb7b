"""The Workers page: hosts and processes with their last heartbeat, the runs each
holds, the due runs waiting for a worker and the rate of finished runs."""

import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Run, WorkerHeartbeat
from runs.worker import heartbeat
from tests.support.processes import wait_until

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


def test_a_stopping_tree_stays_stopping_until_a_tree_of_its_pid_starts_again():
    """Each worker of a stopping tree says so before it hands a run back, and the duties'
    heartbeat after that must not say the tree serves its code again; a fresh tree with
    the same pid (a container's tree is the same pid every time) does."""
    heartbeat.record_start()
    heartbeat.record_stopping(os.getpid())
    said = WorkerHeartbeat.objects.get()
    assert said.stopping
    assert heartbeat.record_heartbeat(force=True)
    heartbeat.record_stopping(os.getpid())  # a second worker: the first one's moment stays
    row = WorkerHeartbeat.objects.get()
    assert row.stopping and row.last_seen == said.last_seen
    heartbeat.record_start()
    row = WorkerHeartbeat.objects.get()
    assert not row.stopping and row.started_at > said.started_at
    assert row.codes == heartbeat.fleet.own_codes()


def test_old_heartbeats_are_forgotten():
    WorkerHeartbeat.objects.create(host="gone", pid=1,
                                   last_seen=timezone.now() - timedelta(days=2))
    heartbeat.record_heartbeat(force=True)
    assert not WorkerHeartbeat.objects.filter(host="gone").exists()


def test_the_page_shows_hosts_processes_runs_due_runs_and_rate(ops, users):
    now = timezone.now()
    WorkerHeartbeat.objects.create(host="web-1", pid=100, cluster="agentops", last_seen=now,
                                   processes=[process(101, "worker", rss_mb=50.0),
                                              process(102, "worker")])
    WorkerHeartbeat.objects.create(host="web-2", pid=200, cluster="agentops",
                                   last_seen=now - timedelta(minutes=5))
    held = Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                              status="running", lease_owner="web-1:101:abcd",
                              lease_expires_at=now + timedelta(seconds=4))
    for _ in range(10):
        Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                           status="succeeded", finished_at=now - timedelta(minutes=1))
    Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1", status="queued")
    Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1", status="waiting",
                       wake_at=now + timedelta(minutes=5))  # not due yet
    page = ops.get("/ops/workers/").content.decode()
    assert 'data-host="web-1"' in page and 'data-host="web-2"' in page
    assert 'data-worker="web-1:101:abcd"' in page and held.pk[:8] in page
    assert "(stale)" in page  # web-2 stopped reporting
    assert '<strong id="due-runs">1</strong>' in page
    assert "<strong>2.0</strong> runs/min" in page  # 10 finished in the 5-minute window
    assert ops.get("/ops/workers/", HTTP_HX_REQUEST="true",
                   HTTP_HX_TARGET="workers-panel").content.decode().startswith('<div id="workers-panel"')


def process(pid, role, alive=True, status="sleeping", rss_mb=10.0):
    return {"pid": pid, "role": role, "alive": alive, "status": status, "rss_mb": rss_mb}


def child_titled(title):
    code = f"import setproctitle, time; setproctitle.setproctitle({title!r}); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code])
    wait_until(lambda: heartbeat.roles.role_of(heartbeat.psutil.Process(child.pid)), 10,
               message="the child's title")
    return child


def listed(pid):
    row = WorkerHeartbeat.objects.get(pid=os.getpid())
    return next((p for p in row.processes if p["pid"] == pid), None)


def test_the_heartbeat_lists_roles_and_never_a_dead_process_as_alive():
    child = child_titled("agentops worker-1")
    try:
        assert heartbeat.record_heartbeat(force=True)
        assert listed(child.pid) == {**listed(child.pid), "role": "worker", "alive": True}
        os.kill(child.pid, signal.SIGKILL)
        wait_until(lambda: heartbeat.roles.status_of(child.pid) == "zombie", 10, message="a zombie")
        assert heartbeat.record_heartbeat()  # the tree changed: written at once
        assert listed(child.pid)["alive"] is False and listed(child.pid)["status"] == "zombie"
    finally:
        child.kill()
        child.wait()
    assert heartbeat.record_heartbeat()
    assert listed(child.pid) == {**listed(child.pid), "role": "worker", "alive": False,
                                 "status": "gone"}


def test_a_dead_main_on_this_host_has_its_processes_shown_as_they_are():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    WorkerHeartbeat.objects.create(host=socket.gethostname(), pid=gone.pid, cluster="agentops",
                                   processes=[process(gone.pid, "worker")])
    heartbeat.record_heartbeat(force=True)
    [entry] = WorkerHeartbeat.objects.get(pid=gone.pid).processes
    assert entry["alive"] is False and entry["status"] == "gone"


@pytest.mark.parametrize("processes,problem", [
    ([process(1, "worker"), process(2, "worker")], ""),
    ([process(1, "worker", alive=False, status="zombie"), process(2, "worker")], ""),
    ([process(1, "worker", alive=False, status="zombie")], "no live worker"),
    ([process(1, "worker", status="stopped")], "no live worker"),
    ([], "no live worker"),
])
def test_the_page_says_which_clusters_stopped_working(ops, processes, problem):
    WorkerHeartbeat.objects.create(host="h", pid=100, cluster="agentops", processes=processes)
    page = ops.get("/ops/workers/").content.decode()
    if problem:
        assert 'data-working="no"' in page and f"stopped working: {problem}" in page
    else:
        assert 'data-working="yes"' in page and "stopped working" not in page
    for p in processes:
        assert f'data-pid="{p["pid"]}" data-role="{p["role"]}" ' \
               f'data-alive="{"yes" if p["alive"] else "no"}"' in page


def test_a_stale_cluster_is_not_said_to_have_live_processes(ops):
    last_seen = timezone.now() - timedelta(minutes=1)
    WorkerHeartbeat.objects.create(host="h", pid=100, cluster="agentops", last_seen=last_seen,
                                   processes=[process(1, "worker"), process(2, "worker")])
    page = ops.get("/ops/workers/").content.decode()
    # a minute at the write; the page reads the clock a moment later (seconds, loaded)
    silent = re.search(r"stopped working: no heartbeat for (\d+) s", page)
    assert silent and 60 <= int(silent.group(1)) <= (timezone.now() - last_seen).total_seconds()
    assert 'data-alive="yes"' not in page and page.count('data-alive="unknown"') == 2


def test_the_page_costs_the_same_queries_for_1_held_run_as_for_5(ops):
    """Every field the page shows of a held run is read with it: `control` read one run
    at a time was a query per held run (2,000 running runs: 2.2 s in bench/scale.py)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def held_run():
        Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                           status="running", lease_owner="web-1:101:abcd", control="pause",
                           lease_expires_at=timezone.now() + timedelta(seconds=60))

    def queries():
        with CaptureQueriesContext(connection) as captured:
            assert "(pause requested)" in ops.get("/ops/workers/").content.decode()
        return len(captured)

    held_run()
    one = queries()
    for _ in range(4):
        held_run()
    assert queries() == one


def test_a_process_shows_its_first_runs_and_links_to_the_rest(ops, monkeypatch):
    """The page shows a bounded number of each process's runs (2,000 running runs were
    all rendered: 350-570 ms in bench/scale.py); the rest are the operators' list
    filtered by the worker, and the page's queries do not grow with them."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.operator import selectors

    monkeypatch.setattr(selectors, "WORKER_RUNS_SHOWN", 3)
    now = timezone.now()

    def hold(owner, n, expires):
        return sorted(Run.objects.create(id=uuid.uuid4().hex, agent="ticker", agent_version="1",
                                         status="running", lease_owner=owner,
                                         lease_expires_at=expires).pk for _ in range(n))

    busy = hold("web-1:101:abcd", 5, now + timedelta(seconds=30))
    busy += hold("web-1:101:abcd", 1, now + timedelta(seconds=60))  # its latest renewal
    quiet = hold("web-1:102:beef", 2, now + timedelta(seconds=30))
    with CaptureQueriesContext(connection) as captured:
        page = ops.get("/ops/workers/").content.decode()
    busy_row = page.split('data-worker="web-1:101:abcd"')[1].split("</tr>")[0]
    quiet_row = page.split('data-worker="web-1:102:beef"')[1].split("</tr>")[0]
    assert [pk for pk in sorted(busy) if pk[:8] in busy_row] == sorted(busy)[:3]
    assert '<td class="num" data-role="held">6</td>' in busy_row
    assert 'href="/ops/?worker=web-1%3A101%3Aabcd">and 3 more</a>' in busy_row
    assert all(pk[:8] in quiet_row for pk in quiet) and "more</a>" not in quiet_row
    process = selectors.workers_overview(now)["hosts"]["web-1"]["processes"][0]
    lease = timedelta(seconds=settings.AGENTOPS["LEASE_SECONDS"])
    assert process.last_renewal == now + timedelta(seconds=60) - lease
    listed = ops.get("/ops/?worker=web-1:101:abcd").context["page"].runs
    assert sorted(run.pk for run in listed) == sorted(busy)
    hold("web-1:101:abcd", 10, now + timedelta(seconds=30))
    with CaptureQueriesContext(connection) as again:
        ops.get("/ops/workers/")
    assert len(again) == len(captured)
