"""The ORM implementation of the engine's store protocols (runs/durable/store.py: Store and
LeaseStore).

Every engine write is one transaction whose first statement is a conditional
UPDATE of the run row `WHERE epoch = <the writer's epoch>`: a writer whose
epoch was fenced off changes nothing, and the row lock it takes orders it
against a concurrent claim. Rows and records convert by name
(runs/storage/columns.py); which runs are claimable is runs/durable/claimable.py.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone
from functools import reduce
from operator import or_

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, transaction
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL

from runs.durable import claimable, serde
from runs.durable import events as ev
from runs.durable import records as r
from runs.durable.errors import FencedError, RunNotFoundError
from runs.durable.faults import faults
from runs.durable.verify import STEP_REASONS, replayed_from
from runs.durable.versions import Codes, admitted_sql
from runs.models import AuditEntry, Checkpoint, Effect, Run, RunEvent, chain_rows
from runs.storage import columns
from runs.storage.columns import to_dt
from runs.storage.commits import (
    family_rule,
    input_rule,
    run_fields,
    superseded_where,
    write_effects,
    write_events,
)

LOAD_PAGE = 500  # effects read a query at a time on resume (see live_effects)
RENEW_CHUNK = 250  # leases renewed by one statement (its OR of conditions)
COMMIT_READ = ("epoch", "event_seq", "control", "checkpoint_count", "agent", "branch",
               "parent_id")


class OrmStore:
    """The store protocols through the ORM: one path per operation.

    Databases: SQLite (3.35 or later) and PostgreSQL, the two the contract suite runs on.
    A claim is one conditional `UPDATE ... RETURNING`, which MySQL does not have, MariaDB
    has only since 13.0 and Oracle writes otherwise (RETURNING INTO): none of those is
    supported. On PostgreSQL, PgStore (runs/storage/pg.py) writes a worker's commits, a
    launch and a claim in single statements; `runs.storage.database_store` picks the
    store once, for the database it is built on."""

    def __init__(self, notify=None):
        # notify(run_id, last_seq) runs after commit: it only wakes viewers up.
        self.notify = notify

    # --- the protocol -----------------------------------------------------------------
    def create_run(self, run: r.RunRecord) -> r.RunRecord:
        return launched_once(run, self._create_run)

    def _create_run(self, run: r.RunRecord) -> r.RunRecord:
        row, (kind, data) = new_run_row(run)
        with transaction.atomic():
            row.save(force_insert=True)
            RunEvent.objects.create(run=row, seq=1, kind=kind, data=data)
        self._notify_on_commit(row.id, 1)
        return run_record(row)

    def children(self, run_id: str, *, active_only: bool = False) -> list[r.RunRecord]:
        rows = Run.objects.filter(parent_id=run_id)
        if active_only:
            rows = rows.exclude(status__in=r.FINAL_STATUSES)
        return [run_record(row) for row in rows.order_by("created_at", "id")]

    def get(self, run_id: str) -> r.RunRecord:
        return run_record(self._get(run_id))

    def load(self, run_id: str) -> r.Loaded:
        row = self._get(run_id)
        checkpoint = (Checkpoint.objects.filter(run_id=run_id, branch=row.branch)
                      .order_by("-step_no", "-number").first())
        after = checkpoint.step_no if checkpoint else 0
        bases = []
        if checkpoint is not None and checkpoint.codec == serde.PATCH_CODEC:
            bases = patch_bases(run_id, checkpoint_record(checkpoint))
        return r.Loaded(run_record(row), checkpoint_record(checkpoint) if checkpoint else None,
                        live_effects(run_id, row.branch, after), bases)

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float, *,
              codes: Codes | None = None) -> r.Claim | None:
        now_dt = to_dt(now)
        code_where, code_params = admitted_sql(codes)
        # One conditional UPDATE that returns the row it claimed (it was an UPDATE and
        # a SELECT). SET expressions read the old row: an unreleased lease means its
        # owner died.
        rows = list(Run.objects.raw(
            "UPDATE runs_run SET epoch = epoch + 1, lease_owner = %s, lease_expires_at = %s, "
            "claimed_after_crash = (lease_owner IS NOT NULL), enqueued_at = NULL, "
            f"updated_at = %s WHERE id = %s AND {claimable.SQL}{code_where} RETURNING *",
            [owner, to_dt(now + lease_seconds), now_dt, run_id,
             *claimable.sql_params(now_dt), *code_params]))
        if not rows:
            return None  # not runnable, or another worker got there first
        return r.Claim(run_record(rows[0]), rows[0].claimed_after_crash)

    def commit(self, run_id: str, epoch: int, commit: r.Commit) -> r.CommitResult:
        action = commit if isinstance(commit, r.OperatorCommit) else None
        now_dt = datetime.now(dt_timezone.utc)
        fields = run_fields(commit, action, now_dt)
        new_events = len(commit.events) + (1 if commit.checkpoint is not None else 0)
        with transaction.atomic():
            guard = {"status": commit.expect_status} if commit.expect_status else {}
            if Run.objects.filter(pk=run_id, epoch=epoch, **guard).update(**fields) != 1:
                self._get(run_id)  # RunNotFoundError if it is gone
                raise FencedError(run_id, epoch)  # a newer owner claimed the run
            # An operator's action hands the whole run back; a worker's write needs a
            # few columns, not the inputs and the output.
            rows = Run.objects if action is not None else Run.objects.only(*COMMIT_READ)
            committed = rows.get(pk=run_id)
            write_effects(run_id, committed.branch, commit.effects,
                          action.supersede if action is not None else None)
            events, number = list(commit.events), None
            if commit.checkpoint is not None:
                number = commit.checkpoint.number or committed.checkpoint_count
                checkpoint_row(run_id, commit.checkpoint, number).save(force_insert=True)
                faults.hit("after_checkpoint_before_event", committed.agent)
                events.append(ev.checkpoint(commit.checkpoint, number))
            write_events(run_id, committed.event_seq - new_events, events, now_dt)
            if action is not None and action.audit is not None:
                a = action.audit
                AuditEntry.objects.create(run_id=run_id, actor=a.actor, action=a.action,
                                          reason=a.reason, before=a.before, after=a.after)
            family_rule(run_id, committed.parent_id, fields.get("status"),
                        commit.run.get("attention"), now_dt)
            input_rule(run_id, commit)
            self._notify_on_commit(run_id, committed.event_seq)
        return r.CommitResult(committed.epoch, committed.event_seq, committed.control, number,
                              run_record(committed) if action is not None else None)

    def renew(self, run_id: str, epoch: int, lease_expires_at: float) -> str | None:
        updated = Run.objects.filter(pk=run_id, epoch=epoch).update(
            lease_expires_at=to_dt(lease_expires_at))
        if updated != 1:
            self._get(run_id)
            raise FencedError(run_id, epoch)
        return Run.objects.filter(pk=run_id).values_list("control", flat=True).first()

    def renew_leases(self, leases, lease_expires_at: float) -> dict[str, str | None]:
        renewed = {}
        for start in range(0, len(leases), RENEW_CHUNK):
            renewed.update(_renew_chunk(leases[start:start + RENEW_CHUNK], lease_expires_at))
        return renewed

    def live_leases(self, owner_prefix: str, now: float) -> list[r.LeaseHeld]:
        rows = (Run.objects.filter(lease_owner__startswith=owner_prefix,
                                   lease_expires_at__gt=to_dt(now))
                .exclude(status__in=r.FINAL_STATUSES)
                .values_list("id", "epoch", "lease_owner"))
        return [r.LeaseHeld(run_id, epoch, owner) for run_id, epoch, owner in rows]

    def due_runs(self, now: float, limit: int = 100, *, exclude=(),
                 codes: Codes | None = None) -> list[str]:
        due = due_runs_queryset(now, codes)
        if exclude:
            due = due.exclude(pk__in=list(exclude))
        return list(due.order_by("updated_at").values_list("id", flat=True)[:limit])

    def history(self, run_id: str, query: r.HistoryQuery | None = None) -> r.History:
        row = self._get(run_id)
        if query is not None:
            return queried_history(row, query)
        checkpoints = Checkpoint.objects.filter(run_id=run_id).order_by("number")
        effects = Effect.objects.filter(run_id=run_id).order_by("started_at", "id")
        return r.History([checkpoint_record(c) for c in checkpoints],
                         [effect_record(e) for e in effects])

    def close_thread_resources(self) -> None:
        """The calling thread is done with the store: Django's connections are per thread,
        so this one's is closed. Not the engine's protocol: what the runtime's threads
        call as they end, and the engine's through WorkerConfig.thread_ended."""
        connection.close()

    # --- internals ----------------------------------------------------------------------
    def _get(self, run_id: str) -> Run:
        try:
            return Run.objects.get(pk=run_id)
        except Run.DoesNotExist:
            raise RunNotFoundError(run_id) from None

    def _notify_on_commit(self, run_id: str, seq: int) -> None:
        if self.notify is not None:
            transaction.on_commit(lambda: self.notify(run_id, seq))


def launched_once(run: r.RunRecord, create) -> r.RunRecord:
    """`create(run)`, unless the run is a child whose spawn key is taken: then the child
    that holds it (a replayed spawn finds the child it launched; docs/children.md)."""
    if run.spawn_key is None:
        return create(run)
    existing = Run.objects.filter(spawn_key=run.spawn_key).first()
    if existing is not None:
        return run_record(existing)
    try:
        return create(run)
    except IntegrityError:  # launched meanwhile under the same key
        return run_record(Run.objects.get(spawn_key=run.spawn_key))


def _renew_chunk(leases, lease_expires_at: float) -> dict[str, str | None]:
    held = {(lease.run_id, lease.epoch, lease.owner) for lease in leases}
    if not held:
        return {}
    condition = reduce(or_, (Q(pk=run_id, epoch=epoch, lease_owner=owner)
                             for run_id, epoch, owner in held))
    with transaction.atomic():
        Run.objects.filter(condition).update(lease_expires_at=to_dt(lease_expires_at))
        # Read in the same transaction: a matched row stays locked until commit, so
        # its epoch and owner here are the ones the update saw.
        rows = Run.objects.filter(pk__in=[run_id for run_id, _, _ in held]).values_list(
            "id", "epoch", "lease_owner", "control")
        return {run_id: control for run_id, epoch, owner, control in rows
                if (run_id, epoch, owner) in held}


def new_run_row(run: r.RunRecord) -> tuple[Run, tuple[str, dict]]:
    """The row of a launched run, and its first event."""
    now = datetime.now(dt_timezone.utc)
    row = Run(id=run.id, owner_id=int(run.owner) if str(run.owner).isdigit() else None,
              agent=run.agent, agent_version=run.agent_version, inputs=run.inputs,
              status=run.status, created_at=now, updated_at=now, event_seq=1,
              usage=run.usage or {}, budget=run.budget, parent_id=run.parent_id,
              spawn_key=run.spawn_key, code_fingerprint=run.code_fingerprint)
    return row, ev.status(run.status, event="launched")


def queried_history(row: Run, query: r.HistoryQuery) -> r.History:
    """The parts of the run's history `query` names (see HistoryQuery)."""
    forks = list(Checkpoint.objects.filter(run_id=row.pk, parent_number__isnull=False)
                 if query.forks else [])
    wanted = {c.parent_number for c in forks} | {query.checkpoint} - {None}
    found = {c.number: checkpoint_record(c) for c in forks}
    for c in Checkpoint.objects.filter(run_id=row.pk, number__in=wanted - set(found)):
        found[c.number] = checkpoint_record(c)
    targets = [found[query.checkpoint]] if query.checkpoint in found else []
    if query.replay is not None:
        targets += replayed_from(replay_checkpoints(row.pk, query.replay))
        found.update((c.number, c) for c in targets)
    for target in targets:
        if target.codec == serde.PATCH_CODEC:
            found.update((base.number, base) for base in patch_bases(row.pk, target))
    where = Q(pk__in=[])
    if query.replay is not None:
        where |= Q(branch=query.replay)
    if query.superseded_by is not None:
        where |= superseded_where(row.branch, query.superseded_by)
    if query.step is not None:
        where |= Q(branch=query.step[0], step_no=query.step[1])
    effects = Effect.objects.filter(where, run_id=row.pk, superseded=False)
    return r.History(sorted(found.values(), key=lambda c: c.number),
                     [effect_record(e) for e in effects.order_by("branch", "step_no", "seq")])


def replay_checkpoints(run_id: str, branch: int) -> list[r.CheckpointRecord]:
    """The branch's checkpoints a replay may start from or take as recorded: the first,
    and those no step made (runs/durable/verify.py: replayed_from picks them). Their
    blobs are read only for those: a long run has thousands of step checkpoints."""
    rows = Checkpoint.objects.filter(run_id=run_id, branch=branch)
    first = rows.order_by("step_no", "number").first()
    chosen = rows.exclude(reason__in=STEP_REASONS)
    return [checkpoint_record(c) for c in ([first] if first else []) + list(chosen)]


def patch_bases(run_id: str, checkpoint: r.CheckpointRecord) -> list[r.CheckpointRecord]:
    """The checkpoints a patch checkpoint rests on, its full one first."""
    window = chain_rows(run_id, checkpoint.branch, checkpoint.number).filter(
        number__lt=checkpoint.number)
    chain = serde.chain_to(checkpoint, [checkpoint, *(checkpoint_record(c) for c in window)])
    return chain[:-1]


def live_effects(run_id: str, branch: int, after_step: int) -> list[r.EffectRecord]:
    """The live effects of `branch` after `after_step`, in log order, read in pages.

    The planner estimates `step_no > after_step` from the column's histogram over all
    runs, not this one: with a long history elsewhere in the table it expected tens of
    thousands of rows where there are a handful, and chose a parallel bitmap scan
    and sort whose workers took 10 ms to start (a resume at 50,000 steps took twice
    as long as one at 5,000 or 500,000). A LIMIT makes the cheap start of an index
    scan in the unique position index's order win, whatever the estimate.
    """
    live = Effect.objects.filter(run_id=run_id, branch=branch, step_no__gt=after_step,
                                 superseded=False).order_by("step_no", "seq")
    records, start = [], 0
    while True:
        page = [effect_record(e) for e in live[start:start + LOAD_PAGE]]
        records += page
        if len(page) < LOAD_PAGE:
            return records
        start += LOAD_PAGE



def due_runs_queryset(now: float, codes: Codes | None = None):
    """The runs claimable at `now` (runs/durable/claimable.py), by a worker of `codes`."""
    code_where, code_params = admitted_sql(codes)
    return Run.objects.filter(RawSQL(claimable.SQL + code_where,
                                     [*claimable.sql_params(to_dt(now)), *code_params],
                                     output_field=BooleanField()))


# --- row <-> record, by name (runs/storage/columns.py) ---------------------------------------
def run_record(row: Run) -> r.RunRecord:
    return columns.run_record({name: getattr(row, name)
                               for name in (*columns.RUN_FIELDS, "owner_id")})


def run_row(record: r.RunRecord) -> Run:
    """The Run model of a record as the store wrote it, without reading it back: the
    columns the record does not carry are deferred (read if someone asks)."""
    values = columns.run_values(record)
    names = [f.attname for f in Run._meta.concrete_fields if f.attname in values]  # its order
    return Run.from_db(DEFAULT_DB_ALIAS, names, [values[name] for name in names])


def checkpoint_record(row: Checkpoint) -> r.CheckpointRecord:
    return columns.checkpoint_record({name: getattr(row, name)
                                      for name in columns.CHECKPOINT_FIELDS})


def checkpoint_row(run_id: str, c: r.CheckpointRecord, number: int) -> Checkpoint:
    return Checkpoint(run_id=run_id, **columns.checkpoint_values(c, number))


def effect_record(row: Effect) -> r.EffectRecord:
    return columns.effect_record({name: getattr(row, name) for name in columns.EFFECT_FIELDS})


def effect_row(run_id: str, e: r.EffectRecord) -> Effect:
    return Effect(run_id=run_id, **columns.effect_values(e))
