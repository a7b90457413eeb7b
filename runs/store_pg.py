"""PostgreSQL fast paths for the engine's frequent round trips: an effect's log, a
step's checkpoint, a launch, and a claim with the load of what the resume needs.

Each is one statement, one round trip, one implicit transaction, prepared once per
connection. A commit's fenced UPDATE of the run, its effect rows, checkpoint row and
event rows are data-modifying CTEs; the inserts select FROM the UPDATE's result, so
a fenced writer (no row updated) inserts nothing. Commits that carry an audit entry,
a take-over or a supersede (operators' actions, rare) take the general path in
runs/store.py, and so does a checkpoint while a test has armed the fault point
inside the checkpoint's transaction.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from datetime import timezone as dt_timezone

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections

from runs.durable import records as r
from runs.durable.faults import faults

# run fields the engine may set in a commit, with their SQL types
RUN_COLUMNS = {
    "status": "text", "output": "jsonb", "error": "jsonb", "attention": "jsonb",
    "control": "text", "step_no": "integer", "branch": "integer", "agent_version": "text",
    "progress_done": "double precision", "progress_total": "double precision",
    "progress_message": "text", "lease_expires_at": "timestamptz", "wake_at": "timestamptz",
    "suspended_at": "timestamptz", "crash_count": "integer", "crash_step": "integer",
}
TIMES = {"lease_expires_at", "wake_at", "suspended_at"}
ONLY_WHEN_ASKED = 1 << 30  # a prepare_threshold that no statement count reaches

EFFECT_COLUMNS = (("branch", "integer"), ("step_no", "integer"), ("seq", "integer"),
                  ("kind", "text"), ("tool", "text"), ("digest", "text"), ("key", "text"),
                  ("idempotent", "boolean"), ("status", "text"), ("args_preview", "text"),
                  ("result", "jsonb"), ("error", "jsonb"), ("attempts", "integer"),
                  ("started_at", "timestamptz"), ("finished_at", "timestamptz"),
                  ("resolution", "text"), ("superseded", "boolean"), ("worker", "text"),
                  ("epoch", "bigint"))
EFFECT_NAMES = [name for name, _ in EFFECT_COLUMNS]
EFFECT_ROW = "(" + ", ".join(f"%s::{sql_type}" for _, sql_type in EFFECT_COLUMNS) + ")"
EFFECT_UPDATES = ", ".join(f"{c} = EXCLUDED.{c}" for c in (
    "status", "result", "error", "attempts", "finished_at", "resolution", "superseded",
    "worker", "started_at", "epoch"))

# The checkpoint's number is the run's checkpoint count after this commit (unless the
# engine chose one); its event is the commit's last, as on the general path.
CHECKPOINT_CTES = (
    "cp AS (INSERT INTO runs_checkpoint (run_id, number, branch, step_no, codec, blob, size, "
    "reason, parent_number, base_number, created_at) "
    "SELECT %s, coalesce(%s::integer, run.checkpoint_count), %s::integer, %s::integer, "
    "%s::text, %b, %s::integer, %s::text, %s::integer, %s::integer, %s::timestamptz FROM run "
    "RETURNING number, branch, step_no, size, reason), "
    "cpev AS (INSERT INTO runs_runevent (run_id, seq, kind, data, created_at) "
    "SELECT %s, run.event_seq, 'checkpoint', jsonb_build_object('number', cp.number, "
    "'branch', cp.branch, 'step', cp.step_no, 'size', cp.size, 'reason', cp.reason), %s "
    "FROM run, cp)")


def create_run_in_one_statement(row, event_data: dict) -> None:
    """Insert the run row and its first event together (no transaction of our own: the
    statement is one), with the values Django would write for `row`."""
    fields = [f for f in row._meta.concrete_fields]
    values = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
    columns = ", ".join(f.column for f in fields)
    sql = (f"WITH run AS (INSERT INTO runs_run ({columns}) VALUES "
           f"({', '.join(['%s'] * len(fields))}) RETURNING id, created_at) "
           "INSERT INTO runs_runevent (run_id, seq, kind, data, created_at) "
           "SELECT id, 1, 'status', %s::jsonb, created_at FROM run RETURNING seq")
    execute_prepared(sql, [*values, json.dumps(event_data)])


# RunRecord's fields in order (JSON as text: Django's connection leaves jsonb unparsed)
RUN_SELECT = ", ".join(f"claimed.{c}" for c in (
    "id", "agent", "agent_version", "inputs::text", "status", "branch", "step_no", "epoch",
    "lease_owner", "lease_expires_at", "control", "output::text", "error::text",
    "attention::text", "progress_done", "progress_total", "progress_message", "wake_at",
    "crash_count", "crash_step", "event_seq", "created_at", "updated_at", "suspended_at",
    "owner_id", "claimed_after_crash"))
RUN_JSON = (3, 11, 12, 13)
RUN_TIMES = (9, 17, 21, 22, 23)
RUN_OWNER = 24
# EffectRecord's fields in order, but for `args` (not stored)
EFFECT_ARRAY = ("jsonb_build_array(branch, step_no, seq, kind, tool, digest, key, idempotent, "
                "status, args_preview, result, error, attempts, "
                "extract(epoch FROM started_at)::float8, extract(epoch FROM finished_at)::float8, "
                "resolution, superseded, worker, epoch)")
CHECKPOINT_SELECT = "number, branch, step_no, blob, codec, reason, parent_number, created_at, base_number"

# Effects read with the claim; a run with more after its checkpoint is loaded apart.
# The LIMIT also keeps the index scan: the step is a parameter here, and the planner
# guessed a third of a long run's effects and scanned the table (140 ms at 500,000).
CLAIM_EFFECTS = 500
# Claim and load in one round trip: the conditional UPDATE that takes the run (its SET
# expressions read the old row: an unreleased lease means its owner died), the latest
# checkpoint of the run's branch, and the live effects after it, oldest first.
# All of it reads one snapshot, taken when the statement began: if the UPDATE had to
# wait for another writer's lock (a zombie worker committing an intent as its lease
# ran out), PostgreSQL re-checks the WHERE on the row that writer left, but the reads
# of the checkpoint and effects would still miss what it wrote, and the new owner
# would call a non-idempotent tool again. The xmin guard turns that into no claim at
# all: the row's version must be the one the snapshot saw (the sweep claims again,
# and by then the zombie is fenced). The reads name the run by the parameter, not by
# the UPDATE's result: joined to that, the planner expected many rows from it and
# hashed the whole checkpoint table (0.2-0.6 s on half a million checkpoints,
# measured) instead of using the index.
CLAIM_LOAD_SQL = f"""
WITH claimed AS (
    UPDATE runs_run SET epoch = epoch + 1, lease_owner = %s, lease_expires_at = %s,
           claimed_after_crash = (lease_owner IS NOT NULL), enqueued_at = NULL, updated_at = %s
    WHERE id = %s AND xmin = (SELECT xmin FROM runs_run WHERE id = %s)
      AND (status IN ('{r.QUEUED}', '{r.RUNNING}')
                       OR (status = '{r.WAITING}' AND wake_at <= %s))
      AND (lease_owner IS NULL OR lease_expires_at <= %s)
    RETURNING *),
cp AS (
    SELECT c.* FROM runs_checkpoint c
    WHERE c.run_id = %s AND c.branch = (SELECT branch FROM claimed)
    ORDER BY c.step_no DESC, c.number DESC LIMIT 1)
SELECT {RUN_SELECT},
       {', '.join(f'cp.{c}' for c in CHECKPOINT_SELECT.split(', '))},
       (SELECT coalesce(jsonb_agg({EFFECT_ARRAY} ORDER BY e.step_no, e.seq), '[]')::text
        FROM (SELECT * FROM runs_effect e
              WHERE e.run_id = %s AND e.branch = claimed.branch
                AND e.step_no > coalesce(cp.step_no, 0) AND NOT e.superseded
              ORDER BY e.step_no, e.seq LIMIT %s) e)
FROM claimed LEFT JOIN cp ON true"""


def claim_and_load(run_id: str, owner: str, lease_expires_at: datetime, now: datetime):
    """(run, crashed, checkpoint or None, live effects or None) of a claim, or None when
    the run is not claimable. The effects are None when there are more than
    CLAIM_EFFECTS. The checkpoint's blob is its own: a patch needs its bases."""
    row = execute_prepared(CLAIM_LOAD_SQL, [owner, lease_expires_at, now, run_id, run_id, now,
                                            now, run_id, run_id, CLAIM_EFFECTS + 1])
    if row is None:
        return None
    run, crashed = _run_from(row[:26])
    checkpoint = _checkpoint_from(row[26:35]) if row[26] is not None else None
    arrays = json.loads(row[35])
    if len(arrays) > CLAIM_EFFECTS:
        return run, crashed, checkpoint, None
    return run, crashed, checkpoint, [_effect_from(e) for e in arrays]


def _run_from(columns) -> tuple[r.RunRecord, bool]:
    values = list(columns)
    for i in RUN_JSON:
        values[i] = None if values[i] is None else json.loads(values[i])
    for i in RUN_TIMES:
        values[i] = None if values[i] is None else values[i].timestamp()
    values[RUN_OWNER] = str(values[RUN_OWNER] or "")
    crashed = values.pop()
    return r.RunRecord(*values), crashed


def _checkpoint_from(columns) -> r.CheckpointRecord:
    number, branch, step_no, blob, codec, reason, parent, created, base = columns
    return r.CheckpointRecord(number, branch, step_no, bytes(blob), codec, reason, parent,
                              created.timestamp() if created else 0.0, base)


def _effect_from(array: list) -> r.EffectRecord:
    effect = r.EffectRecord(*array[:10], None, *array[10:])  # `args` is not stored
    effect.started_at = effect.started_at or 0.0
    return effect


def fast_path_applies(commit: r.Commit) -> bool:
    return (connection.vendor == "postgresql"
            and commit.audit is None and commit.supersede is None and not commit.take_over
            and commit.expect_status is None
            and commit.run.keys() <= RUN_COLUMNS.keys()
            # a crash test's kill must land inside the checkpoint's transaction
            and (commit.checkpoint is None or not faults.armed("after_checkpoint_before_event")))


def commit_in_one_statement(run_id: str, epoch: int, commit: r.Commit):
    """Returns (epoch, event_seq, control, checkpoint number or None), or None when
    the epoch was fenced off."""
    now = datetime.now(dt_timezone.utc)
    sql, params = _run_cte(run_id, epoch, commit, now)
    ctes = [sql]
    for part in (_effects_cte, _events_cte, _checkpoint_ctes):
        sql, part_params = part(run_id, commit, now)
        if sql:
            ctes.append(sql)
            params += part_params
    return execute_prepared(_statement(tuple(ctes), commit.checkpoint is not None), params)


@functools.lru_cache(maxsize=512)
def _statement(ctes: tuple[str, ...], checkpoint: bool) -> str:
    # The same few shapes recur (an effect, a checkpoint, an ending): one string each,
    # so psycopg's prepared-statement cache finds them by identity.
    number = "(SELECT number FROM cp)" if checkpoint else "NULL::integer"
    return f"WITH {', '.join(ctes)} SELECT epoch, event_seq, control, {number} FROM run"


def execute_prepared(sql: str, params: list):
    """Run `sql` as a prepared statement on Django's own connection; its first row.

    Django binds client-side and opens its connections with prepared statements
    switched off (prepare_threshold=None, for transaction-mode poolers), which makes
    psycopg ignore even an explicit prepare=True: the statement was parsed and planned
    on every commit, half of its cost (1.4 ms against 0.7 ms, measured). A threshold
    no statement reaches turns preparing on for the statements asked for here only;
    Django's client-side cursors never prepare whatever the threshold.
    """
    db = connections[DEFAULT_DB_ALIAS]  # the proxy `connection` looks it up on every use
    db.ensure_connection()
    conn = db.connection
    if conn.prepare_threshold is None:
        conn.prepare_threshold = ONLY_WHEN_ASKED
    with db.wrap_database_errors, psycopg.Cursor(conn) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchone()


def _run_cte(run_id: str, epoch: int, commit: r.Commit, now: datetime) -> tuple[str, list]:
    new_events = len(commit.events) + (commit.checkpoint is not None)
    sets, params = ["event_seq = event_seq + %s", "updated_at = %s"], [new_events, now]
    for name, value in commit.run.items():
        sets.append(f"{name} = %s::{RUN_COLUMNS[name]}")
        params.append(_sql_value(name, value))
    if commit.checkpoint is not None:
        sets.append("checkpoint_count = checkpoint_count + 1")
    if commit.release:
        sets += ["lease_owner = NULL", "lease_expires_at = NULL"]
    if commit.run.get("status") in r.FINAL_STATUSES:
        sets.append("finished_at = %s")
        params.append(now)
    sql = (f"run AS (UPDATE runs_run SET {', '.join(sets)} WHERE id = %s AND epoch = %s "
           "RETURNING event_seq, control, epoch, checkpoint_count)")
    return sql, params + [run_id, epoch]


def _effects_cte(run_id: str, commit: r.Commit, now: datetime) -> tuple[str, list]:
    if not commit.effects:
        return "", []
    # Typed VALUES rather than jsonb_to_recordset: the planner costs a set-returning
    # function at 100 rows and the statement took 60% longer (measured).
    sql = (f"eff AS (INSERT INTO runs_effect (run_id, {', '.join(EFFECT_NAMES)}) "
           f"SELECT %s, x.* FROM run, (VALUES {', '.join([EFFECT_ROW] * len(commit.effects))}) "
           f"AS x ON CONFLICT (run_id, branch, step_no, seq) DO UPDATE SET {EFFECT_UPDATES})")
    params = [run_id]
    for effect in commit.effects:
        params += _effect_values(effect)
    return sql, params


def _events_cte(run_id: str, commit: r.Commit, now: datetime) -> tuple[str, list]:
    if not commit.events:
        return "", []
    new_events = len(commit.events) + (commit.checkpoint is not None)
    rows = ", ".join(["(%s::integer, %s::text, %s::jsonb)"] * len(commit.events))
    sql = ("ev AS (INSERT INTO runs_runevent (run_id, seq, kind, data, created_at) "
           "SELECT %s, run.event_seq - %s + e.ord, e.kind, e.data, %s "
           f"FROM run, (VALUES {rows}) AS e(ord, kind, data))")
    params = [run_id, new_events, now]
    for i, (kind, data) in enumerate(commit.events, start=1):
        params += [i, kind, json.dumps(data)]
    return sql, params


def _checkpoint_ctes(run_id: str, commit: r.Commit, now: datetime) -> tuple[str, list]:
    c = commit.checkpoint
    if c is None:
        return "", []
    created = datetime.fromtimestamp(c.created_at, tz=dt_timezone.utc) if c.created_at else now
    return CHECKPOINT_CTES, [run_id, c.number or None, c.branch, c.step_no, c.codec,
                             bytes(c.blob), c.size, c.reason, c.parent_number, c.base_number,
                             created, run_id, now]


def _sql_value(name, value):
    if name in TIMES:
        return None if value is None else datetime.fromtimestamp(value, tz=dt_timezone.utc)
    if RUN_COLUMNS[name] == "jsonb":
        return None if value is None else json.dumps(value)
    return value


def _effect_values(e: r.EffectRecord) -> list:
    def ts(value):
        return datetime.fromtimestamp(value, tz=dt_timezone.utc) if value else None

    def js(value):
        return None if value is None else json.dumps(value)

    return [e.branch, e.step_no, e.seq, e.kind, e.tool, e.digest, e.key, e.idempotent,
            e.status, e.args_preview, js(e.result), js(e.error), e.attempts, ts(e.started_at),
            ts(e.finished_at), e.resolution, e.superseded, e.worker, e.epoch]
