"""The agents the comparison runs, on agentops' public API only.

Loaded in the bench process by import and in the worker processes through
AGENTOPS_AGENT_MODULES=bench.compare.agents. Each mirrors the peer's program
in bench/compare/dbos_peer.py or langgraph_peer.py.
"""

from __future__ import annotations

import threading
import time

from bench.compare.workload import chunk, message
from runs.durable import Agent, Done, agent, tool

# Scenario 5 stops a resumed run right after its first new effect: the tool sets
# this event, which the bench passes to execute_run as its stop_event.
FIRST_NEW_EFFECT = {"at": None, "stop": threading.Event()}

@tool(idempotent=True)
def noop(i: int, *, idempotency_key: str) -> int:
    return i


@tool(idempotent=True)
def llm_call(i: int, seconds: float, *, idempotency_key: str) -> int:
    time.sleep(seconds)  # an I/O-bound call: an LLM round trip
    return i


@tool(idempotent=True)
def marked_noop(i: int, *, idempotency_key: str) -> int:
    if FIRST_NEW_EFFECT["at"] is None:
        FIRST_NEW_EFFECT["at"] = time.perf_counter()
        FIRST_NEW_EFFECT["stop"].set()
    return i


@agent("bench-effects", version="1")
class Effects(Agent):
    """Scenarios 1 and 2: one step of `n` no-op effects (DBOS: a workflow of n steps)."""

    def start(self, inputs):
        return {"n": inputs["n"]}

    def step(self, ctx, state):
        for i in range(state["n"]):
            ctx.call(noop, i)
        return Done({"n": state["n"]})


@agent("bench-steps", version="1")
class Steps(Agent):
    """Scenario 1b: `n` steps of one no-op effect each, a checkpoint after every step."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["n"]}

    def step(self, ctx, state):
        ctx.call(noop, state["i"])
        state["i"] += 1
        return Done({"n": state["n"]}) if state["i"] >= state["n"] else state


@agent("bench-resume", version="1")
class Resume(Agent):
    """Scenario 5: one effect a step; its history is written directly by the bench."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["n"]}

    def step(self, ctx, state):
        ctx.call(marked_noop, state["i"])
        state["i"] += 1
        return Done({"n": state["n"]}) if state["i"] >= state["n"] else state


@agent("bench-chat", version="1")
class Chat(Agent):
    """Scenario 3: a chat history growing by one ~500-byte message a step."""

    def start(self, inputs):
        return {"n": inputs["n"], "messages": []}

    def step(self, ctx, state):
        state["messages"].append(message(len(state["messages"])))
        return Done({"messages": len(state["messages"])}) \
            if len(state["messages"]) >= state["n"] else state


@agent("bench-bigstate", version="1")
class BigState(Agent):
    """Scenario 4: a 1 MB state (1,024 chunks of 1 KB) of which one chunk changes a step."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["n"], "chunks": [chunk(k) for k in range(inputs["chunks"])]}

    def step(self, ctx, state):
        i = state["i"]
        state["chunks"][i % len(state["chunks"])] = chunk(10_000_000 + i)
        state["i"] = i + 1
        return Done({"n": state["n"]}) if state["i"] >= state["n"] else state


@agent("bench-llm", version="1")
class Llm(Agent):
    """Scenario 6: `n` steps, each an I/O-bound tool call that sleeps `seconds`."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["n"], "seconds": inputs["seconds"]}

    def step(self, ctx, state):
        ctx.call(llm_call, state["i"], state["seconds"])
        state["i"] += 1
        return Done({"n": state["n"]}) if state["i"] >= state["n"] else state
