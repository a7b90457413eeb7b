"""The live pages and the API behind PgBouncer in transaction mode (docs/fleet.md): a real
Daphne and a worker tree whose DATABASE_URL is a pgbouncer (Debian's) with two server
connections, far fewer than the clients of the two (the web's pool, each worker
process's pool and lease keeper, the tree's main), both told so as a deployment tells
them (AGENTOPS_DB_TRANSACTION_POOLING: nothing prepared, no server-side cursor). Through
it: a login, launches over the API, every run followed on its event stream and one on
its run page's live socket (each event once, in order, to the run's end), an operator's
pause and resume over the API, the run page, the runs list and the API's pages with
their cursors. Collected when the suite runs on PostgreSQL (tests/conftest.py)."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest
from django.db import connection
from httpx_sse import connect_sse

from agentops.client import Client
from runs.api import tokens
from runs.models import Run, RunEvent
from tests.chaos.followers import Followers, login
from tests.support.fleet_services import PgBouncer
from tests.support.processes import Server, wait_until

POOL_SIZE = 2   # server connections: far fewer than the clients
RUNS = 4
STEPS = 5
HELD = 2        # the step of the first run whose call waits for the test (its pause)
DEADLINE = 30   # seconds: each wait on the processes below

pytestmark = [pytest.mark.services]


@pytest.fixture(scope="module")
def pgbouncer(django_db_setup):
    """A pgbouncer as docs/fleet.md sets one up, but for its pool's size."""
    bouncer = PgBouncer("127.0.0.1", connection.settings_dict, pool_size=POOL_SIZE)
    try:
        yield bouncer
    finally:
        bouncer.stop()


def stream_ids(base_url: str, token: str, run_id: str, seen: list, errors: list) -> None:
    """Every event number the run's event stream sends, as sent (no client dedups them),
    until its `end`, which is recorded as "end"."""
    try:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                          timeout=httpx.Timeout(10, read=DEADLINE)) as http, \
                connect_sse(http, "GET", f"/api/v1/runs/{run_id}/events/stream") as source:
            assert source.response.status_code == 200, source.response.status_code
            for message in source.iter_sse():
                if message.event == "end":
                    seen.append("end")
                    return
                if message.event == "message" and message.id:
                    seen.append(int(message.id))
    except Exception as exc:  # reported by the test
        errors.append(exc)


def follow(client: Client, run_id: str, received: list, errors: list) -> None:
    try:
        received.extend(client.follow(run_id, give_up_after=DEADLINE))
    except Exception as exc:  # reported by the test
        errors.append(exc)


@pytest.fixture
def behind(pgbouncer) -> dict:
    """A process's settings behind the pgbouncer, as docs/fleet.md gives them."""
    return {"DATABASE_URL": pgbouncer.url, "AGENTOPS_DB_TRANSACTION_POOLING": 1,
            "AGENTOPS_AGENT_MODULES": "tests.fleet.agents"}


@pytest.fixture
def web(transactional_db, behind, tmp_path):
    """The app's Daphne behind the pgbouncer, as the Procfile runs it (AGENTOPS_DB_POOL:
    on a pool of its own)."""
    server = Server(tmp_path, AGENTOPS_DB_POOL=1, **behind)
    yield server
    server.stop()


def test_web_and_workers_behind_pgbouncer_in_transaction_mode(
        users, pgbouncer, behind, web, start_cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    start_cluster(workers=2, AGENTOPS_WORKER_DB_POOL=4,
                  AGENTOPS_SANDBOX_URL=f"{web.url}/sandbox", **behind)
    token = tokens.create(users["charlie"], name="behind-pgbouncer",
                          scopes=["read", "launch", "operate"], days=1, max_days=1)[1]
    session = login(web.url, "charlie", "charlie-pass-1")
    api = Client(web.url, token=token)

    inputs = {"steps": STEPS, "delay": 0.05, "marks": str(marks)}
    held = api.launch("fleet_steps", {**inputs, "hold": HELD})
    others = [api.launch("fleet_steps", inputs) for _ in range(RUNS - 1)]
    run_ids = [held.id] + [run.id for run in others]
    followers = Followers(web.url, session)  # the run page's live socket
    try:
        followers.follow(held.id)
        streams, errors, threads = {run_id: [] for run_id in run_ids}, [], []
        for run_id in run_ids:
            threads.append(threading.Thread(target=stream_ids, args=(
                web.url, token, run_id, streams[run_id], errors)))
        # and one through agentops.client, as a user's script follows a run
        followed, following = [], Client(web.url, token=token)
        threads.append(threading.Thread(target=follow, args=(following, others[0].id,
                                                             followed, errors)))
        for thread in threads:
            thread.start()

        # The operator pauses the held run while its call waits, then lets the call end:
        # the run stops at that effect's boundary.
        unit = f"{held.id}-{HELD}@{socket.gethostname()}"
        wait_until(lambda: (marks / unit).exists(), DEADLINE, message="the held call")
        assert api.pause(held.id, "behind PgBouncer").status == "running"
        (marks / f"release-{held.id}-{HELD}").touch()
        wait_until(lambda: api.run(held.id).status == "paused", DEADLINE,
                   message="the run paused")
        clients = pgbouncer.show("CLIENTS")
        assert api.resume(held.id, "behind PgBouncer").status == "queued"

        for thread in threads:
            thread.join(DEADLINE)
            assert not thread.is_alive(), "an event stream did not end with its run"
        assert not errors, errors
        heads = {}
        for run_id in run_ids:
            run = Run.objects.get(pk=run_id)
            assert run.status == "succeeded", (run_id, run.status, run.error)
            heads[run_id] = run.event_seq
            stored = list(RunEvent.objects.filter(run_id=run_id).order_by("seq")
                          .values_list("seq", flat=True))
            assert stored == list(range(1, run.event_seq + 1))
            assert streams[run_id] == [*stored, "end"], run_id  # each once, in order, an end
        statuses = [data["status"] for data in RunEvent.objects.filter(
            run_id=held.id, kind="status").order_by("seq").values_list("data", flat=True)]
        assert "paused" in statuses and statuses[-1] == "succeeded", statuses
        assert [e.seq for e in followed] == list(range(1, heads[others[0].id] + 1))
        assert following.last_end.status == "succeeded"
        assert following.connections == 1  # nothing dropped on the way: no reconnection
        following.close()

        wait_until(lambda: followers.caught_up(heads), DEADLINE, message="the live socket")
        live = followers.followers[held.id]
        assert not live.problems and not live.errors, (live.problems, live.errors)
        assert live.seqs == list(range(1, heads[held.id] + 1))
    finally:
        followers.stop()

    check_pages(web.url, session, held.id, heads[held.id], run_ids)
    check_api_pages(api, held.id, heads[held.id], run_ids)
    api.close()
    # every process above was a client of the pool; the pool's servers stayed two
    servers = pgbouncer.show("SERVERS")
    print(f"\nPgBouncer: {len(clients)} clients, {len(servers)} server connections")
    assert len(servers) <= POOL_SIZE < len(clients)


def check_pages(base_url: str, session: str, run_id: str, head: int, run_ids: list) -> None:
    """The run page of the ended run, the runs list, the run page's older events."""
    with httpx.Client(base_url=base_url, cookies={"sessionid": session},
                      timeout=10) as browser:
        page = browser.get(f"/runs/{run_id}/")
        assert page.status_code == 200
        assert 'data-status="succeeded"' in page.text
        assert f'data-last-seq="{head}"' in page.text
        listing = browser.get("/")
        assert listing.status_code == 200
        assert all(f"/runs/{listed}/" in listing.text for listed in run_ids)
        older = browser.get(f"/runs/{run_id}/events/", params={"before": 4})
        assert older.status_code == 200
        assert [f'data-seq="{n}"' in older.text for n in (1, 2, 3, 4)] == \
            [True, True, True, False]


def check_api_pages(api: Client, run_id: str, head: int, run_ids: list) -> None:
    """The API's runs list by cursor and the run's events after a number, page by page:
    each run and each event once across the pages."""
    listed, cursor = [], ""
    while True:
        page = api.runs(limit=3, cursor=cursor)
        listed += [run.id for run in page.runs]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert sorted(listed) == sorted(run_ids)
    paged, after, more = [], 0, True
    while more:
        events = api.events(run_id, after=after, limit=4)
        paged += [event.seq for event in events.events]
        after, more = (paged[-1] if paged else after), events.more
    assert paged == list(range(1, head + 1))
