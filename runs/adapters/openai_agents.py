"""An OpenAI Agents SDK agent as a durable agentops agent.

The seams are the SDK's own: every model an agent uses is resolved through its
`ModelProvider` and wrapped (`DurableModel.get_response`: one effect per model
call), every `FunctionTool`'s `on_invoke_tool` is wrapped (one effect per call),
and every hand-off is an effect too (`agents.handoff`, from → to), so the run's
effect log shows who handed what to whom and a replay that would hand off
elsewhere is caught as non-determinism. The agent graph (hand-offs included) is
cloned once, at `durable()`; the clones find the step they run in through a
context variable (effects.turn_in_context).

A run is one step: `Runner.run` from the prompt, replayed from the effect log
after a crash (each logged model response and tool result is returned, not
fetched again), the way Temporal's integration of this SDK replays a workflow.
Follow-up prompts are steps of their own, each checkpointing the conversation
(`to_input_list()`) it continues from. A live model call streams: its text reaches the
run page as the model writes it (a streaming effect, docs/adapters.md "Streaming"); the
response logged is the one the non-streamed call gives.

This module imports `agents` only when an agent is wrapped or runs a step; the classes
built on the SDK's are in openai_agents_graph.py (the clones, the hand-off hooks) and
openai_agents_model.py (the model), imported then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from runs.durable.registry import Agent, AgentRegistry, Done, Retry
from runs.durable.registry import registry as default_registry

from .effects import Turn, made_by, register_sdk_agent, run_step, turn_in_context
from .pydantic_ai import DEFAULT_SCHEMA

DEFAULT_MAX_TURNS = 10


def durable(sdk_agent, *, name: str, version: str, description: str = "",
            input_schema: dict | None = None, context: Callable[[dict], Any] | None = None,
            non_idempotent: Iterable[str] = (), input_tools: Iterable[str] = (),
            tool_retry: Retry | None = None, model_retry: Retry | None = None,
            model_provider=None, max_turns: int = DEFAULT_MAX_TURNS,
            expected_cadence: float | None = None,
            registry: AgentRegistry = default_registry) -> type[Agent]:
    """Register `sdk_agent` (an `agents.Agent`) as the agentops agent `name`.

    non_idempotent  function tool names whose calls must not be repeated (in doubt
                    after a crash, for an operator); the others are repeated under the
                    same key (`runs.adapters.idempotency_key()`).
    input_tools     function tool names that ask a person: the run waits for the
                    answer on its page, which becomes the tool's output.
    context         builds the run context object from the run's inputs.
    model_provider  resolves the agents' model names (default: the SDK's MultiProvider).

    `sdk_agent` may also be a function that builds it, called on the first step that
    needs it: registering then imports nothing (a web process never imports the SDK).
    """
    options = {"non_idempotent": frozenset(non_idempotent),
               "input_tools": frozenset(input_tools), "tool_retry": tool_retry,
               "model_retry": model_retry, "model_provider": model_provider}
    eager = not callable(sdk_agent) or made_by(sdk_agent, "agents", "Agent")
    return register_sdk_agent(
        DurableOpenAIAgent, registry, name=name, version=version,
        description=description or f"OpenAI Agents SDK agent {name}",
        input_schema=input_schema or DEFAULT_SCHEMA, expected_cadence=expected_cadence,
        options=options, sdk_agent=_clone(sdk_agent, options) if eager else sdk_agent,
        _cloned=eager, make_context=staticmethod(context) if context is not None else None,
        max_turns=max_turns)


def _is_agent(obj) -> bool:
    import agents

    return isinstance(obj, agents.Agent)


def _clone(obj, options: dict):
    """The agent graph with its models, tools and hand-offs wrapped."""
    if not _is_agent(obj):
        raise TypeError(f"durable() needs an agents.Agent, got {obj!r}")
    from .openai_agents_graph import clone

    return clone(obj, options)


class DurableOpenAIAgent(Agent):
    sdk_agent: Any = None
    options: dict = {}
    _cloned = False
    make_context: Callable[[dict], Any] | None = None
    max_turns: int = DEFAULT_MAX_TURNS

    @classmethod
    def agent(cls):
        """The wrapped agent graph, built by its factory on first use."""
        if not cls._cloned:
            cls.sdk_agent, cls._cloned = _clone(cls.sdk_agent(), cls.options), True
        return cls.sdk_agent

    def start(self, inputs: dict) -> dict:
        prompts = [inputs["prompt"], *inputs.get("follow_ups", [])]
        return {"prompts": prompts, "current": 0, "items": [], "answers": [], "agent": None}

    def step(self, ctx, state: dict):
        turn = Turn(ctx)
        with turn_in_context(turn):
            return run_step(turn, self._step(ctx, turn, state))

    async def _step(self, ctx, turn: Turn, state: dict):
        from agents import RunConfig, Runner
        from pydantic_core import to_jsonable_python

        from .openai_agents_graph import RecordedHandoffs

        prompt = state["prompts"][state["current"]]
        items = [*state["items"], {"role": "user", "content": prompt}] if state["items"] \
            else prompt
        starting = self.agent()
        if state["agent"]:  # a follow-up goes to the agent that answered last
            starting = _find(starting, state["agent"]) or starting
        context = self.make_context(ctx.inputs) if self.make_context is not None else None
        result = await Runner.run(starting, items, context=context, max_turns=self.max_turns,
                                  hooks=RecordedHandoffs(turn),
                                  run_config=RunConfig(tracing_disabled=True))
        output = to_jsonable_python(result.final_output)
        state["items"] = to_jsonable_python(result.to_input_list())
        state["agent"] = result.last_agent.name
        state["answers"].append({"prompt": prompt, "answer": output,
                                 "agent": result.last_agent.name})
        ctx.log(f"answer {state['current'] + 1}/{len(state['prompts'])} "
                f"({result.last_agent.name}): {output}"[:4000])
        ctx.progress(state["current"] + 1, len(state["prompts"]))
        state["current"] += 1
        if state["current"] == len(state["prompts"]):
            return Done({"answer": output, "answers": state["answers"],
                         "agent": result.last_agent.name})
        return state


def _find(root, name: str):
    seen, todo = set(), [root]
    while todo:
        agent = todo.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        if agent.name == name:
            return agent
        todo.extend(h for h in agent.handoffs if hasattr(h, "handoffs"))
    return None
