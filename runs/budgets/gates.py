"""The gates a worker asks before each call (runs/durable/gates.py), built from the
database: the run's own budget, its owner's and its agent's quotas, approvals."""

from __future__ import annotations

import threading
import time

from django.contrib.auth import get_user_model
from django.db.models import Q

from runs.durable import approvals as a
from runs.durable import gates as g
from runs.durable.errors import AgentNotFoundError
from runs.durable.registry import registry as default_registry

from . import ledger
from .book import OrmApprovalBook
from .models import ApprovalPolicy, Budget

PERIOD_WORDS = {"day": "daily", "month": "monthly"}


class QuotaGate:
    """Per-user and per-agent budgets per day or month (`Budget` rows)."""

    def check(self, call: g.GateCall) -> g.Decision:
        if call.tool.meter is None:
            return g.ALLOW
        owner_id = int(call.run.owner) if str(call.run.owner).isdigit() else None
        # one query for both scopes: a metered call with no quota costs one round trip
        mine = Q(scope="agent", agent=call.run.agent)
        if owner_id is not None:
            mine |= Q(scope="user", user_id=owner_id)
        quotas = list(Budget.objects.filter(mine))
        for quota in quotas:
            spent = ledger.spend_since(ledger.period_start(quota.period),
                                       owner_id=owner_id if quota.scope == "user" else None,
                                       agent=call.run.agent if quota.scope == "agent" else "")
            over = g.reached({"cost": spent["cost"], "prompt_tokens": spent["tokens"]},
                             quota.limits())
            if over is None:
                continue
            unit, used, limit = over
            scope = f"{PERIOD_WORDS[quota.period]} {quota.scope} {_subject(quota)}"
            return g.Hold("budget", g.budget_message(unit, used, limit, scope=scope),
                          {"scope": quota.scope, "period": quota.period, "unit": unit,
                           "spent": used, "limit": limit, "budget_id": quota.pk,
                           "tool": call.tool.name})
        return g.ALLOW


def _subject(quota: Budget) -> str:
    if quota.scope == "agent":
        return quota.agent
    return get_user_model().objects.filter(pk=quota.user_id).values_list(
        "username", flat=True).first() or "?"


POLICY_CACHE_SECONDS = 5.0
_policies: dict = {"at": -1e9, "by_tool": {}}
_policies_lock = threading.Lock()


def enabled_policies() -> dict[str, list[a.ApprovalRule]]:
    """tool -> the enabled policies' rules, read at most every POLICY_CACHE_SECONDS: every
    new call of every run asks, and a crawl makes hundreds a second."""
    with _policies_lock:
        if time.monotonic() - _policies["at"] < POLICY_CACHE_SECONDS:
            return _policies["by_tool"]
    by_tool: dict[str, list[a.ApprovalRule]] = {}
    for policy in ApprovalPolicy.objects.filter(enabled=True).select_related("group"):
        by_tool.setdefault(policy.tool, []).append(policy.rule())
    with _policies_lock:
        _policies.update(at=time.monotonic(), by_tool=by_tool)
    return by_tool


def forget_policies() -> None:
    with _policies_lock:
        _policies["at"] = -1e9


def rules_for(run, tool) -> list[a.ApprovalRule]:
    """The agent's own rules (in code), then the enabled policies (the admin)."""
    try:
        agent_cls = type(default_registry.get(run.agent))
    except AgentNotFoundError:  # the session reports it before any call
        agent_cls = None
    rules = [a.ApprovalRule.of({**rule, "agent": run.agent})
             for rule in getattr(agent_cls, "approvals", ()) if rule.get("tool") == tool.name]
    rules += [rule for rule in enabled_policies().get(tool.name, ())
              if rule.agent in ("", run.agent)]
    return rules


def worker_gates() -> tuple:
    from runs.limits.gates import limit_gate

    # the limit last: a call another gate holds must not take a slot of a shared limit
    return (g.RunBudgetGate(), QuotaGate(),
            a.ApprovalGate(OrmApprovalBook(), rules_for), limit_gate())
