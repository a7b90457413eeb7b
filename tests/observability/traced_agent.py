"""An agent for the trace tests: an idempotent HTTP call per step through the built-in
tools' client (which sends the effect's traceparent downstream), and in its last step
a call that holds the run until the test lets it go, so the test can SIGKILL the
worker at a moment it chose."""

import os
import time

from builtin_agents.tools.http import request
from runs.durable import Agent, Done, agent, tool


@tool(idempotent=True)
def post_downstream(url: str, unit: str, *, idempotency_key: str) -> dict:
    return request("POST", url, json={"unit": unit}, idempotency_key=idempotency_key).json()


@tool(idempotent=True)
def hold_until(path: str, *, idempotency_key: str) -> bool:
    # The test lets go once the earlier steps' spans arrived (30 s allowed) and, after its
    # kill, another worker took over (60 s): past both; it ends a call a failed test left.
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)
    return True


@agent("traced", version="1", input_schema={
    "type": "object",
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": 20, "default": 3},
        "target": {"type": "string", "default": ""},
        "release": {"type": "string", "default": ""},
    },
})
class Traced(Agent):
    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"], "target": inputs["target"],
                "release": inputs["release"]}

    def step(self, ctx, state):
        i = state["i"]
        ctx.call(post_downstream, state["target"], f"{ctx.run_id}-{i}")
        state["i"] = i + 1
        if state["i"] < state["n"]:
            return state
        ctx.call(hold_until, state["release"])
        return Done({"units": state["n"]})
