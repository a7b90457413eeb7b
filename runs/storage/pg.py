"""PgStore: the Store protocol on PostgreSQL, with the engine's frequent round trips as
single statements: a worker's commit (an effect's log, a step's checkpoint, an
ending), a launch, and a claim with the load of what the resume needs.

Each is one statement, one round trip, one implicit transaction, prepared once per
connection. A commit's fenced UPDATE of the run, its effect rows, checkpoint row and
event rows are data-modifying CTEs; the inserts select FROM the UPDATE's result, so
a fenced writer (no row updated) inserts nothing. An operator's commit (an audit
entry, a take-over, a supersede, a status guard: rare, and never on a worker's
path) is OrmStore's transaction, inherited. Everything else (load, renewals, due
runs, history) is OrmStore's too: one path per operation, chosen by the operation,
never by the database inside a method (`runs.storage.database_store` picks the
store once).

Columns are named everywhere: the statements are generated from the names in
runs/storage/columns.py, and rows come back as dicts decoded by those names.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from datetime import datetime
from typing import NamedTuple

from django.db import connection, transaction

from runs.durable import claimable, clock, events, serde
from runs.durable import records as r
from runs.durable.errors import FencedError
from runs.durable.faults import faults
from runs.durable.versions import Codes
from runs.models import Checkpoint, Effect, Run
from runs.storage import columns
from runs.storage.columns import sql_type, to_dt
from runs.storage.commits import waits_for_input
from runs.storage.orm import OrmStore, new_run_row, patch_bases, run_record
from runs.storage.pg_statements import execute

# The run fields a worker's commit sets in the one statement: what a session writes as a
# run goes (not the code it moves to: that commit is rare, and takes OrmStore's path).
WORKER_RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(r.RunChanges)) - {
    "code_fingerprint", "version_refused"}
CHECKPOINT_FAULT = "after_checkpoint_before_event"

EFFECT_ROW = "(" + ", ".join(f"%s::{sql_type(Effect, n)}" for n in columns.EFFECT_FIELDS) + ")"
EFFECT_UPDATES = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns.EFFECT_OUTCOME)

# The checkpoint's number is the run's checkpoint count after this commit (unless the
# engine chose one); its event is the commit's last, as in OrmStore.commit, built by
# events.checkpoint with the number set here.
CHECKPOINT_COLUMNS = (*columns.CHECKPOINT_FIELDS, "size")


def _checkpoint_param(name: str) -> str:
    if name == "number":
        return "coalesce(%s::integer, run.checkpoint_count)"
    if name == "blob":
        return "%b"  # binary: a large state is not escaped to text and back
    return f"%s::{sql_type(Checkpoint, name)}"


CHECKPOINT_CTES = (
    f"cp AS (INSERT INTO runs_checkpoint (run_id, {', '.join(CHECKPOINT_COLUMNS)}) "
    f"SELECT %s, {', '.join(_checkpoint_param(n) for n in CHECKPOINT_COLUMNS)} FROM run "
    "RETURNING number), "
    "cpev AS (INSERT INTO runs_runevent (run_id, seq, kind, data, created_at) "
    "SELECT %s, run.event_seq, %s::text, jsonb_set(%s::jsonb, '{number}', to_jsonb(cp.number)), "
    "%s FROM run, cp)")

# Effects read with the claim; a run with more after its checkpoint is loaded apart.
# The LIMIT also keeps the index scan: the step is a parameter here, and the planner
# guessed a third of a long run's effects and scanned the table (140 ms at 500,000).
CLAIM_EFFECTS = 500
# JSON as text: Django's connection leaves jsonb unparsed.
RUN_SELECT = ", ".join(f"claimed.{n}::text AS {n}" if n in columns.RUN_JSON else f"claimed.{n}"
                       for n in columns.RUN_FIELDS) + ", claimed.owner_id, claimed.claimed_after_crash"
CHECKPOINT_SELECT = ", ".join(f"cp.{n} AS cp_{n}" for n in columns.CHECKPOINT_FIELDS)
EFFECT_OBJECT = "jsonb_build_object(" + ", ".join(
    f"'{n}', extract(epoch FROM e.{n})::float8" if n in columns.EFFECT_TIMES else f"'{n}', e.{n}"
    for n in columns.EFFECT_FIELDS) + ")"
# Codes.admits (runs/durable/versions.py) with its sets as array parameters, so that the
# claim holding it is one string whatever the sets (PostgreSQL prepares it once): the
# parameters are codes_arrays(codes), NULLs for every code.
CODES_ARRAY_SQL = (
    " AND (%s::text[] IS NULL OR code_fingerprint = ANY(%s::text[]) OR ("
    "agent = ANY(%s::text[]) AND NOT coalesce(version_refused, '') = ANY(%s::text[]) "
    "AND NOT code_fingerprint = ANY(%s::text[])))")


def codes_arrays(codes: Codes | None) -> list:
    if codes is None:
        return [None, [], [], [], []]
    own = sorted(codes.own)
    return [own, own, sorted(codes.agents), own, sorted(codes.taken)]


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
    WHERE id = %s AND xmin = (SELECT xmin FROM runs_run WHERE id = %s) AND {claimable.SQL}
          {CODES_ARRAY_SQL}
    RETURNING *),
cp AS (
    SELECT c.* FROM runs_checkpoint c
    WHERE c.run_id = %s AND c.branch = (SELECT branch FROM claimed)
    ORDER BY c.step_no DESC, c.number DESC LIMIT 1)
SELECT {RUN_SELECT}, {CHECKPOINT_SELECT},
       (SELECT coalesce(jsonb_agg({EFFECT_OBJECT} ORDER BY e.step_no, e.seq), '[]')::text
        FROM (SELECT * FROM runs_effect e
              WHERE e.run_id = %s AND e.branch = claimed.branch
                AND e.step_no > coalesce(cp.step_no, 0) AND NOT e.superseded
              ORDER BY e.step_no, e.seq LIMIT %s) e) AS effects
FROM claimed LEFT JOIN cp ON true"""


class PgStore(OrmStore):
    """`prepare`: the single statements are prepared on the server, once per connection
    (half their cost); off behind a pooler in transaction mode (PgBouncer's
    pool_mode=transaction), where a prepared statement does not outlive its transaction:
    `runs.storage.database_store` reads AGENTOPS_DB_TRANSACTION_POOLING."""

    def __init__(self, notify=None, *, prepare: bool = True):
        super().__init__(notify)
        self.prepare = prepare

    # --- the protocol: the operations that are single statements here --------------------
    def _create_run(self, run: r.RunRecord) -> r.RunRecord:
        row, event = new_run_row(run)
        create_run_in_one_statement(row, event, prepare=self.prepare)
        self._notify_on_commit(row.id, 1)
        return run_record(row)

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float, *,
              codes: Codes | None = None) -> r.Claim | None:
        claimed = claim_and_load(run_id, owner, to_dt(now + lease_seconds), to_dt(now), codes,
                                 prepare=self.prepare)
        if claimed is None:
            return None  # not runnable, or another worker got there first
        run, crashed, checkpoint, effects = claimed
        if effects is None:
            return r.Claim(run, crashed)  # a long tail of effects: load() reads it in pages
        bases = []
        if checkpoint is not None and checkpoint.codec == serde.PATCH_CODEC:
            bases = patch_bases(run_id, checkpoint)
        return r.Claim(run, crashed, r.Loaded(run, checkpoint, effects, bases))

    def commit(self, run_id: str, epoch: int, commit: r.Commit) -> r.CommitResult:
        if not in_one_statement(commit):
            return super().commit(run_id, epoch, commit)  # an operator's action, or rare
        if commit.checkpoint is not None and faults.armed(CHECKPOINT_FAULT):
            # The statement is a transaction of its own, with no instant inside it: a
            # crash test's fault point gets one by running the same statement in an
            # explicit transaction and firing before it commits.
            with transaction.atomic():
                row = commit_in_one_statement(run_id, epoch, commit, prepare=self.prepare)
                if row is not None:
                    faults.hit(CHECKPOINT_FAULT, row["agent"])
        else:
            row = commit_in_one_statement(run_id, epoch, commit, prepare=self.prepare)
        if row is None:
            self._get(run_id)  # RunNotFoundError if it is gone
            raise FencedError(run_id, epoch)  # a newer owner claimed the run
        if self.notify is not None and (commit.events or commit.checkpoint is not None):
            self.notify(run_id, row["event_seq"])
        return r.CommitResult(row["epoch"], row["event_seq"], row["control"], row["number"])


def in_one_statement(commit: r.Commit) -> bool:
    """A worker's commit this store writes in one statement: not an operator's action,
    no status guard, no family rule (runs/durable/family.py: a child's ending, a wait on
    children; its statements come one after another, see orm.family_rule), no wait for
    input (the features answer it in its transaction: commits.input_rule), no effect
    carried over (moved by its key), and only the run fields of WORKER_RUN_FIELDS."""
    return (not isinstance(commit, r.OperatorCommit) and commit.expect_status is None
            and not commit.family and not waits_for_input(commit)
            and commit.run.fields().keys() <= WORKER_RUN_FIELDS
            and all(e.moved_from is None for e in commit.effects))


def create_run_in_one_statement(row: Run, event: tuple[str, dict], *, prepare: bool) -> None:
    """Insert the run row and its first event together (no transaction of our own: the
    statement is one), with the values Django would write for `row`."""
    fields = list(row._meta.concrete_fields)
    values = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
    names = ", ".join(f.column for f in fields)
    sql = (f"WITH run AS (INSERT INTO runs_run ({names}) VALUES "
           f"({', '.join(['%s'] * len(fields))}) RETURNING id, created_at) "
           "INSERT INTO runs_runevent (run_id, seq, kind, data, created_at) "
           "SELECT id, 1, %s, %s::jsonb, created_at FROM run RETURNING seq")
    kind, data = event
    execute(sql, [*values, kind, json.dumps(data)], prepare=prepare)


def claim_and_load(run_id: str, owner: str, lease_expires_at: datetime, now: datetime,
                   codes: Codes | None = None, *, prepare: bool):
    """(run, crashed, checkpoint or None, live effects or None) of a claim, or None when
    the run is not claimable (by a worker of `codes`). The effects are None when there
    are more than CLAIM_EFFECTS. The checkpoint's blob is its own: a patch needs its
    bases."""
    row = execute(CLAIM_LOAD_SQL, [
        owner, lease_expires_at, now, run_id, run_id, *claimable.sql_params(now),
        *codes_arrays(codes), run_id, run_id, CLAIM_EFFECTS + 1], prepare=prepare)
    if row is None:
        return None
    run = columns.run_record(columns.parse_json(row, columns.RUN_JSON))
    checkpoint = None
    if row["cp_number"] is not None:
        checkpoint = columns.checkpoint_record({n: row[f"cp_{n}"]
                                                for n in columns.CHECKPOINT_FIELDS})
    effects = json.loads(row["effects"])
    if len(effects) > CLAIM_EFFECTS:
        return run, row["claimed_after_crash"], checkpoint, None
    return (run, row["claimed_after_crash"], checkpoint,
            [columns.effect_record(e) for e in effects])


def commit_in_one_statement(run_id: str, epoch: int, commit: r.Commit, *,
                            prepare: bool) -> dict | None:
    """The committed run's epoch, event_seq, control, agent and the checkpoint's number
    (or None), by name; None when the epoch was fenced off."""
    now = to_dt(clock.now())  # the engine's clock, as the commit's own times
    changes = commit.run.fields()
    unwritten = [e for e in commit.effects if e.unwritten]
    again = [e for e in commit.effects if not e.unwritten]
    shape = CommitShape(tuple(changes), commit.checkpoint is not None, commit.release,
                        changes.get("status") in r.FINAL_STATUSES, len(unwritten), len(again),
                        len(commit.events))
    params = _run_params(run_id, epoch, changes, shape, now)
    if unwritten:
        params += _effects_params(run_id, unwritten)
    if again:
        params += _effects_params(run_id, again)
    if commit.events:
        params += _events_params(run_id, commit.events, now)
    if commit.checkpoint is not None:
        params += _checkpoint_params(run_id, commit.checkpoint, now)
    return execute(_statement(shape), params, prepare=prepare)


class CommitShape(NamedTuple):
    """What a commit's statement text depends on: an effect's commit, a step's checkpoint
    and an ending each recur with the same shape, and their values go as parameters."""

    run_fields: tuple[str, ...]  # the run fields set, in RunChanges' order
    checkpoint: bool
    release: bool
    final: bool  # the run ends: its finished_at is set
    new_effects: int  # written for the first time: a plain INSERT
    effects_again: int  # an outcome after its intent, an attempt after another: an upsert
    events: int

    @property
    def new_events(self) -> int:
        return self.events + self.checkpoint


@functools.lru_cache(maxsize=512)
def _statement(shape: CommitShape) -> str:
    # Built once per shape: the statement building was a third of the client's work of
    # an effect's commit, and one string per shape lets psycopg's prepared-statement
    # cache find it by identity.
    ctes = [_run_cte(shape)]
    if shape.new_effects:
        ctes.append(_effects_cte("eff", shape.new_effects, upsert=False))
    if shape.effects_again:
        ctes.append(_effects_cte("effup", shape.effects_again, upsert=True))
    if shape.events:
        ctes.append(_events_cte(shape))
    if shape.checkpoint:
        ctes.append(CHECKPOINT_CTES)
    number = "(SELECT number FROM cp)" if shape.checkpoint else "NULL::integer"
    return (f"WITH {', '.join(ctes)} SELECT epoch, event_seq, control, agent, "
            f"{number} AS number FROM run")


def _run_cte(shape: CommitShape) -> str:
    sets = [f"event_seq = event_seq + {shape.new_events}", "updated_at = %s"]
    sets += [f"{name} = %s::{sql_type(Run, name)}" for name in shape.run_fields]
    if shape.checkpoint:
        sets.append("checkpoint_count = checkpoint_count + 1")
    if shape.release:
        sets += ["lease_owner = NULL", "lease_expires_at = NULL"]
    if shape.final:
        sets.append("finished_at = %s")
    return (f"run AS (UPDATE runs_run SET {', '.join(sets)} WHERE id = %s AND epoch = %s "
            "RETURNING event_seq, control, epoch, checkpoint_count, agent)")


def _run_params(run_id: str, epoch: int, changes: dict, shape: CommitShape,
                now: datetime) -> list:
    params = [now, *(_sql_value(name, value) for name, value in changes.items())]
    if shape.final:
        params.append(now)
    return params + [run_id, epoch]


def _effects_cte(name: str, count: int, *, upsert: bool) -> str:
    # Typed VALUES rather than jsonb_to_recordset: the planner costs a set-returning
    # function at 100 rows and the statement took 60% longer (measured). A record no
    # commit carried yet has no row (EffectRecord.unwritten): a plain INSERT, without
    # the speculative insertion of ON CONFLICT (6% of a no-op effect's statement:
    # docs/writes.md).
    conflict = (f" ON CONFLICT (run_id, branch, step_no, seq) DO UPDATE SET {EFFECT_UPDATES}"
                if upsert else "")
    return (f"{name} AS (INSERT INTO runs_effect (run_id, {', '.join(columns.EFFECT_FIELDS)}) "
            f"SELECT %s, x.* FROM run, (VALUES {', '.join([EFFECT_ROW] * count)}) "
            f"AS x{conflict})")


def _effects_params(run_id: str, effects: list[r.EffectRecord]) -> list:
    params = [run_id]
    for effect in effects:
        params += columns.effect_params(effect)
    return params


def _events_cte(shape: CommitShape) -> str:
    rows = ", ".join(["(%s::integer, %s::text, %s::jsonb)"] * shape.events)
    return ("ev AS (INSERT INTO runs_runevent (run_id, seq, kind, data, created_at) "
            f"SELECT %s, run.event_seq - {shape.new_events} + e.ord, e.kind, e.data, %s "
            f"FROM run, (VALUES {rows}) AS e(ord, kind, data))")


def _events_params(run_id: str, events: list, now: datetime) -> list:
    params = [run_id, now]
    for i, (kind, data) in enumerate(events, start=1):
        params += [i, kind, json.dumps(data)]
    return params


def _checkpoint_params(run_id: str, c: r.CheckpointRecord, now: datetime) -> list:
    values = columns.checkpoint_values(c, c.number or None)
    values["blob"] = bytes(c.blob)
    values["created_at"] = values["created_at"] if c.created_at else now
    kind, data = events.checkpoint(c, None)  # its number is the statement's
    return [run_id, *(values[n] for n in CHECKPOINT_COLUMNS), run_id, kind, json.dumps(data),
            now]


def _sql_value(name, value):
    if name in columns.RUN_TIMES:
        return to_dt(value)
    if name in columns.RUN_JSON:
        return _json(value)
    return value


def _json(value):
    return None if value is None else json.dumps(value)
