"""Agents of model calls under budgets and quotas, registered in the default registry so
that the worker's gates (and real workers: AGENTOPS_AGENT_MODULES=...,
tests.budgets.quota_agents) run them."""

from runs.durable import Agent, Done, agent
from tests.durable.budget_agents import model


@agent("quota_spender")
class QuotaSpender(Agent):
    """`calls` model calls of 1,000 tokens, one a step (each takes budget_agents.LATENCY),
    then done."""

    input_schema = {"type": "object", "properties": {
        "calls": {"type": "integer", "minimum": 0, "default": 6}}}

    def start(self, inputs):
        return {"calls": inputs.get("calls", 6), "done": 0}

    def step(self, ctx, state):
        if state["done"] >= state["calls"]:
            return Done({"calls": state["done"]})
        ctx.call(model, f"q{state['done']}")
        state["done"] += 1
        return state


@agent("budget_fan")
class BudgetFan(Agent):
    """`calls` model calls of 1,000 tokens at once (ctx.map), then done."""

    input_schema = {"type": "object", "properties": {
        "calls": {"type": "integer", "minimum": 0, "default": 6}}}

    def step(self, ctx, state):
        answers = ctx.map(model, [f"q{n}" for n in range(ctx.inputs.get("calls", 6))])
        return Done({"answers": [a["text"] for a in answers]})
