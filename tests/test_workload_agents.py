"""The test agents' own calls keep the engine's rule for a non-idempotent call (the tool
says what happened): a target that took the notification and dropped the connection
leaves the call in doubt, for an operator, never a failed run. tests/chaos found the
opposite when its sandbox_outage stopped the sandbox in the middle of a notification."""

import json
import math

import pytest

from runs.durable import (
    Agent,
    AgentRegistry,
    Done,
    Outcome,
    WorkerConfig,
    agent,
    control,
    execute_run,
)
from runs.operator import selectors
from runs.storage import database_store
from tests.support.dropping_server import DroppingServer
from tests.workload_agents import send_notification

pytestmark = pytest.mark.django_db(transaction=True)
REGISTRY = AgentRegistry()


@agent("notify-once", version="1", registry=REGISTRY)
class NotifyOnce(Agent):
    def start(self, inputs):
        return {}

    def step(self, ctx, state):
        return Done(ctx.call(send_notification, "unit-1"))


def test_a_notification_dropped_after_it_was_sent_is_in_doubt(monkeypatch):
    target = DroppingServer()
    try:
        monkeypatch.setenv("AGENTOPS_SANDBOX_URL", f"http://127.0.0.1:{target.port}")
        store = database_store()
        run = control.launch(store, agent="notify-once", registry=REGISTRY, inputs={})
        config = WorkerConfig(owner="w:1", slice_seconds=math.inf)
        assert execute_run(store, run.id, config, registry=REGISTRY) == Outcome.NEEDS_ATTENTION
        [sent] = target.requests  # it reached the target, once, and was not repeated
    finally:
        target.close()
    assert json.loads(sent) == {"unit": "unit-1"}
    [queued] = [q for q in selectors.attention_queue() if q.pk == run.id]
    assert queued.attention["kind"] == "in_doubt"
    assert "RemoteProtocolError" in queued.attention["error"]
