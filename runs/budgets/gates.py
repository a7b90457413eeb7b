"""The gates a worker asks before each call (runs/durable/policies/gates.py), built from the
database: the run's own budget, its owner's and its agent's quotas, approvals, limits."""

from __future__ import annotations

import logging
import threading
import time

from django.contrib.auth import get_user_model
from django.db import DatabaseError

from runs.durable.errors import AgentNotFoundError
from runs.durable.policies import approvals as a
from runs.durable.policies import budget as b
from runs.durable.policies import gates as g
from runs.durable.registry import registry as default_registry
from runs.worker.db import lent_connection

from . import quotas
from .book import OrmApprovalBook
from .models import ApprovalPolicy, Budget

log = logging.getLogger(__name__)
PERIOD_WORDS = {"day": "daily", "month": "monthly"}


class QuotaGate:
    """Per-user and per-agent budgets per day or month (`Budget` rows), shared by every
    run of their user or agent on every worker: the rule of runs/durable/policies/budget.py,
    with the calls in flight kept in the database (runs/budgets/quotas.py), so that a
    quota is overshot by at most one call in total. A call that must wait for calls of
    other runs waits in its thread, looking again every POLL seconds; after PATIENCE
    the run waits durably instead (a timer), and gives its worker up."""

    every_attempt = True  # an attempt after a retry wait is a call in flight again
    POLL = 0.5
    PATIENCE = 30.0
    STORE_RETRY = 5.0

    def __init__(self):
        self._reserved: set[str] = set()  # keys of the calls this process reserved
        self._lock = threading.Lock()

    def check(self, call: g.GateCall) -> g.Decision:
        if call.tool.meter is None:
            return g.ALLOW
        owner_id = int(call.run.owner) if str(call.run.owner).isdigit() else None
        try:
            ids = quotas.quota_ids(owner_id=owner_id, agent=call.run.agent)
            if not ids:
                return g.ALLOW
            admitted = quotas.admit(ids, run_id=call.run.id, epoch=call.run.epoch,
                                    key=call.key, tool=call.tool.name, owner_id=owner_id,
                                    agent=call.run.agent)
        except DatabaseError as exc:
            # closed, not open: a quota nobody can count lets nothing through; the run
            # waits (durably) and asks again
            return g.Hold("budget", f"waiting for the quotas: the database did not answer "
                                    f"({exc})"[:500], {"why": "store", "tool": call.tool.name},
                          wait=True, wake_at=time.time() + self.STORE_RETRY)
        verdict, quota = admitted.verdict, admitted.quota
        if verdict.what == b.GO:
            with self._lock:
                self._reserved.add(call.key)
            return g.ALLOW
        scope = f"{PERIOD_WORDS[quota.period]} {quota.scope} {_subject(quota)}"
        details = {"scope": quota.scope, "period": quota.period, "budget_id": quota.pk,
                   "tool": call.tool.name}
        if verdict.what == b.REACHED:
            return g.Hold("budget", b.budget_message(verdict.unit, verdict.spent, verdict.limit,
                                                     scope=scope),
                          {**details, "unit": verdict.unit, "spent": verdict.spent,
                           "limit": verdict.limit})
        return g.Wait(f"waiting for {verdict.in_flight} call(s) in flight under the {scope} "
                      f"budget", {**details, "in_flight": verdict.in_flight},
                      poll=self.POLL if admitted.others else 1.0, patience=self.PATIENCE)

    def ended(self, tool, record, holder: int) -> None:
        self._release(record.key)

    def withdraw(self, call: g.GateCall) -> bool:
        return self._release(call.key)

    def _release(self, key: str) -> bool:
        with self._lock:
            if key not in self._reserved:
                return False
            self._reserved.discard(key)
        try:
            quotas.release(key)
        except DatabaseError:
            log.warning("the quota reservation of %s was not taken back; it ends with the "
                        "run's lease", key)
        return True


def _subject(quota: Budget) -> str:
    if quota.scope == "agent":
        return quota.agent
    return get_user_model().objects.filter(pk=quota.user_id).values_list(
        "username", flat=True).first() or "?"


POLICY_CACHE_SECONDS = 5.0
NEVER = -1e9
_policies: dict = {"at": NEVER, "by_tool": {}}
_policies_lock = threading.Lock()
_reading = threading.Lock()  # one thread reads the policies again; the others go on


def enabled_policies() -> dict[str, list[a.ApprovalRule]]:
    """tool -> the enabled policies' rules, read at most every POLICY_CACHE_SECONDS: every
    new call of every run asks, and a crawl makes hundreds a second. When they are due
    again, one thread reads them while the others keep the rules read last: a thousand
    runs' threads had all read them at once, each on a connection of the worker's pool."""
    with _policies_lock:
        at, by_tool = _policies["at"], _policies["by_tool"]
    if time.monotonic() - at < POLICY_CACHE_SECONDS:
        return by_tool
    # never read (or forgotten: forget_policies): wait for a read in progress
    if not _reading.acquire(blocking=at == NEVER):
        return by_tool
    try:
        with _policies_lock:
            if _policies["at"] != at:  # read by the thread this one waited for
                return _policies["by_tool"]
        by_tool = {}
        with lent_connection():  # a run's thread keeps no wrapper of its own for it
            for policy in ApprovalPolicy.objects.filter(enabled=True).select_related("group"):
                by_tool.setdefault(policy.tool, []).append(policy.rule())
        with _policies_lock:
            _policies.update(at=time.monotonic(), by_tool=by_tool)
        return by_tool
    finally:
        _reading.release()


def forget_policies() -> None:
    with _policies_lock:
        _policies["at"] = NEVER


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
