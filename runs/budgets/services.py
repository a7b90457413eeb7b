"""Writes: answer an approval, change a run's budget, set a quota. Each checks the
rule in selectors.py first and changes nothing when it refuses."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from runs import selectors as run_selectors
from runs import services as run_services
from runs.durable import control
from runs.durable import records as r
from runs.durable.errors import InputValidationError, InvalidTransitionError
from runs.durable.policies import approvals as a
from runs.models import AuditEntry, Run

from . import selectors
from .models import Approval, Budget, BudgetChange


def trusted(user) -> bool:
    """The shell without --user acts as a name ("cli"), trusted as the other shell
    controls are; a user is held to the rules."""
    return isinstance(user, str)


def decide_approval(*, approval_id: str, user, approve: bool, reason: str = "") -> Approval:
    if trusted(user):
        row = Approval.objects.select_related("run").filter(pk=approval_id).first()
        if row is None:
            raise InputValidationError(f"no approval request {approval_id!r}")
    else:
        row = selectors.approval_for_user(user, approval_id)
        if not selectors.may_approve(user, row):
            raise PermissionDenied(f"This request is for {row.approvers} to answer.")
    status = a.APPROVED if approve else a.DENIED
    actor = run_services._actor(user)
    # One statement judges and records the answer on the database's clock: pending and
    # before the deadline, or nothing is written. The web process's clock plays no part
    # (several web hosts, one clock), and decided_at < deadline holds for every answer
    # that counts, which the gate checks again (runs/durable/policies/approvals.py).
    in_time = Q(deadline__isnull=True) | Q(deadline__gt=Now())
    answered = Approval.objects.filter(in_time, pk=row.pk, status=a.PENDING).update(
        status=status, decided_by=actor, decided_at=Now(), reason=reason[:2000])
    if not answered:
        raise _refusal(row)
    action = "approve" if approve else "deny"
    details = {"approval": row.pk, "tool": row.tool, "args_preview": row.args_preview[:500]}
    record = control.lift_hold(run_services.store(), row.run_id, kind="approval",
                               match={"approval": row.pk}, actor=actor, reason=reason,
                               action=action, details=details)
    if record is None:  # not waiting on it (paused meanwhile): it finds the answer later
        AuditEntry.objects.create(run_id=row.run_id, actor=actor, action=action, reason=reason,
                                  after=details)
    else:
        run_services._after(record)
    row.refresh_from_db()
    return row


def _refusal(row: Approval) -> Exception:
    """Why an answer was not recorded: the request was answered (or expired) already,
    or its deadline passed while it was pending."""
    row.refresh_from_db()
    fallback = row.rule.get("fallback", "deny")
    if row.status in (a.PENDING, a.EXPIRED) and row.deadline is not None:
        return a.ApprovalExpiredError(row.tool, row.deadline.timestamp(), fallback)
    return InvalidTransitionError("answer", row.status, "the request was already answered")


def set_run_budget(*, run_id: str, user, budget, reason: str = "") -> Run:
    """`budget`: {"cost": dollars, "tokens": n}. The run's owner within their quota, or
    an operator; a run held on its budget goes on if the new one is not reached."""
    budget = control.check_budget(budget)
    if not trusted(user):
        run = run_selectors.run_get_for_user(user, run_id)
        refusal = selectors.budget_refusal(user, run, budget)
        if refusal:
            raise PermissionDenied(refusal)
    record = control.set_budget(run_services.store(), run_id, budget=budget,
                                actor=run_services._actor(user), reason=reason)
    return run_services._after(record)


def set_quota(*, user, scope: str, period: str, subject, cost=None, tokens=None,
              reason: str = "") -> Budget | None:
    """Set (or, with neither limit, remove) a user's or an agent's quota. Operators
    only. Runs held on it are queued again: their gates decide with the new limits."""
    if not selectors.is_operator(user):
        raise PermissionDenied("Only an operator can set quotas.")
    if scope not in ("user", "agent") or period not in ("day", "month"):
        raise InputValidationError("scope must be user or agent, period day or month")
    limits = control.check_budget({"cost": cost, "tokens": tokens}) or {}
    where = {"scope": scope, "period": period,
             **({"user": subject, "agent": ""} if scope == "user" else {"agent": subject})}
    name = subject.get_username() if scope == "user" else subject
    with transaction.atomic():
        budget = Budget.objects.select_for_update().filter(**where).first()
        before = budget.limits() if budget else {}
        if not limits:
            if budget is not None:
                budget.delete()
            budget = None
        else:
            budget = budget or Budget(**where)
            budget.cost, budget.tokens = limits.get("cost"), limits.get("tokens")
            budget.save()
        BudgetChange.objects.create(actor=run_services._actor(user), budget=budget,
                                    subject=f"{scope} {name} per {period}", before=before,
                                    after=limits, reason=reason)
    held = Run.objects.filter(status=r.NEEDS_ATTENTION, attention__kind="budget",
                              attention__scope=scope)
    held = held.filter(owner=subject) if scope == "user" else held.filter(agent=subject)
    for run_id in held.values_list("pk", flat=True)[:1000]:
        record = control.lift_hold(run_services.store(), run_id, kind="budget",
                                   match={"scope": scope}, actor=run_services._actor(user),
                                   reason=reason, action="quota",
                                   details={"quota": f"{scope} {name} per {period}", **limits})
        if record is not None:
            run_services._after(record)
    return budget
