"""Agents and tools of the child runs' contract tests (registered into REG)."""

from __future__ import annotations

from typing import ClassVar

from runs.durable import Agent, ChildFailedError, Done, agent, tool

from .agents_for_tests import REG, WORLD


@tool(idempotent=True, name="tests.child_work")
def child_work(value: int, *, idempotency_key: str) -> dict:
    """Idempotent: the target does the work once per key, and counts every request."""
    WORLD.record("child_work", value)
    return WORLD.target.post({"value": value}, idempotency_key)


@agent("child_square", registry=REG)
class ChildSquare(Agent):
    """One step: the work, then its value squared."""

    input_schema: ClassVar[dict] = {"type": "object", "properties": {
        "value": {"type": "integer"}, "fail": {"type": "boolean", "default": False}}}

    def start(self, inputs):
        return dict(inputs)

    def step(self, ctx, state):
        ctx.call(child_work, state["value"])
        if state["fail"]:
            raise RuntimeError(f"child {state['value']} fails")
        return Done({"square": state["value"] ** 2})


@agent("child_asks", registry=REG)
class ChildAsks(Agent):
    """Waits for a person's answer: a child that stays unfinished until cancelled."""

    def start(self, inputs):
        return {}

    def step(self, ctx, state):
        return Done({"answer": ctx.wait_for_input("go on?")})


@agent("child_blocks", registry=REG)
def child_blocks(ctx, inputs):
    """Blocks in a tool until the test releases it, then goes on to a second call."""
    from .agents_for_tests import slow_echo
    ctx.call(slow_echo, "first")
    ctx.call(slow_echo, "second")
    return {"done": True}


@agent("fan_out", registry=REG)
class FanOut(Agent):
    """Step 1 spawns `count` children of `child` (at most `cap` running), step 2 waits for
    them all: the output is their results in spawn order."""

    input_schema: ClassVar[dict] = {"type": "object", "properties": {
        "count": {"type": "integer", "default": 3}, "cap": {"type": "integer", "default": 5},
        "child": {"type": "string", "default": "child_square"},
        "fail": {"type": "array", "default": []},
        "return_exceptions": {"type": "boolean", "default": False}}}

    def start(self, inputs):
        return {**inputs, "children": []}

    def step(self, ctx, state):
        if not state["children"]:
            for i in range(state["count"]):
                inputs = {} if state["child"] != "child_square" else \
                    {"value": i, "fail": i in state["fail"]}
                child = ctx.spawn(state["child"], inputs, max_children=state["cap"])
                state["children"].append(child.as_state())
            return state
        try:
            results = ctx.wait_all(state["children"],
                                   return_exceptions=state["return_exceptions"])
        except ChildFailedError as exc:
            return Done({"failed": exc.run_id, "status": exc.status})
        return Done({"results": [f"{type(x).__name__}: {x.status}"
                                 if isinstance(x, ChildFailedError) else x for x in results]})
