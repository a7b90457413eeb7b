"""A client for any OpenAI-compatible chat completions API, as an engine tool.

The default server is the sandbox's scripted model (``<SANDBOX_URL>/llm/v1``), so
the real client code path runs offline; set ``AGENTOPS_LLM_BASE_URL``,
``AGENTOPS_LLM_MODEL`` and ``AGENTOPS_LLM_API_KEY`` (or the launch form's base URL
and model) to use a real model.

The API key is read from the settings when the call is made and is never a tool
argument: arguments are shown in the run's effect log, and keys must not be.

A completion is marked idempotent: asking again has no side effect in the world,
so a call cut short by a crash is simply made again. Its logged result is what a
replay sees, so a non-deterministic model cannot make a replay diverge.
"""

from __future__ import annotations

import dataclasses

from django.conf import settings

from runs.durable import tool

from .http import HTTP_RETRY, request, sandbox_url

# A provider answering 429 or 503 is waited out as long as the HTTP tools wait out
# a target (an hour), starting slower: its Retry-After, when sent, decides the wait.
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


@tool(idempotent=True, retry=LLM_RETRY)
def chat_completion(base_url: str, model: str, messages: list, tools: list, *,
                    idempotency_key: str) -> dict:
    """One chat completion. Returns the assistant message, finish reason and usage."""
    headers = {}
    if settings.AGENTOPS["LLM_API_KEY"]:
        headers["Authorization"] = f"Bearer {settings.AGENTOPS['LLM_API_KEY']}"
    body = {"model": model, "messages": messages}
    if tools:
        body |= {"tools": tools, "tool_choice": "auto"}
    response = request("POST", f"{base_url.rstrip('/')}/chat/completions", json=body,
                       headers=headers, idempotency_key=idempotency_key)
    completion = response.json()
    choice = completion["choices"][0]
    message = {k: v for k, v in choice["message"].items()
               if k in ("role", "content", "tool_calls") and v is not None}
    return {"message": message, "finish_reason": choice.get("finish_reason"),
            "usage": completion.get("usage") or {}}
