"""Bring an agent written with an SDK: `durable(agent, name=..., version=...)`.

    from pydantic_ai import Agent
    from runs.adapters import durable

    agent = Agent("openai:gpt-5", instructions="...")      # or an agents.Agent
    durable(agent, name="researcher", version="1")          # now launchable as a run

A `pydantic_ai.Agent` goes to `runs.adapters.pydantic_ai`, an OpenAI Agents SDK
`agents.Agent` to `runs.adapters.openai_agents` (docs/adapters.md). Neither SDK is
imported until an agent of it is wrapped: the app runs without them.
"""

from __future__ import annotations

from .effects import current_effect, idempotency_key, made_by
from .errors import NoIdempotencyKeyError


def durable(sdk_agent, *, name: str, version: str, **options):
    """Register an SDK agent as the agentops agent `name` (see the adapter modules for
    the options: non_idempotent=, input_tools=, deps= / context=, input_schema=...)."""
    if made_by(sdk_agent, "pydantic_ai", "Agent"):
        from .pydantic_ai import durable as wrap
    elif made_by(sdk_agent, "agents", "Agent"):
        from .openai_agents import durable as wrap
    else:
        raise TypeError(f"durable() takes a pydantic_ai.Agent or an OpenAI Agents SDK "
                        f"agents.Agent, not {type(sdk_agent).__module__}."
                        f"{type(sdk_agent).__qualname__}")
    return wrap(sdk_agent, name=name, version=version, **options)


__all__ = ["durable", "current_effect", "idempotency_key", "NoIdempotencyKeyError"]
