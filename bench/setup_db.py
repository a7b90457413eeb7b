"""Benchmarks run against their own PostgreSQL database, migrated fresh; and a run taken
to its end there in the bench's own process."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentops_bench"


def setup_django(url: str | None = None, fresh: bool = True) -> str:
    """Point Django at the bench database (created and migrated if needed); return its URL."""
    url = url or os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    sys.path.insert(0, str(ROOT))
    import psycopg

    base, name = url.rsplit("/", 1)
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


def raw_insert_floor(url: str, rows: int = 2000) -> float:
    """Seconds per one-row INSERT + COMMIT in autocommit: the floor a durable write can reach."""
    import time

    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, "
                     "run text, seq int, payload jsonb)")
        for i in range(100):  # warm up
            conn.execute("INSERT INTO bench_floor (run, seq, payload) VALUES (%s, %s, %s)",
                         ("warm", i, '{"ok": true}'))
        start = time.perf_counter()
        for i in range(rows):
            conn.execute("INSERT INTO bench_floor (run, seq, payload) VALUES (%s, %s, %s)",
                         ("floor", i, '{"ok": true}'))
        elapsed = time.perf_counter() - start
        conn.execute("DROP TABLE bench_floor")
    return elapsed / rows


def execute_to_end(store, run_id: str, config, registry) -> str:
    """The run's outcome once its slices stop yielding (each slice claims it again)."""
    from runs.durable import Outcome, execute_run

    outcome = Outcome.YIELDED
    while outcome == Outcome.YIELDED:
        outcome = execute_run(store, run_id, config, registry=registry)
    return outcome
