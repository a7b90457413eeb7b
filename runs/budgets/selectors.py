"""Who may answer an approval and who may change a budget: the rules, once.

A user who may not see a run does not learn its approvals exist (404); one who may
see it but is not among the approvers its policy names gets a 403 and changes nothing."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now
from django.http import Http404

from runs import selectors as run_selectors
from runs.durable import records as r
from runs.durable.policies import approvals as a

from .models import Approval, Budget

INBOX_LIMIT = 200


def is_operator(user) -> bool:
    return run_selectors.can_see_all(user)


def may_approve(user, approval: Approval) -> bool:
    if not (user and user.is_authenticated):
        return False
    kind, _, group = approval.approvers.partition(":")
    if kind == "owner":
        return approval.run.owner_id == user.pk
    if kind == "operators":
        return is_operator(user)
    if kind == "group":
        return user.groups.filter(name=group).exists()
    return False


def approval_for_user(user, approval_id: str) -> Approval:
    """The approval, if the user may see its run (else 404): whether they may answer it
    is `may_approve`'s to say."""
    row = Approval.objects.select_related("run").filter(pk=approval_id).first()
    if row is None or not run_selectors.run_visible(user, row.run_id) and not may_approve(user, row):
        raise Http404("No such approval.")
    return row


def inbox(user, *, limit: int = INBOX_LIMIT) -> list[Approval]:
    """The pending requests this user may answer, oldest first (the first asked waits
    longest), of runs that are not over. One past its deadline is not listed: it can no
    longer be answered (its fallback applies when the run goes on)."""
    in_time = Q(deadline__isnull=True) | Q(deadline__gt=Now())
    pending = (Approval.objects.filter(in_time, status=a.PENDING)
               .exclude(run__status__in=r.FINAL_STATUSES)
               .select_related("run", "run__owner").order_by("requested_at"))
    if not is_operator(user):
        # owners' requests of their own runs, and any naming a group or operators
        pending = pending.exclude(rule__approvers="owner", run__owner__isnull=True)
    return [row for row in pending[:limit * 5] if may_approve(user, row)][:limit]


def run_approvals(run) -> list[Approval]:
    return list(Approval.objects.filter(run_id=run.pk).order_by("-requested_at")[:20])


def owner_limit(user) -> dict:
    """The most an owner may set their own run's budget to: their own quotas' limits,
    else the site's (AGENTOPS["OWNER_RUN_BUDGET_LIMIT"] dollars)."""
    limits: dict = {}
    for quota in Budget.objects.filter(scope="user", user_id=user.pk):
        for unit, value in quota.limits().items():
            limits[unit] = min(value, limits.get(unit, value))
    limits.setdefault("cost", float(settings.AGENTOPS["OWNER_RUN_BUDGET_LIMIT"]))
    return limits


def budget_refusal(user, run, budget: dict | None) -> str:
    """Why this user may not give this run this budget, or "" when they may."""
    if is_operator(user):
        return ""
    if run.owner_id != user.pk:
        return "Only the run's owner or an operator can change its budget."
    if not budget:
        return "Only an operator can take a run's budget away."
    limits = owner_limit(user)
    for unit, value in budget.items():
        if unit in limits and value > limits[unit]:
            shown = f"${limits[unit]:,.2f}" if unit == "cost" else f"{int(limits[unit]):,} tokens"
            return f"Your quota lets you set a run's {unit} budget up to {shown}; ask an operator."
    if "cost" not in budget and "tokens" not in limits:
        return "Set a cost budget within your quota; only an operator can lift it."
    return ""
