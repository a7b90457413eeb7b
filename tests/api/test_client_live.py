"""agentops.client against a real Daphne (and a real worker tree for the runs to move):
one Idempotency-Key launches one run, and follow() sees every event exactly once
across a Daphne restart."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from agentops.client import Client, InvalidRequest, NotFound
from runs.models import Run, RunEvent
from tests.support.processes import TREE_DEADLINE, Server, free_port, wait_until

pytestmark = [pytest.mark.services]


@pytest.fixture
def alice_token(users, make_token):
    return make_token("alice", "read", "launch")


def test_launch_twice_with_one_key_gives_one_run(server, alice_token, users):
    with Client(server.url, token=alice_token) as api:
        first = api.launch("ticker", {"steps": 2, "delay": 0}, idempotency_key="nightly-1")
        again = api.launch("ticker", {"steps": 2, "delay": 0}, idempotency_key="nightly-1")
        assert again.id == first.id
        # the same key at once from 8 threads: still that run
        with ThreadPoolExecutor(8) as pool:
            ids = set(pool.map(lambda _: api.launch("ticker", {"steps": 2, "delay": 0},
                                                    idempotency_key="nightly-1").id, range(8)))
        assert ids == {first.id}
        with pytest.raises(InvalidRequest) as refused:
            api.launch("ticker", {"steps": 3, "delay": 0}, idempotency_key="nightly-1")
        assert refused.value.status == 422 and "another request body" in refused.value.detail
        # a new key is a new run; another user's key space is their own
        other = api.launch("ticker", {"steps": 2, "delay": 0}, idempotency_key="nightly-2")
        assert other.id != first.id
    assert Run.objects.filter(owner=users["alice"]).count() == 2
    with Client(server.url, token=alice_token) as api, pytest.raises(NotFound):
        api.run("0" * 32)


def test_follow_across_a_daphne_restart_yields_every_event_once(
        transactional_db, users, alice_token, start_cluster, tmp_path):
    port = free_port()
    servers = [Server(tmp_path, port=port)]
    start_cluster(workers=1)
    received, errors = [], []
    try:
        api = Client(servers[0].url, token=alice_token)
        run = api.launch("ticker", {"steps": 40, "delay": 0.15})

        def follow():
            try:
                received.extend(api.follow(run.id, give_up_after=60))
            except Exception as exc:  # reported by the test below
                errors.append(exc)

        follower = threading.Thread(target=follow)
        follower.start()
        wait_until(lambda: len(received) >= 8, TREE_DEADLINE, message="the first events")
        servers[0].stop()  # SIGTERM: the stream ends, the client reconnects...
        seen_at_stop = len(received)
        servers.append(Server(tmp_path, port=port))  # ...to the next Daphne on this port
        # the rest of the run's 40 steps of 0.15 s, a new Daphne's start-up (tens of seconds
        # on CI) and the reconnection, which the client gives up after 60 s without a server
        follower.join(120)
        assert not follower.is_alive(), "follow() did not end with the run"
        assert not errors, errors
        final = Run.objects.get(pk=run.id)
        assert final.status == "succeeded"
        assert api.last_end is not None and api.last_end.status == "succeeded"
        seqs = [e.seq for e in received]
        assert seqs == list(range(1, final.event_seq + 1))  # all, in order, none twice
        assert [(e.seq, e.kind) for e in received] == list(
            RunEvent.objects.filter(run_id=run.id).order_by("seq").values_list("seq", "kind"))
        assert seen_at_stop < len(received), "nothing arrived after the restart"
        assert api.connections >= 2, "the client never reconnected"
        api.close()
    finally:
        for server in servers:
            server.stop()


def test_a_quiet_stream_sends_heartbeats_so_proxies_keep_it_open(transactional_db, users,
                                                                 alice_token, tmp_path):
    """A run that does not move (queued, no worker here) sends no event for a while: the
    stream sends an SSE comment every AGENTOPS_API_SSE_HEARTBEAT seconds instead."""
    server = Server(tmp_path, AGENTOPS_API_SSE_HEARTBEAT=0.2)
    try:
        with Client(server.url, token=alice_token) as api:
            run = api.launch("ticker", {"steps": 2, "delay": 0})
        headers = {"Authorization": f"Bearer {alice_token}", "Last-Event-ID": "1"}
        beats = 0
        with httpx.stream("GET", f"{server.url}/api/v1/runs/{run.id}/events/stream",
                          headers=headers, timeout=30) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            for line in stream.iter_lines():
                assert not line.startswith("data:"), "no event after the launch's: it waits"
                beats += line == ": keep-alive"
                if beats == 3:
                    break
        assert beats == 3
    finally:
        server.stop()
