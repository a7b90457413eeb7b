"""Shared set-up of the live-page benchmarks (live_latency.py, fanout.py): a fresh
PostgreSQL database of their own, a bench user with a session, a real Daphne, runs
written to through the ORM store (the engine's write path, notify included), and
websocket clients speaking the run page's protocol (runs/live/consumers.py)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def setup_django(name: str) -> str:
    """Point Django at a fresh bench database (created, migrated); return its URL."""
    base = os.environ.get("BENCH_PG_BASE", "postgres://postgres@127.0.0.1:5432")
    url = f"{base}/{name}"
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    import psycopg

    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return url


def bench_user_cookie(username: str = "bench-viewer") -> tuple[object, str]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username=username)
    client = Client()
    client.force_login(user)
    return user, client.cookies["sessionid"].value


def create_runs(user, count: int) -> list[str]:
    """Runs that exist but that no worker executes: the bench writes their events."""
    import tests.workload_agents  # noqa: F401  (the "ticker" agent)
    from runs.durable import control
    from runs.storage import database_store

    return [control.launch(database_store(), agent="ticker", inputs={}, owner=str(user.pk)).id
            for _ in range(count)]


def stamping_store(stamp, wake: bool):
    """An OrmStore whose notify hook first calls stamp(): the store calls it right after
    the COMMIT (at once on PostgreSQL's one-statement path, on_commit otherwise), then,
    if `wake`, wakes viewers as the worker does (notify_run)."""
    from runs.storage import database_store
    from runs.wakeups import notify_run

    def notify(run_id, seq):
        stamp(seq)
        if wake:
            notify_run(run_id, seq)

    return database_store(notify=notify)


def write_events(store, run_id: str, messages: list[dict]) -> None:
    """One engine commit of log events, in autocommit as the worker makes it."""
    from runs.durable import records as r

    store.commit(run_id, 0, r.Commit(events=[("log", m) for m in messages]))


def parse_at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def percentile(values, pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values_ms) -> str:
    if not values_ms:
        return "n=0"
    return (f"n={len(values_ms)} p50={percentile(values_ms, 50):.1f} ms "
            f"p95={percentile(values_ms, 95):.1f} ms p99={percentile(values_ms, 99):.1f} ms "
            f"max={max(values_ms):.1f} ms mean={statistics.mean(values_ms):.1f} ms")


def ws_url(port: int, run_id: str | None) -> str:
    return f"ws://127.0.0.1:{port}/ws/runs/{run_id + '/' if run_id else ''}"


async def open_socket(port: int, run_id: str, cookie: str, after: int):
    """A run-page socket that said hello; returns it after the welcome."""
    import websockets

    socket = await websockets.connect(
        ws_url(port, run_id), origin="http://127.0.0.1",
        additional_headers={"Cookie": f"sessionid={cookie}"}, max_size=None, compression=None,
        open_timeout=30, ping_interval=None)
    await socket.send(json.dumps({"type": "hello", "after": after}))
    welcome = json.loads(await socket.recv())
    assert welcome["type"] == "welcome", welcome
    return socket


def wall() -> float:
    return time.time()
