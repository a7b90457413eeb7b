"""Reads of the ledger: totals per run, user, agent and day, for pages and CSV.

A run's totals are on its row (`Run.usage`, summed by the engine as it logs each
metered call); a day's are summed from the effects' usage by the day their call
finished (UTC). Both count each logged call once: replays write nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db.models import Count, F, FloatField, IntegerField, Max, Q, QuerySet, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, TruncDate

from runs.models import Effect, Run

GROUPS = ("run", "user", "agent", "day")
ZERO = {"cost": 0.0, "prompt_tokens": 0, "completion_tokens": 0, "calls": 0, "tokens": 0}


def _sums(prefix: str) -> dict:
    return {
        "cost": Coalesce(Sum(Cast(KT(f"{prefix}__cost"), FloatField())), 0.0),
        "prompt_tokens": Coalesce(Sum(Cast(KT(f"{prefix}__prompt_tokens"), IntegerField())), 0),
        "completion_tokens": Coalesce(Sum(Cast(KT(f"{prefix}__completion_tokens"),
                                               IntegerField())), 0),
    }


def _row(values: dict) -> dict:
    row = {**ZERO, **{k: v for k, v in values.items() if v is not None}}
    row["cost"] = float(row["cost"])
    row["tokens"] = int(row["prompt_tokens"]) + int(row["completion_tokens"])
    return row


def run_totals(run: Run) -> dict:
    return _row(run.usage or {})


FAMILY_DEPTH = 20  # generations of child runs summed; deeper trees are cut short


def family_totals(run: Run) -> dict:
    """The run's own totals, its descendants' (children, theirs...), and both added up
    (docs/children.md): one query per generation."""
    children = ZERO
    ids = [run.pk]
    for _ in range(FAMILY_DEPTH):
        generation = list(Run.objects.filter(parent_id__in=ids).values_list("id", "usage"))
        if not generation:
            break
        children = _added(children, *(_row(usage or {}) for _, usage in generation))
        ids = [run_id for run_id, _ in generation]
    own = run_totals(run)
    return {"own": own, "children": children, "total": _added(own, children)}


def _added(*rows: dict) -> dict:
    return {key: sum(row[key] for row in rows) for key in ZERO}


def metered_effects(runs: QuerySet | None = None) -> QuerySet:
    effects = Effect.objects.filter(usage__isnull=False, superseded=False)
    if runs is not None:
        effects = effects.filter(run_id__in=runs.values("pk"))
    return effects


def _metered_since(since: datetime, owner_id: int | None, agent: str) -> QuerySet:
    effects = Effect.objects.filter(usage__isnull=False, finished_at__gte=since)
    if owner_id is not None:
        effects = effects.filter(run__owner_id=owner_id)
    if agent:
        effects = effects.filter(run__agent=agent)
    return effects


def spend_since(since: datetime, *, owner_id: int | None = None, agent: str = "") -> dict:
    """What the metered calls of a user's (or an agent's) runs cost since `since`."""
    return _row(_metered_since(since, owner_id, agent).aggregate(**_sums("usage"),
                                                                 calls=Count("pk")))


def spend_and_largest(since: datetime, *, tool: str, owner_id: int | None = None,
                      agent: str = "") -> tuple[dict, dict | None]:
    """`spend_since`, and the largest call of `tool` among them ({"cost", "tokens"}, None
    if there was none): the estimate of its next call (runs/durable/policies/budget.py). One
    query."""
    of_tool = Q(tool=tool)
    tokens = (Cast(KT("usage__prompt_tokens"), IntegerField())
              + Cast(KT("usage__completion_tokens"), IntegerField()))
    values = _metered_since(since, owner_id, agent).aggregate(
        **_sums("usage"), calls=Count("pk"),
        largest_cost=Max(Cast(KT("usage__cost"), FloatField()), filter=of_tool),
        largest_tokens=Max(tokens, filter=of_tool))
    cost, most = values.pop("largest_cost"), values.pop("largest_tokens")
    largest = None if most is None else {"cost": float(cost or 0), "tokens": int(most)}
    return _row(values), largest


def period_start(period: str, now: datetime | None = None) -> datetime:
    now = (now or datetime.now(dt_timezone.utc)).astimezone(dt_timezone.utc)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.replace(day=1) if period == "month" else day


def totals(runs: QuerySet, group: str, *, limit: int = 500) -> list[dict]:
    """Rows of {key, label, cost, prompt_tokens, completion_tokens, tokens, calls}, the
    most expensive first (days: newest first)."""
    if group == "day":
        rows = (metered_effects(runs).annotate(day=TruncDate("finished_at"))
                .values("day").annotate(**_sums("usage"), calls=Count("pk")).order_by("-day"))
        return [{"key": str(row["day"]), "label": str(row["day"]), **_row(row)}
                for row in rows[:limit]]
    runs = runs.exclude(usage={})
    if group == "run":
        rows = runs.order_by("-created_at").values("pk", "agent", "owner__username", "status",
                                                   "created_at", "usage")[:limit]
        return [{"key": row["pk"], "label": f"{row['agent']} {row['pk'][:8]}",
                 "agent": row["agent"], "owner": row["owner__username"] or "",
                 "status": row["status"], "created_at": row["created_at"],
                 **_row(row["usage"] or {})} for row in rows]
    field = "owner__username" if group == "user" else "agent"
    rows = (runs.values(label=F(field)).annotate(**_sums("usage"),
                                                 calls_=Coalesce(Sum(Cast(KT("usage__calls"),
                                                                          IntegerField())), 0),
                                                 runs=Count("pk"))
            .order_by("-cost"))
    return [{"key": row["label"] or "", "label": row["label"] or "(no owner)",
             "runs": row["runs"], **_row({**row, "calls": row["calls_"]})}
            for row in rows[:limit]]


def grand_total(runs: QuerySet) -> dict:
    return _row(runs.aggregate(**_sums("usage"),
                               calls=Coalesce(Sum(Cast(KT("usage__calls"), IntegerField())), 0)))


def today(runs: QuerySet) -> dict:
    since = period_start("day")
    return _row(metered_effects(runs).filter(finished_at__gte=since)
                .aggregate(**_sums("usage"), calls=Count("pk")))


def last_days(runs: QuerySet, days: int = 14) -> list[dict]:
    since = period_start("day") - timedelta(days=days - 1)
    return [row for row in totals(runs, "day") if row["key"] >= since.date().isoformat()]
