"""A frozen worker's run shows as stalled, and stops showing so when it thaws.

A real worker tree (one worker) and a real Daphne. The whole cluster is frozen with
SIGSTOP (main, sentinel, monitor, pusher and worker: no sweep, no watchdog, nobody
to take the run over), so the run's lease runs out and stays out. The run page
served by Daphne, its websocket and `manage.py runs show` must then say `stalled`
and why; after SIGCONT the worker renews its lease and carries on, and all three
must say the run moves again.
"""

import asyncio
import json
import signal
import subprocess
import sys

import httpx
import pytest
from django.test import Client

from runs import services
from runs.models import Run
from tests.chaos.wsclient import WebSocket
from tests.crash.helpers import wait_final
from tests.support.processes import (
    NO_TIME_SLICES,
    ROOT,
    TREE_DEADLINE,
    Server,
    process_env,
    wait_until,
)

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

LEASE = 2  # seconds: the run is stalled one more lease period after its lease ran out


def runs_show(run_id: str) -> dict:
    """`manage.py runs show --json`, as an operator runs it."""
    done = subprocess.run([sys.executable, "manage.py", "runs", "show", run_id, "--json"],
                          cwd=ROOT, env=process_env(AGENTOPS_LEASE_SECONDS=LEASE),
                          # a process of its own: Django's start-up, tens of seconds on CI
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def page_state(server, cookie: str, run_id: str) -> str:
    body = httpx.get(f"{server.url}/runs/{run_id}/", cookies={"sessionid": cookie},
                     timeout=10).raise_for_status().text
    stalled, striped = 'class="badge status-stalled"' in body, "is-running" in body
    assert not (stalled and striped), "a stalled run shows no moving stripe"
    return "stalled" if stalled else "moving" if striped else "still"


async def next_stall(socket: WebSocket, run_id: str, timeout: float = 30) -> dict | None:
    async def read():
        while True:
            message = json.loads(await socket.receive())
            if message["type"] == "stall":
                return message["stall"]

    try:
        return await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise AssertionError(f"no stall message in {timeout} s; the run: {runs_show(run_id)}") \
            from None


@pytest.fixture
def web(tmp_path, transactional_db):
    server = Server(tmp_path, AGENTOPS_LEASE_SECONDS=LEASE, AGENTOPS_LIVE_POLL=0.2)
    yield server
    server.stop()


def test_a_frozen_workers_run_shows_as_stalled_until_it_thaws(web, start_cluster,
                                                              django_user_model):
    alice = django_user_model.objects.create_user("alice", password="alice-pass-1")
    client = Client()
    client.force_login(alice)
    cookie = client.cookies["sessionid"].value
    # Slices longer than the test: the run is held, not between two claims, when the
    # cluster is frozen (a loaded CI machine froze it just after a slice's end had
    # released the run: no lease to run out, no stall).
    cluster = start_cluster(workers=1, AGENTOPS_LEASE_SECONDS=LEASE,
                            AGENTOPS_SANDBOX_URL=f"{web.url}/sandbox", **NO_TIME_SLICES)
    # Long enough (60 s) to be still running when it is frozen however slow the
    # machine; once it is seen moving again after the thaw, it is cancelled.
    run_id = services.run_launch(user=alice, agent="steps",
                                 inputs={"steps": 300, "delay": 0.2}).id
    wait_until(lambda: Run.objects.get(pk=run_id).step_no >= 2, TREE_DEADLINE,
               message="two steps")
    # Read while held: at a time slice the run is released for a moment (and claimed
    # again by the one worker), its lease_owner empty in between.
    owner = wait_until(lambda: Run.objects.get(pk=run_id).lease_owner, 30, message="held")
    assert int(owner.split(":")[1]) in cluster.worker_pids()
    assert page_state(web, cookie, run_id) == "moving"
    assert runs_show(run_id)["stall"] is None
    holder = ":".join(owner.split(":")[:2])

    async def follow():  # no ORM in here: the event loop's thread may not use it
        socket = await WebSocket.connect("127.0.0.1", web.port, f"/ws/runs/{run_id}/", {
            "Cookie": f"sessionid={cookie}", "Origin": web.url})
        await socket.send_text(json.dumps({"type": "hello", "after": 0, "stalled": None}))
        try:
            cluster.signal_group(signal.SIGSTOP)
            try:
                stall = await next_stall(socket, run_id)
                # frozen: the page, the socket and the command all say so, and why
                assert stall["kind"] == "lease_lost", stall
                assert page_state(web, cookie, run_id) == "stalled"
                shown = runs_show(run_id)
                assert shown["status"] == "running" and shown["stall"]["kind"] == "lease_lost"
                assert shown["stall"]["why"].startswith(f"lease holder {holder} gone:")
                frozen_at = shown["step_no"]
            finally:
                cluster.signal_group(signal.SIGCONT)
            # thawed: the worker renews its lease (nobody took the run) and carries on
            assert await next_stall(socket, run_id) is None
            return frozen_at
        finally:
            socket.close()

    frozen_at = asyncio.run(follow())
    # (the freeze used up the run's time slice: it may be handed back and claimed again)
    try:
        wait_until(lambda: page_state(web, cookie, run_id) == "moving"
                   or Run.objects.get(pk=run_id).is_final, 30, interval=0.1,
                   message="the run page to show the run moving again")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the run: {runs_show(run_id)}") from None
    assert runs_show(run_id)["stall"] is None
    wait_until(lambda: Run.objects.get(pk=run_id).step_no > frozen_at, TREE_DEADLINE,
               message="a step after the thaw")
    services.run_cancel(run_id=run_id, user=alice, reason="seen moving again")
    run = wait_final([run_id])[run_id]
    assert run.status == "cancelled" and run.step_no > frozen_at
