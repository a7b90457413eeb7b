"""An OpenAI Agents SDK agent as a durable agentops agent.

The seams are the SDK's own: every model an agent uses is resolved through its
`ModelProvider` and wrapped (`DurableModel.get_response`: one effect per model
call), every `FunctionTool`'s `on_invoke_tool` is wrapped (one effect per call),
and every hand-off is an effect too (`agents.handoff`, from → to), so the run's
effect log shows who handed what to whom and a replay that would hand off
elsewhere is caught as non-determinism. The agent graph (hand-offs included) is
cloned once, at `durable()`; the clones find the step they run in through a
context variable.

A run is one step: `Runner.run` from the prompt, replayed from the effect log
after a crash (each logged model response and tool result is returned, not
fetched again), the way Temporal's integration of this SDK replays a workflow.
Follow-up prompts are steps of their own, each checkpointing the conversation
(`to_input_list()`) it continues from. A live model call streams: its text reaches the
run page as the model writes it (a streaming effect, docs/adapters.md "Streaming"); the
response logged is the one the non-streamed call gives.

Only this module imports `agents`, and only when an agent is wrapped.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from runs.durable.errors import PermanentToolError, TransientToolError
from runs.durable.registry import Agent, AgentRegistry, Done, Retry
from runs.durable.registry import registry as default_registry

from .effects import Turn, made_by, run_step
from .pydantic_ai import DEFAULT_SCHEMA

MODEL_CALL = "openai_agents.model_call"
HANDOFF = "agents.handoff"
DEFAULT_MAX_TURNS = 10

_turn: contextvars.ContextVar[Turn | None] = contextvars.ContextVar("agentops_turn", default=None)


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
    if eager:
        sdk_agent = _clone(sdk_agent, options)
    attrs = {
        "name": name, "version": str(version),
        "description": description or f"OpenAI Agents SDK agent {name}",
        "input_schema": input_schema or DEFAULT_SCHEMA,
        "expected_cadence": expected_cadence,
        "options": options,
        "sdk_agent": sdk_agent, "_cloned": eager,
        "make_context": staticmethod(context) if context is not None else None,
        "max_turns": max_turns,
    }
    cls = type(f"Durable_{name}", (DurableOpenAIAgent,), attrs)
    cls.__qualname__ = cls.__name__
    registry.register(cls)
    return cls


def _is_agent(obj) -> bool:
    import agents

    return isinstance(obj, agents.Agent)


def _clone(obj, options: dict):
    """The agent graph with its models, tools and hand-offs wrapped."""
    import agents

    if not _is_agent(obj):
        raise TypeError(f"durable() needs an agents.Agent, got {obj!r}")
    return _Cloner(options["model_provider"] or agents.MultiProvider(), options).clone(obj)


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
        token = _turn.set(turn)
        try:
            return run_step(turn, self._step(ctx, turn, state))
        finally:
            _turn.reset(token)

    async def _step(self, ctx, turn: Turn, state: dict):
        from agents import RunConfig, RunHooks, Runner
        from pydantic_core import to_jsonable_python

        class Recorded(RunHooks):
            async def on_handoff(self, context, from_agent, to_agent):
                async def handed():
                    return {"from": from_agent.name, "to": to_agent.name}

                # Recorded as an effect (no I/O): in the log, and checked on replay.
                turn.effect(HANDOFF, handed, (from_agent.name, to_agent.name),
                            idempotent=True)
                turn.engine(ctx.log, f"hand-off: {from_agent.name} → {to_agent.name}")

        prompt = state["prompts"][state["current"]]
        items = [*state["items"], {"role": "user", "content": prompt}] if state["items"] \
            else prompt
        starting = self.agent()
        if state["agent"]:  # a follow-up goes to the agent that answered last
            starting = _find(starting, state["agent"]) or starting
        context = self.make_context(ctx.inputs) if self.make_context is not None else None
        result = await Runner.run(starting, items, context=context, max_turns=self.max_turns,
                                  hooks=Recorded(),
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


def fingerprint(system_instructions, items) -> str:
    from pydantic_core import to_jsonable_python

    dumped = json.dumps([system_instructions, to_jsonable_python(items)], sort_keys=True,
                        default=str)
    return hashlib.sha256(dumped.encode()).hexdigest()[:32]


class _Cloner:
    """Clones an agent graph with every model, function tool and hand-off target wrapped."""

    def __init__(self, provider, options: dict):
        self.provider = provider
        self.options = options
        self.clones: dict[int, Any] = {}

    def clone(self, agent):
        if id(agent) in self.clones:
            return self.clones[id(agent)]
        from agents import Handoff

        model = agent.model
        if model is None or isinstance(model, str):
            model = self.provider.get_model(model)
        copy = agent.clone(model=_model_class()(model, self.options["model_retry"]),
                           tools=[self._tool(t) for t in agent.tools])
        self.clones[id(agent)] = copy  # before the hand-offs: they may lead back here
        copy.handoffs = [self._handoff(h) if isinstance(h, Handoff) else self.clone(h)
                         for h in agent.handoffs]
        return copy

    def _handoff(self, handoff):
        invoke = handoff.on_invoke_handoff

        async def on_invoke_handoff(context, arguments):
            return self.clone(await invoke(context, arguments))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)

    def _tool(self, tool):
        from agents import FunctionTool

        if not isinstance(tool, FunctionTool):
            return tool  # hosted tools run at the provider, inside the model call
        name, options = tool.name, self.options
        invoke = tool.on_invoke_tool

        async def on_invoke_tool(tool_context, arguments: str):
            from pydantic_core import to_jsonable_python

            turn = _current_turn()
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


def _current_turn() -> Turn:
    turn = _turn.get()
    if turn is None:
        raise RuntimeError("a durable agent's clone runs only inside its run's step")
    return turn


_MODEL: list = []
_FAILED = frozenset({"response.incomplete", "response.failed", "response.error", "error"})


def _model_class():
    if _MODEL:
        return _MODEL[0]
    import openai
    from agents import Model
    from agents.exceptions import ModelBehaviorError
    from agents.items import ModelResponse, TResponseOutputItem
    from agents.models.fake_id import FAKE_RESPONSES_ID
    from agents.usage import Usage
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseTextDeltaEvent,
        ResponseUsage,
    )
    from pydantic import TypeAdapter
    from pydantic_core import to_jsonable_python

    outputs = TypeAdapter(list[TResponseOutputItem])
    usage = TypeAdapter(Usage)
    sdk_usage = _sdk_usage_helpers(Usage)

    class DurableModel(Model):
        """Each `get_response` an effect; the real call runs on the SDK loop.

        A live call streams: the wrapped model's `stream_response`, its text deltas pushed
        to the run's viewers as they come (a streaming effect), the response of its
        completed event logged as `get_response` gives it. A replay returns the logged
        response, streaming nothing. `stream_response` (`Runner.run_streamed`) is the
        same effect, the response then handed to the SDK as a text delta per text and
        the completed event."""

        def __init__(self, wrapped, retry: Retry | None):
            self.wrapped, self.retry = wrapped, retry

        async def get_response(self, system_instructions, input, model_settings, tools,
                               output_schema, handoffs, tracing, **kwargs):
            wrapped = self.wrapped
            args = (system_instructions, input, model_settings, tools, output_schema,
                    handoffs, tracing)

            async def send(push):
                try:
                    response = await streamed(push, args, kwargs)
                    if response is None:  # a model that does not stream
                        response = await wrapped.get_response(*args, **kwargs)
                except openai.APIStatusError as exc:
                    if exc.status_code == 429 or exc.status_code >= 500:
                        raise TransientToolError(str(exc)) from exc
                    raise PermanentToolError(str(exc)) from exc
                return {"output": to_jsonable_python(response.output),
                        "usage": to_jsonable_python(response.usage),
                        "response_id": response.response_id}

            async def streamed(push, args, kwargs):
                """The wrapped model's streamed call as `get_response` would have
                answered it; None if the model does not stream."""
                events, final, done_items, started = None, None, [], False
                # the usage chunk of a chat completions stream, which a non-streamed
                # response always has (unless the agent's settings say no)
                settings = args[2]
                if getattr(settings, "include_usage", False) is None:
                    settings = dataclasses.replace(settings, include_usage=True)
                try:
                    events = wrapped.stream_response(*args[:2], settings, *args[3:], **kwargs)
                    async for event in events:
                        started = True
                        kind = getattr(event, "type", None)
                        if kind == "response.output_text.delta":
                            if event.delta:
                                push(event.delta)
                        elif kind == "response.output_item.done":
                            done_items.append(event.item)
                        elif kind == "response.completed":
                            final = event.response
                        elif kind in _FAILED:
                            raise ModelBehaviorError(f"the model's stream ended with {kind}")
                except NotImplementedError:
                    if started:
                        raise
                    return None
                finally:
                    if events is not None and hasattr(events, "aclose"):
                        await events.aclose()
                if final is None:
                    raise ModelBehaviorError("the model's stream ended without a response")
                # what the SDK's own streamed run makes of the completed event
                # (agents/run_internal/run_loop.py), and what get_response returns
                return ModelResponse(
                    output=list(final.output) or done_items,
                    usage=sdk_usage["of"](final.usage) if final.usage else Usage(requests=1),
                    response_id=None if final.id == FAKE_RESPONSES_ID else final.id)

            turn = _current_turn()
            logged = turn.effect(MODEL_CALL, send,
                                 (getattr(wrapped, "model", type(wrapped).__name__),
                                  fingerprint(system_instructions, input)),
                                 idempotent=True, retry=self.retry, stream=True)
            return ModelResponse(output=outputs.validate_python(logged["output"]),
                                 usage=usage.validate_python(logged["usage"]),
                                 response_id=logged["response_id"])

        async def stream_response(self, system_instructions, input, model_settings, tools,
                                  output_schema, handoffs, tracing, **kwargs):
            # The step's loop waits for the effect (ctx.call is synchronous): the text
            # streams to the run's viewers meanwhile; the SDK gets the response whole (on
            # a replay too: the logged response), as a delta per text and its completion.
            response = await self.get_response(system_instructions, input, model_settings,
                                               tools, output_schema, handoffs, tracing,
                                               **kwargs)
            sequence = 0
            for index, item in enumerate(response.output):
                for part_index, part in enumerate(getattr(item, "content", None) or []):
                    if getattr(item, "type", None) == "message" and \
                            getattr(part, "type", None) == "output_text" and part.text:
                        yield ResponseTextDeltaEvent(
                            type="response.output_text.delta", item_id=item.id,
                            output_index=index, content_index=part_index, delta=part.text,
                            logprobs=[], sequence_number=sequence)
                        sequence += 1
            used = response.usage
            totals = ResponseUsage(input_tokens=used.input_tokens,
                                   output_tokens=used.output_tokens,
                                   total_tokens=used.total_tokens,
                                   input_tokens_details=used.input_tokens_details,
                                   output_tokens_details=used.output_tokens_details)
            sdk_usage["attach"](totals, used)  # the SDK reads back this very usage
            yield ResponseCompletedEvent(
                type="response.completed", sequence_number=sequence,
                response=Response(id=response.response_id or FAKE_RESPONSES_ID,
                                  created_at=time.time(),
                                  model=str(getattr(self.wrapped, "model", "")),
                                  object="response", output=list(response.output),
                                  tool_choice="auto", tools=[], parallel_tool_calls=False,
                                  usage=totals))

    _MODEL.append(DurableModel)
    return DurableModel


def _sdk_usage_helpers(usage_class) -> dict:
    """The SDK's conversions between a Responses usage and its `Usage` (private in
    agents.usage, which its streamed runs use), with a plain one if they are gone."""
    import agents.usage as sdk

    def of(response_usage):
        return usage_class(requests=1, input_tokens=response_usage.input_tokens or 0,
                           output_tokens=response_usage.output_tokens or 0,
                           total_tokens=response_usage.total_tokens or 0,
                           input_tokens_details=response_usage.input_tokens_details,
                           output_tokens_details=response_usage.output_tokens_details)

    return {"of": getattr(sdk, "_response_usage_to_usage", of),
            "attach": getattr(sdk, "_attach_normalized_usage", lambda target, used: None)}
