"""Agents of the versions contract (tests/durable/contract_versions.py): one writer in
four codes, as four deploys would have it.

  REG     writer v1: a unit per step, posted to the idempotent target and noted on a
          non-idempotent log (`tests.note`), a checkpoint every 3 steps
  REG_V2  writer v2: the same calls in the same order (a compatible change, bumped)
  REG_V3  writer v3: an audit call before each post (an incompatible change)
  REG_PATCHED  writer v4: the audit call behind ctx.patched("audit"), so that it takes
          v1's histories over; REG_DEPRECATED: v5, the patch deprecated
  REG_COUNTED  writer v6: v1's calls with more state (a count of its steps), so that a
          move writes the new code's state as a checkpoint of its own

Each lives in this module, so their fingerprints differ by the declared version; the
writer of `agents_versions_tweak.py` is v1's version with another module's code.
"""

from __future__ import annotations

from runs.durable import Agent, AgentRegistry, Done, agent, tool

from .agents_for_tests import REG, WORLD

REG_V2 = AgentRegistry()
REG_V3 = AgentRegistry()
REG_PATCHED = AgentRegistry()
REG_DEPRECATED = AgentRegistry()
REG_REPLAY = AgentRegistry()
REG_COUNTED = AgentRegistry()


@tool(idempotent=True, name="tests.post_unit")
def post_unit(unit: int, *, idempotency_key: str) -> dict:
    WORLD.record("post_unit", unit)
    return WORLD.target.post({"unit": unit}, idempotency_key)


@tool(name="tests.note")
def note(unit: int) -> str:
    WORLD.record("note", unit)
    return f"noted {unit}"


@tool(idempotent=True, name="tests.audit_unit")
def audit_unit(unit: int, *, idempotency_key: str) -> dict:
    WORLD.record("audit_unit", unit)
    return {"audited": unit}


class Writer(Agent):
    """Writes units 1..n: posts each, then notes it."""

    version = "1"
    checkpoint_every = 3
    input_schema = {"type": "object", "properties": {"n": {"type": "integer", "default": 5}}}

    def start(self, inputs):
        return {"i": 0, "n": inputs["n"], "posted": []}

    def step(self, ctx, state):
        state["i"] += 1
        unit = state["i"]
        self.before_post(ctx, unit)
        state["posted"].append(ctx.call(post_unit, unit)["id"])
        WORLD.crash_here("after_post", ctx.step_no)
        stall_here(unit)
        if WORLD.flags.get("stop_after_post") == unit:
            WORLD.stop_event.set()  # a deploy's SIGTERM lands in this step
        ctx.call(note, unit)
        return Done({"posted": state["posted"]}) if unit == state["n"] else state

    def before_post(self, ctx, unit):
        pass


agent("writer", registry=REG)(Writer)


def stall_here(unit: int) -> None:
    """A worker alive but starved in step `unit`, once, if the test planned it: it goes
    on when the test says so (WORLD.flags["stall_after_post"]: unit and two Events)."""
    stall = WORLD.flags.get("stall_after_post")
    if stall is not None and stall["unit"] == unit:
        del WORLD.flags["stall_after_post"]
        stall["stalled"].set()
        if not stall["go"].wait(10):
            raise TimeoutError("the test never let the starved worker go on")


@agent("writer", version="2", registry=REG_V2)
class WriterV2(Writer):
    """Compatible: the same calls; only what it logs changed."""

    def before_post(self, ctx, unit):
        ctx.log(f"unit {unit}")


@agent("writer", version="3", registry=REG_V3)
class WriterV3(Writer):
    """Incompatible: audits each unit before posting it."""

    def before_post(self, ctx, unit):
        ctx.call(audit_unit, unit)


@agent("writer", version="4", registry=REG_PATCHED)
class WriterPatched(Writer):
    """v3's audit behind a patch marker: old histories replay, new steps audit."""

    def before_post(self, ctx, unit):
        if ctx.patched("audit"):
            ctx.call(audit_unit, unit)


@agent("writer", version="5", registry=REG_DEPRECATED)
class WriterDeprecated(Writer):
    """The patch made permanent: histories with its marker still replay."""

    def before_post(self, ctx, unit):
        ctx.deprecate_patch("audit")
        ctx.call(audit_unit, unit)


@agent("writer", version="2", registry=REG_REPLAY)
class WriterEager(Writer):
    """v1's calls, bumped, taking runs of older versions over at once."""

    upgrade = "replay"


@agent("writer", version="6", registry=REG_COUNTED)
class WriterCounted(Writer):
    """Compatible, with more state: it counts the steps it ran, and its output says so."""

    def step(self, ctx, state):
        state["counted"] = state.get("counted", 0) + 1
        result = super().step(ctx, state)
        if isinstance(result, Done):
            return Done({**result.output, "counted": state["counted"]})
        return result
