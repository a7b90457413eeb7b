"""The OpenAI Agents SDK's model, wrapped: each `get_response` an effect, the real call
made on the SDK loop.

A live call streams: the wrapped model's `stream_response`, its text deltas pushed to
the run's viewers as they come (a streaming effect), the response of its completed
event logged as `get_response` gives it. A replay returns the logged response,
streaming nothing. `stream_response` (`Runner.run_streamed`) is the same effect, the
response then handed to the SDK as a text delta per text and the completed event.

Imported only when an agent graph is cloned (openai_agents_graph.py): this module
imports `agents` and `openai`, which the app does not need.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

import agents.usage as sdk_usage
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

from runs.durable.errors import PermanentToolError, TransientToolError
from runs.durable.registry import Retry

from .effects import current_turn, model_meter

MODEL_CALL = "openai_agents.model_call"
_FAILED = frozenset({"response.incomplete", "response.failed", "response.error", "error"})
_OUTPUTS = TypeAdapter(list[TResponseOutputItem])
_USAGE = TypeAdapter(Usage)


def fingerprint(system_instructions, items) -> str:
    dumped = json.dumps([system_instructions, to_jsonable_python(items)], sort_keys=True,
                        default=str)
    return hashlib.sha256(dumped.encode()).hexdigest()[:32]


def _usage_of(response_usage) -> Usage:
    return Usage(requests=1, input_tokens=response_usage.input_tokens or 0,
                 output_tokens=response_usage.output_tokens or 0,
                 total_tokens=response_usage.total_tokens or 0,
                 input_tokens_details=response_usage.input_tokens_details,
                 output_tokens_details=response_usage.output_tokens_details)


# The SDK's conversions between a Responses usage and its `Usage` (private in
# agents.usage, which its streamed runs use), with a plain one if they are gone.
_sdk_usage_of = getattr(sdk_usage, "_response_usage_to_usage", _usage_of)
_attach_usage = getattr(sdk_usage, "_attach_normalized_usage", lambda target, used: None)


class DurableModel(Model):
    """The wrapped model of every agent of a cloned graph."""

    def __init__(self, wrapped, retry: Retry | None):
        self.wrapped, self.retry = wrapped, retry

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **kwargs):
        wrapped = self.wrapped
        args = (system_instructions, input, model_settings, tools, output_schema,
                handoffs, tracing)

        async def send(push):
            return await _sent(wrapped, push, args, kwargs)

        model = getattr(wrapped, "model", type(wrapped).__name__)
        logged = current_turn().effect(
            MODEL_CALL, send, (model, fingerprint(system_instructions, input)),
            idempotent=True, retry=self.retry, stream=True, meter=model_meter(str(model)))
        return ModelResponse(output=_OUTPUTS.validate_python(logged["output"]),
                             usage=_USAGE.validate_python(logged["usage"]),
                             response_id=logged["response_id"])

    async def stream_response(self, system_instructions, input, model_settings, tools,
                              output_schema, handoffs, tracing, **kwargs):
        # The step's loop waits for the effect (ctx.call is synchronous): the text
        # streams to the run's viewers meanwhile; the SDK gets the response whole (on
        # a replay too: the logged response), as a delta per text and its completion.
        response = await self.get_response(system_instructions, input, model_settings,
                                           tools, output_schema, handoffs, tracing,
                                           **kwargs)
        deltas = _text_deltas(response)
        for delta in deltas:
            yield delta
        yield _completed(response, len(deltas), str(getattr(self.wrapped, "model", "")))


async def _sent(wrapped, push, args: tuple, kwargs: dict) -> dict:
    """The live call, streamed if the model streams: its response as logged. An API
    error is a tool failure, transient for a 429 or a 5xx."""
    try:
        response = await _streamed(wrapped, push, args, kwargs)
        if response is None:  # a model that does not stream
            response = await wrapped.get_response(*args, **kwargs)
    except openai.APIStatusError as exc:
        if exc.status_code == 429 or exc.status_code >= 500:
            raise TransientToolError(str(exc)) from exc
        raise PermanentToolError(str(exc)) from exc
    return {"output": to_jsonable_python(response.output),
            "usage": to_jsonable_python(response.usage),
            "response_id": response.response_id}


async def _streamed(wrapped, push, args: tuple, kwargs: dict) -> ModelResponse | None:
    """The wrapped model's streamed call as `get_response` would have answered it;
    None if the model does not stream."""
    events, call = None, _StreamedCall(push)
    try:
        events = wrapped.stream_response(*args[:2], _with_usage(args[2]), *args[3:], **kwargs)
        async for event in events:
            call.take(event)
    except NotImplementedError:
        if call.started:
            raise
        return None
    finally:
        if events is not None and hasattr(events, "aclose"):
            await events.aclose()
    return call.response()


def _with_usage(settings):
    """The settings asking for the usage chunk of a chat completions stream, which a
    non-streamed response always has (unless the agent's settings say no)."""
    if getattr(settings, "include_usage", False) is None:
        return dataclasses.replace(settings, include_usage=True)
    return settings


@dataclasses.dataclass
class _StreamedCall:
    """What a streamed call said so far: its text is pushed as it comes."""

    push: Callable[[str], None]
    started: bool = False
    final: Any = None
    done_items: list = dataclasses.field(default_factory=list)

    def take(self, event) -> None:
        self.started = True
        kind = getattr(event, "type", None)
        if kind == "response.output_text.delta":
            if event.delta:
                self.push(event.delta)
        elif kind == "response.output_item.done":
            self.done_items.append(event.item)
        elif kind == "response.completed":
            self.final = event.response
        elif kind in _FAILED:
            raise ModelBehaviorError(f"the model's stream ended with {kind}")

    def response(self) -> ModelResponse:
        """What the SDK's own streamed run makes of the completed event
        (agents/run_internal/run_loop.py), and what get_response returns."""
        final = self.final
        if final is None:
            raise ModelBehaviorError("the model's stream ended without a response")
        return ModelResponse(
            output=list(final.output) or self.done_items,
            usage=_sdk_usage_of(final.usage) if final.usage else Usage(requests=1),
            response_id=None if final.id == FAKE_RESPONSES_ID else final.id)


def _text_deltas(response: ModelResponse) -> list[ResponseTextDeltaEvent]:
    """A delta event per text of the response's messages, numbered from 0."""
    deltas = []
    for index, item in enumerate(response.output):
        for part_index, part in enumerate(getattr(item, "content", None) or []):
            if getattr(item, "type", None) == "message" and \
                    getattr(part, "type", None) == "output_text" and part.text:
                deltas.append(ResponseTextDeltaEvent(
                    type="response.output_text.delta", item_id=item.id, output_index=index,
                    content_index=part_index, delta=part.text, logprobs=[],
                    sequence_number=len(deltas)))
    return deltas


def _completed(response: ModelResponse, sequence: int, model: str) -> ResponseCompletedEvent:
    used = response.usage
    totals = ResponseUsage(input_tokens=used.input_tokens, output_tokens=used.output_tokens,
                           total_tokens=used.total_tokens,
                           input_tokens_details=used.input_tokens_details,
                           output_tokens_details=used.output_tokens_details)
    _attach_usage(totals, used)  # the SDK reads back this very usage
    return ResponseCompletedEvent(
        type="response.completed", sequence_number=sequence,
        response=Response(id=response.response_id or FAKE_RESPONSES_ID, created_at=time.time(),
                          model=model, object="response", output=list(response.output),
                          tool_choice="auto", tools=[], parallel_tool_calls=False,
                          usage=totals))
