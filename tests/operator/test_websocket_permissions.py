"""Websockets: a plain user gets no message about a run that is not theirs (operator
actions included); an operator follows any run live, audit entries included."""

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from runs import services
from runs.live.routing import websocket_urlpatterns
from runs.operator.groups import ensure_operators_group

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def communicator(user, path):
    comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path,
                                 headers=[(b"origin", b"http://127.0.0.1")])
    comm.scope["user"] = user
    return comm


async def collect(comm, until, timeout: float = 10.0) -> list[dict]:
    """Every message up to the first for which `until(message)` is true."""
    got = []
    while not got or not until(got[-1]):
        got.append(await comm.receive_json_from(timeout=timeout))
    return got


def has_event(kind):
    return lambda message: any(e["kind"] == kind for e in message.get("events", []))


async def test_a_plain_user_cannot_follow_someone_elses_run(users):
    run = await sync_to_async(services.run_launch)(user=users["alice"], agent="ticker",
                                                   inputs={"steps": 1})
    comm = communicator(users["bob"], f"/ws/runs/{run.pk}/")
    connected, code = await comm.connect()
    assert not connected and code == 4404
    await comm.disconnect()


async def test_an_operator_follows_any_run_with_its_audit_entries(users):
    await sync_to_async(ensure_operators_group)()
    run = await sync_to_async(services.run_launch)(user=users["alice"], agent="ticker",
                                                   inputs={"steps": 1})
    comm = communicator(users["charlie"], f"/ws/runs/{run.pk}/")
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "hello", "after": 0})
    await sync_to_async(services.run_pause)(run_id=run.pk, user=users["charlie"],
                                            reason="look")
    messages = await collect(comm, has_event("audit"))
    events = [e for m in messages if m.get("type") == "events" for e in m["events"]]
    audit = [e for e in events if e["kind"] == "audit"]
    assert audit and audit[0]["data"]["reason"] == "look"
    await comm.disconnect()


async def test_the_run_list_socket_tells_a_plain_user_nothing_of_other_runs(users):
    run = await sync_to_async(services.run_launch)(user=users["alice"], agent="ticker",
                                                   inputs={"steps": 1})
    bobs = await sync_to_async(services.run_launch)(user=users["bob"], agent="ticker",
                                                    inputs={"steps": 1})
    comm = communicator(users["bob"], "/ws/runs/")
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "watch", "runs": {run.pk: 0, bobs.pk: bobs.event_seq},
                             "newest": bobs.pk})
    await sync_to_async(services.run_pause)(run_id=run.pk, user=users["charlie"],
                                            reason="look")
    # bob's own run changes after alice's: what would tell of hers comes before its row
    await sync_to_async(services.run_cancel)(run_id=bobs.pk, user=users["bob"])
    messages = await collect(comm, lambda m: m.get("type") == "runs"
                             and bobs.pk in [row["id"] for row in m["runs"]])
    assert messages[0] == {"type": "watching", "runs": [bobs.pk]}
    assert run.pk not in str(messages)
    await comm.disconnect()
