"""Pre-call gates: the one place where a call can be stopped before it reaches the world.

`ctx.call` asks the session's gates (`WorkerConfig.gates`), in order, about every
new call: after the effect boundary (pause, cancel, shutdown, fencing) and before
anything is written at the call's position (the engine asks them through
runs/durable/gatekeeper.py, at each moment of a call in one pass). A replayed call is
never asked again: its outcome is in the log. A gate answers with one of three decisions:

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
runs/budgets/gates.py), approvals (runs/durable/policies/approvals.py) and shared limits
per tool or provider (runs/durable/policies/limits.py) are gates. A gate may also have
`ended(tool, record, holder)` and `attempt_failed(tool, record, exc)`: the limits and
budgets count calls in flight and the limits hear a provider's Retry-After through
them; one with `every_attempt = True` (those that count calls in flight) is also asked
before an attempt after a retry wait (another request to the provider, a call in
flight again), the others decide about a call once. A gate must
decide from the call, the run and its own records, quickly, and must be safe to
ask again about the same call (after a hold, a crash or a replay): the same call
is the same run, key and digest. Calls of `on_resume` (never replayed, so they
cannot be held) are not gated. See docs/budgets.md and docs/approvals.md.

A fourth answer is for the calls in flight:

  Wait(...)     not yet, but soon: other calls let through and not ended yet may use
                what a budget has left (runs/durable/policies/budget.py). The call waits in
                its thread (a parallel sibling does not hold the run) until a call in
                flight ends, or `poll` seconds, and the gates are asked again; nothing
                is written meanwhile. A wait longer than its `patience` (the calls
                may be another worker's) becomes a Hold with a timer.

A gate that counts a call it let through has `withdraw(call) -> bool`: a later gate
that does not allow the call (or a wait) takes it back (True: it had counted it), since
the call is not made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from .. import clock
from .. import records as r
from ..registry import Tool
from .budget import (
    GO,
    REACHED,
    InFlight,
    Verdict,
    budget_message,
    waiters,
)


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
        return self.tool.arguments(self.args, self.kwargs)


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


@dataclass(frozen=True)
class Wait:
    message: str           # what the run shows if the wait becomes a hold
    details: dict = field(default_factory=dict)
    poll: float = 1.0      # asked again at the latest after this (another process's call)
    patience: float | None = None  # then a Hold with a timer; None: as long as it takes
    kind: str = "budget"

    def as_hold(self) -> Hold:
        return Hold(self.kind, self.message, self.details, wait=True,
                    wake_at=clock.now() + self.poll)


Decision = Allow | Hold | Refuse | Wait
FALLBACKS = ("deny", "skip")


class Gate(Protocol):
    """A gate decides with `check`. It may also have, as the module says above:
    `every_attempt = True`, `ended(tool, record, holder)`, `attempt_failed(tool, record,
    exc)` and `withdraw(call) -> bool` (runs/durable/gatekeeper.py asks them)."""

    def check(self, call: GateCall) -> Decision:
        """Decide about one call. Raising one of the worker's store faults (its database
        failing) ends the session, the run taken back (runs/durable/gatekeeper.py);
        raising anything else is a bug of the gate: the step fails."""


def decide(gates, call: GateCall) -> Decision:
    """The first gate that does not allow the call decides; else it is allowed, with
    every gate's note. The gates before it that counted the call take it back."""
    notes: dict = {}
    allowed = []
    try:
        for gate in gates:
            decision = gate.check(call)
            if not isinstance(decision, Allow):
                _withdraw(allowed, call)
                return decision
            allowed.append(gate)
            notes.update(decision.note or {})
    except BaseException:
        _withdraw(allowed, call)
        raise
    return Allow(notes or None)


def _withdraw(allowed, call: GateCall) -> None:
    """Gates that counted the call take it back; the calls waiting for it hear of it."""
    hooks = filter(None, (getattr(gate, "withdraw", None) for gate in allowed))
    if [hook for hook in hooks if hook(call)]:
        waiters.wake()


# --- the run's own budget ------------------------------------------------------------------
class RunBudgetGate:
    """The run's own budget (`RunRecord.budget`) against its ledger (`RunRecord.usage`)
    and its metered calls in flight, by the rule of runs/durable/policies/budget.py: a call that
    fits beside the calls in flight (each at the largest call of its tool seen in the
    run) goes; one that does not waits in its thread for them (a parallel sibling
    never holds the run for that); one alone may cross the limit, so the budget is
    overshot by at most one call; a reached budget holds the run for a person.

    The run has one owner at a time, so its calls in flight are this process's
    (`InFlight`). Every attempt asks again (`every_attempt`): an attempt retried after
    a wait is a call in flight again, and `ended` takes each attempt out."""

    every_attempt = True

    def __init__(self):
        self.in_flight = InFlight()

    def check(self, call: GateCall) -> Decision:
        if call.tool.meter is None or not call.run.budget:
            return ALLOW
        decided = self._admit(call)
        if decided.what == REACHED:
            # Raised since this worker claimed the run? Read it once more before holding.
            call.run.budget = call.store.get(call.run.id).budget
            decided = self._admit(call) if call.run.budget else Verdict(GO)
        if decided.what == GO:
            return ALLOW
        if decided.what == REACHED:
            return Hold("budget", budget_message(decided.unit, decided.spent, decided.limit),
                        {"scope": "run", "unit": decided.unit, "spent": decided.spent,
                         "limit": decided.limit, "tool": call.tool.name})
        return Wait(f"waiting for {decided.in_flight} call(s) in flight under the run's budget",
                    {"scope": "run", "in_flight": decided.in_flight, "tool": call.tool.name})

    def _admit(self, call: GateCall) -> Verdict:
        return self.in_flight.admit(call.run.id, call.run.epoch, call.key, call.tool.name,
                                    call.run.usage, call.run.budget)

    def ended(self, tool, record: r.EffectRecord, holder: int) -> None:
        """An attempt ended; a logged outcome's usage is in the run's ledger already."""
        if tool.meter is not None:
            self.in_flight.ended(record.key, tool.name, record.usage)

    def withdraw(self, call: GateCall) -> bool:
        return self.in_flight.ended(call.key, call.tool.name, None)


DEFAULT_GATES = (RunBudgetGate(),)
