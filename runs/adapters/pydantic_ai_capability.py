"""The Pydantic AI classes of the adapter: the capability that makes a step's model
requests and tool calls effects, with the model and toolset it wraps around the SDK's.

Imported only when a Pydantic AI agent's step runs (runs/adapters/pydantic_ai.py,
`_capability`): this module imports pydantic_ai, which the app does not need.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from typing import Any

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

from runs.durable.errors import PermanentToolError, ToolFailedError, TransientToolError
from runs.durable.registry import Retry

from . import pydantic_results as results
from .effects import Turn, model_meter

MODEL_REQUEST = "pydantic_ai.model_request"
# Message fields that differ between two runs of the same conversation (ids, clocks,
# usage): left out of the fingerprint a replayed request is checked against.
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "usage", "provider_response_id",
                       "provider_details", "provider_url", "metadata", "history_digest",
                       "failed_attempts"})


def fingerprint(messages) -> str:
    """A digest of what a request sends, without the fields that differ between runs."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in _VOLATILE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    dumped = strip(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))
    return hashlib.sha256(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:32]


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
            return await _sent(wrapped, push, messages, model_settings,
                               model_request_parameters)

        logged = self._turn.effect(
            MODEL_REQUEST, send, (wrapped.model_name, fingerprint(messages), len(messages)),
            idempotent=True, retry=self._retry, stream=True,
            meter=model_meter(wrapped.model_name))
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


async def _sent(model, push, messages, model_settings, model_request_parameters) -> dict:
    """The live request, streamed if the model streams: its response as logged. An
    HTTP error is a tool failure, transient for a 429 or a 5xx."""
    try:
        if _streams(model):
            response = await _streamed(model, push, messages, model_settings,
                                       model_request_parameters)
        else:
            response = await model.request(messages, model_settings, model_request_parameters)
    except ModelHTTPError as exc:
        if exc.status_code == 429 or exc.status_code >= 500:
            raise TransientToolError(str(exc)) from exc
        raise PermanentToolError(str(exc)) from exc
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


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
    enveloped: bool = False  # a run started before plain_results (pydantic_results)

    async def call_tool(self, name, tool_args, ctx, tool):
        agent, turn = self.agent, self.turn
        if name in agent.input_tools:
            prompt = next((str(tool_args[k]) for k in ("question", "prompt", "message")
                           if k in tool_args), json.dumps(tool_args, sort_keys=True))
            return turn.engine(turn.ctx.wait_for_input, prompt)
        wrapped, enveloped = self.wrapped, self.enveloped

        async def call():
            try:
                result = await wrapped.call_tool(name, tool_args, ctx, tool)
            except ModelRetry as retry:  # a message for the model: a known outcome
                return results.retried(str(retry.message), enveloped=enveloped)
            return results.returned(to_jsonable_python(result), enveloped=enveloped)

        idempotent = name not in agent.non_idempotent
        try:
            logged = turn.effect(f"tool.{name}", call, (tool_args,), idempotent=idempotent,
                                 retry=agent.tool_retry if idempotent else None)
        except ToolFailedError as failed:
            retry = results.model_retry(failed)
            if retry is None:
                raise
            raise retry from None
        return results.given_back(logged, enveloped=enveloped)


@dataclasses.dataclass
class DurableCapability(AbstractCapability):
    """Wraps the model of each request and the assembled toolset of a step."""

    agent: Any = None
    turn: Any = None
    enveloped: bool = False

    def get_wrapper_model(self, model):
        return DurableModel(model, self.turn, self.agent.model_retry)

    def get_wrapper_toolset(self, toolset):
        return DurableToolset(toolset, agent=self.agent, turn=self.turn,
                              enveloped=self.enveloped)
