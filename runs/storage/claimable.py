"""The claim rule (runs/durable/claimable.py) as a Django Q and as SQL, derived from
its one expression tree: every store and the worker runtime ask the same question.
The tree names RunRecord fields, which are the Run model's field and column names."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from runs.durable import claimable as c


def as_q(now: datetime, term=c.RULE) -> Q:
    if isinstance(term, (c.AllOf, c.AnyOf)):
        parts = [as_q(now, t) for t in term.terms]
        combined = parts[0]
        for part in parts[1:]:
            combined = (combined & part) if isinstance(term, c.AllOf) else (combined | part)
        return combined
    if isinstance(term, c.In):
        return Q(**{f"{term.field}__in": list(term.values)})
    if isinstance(term, c.IsNull):
        return Q(**{f"{term.field}__isnull": True})
    if isinstance(term, c.Due):
        return Q(**{f"{term.field}__lte": now})
    raise TypeError(f"not a term of the claim rule: {term!r}")


def as_sql(term=c.RULE) -> tuple[str, list]:
    """(SQL condition on the runs_run row, its parameters). A time is compared with `now`,
    which stands in the parameters as NOW: `with_now` puts the statement's time there."""
    if isinstance(term, (c.AllOf, c.AnyOf)):
        parts = [as_sql(t) for t in term.terms]
        joiner = " AND " if isinstance(term, c.AllOf) else " OR "
        return "(" + joiner.join(sql for sql, _ in parts) + ")", [p for _, ps in parts for p in ps]
    if isinstance(term, c.In):
        return f"{term.field} IN ({', '.join(['%s'] * len(term.values))})", list(term.values)
    if isinstance(term, c.IsNull):
        return f"{term.field} IS NULL", []
    if isinstance(term, c.Due):
        return f"{term.field} <= %s", [NOW]
    raise TypeError(f"not a term of the claim rule: {term!r}")


class _Now:
    """Stands for the statement's `now` among the parameters as_sql returns."""

    def __repr__(self):
        return "NOW"


NOW = _Now()


def with_now(params: list, now: datetime) -> list:
    return [now if p is NOW else p for p in params]
