"""Agents with metered calls and approvals, registered in the default registry for the
pages' tests (no network: the "model" answers in-process)."""

from runs.durable import Agent, ApprovalDeniedError, Done, agent, tool

CALLS = []


def usage(result, arguments):
    return {"model": "scripted", "prompt_tokens": 1000, "completion_tokens": 500}


@tool(idempotent=True, meter=usage, name="tests.metered.think")
def think(n: int, *, idempotency_key: str) -> dict:
    CALLS.append(("think", n))
    return {"n": n}


@tool(name="tests.metered.pay")
def pay(amount: int, to: str) -> dict:
    CALLS.append(("pay", amount))
    return {"paid": amount, "to": to}


@agent("metered")
class Metered(Agent):
    """`calls` model calls (each $0.0075 at the scripted model's default price), then a
    payment of `amount`; operators approve payments over 1000 (tests' policy)."""

    input_schema = {"type": "object", "properties": {
        "calls": {"type": "integer", "minimum": 0, "default": 2},
        "amount": {"type": "integer", "default": 0}}}
    default_budget = {"cost": 1.0}
    approvals = ({"tool": "tests.metered.pay", "when": "amount > 1000", "approvers": "operators"},
                 {"tool": "tests.metered.pay", "when": "amount > 100", "approvers": "owner"})

    def start(self, inputs):
        return {**inputs, "done": 0}

    def step(self, ctx, state):
        if state["done"] < state["calls"]:
            ctx.call(think, state["done"])
            state["done"] += 1
            return state
        if state["amount"]:
            try:
                return Done(ctx.call(pay, state["amount"], "shop"))
            except ApprovalDeniedError as denied:
                return Done({"denied": denied.message})
        return Done({"thought": state["done"]})
