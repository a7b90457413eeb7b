"""Exceptions of the durable engine.

Each carries the fields an operator or a test needs, not just a message. The last
four (Suspend, Stop, StoreFailure, Held) are not errors but the engine's own ways of
leaving a step; they are BaseExceptions, so that an agent's `except Exception`
cannot swallow them.
"""


class DurableError(Exception):
    """Base class of every engine error."""


class AgentNotFoundError(DurableError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"unknown agent {name!r}: no agent of that name is registered")


class InputValidationError(DurableError):
    """The inputs of a launch (or the answer to wait_for_input) fail the schema."""

    def __init__(self, message: str, *, field: str = ""):
        self.field = field
        super().__init__(message)


class StateNotSerializableError(DurableError):
    """A state (or tool result) holds a value that JSON cannot store."""

    def __init__(self, path: str, value_type: str):
        self.path = path
        self.value_type = value_type
        super().__init__(
            f"state is not serialisable: {path or '<root>'} holds a {value_type}; "
            "keep only JSON types (dict, list, str, int, float, bool, None) in the state"
        )


class StateTooLargeError(DurableError):
    def __init__(self, size: int, limit: int):
        self.size = size
        self.limit = limit
        super().__init__(f"state is {size} bytes, over the limit of {limit} bytes")


class NonDeterminismError(DurableError):
    """Replay met a call that differs from the one recorded at the same position."""

    def __init__(self, *, position: tuple, recorded: dict, attempted: dict):
        self.position = position
        self.recorded = recorded
        self.attempted = attempted
        branch, step_no, seq = position
        super().__init__(
            f"non-deterministic replay at branch {branch}, step {step_no}, call {seq}: "
            f"recorded {_describe(recorded)}, attempted {_describe(attempted)}; "
            "check that the agent's step is deterministic (use ctx.now()/ctx.random(), "
            "and change the agent's version when its code changes)"
        )


class InDoubtEffectError(DurableError):
    """A non-idempotent call started and may or may not have happened."""

    def __init__(self, *, position: tuple, tool: str, key: str, error: str = ""):
        self.position = position
        self.tool = tool
        self.key = key
        self.error = error  # the transient error after which nobody knows, if any
        self.record = None  # the logged intent, set by the context
        what = (f"failed with {error!r}, which may have been after it reached the target"
                if error else "started but its outcome was never logged")
        super().__init__(
            f"call {tool} (key {key}) {what}; it is not idempotent, so it is not retried: "
            "an operator must decide (done / retry / skip)"
        )


class ToolFailedError(DurableError):
    """A tool's call failed for good. Replay re-raises it.

    `permanent` says why: True when the tool said retrying cannot help (a
    `PermanentToolError`: a 404, a rejected request), False when its retry policy
    ran out or an operator gave up on a fault that might still pass. Only the
    first means "this item does not exist"; an agent should not record the
    second as a fact about the item.
    """

    def __init__(self, tool: str, error_type: str, message: str, attempts: int = 1, *,
                 permanent: bool = False):
        self.tool = tool
        self.error_type = error_type
        self.message = message
        self.attempts = attempts
        self.permanent = permanent
        super().__init__(f"tool {tool} failed after {attempts} attempt(s): {error_type}: {message}")


class ChildFailedError(DurableError):
    """A child run the parent waited for (ctx.wait, ctx.wait_all) failed or was cancelled.
    Logged with the wait, so a replay raises it again (docs/children.md)."""

    def __init__(self, run_id: str, agent: str, status: str, error: str | None):
        self.run_id = run_id
        self.agent = agent
        self.status = status
        self.error = error
        super().__init__(f"child run {run_id} ({agent}) {status}: {error or ''}".rstrip(": "))


class CallRefusedError(ToolFailedError):
    """A gate refused the call (runs/durable/policies/gates.py): it was not made. Logged as the
    call's outcome, so a replay raises it again. `gate` names the gate's kind."""

    def __init__(self, tool: str, message: str, *, gate: str = ""):
        self.gate = gate
        super().__init__(tool, type(self).__name__, message, 0, permanent=True)


class ApprovalDeniedError(CallRefusedError):
    """The call needed a person's approval and was denied (or its request timed out
    with the fallback deny): docs/approvals.md. The agent may handle it."""


class PermanentToolError(DurableError):
    """Raised by a tool to say: retrying will not help (the call fails at once)."""


class TransientToolError(DurableError):
    """Raised by a tool to say: this attempt failed, a later one may succeed.

    `retry_after`: seconds the other side asked us to wait (HTTP Retry-After);
    the retry policy waits that long instead of its own backoff.
    `reached_target`: whether the request may have reached the other side. A
    non-idempotent tool is retried only when it did not (connection refused, a
    429 that turned it away): an attempt that may have landed is never repeated
    without an operator.
    """

    def __init__(self, message: str, *, retry_after: float | None = None,
                 reached_target: bool = True):
        self.retry_after = retry_after
        self.reached_target = reached_target
        super().__init__(message)


class FencedError(DurableError):
    """A write was refused: another worker claimed the run (its epoch moved on)."""

    def __init__(self, run_id: str, epoch: int):
        self.run_id = run_id
        self.epoch = epoch
        super().__init__(f"run {run_id}: epoch {epoch} was fenced off by a newer owner")


class RunNotFoundError(DurableError):
    def __init__(self, run_id: str):
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r}")


class InvalidTransitionError(DurableError):
    """An operator action that the run's status does not allow."""

    def __init__(self, action: str, status: str, hint: str = ""):
        self.action = action
        self.status = status
        super().__init__(f"cannot {action} a run that is {status}" + (f": {hint}" if hint else ""))


class CheckpointNotFoundError(DurableError):
    def __init__(self, run_id: str, number: int):
        self.number = number
        super().__init__(f"run {run_id} has no checkpoint number {number}")


class EffectNotFoundError(DurableError):
    def __init__(self, run_id: str, what: str):
        super().__init__(f"run {run_id} has no in-doubt effect {what}")


def _describe(call: dict) -> str:
    if not call:
        return "nothing"
    return f"{call.get('kind', 'call')} {call.get('tool', '?')}({call.get('args_preview', '')})"


class StatePatchError(InputValidationError):
    """A JSON Patch (RFC 6902) that does not apply to the state it is meant for: a path
    that is not there (or whose parent is not, for "add"), a failed "test", a malformed
    operation, or a result that is not a JSON object. `field` is the operation's path."""


class StaleEditError(DurableError):
    """An edit was prepared on a checkpoint that is no longer the run's latest."""

    def __init__(self, run_id: str, expected: int, latest: int):
        self.run_id = run_id
        self.expected = expected
        self.latest = latest
        super().__init__(f"the state changed since it was shown: the edit was made on "
                         f"checkpoint {expected}, the latest is now {latest}; look again")


# --- the engine's own stops: a step left for the session to act on -----------------------
class Suspend(BaseException):
    """The run gives up its worker until a timer fires or a user answers: the session
    writes `records` and `events` with the run waiting (until `wake_at`, None: an answer),
    showing `reason`."""

    def __init__(self, *, wake_at: float | None, reason: dict, records: list, events: list):
        self.wake_at = wake_at
        self.reason = reason
        self.records = records
        self.events = events


class Stop(BaseException):
    """Leave the run at an effect boundary: pause, cancel, shutdown or fenced (`why`)."""

    def __init__(self, why: str):
        self.why = why


class StoreFailure(BaseException):
    """The store failed (connection lost, database restarted) in the middle of a run.

    Whether the write landed is unknown, so the session writes nothing more and
    ends (ABANDONED). Its worker may wait for the store and take the run back at
    once (execute_run's `reconnect`); else the run is left as a crash leaves it:
    its lease runs out and the sweep hands it out again. Either way it resumes
    from what the store really holds. Not an Exception, so that the session's
    handling of the agent's own failures (which fails the run) cannot take it for a
    bug in the agent. The store's error is its `__cause__`.
    """


class Held(BaseException):
    """A gate held the call (runs/durable/policies/gates.py: a `Hold`): the session hands
    the run back, waiting as the hold says, until a person acts or its timer fires."""

    def __init__(self, hold):
        self.hold = hold
