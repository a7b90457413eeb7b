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

Only this module imports pydantic_ai, and only when an agent is wrapped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

from runs.durable.errors import PermanentToolError, TransientToolError
from runs.durable.registry import Agent, AgentRegistry, Done, Retry
from runs.durable.registry import registry as default_registry

from .effects import Turn, made_by, run_step

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
# Message fields that differ between two runs of the same conversation (ids, clocks,
# usage): left out of the fingerprint a replayed request is checked against.
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "usage", "provider_response_id",
                       "provider_details", "provider_url", "metadata", "history_digest",
                       "failed_attempts"})
MODEL_REQUEST = "pydantic_ai.model_request"


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
    attrs = {
        "name": name, "version": str(version),
        "description": description or f"Pydantic AI agent {name}",
        "input_schema": input_schema or DEFAULT_SCHEMA,
        "expected_cadence": expected_cadence,
        "sdk_agent": pydantic_agent,
        "make_deps": staticmethod(deps) if deps is not None else None,
        "non_idempotent": frozenset(non_idempotent),
        "input_tools": frozenset(input_tools),
        "tool_retry": tool_retry, "model_retry": model_retry,
        "per_request": checkpoint == "request",
    }
    cls = type(f"Durable_{name}", (DurablePydanticAgent,), attrs)
    cls.__qualname__ = cls.__name__
    registry.register(cls)
    return cls


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
        return {"prompts": prompts, "current": 0, "messages": [], "answers": [],
                "usage": {}, "requests": 0}

    def step(self, ctx, state: dict):
        turn = Turn(ctx)
        return run_step(turn, self._step(ctx, turn, state))

    async def _step(self, ctx, turn: Turn, state: dict):
        from pydantic_ai import RunUsage
        from pydantic_ai._agent_graph import CallToolsNode, ModelRequestNode
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        from pydantic_ai.tool_manager import ToolManager
        from pydantic_graph import End

        history = ModelMessagesTypeAdapter.validate_python(state["messages"])
        # A fresh prompt only when the history does not end mid-conversation.
        fresh = not history or _answered(state)
        prompt = state["prompts"][state["current"]] if fresh else None
        capability = _capability(self, turn)
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


def fingerprint(messages) -> str:
    """A digest of what a request sends, without the fields that differ between runs."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in _VOLATILE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    dumped = strip(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))
    return hashlib.sha256(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:32]


def _capability(agent: DurablePydanticAgent, turn: Turn):
    """The capability that makes this step's model requests and tool calls effects.
    Built per step (its classes too, on first use): pydantic_ai is imported lazily."""
    classes = _classes()
    return classes["capability"](agent=agent, turn=turn)


_CLASSES: dict = {}


def _classes() -> dict:
    if _CLASSES:
        return _CLASSES
    from pydantic_ai import ModelRetry
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.messages import (
        ModelMessagesTypeAdapter,
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        TextPartDelta,
    )
    from pydantic_ai.models import CompletedStreamedResponse, Model
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.toolsets import WrapperToolset
    from pydantic_core import to_jsonable_python

    class DurableModel(WrapperModel):
        """Each request an effect; the real request runs on the SDK loop (effects.Bridge),
        so the wrapped model is neither entered nor used on the step's loop.

        A live request streams: the wrapped model's `request_stream`, its text pushed to
        the run's viewers as it comes (a streaming effect), its final response logged,
        the same as `request` gives. A replay returns the logged response, streaming
        nothing. `request_stream` (a streamed run: `run_stream`, a capability that
        watches the run's events) is the same effect, its response then handed to the
        SDK as a completed stream."""

        def __init__(self, wrapped, turn: Turn, retry: Retry | None):
            super().__init__(wrapped)
            self._turn, self._retry = turn, retry

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc_info):
            return None

        async def request(self, messages, model_settings, model_request_parameters):
            wrapped = self.wrapped

            async def send(push):
                try:
                    if _streams(wrapped):
                        response = await _streamed(wrapped, push, messages, model_settings,
                                                   model_request_parameters)
                    else:
                        response = await wrapped.request(messages, model_settings,
                                                         model_request_parameters)
                except ModelHTTPError as exc:
                    if exc.status_code == 429 or exc.status_code >= 500:
                        raise TransientToolError(str(exc)) from exc
                    raise PermanentToolError(str(exc)) from exc
                return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]

            logged = self._turn.effect(
                MODEL_REQUEST, send, (wrapped.model_name, fingerprint(messages),
                                      len(messages)),
                idempotent=True, retry=self._retry, stream=True)
            return ModelMessagesTypeAdapter.validate_python([logged])[0]

        @contextlib.asynccontextmanager
        async def request_stream(self, messages, model_settings, model_request_parameters,
                                 run_context=None):
            # The step's loop waits for the effect (ctx.call is synchronous): the text
            # streams to the run's viewers meanwhile; the SDK gets the response whole,
            # its parts as events (on a replay, the logged response as one chunk).
            response = await self.request(messages, model_settings, model_request_parameters)
            yield CompletedStreamedResponse(response,
                                            model_request_parameters=model_request_parameters,
                                            replay_events=True)

    def _streams(model) -> bool:
        """Whether `model` answers `request_stream` (a model that does not is asked
        without streaming)."""
        while isinstance(model, WrapperModel) and \
                type(model).request_stream is WrapperModel.request_stream:
            model = model.wrapped
        if type(model).request_stream is Model.request_stream:
            return False
        return not (isinstance(model, FunctionModel) and model.stream_function is None)

    async def _streamed(model, push, messages, model_settings, model_request_parameters):
        """The wrapped model's streamed request: its text pushed as it comes, its final
        response returned (what `request` returns)."""
        async with model.request_stream(messages, model_settings,
                                        model_request_parameters) as streamed:
            async for event in streamed:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    text = event.part.content
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    text = event.delta.content_delta
                else:
                    continue
                if text:
                    push(text)
            return streamed.get()

    @dataclasses.dataclass
    class DurableToolset(WrapperToolset):
        """Each tool call an effect, or a question to a person (input_tools).
        A dataclass, as its base: Pydantic AI copies toolsets with `replace`."""

        agent: Any = None
        turn: Any = None

        async def call_tool(self, name, tool_args, ctx, tool):
            agent, turn = self.agent, self.turn
            if name in agent.input_tools:
                prompt = next((str(tool_args[k]) for k in ("question", "prompt", "message")
                               if k in tool_args), json.dumps(tool_args, sort_keys=True))
                return turn.engine(turn.ctx.wait_for_input, prompt)
            wrapped = self.wrapped

            async def call():
                try:
                    result = await wrapped.call_tool(name, tool_args, ctx, tool)
                except ModelRetry as retry:  # a message for the model, not a failure
                    return {"model_retry": str(retry.message)}
                return {"result": to_jsonable_python(result)}

            idempotent = name not in agent.non_idempotent
            logged = turn.effect(f"tool.{name}", call, (tool_args,), idempotent=idempotent,
                                 retry=agent.tool_retry if idempotent else None)
            if "model_retry" in logged:
                raise ModelRetry(logged["model_retry"])
            return logged["result"]

    @dataclasses.dataclass
    class DurableCapability(AbstractCapability):
        agent: Any = None
        turn: Any = None

        def get_wrapper_model(self, model):
            return DurableModel(model, self.turn, self.agent.model_retry)

        def get_wrapper_toolset(self, toolset):
            return DurableToolset(toolset, agent=self.agent, turn=self.turn)

    _CLASSES.update(capability=DurableCapability, model=DurableModel, toolset=DurableToolset)
    return _CLASSES
