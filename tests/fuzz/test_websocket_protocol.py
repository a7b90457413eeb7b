"""Bad input to the live run socket (ws/runs/<id>/), through the real ASGI stack.

Fuzzed messages (random JSON, wrong types, text that is not JSON, binary frames,
oversized frames) each get a clear error and the socket stays usable: a proper hello
afterwards still gets every event exactly once, in order. Nothing in the database
changes. Unknown runs, another user's runs and anonymous sockets are refused with
their close codes.
"""

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentops.asgi import application
from runs import services
from runs.live import consumers
from runs.live import socket as live_socket
from tests.fuzz.conftest import snapshot

pytestmark = pytest.mark.django_db(transaction=True)

FUZZ = settings(max_examples=15, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)
messages = st.one_of(
    st.builds(lambda t, a: {"type": t, "after": a},
              st.sampled_from(["hello", "resume", "ping", "HELLO", "", "watch", "events"]),
              st.one_of(json_values, st.integers(min_value=-5, max_value=10**20))),
    st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    json_values,
).map(json.dumps) | st.text(max_size=60) | st.binary(min_size=1, max_size=40)


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.fixture
def finished_run(users):
    from tests.web.conftest import drive
    run = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 3,
                                                                            "delay": 0})
    return drive(run.pk)


async def _open(path: str, cookie: str | None):
    headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=5)
    return communicator, connected, code


async def _garbage_then_hello(path: str, cookie: str, sent: list, head: int) -> list[str]:
    problems = []
    communicator, connected, _ = await _open(path, cookie)
    assert connected
    async def reply():
        """The next frame that is no events frame: a valid hello among the garbage also
        gets events, which may come before or after any reply."""
        while (frame := json.loads(await communicator.receive_from(timeout=5)))["type"] == \
                "events":
            pass
        return frame

    try:
        for message in sent:
            kind = "bytes" if isinstance(message, bytes) else "text"
            await communicator.send_input({"type": "websocket.receive", kind: message})
            # A ping after it: its pong and the message's one reply are the next two
            # (a hello's welcome is sent by the pump, so it may come after the pong).
            await communicator.send_json_to({"type": "ping"})
            replies = [await reply(), await reply()]
            if {"type": "pong"} not in replies:
                problems.append(f"no pong after {message!r}: {replies}")
            for answer in replies:
                if answer["type"] == "error":
                    if not (answer.get("code") and answer.get("error")):
                        problems.append(f"an error without code or text: {answer}")
                elif answer["type"] not in ("pong", "welcome"):
                    problems.append(f"unexpected reply {answer} to {message!r}")
        await communicator.send_json_to({"type": "hello", "after": 0})
        welcome = await reply()
        seqs = []
        while len(seqs) < head:
            batch = await communicator.receive_json_from(timeout=5)
            seqs += [e["seq"] for e in batch.get("events", [])]
        if welcome["type"] != "welcome" or seqs != list(range(1, head + 1)):
            problems.append(f"after the garbage a hello got {welcome} and events {seqs}")
    finally:
        await communicator.disconnect(timeout=2)
    return problems


@FUZZ
@given(sent=st.lists(messages, min_size=1, max_size=6))
def test_garbage_gets_clear_errors_and_the_socket_keeps_serving(users, finished_run, sent):
    before = snapshot()
    problems = async_to_sync(_garbage_then_hello)(
        f"/ws/runs/{finished_run.id}/", session_cookie(users["alice"]), sent,
        finished_run.event_seq)
    connections.close_all()
    assert not problems
    assert snapshot() == before


def test_an_oversized_frame_is_refused_and_the_socket_stays(users, finished_run):
    big = json.dumps({"type": "hello", "after": 0, "pad": "x" * live_socket.MAX_FRAME})
    problems = async_to_sync(_garbage_then_hello)(
        f"/ws/runs/{finished_run.id}/", session_cookie(users["alice"]), [big],
        finished_run.event_seq)
    connections.close_all()
    assert not problems


def test_too_many_errors_close_the_socket_with_a_protocol_code(users, finished_run):
    cookie = session_cookie(users["alice"])

    async def scenario():
        communicator, connected, _ = await _open(f"/ws/runs/{finished_run.id}/", cookie)
        assert connected
        for _ in range(live_socket.MAX_ERRORS):
            await communicator.send_to(text_data="not json")
            await communicator.receive_from(timeout=5)
        closed = await communicator.receive_output(timeout=5)
        await communicator.disconnect(timeout=2)
        return closed

    closed = async_to_sync(scenario)()
    connections.close_all()
    assert closed == {"type": "websocket.close", "code": live_socket.CLOSE_PROTOCOL}


@FUZZ
@given(run_id=st.text(alphabet="abcdef0123456789-_xyz", min_size=1, max_size=40))
def test_unknown_runs_are_refused(users, run_id):
    cookie = session_cookie(users["alice"])

    async def scenario():
        _, connected, code = await _open(f"/ws/runs/{run_id}/", cookie)
        return connected, code

    connected, code = async_to_sync(scenario)()
    connections.close_all()
    assert not connected and code == live_socket.CLOSE_NOT_FOUND


def test_another_users_run_and_anonymous_sockets_are_refused(users, finished_run):
    cookie = session_cookie(users["bob"])

    async def scenario():
        path = f"/ws/runs/{finished_run.id}/"
        return (await _open(path, cookie))[1:], (await _open(path, None))[1:]

    bob, anonymous = async_to_sync(scenario)()
    connections.close_all()
    assert bob == (False, live_socket.CLOSE_NOT_FOUND)
    assert anonymous == (False, live_socket.CLOSE_UNAUTHENTICATED)


def _hostile_messages(consumer_class) -> list[str]:
    """For every message type the consumer handles, every field any handler reads,
    each of the hostile classes (as JSON text, so nothing is escaped on the way)."""
    from tests.fuzz.test_every_endpoint import JSON_HOSTILE

    types = sorted(consumer_class().handlers())
    sent = ['{"type": "\\u0000"}', '{"type": "\\ud800"}']
    for kind in types:
        for name in ("after", "runs", "newest", "type"):
            sent += [f'{{"type": "{kind}", "{name}": {value}}}' for value in JSON_HOSTILE.values()]
        sent.append(f'{{"type": "{kind}", "runs": {{"x\\u0000": 1}}, "newest": "a\\u0000"}}')
        if kind in ("hello", "resume"):  # beyond PostgreSQL's bigint
            sent.append(f'{{"type": "{kind}", "after": {2**63}}}')
    return [text for text in sent if "watch" not in text or "watch" in types]


@pytest.mark.parametrize("route", consumers_routes := [
    (pattern.pattern.describe(), pattern.callback.consumer_class)
    for pattern in __import__("runs.live.routing", fromlist=["x"]).websocket_urlpatterns])
def test_every_message_type_refuses_hostile_input_and_keeps_serving(users, finished_run,
                                                                     route):
    """Depth, NUL, lone surrogates, non-finite numbers: each an error message (before:
    a RecursionError or a DataError closed the socket with 1011), then a ping still
    gets its pong."""
    _, consumer_class = route
    path = (f"/ws/runs/{finished_run.id}/" if consumer_class is consumers.RunConsumer
            else "/ws/runs/")
    cookie = session_cookie(users["alice"])
    before = snapshot()

    async def scenario():
        problems = []
        sent = _hostile_messages(consumer_class)
        chunk = live_socket.MAX_ERRORS - 1  # below the count that closes the socket
        for start in range(0, len(sent), chunk):
            communicator, connected, _ = await _open(path, cookie)
            assert connected
            try:
                for text in sent[start:start + chunk]:
                    await communicator.send_to(text_data=text)
                    reply = json.loads(await communicator.receive_from(timeout=5))
                    if reply.get("type") != "error" or not reply.get("error"):
                        problems.append((text[:60], reply))
                    await communicator.send_json_to({"type": "ping"})
                    if await communicator.receive_json_from(timeout=5) != {"type": "pong"}:
                        problems.append((text[:60], "no pong after it"))
            finally:
                await communicator.disconnect(timeout=2)
        return problems

    problems = async_to_sync(scenario)()
    connections.close_all()
    assert not problems
    assert snapshot() == before
