"""Agents and tools of the gate contract (tests/durable/gate_contract.py), in a registry
of their own. They act on `WORLD` (tests/durable/agents_for_tests.py)."""

from __future__ import annotations

from runs.durable import Agent, AgentRegistry, ApprovalDeniedError, Done, agent, tool
from runs.durable.policies.approvals import ApprovalRule

from .agents_for_tests import WORLD

GATE_REG = AgentRegistry()
PROMPT, COMPLETION = 100, 50


def price(model: str, prompt: int, completion: int) -> float:
    """$0.51 a call of the test model: two calls make $1.02."""
    return (prompt * 3000 + completion * 4200) / 1_000_000 if model == "test-model" else 0.0


def usage_of(result, arguments) -> dict:
    return {"model": arguments["model"], "prompt_tokens": result["prompt_tokens"],
            "completion_tokens": result["completion_tokens"]}


@tool(idempotent=True, meter=usage_of, name="model")
def model(model: str, prompt: str, *, idempotency_key: str) -> dict:
    WORLD.record("model", prompt)
    return {"text": f"answer to {prompt}", "prompt_tokens": PROMPT, "completion_tokens": COMPLETION}


@tool(name="send")
def send(amount: int, to: str) -> dict:
    """Not idempotent: every call is a payment."""
    WORLD.record("send", amount)
    return {"sent": amount, "to": to}


@tool(idempotent=True, name="note")
def note(title: str, *, idempotency_key: str) -> dict:
    return WORLD.target.post({"title": title}, idempotency_key)


@agent("spender", registry=GATE_REG)
class Spender(Agent):
    """`calls` model calls in one step, then done."""

    def start(self, inputs):
        return {"calls": inputs.get("calls", 3)}

    def step(self, ctx, state):
        answers = [ctx.call(model, "test-model", f"q{n}")["text"] for n in range(state["calls"])]
        return Done({"answers": answers})


@agent("payer", registry=GATE_REG)
class Payer(Agent):
    """A note, then a payment of WORLD.flags["amount"] (read outside ctx.call: the same
    position may see other arguments, as after a code change), then done. A denied
    payment is handled: the output says so."""

    def step(self, ctx, state):
        ctx.call(note, "before paying")
        try:
            sent = ctx.call(send, WORLD.flags.get("amount", 10), "bob")
        except ApprovalDeniedError as denied:
            return Done({"denied": denied.message})
        return Done({"sent": sent})


@agent("noter", registry=GATE_REG)
class Noter(Agent):
    """One idempotent note that needs approval."""

    def step(self, ctx, state):
        return Done(ctx.call(note, "important"))


RULES = {
    "send": [ApprovalRule(tool="send", when="amount > 1000", approvers="operators")],
    "note": [ApprovalRule(tool="note", when="title == 'important'", approvers="owner")],
}


def rules_for(run, tool):
    return RULES.get(tool.name, [])
