"""An agent whose one model call (metered: the quota gate reads the database before it)
waits until PARTIES runs of the worker are inside the call at once: tests/cluster/test_pool.py.
The runs meet in a directory (AGENTOPS_TEST_MEETING_DIR) shared with the test."""

import os
import time
import uuid
from pathlib import Path

from runs.durable import Agent, Done, agent, tool

PARTIES = 4
PATIENCE = 20.0  # seconds a call waits for the others before it gives up and says so


def usage(result, arguments):
    return {"model": "scripted", "prompt_tokens": 10, "completion_tokens": 5}


@tool(idempotent=True, meter=usage, name="tests.pool.think")
def think(*, idempotency_key: str) -> dict:
    meeting = Path(os.environ["AGENTOPS_TEST_MEETING_DIR"])
    (meeting / uuid.uuid4().hex).touch()
    deadline = time.monotonic() + PATIENCE
    while (inside := len(list(meeting.iterdir()))) < PARTIES and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"inside": inside}


@agent("pool-meeting")
class PoolMeeting(Agent):
    def start(self, inputs):
        return {}

    def step(self, ctx, state):
        return Done(ctx.call(think))
