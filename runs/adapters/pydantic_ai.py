"""A Pydantic AI agent as a durable agentops agent.

Cut at the seams Pydantic AI's own durable integrations use: a capability wraps the
model that serves each request (`get_wrapper_model`) and the assembled toolset
(`get_wrapper_toolset`), so that each model request and each tool call is an effect
(`ctx.call`): logged with its result, replayed after a crash instead of being sent
again, keyed. A step is one model request with the tool calls of the response
before it; the message history after it is the step's checkpointed state, and the
next step resumes the agent from that history (Pydantic AI runs the pending tool
calls of a history that ends in a response, then asks the model again).
A live model request streams: its text reaches the run page as the model writes it
(a streaming effect, docs/adapters.md "Streaming"); the response logged is the one
the non-streamed request gives.

This module imports pydantic_ai only when an agent is wrapped or runs a step; the
classes built on the SDK's (the capability, its model and toolset) are in
pydantic_ai_capability.py, imported by the first step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from runs.durable.registry import Agent, AgentRegistry, Done, Retry
from runs.durable.registry import registry as default_registry

from .effects import Turn, made_by, register_sdk_agent, run_step

DEFAULT_SCHEMA = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        "prompt": {"type": "string", "minLength": 1, "format": "textarea",
                   "description": "What to ask the agent."},
        "follow_ups": {"type": "array", "items": {"type": "string", "minLength": 1},
                       "default": [], "description": "Further prompts, each asked after "
                                                     "the answer before it."},
    },
}


def durable(pydantic_agent, *, name: str, version: str, description: str = "",
            input_schema: dict | None = None, deps: Callable[[dict], Any] | None = None,
            non_idempotent: Iterable[str] = (), input_tools: Iterable[str] = (),
            tool_retry: Retry | None = None, model_retry: Retry | None = None,
            checkpoint: str = "prompt", expected_cadence: float | None = None,
            registry: AgentRegistry = default_registry) -> type[Agent]:
    """Register `pydantic_agent` (a `pydantic_ai.Agent`) as the agentops agent `name`.

    non_idempotent  tool names whose calls must not be repeated: a call cut short by a
                    crash is in doubt and waits for an operator. Other tools are
                    repeated under the same idempotency key (`runs.adapters.idempotency_key()`).
    input_tools     tool names that ask a person: the call waits (without a worker) for
                    an answer on the run page, which becomes the tool's result.
    deps            builds the agent's deps from the run's inputs, on every step.
    checkpoint      "prompt" (default): a step answers one prompt, and the message history
                    is checkpointed after each answer; a crash mid-prompt replays that
                    prompt's logged requests and tool calls. "request": a step is one model
                    request with the tool calls before it, the history checkpointed after
                    each; a crash replays at most one request, at the price of the SDK
                    setting its run up again at every step.

    `pydantic_agent` may also be a function that builds it, called on the first step
    that needs it: registering then imports nothing (a web process never imports the SDK).
    """
    if not callable(pydantic_agent) or made_by(pydantic_agent, "pydantic_ai", "Agent"):
        _check(pydantic_agent)
    if checkpoint not in ("prompt", "request"):
        raise ValueError(f"checkpoint must be 'prompt' or 'request', not {checkpoint!r}")
    return register_sdk_agent(
        DurablePydanticAgent, registry, name=name, version=version,
        description=description or f"Pydantic AI agent {name}",
        input_schema=input_schema or DEFAULT_SCHEMA, expected_cadence=expected_cadence,
        sdk_agent=pydantic_agent, make_deps=staticmethod(deps) if deps is not None else None,
        non_idempotent=frozenset(non_idempotent), input_tools=frozenset(input_tools),
        tool_retry=tool_retry, model_retry=model_retry, per_request=checkpoint == "request")


def _is_agent(obj) -> bool:
    from pydantic_ai import Agent as PydanticAgent

    return isinstance(obj, PydanticAgent)


def _check(obj):
    if not _is_agent(obj):
        raise TypeError(f"durable() needs a pydantic_ai.Agent, got {obj!r}")
    return obj


class DurablePydanticAgent(Agent):
    sdk_agent: Any = None
    make_deps: Callable[[dict], Any] | None = None
    non_idempotent: frozenset = frozenset()
    input_tools: frozenset = frozenset()
    tool_retry: Retry | None = None
    model_retry: Retry | None = None
    per_request = False

    @classmethod
    def agent(cls):
        """The Pydantic AI agent, built by its factory on first use."""
        if not _is_agent(cls.sdk_agent):
            cls.sdk_agent = _check(cls.sdk_agent())
        return cls.sdk_agent

    def start(self, inputs: dict) -> dict:
        prompts = [inputs["prompt"], *inputs.get("follow_ups", [])]
        # plain_results: a tool call logs what the tool returned (pydantic_results.py)
        return {"prompts": prompts, "current": 0, "messages": [], "answers": [],
                "usage": {}, "requests": 0, "plain_results": True}

    def step(self, ctx, state: dict):
        turn = Turn(ctx)
        return run_step(turn, self._step(ctx, turn, state))

    async def _step(self, ctx, turn: Turn, state: dict):
        from pydantic_ai import CallToolsNode, ModelRequestNode, RunUsage
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        from pydantic_ai.tool_manager import ToolManager
        from pydantic_graph import End

        history = ModelMessagesTypeAdapter.validate_python(state["messages"])
        # A fresh prompt only when the history does not end mid-conversation.
        fresh = not history or _answered(state)
        prompt = state["prompts"][state["current"]] if fresh else None
        capability = _capability(self, turn, enveloped=not state.get("plain_results"))
        deps = self.make_deps(ctx.inputs) if self.make_deps is not None else None
        with ToolManager.parallel_execution_mode("sequential"):  # a fixed order of effects
            async with self.agent().iter(prompt, message_history=history, deps=deps,
                                           usage=RunUsage(**state["usage"]),
                                           capabilities=[capability]) as run:
                node, requested = run.next_node, False
                while not isinstance(node, End):
                    if self.per_request and isinstance(node, CallToolsNode) and requested \
                            and node.model_response.tool_calls:
                        # One request per step: its response (with the calls it asks for)
                        # ends the step, and is where the next one resumes.
                        return self._checkpoint(ctx, state, run, node.model_response)
                    requested = requested or isinstance(node, ModelRequestNode)
                    node = await run.next(node)
                return self._answered(ctx, state, run)

    def _checkpoint(self, ctx, state, run, response) -> dict:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        state["messages"] = ModelMessagesTypeAdapter.dump_python(run.all_messages(), mode="json")
        state["usage"] = _usage(run.usage)
        state["requests"] += 1
        state.pop("answered", None)
        ctx.log("model asks for " + ", ".join(c.tool_name for c in response.tool_calls))
        return state

    def _answered(self, ctx, state, run):
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        from pydantic_core import to_jsonable_python

        output = to_jsonable_python(run.result.output)
        state["messages"] = ModelMessagesTypeAdapter.dump_python(run.all_messages(), mode="json")
        state["usage"] = _usage(run.usage)
        state["requests"] += 1
        state["answers"].append({"prompt": state["prompts"][state["current"]], "answer": output})
        ctx.log(f"answer {state['current'] + 1}/{len(state['prompts'])}: {output}"[:4000])
        ctx.progress(state["current"] + 1, len(state["prompts"]))
        state["current"] += 1
        if state["current"] == len(state["prompts"]):
            return Done({"answer": output, "answers": state["answers"], "usage": state["usage"],
                         "requests": state["requests"]})
        state["answered"] = True
        return state


def _answered(state: dict) -> bool:
    return bool(state.get("answered"))


def _usage(usage) -> dict:
    return {k: v for k, v in dataclasses.asdict(usage).items()
            if isinstance(v, int) and not isinstance(v, bool)}


def _capability(agent: DurablePydanticAgent, turn: Turn, *, enveloped: bool = False):
    """The capability that makes this step's model requests and tool calls effects
    (its module imports pydantic_ai: imported here, when a step needs it)."""
    from .pydantic_ai_capability import DurableCapability

    return DurableCapability(agent=agent, turn=turn, enveloped=enveloped)
