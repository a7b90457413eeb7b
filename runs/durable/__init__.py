"""agentops' durable execution engine. Framework-free: it imports nothing from Django.

Public API (docs/ARCHITECTURE.md): agent, Agent, Done, tool, Retry, RunContext, Call (a call of
ctx.parallel, docs/parallel.md) and the errors
(docs/retries.md: retry policies, TransientToolError and PermanentToolError).
"""

from .children import Child
from .config import WorkerConfig
from .context import RunContext
from .errors import (
                     AgentNotFoundError,
                     ApprovalDeniedError,
                     CallRefusedError,
                     CheckpointNotFoundError,
                     ChildFailedError,
                     DurableError,
                     EffectNotFoundError,
                     FencedError,
                     InDoubtEffectError,
                     InputValidationError,
                     InvalidTransitionError,
                     NonDeterminismError,
                     PermanentToolError,
                     RunNotFoundError,
                     StateNotSerializableError,
                     StateTooLargeError,
                     ToolFailedError,
                     TransientToolError,
)
from .executor import execute_run
from .parallel import Call
from .registry import (
                     Agent,
                     AgentRegistry,
                     Done,
                     Retry,
                     Tool,
                     agent,
                     registry,
                     tool,
                     validate_inputs,
)
from .session import Outcome
from .step import idempotency_key

__all__ = [
    "Agent", "AgentNotFoundError", "Call", "AgentRegistry", "ApprovalDeniedError", "CallRefusedError", "CheckpointNotFoundError", "Child", "ChildFailedError", "Done",
    "DurableError", "EffectNotFoundError", "FencedError", "InDoubtEffectError",
    "InputValidationError", "InvalidTransitionError", "NonDeterminismError", "Outcome",
    "PermanentToolError", "Retry", "RunContext", "RunNotFoundError", "StateNotSerializableError",
    "StateTooLargeError", "Tool", "ToolFailedError", "TransientToolError", "WorkerConfig",
    "agent", "execute_run", "idempotency_key", "registry", "tool", "validate_inputs",
]
