"""The live sockets, through the real ASGI stack (origin check, session auth, routing).

With no REDIS_URL the channel layer is in-memory and nothing crosses processes:
these tests then show the polling path. With REDIS_URL set they run the same
assertions with wake-ups through Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connections, transaction
from django.test import Client
from django.utils import timezone

from agentops.asgi import application
from runs import selectors, services
from runs.live import hub as live_hub
from runs.live import socket as live_socket
from runs.models import Run, RunEvent
from runs.wakeups import run_group
from tests.web.conftest import drive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = b"http://127.0.0.1"


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.fixture
def cookies(users):
    return {name: session_cookie(user) for name, user in users.items()}


@pytest.fixture
def operator_perm(users):
    from django.contrib.auth.models import Permission

    perm = Permission.objects.get(codename="operate_run", content_type__app_label="runs")
    users["charlie"].groups.get(name="Operators").permissions.add(perm)


@pytest.fixture
def finished_run(users):
    """A ticker run of alice's, executed to the end in this process."""
    run = services.run_launch(user=users["alice"], agent="ticker",
                              inputs={"steps": 4, "delay": 0})
    return drive(run.pk)


@pytest_asyncio.fixture
async def sockets():
    """open_socket(path, cookie=None, origin=ORIGIN) -> (communicator, connected, code)."""
    opened = []

    async def open_socket(path, cookie=None, origin=ORIGIN):
        headers = [(b"host", b"127.0.0.1")]
        if origin is not None:
            headers.append((b"origin", origin))
        if cookie:
            headers.append((b"cookie", f"sessionid={cookie}".encode()))
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        opened.append(communicator)
        return communicator, connected, code

    yield open_socket
    for communicator in opened:
        with contextlib.suppress(Exception):
            await communicator.disconnect(timeout=2)
    # The consumers' database threads keep their connections (CONN_MAX_AGE): close them,
    # or the test database cannot be dropped at the end.
    hub = live_hub._hub
    if hub is not None and hub.loop is asyncio.get_running_loop() and hub.stopping is not None:
        await asyncio.wait([hub.stopping], timeout=5)  # the hub closes its own
    await database_sync_to_async(connections.close_all)()


async def receive(communicator, timeout=3.0) -> dict:
    return json.loads(await communicator.receive_from(timeout=timeout))


async def collect_events(communicator, until_seq: int, timeout: float = 5.0) -> list[dict]:
    """Read frames until an event with seq >= until_seq arrived; return all events seen."""
    events = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not events or events[-1]["seq"] < until_seq:
        remaining = deadline - loop.time()
        assert remaining > 0, f"only got up to {events[-1]['seq'] if events else None}"
        message = await receive(communicator, remaining)
        if message["type"] == "events":
            events.extend(message["events"])
    return events


async def assert_quiet(communicator, run_id: str, announce: bool = True) -> int:
    """Nothing was due on the socket: a marker event, written now, is the very next frame,
    alone. The socket sends in order and the pump that sends the marker first sends
    whatever else it owed (a repeat, a stall), so anything stray or repeated would arrive
    before it. The marker is announced through the channel layer, or with announce=False
    left to the hub's next poll of the heads (which reads the runs' stalls too). Returns
    the marker's seq."""
    marker = await database_sync_to_async(_many_events)(run_id, 1)
    if announce:
        await get_channel_layer().group_send(
            run_group(run_id), {"type": "run.changed", "run_id": run_id, "seq": marker})
    message = await receive(communicator, timeout=10)
    assert message["type"] == "events" and seqs_of(message["events"]) == [marker], message
    return marker


async def eventually(predicate, what: str, timeout: float = 10.0) -> None:
    """Poll `predicate` on the event loop until it is true; fail after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out after {timeout} s waiting for {what}"
        await asyncio.sleep(0.01)


def seqs_of(events) -> list[int]:
    return [e["seq"] for e in events]


def db_seqs(run_id: str) -> list[int]:
    return list(RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))


# --- catch-up -------------------------------------------------------------------------------
async def test_catch_up_from_any_event_number(sockets, cookies, finished_run):
    all_seqs = await database_sync_to_async(db_seqs)(finished_run.pk)
    head = all_seqs[-1]
    assert all_seqs == list(range(1, head + 1))
    for after in sorted({0, 1, 2, head // 2, head - 1}):
        communicator, connected, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
        assert connected
        await communicator.send_json_to({"type": "hello", "after": after})
        welcome = await receive(communicator)
        assert welcome == {"type": "welcome", "run": finished_run.pk, "after": after,
                           "head": welcome["head"]}
        events = await collect_events(communicator, head)
        assert seqs_of(events) == list(range(after + 1, head + 1))
        head = await assert_quiet(communicator, finished_run.pk)  # nothing more, no repeats


async def test_at_the_head_there_is_nothing_to_send(sockets, cookies, finished_run):
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    await communicator.send_json_to({"type": "hello", "after": finished_run.event_seq})
    assert (await receive(communicator))["type"] == "welcome"
    await assert_quiet(communicator, finished_run.pk)


async def test_events_carry_kind_data_time_and_a_line_of_text(sockets, cookies, finished_run):
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    await communicator.send_json_to({"type": "hello", "after": 0})
    await receive(communicator)
    events = await collect_events(communicator, finished_run.event_seq)
    first = events[0]
    assert first["kind"] == "status" and first["data"]["status"] == "queued"
    assert set(first) == {"seq", "kind", "data", "at", "text"}
    logs = [e["text"] for e in events if e["kind"] == "log"]
    assert logs == ["tick 1", "tick 2", "tick 3", "tick 4"]
    assert events[-1]["kind"] == "status" and events[-1]["data"]["status"] == "succeeded"


def _many_events(run_id: str, count: int) -> int:
    run = Run.objects.get(pk=run_id)
    now = timezone.now()
    RunEvent.objects.bulk_create([
        RunEvent(run=run, seq=run.event_seq + i, kind="log", data={"step": 0, "message": f"m{i}"},
                 created_at=now) for i in range(1, count + 1)])
    Run.objects.filter(pk=run_id).update(event_seq=run.event_seq + count)
    return run.event_seq + count


async def test_a_long_history_arrives_in_order_in_batches(sockets, cookies, finished_run):
    head = await database_sync_to_async(_many_events)(finished_run.pk, 1300)
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    await communicator.send_json_to({"type": "hello", "after": 3})
    await receive(communicator)
    events = await collect_events(communicator, head, timeout=15)
    assert seqs_of(events) == list(range(4, head + 1))


# --- live ---------------------------------------------------------------------------------
async def test_new_events_arrive_live_in_order_and_once(sockets, cookies, users):
    run = await database_sync_to_async(services.run_launch)(
        user=users["alice"], agent="ask", inputs={"question": "Name?"})
    run = await database_sync_to_async(drive)(run.pk)
    assert run.status == "waiting"
    head = run.event_seq
    communicator, _, _ = await sockets(f"/ws/runs/{run.pk}/", cookies["alice"])
    await communicator.send_json_to({"type": "hello", "after": head})
    await receive(communicator)

    await database_sync_to_async(services.run_provide_input)(
        run_id=run.pk, value={"name": "Ada"}, user=users["alice"])
    run = await database_sync_to_async(drive)(run.pk)
    assert run.status == "succeeded"
    events = await collect_events(communicator, run.event_seq)
    assert seqs_of(events) == list(range(head + 1, run.event_seq + 1))
    kinds = [e["kind"] for e in events]
    assert "input_received" in kinds and "output" in kinds
    await assert_quiet(communicator, run.pk)  # each event once


async def test_a_missed_wake_up_is_caught_by_polling(sockets, cookies, finished_run):
    """Rows written without any notification (a lost Redis message, or no Redis)."""
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    await communicator.send_json_to({"type": "hello", "after": finished_run.event_seq})
    await receive(communicator)
    head = await database_sync_to_async(_many_events)(finished_run.pk, 3)
    # No wake-up was sent: only the hub's poll (every LIVE_POLL_SECONDS) can bring them.
    events = await collect_events(communicator, head, timeout=10)
    assert seqs_of(events) == list(range(finished_run.event_seq + 1, head + 1))


async def test_two_tabs_see_the_same_events(sockets, cookies, finished_run):
    tabs = [(await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"]))[0] for _ in range(2)]
    for tab in tabs:
        await tab.send_json_to({"type": "hello", "after": 2})
        await receive(tab)
    head = await database_sync_to_async(_many_events)(finished_run.pk, 5)
    seen = [await collect_events(tab, head) for tab in tabs]
    assert seen[0] == seen[1]
    assert seqs_of(seen[0]) == list(range(3, head + 1))


async def test_resume_moves_the_cursor_back(sockets, cookies, finished_run):
    """The client saw a gap and asks again from its last seq: it gets everything after."""
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    head = finished_run.event_seq
    await communicator.send_json_to({"type": "hello", "after": head - 1})
    await receive(communicator)
    await collect_events(communicator, head)
    await communicator.send_json_to({"type": "resume", "after": head - 3})
    assert (await receive(communicator))["after"] == head - 3
    assert seqs_of(await collect_events(communicator, head)) == [head - 2, head - 1, head]


# --- bad input --------------------------------------------------------------------------------
async def test_garbage_gets_a_clear_error_and_the_socket_stays_usable(sockets, cookies,
                                                                        finished_run):
    before = await database_sync_to_async(
        lambda: (RunEvent.objects.count(), list(Run.objects.values_list("status", "event_seq"))))()
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    cases = [
        ({"text_data": "not json {"}, "bad_json"),
        ({"text_data": "[1, 2]"}, "bad_message"),
        ({"text_data": '{"no": "type"}'}, "bad_message"),
        ({"text_data": '{"type": "launch_missiles"}'}, "unknown_type"),
        ({"text_data": '{"type": "hello", "after": -1}'}, "bad_field"),
        ({"text_data": '{"type": "hello", "after": "12"}'}, "bad_field"),
        ({"text_data": '{"type": "hello", "after": true}'}, "bad_field"),
        ({"bytes_data": b"\x00\x01"}, "bad_frame"),
        ({"text_data": json.dumps({"type": "ping", "pad": "x" * 70_000})}, "too_large"),
    ]
    for frame, code in cases:
        await communicator.send_to(**frame)
        error = await receive(communicator)
        assert error["type"] == "error" and error["code"] == code, (frame, error)
        assert error["error"]
    await communicator.send_to(text_data='{"type": "nope"}')
    unknown = await receive(communicator)
    assert "hello" in unknown["error"] and "ping" in unknown["error"]  # says what is expected

    await communicator.send_json_to({"type": "ping"})
    assert await receive(communicator) == {"type": "pong"}
    await communicator.send_json_to({"type": "hello", "after": finished_run.event_seq - 2})
    assert (await receive(communicator))["type"] == "welcome"
    assert len(await collect_events(communicator, finished_run.event_seq)) == 2
    after = await database_sync_to_async(
        lambda: (RunEvent.objects.count(), list(Run.objects.values_list("status", "event_seq"))))()
    assert after == before  # nothing changed


async def test_a_flood_of_garbage_closes_the_socket_cleanly(sockets, cookies, finished_run):
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    for _ in range(live_socket.MAX_ERRORS):
        await communicator.send_to(text_data="garbage")
        assert (await receive(communicator))["type"] == "error"
    closed = await communicator.receive_output(timeout=2)
    assert closed == {"type": "websocket.close", "code": live_socket.CLOSE_PROTOCOL}


# --- who may connect ----------------------------------------------------------------------------
async def test_an_anonymous_socket_is_refused(sockets, finished_run):
    for path in (f"/ws/runs/{finished_run.pk}/", "/ws/runs/"):
        _, connected, code = await sockets(path)
        assert not connected and code == live_socket.CLOSE_UNAUTHENTICATED


async def test_another_users_run_is_refused_like_a_missing_one(sockets, cookies, finished_run):
    _, connected, code = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["bob"])
    assert not connected and code == live_socket.CLOSE_NOT_FOUND
    _, connected, code = await sockets("/ws/runs/no-such-run/", cookies["bob"])
    assert not connected and code == live_socket.CLOSE_NOT_FOUND


async def test_a_foreign_origin_is_refused(sockets, cookies, finished_run):
    _, connected, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"],
                                    origin=b"http://evil.example")
    assert not connected


async def test_an_operator_may_follow_any_run(sockets, cookies, finished_run, operator_perm):
    communicator, connected, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["charlie"])
    assert connected
    await communicator.send_json_to({"type": "hello", "after": 0})
    await receive(communicator)
    assert len(await collect_events(communicator, finished_run.event_seq)) == finished_run.event_seq


# --- the run list --------------------------------------------------------------------------------
async def test_the_list_follows_only_the_users_own_runs(sockets, cookies, users):
    def launch(owner):
        return services.run_launch(user=users[owner], agent="ask", inputs={})

    mine = await database_sync_to_async(launch)("alice")
    theirs = await database_sync_to_async(launch)("bob")
    communicator, connected, _ = await sockets("/ws/runs/", cookies["alice"])
    assert connected
    await communicator.send_json_to({"type": "watch", "newest": mine.pk,
                                     "runs": {mine.pk: mine.event_seq, theirs.pk: 1}})
    assert await receive(communicator) == {"type": "watching", "runs": [mine.pk]}

    await database_sync_to_async(services.run_cancel)(run_id=theirs.pk, user=users["bob"])
    await database_sync_to_async(services.run_cancel)(run_id=mine.pk, user=users["alice"])
    message = await receive(communicator, timeout=3)
    assert message["type"] == "runs"
    assert [(row["id"], row["status"], row["final"]) for row in message["runs"]] == [
        (mine.pk, "cancelled", True)]

    newer = await database_sync_to_async(launch)("alice")
    message = await receive(communicator, timeout=3)
    assert message == {"type": "new_runs", "newest": newer.pk}

    def alice_then_bob():  # one commit: whichever check sees one of them sees both
        with transaction.atomic():
            return launch("alice"), launch("bob")

    newest, _ = await database_sync_to_async(alice_then_bob)()
    message = await receive(communicator, timeout=5)
    assert message == {"type": "new_runs", "newest": newest.pk}  # bob's newer one: not ours


async def test_the_list_rejects_a_malformed_watch(sockets, cookies):
    communicator, _, _ = await sockets("/ws/runs/", cookies["alice"])
    for bad in ({"type": "watch", "runs": []}, {"type": "watch", "runs": {"a": "1"}},
                {"type": "watch", "runs": {f"r{i}": 1 for i in range(101)}},
                {"type": "watch", "runs": {}, "newest": 5}, {"type": "hello", "after": 0}):
        await communicator.send_json_to(bad)
        error = await receive(communicator)
        assert error["type"] == "error", bad
    await communicator.send_json_to({"type": "watch", "runs": {}})
    assert await receive(communicator) == {"type": "watching", "runs": []}


class BrokenLayer(InMemoryChannelLayer):
    """Redis down: every call to the layer fails."""

    async def group_add(self, group, channel):
        raise ConnectionError("redis is down")

    async def receive(self, channel):
        raise ConnectionError("redis is down")


async def test_a_broken_channel_layer_leaves_the_page_on_polling(settings, sockets, cookies,
                                                                  finished_run):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.BrokenLayer"}}
    communicator, connected, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    assert connected
    await communicator.send_json_to({"type": "hello", "after": finished_run.event_seq})
    assert (await receive(communicator))["type"] == "welcome"
    head = await database_sync_to_async(_many_events)(finished_run.pk, 3)
    events = await collect_events(communicator, head, timeout=3)
    assert seqs_of(events) == list(range(finished_run.event_seq + 1, head + 1))


async def test_a_wake_up_through_the_channel_layer_needs_no_poll(settings, monkeypatch, sockets,
                                                                 cookies, finished_run):
    """With polling slowed to 30 s, the group message brings the new events, and the hub
    did not poll for them (it counts its polls of the runs' heads)."""
    settings.AGENTOPS = {**settings.AGENTOPS, "LIVE_POLL_SECONDS": 30.0}
    polls = []
    run_heads = selectors.run_heads
    monkeypatch.setattr(selectors, "run_heads", lambda ids: polls.append(ids) or run_heads(ids))
    communicator, _, _ = await sockets(f"/ws/runs/{finished_run.pk}/", cookies["alice"])
    await communicator.send_json_to({"type": "hello", "after": finished_run.event_seq})
    await receive(communicator)
    feed = live_hub.hub().feeds[finished_run.pk]
    await eventually(lambda: feed.head == finished_run.event_seq,
                     "the hub's first poll (of a new feed)")
    assert len(polls) == 1
    head = await database_sync_to_async(_many_events)(finished_run.pk, 2)
    await get_channel_layer().group_send(
        run_group(finished_run.pk), {"type": "run.changed", "run_id": finished_run.pk,
                                     "seq": head})
    events = await collect_events(communicator, head, timeout=10)
    assert seqs_of(events) == [head - 1, head]
    assert len(polls) == 1  # no poll brought them: the wake-up did
