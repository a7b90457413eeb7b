"""Shared set-up of the operator benchmarks: a PostgreSQL database of their own."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_django(name: str, fresh: bool = True) -> str:
    """Point Django at a bench database (created, migrated); return its URL."""
    base = os.environ.get("BENCH_PG_BASE", "postgres://postgres@127.0.0.1:5432")
    url = f"{base}/{name}"
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    sys.path.insert(0, str(ROOT))
    import psycopg

    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and fresh:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return url


def percentile(values, pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values_ms) -> str:
    return (f"n={len(values_ms)} p50={percentile(values_ms, 50):.1f} ms "
            f"p95={percentile(values_ms, 95):.1f} ms max={max(values_ms):.1f} ms "
            f"mean={statistics.mean(values_ms):.1f} ms")
