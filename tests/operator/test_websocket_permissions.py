"""Websockets: a plain user gets no message about a run that is not theirs (operator
actions included); an operator follows any run live, audit entries included."""

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from runs import services
from runs.operator.groups import ensure_operators_group
from runs.routing import websocket_urlpatterns

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def communicator(user, path):
    comm = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path,
                                 headers=[(b"origin", b"http://127.0.0.1")])
    comm.scope["user"] = user
    return comm


async def collect(comm, until_kind=None, limit=20):
    got = []
    for _ in range(limit):
        if await comm.receive_nothing(timeout=2):
            break
        got.append(await comm.receive_json_from())
        kinds = [e["kind"] for m in got if m.get("type") == "events" for e in m["events"]]
        if until_kind in kinds:
            break
    return got


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
    messages = await collect(comm, until_kind="audit")
    events = [e for m in messages if m.get("type") == "events" for e in m["events"]]
    audit = [e for e in events if e["kind"] == "audit"]
    assert audit and audit[0]["data"]["reason"] == "look"
    await comm.disconnect()


async def test_the_run_list_socket_tells_a_plain_user_nothing_of_other_runs(users):
    run = await sync_to_async(services.run_launch)(user=users["alice"], agent="ticker",
                                                   inputs={"steps": 1})
    comm = communicator(users["bob"], "/ws/runs/")
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "watch", "runs": {run.pk: 0}, "newest": ""})
    await sync_to_async(services.run_pause)(run_id=run.pk, user=users["charlie"],
                                            reason="look")
    messages = await collect(comm, limit=3)
    assert run.pk not in str(messages)
    await comm.disconnect()
