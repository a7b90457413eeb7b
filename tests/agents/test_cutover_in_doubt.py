"""The migration's cut-over notification when the target takes the request and then drops
the connection: nobody knows whether it was acted on, so the run goes to the operators'
in-doubt queue instead of failing (a retry of a failed run would send it again).

The rows come from the in-process sandbox; the notification goes over a real socket to
a server that reads the whole request, keeps it, and closes without an answer.
"""

import json
import math
import os

import httpx
import pytest

from builtin_agents.migrate import Migrate
from builtin_agents.tools import http
from runs.durable import AgentRegistry, Outcome, WorkerConfig, control, execute_run
from runs.operator import selectors
from runs.storage import database_store
from tests.support.dropping_server import DroppingServer

pytestmark = pytest.mark.django_db(transaction=True)


class NotificationsTo(httpx.BaseTransport):
    """The sandbox for everything but POST …/notifications, which goes to `port`."""

    def __init__(self, sandbox: httpx.BaseTransport, port: int):
        self.sandbox, self.network = sandbox, httpx.HTTPTransport()
        self.port = port

    def handle_request(self, request):
        if request.method == "POST" and request.url.path.endswith("/notifications"):
            request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=self.port)
            return self.network.handle_request(request)
        return self.sandbox.handle_request(request)


@pytest.fixture
def dropping_target(inproc_sandbox):
    server = DroppingServer()
    client = http._clients[os.getpid()]
    routed = httpx.Client(transport=NotificationsTo(client._transport, server.port))
    http._clients[os.getpid()] = routed
    yield server
    http._clients[os.getpid()] = client
    routed.close()
    server.close()


def test_a_dropped_connection_after_the_cut_over_was_sent_is_in_doubt(inproc_sandbox,
                                                                      dropping_target):
    reg = AgentRegistry()
    reg.register(Migrate)
    store = database_store()
    run = control.launch(store, agent="migrate", registry=reg, inputs={
        "source_url": f"{inproc_sandbox}/dataset/rows", "target_url": f"{inproc_sandbox}/api",
        "rows": 200, "batch_size": 100})
    config = WorkerConfig(owner="w:1", slice_seconds=math.inf)
    assert execute_run(store, run.id, config, registry=reg) == Outcome.NEEDS_ATTENTION

    [sent] = dropping_target.requests  # it reached the target, once, and was not repeated
    assert json.loads(sent)["event"] == "migration.cutover"
    queued = [q for q in selectors.attention_queue() if q.pk == run.id]
    assert [q.attention["kind"] for q in queued] == ["in_doubt"]
    assert queued[0].attention["tool"].endswith("dataset.notify")
    assert "RemoteProtocolError" in queued[0].attention["error"]
    assert selectors.in_doubt_effects(queued)[run.id].status == "intent"

    # The operator saw it arrive downstream: done. The run finishes without a resend.
    control.resolve_effect(store, run.id, seq=queued[0].attention["seq"], resolution="done",
                           actor="op", result={"id": 1, "count": 1})
    assert execute_run(store, run.id, config, registry=reg) == Outcome.SUCCEEDED
    assert store.get(run.id).output["cut_over"] is True
    assert len(dropping_target.requests) == 1
