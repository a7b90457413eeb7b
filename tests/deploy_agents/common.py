"""What every deploy of the `deployer` agent shares: its tools and its shape. A run writes
one unit of work per step to the sandbox's idempotent records API, so a test counts what
reached the target; a step first waits a little, so that runs are in flight when a
deploy lands.

A test that needs every run in flight when its deploy lands, whatever the machine's
speed, gives a `gate` (a file's path) and `hold_at` (a step): the run waits in that
step's first call until the file exists, which the test makes once the deploy is under
way."""

import os
import time

from runs.durable import Agent, Done, PermanentToolError, tool
from tests.workload_agents import pause_for, post_record

GATE_SECONDS = 120  # a test that never opens its gate fails; none waits this long

SCHEMA = {"type": "object", "properties": {
    "steps": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 12},
    "delay": {"type": "number", "minimum": 0, "maximum": 5, "default": 0.2},
    "gate": {"type": "string", "default": ""},
    "hold_at": {"type": "integer", "minimum": 0, "default": 0}}}


@tool(idempotent=True, name="tests.deploy_gate")
def wait_for_gate(path: str, *, idempotency_key: str) -> bool:
    """Returns once `path` exists."""
    deadline = time.monotonic() + GATE_SECONDS
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise PermanentToolError(f"the gate {path} was not opened in {GATE_SECONDS} s")
        time.sleep(0.05)  # polls a condition: the file
    return True


class DeployerBase(Agent):
    checkpoint_every = 5
    input_schema = SCHEMA

    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"], "delay": inputs["delay"],
                "gate": inputs["gate"], "hold_at": inputs["hold_at"]}

    def step(self, ctx, state):
        i = state["i"]
        if state.get("gate") and i == state["hold_at"]:
            ctx.call(wait_for_gate, state["gate"])
        ctx.call(pause_for, state["delay"])
        self.before_write(ctx, i)
        ctx.call(post_record, f"{ctx.run_id}-{i}", i)
        state["i"] = i + 1
        ctx.progress(state["i"], state["n"])
        return Done({"units": state["i"]}) if state["i"] == state["n"] else state

    def before_write(self, ctx, i):
        pass
