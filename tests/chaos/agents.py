"""Agents only the chaos suite launches (loaded with AGENTOPS_AGENT_MODULES).

With the workload agents (steps, ticker, ask) and the built-in ones they cover
what a fault can land on: idempotent writes, non-idempotent notifications,
recorded now()/random(), durable sleeps that free the worker, and waits for a
user's input. Their outputs depend on their inputs only, so a run that went
through a storm must end with the output of the same run without faults.
"""

from runs.durable import Agent, Done, agent
from tests.workload_agents import post_record, send_notification


@agent("ledger", version="1", input_schema={
    "type": "object",
    "properties": {
        "entries": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 9},
        "notify_every": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 3},
    },
})
class Ledger(Agent):
    """Writes an entry per step (idempotent); every few steps a notification (not idempotent).

    Each step also records now() and random(): a replay must see the same values, so the
    step's decisions (here: nothing but the log line) stay deterministic."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["entries"], "every": inputs["notify_every"], "notes": 0}

    def step(self, ctx, state):
        i = state["i"]
        stamp, draw = ctx.now(), ctx.random()
        ctx.call(post_record, f"{ctx.run_id}-entry-{i}", i)
        if i % state["every"] == state["every"] - 1:
            ctx.call(send_notification, f"{ctx.run_id}-note-{i}")
            state["notes"] += 1
        ctx.log(f"entry {i} at {stamp:.3f} (draw {draw:.3f})")
        ctx.progress(i + 1, state["n"])
        state["i"] = i + 1
        if state["i"] < state["n"]:
            return state
        return Done({"entries": state["n"], "notes": state["notes"]})


@agent("napper", version="1", input_schema={
    "type": "object",
    "properties": {
        "naps": {"type": "integer", "minimum": 1, "maximum": 100, "default": 3},
        "seconds": {"type": "number", "minimum": 0, "maximum": 60, "default": 1.5},
    },
})
class Napper(Agent):
    """Writes a record, then sleeps on a durable timer (the worker is freed), per step."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["naps"], "seconds": inputs["seconds"], "slept": 0.0}

    def step(self, ctx, state):
        i = state["i"]
        ctx.call(post_record, f"{ctx.run_id}-nap-{i}", i)
        ctx.sleep(state["seconds"])
        state["slept"] += state["seconds"]
        state["i"] = i + 1
        ctx.progress(state["i"], state["n"])
        if state["i"] < state["n"]:
            return state
        return Done({"naps": state["n"], "slept": state["slept"]})
