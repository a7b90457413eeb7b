"""Template helpers of the ledger, budgets and approvals."""

from django import template
from django.utils import timezone

from runs.durable.policies import approvals as a
from runs.durable.policies.budget import money

from .. import ledger, selectors

register = template.Library()


@register.filter
def dollars(value) -> str:
    try:
        return money(float(value or 0))
    except (TypeError, ValueError):
        return "—"


@register.filter
def run_cost(run) -> str:
    usage = getattr(run, "usage", None) or {}
    return money(float(usage.get("cost") or 0)) if usage.get("calls") else "—"


@register.filter
def run_tokens(run) -> str:
    usage = getattr(run, "usage", None) or {}
    return f"{int(usage.get('prompt_tokens') or 0) + int(usage.get('completion_tokens') or 0):,}"


@register.filter
def budget_text(budget) -> str:
    budget = budget or {}
    parts = []
    if budget.get("cost") is not None:
        parts.append(money(budget["cost"]))
    if budget.get("tokens") is not None:
        parts.append(f"{int(budget['tokens']):,} tokens")
    return " and ".join(parts) or "none"


@register.simple_tag
def past_deadline(approval) -> bool:
    """A pending request whose deadline has passed: no answer can be given any more
    (services.decide_approval refuses it; the fallback applies when the run goes on)."""
    return (approval.status == a.PENDING and approval.deadline is not None
            and approval.deadline <= timezone.now())


@register.simple_tag(takes_context=True)
def can_approve(context, approval) -> bool:
    return approval.status == a.PENDING and selectors.may_approve(context["request"].user, approval)


@register.simple_tag(takes_context=True)
def budget_panel(context, run) -> dict:
    """What the run page's budget panel shows."""
    user = context["request"].user
    attention = run.attention or {}
    held = run.status == "needs_attention" and attention.get("kind") == "budget"
    waiting = run.status == "waiting" and attention.get("kind") == "approval"
    approvals = selectors.run_approvals(run)
    totals = ledger.run_totals(run)
    budget = run.budget or {}
    share = None
    if budget.get("cost"):
        share = min(100.0, 100.0 * totals["cost"] / float(budget["cost"]))
    elif budget.get("tokens"):
        share = min(100.0, 100.0 * totals["tokens"] / float(budget["tokens"]))
    may_raise = run.status not in ("succeeded", "failed", "cancelled") and (
        selectors.is_operator(user) or run.owner_id == user.pk)
    return {"totals": totals, "budget": budget, "held": held, "attention": attention,
            "waiting_approval": waiting, "approvals": approvals, "share": share,
            "may_raise": may_raise,
            "owner_limit": selectors.owner_limit(user) if not selectors.is_operator(user) else None,
            "current": next((x for x in approvals if x.pk == attention.get("approval")), None)
            if waiting else None}


@register.inclusion_tag("budgets/_costs_summary.html", takes_context=True)
def costs_summary(context, runs=None):
    """Today's and all-time spend of the runs a page is about (the dashboard: all)."""
    from runs.models import Run
    runs = Run.objects.all() if runs is None else runs
    return {"today": ledger.today(runs), "total": ledger.grand_total(runs),
            "pending": len(selectors.inbox(context["request"].user))}


@register.filter
def thousands(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def arguments_json(value) -> str:
    """A call's arguments as the person approving reads them: JSON, indented."""
    import json
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=repr)
