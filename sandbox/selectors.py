"""Reads of the sandbox: listings, totals and the audit report."""

from collections import Counter

from django.db.models import Count, Max, Sum

from .models import IdempotencyKey, KeyCall, Notification, Record, SiteGeneration

REPORT_LIMIT = 200  # rows per table on the report; totals are always complete


def current_generation() -> int:
    row = SiteGeneration.objects.filter(pk=1).first()
    return row.generation if row else 0


def records_list(*, prefix: str = "", limit: int = 1000) -> tuple[int, list[dict]]:
    records = Record.objects.order_by("id")
    if prefix:
        records = records.filter(key__startswith=prefix)
    rows = [
        {"id": r.pk, "key": r.key, "unit": r.unit, "payload": r.payload, "created": r.created_at}
        for r in records[:limit]
    ]
    return records.count(), rows


def duplicate_units(limit: int = REPORT_LIMIT) -> tuple[int, dict[str, int]]:
    """Units of work written under more than one key: (extra records, {unit: records})."""
    units = (
        Record.objects.exclude(unit="")
        .values("unit")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by("-n", "unit")
    )
    extra = sum(row["n"] - 1 for row in units)
    return extra, {row["unit"]: row["n"] for row in units[:limit]}


def keys_with_several_records() -> dict[str, int]:
    # The unique constraint on Record.key makes this empty; the report checks anyway.
    rows = Record.objects.values("key").annotate(n=Count("id")).filter(n__gt=1)
    return {row["key"]: row["n"] for row in rows}


def record_stats() -> dict:
    counters = ("calls", "replays", "conflicts", "mismatches", "rejected")
    totals = KeyCall.objects.aggregate(
        max_calls=Max("calls"), **{f"sum_{name}": Sum(name) for name in counters}
    )
    duplicates, units = duplicate_units()
    return {
        "records": Record.objects.count(),
        "keys": KeyCall.objects.count(),
        "keys_done": IdempotencyKey.objects.filter(state=IdempotencyKey.DONE).count(),
        "keys_processing": IdempotencyKey.objects.filter(state=IdempotencyKey.PROCESSING).count(),
        "calls": totals["sum_calls"] or 0,
        "replays": totals["sum_replays"] or 0,
        "conflicts": totals["sum_conflicts"] or 0,
        "mismatches": totals["sum_mismatches"] or 0,
        "rejected": totals["sum_rejected"] or 0,
        "max_calls_per_key": totals["max_calls"] or 0,
        "keys_called_more_than_once": KeyCall.objects.filter(calls__gt=1).count(),
        "duplicates": duplicates,
        "duplicate_units": units,
    }


def notifications_summary(*, limit: int = 1000) -> dict:
    per_unit = dict(
        Notification.objects.values_list("unit").annotate(n=Count("id")).order_by("-n", "unit")
    )
    rows = [
        {
            "id": n.pk,
            "body": n.body,
            "unit": n.unit,
            "idempotency_key": n.idempotency_key,
            "created": n.created_at,
        }
        for n in Notification.objects.order_by("id")[:limit]
    ]
    return {
        "count": Notification.objects.count(),
        "per_unit": per_unit,
        "units_notified_more_than_once": sorted(u for u, n in per_unit.items() if n > 1 and u),
        "notifications": rows,
    }


def calls_per_key(limit: int = REPORT_LIMIT) -> list[dict]:
    """Keys with the most calls first, each with its record count (0 or 1)."""
    keys = list(KeyCall.objects.order_by("-calls", "key")[:limit])
    recorded = set(
        Record.objects.filter(key__in=[k.key for k in keys]).values_list("key", flat=True)
    )
    return [
        {
            "key": k.key,
            "calls": k.calls,
            "records": int(k.key in recorded),
            "replays": k.replays,
            "conflicts": k.conflicts,
            "mismatches": k.mismatches,
            "rejected": k.rejected,
            "first_seen": k.first_seen,
            "last_seen": k.last_seen,
        }
        for k in keys
    ]


def report() -> dict:
    """Everything the report page and ``manage.py sandbox report`` show.

    ``ok`` is False when the outside world saw a duplicated side effect: a unit
    of work recorded under two keys, or a key with more than one record.
    """
    stats = record_stats()
    several = keys_with_several_records()
    notifications = notifications_summary(limit=0)
    histogram = Counter(dict(KeyCall.objects.values_list("calls").annotate(n=Count("id"))))
    problems = []
    if stats["duplicates"]:
        problems.append(f"{stats['duplicates']} duplicate record(s) for the same unit")
    if several:
        problems.append(f"{len(several)} key(s) with more than one record")
    return {
        "ok": not problems,
        "problems": problems,
        "records": stats,
        "calls_histogram": {str(calls): n for calls, n in sorted(histogram.items())},
        "calls_per_key": calls_per_key(),
        "keys_with_several_records": several,
        "notifications": {
            "count": notifications["count"],
            "per_unit": dict(list(notifications["per_unit"].items())[:REPORT_LIMIT]),
            "units_notified_more_than_once": notifications["units_notified_more_than_once"],
        },
        "generation": current_generation(),
    }
