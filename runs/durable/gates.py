"""Pre-call gates: the one place where a call can be stopped before it reaches the world.

`ctx.call` asks the session's gates (`WorkerConfig.gates`), in order, about every
new call: after the effect boundary (pause, cancel, shutdown, fencing) and before
anything is written at the call's position. A replayed call is never asked again:
its outcome is in the log. A gate answers with one of three decisions:

  Allow(note)   go on. The note (which approval let it through) is kept on the event.
  Hold(...)     not now. The run gives up its worker and its lease and waits
                durably: in `needs_attention` (a budget reached: a person must raise it)
                or `waiting` (an approval: a person answers, or the timer at
                `wake_at` fires). Nothing is recorded at the position, so once the
                run is queued again its step is replayed up to this call (every
                call before it returns its logged result: none is made twice) and
                the gates are asked again. A hold holds no worker slot and survives
                restarts, exactly as `wait_for_input` and retry timers do.
  Refuse(...)   never. The call is not made; the refusal is logged as the call's
                outcome, so a replay sees the same: `deny` raises `CallRefusedError`
                (for approvals, its subclass `ApprovalDeniedError`) in the step, a
                `ToolFailedError` the agent may handle; `skip` makes the call return
                `result`.

Budgets (`RunBudgetGate` below; the per-user and per-agent quotas in
runs/budgets/gates.py), approvals (runs/durable/approvals.py) and shared limits
per tool or provider (runs/durable/limits.py) are gates. A gate may also have
`ended(tool, record, holder)` and `attempt_failed(tool, record, exc)`: the limits count
calls in flight and hear a provider's Retry-After through them; one with
`every_attempt = True` is also asked before the attempt after a durable retry wait
(another request to the provider), the others decide about a call once. A gate must
decide from the call, the run and its own records, quickly, and must be safe to
ask again about the same call (after a hold, a crash or a replay): the same call
is the same run, key and digest. Calls of `on_resume` (never replayed, so they
cannot be held) are not gated. See docs/budgets.md and docs/approvals.md.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from . import events
from . import records as r
from .errors import ApprovalDeniedError, CallRefusedError
from .registry import Tool


@dataclass
class GateCall:
    """A call about to be made, as a gate sees it."""

    run: r.RunRecord
    tool: Tool
    args: tuple
    kwargs: dict
    record: r.EffectRecord  # position, key, digest and preview of the call
    store: Any              # to read the run again (a budget raised since the claim)

    @property
    def key(self) -> str:
        return self.record.key

    @property
    def digest(self) -> str:
        return self.record.digest

    @cached_property
    def arguments(self) -> dict:
        """The call's arguments by name (as the tool's signature binds them)."""
        return named_arguments(self.tool, self.args, self.kwargs)


def named_arguments(tool: Tool, args, kwargs) -> dict:
    try:
        return dict(inspect.signature(tool.fn).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):  # a call its own tool would refuse: the values alone
        return {"args": list(args), **kwargs}


@dataclass(frozen=True)
class Allow:
    note: dict | None = None


ALLOW = Allow()


@dataclass(frozen=True)
class Hold:
    kind: str              # the run's attention kind: "budget", "approval"
    message: str           # what the pages show: "budget reached: $1.02 of $1.00"
    details: dict = field(default_factory=dict)
    wait: bool = False     # True: `waiting` (an answer or the timer); False: `needs_attention`
    wake_at: float | None = None


@dataclass(frozen=True)
class Refuse:
    kind: str
    message: str
    fallback: str = "deny"  # "deny": CallRefusedError in the step; "skip": return `result`
    result: Any = None
    details: dict = field(default_factory=dict)


Decision = Allow | Hold | Refuse
FALLBACKS = ("deny", "skip")


class Gate(Protocol):
    def check(self, call: GateCall) -> Decision:
        """Decide about one call. Raising is a bug of the gate: the step fails."""


class Held(BaseException):
    """A gate held the call: the session hands the run back (session._hold).

    A BaseException so that an agent's `except Exception` cannot swallow it."""

    def __init__(self, hold: Hold):
        self.hold = hold


def decide(gates, call: GateCall) -> Decision:
    """The first gate that does not allow the call decides; else it is allowed, with
    every gate's note."""
    notes: dict = {}
    for gate in gates:
        decision = gate.check(call)
        if not isinstance(decision, Allow):
            return decision
        notes.update(decision.note or {})
    return Allow(notes or None)


# --- the run's own budget ------------------------------------------------------------------
def money(dollars: float) -> str:
    """$1.02, or four decimals under a dollar: a model call costs fractions of a cent."""
    dollars = float(dollars)
    if dollars == 0 or abs(dollars) >= 1:
        return f"${dollars:,.2f}"
    return f"${dollars:.4f}"


def spent_in(usage: dict | None, unit: str) -> float:
    usage = usage or {}
    if unit == "cost":
        return float(usage.get("cost") or 0)
    return float((usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0))


def reached(usage: dict | None, budget: dict | None) -> tuple[str, float, float] | None:
    """(unit, spent, limit) of the first limit of `budget` that `usage` reached, or None.

    The cost of a call is known only once it returned, so the rule is: a metered call
    is made only while the spend is under every limit. A budget can thus be overshot
    by at most the one call that crossed it, and the next one waits."""
    for unit in ("cost", "tokens"):
        limit = (budget or {}).get(unit)
        if limit is None:
            continue
        spent = spent_in(usage, unit)
        if spent >= float(limit):
            return unit, spent, float(limit)
    return None


def budget_message(unit: str, spent: float, limit: float, scope: str = "") -> str:
    what = f"{scope} budget reached" if scope else "budget reached"
    if unit == "cost":
        return f"{what}: {money(spent)} of {money(limit)}"
    return f"{what}: {int(spent):,} of {int(limit):,} tokens"


class RunBudgetGate:
    """The run's own budget (`RunRecord.budget`) against its ledger (`RunRecord.usage`)."""

    def check(self, call: GateCall) -> Decision:
        if call.tool.meter is None:
            return ALLOW
        if reached(call.run.usage, call.run.budget) is None:
            return ALLOW
        # Raised since this worker claimed the run? Read it once more before holding.
        call.run.budget = call.store.get(call.run.id).budget
        over = reached(call.run.usage, call.run.budget)
        if over is None:
            return ALLOW
        unit, spent, limit = over
        return Hold("budget", budget_message(unit, spent, limit),
                    {"scope": "run", "unit": unit, "spent": spent, "limit": limit,
                     "tool": call.tool.name})


DEFAULT_GATES = (RunBudgetGate(),)


# --- what ctx.call does with a decision ---------------------------------------------------
REFUSED = "refused"  # the resolution of a call a gate refused


def check_call(session, tool: Tool, record: r.EffectRecord, args, kwargs) -> None:
    """Ask the session's gates about a call about to be made (nothing is written at its
    position yet). Returns to go on; raises Held (the run waits) or the refusal's
    error; a skip leaves `record` logged as done with the skip's result."""
    if not session.config.gates:
        return
    decision = decide(session.config.gates,
                      GateCall(session.run, tool, args, kwargs, record, session.store))
    if isinstance(decision, Allow):
        if decision.note:
            session.emit(events.gate("allow", record, decision.note))
        return
    if isinstance(decision, Hold):
        raise Held(decision)
    now = time.time()
    record.started_at, record.finished_at = record.started_at or now, now
    record.resolution, record.attempts = REFUSED if decision.fallback == "deny" else "skip", 0
    if decision.fallback == "skip":
        record.status, record.result, record.error = r.DONE, decision.result, None
        session.log_effect(record)
        return
    error_type = ApprovalDeniedError if decision.kind == "approval" else CallRefusedError
    record.status, record.result = r.ERROR, None
    record.error = {"type": error_type.__name__, "message": decision.message[:2000],
                    "permanent": True, "gate": decision.kind, **decision.details}
    session.log_effect(record)
    raise refusal(record)


def check_attempt(session, tool: Tool, record: r.EffectRecord, args, kwargs) -> None:
    """The next attempt of a call after a durable retry wait: the gates that count every
    request reaching the world (`every_attempt = True`: a shared limit) are asked again;
    the others decided about the call once. Raises Held (the record stays `retrying`)."""
    asked = tuple(gate for gate in session.config.gates if getattr(gate, "every_attempt", False))
    if not asked:
        return
    decision = decide(asked, GateCall(session.run, tool, args, kwargs, record, session.store))
    if isinstance(decision, Hold):
        raise Held(decision)


def call_ended(session, tool: Tool, record: r.EffectRecord) -> None:
    """An attempt of a call was made (returned, failed, or left for a retry): gates that
    count calls in flight (runs/durable/limits.py) hear of it, and from whom (the
    session's epoch: a takeover's attempt is another request)."""
    for gate in session.config.gates:
        hook = getattr(gate, "ended", None)
        if hook is not None:
            hook(tool, record, session.epoch)


def attempt_failed(session, tool: Tool, record: r.EffectRecord, exc: BaseException) -> None:
    """An attempt of a call failed: a gate may learn from it (a provider's Retry-After)."""
    for gate in session.config.gates:
        hook = getattr(gate, "attempt_failed", None)
        if hook is not None:
            hook(tool, record, exc)


def refusal(record: r.EffectRecord) -> CallRefusedError:
    """The error a refused call raises, the first time and on every replay."""
    error = record.error or {}
    error_type = ApprovalDeniedError if error.get("type") == "ApprovalDeniedError" else \
        CallRefusedError
    return error_type(record.tool, error.get("message", ""), gate=error.get("gate", ""))
