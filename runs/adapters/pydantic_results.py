"""What a Pydantic AI tool call logs, and what a logged one gives back to the SDK.

The logged result of a tool call is the result the tool returned (as JSON), so that an
operator's answer to a call in doubt ("it happened: use this result", docs/adapters.md)
is of the same kind: what the operator enters is the tool's result. A tool's
`ModelRetry` (a message for the model, the call's known outcome) is logged as the
call's failure, `ModelRetryRequested`, and raised to the SDK as `ModelRetry` again on
every replay.

A run started before this (its state has no `plain_results`: "enveloped") logged
`{"result": r}` or `{"model_retry": m}`, and goes on logging and reading them so; an
operator's answer of another shape is the result itself.
"""

from __future__ import annotations

from typing import Any

from runs.durable.errors import ToolFailedError

from .errors import ModelRetryRequested


def returned(result: Any, *, enveloped: bool) -> Any:
    """What a call that returned `result` (as JSON) logs."""
    return {"result": result} if enveloped else result


def retried(message: str, *, enveloped: bool) -> dict:
    """What a call whose tool raised ModelRetry(message) logs (or raises: its failure)."""
    if enveloped:
        return {"model_retry": message}
    raise ModelRetryRequested(message)


def given_back(logged: Any, *, enveloped: bool) -> Any:
    """The tool's result for the SDK, from the logged one; raises ModelRetry for a
    logged model retry of an enveloped run."""
    if enveloped and isinstance(logged, dict) and len(logged) == 1:
        if "model_retry" in logged:
            from pydantic_ai import ModelRetry

            raise ModelRetry(logged["model_retry"])
        if "result" in logged:
            return logged["result"]
    return logged


def model_retry(failed: ToolFailedError):
    """The SDK's ModelRetry for a call that failed with ModelRetryRequested, else None.
    Told by the failure's type name: on a replay the exception object is gone, and the
    logged record is what is left of it."""
    if failed.error_type != ModelRetryRequested.__name__:
        return None
    from pydantic_ai import ModelRetry

    return ModelRetry(failed.message)
