"""The OpenAI Agents SDK's agent graph, cloned with its seams wrapped: every agent's
model (openai_agents_model.py), every function tool's `on_invoke_tool` (one effect per
call, or a question to a person), every hand-off target; and the run hooks that record
each hand-off as an effect.

Imported only when an agent is wrapped or runs a step (runs/adapters/openai_agents.py):
this module imports `agents`, which the app does not need.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import agents
from pydantic_core import to_jsonable_python

from .effects import Turn, current_turn
from .openai_agents_model import DurableModel

HANDOFF = "agents.handoff"


def clone(agent: agents.Agent, options: dict) -> agents.Agent:
    """The agent graph of `agent` with its models, tools and hand-offs wrapped."""
    return Cloner(options["model_provider"] or agents.MultiProvider(), options).clone(agent)


class Cloner:
    """Clones an agent graph with every model, function tool and hand-off target wrapped."""

    def __init__(self, provider, options: dict):
        self.provider = provider
        self.options = options
        self.clones: dict[int, Any] = {}

    def clone(self, agent):
        if id(agent) in self.clones:
            return self.clones[id(agent)]
        model = agent.model
        if model is None or isinstance(model, str):
            model = self.provider.get_model(model)
        copy = agent.clone(model=DurableModel(model, self.options["model_retry"]),
                           tools=[self._tool(t) for t in agent.tools])
        self.clones[id(agent)] = copy  # before the hand-offs: they may lead back here
        copy.handoffs = [self._handoff(h) if isinstance(h, agents.Handoff) else self.clone(h)
                         for h in agent.handoffs]
        return copy

    def _handoff(self, handoff):
        invoke = handoff.on_invoke_handoff

        async def on_invoke_handoff(context, arguments):
            return self.clone(await invoke(context, arguments))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)

    def _tool(self, tool):
        if not isinstance(tool, agents.FunctionTool):
            return tool  # hosted tools run at the provider, inside the model call
        name, options = tool.name, self.options
        invoke = tool.on_invoke_tool

        async def on_invoke_tool(tool_context, arguments: str):
            turn = current_turn()
            if name in options["input_tools"]:
                args = json.loads(arguments or "{}")
                prompt = next((str(args[k]) for k in ("question", "prompt", "message")
                               if k in args), arguments)
                return turn.engine(turn.ctx.wait_for_input, prompt)

            async def call():
                return to_jsonable_python(await invoke(tool_context, arguments))

            idempotent = name not in options["non_idempotent"]
            return turn.effect(f"tool.{name}", call, (json.loads(arguments or "{}"),),
                               idempotent=idempotent,
                               retry=options["tool_retry"] if idempotent else None)

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


class RecordedHandoffs(agents.RunHooks):
    """Each hand-off of a step's run recorded as an effect (no I/O): in the log, and
    checked on replay, so a replay that would hand off elsewhere is caught."""

    def __init__(self, turn: Turn):
        super().__init__()
        self.turn = turn

    async def on_handoff(self, context, from_agent, to_agent):
        turn = self.turn

        async def handed():
            return {"from": from_agent.name, "to": to_agent.name}

        turn.effect(HANDOFF, handed, (from_agent.name, to_agent.name), idempotent=True)
        turn.engine(turn.ctx.log, f"hand-off: {from_agent.name} → {to_agent.name}")
