"""Fills a PostgreSQL database for bench/scale.py with COPY (psycopg's cursor.copy, not
the ORM): N runs of several owners over a year, mostly finished, a few thousand active
(running, queued, waiting, paused), some needing attention; M events, most runs a few
dozen and one run 1,000,000; a few effects and a checkpoint a run.

Every column of the real schema is written: the models' own fields name them, and a
column the fill does not choose gets its field's default, so a new column with a
default does not break the fill. Events and effects are written in run-id order, the
order of their unique indexes, so each index grows at its right edge as a worker's
inserts make it grow, not by random page splits of a cold index."""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import datetime, timedelta, timezone

# The share of runs in each status, of 1,000,000: 2,000 running, 500 queued, 1,000
# waiting, 300 paused, 500 needing attention, 3% failed, 1% cancelled; the rest succeeded.
STATUS_SHARES = (("running", 0.002), ("queued", 0.0005), ("waiting", 0.001),
                 ("paused", 0.0003), ("needs_attention", 0.0005), ("failed", 0.03),
                 ("cancelled", 0.01))
AGENTS = ("crawl", "migrate", "assistant", "ticker", "report")
FINAL = ("succeeded", "failed", "cancelled")
EVENT_KINDS = ("log", "progress", "effect", "log", "checkpoint")
BIG_EFFECTS = 10_000


def pick_status(rng: random.Random) -> str:
    x = rng.random()
    for status, share in STATUS_SHARES:
        if x < share:
            return status
        x -= share
    return "succeeded"


def column_defaults(model) -> tuple[list[str], dict]:
    """The columns COPY writes (all but an auto id) and each one's default, in text."""
    from django.db import models

    columns, defaults = [], {}
    for field in model._meta.concrete_fields:
        if isinstance(field, models.AutoField):
            continue
        columns.append(field.column)
        default = field.get_default()
        if isinstance(field, models.JSONField):
            default = None if default is None else json.dumps(default)
        defaults[field.column] = default
    return columns, defaults


def copy_rows(conn, model, rows) -> int:
    """COPY `rows` (dicts of column values, the rest defaults) into `model`'s table."""
    columns, defaults = column_defaults(model)
    n = 0
    with conn.cursor() as cur, cur.copy(
            f"COPY {model._meta.db_table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row.get(c, defaults[c]) for c in columns])
            n += 1
    return n


class Plan:
    """Who owns each run, its status, times and event count: decided once, then read by
    the runs', events' and effects' COPYs."""

    def __init__(self, runs: int, events: int, owners: list[int], big_events: int, seed=7):
        rng = random.Random(seed)
        self.now = datetime.now(timezone.utc)
        self.ids = [uuid.UUID(int=rng.getrandbits(128), version=4).hex for _ in range(runs)]
        self.owners = owners
        self.statuses = [pick_status(rng) for _ in range(runs)]
        span = timedelta(days=365).total_seconds()
        # run i was created at i/N of the way through the last year
        self.created = [self.now - timedelta(seconds=span * (runs - i) / runs)
                        for i in range(runs)]
        self.big = runs // 2  # the 1M-event run: finished, half a year ago, user 0's
        self.statuses[self.big] = "succeeded"
        rest = max(0, events - big_events)
        mean = rest / max(1, runs - 1)
        self.counts = [max(2, int(rng.uniform(0.5, 1.5) * mean)) for _ in range(runs)]
        self.counts[self.big] = big_events
        self.by_id = sorted(range(runs), key=self.ids.__getitem__)

    def owner(self, i: int) -> int:
        # user 0 has a tenth of all runs; the others share the rest
        return self.owners[0] if i % 10 == 0 or i == self.big else \
            self.owners[1 + i % (len(self.owners) - 1)]


def run_row(plan: Plan, i: int) -> dict:
    status, created = plan.statuses[i], plan.created[i]
    finished = created + timedelta(seconds=40 + i % 600) if status in FINAL else None
    row = {"id": plan.ids[i], "owner_id": plan.owner(i), "agent": AGENTS[i % len(AGENTS)],
           "agent_version": "1", "inputs": json.dumps({"url": f"https://example.com/{i}"}),
           "status": status, "step_no": plan.counts[i] // 5, "epoch": 1,
           "progress_done": 10, "progress_total": 10, "event_seq": plan.counts[i],
           "checkpoint_count": 1, "created_at": created, "updated_at": finished or created,
           "finished_at": finished, "enqueued_at": created,
           "usage": json.dumps({"cost": 0.01, "calls": 3})}
    if status == "succeeded":
        row["output"] = json.dumps({"pages": 10})
    elif status == "failed":
        row["error"] = json.dumps({"type": "ToolError", "message": "gave up"})
    elif status == "needs_attention":
        row["attention"] = json.dumps({"kind": "crash_loop", "message": "crashed 3 times"})
    elif status == "running":
        row["lease_owner"] = f"host-{i % 4}:{1000 + i % 8}:tok"
        row["lease_expires_at"] = plan.now + timedelta(hours=1)
        row["updated_at"] = plan.now
    elif status == "waiting":
        row["wake_at"] = plan.now + timedelta(minutes=5 + i % 60)
    return row


def event_lines(plan: Plan, i: int, first: int, last: int):
    """COPY text of run i's events first..last: run_id, seq, kind, data, created_at."""
    run_id, at = plan.ids[i], plan.created[i].isoformat()
    for seq in range(first, last + 1):
        kind = "status" if seq in (1, plan.counts[i]) else EVENT_KINDS[seq % len(EVENT_KINDS)]
        if kind == "checkpoint":
            data = f'{{"number": 1, "step": {seq // 5}, "branch": 1, "size": 250}}'
        elif kind == "status":
            data = f'{{"status": "{"running" if seq == 1 else plan.statuses[i]}"}}'
        else:
            data = f'{{"message": "fetched https://example.com/page/{seq}", "level": "info"}}'
        yield f"{run_id}\t{seq}\t{kind}\t{data}\t{at}\n"


def copy_events(conn, plan: Plan, report) -> int:
    from runs.models import RunEvent

    table = RunEvent._meta.db_table
    written, chunk = 0, []
    with conn.cursor() as cur, cur.copy(
            f"COPY {table} (run_id, seq, kind, data, created_at) FROM STDIN") as copy:
        for i in plan.by_id:
            # the big run in slices, so that memory stays flat
            for first in range(1, plan.counts[i] + 1, 100_000):
                last = min(plan.counts[i], first + 99_999)
                chunk.extend(event_lines(plan, i, first, last))
                if len(chunk) >= 50_000:
                    copy.write("".join(chunk))
                    written += len(chunk)
                    chunk = []
                    report(written)
        copy.write("".join(chunk))
        written += len(chunk)
    return written


def effect_rows(plan: Plan, per_run: int):
    for i in plan.by_id:
        run_id, at = plan.ids[i], plan.created[i]
        for step in range(BIG_EFFECTS if i == plan.big else per_run):
            yield {"run_id": run_id, "branch": 1, "step_no": step, "seq": 0, "kind": "call",
                   "tool": "tools.fetch", "digest": f"{step:064x}",
                   "key": f"{run_id}:1:{step}:0", "idempotent": step % 2 == 0,
                   "status": "done", "args_preview": f"https://example.com/{step}",
                   "result": '{"ok": true}', "attempts": 1, "started_at": at,
                   "finished_at": at, "worker": "host-1:1000:tok", "epoch": 1}


def checkpoint_rows(plan: Plan):
    blob = b"x" * 250
    for i in plan.by_id:
        yield {"run_id": plan.ids[i], "number": 1, "branch": 1, "step_no": 1, "codec": "json",
               "blob": blob, "size": len(blob), "reason": "step",
               "created_at": plan.created[i]}


def fill(conn, plan: Plan, effects_per_run: int) -> dict:
    """COPY everything, then ANALYZE; the seconds each table took."""
    from runs.models import Checkpoint, Effect, Run

    took = {}
    last = [time.perf_counter()]

    def report(written):
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(f"    ... {written:,} events", flush=True)

    for name, action in (
            ("runs", lambda: copy_rows(conn, Run, (run_row(plan, i) for i in plan.by_id))),
            ("events", lambda: copy_events(conn, plan, report)),
            ("effects", lambda: copy_rows(conn, Effect, effect_rows(plan, effects_per_run))),
            ("checkpoints", lambda: copy_rows(conn, Checkpoint, checkpoint_rows(plan)))):
        started = time.perf_counter()
        n = action()
        conn.commit()
        took[name] = time.perf_counter() - started
        print(f"  {name}: {n:,} rows in {took[name]:.1f} s", flush=True)
    started = time.perf_counter()
    conn.execute("ANALYZE")
    conn.commit()
    took["analyze"] = time.perf_counter() - started
    return took
