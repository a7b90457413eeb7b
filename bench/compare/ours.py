"""agentops' side of the scenarios: the real engine on the ORM store (PostgreSQL fast
path included), in this process or in a real `manage.py worker`."""

from __future__ import annotations

import math
import time

from django.db import connection

from bench.compare import agents
from runs.durable import WorkerConfig, control, execute_run
from runs.models import Effect, Run
from runs.storage import database_store
from runs.storage.orm import OrmStore

TABLES = ("runs_run", "runs_checkpoint", "runs_effect", "runs_runevent")
CONFIG = WorkerConfig(owner="bench:0:inprocess", lease_seconds=60, slice_seconds=math.inf)


def store() -> OrmStore:
    return database_store()


def run_in_process(agent: str, inputs: dict) -> tuple[str, float]:
    """Launch a run and execute it here to the end; (run id, seconds from launch to done)."""
    start = time.perf_counter()
    run = control.launch(store(), agent=agent, inputs=inputs)
    outcome = execute_run(store(), run.id, CONFIG)
    elapsed = time.perf_counter() - start
    if outcome != "succeeded":
        raise RuntimeError(f"bench run {run.id} ended {outcome}")
    return run.id, elapsed


# --- scenario 2 and 6: launched as users launch, executed by the real worker ----------------
def launch_many(agent: str, inputs: dict, count: int) -> list[str]:
    from runs.services import run_launch

    return [run_launch(user=None, agent=agent, inputs=inputs).id for _ in range(count)]


def finished_span(run_ids: list[str], since_wall: float, timeout: float) -> float:
    """Wait until every run succeeded; seconds from `since_wall` to the last finish."""
    deadline = time.monotonic() + timeout
    while True:
        done = Run.objects.filter(pk__in=run_ids, status="succeeded").count()
        if done == len(run_ids):
            break
        bad = Run.objects.filter(pk__in=run_ids, status__in=["failed", "needs_attention"]).count()
        if bad or time.monotonic() > deadline:
            raise RuntimeError(f"{done}/{len(run_ids)} runs succeeded, {bad} failed or stuck")
        time.sleep(0.05)
    last = max(Run.objects.filter(pk__in=run_ids).values_list("finished_at", flat=True))
    return last.timestamp() - since_wall


def effects_between(run_ids: list[str], start_wall: float, end_wall: float) -> tuple[int, int]:
    """(effects finished in the window, runs with at least one effect by its end)."""
    from datetime import UTC, datetime

    start = datetime.fromtimestamp(start_wall, tz=UTC)
    end = datetime.fromtimestamp(end_wall, tz=UTC)
    effects = Effect.objects.filter(run_id__in=run_ids, kind="call", status="done")
    in_window = effects.filter(finished_at__gte=start, finished_at__lt=end).count()
    progressed = effects.filter(finished_at__lt=end).values("run_id").distinct().count()
    return in_window, progressed


def abandon(run_ids: list[str]) -> None:
    """After a window with the cluster stopped: end the bench's unfinished runs."""
    Run.objects.filter(pk__in=run_ids).exclude(status="succeeded").update(
        status="cancelled", lease_owner=None, lease_expires_at=None, enqueued_at=None)


def truncate(tables: list[str]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


# --- scenario 5: a crashed run with a long history ------------------------------------------
class CrashedRun:
    """A run of `bench-resume` killed after `done` of `total` steps, its history written
    directly (the rows the engine writes: a checkpoint, an effect and two events a step),
    its lease held by a worker that is gone. `reset()` puts it back after each resume."""

    def __init__(self, done: int, total: int):
        self.done, self.total = done, total
        run = control.launch(store(), agent="bench-resume", inputs={"n": total})
        self.id = run.id
        self._write_history()

    def _write_history(self) -> None:
        h, n, run_id = self.done, self.total, self.id
        tool = agents.marked_noop.name
        with connection.cursor() as c:
            # Checkpoint 1 is the start (step 0), checkpoint k+1 is after step k.
            c.execute("""
                INSERT INTO runs_checkpoint (run_id, number, branch, step_no, codec, blob, size,
                                             reason, parent_number, created_at)
                SELECT %s, k + 1, 1, k, 'json', convert_to(b, 'UTF8'), octet_length(b),
                       CASE WHEN k = 0 THEN 'start' ELSE 'step' END, NULL, now()
                FROM generate_series(0, %s::int) k,
                     LATERAL (SELECT '{"i":' || k || ',"n":' || %s || '}' AS b) blob""",
                      [run_id, h, n])
            c.execute("""
                INSERT INTO runs_effect (run_id, branch, step_no, seq, kind, tool, digest, key,
                    idempotent, status, args_preview, result, error, attempts, started_at,
                    finished_at, resolution, superseded, worker, epoch)
                SELECT %s, 1, k, 0, 'call', %s,
                       -- serde.digest(tool, (i,), {}): sha256 of '["tool",[i],{}]', 32 hex
                       left(encode(sha256(convert_to('["' || %s || '",[' || (k - 1) || '],{}]',
                                                     'UTF8')), 'hex'), 32),
                       %s || ':1:' || k || ':0', true, 'done',
                       (k - 1)::text, to_jsonb(k - 1), NULL, 1, now(), now(), '', false,
                       'gone:1:dead', 1
                FROM generate_series(1, %s::int) k""", [run_id, tool, tool, run_id, h])
            # Events after "launched" (seq 1): "started" + start checkpoint, then per step
            # the effect and its checkpoint.
            c.execute("""
                INSERT INTO runs_runevent (run_id, seq, kind, data, created_at)
                SELECT %s, s, CASE WHEN s %% 2 = 0 THEN 'effect' ELSE 'checkpoint' END,
                       CASE WHEN s %% 2 = 0
                            THEN jsonb_build_object('step', s / 2 - 1, 'seq', 0, 'status', 'done')
                            ELSE jsonb_build_object('number', (s - 1) / 2, 'step', (s - 3) / 2)
                       END, now()
                FROM generate_series(2, %s::int) s""", [run_id, 2 * h + 3])
        self.event_seq = 2 * h + 3
        self.reset()
        with connection.cursor() as c:
            c.execute("ANALYZE runs_checkpoint; ANALYZE runs_effect; ANALYZE runs_runevent")

    def reset(self) -> None:
        """Back to the moment of the crash: the resumed step's rows go, the lease is the
        dead worker's and has expired."""
        h = self.done
        with connection.cursor() as c:
            c.execute("DELETE FROM runs_effect WHERE run_id = %s AND step_no > %s", [self.id, h])
            c.execute("DELETE FROM runs_checkpoint WHERE run_id = %s AND number > %s",
                      [self.id, h + 1])
            c.execute("DELETE FROM runs_runevent WHERE run_id = %s AND seq > %s",
                      [self.id, self.event_seq])
            c.execute("""UPDATE runs_run SET status = 'running', step_no = %s, epoch = 1,
                         lease_owner = 'gone:1:dead', lease_expires_at = now() - interval '1 s',
                         claimed_after_crash = false, control = NULL, crash_count = 0,
                         crash_step = -1, event_seq = %s, checkpoint_count = %s,
                         suspended_at = NULL, attention = NULL, enqueued_at = NULL
                         WHERE id = %s""", [h, self.event_seq, h + 1, self.id])

    def resume(self) -> float:
        """Seconds from the claim to the first new effect (the claim is execute_run's
        first statement)."""
        agents.FIRST_NEW_EFFECT["at"] = None
        stop = agents.FIRST_NEW_EFFECT["stop"]
        stop.clear()
        start = time.perf_counter()
        outcome = execute_run(store(), self.id, CONFIG, stop_event=stop)
        if agents.FIRST_NEW_EFFECT["at"] is None:
            raise RuntimeError(f"resume of {self.id} made no new effect ({outcome})")
        return agents.FIRST_NEW_EFFECT["at"] - start

    def delete(self) -> None:
        Run.objects.filter(pk=self.id).delete()
