"""Agents for the operator tests (loaded by workers with
AGENTOPS_AGENT_MODULES="tests.workload_agents,tests.operator.agents").

"ledger" does, per step, one idempotent call (a ledger entry, deduplicated by its key
like a real idempotent API) and one non-idempotent call (a charge), each taking
`delay` seconds, so a run is always near an effect boundary and a fault point after
the charge leaves it in doubt.
"""

import threading
import time
from collections import Counter

from runs.durable import Agent, Done, agent, tool

CALLS = Counter()          # in-process tests: calls that reached "the outside world"
LEDGER: dict[str, dict] = {}
_lock = threading.Lock()


def reset():
    with _lock:
        CALLS.clear()
        FLAKY["fail"] = True
        LEDGER.clear()


@tool(idempotent=True)
def write_entry(unit: str, amount: int, delay: float, *, idempotency_key: str) -> dict:
    time.sleep(delay)
    with _lock:
        CALLS["write_entry"] += 1
        entry = LEDGER.setdefault(idempotency_key, {"unit": unit, "amount": amount})
    return {"entry": idempotency_key, **entry}


@tool
def charge(unit: str, amount: int, delay: float) -> dict:
    time.sleep(delay)
    with _lock:
        CALLS["charge"] += 1
    return {"charged": amount, "unit": unit}


@agent("ledger", version="1", input_schema={
    "type": "object",
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 5},
        "delay": {"type": "number", "minimum": 0, "maximum": 10, "default": 0.1},
        "charge": {"type": "boolean", "default": True},
    },
})
class Ledger(Agent):
    """Writes a ledger entry (idempotent) and charges (not idempotent) per step."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"], "delay": inputs["delay"],
                "charge": inputs["charge"], "total": 0}

    def step(self, ctx, state):
        i = state["i"]
        ctx.call(write_entry, f"unit-{i}", i, state["delay"])
        if state["charge"]:
            ctx.call(charge, f"unit-{i}", i, state["delay"])
        state["total"] += i
        state["i"] = i + 1
        ctx.log(f"entry {i}")
        ctx.progress(state["i"], state["n"])
        if state["i"] >= state["n"]:
            return Done({"entries": state["n"], "total": state["total"]})
        return state


FLAKY = {"fail": True}


@agent("flaky", version="1")
class Flaky(Agent):
    """Fails in its second step while FLAKY["fail"] is set (in-process tests)."""

    def start(self, inputs):
        return {"i": 0}

    def step(self, ctx, state):
        ctx.call(write_entry, f"flaky-{state['i']}", state["i"], 0)
        if state["i"] == 1 and FLAKY["fail"]:
            raise RuntimeError("the downstream API said no")
        state["i"] += 1
        return Done({"steps": state["i"]}) if state["i"] >= 3 else state


@agent("charger", version="1", input_schema={
    "type": "object",
    "properties": {"steps": {"type": "integer", "minimum": 1, "default": 5},
                   "delay": {"type": "number", "minimum": 0, "default": 0.05}},
})
class Charger(Agent):
    """Only non-idempotent calls: a fault after one of them leaves it in doubt."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"], "delay": inputs["delay"]}

    def step(self, ctx, state):
        ctx.call(charge, f"unit-{state['i']}", state["i"], state["delay"])
        state["i"] += 1
        ctx.progress(state["i"], state["n"])
        return Done({"charged": state["i"]}) if state["i"] >= state["n"] else state
