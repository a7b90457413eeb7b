"""Quotas shared by runs (users' and agents' `Budget` rows) and their calls in flight.

A user's runs run on many worker processes and hosts at once, so a quota's calls in
flight are kept where all of them look: a metered call let through under a quota
leaves a `QuotaReservation` (its estimate) and takes it back once it ended (its usage
is in the ledger by then). The decision is the engine's rule (runs/durable/policies/budget.py:
go while the call fits beside the calls in flight, alone it may cross the limit, else
wait), made under a lock of the quota's rows, so that two workers never both take the
room that is left: `SELECT ... FOR UPDATE` on PostgreSQL; on SQLite the transaction is
IMMEDIATE (settings: one writer at a time). A quota is thus overshot by at most one
call in total, however many runs and hosts share it.

A reservation counts while its run has the epoch that made it and a live lease: a
worker that dies mid-call frees its reservation when its lease runs out, or at once
when another worker claims the run; the next decision under that quota deletes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from runs.durable.policies import budget as b

from . import ledger
from .models import Budget, QuotaReservation


@dataclass(frozen=True)
class Admission:
    verdict: b.Verdict
    quota: Budget | None = None  # the quota that reached or makes the call wait
    others: bool = False         # WAIT: calls of other runs (maybe other hosts) in flight


def quota_ids(*, owner_id: int | None, agent: str) -> list[int]:
    """The quotas over a run of `owner_id` and `agent` (one unlocked look-up: most
    metered calls have none)."""
    rows = Budget.objects.filter(scope="agent", agent=agent)
    if owner_id is not None:
        rows = rows | Budget.objects.filter(scope="user", user_id=owner_id)
    return list(rows.values_list("pk", flat=True))


def admit(ids: list[int], *, run_id: str, epoch: int, key: str, tool: str,
          owner_id: int | None, agent: str) -> Admission:
    """Decide about the call `key` under the quotas `ids`; if it may go, reserve its
    estimate under each of them, in the same transaction."""
    now = timezone.now()
    with transaction.atomic():
        # in the order of their keys, so that two deciders never wait for each other
        locked = list(Budget.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
        flying = _in_flight(locked, key, now)
        waits, estimates = [], {}
        for quota in sorted(locked, key=_shown_first):
            spent, largest = ledger.spend_and_largest(
                ledger.period_start(quota.period), tool=tool,
                owner_id=owner_id if quota.scope == "user" else None,
                agent=agent if quota.scope == "agent" else "")
            verdict = b.verdict({"cost": spent["cost"], "prompt_tokens": spent["tokens"]},
                                quota.limits(), [est for _, est in flying[quota.pk]], largest)
            if verdict.what == b.REACHED:
                return Admission(verdict, quota)
            if verdict.what == b.WAIT:
                waits.append((quota, verdict))
            estimates[quota.pk] = largest or {}
        if waits:
            quota, verdict = waits[0]
            others = any(owner != run_id for owner, _ in flying[quota.pk])
            return Admission(verdict, quota, others)
        QuotaReservation.objects.filter(key=key).delete()  # the same call, asking again
        QuotaReservation.objects.bulk_create(
            QuotaReservation(budget_id=quota.pk, run_id=run_id, key=key, epoch=epoch,
                             cost=estimates[quota.pk].get("cost"),
                             tokens=estimates[quota.pk].get("tokens"), created_at=now)
            for quota in locked)
    return Admission(b.Verdict(b.GO))


def release(key: str) -> None:
    """The call `key` is no longer in flight."""
    QuotaReservation.objects.filter(key=key).delete()


def _shown_first(quota: Budget) -> tuple:
    return (quota.scope, quota.agent, quota.user_id or 0, quota.period)


def _in_flight(quotas: list[Budget], key: str, now) -> dict[int, list[tuple[str, dict]]]:
    """quota -> (run, estimate) of each call in flight under it but `key`'s own; the
    reservations that no longer count (their run moved on or lost its lease) go."""
    flying: dict[int, list[tuple[str, dict]]] = {quota.pk: [] for quota in quotas}
    dead = []
    rows = (QuotaReservation.objects.filter(budget__in=quotas).exclude(key=key)
            .values_list("pk", "budget_id", "run_id", "epoch", "cost", "tokens",
                         "run__epoch", "run__lease_expires_at"))
    for pk, quota_id, run_id, epoch, cost, tokens, run_epoch, lease in rows:
        if run_epoch != epoch or lease is None or lease <= now:
            dead.append(pk)
            continue
        flying[quota_id].append((run_id, {"cost": cost, "tokens": tokens}))
    if dead:
        QuotaReservation.objects.filter(pk__in=dead).delete()
    return flying
