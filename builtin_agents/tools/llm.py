"""A client for any OpenAI-compatible chat completions API, as an engine tool.

The default server is the sandbox's scripted model (``<SANDBOX_URL>/llm/v1``), so
the real client code path runs offline; set ``AGENTOPS_LLM_BASE_URL``,
``AGENTOPS_LLM_MODEL`` and ``AGENTOPS_LLM_API_KEY`` (or the launch form's base URL
and model) to use a real model. A base URL may carry a query string (Azure's
``?api-version=``, the sandbox's ``?token_ms=``): it is kept on every request.

The API key is read from the settings when the call is made and is never a tool
argument: arguments are shown in the run's effect log, and keys must not be.

A completion is marked idempotent: asking again has no side effect in the world,
so a call cut short by a crash is simply made again. Its logged result is what a
replay sees, so a non-deterministic model cannot make a replay diverge.

It streams (``stream: true``, server-sent events): the tool yields the answer's
text as it comes, which the engine pushes to the run's viewers in batches
(docs/streaming.md), and returns the whole message, as a non-streamed call would.
"""

from __future__ import annotations

import dataclasses
import json
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from runs.durable import TransientToolError, tool

from .http import HTTP_RETRY, check, client, sandbox_url

# A provider answering 429 or 503 is waited out as long as the HTTP tools wait out
# a target (an hour), starting slower; its Retry-After, when sent, is the least it waits.
LLM_RETRY = dataclasses.replace(HTTP_RETRY, initial_interval=0.5)


def default_base_url() -> str:
    return settings.AGENTOPS["LLM_BASE_URL"] or f"{sandbox_url()}/llm/v1"


def default_model() -> str:
    return settings.AGENTOPS["LLM_MODEL"] or "scripted"


def function_spec(name: str, description: str, properties: dict) -> dict:
    """An OpenAI tool definition whose parameters are all required strings."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": sorted(properties), "additionalProperties": False}}}


def completion_usage(result: dict, arguments: dict) -> dict:
    """The ledger's view of a completion (docs/budgets.md): the model asked for (the
    price table's key: a provider may answer with a dated variant of it) and the tokens
    the server reports."""
    usage = result.get("usage") or {}
    return {"model": arguments.get("model", ""),
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0)}


def endpoint(base_url: str, path: str) -> str:
    """``path`` under ``base_url``, keeping the base URL's query string."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + path))


@tool(idempotent=True, retry=LLM_RETRY, meter=completion_usage, stream=True, limit="llm")
def chat_completion(base_url: str, model: str, messages: list, tools: list, *,
                    idempotency_key: str):
    """One chat completion, streamed. Yields the answer's text as it arrives; returns
    the assistant message, finish reason and usage."""
    import httpx  # on first use: builtin_agents/tools/http.py says why
    from httpx_sse import EventSource, SSEError

    headers = {"Accept": "text/event-stream", "Idempotency-Key": idempotency_key}
    if settings.AGENTOPS["LLM_API_KEY"]:
        headers["Authorization"] = f"Bearer {settings.AGENTOPS['LLM_API_KEY']}"
    body = {"model": model, "messages": messages, "stream": True,
            "stream_options": {"include_usage": True}}
    if tools:
        body |= {"tools": tools, "tool_choice": "auto"}
    url = endpoint(base_url, "chat/completions")
    reply = Reply()
    try:
        with client().stream("POST", url, json=body, headers=headers) as response:
            if response.status_code >= 400:
                response.read()
                check(response)
            for event in EventSource(response).iter_sse():
                if event.data.strip() == "[DONE]":
                    break
                text = reply.add(json.loads(event.data))
                if text:
                    yield text
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise TransientToolError(f"cannot connect to {url}: {exc}", reached_target=False) from exc
    except (httpx.TransportError, SSEError, ValueError) as exc:  # cut off mid-answer
        raise TransientToolError(f"{type(exc).__name__} from {url}: {exc}") from exc
    if reply.finish_reason is None:
        raise TransientToolError(f"the stream from {url} ended before the answer did")
    return reply.result()


class Reply:
    """The message a stream of chat.completion.chunk objects adds up to."""

    def __init__(self):
        self.content: list[str] = []
        self.calls: dict[int, dict] = {}
        self.finish_reason: str | None = None
        self.usage: dict = {}

    def add(self, chunk: dict) -> str:
        """Take one chunk in; return the text it adds to the answer."""
        if "error" in chunk:  # some providers report a failure mid-stream this way
            raise TransientToolError(f"the model failed mid-answer: {chunk['error']}")
        self.usage = chunk.get("usage") or self.usage
        text = ""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text += delta["content"]
            for call in delta.get("tool_calls") or []:
                known = self.calls.setdefault(call.get("index", 0), {
                    "id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                known["id"] = call.get("id") or known["id"]
                function = call.get("function") or {}
                known["function"]["name"] += function.get("name") or ""
                known["function"]["arguments"] += function.get("arguments") or ""
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        self.content.append(text)
        return text

    def result(self) -> dict:
        message = {"role": "assistant"}
        if any(self.content) or not self.calls:
            message["content"] = "".join(self.content)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return {"message": message, "finish_reason": self.finish_reason, "usage": self.usage}
