"""The adapters' own errors (docs/adapters.md)."""

from __future__ import annotations

from runs.durable.errors import DurableError, PermanentToolError


class NoIdempotencyKeyError(DurableError, RuntimeError):
    """`idempotency_key()` was called where a call has no key: inside a tool marked
    `non_idempotent`, or outside any tool call of a durable agent.

    A non-idempotent tool's call is never repeated silently (one cut short by a crash is
    in doubt and waits for an operator), so it has no repeat to dedupe and no key. A
    RuntimeError too, as the bare error it replaces was."""

    def __init__(self, tool: str | None):
        self.tool = tool  # the tool's name as the agent declares it; None: outside any
        if tool is None:
            message = ("idempotency_key() was called outside a tool call of a durable "
                       "agent: only a call made as an effect has a key")
        else:
            message = (f"idempotency_key() was called in the tool {tool!r}, which is "
                       f"non_idempotent: it has no idempotency key, because a call of it "
                       f"is never retried silently (one cut short is in doubt and waits "
                       f"for an operator), so there is no repeat to dedupe. Take "
                       f"{tool!r} out of non_idempotent= if the service it calls dedupes "
                       f"on a key; current_effect() gives the run id without one")
        super().__init__(message)


class ModelRetryRequested(PermanentToolError):
    """A Pydantic AI tool raised `ModelRetry`: a message for the model, the call's known
    outcome. Logged as the call's failure (never retried), so that the logged result of
    a tool call is only ever what the tool returned, and raised to the SDK as
    `ModelRetry` again on every replay."""
