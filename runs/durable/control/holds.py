"""A run's budget changed, and a run held by a gate let go (docs/budgets.md,
docs/approvals.md): the operators' side of the policies (runs/durable/policies/)."""

from __future__ import annotations

from .. import events
from .. import records as r
from ..errors import InputValidationError, InvalidTransitionError
from ..policies.budget import reached
from .act import act

BUDGET_UNITS = ("cost", "tokens")
MAX_BUDGET = {"cost": 1e9, "tokens": 1e15}


def check_budget(budget) -> dict | None:
    """A budget as stored: {"cost": dollars, "tokens": n}, either optional; {} or None
    is no budget. Anything else is an InputValidationError."""
    if budget is None:
        return None
    if not isinstance(budget, dict) or not budget.keys() <= set(BUDGET_UNITS):
        raise InputValidationError("a budget is {\"cost\": dollars, \"tokens\": n}", field="budget")
    checked = {}
    for unit, value in budget.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not (0 <= value <= MAX_BUDGET[unit]) or value != value:
            raise InputValidationError(f"the budget's {unit} must be a number from 0 to "
                                       f"{MAX_BUDGET[unit]:.0e}", field=f"budget.{unit}")
        checked[unit] = int(value) if unit == "tokens" else round(float(value), 6)
    return checked or None


def set_budget(store, run_id: str, *, budget, actor: str, reason: str = "") -> r.RunRecord:
    """Change a run's budget. A run held on it (budget reached) goes on where it stopped
    when the new budget is no longer reached; a run that is not held keeps its course."""
    budget = check_budget(budget)

    def decide(run):
        if run.status in r.FINAL_STATUSES:
            raise InvalidTransitionError("change the budget of", run.status)
        details["before"] = run.budget
        attention = run.attention or {}
        held = (run.status == r.NEEDS_ATTENTION and attention.get("kind") == "budget"
                and attention.get("scope") == "run")
        if held and reached(run.usage, budget) is None:
            return r.OperatorCommit(
                run=r.RunChanges(budget=budget, status=r.QUEUED, attention=None),
                events=[events.budget(budget), events.status(r.QUEUED, reason="budget raised")],
                take_over=True)
        return r.OperatorCommit(run=r.RunChanges(budget=budget), events=[events.budget(budget)])
    details = {"budget": budget}
    return act(store, run_id, "budget", actor, reason, decide, details=details)


def lift_hold(store, run_id: str, *, kind: str, actor: str, reason: str = "",
              match: dict | None = None, action: str = "lift_hold",
              details: dict | None = None) -> r.RunRecord | None:
    """Queue a run held by a gate (attention of `kind` whose fields include `match`), so
    that its gates are asked again: after an approval's answer, or a quota raised. None
    (nothing written) when the run is not held so: it will ask when it gets there."""
    def decide(run):
        attention = run.attention or {}
        if run.status not in (r.WAITING, r.NEEDS_ATTENTION) or attention.get("kind") != kind \
                or any(attention.get(k) != v for k, v in (match or {}).items()):
            raise _NotHeld()
        return r.OperatorCommit(
            run=r.RunChanges(status=r.QUEUED, attention=None, wake_at=None),
            events=[events.status(r.QUEUED, reason=f"{kind}: {action}")], take_over=True)
    try:
        return act(store, run_id, action, actor, reason, decide, details=details)
    except _NotHeld:
        return None


class _NotHeld(Exception):
    pass
