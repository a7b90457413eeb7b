"""ws/operator/: only operators may join (checked on connect and on every message), and
an operator's socket is told when a run the dashboard shows changes. Every socket a test
connects is disconnected at its end (the `sockets` fixture, tests/web/conftest.py)."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group

from agentops.asgi import application
from runs import services
from runs.live.access import CLOSE_ACCESS_CHANGED
from runs.live.hub import hub
from runs.operator.groups import ensure_operators_group
from tests.operator.test_websocket_permissions import communicator
from tests.web.test_consumers import eventually
from tests.web.test_live_access import logged_in

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]
PATH = "/ws/operator/"


async def operator_socket(sockets, username: str) -> WebsocketCommunicator:
    """A socket on a real session (logged in through the login page), connected: live
    sockets follow their session's access (runs/live/access.py), and a socket without one
    is closed at the first access change of anybody's."""
    client = await sync_to_async(logged_in)(username, f"{username}-pass-1")
    headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1"),
               (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]
    comm = WebsocketCommunicator(application, PATH, headers=headers)
    connected, _ = await comm.connect()
    assert connected
    return sockets(comm)


async def launched(users):
    await sync_to_async(ensure_operators_group)()
    return await sync_to_async(services.run_launch)(user=users["alice"], agent="ticker",
                                                    inputs={"steps": 1})


async def test_a_plain_user_and_an_anonymous_one_are_refused(users, sockets):
    from django.contrib.auth.models import AnonymousUser

    await launched(users)
    for user, code in ((users["bob"], 4404), (AnonymousUser(), 4401)):
        comm = communicator(user, PATH)
        connected, closed_with = await comm.connect()
        sockets(comm)
        assert not connected and closed_with == code


async def test_an_operator_is_told_when_a_shown_run_changes(users, sockets):
    run = await launched(users)
    comm = await operator_socket(sockets, "charlie")
    await comm.send_json_to({"type": "watch", "runs": {run.pk: run.event_seq, "nope": 0},
                             "all": False})
    assert await comm.receive_json_from(timeout=5) == {"type": "watching", "runs": [run.pk]}
    # Nothing changed yet: nothing said. Once the hub has read the run (its first poll
    # wakes the socket), a ping is answered with nothing before it: a notice would be
    # sent first, its operator check queued ahead of the ping's on the database thread.
    await eventually(lambda: run.pk in hub().feeds and hub().feeds[run.pk].head > 0,
                     "the hub's first read of the run")
    await comm.send_json_to({"type": "ping"})
    assert await comm.receive_json_from(timeout=5) == {"type": "pong"}
    await sync_to_async(services.run_pause)(run_id=run.pk, user=users["charlie"],
                                            reason="look")
    message = await comm.receive_json_from(timeout=10)
    assert message == {"type": "changed", "runs": [run.pk], "all": False}


async def test_an_operator_who_loses_the_permission_is_closed(users, sockets):
    run = await launched(users)
    comm = await operator_socket(sockets, "charlie")
    await comm.send_json_to({"type": "watch", "runs": {run.pk: run.event_seq}, "all": False})
    assert (await comm.receive_json_from(timeout=5))["type"] == "watching"

    def demote():
        users["charlie"].groups.remove(*Group.objects.all())
        users["charlie"].user_permissions.clear()
    await sync_to_async(demote)()
    # The access watcher (runs/live/access.py) closes it at once; the page's reconnect is
    # then refused at connect (4404), as for any user who is not an operator.
    assert (await comm.receive_output(timeout=5)) == {"type": "websocket.close",
                                                      "code": CLOSE_ACCESS_CHANGED}


async def test_a_bad_watch_is_a_clear_error_and_the_socket_stays(users, sockets):
    await launched(users)
    comm = await operator_socket(sockets, "charlie")
    await comm.send_json_to({"type": "watch", "runs": ["x"], "all": False})
    error = await comm.receive_json_from(timeout=5)
    assert error["type"] == "error" and error["code"] == "bad_field"
    await comm.send_json_to({"type": "ping"})
    assert await comm.receive_json_from(timeout=5) == {"type": "pong"}


async def test_a_page_that_watches_all_runs_is_told_of_a_run_it_does_not_list(users, sockets):
    await launched(users)
    comm = await operator_socket(sockets, "charlie")
    await comm.send_json_to({"type": "watch", "runs": {}, "all": True})
    assert await comm.receive_json_from(timeout=5) == {"type": "watching", "runs": []}
    await launched(users)  # a new run: the dashboard's first page and the queues change
    message = await comm.receive_json_from(timeout=15)
    assert message == {"type": "changed", "runs": [], "all": True}


async def test_the_workers_page_is_told_when_a_cluster_stops_beating(users, sockets):
    from datetime import timedelta

    from django.utils import timezone

    from runs.models import WorkerHeartbeat

    await launched(users)
    processes = [{"role": "sentinel", "pid": 11, "alive": True},
                 {"role": "worker", "pid": 12, "alive": True}]
    beat = await sync_to_async(WorkerHeartbeat.objects.create)(host="h1", pid=10,
                                                               processes=processes)
    comm = await operator_socket(sockets, "charlie")
    await comm.send_json_to({"type": "watch", "runs": {}, "all": True})
    assert (await comm.receive_json_from(timeout=5))["type"] == "watching"
    await sync_to_async(WorkerHeartbeat.objects.filter(pk=beat.pk).update)(
        last_seen=timezone.now() - timedelta(minutes=5))  # no run changed: only the cluster
    assert await comm.receive_json_from(timeout=15) == {"type": "changed", "runs": [],
                                                        "all": True}
