"""Which limits are configured: AGENTOPS["LIMITS"] (env AGENTOPS_LIMITS, JSON) with the
admin's `Limit` rows winning. Read at most every RULES_CACHE_SECONDS: every call of a
limited tool asks, and an unconfigured limit must cost nothing."""

from __future__ import annotations

import threading
import time

from django.conf import settings

from runs.durable.policies import limits as lim

RULES_CACHE_SECONDS = 5.0
_cache: dict = {"at": -1e9, "rules": {}}
_lock = threading.Lock()


def from_settings() -> dict[str, lim.LimitRule]:
    return {name: lim.LimitRule.of(name, dict(data))
            for name, data in (settings.AGENTOPS.get("LIMITS") or {}).items()}


def rules() -> dict[str, lim.LimitRule]:
    with _lock:
        if time.monotonic() - _cache["at"] < RULES_CACHE_SECONDS:
            return _cache["rules"]
    from django.db import DatabaseError

    from .models import Limit

    merged = from_settings()
    try:
        rows = list(Limit.objects.all())
    except DatabaseError:
        # the database away (a restart): the rules last read, asked again next call; a
        # call's end must not turn into a database error of its own
        with _lock:
            return _cache["rules"] or merged
    for row in rows:
        if row.enabled:
            merged[row.name] = row.rule()
        else:
            merged.pop(row.name, None)
    with _lock:
        _cache.update(at=time.monotonic(), rules=merged)
    return merged


def rule(name: str) -> lim.LimitRule | None:
    return rules().get(name)


def forget() -> None:
    """After an edit in this process (the admin): the next call reads the rules."""
    with _lock:
        _cache["at"] = -1e9
