"""The agent the fleet tests launch (loaded by each host's tree with AGENTOPS_AGENT_MODULES).

Each step waits inside a tool call that first leaves a mark (a file named after the
unit and the host: the hosts share the file system), so that a test can act while a
given host is inside a given call; then it writes the unit to the sandbox's idempotent
records API, so that the test counts what reached the target. At the end a
notification, which is not idempotent: sent twice, it shows twice. The call of unit
`hold` (an input) waits, besides, until the test releases it (a file release-<unit>):
a test holds a host inside a call for as long as it needs, without timing it. With
`sleep`, each step ends on a durable timer of that many seconds.
"""

import socket
import time
from pathlib import Path

from runs.durable import Agent, Done, agent, tool
from tests.workload_agents import post_record, send_notification

HOLD_LIMIT = 120.0  # a test that never releases a held call fails; the call ends anyway


@tool(idempotent=True)
def pause_and_mark(marks: str, unit: str, seconds: float, hold: bool = False, *,
                   idempotency_key: str) -> str:
    Path(marks, f"{unit}@{socket.gethostname()}").touch()
    time.sleep(seconds)
    deadline = time.monotonic() + HOLD_LIMIT
    while hold and not Path(marks, f"release-{unit}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return socket.gethostname()


@agent("fleet_steps", version="1", input_schema={
    "type": "object",
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 8},
        "delay": {"type": "number", "minimum": 0, "maximum": 10, "default": 0.2},
        "marks": {"type": "string"},
        "hold": {"type": "integer", "minimum": -1, "default": -1},
        "sleep": {"type": "number", "minimum": 0, "maximum": 60, "default": 0},
    },
    "required": ["marks"],
})
class FleetSteps(Agent):
    """Per step: a marked pause, then a unit written downstream; a notification at the end."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"], "delay": inputs["delay"], "marks": inputs["marks"],
                "hold": inputs["hold"], "sleep": inputs["sleep"]}

    def step(self, ctx, state):
        i, unit = state["i"], f"{ctx.run_id}-{state['i']}"
        ctx.call(pause_and_mark, state["marks"], unit, state["delay"], i == state["hold"])
        ctx.call(post_record, unit, i)
        ctx.log(f"wrote unit {i}")
        if state["sleep"] and i + 1 < state["n"]:  # past a second: the worker is given up
            ctx.sleep(state["sleep"])
        state["i"] = i + 1
        ctx.progress(state["i"], state["n"])
        if state["i"] < state["n"]:
            return state
        ctx.call(send_notification, f"{ctx.run_id}-done")
        return Done({"units": state["n"]})


@tool(idempotent=True)
def nothing(*, idempotency_key: str) -> None:
    return None


@agent("fleet_noop", version="1", input_schema={
    "type": "object",
    "properties": {"calls": {"type": "integer", "minimum": 1, "maximum": 100000,
                             "default": 50}},
})
class FleetNoop(Agent):
    """`calls` effects that do nothing, ten a step: a fleet's commit rate (bench/fleet.py)."""

    def start(self, inputs):
        return {"left": inputs["calls"]}

    def step(self, ctx, state):
        for _ in range(min(10, state["left"])):
            ctx.call(nothing)
        state["left"] -= min(10, state["left"])
        return Done({"calls": "all"}) if state["left"] == 0 else state
